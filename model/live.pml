/*
 * live.pml: eventual acquisition, for redlock.pml with LIVE (no crash,
 * failover or loss; docs/SAFETY.md, "No false lockout"). Without LIVE
 * every hook is empty.
 *
 * The property: some client holds the lock again and again, unless every
 * client has stopped trying. So a client that tries alone holds again
 * and again, and of two that contend, one does. Checked with weak
 * fairness (pan -a -f), on the runs in which time passes without end.
 * It is the strongest that holds. That each client that tries holds in
 * the end is false: the schedule may let the other client win every
 * race for a node. Real clients' random retry delays break such ties
 * with probability 1; a model without probabilities cannot. For the
 * same reason the formula names two clients: three can split the three
 * nodes one each, round after round.
 *
 * The premise, and why each half of it is needed:
 * - Time passes (tk flips at every tick). Weak fairness cannot give it:
 *   the clock waits for every decision, so it is never enabled for good
 *   while rounds go on. Without it the search finds two clients whose
 *   rounds overlap forever within one tick, each refused on one node by
 *   the other's round in flight.
 * - A request is delivered within the tick it was sent (IN_TIME: the
 *   clock waits for it), so a round is decided before its validity
 *   (T - ALLOW = 1 tick with T = 2) is spent. Without it every round may
 *   outlast its validity and fail: a network slower than the validity
 *   defeats any lock.
 * Together they say that every tick finds no round in progress:
 * contention pauses now and then, which is what random retry delays
 * give. After a pause and a TTL every node is free (a failed round
 * releases its nodes, an unlock its lock, a late acquire's key expires,
 * a tombstone refuses only its own token), and the first round decided
 * after that either wins or was refused on a majority by the other
 * client's round, which then wins.
 *
 * Clients try forever. R rounds bound a client's attempts, so with LIVE a
 * client that has used its last round may begin again at round 0 (AGAIN)
 * or stop (DONE), as it likes. Its tokens are then used again, so AGAIN
 * first makes them fresh, as a new random token is: a key that still
 * holds one (a late acquire that landed after its release) becomes a key
 * of a token nobody sends any more (STRANGER), and their tombstones go
 * (a tombstone refuses only its own token). AGAIN waits until none of
 * the client's acquires is in flight: a late acquire then lands before
 * the next round instead of during it, within the same tick (IN_TIME),
 * which moves the start of the key it may leave by less than a tick.
 *
 * NOCLEANUP, the control: a failed round does not release its nodes, so
 * the keys it got stay until they expire. A client's rounds then fail on
 * keys its own earlier rounds left, which expire one at a time as the
 * next round leaves another.
 */

#ifdef LIVE
#if C != 2
#error "LIVE: the formula names two clients"
#endif
bit tk;                   /* flips at every tick */
#define TICKED printf("MSC: tick\n"); tk = 1 - tk
#define STRANGER 31       /* a token no request carries */
#define QUIET(k) (C*N <= (k) || (acq[k] == 0 && xreq[k] == 0))
#define IN_TIME (QUIET(0) && QUIET(1) && QUIET(2) && QUIET(3) && QUIET(4) && \
  QUIET(5) && QUIET(6) && QUIET(7) && QUIET(8) && QUIET(9))
#define LANDED(c) (acq[c*N] == 0 && acq[c*N+1] == 0 && acq[c*N+2] == 0 && \
  (N <= 3 || acq[c*N+3] == 0) && (N <= 4 || acq[c*N+4] == 0))

/* renew makes client c's tokens fresh and starts its attempts again. */
inline renew(c) {
  jj = 0;
  do
  :: jj < N ->
     kk = 0;
     do
     :: kk < R ->
        if
        :: key[jj] == TOK(c, kk) -> key[jj] = STRANGER
        :: else -> skip
        fi;
        tomb[jj] = tomb[jj] & ~(1 << TOK(c, kk));
        kk++
     :: else -> break
     od;
     jj++
  :: else -> break
  od;
  rnd[c] = 0; mh[c] = 0; estRound[c] = NONE;
  printf("MSC: client %d: tries again\n", c)
}

#define AGAIN(c) \
  :: atomic { phase[c] == IDLE && rnd[c] >= ATT && LANDED(c) -> renew(c); CLEAN }

#define TRIES(c) (phase[c] != DONE)
ltl live { ([]<> tk && []<> !tk) ->
  []<> (phase[0] == HELD || phase[1] == HELD || !(TRIES(0) || TRIES(1))) }
#else
#define TICKED printf("MSC: tick\n")
#define IN_TIME 1
#define AGAIN(c)
#endif

/* FAILED_BIT: the release a failed round sends (bit r as in rel). */
#ifdef NOCLEANUP
#define FAILED_BIT(c) 0
#else
#define FAILED_BIT(c) (1 << (rnd[c] - 1))
#endif
