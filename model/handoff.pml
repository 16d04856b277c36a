/*
 * handoff.pml: the waiting strategy with the handoff on the node
 * (Options.Waiting WaitHandoff: handoff.lua, internal/waiting/handoff.go), as
 * hooks that redlock.pml places where the kernel has decided. Without
 * HANDOFF every hook is empty and the kernel is checked alone.
 *
 * A round refused on a node joins that node's line (two places) with its
 * token, replacing its client's entries. An unlock's release of a marked
 * key, on a node out of its guard, hands the key off to the first entry
 * whose client still listens: it sets the key to HAND|token, marked, for
 * T, and announces it to that client (a message that may come late). The
 * client counts a node once it heard of a handoff to its current round,
 * and holds the lock once a quorum of nodes did, until the round's start
 * + T - ALLOW (HANDNOW, a control: until the moment it heard the last).
 * An announcement for any other round is stray: the client releases that
 * hand value. A client's next round counts its previous round's token
 * and hand value as free (handoff.lua's --@@free).
 */

#ifdef FENCING
#define FENCED 1
#else
#define FENCED 0
#endif

#ifdef HANDOFF
#define HANDOFF_ON 1

byte line0[N], line1[N];  /* the line: tokens of waiting rounds, first first */
byte ann[C*N];            /* node i announced a handoff to this token of client c */
byte handed[C];           /* bit i: node i handed the key to the current round */
bit byHand[C];            /* the lock is held by hand value */

#define OWNER(tt) (((tt) - 1) / R)

/* forget takes client c's entries off node i's line. */
inline forget(c, i) {
  if
  :: line1[i] != 0 && OWNER(line1[i]) == c -> line1[i] = 0
  :: else -> skip
  fi;
  if
  :: line0[i] != 0 && OWNER(line0[i]) == c -> line0[i] = line1[i]; line1[i] = 0
  :: else -> skip
  fi
}

#define FREE_BEFORE(c, r, i) ((r) > 0 && (key[i] == TOK(c, (r) - 1) || key[i] == (HAND | TOK(c, (r) - 1))))
#define GRANT_HOOK(c, r, i) forget(c, i)
#define REFUSED_HOOK(c, r, i) \
  mark[i] = 1; forget(c, i); \
  if \
  :: line0[i] == 0 -> line0[i] = TOK(c, r) \
  :: line0[i] != 0 && line1[i] == 0 -> line1[i] = TOK(c, r) \
  :: else -> skip \
  fi
#define LINE_CLEAR(i) line0[i] = 0; line1[i] = 0
/* JOIN_ADD: the pipelined join's ZADD NX of round r's entry, which leaves
 * the client's other entries in line. */
#define JOIN_ADD(c, r, i) \
  if \
  :: line0[i] == TOK(c, r) || line1[i] == TOK(c, r) -> skip \
  :: line0[i] == 0 -> line0[i] = TOK(c, r) \
  :: line0[i] != 0 && line0[i] != TOK(c, r) && line1[i] == 0 -> line1[i] = TOK(c, r) \
  :: else -> skip \
  fi
#define LEAVE(c) skip
#define SEND_HOOK(c) handed[c] = 0; byHand[c] = 0

/* handoff: handoff.lua's --@@next!, for the release of a marked key on
 * node i. An unlock's (announce) on a node out of its guard: the first
 * entry whose client listens gets the key. A failed round's clean-up
 * (ARGV[5] 'n'), and an unlock on a guarded node: the first entry is
 * named and leaves the line; nothing is handed off (the naming only wakes
 * its client, which the model does not need: it tries when it likes). */
inline handoff(i, announce) {
  if
  :: mark[i] && line0[i] != 0 && (!announce || (G != 0 && g[i] != 0)) ->
     line0[i] = line1[i]; line1[i] = 0
  :: announce && mark[i] && (G == 0 || g[i] == 0) ->
     do
     :: line0[i] == 0 -> break
     :: line0[i] != 0 && phase[OWNER(line0[i])] == DONE ->
        line0[i] = line1[i]; line1[i] = 0   /* nobody heard: the next */
     :: line0[i] != 0 && phase[OWNER(line0[i])] != DONE ->
        key[i] = HAND | line0[i]; mark[i] = 1; kl[i] = T;
        ann[OWNER(line0[i])*N+i] = line0[i];
        line0[i] = line1[i]; line1[i] = 0;
        kp = 1;
        break
     od
  :: else -> skip
  fi
}
#define HANDOFF_HOOK(i, announce) handoff(i, announce)

