/*
 * redlock.pml: the lock kernel of redquorum (internal/protocol) and the
 * client's rounds (redlock/round.go), as a Promela model for spin.
 * docs/SAFETY.md states each guarantee this checks, and maps every step
 * below to the script or function it models. model/check.sh runs it.
 *
 * Nodes. Each node runs the kernel scripts as atomic steps on one lock
 * key and its state hash: acquire.lua (restart guard, new-deployment
 * establish, tombstones, fence counter), release.lua, extend.lua,
 * fence.lua, and check.lua on every new connection. With HANDOFF,
 * releases hand the key off on the node to the first waiter in line
 * (handoff.lua).
 *
 * The server behind a node. Its identity is (runid, rid, r2): the
 * process (run_id, drawn when the process starts), the replication ID
 * (master_replid) and whether replid2 is set; each is a small number
 * compared only with the same node's. The state records the process and
 * the ID (rp, rr). What a Redis server can do to them, each behind a
 * define:
 * - CRASH: a restart without persistence. The data is gone; a new
 *   process, a new ID, replid2 clear. TOTALLOSS: every node at once.
 * - FAILOVER: the node's data is replaced by an older copy, taken at any
 *   moment by a replication step: a replica promoted (shiftReplicationId
 *   moves the old ID into replid2), or a restart from a persisted file
 *   older than memory (loadDataFromDisk keeps the file's ID as replid2).
 *   Both give a new process, a new ID and replid2 set, so one step stands
 *   for both. REPROMOTE lets it keep the process: a master demoted by
 *   hand, its data replaced from another master, promoted again.
 * - IDCHANGE (at most IDCHANGES times): a new ID without a loss (a first
 *   replica attaches to a master without a backlog: syncCommand; the
 *   backlog is freed: replicationCron). replid2 is cleared; the process,
 *   the data and the connections stay. After REPROMOTE kept the process,
 *   not before RestartGuard has passed (idwait: an assumption on
 *   repl-backlog-ttl; IDNOW, a control, drops it).
 * - KILL (at most KILLS times): CLIENT KILL. The connections are dropped,
 *   nothing else.
 * Every step that changes the process (and REPROMOTE's) drops the
 * connections (a role change does: Sentinel kills the clients, and the
 * design assumes whoever demotes by hand does too), with the requests in
 * flight on them; a client's next request opens a connection and runs
 * check first. check guards iff the recorded process differs, or the
 * recorded ID differs and replid2 is set; its guard has the mark x, which
 * no shortcut matches (OLDCHECK, a control: the previous check, on the ID
 * alone, unmarked). CRASH and FAILOVER count towards FAULTS; they happen
 * on node 0 (FAULTY_FROM=k: once on each node from k; ALLFAULTY: on any),
 * IDCHANGE and KILL on node 0.
 *
 * Clients. Each client makes up to R rounds, each under a fresh token. A
 * round sends the acquire to every node at once; requests are delivered
 * in any order, late, or never (LOSS drops them outright); the client
 * decides at a quorum or once no reply can still come (URGENT: within the
 * tick), or, with TIMEOUTS, at any moment (a node timeout of any length).
 * A failed round releases every node that may hold its token. A holder
 * may extend once (EXTEND), may write to a resource that refuses lower
 * fences (FENCING), and unlocks; between any two of its steps any amount
 * of time may pass (a GC pause).
 *
 * Time. A tick is a unit of real time; every time is kept as the ticks
 * left to it, so that states that differ only by when they happen are one
 * state and time needs no bound. A client's clock is real time: each
 * guarantee compares one client's clock with one node's, so putting all
 * the drift on the node's side covers every pair of rates within the
 * bound. A key set for T ticks, and a restart guard of G = T ticks, may
 * end up to D ticks early: that is the bounded drift (DESIGN.md,
 * assumption 4). A round's validity is T - elapsed - ALLOW, ALLOW = D
 * standing for ttl*DriftFactor + 2ms; it starts when the round is sent. A
 * key or guard never outlives its nominal end (the tick waits for it): a
 * later end only delays other clients. Events within a tick are ordered by
 * interleaving. An acquire AGE ticks old is dropped with ORPHAN (a network
 * that delivers a SET after its tombstone expired leaves a key nobody
 * holds for one TTL: DESIGN.md).
 *
 * Fences after a total loss. The shortcut's establish seeds a node's
 * fence counter with the node's time in microseconds (SEEDZERO, the
 * control: with 0). That exceeds every fence issued before under an
 * assumption the model states as clk: one clock for every node (node
 * clocks agree and never go back), which advances by at least one per
 * fence issued (fewer fences than microseconds pass). A tick count times
 * a bound on the fences issued per tick would say the same, but has no
 * bound of its own; clk moves up to each fence a grant offers (CLK_FENCE)
 * and is what an establish seeds with, so it takes finitely many values.
 * NOEXCLUSIVE drops the mutual exclusion assertion, for the runs in
 * which every node may lose its data within a validity (TOTALLOSS): the
 * shortcut's assumption excludes that, and the fences are what is
 * checked (FENCE_PAIRS).
 *
 * New clients. In a deployment in service every client starts in
 * service (it saw a node answer), and takes no shortcut; NEWCLIENT makes
 * the last client a new one, which takes the shortcut if every node
 * answers guarded, unmarked or with the mark of the ids it saw.
 *
 * Bounds: one key (multi-key locks take all or none in one script, so a
 * node's answer for them is the one modelled here), N nodes, C clients, R
 * rounds each, FAULTS crashes or failovers in all. The search is
 * exhaustive within them; check.sh fails a truncated search. With LIVE,
 * live.pml lets a client that used its last round begin again, and
 * checks that the lock stays within reach (a liveness formula, argued
 * there).
 *
 * Three reductions keep the search within make model's budget.
 *
 * Releases are delivered when sent (EAGER_BIT), except an unlock's and a
 * stray hand value's with HANDOFF, and every one with DELAYED. A release
 * of token t only deletes a key that holds t, or leaves t's tombstone on
 * a key with no holder. Its sender no longer counts on t anywhere: the round
 * failed, or the holder unlocked. Delivering it later changes one thing
 * on that node: t's key stays until the release comes or the key
 * expires, so acquires of other tokens that come meanwhile are refused
 * instead of granted, as if the key had been granted to a client that is
 * not in its validity. No property is about a refusal: mutual exclusion
 * and the fence properties are about grants and the validity of their
 * holders, and a key that no holder counts on cannot put a holder in its
 * validity. The late acquire of t itself sets t again after an eager
 * release (a key nobody holds, until it expires) where a later release
 * would delete it: the eager order is the one ORPHAN asserts against, and
 * the other order is also reached by the acquire staying in flight. A
 * write-back of t that comes after the release moves the counter up
 * (fences only grow) where the eager order leaves it. An unlock's release
 * with HANDOFF hands the key off when it is delivered, so its moment
 * matters to the handoff's validity: those stay in flight. A refusal can
 * still change what follows (the refused round fails and releases its
 * other nodes), so this is an argument, not a proof; it is
 * cross-checked: with DELAYED, mutex-delayed and crash-delayed (in make
 * model) and failover-delayed (by name) find no error either, and
 * every control fires with the eager releases.
 *
 * Only node 0 crashes, fails over, changes its ID or drops its
 * connections, unless a run says otherwise (above). The nodes are
 * symmetric: the initial state is the same on each but for
 * replication IDs, which are only compared for equality, and every client
 * step treats the nodes alike (it loops over them and counts them), so a
 * run in which node k fails maps to one in which node 0 does by swapping
 * the two nodes' indices. The replica's copy is cleared once the last
 * fault has happened: it is never read again.
 *
 * The variables a configuration never changes (the HIDE_* groups below)
 * are hidden: left out of the stored state. A hidden variable is not
 * restored when the search backs up, which changes nothing for one that
 * keeps its first value in every reachable state, or that is never read;
 * and a state with it is the same state without it. The const-* runs
 * check the first with KEEPALL and CONSTCHECK, and store as many states.
 *
 * SYMMETRY (runs without faults: the handoff's, and those with 5 nodes;
 * symmetry.pml): each step ends by
 * replacing the state with a canonical one, which spin stores instead.
 * That is sound when the canonical state reaches the same states, up to
 * renaming, as the state it replaces, and the property does not see the
 * renaming; it holds for these two changes.
 * - Dead values are cleared, each one that is never read again before it
 *   is written: mh (with HANDOFF it is read only in the step that decides
 *   a round, after settle wrote it: an unlock releases every node),
 *   handed and tok outside ACQ and WAIT (read by the announcements and the
 *   waiting step only in those phases; send writes both), byHand outside
 *   HELD (read by the unlock only; send writes it), and token t's
 *   tombstone on node i once t's round was sent and no acquire of t is in
 *   flight to node i (a tombstone refuses only its own token's acquire,
 *   and a round is sent once; a later release may bring it back). A
 *   tombstone may already end at any moment (TOMB_LIFE 0: ORPHAN, which
 *   gives it a life, is not allowed with SYMMETRY).
 * - Nodes and clients are renamed. Without faults every node runs the
 *   same steps on its own variables and every client step treats the
 *   nodes alike (loops, counts, the quorum); replication IDs are compared
 *   only with the same node's (so, with SYMMETRY, every node starts with
 *   the same one). Clients run the same steps but for their tokens,
 *   TOK(c, r), which name their client only through OWNER: renaming
 *   client c to c' renames its tokens and hand values everywhere (keys,
 *   lines, announcements, tombstones, tok). exclusive(c) ranges over
 *   every pair of clients, so it is violated in a state exactly when it
 *   is violated in every renaming of it. Between steps every process waits
 *   at the top of its loop (each step is one atomic sequence, every if in
 *   it with a branch that is always open), so renaming the data is
 *   renaming the processes. LATE3 makes the third client wait for the
 *   second: with it only the nodes are renamed. The canonical state is the
 *   least, over every order of the clients, of the state with its clients
 *   so renamed and its nodes then sorted by their whole records (their own
 *   variables, every client's messages to and from them, their bits in
 *   every client's masks), so that nodes with equal records are
 *   interchangeable: one state per class.
 *   Without HANDOFF only the nodes are renamed and no value is cleared
 *   (mh, for one, is read by the unlock, which releases only the nodes
 *   that may hold).
 * The controls ctl-handsym (HANDNOW LATE3 with SYMMETRY), ctl-minority5
 * and ctl-nodrift5 find their counterexamples in the reduced space too. spin -t does not run the
 * embedded C: ./pan -r replays a trail of a SYMMETRY run.
 */

