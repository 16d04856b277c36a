/*
 * layer.pml: the limit layer of semaphores and read-write locks
 * (internal/protocol/layer.lua) over the lock kernel, and the clients'
 * rounds over the slots (redlock/slots.go, semaphore.go, rwmutex.go), as
 * a Promela model for spin. docs/SAFETY.md states the guarantees this
 * checks and maps every step below to the script or function it models;
 * model/check.sh runs it. It is a model of its own, smaller than
 * redlock.pml: the kernel is cut down to what decides a grant, and each
 * cut below is argued to allow every behaviour of the scripts that
 * matters to the property, so that a property that holds here holds for
 * them.
 *
 * Nodes. Each node holds K lock keys and the name's limit record, and
 * runs each script as one step (d_step): the layer's section of
 * layer.lua for the round's role, then, unless the layer refused, the
 * kernel's acquire on the round's key (SET NX for T ticks behind the
 * restart guard). A semaphore of limit k has k slot keys; a read-write
 * lock (RW) has RS reader slots and its writer key. The acquire of round
 * r of client c names its key (sl): the slot it tries, or the writer key.
 *
 * Clients. Each client makes up to R rounds, each under a fresh token on
 * one key: a semaphore's caller and a reader try a slot (the real pass
 * goes from a random slot to the next after a refusal: any slot here), a
 * writer its writer key. Requests are delivered in any order, and late
 * within the round; the client decides at a quorum of grants, or once no
 * reply can still come, and releases the nodes of a failed round; a
 * holder unlocks at any moment, and with EXTEND extends once.
 *
 * Time, as in redlock.pml (its header argues it): a tick is a unit of
 * real time and every time is kept as the ticks left to it. A key set for
 * T ticks, and the restart guard of G = T ticks, may end up to D ticks
 * early (the bounded drift); a round's validity is T - elapsed - ALLOW,
 * ALLOW = D, from the moment the round is sent; a key never outlives its
 * nominal end (the tick waits for it); a round that can be decided is
 * decided within the tick (URGENT). A reply that comes late is a request
 * delivered late: the grant is counted when the client reads it.
 *
 * Cuts:
 * - The limit record has no TTL of its own. layer.lua raises it, in the
 *   script that grants or extends a slot, to at least that slot's TTL on
 *   the node's one clock, and a writer deletes it only when no slot is
 *   held: so it never expires while a slot key is held. Here it goes
 *   when the last slot key of its node goes (REC_SYNC). A record that
 *   outlives its slots changes no grant of a read-write lock (a writer
 *   that finds no slot held is not refused by it), and for a semaphore it
 *   only refuses other limits: going early only adds grants.
 * - No tombstones, no waited-for marks. A tombstone only refuses the
 *   late SET of its own token, whose round is decided, so dropping it
 *   only lets keys be set that no client counts on; a mark only decides
 *   who is woken.
 * - Releases are delivered when sent, as in redlock.pml (argued there: a
 *   release that comes later keeps a key that no client counts on, which
 *   only refuses). A release deletes its key if the key holds its token;
 *   a client releases every node, which on a node that refused changes
 *   nothing.
 * - The acquires of a decided round that have not landed never do (LATE
 *   keeps them in flight). A late acquire sets the key of a token that no
 *   client counts on beyond its quorum, which only refuses, as a release
 *   that comes late does; layer-late cross-checks it. A round decided by
 *   a timeout is then one that waited past its validity and failed: no
 *   TIMEOUTS is needed.
 * - The restart guard as redlock.pml models it for a deployment in
 *   service: a crash loses every key and the record, and drops the
 *   requests in flight on the node's connections; the first acquire that
 *   finds the state missing makes it (newstate.lua), guarded for G
 *   ticks, and the guard refuses in the kernel, after the layer ran. The
 *   connection check (check.lua) starts no guard after a crash (it finds
 *   no recorded replication ID) and is left out; so is failover, which
 *   failover detection turns into the same guarded node. Only node 0
 *   crashes (the nodes are symmetric, as redlock.pml argues).
 * - The writer's intent is left out. layer.lua writes it only into the
 *   limit record, with a TTL that only grows (SET KEEPTTL, PEXPIRE GT),
 *   and only a reader's layer reads it, to refuse. A writer's round
 *   deletes the record in the same case with or without an intent (the
 *   record there, no reader slot held, the writer key free or its own).
 *   So the intent adds refusals of readers and keeps the record longer:
 *   it allows no grant that the model does not.
 * - The record of a read-write lock holds its fixed limit (Readers): no
 *   client gives another, so it is a presence mark here.
 * - split: the clients of one role are alike but for their tokens' names,
 *   and the slots but for their numbers, so the first rounds' slots are,
 *   up to renaming, all on slot 0 or the last client's on slot 1. SPLIT=1
 *   keeps the second alone, where clients hold slots side by side: with
 *   every client on one slot, a semaphore is the lock of redlock.pml,
 *   whose bound of one holder is its mutual exclusion. The runs by name
 *   layer-sem-all and layer-rw3-all search both, with a crash.
 *
 * Bounds: N = 3 nodes, C clients (2 or 3), R rounds each, one crash. The
 * search is exhaustive within them; check.sh fails a truncated search.
 *
 * Controls, each must break the property: NAIVE (a semaphore that counts
 * holders on each node: a node grants while fewer than k keys hold a
 * token, whichever slot), NOREC (no limit record: clients with different
 * limits mix), NOWCHECK (a reader's layer skips the writer key), NORCHECK
 * (a writer with no layer, the kernel alone: it skips the reader slots),
 * EARLYREC (the record may expire while slots are held: the writer's
 * skip of the slots without it is then unsound). ONETICK, for a control's
 * search only: the clock does not run, a subset of the runs.
 */