/* A failed round waits for handoffs (or gives up at once: its backoff). */
#define JOINED(c) phase[c] = WAIT
/* An unlock announces; one of a lock obtained by a round also releases
 * what a late handoff gave that round: handoff.lua's --@@release! takes
 * a key that holds the token or its hand value, in the one call per node
 * (HAND_TOO: after the token's release, which leaves neither, the hand
 * value's, which acts only where the key held it). */
#define UNLOCK_BIT(c) \
  (byHand[c] -> (1 << (R + rnd[c] - 1)) : (1 << (2*R + rnd[c] - 1)))
#define HAND_TOO(c, b, i) ; \
  if \
  :: (b) >= 2*R -> release(c, (b) % R, 1, 1, i) \
  :: else -> skip \
  fi

#ifdef HANDNOW
#define HAND_LEFT (T - ALLOW)
#else
#define HAND_LEFT rl[c]
#endif

/* heard: client c hears node i's announcement. */
#define HEARD(c, i) \
  :: atomic { ann[c*N+i] != 0 -> \
       if \
       :: ann[c*N+i] == tok[c] && (phase[c] == ACQ || phase[c] == WAIT) -> handed[c] = handed[c] | (1 << i) \
       :: else -> bb = 1 << (R + (ann[c*N+i] - 1) % R); post(c, i) \
       fi; \
       ann[c*N+i] = 0; CLEAN }

#define COUNT_HANDED(c) \
  nn = 0; jj = 0; \
  do \
  :: jj < N -> \
     if \
     :: handed[c] & (1 << jj) -> nn++ \
     :: else -> skip \
     fi; \
     jj++ \
  :: else -> break \
  od

#if N > 3
#define HEARD_ALL(c) HEARD(c, 0) HEARD(c, 1) HEARD(c, 2) HEARD(c, 3) HEARD(c, 4)
#else
#define HEARD_ALL(c) HEARD(c, 0) HEARD(c, 1) HEARD(c, 2)
#endif

/* GIVE_UP: a waiter may stop waiting for handoffs (LATE3: it never does). */
#ifdef LATE3
#define GIVE_UP 0
#else
#define GIVE_UP 1
#endif

#define HAND_URGENT(c) (phase[c] == WAIT && \
  ((handed[c] & 1) + ((handed[c] >> 1) & 1) + ((handed[c] >> 2) & 1) + ((handed[c] >> 3) & 1) + ((handed[c] >> 4) & 1)) >= Q)

#define HANDOFF_STEPS(c) \
  HEARD_ALL(c) \
  :: atomic { phase[c] == WAIT && (GIVE_UP || HAND_URGENT(c)) -> \
       COUNT_HANDED(c); \
       if \
       :: nn >= Q && HAND_LEFT > 0 -> \
          tok[c] = tok[c] | HAND; byHand[c] = 1; handed[c] = 0; obtained(c, HAND_LEFT) \
       :: else -> phase[c] = IDLE; handed[c] = 0; rl[c] = 0 /* a round instead */ \
       fi; CLEAN }

#else /* no waiting strategy on the node */
#define HANDOFF_ON 0

#define FREE_BEFORE(c, r, i) 0
#define GRANT_HOOK(c, r, i) skip
#define REFUSED_HOOK(c, r, i) skip
#define LINE_CLEAR(i) skip
#define JOIN_ADD(c, r, i) skip
#define LEAVE(c) skip
#define SEND_HOOK(c) skip
#define HANDOFF_HOOK(i, announce) skip
#define JOINED(c) rl[c] = 0
#define UNLOCK_BIT(c) (1 << (2*R + rnd[c] - 1))
#define HAND_TOO(c, b, i)
#define HANDOFF_STEPS(c)
#define HAND_URGENT(c) 0

#endif