#ifndef N
#define N 3
#endif
#ifndef C
#define C 2
#endif
#ifndef R
#define R 1               /* rounds per client: 1 or 2 */
#endif
#ifndef ATT
#define ATT R             /* attempts: rounds begun by the client; the */
#endif                    /* rest are new-deployment rounds */
#ifndef T
#define T 3               /* lock TTL in ticks */
#endif
#define D 1               /* drift: how early a key or guard may end */
#ifdef NODRIFT
#define ALLOW 0           /* control: no drift allowance */
#else
#define ALLOW D
#endif
#ifdef NOGUARD
#define G 0               /* control: UnsafeNoRestartGuard */
#else
#define G T               /* RestartGuard: every TTL is at most this */
#endif
#ifdef MINORITY
#define Q (N/2)           /* control: half the nodes */
#else
#define Q (N/2+1)
#endif
#ifndef FAULTS
#define FAULTS 1
#endif
#define AGE (T-D)         /* an acquire this old is never delivered */
/* The seed of the fence counter that the shortcut's establish sets: the
 * node's time (TIMESEED, clk: the header's "Fences after a total loss"),
 * or, SEEDZERO, the control, 0 (the previous scripts). */
#if defined(FENCING) && !defined(SEEDZERO) && (defined(FRESH) || defined(NEWCLIENT))
#define TIMESEED 1
#define CLK_FENCE(v) if :: v > clk -> clk = v :: else -> skip fi
#define SEED clk
#else
#define CLK_FENCE(v) skip
#define SEED 0
#endif
/* Tombstones (tombstone.lua): a key keeps a set of them, tomb[i] (bit t:
 * token t's), beside its holder, and each has its own expiry. A tombstone
 * refuses only its own token's late SET: its lifetime matters only to the
 * property that checks them (ORPHAN: tl, ticks left, TOMB_LIFE = T);
 * elsewhere each may end at any moment. A hand value's tombstone refuses
 * no request the model sends (acquires carry plain tokens): it is not
 * kept. MaxTombstones (8) exceeds the tokens of any run: none is crowded
 * out. A tombstone past its expiry inside a held key's value stays until
 * a script rewrites the value (acquire.lua's buried does not read the
 * expiry); the model drops it at its expiry, which only lets more late
 * acquires through. */
#ifdef ORPHAN
#define TOMB_LIFE T
#else
#define TOMB_LIFE 0
#endif
#define TK (C*R+1)
/* ONETOMB, a control: the previous scripts, a key with one tombstone at
 * most, which a grant drops and a second release leaves alone. */
#ifdef ONETOMB
#define ONE_TOMB 1
#else
#define ONE_TOMB 0
#endif

#define NONE 255
/* A key's holder: 0 for none (the key is missing, or holds only
 * tombstones), a token t (1..C*R) or a hand value HAND|t (handoff.lua's
 * "@HAND@" .. t). */
#define HAND 32
#define TOK(c,r) ((c)*R+(r)+1)

/* Replies to an acquire. */
#define GRANTED 1
#define TAKEN   2
#define GUARDED 3
#define OWNGONE 4         /* the key keeps this token's tombstone: -3 */
/* Client phases. */
#define IDLE   0
#define ACQ    1
#define FENCEW 2
#define HELD   3
#define EXT    4
#define WAIT   5
#define DONE   6
/* Requests other than acquires and releases. */
#define XFENCE 1
#define XEXT   2


/* Node i: its lock key, the ticks left to the key's nominal expiry, its
 * mark (a waiter was refused: announce.lua), the state hash (st: it
 * exists; g: ticks left in the restart guard, 0 established, NONE
 * missing; sid: id; f: fence counter, NONE unknown; rr: recorded
 * replication ID, 0 none) and the server's replication ID. Times are
 * kept as ticks left, not as instants, so that states that differ only
 * by when they happen are one state, and time need not be bounded. */
byte key[N], kl[N];
bit mark[N];
/* Variables that a configuration never changes (or, the replica's copy
 * without FAILOVER, changes but never reads) are left out of the stored
 * state: spin's hidden. Each group names the defines that may change
 * it; without them its variables keep their initial values, so a state
 * is the same with or without them. KEEPALL keeps every variable in;
 * with it CONSTCHECK (constant.pml) checks at every step that each
 * group the configuration hides still has its initial values: the runs
 * named const-* in check.sh, which also store as many states as the
 * runs with the groups hidden (docs/SAFETY.md). constant.pml lists
 * each group's variables again: a variable given a group here goes into
 * its list there. spin hides no bit: hidden bits are bytes. */
#if defined(FAILOVER)
#define HIDE_REPLICA 0
#else
#define HIDE_REPLICA 1
#endif
#if defined(FRESH) || defined(NEWCLIENT)
#define HIDE_FRESHV 0
#else
#define HIDE_FRESHV 1
#endif
#if defined(CRASH) || defined(FAILOVER) || defined(FRESH) || defined(FENCING) || defined(TOTALLOSS) || \
    defined(IDCHANGE) || defined(KILL) || defined(NEWCLIENT)
#define HIDE_SERVER 0
#else
#define HIDE_SERVER 1
#endif
#if defined(FENCING)
#define HIDE_FENCEV 0
#else
#define HIDE_FENCEV 1
#endif
#if defined(FENCING) || defined(EXTEND)
#define HIDE_XV 0
#else
#define HIDE_XV 1
#endif
#if HIDE_REPLICA && !defined(KEEPALL)
#define REPLICA hidden
#else
#define REPLICA
#endif
#if HIDE_FRESHV && !defined(KEEPALL)
#define FRESHV hidden
#else
#define FRESHV
#endif
#if HIDE_SERVER && !defined(KEEPALL)
#define SERVER hidden
#else
#define SERVER
#endif
#if HIDE_FENCEV && !defined(KEEPALL)
#define FENCEV hidden
#else
#define FENCEV
#endif
#if HIDE_XV && !defined(KEEPALL)
#define XV hidden
#else
#define XV
#endif
SERVER byte st[N];            /* a bit */
SERVER byte g[N], sid[N], f[N], rr[N], rid[N];
/* The server's identity: runid, its process (run_id, drawn at process
 * start); rid, its replication ID (master_replid); r2, whether its
 * replid2 is set (not all zeros). The state records rp (p) beside rr (r),
 * 0 for none. Each is compared only with the same node's. */
