/*
 * live.pml: eventual acquisition, for redlock.pml with LIVE (no crash,
 * failover or loss; docs/SAFETY.md, "No false lockout"). Without LIVE
 * every hook is empty.
 *
 * The property. Some client holds the lock infinitely often, unless
 * every client has stopped trying; a client that tries alone therefore
 * holds infinitely often. Checked with weak fairness (pan -a -f), on the
 * runs in which time passes without end. It is the strongest that holds:
 * that each client holds in the end is false, since the schedule may let
 * the same client win every node race while the other keeps trying; real
 * clients' random backoff breaks such a tie, a model without
 * probabilities cannot.
 *
 * Two assumptions, each needed for any lock to be taken at all:
 * - Time passes (the formula's premise: tk flips at every tick). Weak
 *   fairness cannot give it: the clock waits for every decision and
 *   delivery, so it is never enabled for good while rounds go on, and
 *   two clients could fail rounds forever within one tick. A client's
 *   retry delay is never zero, so real time does pass.
 * - A request is delivered within the tick it was sent (IN_TIME: the
 *   clock waits for it), and so a round is decided before its validity
 *   (T - ALLOW = 1 tick with T = 2) is spent. A network slower than the
 *   validity fails every round, by design.
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
 * the keys it got stay until they expire. Two clients that split the
 * nodes then keep each other out: as one leftover expires, the next
 * round takes that node, fails and leaves it behind.
 */

#ifdef LIVE
#if C != 2
#error "LIVE: the formula names two clients"
#endif
bit tk;                   /* flips at every tick */
#define TICKED tk = 1 - tk
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
#define TICKED skip
#define IN_TIME 1
#define AGAIN(c)
#endif

#ifdef NOCLEANUP
#define NO_CLEANUP(b) b = 0
#else
#define NO_CLEANUP(b) skip
#endif