#ifndef N
#define N 3
#endif
#ifndef C
#define C 3
#endif
#ifndef R
#define R 1               /* rounds per client */
#endif
#ifndef T
#define T 2               /* lock TTL in ticks */
#endif
#define D 1               /* drift: how early a key or guard may end */
#define ALLOW D
#define G T               /* RestartGuard */
#define Q (N/2+1)
#define FAULTS 1
#define NONE 255

#ifdef RW
#ifndef RS
#define RS 2              /* reader slots */
#endif
#define K (RS+1)          /* a node's keys: the reader slots, the writer key */
#define WKEY RS
#define SLOTS RS          /* the keys the limit record covers */
#ifndef WRITERS
#define WRITERS 1         /* clients 0 .. WRITERS-1 are writers */
#endif
#define WRITER(c) ((c) < WRITERS)
#else
#ifndef LIMIT
#define LIMIT 2
#endif
#define K LIMIT           /* a node's keys: the slots */
#define SLOTS K
#define WRITER(c) 0
#define WRITERS 0
#endif
#define TOK(c,r) ((c)*R+(r)+1)


/* Replies to an acquire. */
#define GRANTED 1
#define TAKEN   2         /* the kernel: the key holds another token */
#define GUARDED 3
#define REFUSED 4         /* the layer: another limit (-4), a writer (-5), a reader slot */
/* Client phases. */
#define IDLE 0
#define ACQ  1
#define HELD 2
#define EXT  3

/* Node i: its keys key[i*K+s] (0: free, else a token) and the ticks left
 * to each (kl); its limit record (0: none, else the limit); g, the ticks
 * left in its restart guard (0: established, NONE: the state is
 * missing). */
byte key[N*K], kl[N*K];
byte rec[N];
byte g[N];
byte faults;

/* Client c: its limit, its round's token, rl (the validity its round
 * would have if decided now, 0 when spent), ul (the ticks left of its
 * validity), xl (rl for its extend). */
byte lim[C], rnd[C], tok[C], rl[C], ul[C], xl[C], phase[C];
bit extended[C];
/* In flight between client c and node i (index c*N+i): acquires by round
 * (bit r), an extend, and the replies. sl[c*R+r]: the key that round r's
 * acquire names. */
byte acq[C*N], xreq[C*N], rep[C*N], xrep[C*N];
byte sl[C*R];
/* split: the first rounds' slots (see the header): all on slot 0 (0), or
 * the last client's on slot 1 and the others' on slot 0 (1). */
bit split;

/* Scratch for the atomic steps, cleared at each step's end. */
byte jj, nn, kk, tt, kd, ss, most, inside, lowest, writers;
#define CLEAN jj = 0; nn = 0; kk = 0; tt = 0; kd = 0; ss = 0; most = 0; inside = 0; lowest = 0; writers = 0