SERVER byte runid[N], rp[N], r2[N];
FRESHV short mk[N];          /* the guarded state's mark (v), 0 none */
SERVER byte newId = 100;           /* replication IDs, apart from tokens */
/* The replica's copy of node i, as of its last replication, or the
 * persisted file as of its last save: a copy taken at any moment. */
REPLICA byte pkey[N], pkl[N], pg[N], psid[N], pf[N], prr[N], prp[N];
REPLICA byte pmark[N], pst[N]; /* bits */
REPLICA byte ptomb[N];
REPLICA short pmk[N];
SERVER byte faults;
SERVER byte idChanges, kills;  /* ID changes and connection drops so far */
/* Ticks left before node i may change its ID without a loss, after
 * REPROMOTE kept its process: a promotion restarts the backlog's time to
 * live (replicationUnsetMaster sets repl_no_slaves_since) and the replica
 * had a backlog (readSyncBulkPayload creates one), so the ID changes no
 * sooner than repl-backlog-ttl, which the design assumes 0 (never) or at
 * least RestartGuard. IDNOW, a control: at any moment. */
SERVER byte idwait[N];

/* Client c: rl, the validity its round would have if decided now
 * (T - elapsed - ALLOW, in ticks, 0 when spent); ul, the ticks left of its
 * lock's validity (Until); xl, rl for its extend. */
byte rnd[C], tok[C], rl[C], ul[C], phase[C];
XV byte xl[C];
FENCEV byte fence[C], seq[C];
FRESHV byte estRound[C];   /* the round that establishes, or NONE */
FRESHV byte markRound[C];  /* the round that marks, or NONE */
FRESHV short hsh[C];       /* the mark of the ids its first round saw */
FRESHV byte inService[C];  /* a bit */
XV byte extended[C];       /* a bit */
FENCEV byte wrote[C], checked[C]; /* bits */
byte mh[C];               /* bit j: node j may hold the round's token */

/* In flight between client c and node i (index c*N+i): acquires by round
 * (bit r), releases by round (bit r: the clean-up of a failed round; R+r:
 * an unlock of round r's hand value; 2R+r: an unlock of its token), one
 * fence write-back or extend, and the replies. */
#if R > 2
#define RBITS short       /* 3R bits of releases */
#else
#define RBITS byte
#endif
byte acq[C*N];
#ifdef PIPEJOIN
/* PIPEJOIN: an acquire is the pipelined join (a waiter's round with the
 * handoff on the node: internal/protocol.PipelinedJoin), one step, then
 * the script where its reply decides nothing: PIPE's two steps, with
 * pipeJoin as the first and no HGET. */
#define PIPE
#endif
#ifdef PIPE
/* PIPE: an acquire is the pipelined one (any acquire of a lock on a plain
 * node: internal/protocol.Pipelined), SET NX then HGET of the guard on one
 * connection, two steps with anything between them; a reply that grants
 * nothing sends the script (scr, bit r: the acquire in flight is it). hg,
 * bit r: round r's SET landed, its HGET is in flight. READFIRST, a control:
 * the guard read before the write, in an earlier round trip (est, bit r:
 * the read found the node established); the write goes out later, on a
 * new connection if the old one dropped. NOREAD, a control: the SET alone
 * counts. */
byte hg[C*N], scr[C*N];
#ifdef READFIRST
byte est[C*N];
#endif
#endif
XV byte xreq[C*N];
RBITS rel[C*N];
byte rep[C*N], repv[C*N];
XV byte xrep[C*N];
byte conn[C*N];           /* 1: client c has a connection to node i,
                           * checked when it opened; 0: none (the next
                           * request opens one and runs check first) */
FRESHV byte estId[C*N];    /* the guarded state's id that rounds markRound
                            * and estRound ask for */
FRESHV short repm[C*N];    /* a guarded reply's mark */
byte tomb[N];             /* tombstones: bit t, token t's */
#ifdef ORPHAN
byte tl[N*TK];            /* ticks left to tombstone t on node i: [i*TK+t] */
/* buriedAt[t], bit i: a release of t met no holder on node i, where it
 * leaves (or finds) t's tombstone: what ORPHAN asserts against, kept
 * apart from tomb so that NOTOMB's control can break it. */
byte buriedAt[TK];
#endif
#ifdef ORPHAN
byte al[C*N];             /* ticks before the acquire in flight is dropped */
#endif
#ifdef ORPHAN
#define AGE_START(c, jj) al[c*N+jj] = AGE
#define AGE_TICK() \
       jj = 0; \
       do \
       :: jj < C*N -> \
          if \
          :: al[jj] > 0 -> al[jj]--; if :: al[jj] == 0 -> acq[jj] = 0 :: else -> skip fi \
          :: else -> skip \
          fi; \
          jj++ \
       :: else -> break \
       od
#else
#define AGE_START(c, jj) skip
#define AGE_TICK() skip
#endif



/* Scratch for the steps, each of which is atomic, sets them before use
 * and clears them at its end (CLEAN), so that no state differs by them. */
byte jj, nn, mm, kk, hh, tt, vv, kd, gdd, kp, rb;
RBITS bb;
#define CLEAN_SCRATCH jj = 0; nn = 0; mm = 0; kk = 0; hh = 0; tt = 0; vv = 0; kd = 0; gdd = 0; kp = 0; bb = 0; rb = 0
/* With CONSTCHECK a step ends with constant.pml's check, and with
 * SYMMETRY with the state made canonical (symmetry.pml). */
#ifdef CONSTCHECK
#define CLEAN_STEP CLEAN_SCRATCH; CONST_STEP
#else
#define CLEAN_STEP CLEAN_SCRATCH
#endif
#ifdef SYMMETRY
#define CLEAN CLEAN_STEP; CANON
#else
#define CLEAN CLEAN_STEP
#endif

/* The resource that refuses lower fences, and the record of holders. */
FENCEV byte resMax, resSeq, seqs, maxFence;
/* The node time that the shortcut's establish seeds the fence counter
 * with (TIMESEED: redlock.pml's header, "Fences after a total loss"). */
FENCEV byte clk;

#include "handoff.pml"
#include "live.pml"
#include "symmetry.pml"
#include "constant.pml"

/* FENCE_ORDER: client c's fence is above every earlier holder's; seq
 * numbers the holders in the order in which they obtain the lock, which
 * mutual exclusion orders. With NOEXCLUSIVE two may hold at once, and
 * obtain in either order: seq numbers them when their rounds decide their
 * fences, and FENCE_PAIRS asserts, as each obtains, that its fence is
 * above the fence of every holder whose round decided before its own, and
 * below the others' (ofence, oseq: each client's last lock obtained). */
#define FENCE_ORDER(c) seqs++; seq[c] = seqs; assert(fence[c] > maxFence); maxFence = fence[c]
#ifdef NOEXCLUSIVE
byte ofence[C], oseq[C];
#define FENCE_PAIRS(c) \
  jj = 0; \
  do \
  :: jj < C -> \
     if \
     :: jj != c && ofence[jj] > 0 -> assert((seq[c] > oseq[jj]) == (fence[c] > ofence[jj])) \
     :: else -> skip \
     fi; \
     jj++ \
  :: else -> break \
  od; \
  ofence[c] = fence[c]; oseq[c] = seq[c]
#endif

/* exclusive is asserted whenever client c's validity begins or moves:
 * no other client is inside its validity. */
#ifdef NOEXCLUSIVE
inline exclusive(c) { skip }  /* a total loss within a validity: fences only */
#else
inline exclusive(c) {
  jj = 0;
  do
  :: jj < C ->
     assert(jj == c || !((phase[jj] == HELD || phase[jj] == EXT) && ul[jj] > 0));
     jj++
  :: else -> break
  od
}
#endif

/* LOCKOUT (no false lockout): a node enters its restart guard only while
 * it has never had a state (everState[i]: it had one; a deployment in
 * service starts with one on every node). Without CRASH, FAILOVER and
 * LOSS this must hold; with FRESH the first state is made guarded and the
 * new-deployment shortcut ends the guard. */
#ifdef LOCKOUT
bit everState[N];
#define ENTERS_GUARD(i) assert(!everState[i]); everState[i] = 1
#else
#define ENTERS_GUARD(i) skip
#endif

/* ---- Node steps: the kernel scripts, each atomic. ---- */

/* newState: newstate.lua. */
inline newState(i, id) {
  ENTERS_GUARD(i);
  st[i] = 1; g[i] = G; sid[i] = id; rr[i] = rid[i]; rp[i] = runid[i]; mk[i] = 0
}

/* check: check.lua, run when client c opens a connection to node i. It
 * starts the guard iff the recorded process differs from the server's
 * (another process: a restart, a promoted replica), or the recorded
 * replication ID differs and replid2 is set (the process was a replica
 * since); otherwise it records both and guards nothing. A guard it starts
 * has the mark x (XMARK), which no shortcut matches, and the id CHECKID.
 * OLDCHECK, a control: the previous check, which guards iff the recorded
 * replication ID differs, with no mark. */
#define XMARK (-1)
#define CHECKID TK        /* a replication ID: no token's, below 8 */
#ifdef OLDCHECK
#define CHECK_GUARDS(i) (rr[i] != rid[i])
#define CHECK_MARK 0
#else
#define CHECK_GUARDS(i) ((rp[i] != 0 && rp[i] != runid[i]) || (rr[i] != rid[i] && r2[i]))
#if defined(FRESH) || defined(NEWCLIENT)
#define CHECK_MARK XMARK
#else
#define CHECK_MARK 0      /* no client takes the shortcut: the mark is never
                           * read, and mk stays constant (HIDE_FRESHV) */
#endif
#endif
inline check(c, i) {
#ifndef NOCHECK
  if
  :: rr[i] == 0 || G == 0 || !CHECK_GUARDS(i) -> rr[i] = rid[i]; rp[i] = runid[i]; st[i] = 1
  :: rr[i] != 0 && G > 0 && CHECK_GUARDS(i) ->
     if
     :: g[i] == NONE || g[i] < G -> ENTERS_GUARD(i); g[i] = G
     :: else -> skip
     fi;
     sid[i] = CHECKID; rr[i] = rid[i]; rp[i] = runid[i]; f[i] = NONE; st[i] = 1; mk[i] = CHECK_MARK
  fi;
#endif
  conn[c*N+i] = 1
}

/* acquire: acquire.lua for round r of client c on node i. Sets gd when
 * the node is in its restart guard. The new-deployment shortcut: round
 * markRound[c] marks the state it saw (estId) with hsh[c] if it has no
 * mark yet; round estRound[c] ends the guard of the state it saw if it
 * carries that mark (NOMARK, the control: whatever its mark). */
#ifdef NOMARK
#define MARK_OK(c, i) 1
#else
#define MARK_OK(c, i) (mk[i] == hsh[c])
#endif
inline acquire(c, r, i) {
  tt = TOK(c, r);
  gdd = 0;
  if
  :: tomb[i] & (1 << tt) -> kd = OWNGONE
  :: !(tomb[i] & (1 << tt)) ->
     if
     :: key[i] == 0 || key[i] == tt || FREE_BEFORE(c, r, i) ->
        /* guarded() */
        if
        :: G == 0 || g[i] == 0 -> skip
        :: G > 0 && g[i] == NONE -> newState(i, tt); gdd = 1
        :: G > 0 && g[i] != 0 && g[i] != NONE ->
           if
           :: estRound[c] == r && estId[c*N+i] == sid[i] && MARK_OK(c, i) ->
              g[i] = 0;
              if
              :: f[i] == NONE -> f[i] = SEED
              :: else -> skip
              fi
           :: !(estRound[c] == r && estId[c*N+i] == sid[i] && MARK_OK(c, i)) ->
              if
              :: g[i] <= D -> g[i] = 0  /* ended, perhaps early */
              :: else ->
                 if
                 :: markRound[c] == r && estId[c*N+i] == sid[i] && mk[i] == 0 ->
                    mk[i] = hsh[c]      /* set once */
                 :: else -> skip
                 fi;
                 gdd = 1
              fi
           fi
        fi;
        if
        :: gdd ->
           kd = GUARDED; vv = sid[i];
           if
           :: key[i] == tt -> key[i] = 0; mark[i] = 0; kl[i] = 0  /* taken back, its tombstones kept */
           :: else -> skip
           fi
        :: else ->
#ifdef ORPHAN
           /* a late SET must not land after its own release left its
            * tombstone here (an acquire older than a tombstone's life is
            * never delivered: AGE) */
           assert(!(buriedAt[tt] & (1 << i)));
#endif
           if
           :: key[i] == 0 -> mark[i] = 0
           :: else -> skip  /* the mark stays */
           fi;             /* the tombstones stay, each with its expiry */
#ifdef ONETOMB
           tomb[i] = 0;    /* control: the grant drops them */
#endif
           key[i] = tt; kl[i] = T;
           GRANT_HOOK(c, r, i);
           kd = GRANTED;
           if
           :: f[i] != NONE -> vv = f[i] + 1
           :: f[i] == NONE && G == 0 -> vv = 1
           :: else -> vv = 0          /* unknown */
           fi;
           CLK_FENCE(vv)
        fi
     :: else ->
        REFUSED_HOOK(c, r, i);
        kd = TAKEN
     fi
  fi;
  printf("MSC: node %d: acquire %d of client %d -> %d\n", i, tt, c, kd);
  if
  :: tok[c] == tt && phase[c] == ACQ ->
     rep[c*N+i] = kd; repv[c*N+i] = vv;
     if
     :: gdd -> repm[c*N+i] = mk[i]
     :: else -> skip
     fi
  :: else -> skip                   /* a reply nobody waits for */
  fi;
}

#ifdef PIPE
/* SCRIPT_NEXT: the pipeline's reply grants nothing; the client sends the
 * acquire script to node i, even once the round is decided (its call on the
 * node runs to its end: internal/node.Node.Acquire), but within the call's
 * time: with ORPHAN, not once the request is AGE ticks old (al), and it
 * ages from the round's send. */
#ifdef ORPHAN
#define SCRIPT_NEXT(c, r, i) \
  if \
  :: al[c*N+i] > 0 -> scr[c*N+i] = scr[c*N+i] | (1 << r); acq[c*N+i] = acq[c*N+i] | (1 << r) \
  :: else -> skip \
  fi
#else
#define SCRIPT_NEXT(c, r, i) scr[c*N+i] = scr[c*N+i] | (1 << r); acq[c*N+i] = acq[c*N+i] | (1 << r)
#endif
#define PIPE_GRANTS(c, i) \
  if \
  :: tok[c] == tt && phase[c] == ACQ -> rep[c*N+i] = GRANTED; repv[c*N+i] = 0 \
  :: else -> skip \
  fi
/* pipeSet: the pipeline's SET key token NX PX ttl, on node i. It sets
 * only a missing key; a value (a holder, a mark, tombstones) refuses it,
 * and the client then sends the script. */
inline pipeSet(c, r, i) {
  tt = TOK(c, r);
#ifdef READFIRST
  if
  :: !conn[c*N+i] -> check(c, i)
  :: else -> skip
  fi;
#endif
  if
  :: key[i] == 0 && mark[i] == 0 && tomb[i] == 0 ->
#ifdef ORPHAN
     assert(!(buriedAt[tt] & (1 << i)));
#endif
     key[i] = tt; kl[i] = T;
     printf("MSC: node %d: pipelined SET %d of client %d\n", i, tt, c);
#if defined(NOREAD)
     PIPE_GRANTS(c, i)
#elif defined(READFIRST)
     if
     :: est[c*N+i] & (1 << r) -> PIPE_GRANTS(c, i)
     :: else -> SCRIPT_NEXT(c, r, i)
     fi
#else
     hg[c*N+i] = hg[c*N+i] | (1 << r)  /* its HGET follows on the connection */
#endif
  :: else -> SCRIPT_NEXT(c, r, i)  /* the SET found a value */
  fi
}
/* pipeGet: the pipeline's HGET of the state's g, on node i: a grant iff
 * the node is established; otherwise (guarded, or no state) the script,
 * which finds the key already holding the token. */