/* FORGET(c): once client c is idle with no acquire in flight, the keys
 * its rounds named are read no more. */
#if R > 1
#define FORGET(c) if :: phase[c] == IDLE && (acq[c*N] | acq[c*N+1] | acq[c*N+2]) == 0 -> sl[c*R] = 0; sl[c*R+1] = 0 :: else -> skip fi
#else
#define FORGET(c) if :: phase[c] == IDLE && (acq[c*N] | acq[c*N+1] | acq[c*N+2]) == 0 -> sl[c*R] = 0 :: else -> skip fi
#endif

/* HELD_AT(i, s): key s of node i holds a token. */
#define HELD_AT(i, s) (key[(i)*K+(s)] != 0)
/* NO_SLOT(i): no slot key of node i holds a token (up to 3 slots). */
#define NO_SLOT(i) (!HELD_AT(i, 0) && (SLOTS < 2 || !HELD_AT(i, 1)) && (SLOTS < 3 || !HELD_AT(i, 2)))

/* REC_SYNC(i): the record of node i goes once no slot key there is held
 * (see the header); EARLYREC, a control, lets it go at any moment. */
#ifdef EARLYREC
#define REC_SYNC(i) skip
#else
#define REC_SYNC(i) if :: rec[i] != 0 && NO_SLOT(i) -> rec[i] = 0 :: else -> skip fi
#endif

/* ---- The property, asserted whenever a validity begins or moves. ---- */

/* bounded(c): client c's validity begins. Semaphore: the clients inside
 * their validity are at most the lowest limit among them. Read-write
 * lock: a writer inside its validity is the only client inside it. */
inline bounded(c) {
  inside = 0; lowest = 255; writers = 0; jj = 0;
  do
  :: jj < C ->
     if
     :: (phase[jj] == HELD || phase[jj] == EXT) && ul[jj] > 0 ->
        inside++;
        if
        :: lim[jj] < lowest -> lowest = lim[jj]
        :: else -> skip
        fi;
        if
        :: WRITER(jj) -> writers++
        :: else -> skip
        fi
     :: else -> skip
     fi;
     jj++
  :: else -> break
  od;
  printf("MSC: client %d: inside with %d (writers %d)\n", c, inside, writers);
#ifdef RW
  assert(writers == 0 || inside == 1);  /* a writer inside is alone */
#else
  assert(inside <= lowest);             /* at most the limit inside */
#endif
}

/* ---- Node steps: layer.lua, then the kernel, each script atomic. ---- */

/* layer: the layer's section for client c's acquire on node i, of the
 * key ss; sets kd = REFUSED when it refuses before the kernel. */
inline layer(c, i) {
#ifdef RW
  if
  :: !WRITER(c) ->
     /* --@@reader: refused while a token holds the writer key */
#ifndef NOWCHECK
     if
     :: HELD_AT(i, WKEY) -> kd = REFUSED
     :: else -> skip
     fi;
#endif
     if
     :: kd == 0 && rec[i] == 0 -> rec[i] = RS   /* SET NX: the record */
     :: else -> skip                            /* PEXPIRE GT */
     fi
  :: WRITER(c) ->
#ifndef NORCHECK
     /* --@@writer: with the record there, refused while a token holds a
      * reader slot (most); without it no slot is held. */
     most = 0;
     if
     :: rec[i] != 0 ->
        jj = 0;
        do
        :: jj < RS -> if :: HELD_AT(i, jj) -> most = 1 :: else -> skip fi; jj++
        :: else -> break
        od;
        /* busy: a slot, or the writer key, held by another token; a
         * record with neither goes (DEL). */
        if
        :: !most && !(HELD_AT(i, WKEY) && key[i*K+WKEY] != tt) -> rec[i] = 0
        :: else -> skip
        fi
     :: else -> skip
     fi;
     if
     :: most -> kd = REFUSED
     :: else -> skip
     fi
#else
     skip                                       /* control: the kernel alone */
#endif
  fi
#else
#if defined(MISMATCH) && !defined(NOREC)
  /* --@@semaphore: SET rec limit NX GET; another limit is refused. */
  if
  :: rec[i] == 0 -> rec[i] = lim[c]
  :: rec[i] == lim[c] -> skip                   /* PEXPIRE GT */
  :: rec[i] != 0 && rec[i] != lim[c] -> kd = REFUSED
  fi
#else
  skip                                          /* no record (see REC) */
#endif
#endif
}