inline pipeGet(c, r, i) {
  tt = TOK(c, r);
  if
  :: G == 0 || g[i] == 0 -> PIPE_GRANTS(c, i)
  :: else -> SCRIPT_NEXT(c, r, i)
  fi;
  printf("MSC: node %d: pipelined HGET %d of client %d -> %d\n", i, tt, c, g[i])
}
#ifdef PIPEJOIN
/* pipeJoin: the pipelined join on node i, one MULTI transaction, so one
 * step: SET key token NX PX ttl GET, which sets only a missing key, then
 * the round's entry added to the line whatever the SET did (ZADD NX:
 * JOIN_ADD, which takes no other entry of the client off). Its reply
 * decides only a refusal: a marked key that another token holds, neither
 * the waiter's previous round's token nor its hand value, keeping no
 * tombstone of the token (the model's keys all have a TTL). Any other
 * reply sends the script, which finds the key holding the token where the
 * SET set it. JOINGRANT, a control: a SET that set the key counts as a
 * grant. */
inline pipeJoin(c, r, i) {
  tt = TOK(c, r);
  if
  :: key[i] == 0 && mark[i] == 0 && tomb[i] == 0 ->
#ifdef ORPHAN
     assert(!(buriedAt[tt] & (1 << i)));
#endif
     key[i] = tt; kl[i] = T; JOIN_ADD(c, r, i);
#ifdef JOINGRANT
     PIPE_GRANTS(c, i)
#else
     SCRIPT_NEXT(c, r, i)
#endif
  :: key[i] != 0 && key[i] != tt && mark[i] && !FREE_BEFORE(c, r, i) && !(tomb[i] & (1 << tt)) ->
     JOIN_ADD(c, r, i);
     if
     :: tok[c] == tt && phase[c] == ACQ -> rep[c*N+i] = TAKEN
     :: else -> skip
     fi
  :: else -> JOIN_ADD(c, r, i); SCRIPT_NEXT(c, r, i)
  fi;
  printf("MSC: node %d: pipelined join %d of client %d -> key %d\n", i, tt, c, key[i])
}
#define PIPE_FIRST(c, r, i) pipeJoin(c, r, i)
#else
#define PIPE_FIRST(c, r, i) pipeSet(c, r, i)
#endif
#endif

/* release: release.lua for the token of round r of client c (its hand
 * value when hand) on node i; announce for an unlock, not for the clean-up
 * of a failed round. */
inline release(c, r, hand, announce, i) {
  tt = TOK(c, r);
  if
  :: hand -> tt = tt | HAND
  :: else -> skip
  fi;
  if
  :: key[i] == tt ->
     kp = 0;
     HANDOFF_HOOK(i, announce);
     if
     :: !kp -> key[i] = 0; mark[i] = 0; kl[i] = 0  /* its tombstones stay */
     :: else -> skip                               /* handed off, with them */
     fi
  :: key[i] == 0 && !(hand) ->
     /* missing, or only tombstones: t's is added, unless it is there */
#ifdef ORPHAN
     buriedAt[tt] = buriedAt[tt] | (1 << i);
#endif
#ifndef NOTOMB
     if
     :: !(tomb[i] & (1 << tt)) && !(ONE_TOMB && tomb[i] != 0) ->
        tomb[i] = tomb[i] | (1 << tt);
#ifdef ORPHAN
        tl[i*TK+tt] = TOMB_LIFE;
#endif
        skip
     :: else -> skip
     fi;
#endif
     skip
  :: key[i] == 0 && (hand) -> skip
  :: key[i] != tt && key[i] != 0 -> skip  /* another holder: no tombstone */
  fi;
  printf("MSC: node %d: release %d of client %d -> key %d\n", i, tt, c, key[i])
}

/* xrun: extend.lua or fence.lua for client c's lock on node i. A reply
 * that comes after the client decided is not read. */
inline xrun(c, i) {
  if
  :: key[i] == tok[c] && xreq[c*N+i] == XEXT -> kl[i] = T; vv = 1
  :: key[i] == tok[c] && xreq[c*N+i] == XFENCE ->
     if
     :: f[i] == NONE || f[i] < fence[c] -> f[i] = fence[c]
     :: else -> skip
     fi;
     vv = 1
  :: key[i] != tok[c] ->
     if
     :: xreq[c*N+i] == XEXT && G > 0 && !st[i] -> newState(i, tok[c] & ~HAND)
     :: else -> skip
     fi;
     vv = 2
  fi;
  printf("MSC: node %d: %d of client %d -> %d\n", i, xreq[c*N+i], c, vv);
  if
  :: phase[c] == FENCEW || phase[c] == EXT -> xrep[c*N+i] = vv
  :: else -> skip
  fi;
  xreq[c*N+i] = 0
}

#if defined(DELAYED)
#define EAGER_BIT(b) 0
#elif defined(HANDOFF) && !defined(EAGER)
#define EAGER_BIT(b) ((b) < R)
#else
#define EAGER_BIT(b) 1
#endif
/* post sends client c's releases bb (bit b as in rel) to node i: into
 * flight, or with EAGER delivered at once. */
inline post(c, i) {
  rb = 0;
  do
  :: rb < 3*R ->
     if
     :: (bb & (1 << rb)) && EAGER_BIT(rb) -> release(c, rb % R, (rb / R == 1), (rb >= R), i) HAND_TOO(c, rb, i)
     :: (bb & (1 << rb)) && !EAGER_BIT(rb) -> rel[c*N+i] = rel[c*N+i] | (1 << rb)
     :: else -> skip
     fi;
     rb++
  :: else -> break
  od;
  bb = 0; rb = 0
}

#if defined(PIPE) && defined(READFIRST)
#define ACQ_DROPS(c, i) hg[c*N+i] = 0; scr[c*N+i] = 0  /* the write is not sent yet */
#elif defined(PIPE)
#define ACQ_DROPS(c, i) acq[c*N+i] = 0; hg[c*N+i] = 0; scr[c*N+i] = 0
#else
#define ACQ_DROPS(c, i) acq[c*N+i] = 0
#endif
/* dropConns drops every connection to node i, and the requests in
 * flight on them: the next request of each client opens one and runs
 * check. */
inline dropConns(i) {
  jj = 0;
  do
  :: jj < C -> ACQ_DROPS(jj, i); rel[jj*N+i] = 0; xreq[jj*N+i] = 0; conn[jj*N+i] = 0; jj++
  :: else -> break
  od
}

/* newServer: node i's data was dropped (crash) or replaced with an older
 * copy (failover, restart from a file); the server is a new process (or,
 * with REPROMOTE, the same one back from being a replica), with a new
 * replication ID, and its connections and the requests on them are gone.
 * The caller sets runid and r2. */
inline newServer(i) {
  printf("MSC: node %d: new server (crash or failover), key %d g %d\n", i, key[i], g[i]);
  faults++;
  rid[i] = newId; newId++;
  dropConns(i);
  LINE_CLEAR(i)
}

#ifdef PIPE
#define ACQ_ARRIVES(c, r) \
  :: atomic { acq[c*N+i] & (1 << r) -> acq[c*N+i] = acq[c*N+i] & ~(1 << r); \
       if \
       :: scr[c*N+i] & (1 << r) -> scr[c*N+i] = scr[c*N+i] & ~(1 << r); acquire(c, r, i) \
       :: else -> PIPE_FIRST(c, r, i) \
       fi; CLEAN } \
  :: atomic { hg[c*N+i] & (1 << r) -> hg[c*N+i] = hg[c*N+i] & ~(1 << r); pipeGet(c, r, i); CLEAN }
#else
#define ACQ_ARRIVES(c, r) \
  :: atomic { acq[c*N+i] & (1 << r) -> acq[c*N+i] = acq[c*N+i] & ~(1 << r); acquire(c, r, i); CLEAN }
#endif
#define REL_ARRIVES(c, b) \
  :: atomic { rel[c*N+i] & (1 << b) -> rel[c*N+i] = rel[c*N+i] & ~(1 << b); release(c, b % R, (b / R == 1), (b >= R), i) HAND_TOO(c, b, i); CLEAN }
#define X_ARRIVES(c) \
  :: atomic { xreq[c*N+i] != 0 -> xrun(c, i); CLEAN }
#ifdef LOSS
#ifdef PIPE
#define LOST_HG(c) :: atomic { hg[c*N+i] != 0 -> hg[c*N+i] = 0; CLEAN }
#define SCR_CLEAR(c) scr[c*N+i] = 0
#else
#define LOST_HG(c)
#define SCR_CLEAR(c) skip
#endif
#define LOST(c) \
  LOST_HG(c) \
  :: atomic { acq[c*N+i] != 0 -> acq[c*N+i] = 0; SCR_CLEAR(c); CLEAN } \
  :: atomic { xreq[c*N+i] != 0 -> xreq[c*N+i] = 0; CLEAN }
#else
#define LOST(c)
#endif
/* RELS(c): the deliveries of releases in flight: none when every release
 * is delivered when sent; bits 3..5 only with two rounds. */
#if !defined(DELAYED) && !defined(HANDOFF)
#define RELS(c)
#elif R > 2
#define RELS(c) REL_ARRIVES(c, 0) REL_ARRIVES(c, 1) REL_ARRIVES(c, 2) REL_ARRIVES(c, 3) REL_ARRIVES(c, 4) REL_ARRIVES(c, 5) \
  REL_ARRIVES(c, 6) REL_ARRIVES(c, 7) REL_ARRIVES(c, 8)
#elif R > 1
#define RELS(c) REL_ARRIVES(c, 0) REL_ARRIVES(c, 1) REL_ARRIVES(c, 2) REL_ARRIVES(c, 3) REL_ARRIVES(c, 4) REL_ARRIVES(c, 5)
#else
#define RELS(c) REL_ARRIVES(c, 0) REL_ARRIVES(c, 1) REL_ARRIVES(c, 2)
#endif
#if R > 2
#define ACQS(c) ACQ_ARRIVES(c, 0) ACQ_ARRIVES(c, 1) ACQ_ARRIVES(c, 2)
#elif R > 1
#define ACQS(c) ACQ_ARRIVES(c, 0) ACQ_ARRIVES(c, 1)
#else
#define ACQS(c) ACQ_ARRIVES(c, 0)
#endif
#define FROM(c) ACQS(c) RELS(c) X_ARRIVES(c) LOST(c)

/* TOMB_ENDS(t): token t's tombstone on node i ends, when its life allows
 * (with TOMB_LIFE 0: at any moment). */
#ifdef ORPHAN
#define TOMB_ENDS(t) \
  :: atomic { t < TK && (tomb[i] & (1 << t)) && tl[i*TK+t] <= D -> \
       printf("MSC: node %d: tombstone %d expires\n", i, t); tomb[i] = tomb[i] & ~(1 << t); tl[i*TK+t] = 0; CLEAN }
#define TOMBS_CLEAR(i) jj = 1; do :: jj < TK -> tl[i*TK+jj] = 0; jj++ :: else -> break od
#define TOMBS_LATER(i) (i >= N || \
  ((!(tomb[i] & 2) || tl[i*TK+1] > 0) && (TK < 3 || !(tomb[i] & 4) || tl[i*TK+2] > 0) && \
   (TK < 4 || !(tomb[i] & 8) || tl[i*TK+3] > 0) && (TK < 5 || !(tomb[i] & 16) || tl[i*TK+4] > 0)))
#else
#define TOMB_ENDS(t) \
  :: atomic { t < TK && (tomb[i] & (1 << t)) -> tomb[i] = tomb[i] & ~(1 << t); CLEAN }
#define TOMBS_CLEAR(i) skip
#define TOMBS_LATER(i) 1
#endif
#ifdef ORPHAN
#define TOMB_TICK() jj = 0; do :: jj < N*TK -> DOWN(tl[jj]); jj++ :: else -> break od
#else
#define TOMB_TICK() skip
#endif

#if defined(ALLFAULTY)
#define FAULTY(i) 1
#elif defined(FAULTY_FROM)
#define FAULTY(i) (i >= FAULTY_FROM && runid[i] == 1)  /* nodes FAULTY_FROM.., once each */
#else
#define FAULTY(i) (i == 0)
#endif
#define IDNODE(i) (i == 0)            /* the node of IDCHANGE and KILL */
#ifndef IDCHANGES
#define IDCHANGES 1
#endif
#ifndef KILLS
#define KILLS 1
#endif
#ifdef IDNOW
#define IDNOW 1
#else
#define IDNOW 0
#endif
/* REPROMOTE: a failover may keep the process (a master demoted by hand,
 * its data replaced from another master, then promoted again, its
 * clients killed as Sentinel does). */
#ifdef REPROMOTE
#define NEWPID(i) if :: runid[i]++ :: idwait[i] = G fi
#else
#define NEWPID(i) runid[i]++
#endif

/* crash: node i restarts without persistence (CRASH, TOTALLOSS). */
inline crash(i) {
  key[i] = 0; mark[i] = 0; kl[i] = 0; tomb[i] = 0; TOMBS_CLEAR(i);
  st[i] = 0; g[i] = NONE; sid[i] = 0; f[i] = NONE; rr[i] = 0; rp[i] = 0; mk[i] = 0;
  newServer(i); runid[i]++; r2[i] = 0
}

proctype Node(byte i) {
end:
  do
  FROM(0)
  FROM(1)
#if C > 2
  FROM(2)
#endif
  :: atomic { key[i] != 0 && kl[i] <= D ->
       /* the key expires with its holder, and its tombstones with it */
       printf("MSC: node %d: key %d expires\n", i, key[i]); key[i] = 0; mark[i] = 0; kl[i] = 0; tomb[i] = 0;
       TOMBS_CLEAR(i); CLEAN }
  TOMB_ENDS(1) TOMB_ENDS(2) TOMB_ENDS(3) TOMB_ENDS(4) TOMB_ENDS(5) TOMB_ENDS(6)
#ifdef CRASH
  /* a restart without persistence: a new process, replid2 clear */
  :: atomic { faults < FAULTS && FAULTY(i) -> crash(i); CLEAN }
#endif
#ifdef TOTALLOSS
  /* every node at once (node 0's step) */
  :: atomic { faults < FAULTS && i == 0 ->
       kp = 0;
       do
       :: kp < N -> crash(kp); kp++
       :: else -> break
       od;
       faults = faults - N + 1; CLEAN }
#endif
#ifdef FAILOVER
  /* replication, or a save to the persisted file: a copy at any moment */
  :: atomic { faults == 0 && FAULTY(i) ->
       pkey[i] = key[i]; pkl[i] = kl[i]; pmark[i] = mark[i]; pst[i] = st[i]; ptomb[i] = tomb[i];
       pg[i] = g[i]; psid[i] = sid[i]; pf[i] = f[i]; prr[i] = rr[i]; prp[i] = rp[i]; pmk[i] = mk[i]; CLEAN }
  /* a failover (the replica promoted: shiftReplicationId sets replid2),
   * or a restart from the file (loadDataFromDisk keeps the file's ID as
   * replid2): the older copy, a new process, a new ID, replid2 set */
  :: atomic { faults < FAULTS && FAULTY(i) ->
       key[i] = pkey[i]; kl[i] = pkl[i]; mark[i] = pmark[i]; st[i] = pst[i]; tomb[i] = ptomb[i];
       g[i] = pg[i]; sid[i] = psid[i]; f[i] = pf[i]; rr[i] = prr[i]; rp[i] = prp[i]; mk[i] = pmk[i];
       newServer(i); NEWPID(i); r2[i] = 1;
       if
       :: faults == FAULTS ->         /* the copy is no longer used */
          pkey[i] = 0; pkl[i] = 0; pmark[i] = 0; pst[i] = 0; ptomb[i] = 0;
          pg[i] = 0; psid[i] = 0; pf[i] = 0; prr[i] = 0; prp[i] = 0; pmk[i] = 0
       :: else -> skip
       fi; CLEAN }
#endif
#ifdef IDCHANGE
  /* a new replication ID without a loss (a first replica attaches to a
   * master without a backlog, or the backlog is freed): changeReplicationId
   * and clearReplicationId2; process, data and connections stay */
  :: atomic { idChanges < IDCHANGES && IDNODE(i) && (IDNOW || idwait[i] <= D) ->
       printf("MSC: node %d: new replication ID\n", i);
       idChanges++; rid[i] = newId; newId++; r2[i] = 0; CLEAN }
#endif
#ifdef KILL
  /* CLIENT KILL: the connections dropped, nothing else */
  :: atomic { kills < KILLS && IDNODE(i) ->
       printf("MSC: node %d: connections killed\n", i);
       kills++; dropConns(i); CLEAN }
#endif
  od
}