/* kernel: acquire.lua's grant on key ss of node i for token tt: the key
 * free or already tt's, and the node out of its restart guard. */
inline kernel(i) {
  if
  :: key[i*K+ss] == 0 || key[i*K+ss] == tt ->
     if
     :: g[i] == 0 -> skip
     :: g[i] == NONE -> g[i] = G; kd = GUARDED  /* newstate.lua */
     :: g[i] != 0 && g[i] != NONE && g[i] <= D -> g[i] = 0  /* ended, perhaps early */
     :: g[i] != 0 && g[i] != NONE && g[i] > D -> kd = GUARDED
     fi;
     if
     :: kd == 0 -> key[i*K+ss] = tt; kl[i*K+ss] = T; kd = GRANTED
     :: else -> skip
     fi
  :: else -> kd = TAKEN
  fi
}

/* acquire: the layered acquire of round r of client c on node i. */
inline acquire(c, r, i) {
  tt = TOK(c, r); ss = sl[c*R+r]; kd = 0;
#ifdef NAIVE
  /* control: the node counts its holders and grants while fewer than k
   * keys hold a token, on a key of its own choosing */
  ss = 0;
  do
  :: ss < K && key[i*K+ss] != 0 && key[i*K+ss] != tt -> ss++
  :: else -> break
  od;
  if
  :: ss == K -> kd = TAKEN
  :: else -> kernel(i)
  fi;
#else
  layer(c, i);
  if
  :: kd == 0 -> kernel(i)
  :: else -> skip
  fi;
#endif
  printf("MSC: node %d: acquire %d of client %d on key %d -> %d\n", i, tt, c, ss, kd);
  if
  :: tok[c] == tt && phase[c] == ACQ && kd == GRANTED -> rep[c*N+i] = GRANTED
  :: tok[c] == tt && phase[c] == ACQ && kd != GRANTED -> rep[c*N+i] = TAKEN  /* a no, whichever */
  :: !(tok[c] == tt && phase[c] == ACQ) -> FORGET(c)  /* a reply nobody waits for */
  fi
}

/* release: release.lua for the token of round r of client c on node i:
 * its key goes if it holds that token. */
inline release(c, r, i) {
  tt = TOK(c, r);
  ss = 0;
  do
  :: ss < K ->
     if
     :: key[i*K+ss] == tt -> key[i*K+ss] = 0; kl[i*K+ss] = 0
     :: else -> skip
     fi;
     ss++
  :: else -> break
  od;
  REC_SYNC(i);
  printf("MSC: node %d: release %d of client %d\n", i, tt, c)
}

/* xrun: the layered extend (layer.lua --@@extend around extend.lua) of
 * client c's lock on node i: the key set for T again if it holds the
 * token; then the record, raised or made (here: kept while the key is
 * held), unless it holds another limit (SET NX leaves it). */
inline xrun(c, i) {
  ss = sl[c*R+rnd[c]-1];
  if
  :: key[i*K+ss] == tok[c] ->
     kl[i*K+ss] = T; kd = 1;
#ifndef RW
#if defined(MISMATCH) && !defined(NOREC)
     if
     :: rec[i] == 0 -> rec[i] = lim[c]
     :: else -> skip
     fi;
#endif
#else
     if
     :: !WRITER(c) && rec[i] == 0 -> rec[i] = RS
     :: else -> skip
     fi;
#endif
     skip
  :: else -> kd = 2
  fi;
  if
  :: phase[c] == EXT -> xrep[c*N+i] = kd
  :: else -> skip
  fi;
  xreq[c*N+i] = 0
}

#define ACQ_ARRIVES(c, r) \
  :: d_step { acq[c*N+i] & (1 << r) -> acq[c*N+i] = acq[c*N+i] & ~(1 << r); acquire(c, r, i); REC_SYNC(i); CLEAN }
#if R > 1
#define ACQS(c) ACQ_ARRIVES(c, 0) ACQ_ARRIVES(c, 1)
#else
#define ACQS(c) ACQ_ARRIVES(c, 0)
#endif
#define X_ARRIVES(c) :: d_step { xreq[c*N+i] != 0 -> xrun(c, i); CLEAN }
#define FROM(c) ACQS(c) X_ARRIVES(c)


/* KEY_ENDS(s): key s of node i expires, perhaps D ticks early. */
#define KEY_ENDS(s) \
  :: d_step { s < K && key[i*K+s] != 0 && kl[i*K+s] <= D -> \
       printf("MSC: node %d: key %d (%d) expires\n", i, s, key[i*K+s]); key[i*K+s] = 0; kl[i*K+s] = 0; REC_SYNC(i); CLEAN }

proctype Node(byte i) {
end:
  do
  FROM(0)
  FROM(1)
#if C > 2
  FROM(2)
#endif
  KEY_ENDS(0) KEY_ENDS(1) KEY_ENDS(2)
#ifdef EARLYREC
  :: d_step { rec[i] != 0 -> printf("MSC: node %d: record expires\n", i); rec[i] = 0; CLEAN }
#endif
#ifdef CRASH
  :: d_step { faults < FAULTS && i == 0 ->
       printf("MSC: node %d: crash\n", i);
       faults++;
       jj = 0;
       do
       :: jj < K -> key[i*K+jj] = 0; kl[i*K+jj] = 0; jj++
       :: else -> break
       od;
       rec[i] = 0; g[i] = NONE;
       jj = 0;
       do
       :: jj < C -> acq[jj*N+i] = 0; xreq[jj*N+i] = 0; jj++
       :: else -> break
       od; CLEAN }
#endif
  od
}

/* ---- Client steps: redlock/slots.go over round.go and lock.go. ---- */

/* send starts round rnd[c] of client c on key ss. */
inline send(c) {
  tok[c] = TOK(c, rnd[c]); rl[c] = T - ALLOW; phase[c] = ACQ;
  sl[c*R+rnd[c]] = ss;
  jj = 0;
  do
  :: jj < N -> rep[c*N+jj] = 0; acq[c*N+jj] = acq[c*N+jj] | (1 << rnd[c]); jj++
  :: else -> break
  od;
  rnd[c]++;
  printf("MSC: client %d: round %d sent on key %d\n", c, tok[c], ss)
}

/* DROP_LATE: the acquire of the decided round that has not reached node
 * jj never does (LATE keeps it in flight: see the header). */
#ifdef LATE
#define DROP_LATE(c, jj) skip
#else
#define DROP_LATE(c, jj) acq[c*N+jj] = acq[c*N+jj] & ~(1 << (rnd[c] - 1))
#endif
#define PENDING(c, jj) (rep[c*N+jj] == 0 && acq[c*N+jj] != 0)
#define XPENDING(c, jj) (xrep[c*N+jj] == 0 && xreq[c*N+jj] != 0)
#define DECIDABLE(c) ( \
  ((rep[c*N] == GRANTED) + (rep[c*N+1] == GRANTED) + (rep[c*N+2] == GRANTED) >= Q) || \
  !(PENDING(c, 0) || PENDING(c, 1) || PENDING(c, 2)))
#define XDECIDABLE(c) ( \
  ((xrep[c*N] == 1) + (xrep[c*N+1] == 1) + (xrep[c*N+2] == 1) >= Q) || \
  !(XPENDING(c, 0) || XPENDING(c, 1) || XPENDING(c, 2)))
#define DECIDED(c) DECIDABLE(c)
#define XDECIDED(c) XDECIDABLE(c)
#define URGENT(c) (c < C && ((phase[c] == ACQ && DECIDABLE(c)) || (phase[c] == EXT && XDECIDABLE(c))))

/* releaseAll releases client c's current token on every node. The
 * client releases only the nodes that may hold it (that granted it, or
 * did not answer); on a node that refused it, the acquire ran without
 * setting the token, so the release there finds no key of its own and
 * changes nothing (this model keeps no tombstones). */
inline releaseAll(c) {
  jj = 0;
  do
  :: jj < N -> release(c, rnd[c] - 1, jj); jj++
  :: else -> break
  od;
  FORGET(c)
}