/* ---- Client steps: redlock/round.go, lock.go. ---- */

#if defined(PIPE) && defined(READFIRST)
#define READ_FIRST(c, jj) \
  if \
  :: G == 0 || g[jj] == 0 -> est[c*N+jj] = est[c*N+jj] | (1 << rnd[c]) \
  :: else -> est[c*N+jj] = est[c*N+jj] & ~(1 << rnd[c]) \
  fi
#else
#define READ_FIRST(c, jj) skip
#endif
/* send starts round rnd[c] of client c: the acquire to every node, each
 * over a connection checked when it opened. */
inline send(c) {
  tok[c] = TOK(c, rnd[c]); rl[c] = T - ALLOW;
  phase[c] = ACQ;
  SEND_HOOK(c);
  jj = 0;
  do
  :: jj < N ->
     if
     :: !conn[c*N+jj] -> check(c, jj)
     :: else -> skip
     fi;
     rep[c*N+jj] = 0;
     READ_FIRST(c, jj);
     acq[c*N+jj] = acq[c*N+jj] | (1 << rnd[c]);
     AGE_START(c, jj);
     jj++
  :: else -> break
  od;
  rnd[c]++;
  printf("MSC: client %d: round %d sent\n", c, tok[c])
}

/* fail releases every node from the failed round of client c, its
 * current token (Client.release), and ends the round. */
/* MAYHOLD: node j may hold client c's token: it granted it, or its
 * answer never came. A node that refused it needs no release: its acquire
 * ran, and a release there would change nothing but leave a tombstone
 * that no request of the token can meet. */
#define MAYHOLD(c, jj) (mh[c] & (1 << jj))

/* HG_FORGET: a pipelined HGET still in flight reads, and its reply is not
 * read once the round is decided: it is forgotten (hg). */
#ifdef PIPE
#define HG_FORGET(c, jj) hg[c*N+jj] = 0
#else
#define HG_FORGET(c, jj) skip
#endif
/* settle records where the decided round may hold its token, and forgets
 * the replies (later ones are not read). */
inline settle(c) {
  mh[c] = 0; jj = 0;
  do
  :: jj < N ->
     if
     :: rep[c*N+jj] == 0 || rep[c*N+jj] == GRANTED -> mh[c] = mh[c] | (1 << jj)
     :: else -> skip
     fi;
     rep[c*N+jj] = 0; repv[c*N+jj] = 0; repm[c*N+jj] = 0; HG_FORGET(c, jj);
     jj++
  :: else -> break
  od
}

/* CLEAR_X forgets the replies of a decided write-back or extend. */
#define CLEAR_X(c) jj = 0; do :: jj < N -> xrep[c*N+jj] = 0; jj++ :: else -> break od

inline fail(c) {
  printf("MSC: client %d: round %d failed\n", c, tok[c]);
  jj = 0;
  do
  :: jj < N && MAYHOLD(c, jj) -> bb = FAILED_BIT(c); post(c, jj); jj++
  :: jj < N && !MAYHOLD(c, jj) -> jj++
  :: else -> break
  od;
  phase[c] = IDLE
}

/* DECIDED: quorum.Round.Await returns: a quorum of replies of kind ok
 * (for an acquire, of any grant: the client then counts the known
 * fences), or no reply can still come from any node that has not
 * answered (its request was lost), or, with TIMEOUTS, at any moment. */
#ifdef PIPE
#define PENDING(c, jj, reply) (reply[c*N+jj] == 0 && (acq[c*N+jj] != 0 || hg[c*N+jj] != 0 || xreq[c*N+jj] != 0))
#else
#define PENDING(c, jj, reply) (reply[c*N+jj] == 0 && (acq[c*N+jj] != 0 || xreq[c*N+jj] != 0))
#endif
#define OK(c, jj, reply, ok) (reply[c*N+jj] == ok)
#define DECIDED(c, reply, ok) (TIMEOUT || DECIDABLE(c, reply, ok))
#define DECIDABLE(c, reply, ok) ( \
  (OK(c, 0, reply, ok) + OK(c, 1, reply, ok) + OK(c, 2, reply, ok) + (N > 3 && OK(c, 3, reply, ok)) + (N > 3 && OK(c, 4, reply, ok)) >= Q) || \
  !(PENDING(c, 0, reply) || PENDING(c, 1, reply) || PENDING(c, 2, reply) || (N > 3 && PENDING(c, 3, reply)) || (N > 3 && PENDING(c, 4, reply))))
/* SEND_OK: when client c may start a round. LATE3, for a control that
 * needs only some runs: the third client starts once the second holds. */
#ifdef LATE3
#define SEND_OK(c) (c != 2 || phase[1] == HELD)
#else
#define SEND_OK(c) 1
#endif

/* URGENT: client c's round, write-back or extend can be decided without a
 * timeout. quorum.Round.Await returns at that moment, so the decision is
 * taken in the same tick: the clock waits for it. */
#define URGENT(c) (c < C && ( \
  (phase[c] == ACQ && DECIDABLE(c, rep, GRANTED)) || \
  ((phase[c] == FENCEW || phase[c] == EXT) && DECIDABLE(c, xrep, 1)) || HAND_URGENT(c)))
#ifdef TIMEOUTS
#define TIMEOUT 1
#else
#define TIMEOUT 0
#endif

/* obtained: the lock is held for the ticks left, left. */
inline obtained(c, left) {
  ul[c] = left;
  printf("MSC: client %d: holds %d for %d, fence %d\n", c, tok[c], ul[c], fence[c]);
  exclusive(c);
#if defined(FENCING) && !defined(NOEXCLUSIVE)
  FENCE_ORDER(c);
#elif defined(FENCING)
  FENCE_PAIRS(c);
#endif
  extended[c] = 0; wrote[c] = 0; checked[c] = 0; rl[c] = 0;
  phase[c] = HELD
}