proctype Client(byte c) {
end:
  do
  :: atomic { phase[c] == IDLE && rnd[c] < R ->
       /* the key: the writer key, or any slot below the client's limit */
       if
       :: WRITER(c) -> ss = K - 1
       :: !WRITER(c) && rnd[c] == 0 -> ss = (split && c == C - 1)  /* see split */
       :: !WRITER(c) && rnd[c] > 0 ->
          ss = 0;
          do
          :: ss + 1 < lim[c] -> ss++
          :: true -> break
          od
       fi;
       send(c); CLEAN }
  :: d_step { phase[c] == ACQ && DECIDED(c) ->
       /* quorum.Round.Await returns: at a quorum, once it cannot change */
       nn = 0; jj = 0;
       do
       :: jj < N ->
          if
          :: rep[c*N+jj] == GRANTED -> nn++
          :: else -> skip
          fi;
          rep[c*N+jj] = 0;
          DROP_LATE(c, jj);
          jj++
       :: else -> break
       od;
       if
       :: nn >= Q && rl[c] > 0 ->
          ul[c] = rl[c]; rl[c] = 0; phase[c] = HELD;
          printf("MSC: client %d: holds %d for %d\n", c, tok[c], ul[c]);
          bounded(c)
       :: else ->
          printf("MSC: client %d: round %d failed\n", c, tok[c]);
          rl[c] = 0; phase[c] = IDLE; releaseAll(c)
       fi; CLEAN }
#ifdef EXTEND
  :: d_step { phase[c] == HELD && !extended[c] && ul[c] > 0 ->
       extended[c] = 1; xl[c] = T - ALLOW; phase[c] = EXT;
       jj = 0;
       do
       :: jj < N -> xreq[c*N+jj] = 1; xrep[c*N+jj] = 0; jj++
       :: else -> break
       od; CLEAN }
  :: d_step { phase[c] == EXT && XDECIDED(c) ->
       nn = 0; jj = 0;
       do
       :: jj < N ->
          if
          :: xrep[c*N+jj] == 1 -> nn++
          :: else -> skip
          fi;
          xrep[c*N+jj] = 0; jj++
       :: else -> break
       od;
       phase[c] = HELD;
       if
       :: nn >= Q && xl[c] > 0 -> ul[c] = xl[c]; bounded(c)
       :: else -> skip                /* Until stays */
       fi;
       xl[c] = 0; CLEAN }
#endif
  :: d_step { phase[c] == HELD ->
       /* unlock: release.lua on every node that may hold the token */
       printf("MSC: client %d: unlocks %d\n", c, tok[c]);
       ul[c] = 0; extended[c] = 0; phase[c] = IDLE; releaseAll(c); CLEAN }
  od
}

#define DOWN(x) if :: x > 0 -> x-- :: else -> skip fi
#define ENDS_LATER(x) (x >= N*K || key[x] == 0 || kl[x] > 0)

/* Time: a tick, once every key that must end now has ended and every
 * round that can be decided is, counts down every time left. */
proctype Clock() {
end:
  do
  :: d_step {
       !URGENT(0) && !URGENT(1) && !URGENT(2) &&
       ENDS_LATER(0) && ENDS_LATER(1) && ENDS_LATER(2) && ENDS_LATER(3) && ENDS_LATER(4) &&
       ENDS_LATER(5) && ENDS_LATER(6) && ENDS_LATER(7) && ENDS_LATER(8) ->
       printf("MSC: tick\n");
       jj = 0;
       do
       :: jj < N*K -> DOWN(kl[jj]); jj++
       :: else -> break
       od;
       jj = 0;
       do
       :: jj < N ->
          if
          :: g[jj] != NONE && g[jj] > 0 -> g[jj]--
          :: else -> skip
          fi;
          jj++
       :: else -> break
       od;
       jj = 0;
       do
       :: jj < C -> DOWN(rl[jj]); DOWN(ul[jj]); DOWN(xl[jj]); jj++
       :: else -> break
       od; CLEAN }
  od
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < C ->
       lim[i] = K;
#if defined(MISMATCH) && !defined(RW)
       if
       :: i == 0 -> lim[i] = K - 1    /* client 0 gives a lower limit */
       :: else -> skip
       fi;
#endif
#ifdef RW
       lim[i] = RS;
#endif
       i++
    :: else -> break
    od;
#ifdef SPLIT
    split = SPLIT;
#else
    if
    :: split = 0
    :: split = 1
    fi;
#endif
    i = 0;
    do
    :: i < N -> run Node(i); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < C -> run Client(i); i++
    :: else -> break
    od;
#ifndef ONETICK
    run Clock();
#endif
    CLEAN
  }
}