proctype Client(byte c) {
end:
  do
  :: atomic { phase[c] == IDLE && rnd[c] < ATT && SEND_OK(c) -> send(c); CLEAN }
  :: atomic { phase[c] == IDLE && rnd[c] >= ATT -> phase[c] = DONE; LEAVE(c); CLEAN }
  AGAIN(c)
  :: atomic { phase[c] == ACQ && DECIDED(c, rep, GRANTED) ->
       /* The round is decided: at a quorum, or once it cannot change. */
       nn = 0; mm = 0; kk = 0; hh = 0; jj = 0;
       do
       :: jj < N ->
          if
          :: rep[c*N+jj] == GRANTED && (repv[c*N+jj] > 0 || !FENCED) ->
             nn++;
             if
             :: repv[c*N+jj] > hh -> hh = repv[c*N+jj]
             :: else -> skip
             fi
          :: rep[c*N+jj] == GUARDED -> mm++
          :: else -> skip
          fi;
          if
          :: rep[c*N+jj] != 0 && rep[c*N+jj] != GUARDED -> inService[c] = 1
          :: else -> skip
          fi;
          if
          :: rep[c*N+jj] != 0 -> kk++
          :: else -> skip
          fi;
          jj++
       :: else -> break
       od;
       if
       :: nn >= Q && rl[c] > 0 ->
#if defined(FENCING) && !defined(NOWRITEBACK)
          fence[c] = hh;              /* repv is the counter + 1 */
#ifdef NOEXCLUSIVE
          seqs++; seq[c] = seqs;
#endif
          jj = 0;
          do
          :: jj < N ->
             if
             :: rep[c*N+jj] == GRANTED -> xreq[c*N+jj] = XFENCE
             :: else -> skip
             fi;
             jj++
          :: else -> break
          od;
          settle(c);
          phase[c] = FENCEW
#else
          fence[c] = FENCED * hh;
          settle(c);
          obtained(c, rl[c])
#endif
       :: else ->
          /* Client.newDeployment: never in service, every node guarded,
           * each unmarked or marked with the ids seen (hsh: the multiset
           * of the ids, 2 bits per id). Then round.marked: every node
           * still has the state seen, marked with hsh. */
          if
          :: G > 0 && !inService[c] && mm == N && markRound[c] == NONE && estRound[c] == NONE && rnd[c] < R ->
             hsh[c] = 0; kk = 0; jj = 0;
             do
             :: jj < N ->
                assert(repv[c*N+jj] > 0 && repv[c*N+jj] < 8);
                hsh[c] = hsh[c] + (1 << (2*(repv[c*N+jj] - 1)));
                estId[c*N+jj] = repv[c*N+jj]; jj++
             :: else -> break
             od;
             jj = 0;
             do
             :: jj < N ->
                if
                :: repm[c*N+jj] == 0 || repm[c*N+jj] == hsh[c] -> kk++
                :: else -> skip
                fi;
                jj++
             :: else -> break
             od;
             settle(c);
             fail(c);
             if
             :: kk == N ->
#ifdef NOMARK
                estRound[c] = rnd[c];
#else
                markRound[c] = rnd[c];
#endif
                send(c)
             :: else ->
                hsh[c] = 0; jj = 0;
                do
                :: jj < N -> estId[c*N+jj] = 0; jj++
                :: else -> break
                od;
                JOINED(c)
             fi
          :: G > 0 && !inService[c] && mm == N && markRound[c] + 1 == rnd[c] && rnd[c] < R ->
             kk = 0; jj = 0;
             do
             :: jj < N ->
                if
                :: repv[c*N+jj] == estId[c*N+jj] && repm[c*N+jj] == hsh[c] -> kk++
                :: else -> skip
                fi;
                jj++
             :: else -> break
             od;
             settle(c);
             fail(c);
             if
             :: kk == N -> estRound[c] = rnd[c]; send(c)
             :: else -> JOINED(c)
             fi
          :: else ->
             settle(c);
             fail(c);
             JOINED(c)
          fi
       fi; CLEAN }
  :: atomic { phase[c] == FENCEW && DECIDED(c, xrep, 1) ->
       nn = 0; jj = 0;
       do
       :: jj < N ->
          if
          :: xrep[c*N+jj] == 1 -> nn++
          :: else -> skip
          fi;
          jj++
       :: else -> break
       od;
       CLEAR_X(c);
       if
       :: nn >= Q && rl[c] > 0 -> obtained(c, rl[c])
       :: else -> fail(c); rl[c] = 0
       fi; CLEAN }
  /* The holder: extend once, write the resource, unlock. */
#ifdef EXTEND
  :: atomic { phase[c] == HELD && !extended[c] && ul[c] > 0 ->
       extended[c] = 1; xl[c] = T - ALLOW; phase[c] = EXT;
       jj = 0;
       do
       :: jj < N ->
          if
          :: !conn[c*N+jj] -> check(c, jj)
          :: else -> skip
          fi;
          xreq[c*N+jj] = XEXT; xrep[c*N+jj] = 0; jj++
       :: else -> break
       od; CLEAN }
  :: atomic { phase[c] == EXT && DECIDED(c, xrep, 1) ->
       nn = 0; jj = 0;
       do
       :: jj < N ->
          if
          :: xrep[c*N+jj] == 1 -> nn++
          :: else -> skip
          fi;
          jj++
       :: else -> break
       od;
       phase[c] = HELD;
       CLEAR_X(c);
       if
       :: nn >= Q && xl[c] > 0 ->
          ul[c] = xl[c]; exclusive(c)
       :: else -> skip                /* Until stays */
       fi;
       xl[c] = 0; CLEAN }
#endif
#ifdef FENCING
  :: atomic { phase[c] == HELD && !wrote[c] && ul[c] > 0 -> checked[c] = 1; CLEAN }
  :: atomic { checked[c] && !wrote[c] ->
       /* the write, perhaps after a pause: refused below the largest fence */
       wrote[c] = 1; checked[c] = 0;
       if
       :: fence[c] >= resMax ->
          assert(seq[c] >= resSeq);   /* no later holder wrote */
          resMax = fence[c]; resSeq = seq[c]
       :: else -> skip
       fi; CLEAN }
#endif
  :: atomic { phase[c] == HELD ->
       jj = 0;
       do
       :: jj < N && (HANDOFF_ON || MAYHOLD(c, jj)) -> bb = UNLOCK_BIT(c); post(c, jj); jj++
       :: jj < N && !(HANDOFF_ON || MAYHOLD(c, jj)) -> jj++
       :: else -> break
       od;
       checked[c] = 0; ul[c] = 0; wrote[c] = 0; extended[c] = 0; fence[c] = 0; mh[c] = 0;
       phase[c] = IDLE; CLEAN }
  HANDOFF_STEPS(c)
  od
}

#define ENDS_LATER(i) (i >= N || ((key[i] == 0 || kl[i] > 0) && TOMBS_LATER(i)))
#define DOWN(x) if :: x > 0 -> x-- :: else -> skip fi

/* Time: a tick, once every key that must end now has ended, counts down
 * every time left, and drops the requests that are too old (ORPHAN). */
proctype Clock() {
end:
  do
  :: atomic {
       !URGENT(0) && !URGENT(1) && !URGENT(2) &&
       ENDS_LATER(0) && ENDS_LATER(1) && ENDS_LATER(2) && ENDS_LATER(3) && ENDS_LATER(4) && IN_TIME ->
       TICKED;
       jj = 0;
       do
       :: jj < N ->
          DOWN(kl[jj]); DOWN(pkl[jj]); DOWN(idwait[jj]);
          if
          :: g[jj] != NONE && g[jj] > 0 -> g[jj]--
          :: else -> skip
          fi;
          if
          :: pg[jj] != NONE && pg[jj] > 0 -> pg[jj]--
          :: else -> skip
          fi;
          if
          :: pkey[jj] != 0 && pkl[jj] == 0 -> pkey[jj] = 0; pmark[jj] = 0; ptomb[jj] = 0
          :: else -> skip
          fi;
          jj++
       :: else -> break
       od;
       jj = 0;
       do
       :: jj < C -> DOWN(rl[jj]); DOWN(ul[jj]); DOWN(xl[jj]); jj++
       :: else -> break
       od;
       AGE_TICK(); TOMB_TICK(); CLEAN }
  od
}

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < N ->
       g[i] = NONE; f[i] = NONE; pg[i] = NONE; pf[i] = NONE; runid[i] = 1;
#ifdef SYMMETRY
       rid[i] = newId;    /* compared only within a node: one for all */
#else
       rid[i] = newId; newId++;
#endif
       i++
    :: else -> break
    od;
#ifdef SYMMETRY
    newId++;
#endif
#ifndef FRESH
    /* A deployment in service: every node established, its fence known. */
    i = 0;
    do
    :: i < N ->
       st[i] = 1; g[i] = 0; f[i] = 0; rr[i] = rid[i]; rp[i] = runid[i]; sid[i] = 1;
#ifdef LOCKOUT
       everState[i] = 1;
#endif
       pst[i] = 1; pg[i] = 0; pf[i] = 0; prr[i] = rid[i]; prp[i] = runid[i]; psid[i] = 1; /* replicated */
       i++
    :: else -> break
    od;
#endif
    i = 0;
    do
    :: i < C ->
       estRound[i] = NONE; markRound[i] = NONE;
#ifndef FRESH
       inService[i] = 1;
#endif
#ifdef NEWCLIENT
       /* the last client is made now: it has seen no node in service */
       if
       :: i == C - 1 -> inService[i] = 0
       :: else -> skip
       fi;
#endif
       i++
    :: else -> break
    od;
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
    run Clock(); CLEAN
  }
}
