/*
 * symmetry.pml: with SYMMETRY, every step of redlock.pml ends (in CLEAN)
 * by clearing the values that are never read again and replacing the
 * state with the canonical member of its class under renaming the nodes
 * and the clients: the least, over every order of the clients, of the
 * state whose nodes are then sorted. redlock.pml's header argues why
 * that is sound. The embedded C runs in pan only: replay a trail with
 * ./pan -r, not spin -t. It needs the bounds and defines of the
 * handoff's runs: no fault, no fresh deployment (every replication ID
 * and state id is then the initial one), and none of the defines that add
 * per-client or per-node variables this does not rename.
 */

#ifdef SYMMETRY
#if defined(CRASH) || defined(FAILOVER) || defined(FRESH) || defined(ORPHAN) || \
    defined(FENCING) || defined(EXTEND) || defined(LOCKOUT) || defined(LIVE) || \
    defined(IDCHANGE) || defined(KILL) || defined(NEWCLIENT)
#error "SYMMETRY: only for runs without faults, new events, FRESH, NEWCLIENT, ORPHAN, FENCING, EXTEND, LOCKOUT or LIVE"
#endif
#if C > 3 || R > 2 || N > 5
#error "SYMMETRY: at most 5 nodes, 3 clients and 2 rounds"
#endif

c_code {
/* The state is read into one flat record per node and per client. A
 * node's record holds everything that names it: its own variables (mark
 * key kl tomb, and with HANDOFF line0 line1), then for each client the
 * requests and replies between the two (acq rel rep repv conn, and ann)
 * and the node's bit in the client's masks (mh, and handed). A client's
 * record holds the rest of it (byHand rnd tok rl ul phase). Nodes with
 * equal records are interchangeable. The variables of redlock.pml's
 * HIDE_* groups are left out: without faults, FRESH, FENCING or EXTEND
 * they are hidden, and keep one value on every node and for every
 * client. */
#ifdef HANDOFF
#define SYM_NF 6
#define SYM_PF 8
#define SYM_BYHAND(c) now.byHand[c]
#else
#define SYM_NF 4
#define SYM_PF 6
#define SYM_BYHAND(c) 0
#endif
#define SYM_NK (SYM_NF + C * SYM_PF)
#define SYM_CF 6
#define SYM_LEN (N * SYM_NK + C * SYM_CF)
/* Token-valued places: in a node's own part, key line0 line1 (and tomb,
 * a set of tokens); in a column, ann; in a client's record, tok. */
#define SYM_KEY 1
#define SYM_TOMB 3
#define SYM_LINE0 4
#define SYM_LINE1 5
#define SYM_ANN 6
#define SYM_TOK 2

/* The orders of the clients: every one, or the identity only with
 * LATE3 (whose third client waits for the second) and without HANDOFF
 * (whose runs rename the nodes only). sg[c]: client c's new index. */
#if defined(LATE3) || !defined(HANDOFF)
#define SYM_NP 1
static const uchar symOrders[1][3] = {{0, 1, 2}};
#elif C == 3
#define SYM_NP 6
static const uchar symOrders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
#elif C == 2
#define SYM_NP 2
static const uchar symOrders[2][3] = {{0, 1, 0}, {1, 0, 0}};
#else
#define SYM_NP 1
static const uchar symOrders[1][3] = {{0, 0, 0}};
#endif

/* symTokTab[k][t]: token (or hand value) t renamed by order k; symTombTab[k][m]:
 * the tombstone set m (bit t: token t's) renamed. */
static uchar symTokTab[SYM_NP][256], symTombTab[SYM_NP][256];
static int symReady;

static void
symInit(void)
{
  int k, t, m, b;
  for (k = 0; k < SYM_NP; k++) {
    for (t = 0; t < 256; t++) {
      b = (t & ~HAND) - 1;
      symTokTab[k][t] = (t & ~HAND) == 0 || b >= C * R ? t :
        (t & HAND) | (symOrders[k][b / R] * R + b % R + 1);
    }
    for (m = 0; m < 256; m++) {
      symTombTab[k][m] = 0;
      for (t = 1; t <= C * R; t++)
        if (m & (1 << t)) symTombTab[k][m] |= 1 << symTokTab[k][t];
    }
  }
  symReady = 1;
}

void
symCanon(void)
{
  uchar node[N][SYM_NK], cli[C][SYM_CF];
  uchar cand[SYM_LEN], best[SYM_LEN];
  int i, j, c, k, x;
  if (!symReady) symInit();
#ifdef HANDOFF
  /* Dead values first (redlock.pml's header argues each). */
  for (c = 0; c < C; c++) {
    now.mh[c] = 0;
    if (now.phase[c] != ACQ && now.phase[c] != WAIT) { now.handed[c] = 0; now.tok[c] = 0; }
    if (now.phase[c] != HELD) now.byHand[c] = 0;
  }
  for (i = 0; i < N; i++)
    for (c = 0; c < C; c++)
      for (j = 0; j < R; j++)
        if (now.rnd[c] > j && !(now.acq[c * N + i] & (1 << j)))
          now.tomb[i] &= ~(1 << (c * R + j + 1));
#endif
  for (i = 0; i < N; i++) {
    uchar *n = node[i];
    n[0] = now.mark[i]; n[1] = now.key[i]; n[2] = now.kl[i]; n[3] = now.tomb[i];
#ifdef HANDOFF
    n[4] = now.line0[i]; n[5] = now.line1[i];
#endif
    for (c = 0; c < C; c++) {
      uchar *p = n + SYM_NF + c * SYM_PF; x = c * N + i;
      p[0] = now.acq[x]; p[1] = now.rel[x]; p[2] = now.rep[x]; p[3] = now.repv[x];
      p[4] = now.conn[x]; p[5] = (now.mh[c] >> i) & 1;
#ifdef HANDOFF
      p[6] = now.ann[x]; p[7] = (now.handed[c] >> i) & 1;
#endif
    }
  }
  for (c = 0; c < C; c++) {
    uchar *r = cli[c];
    r[0] = SYM_BYHAND(c); r[1] = now.rnd[c]; r[2] = now.tok[c];
    r[3] = now.rl[c]; r[4] = now.ul[c]; r[5] = now.phase[c];
  }
  /* The least, over the orders of the clients, of the records renamed
   * by it with the nodes then sorted. */
  for (k = 0; k < SYM_NP; k++) {
    const uchar *sg = symOrders[k], *tk = symTokTab[k];
    for (i = 0; i < N; i++) {
      uchar *o = cand + i * SYM_NK;
      const uchar *n = node[i];
      memcpy(o, n, SYM_NF);
      o[SYM_KEY] = tk[n[SYM_KEY]];
      o[SYM_TOMB] = symTombTab[k][n[SYM_TOMB]];
#ifdef HANDOFF
      o[SYM_LINE0] = tk[n[SYM_LINE0]]; o[SYM_LINE1] = tk[n[SYM_LINE1]];
#endif
      for (c = 0; c < C; c++) {
        uchar *q = o + SYM_NF + sg[c] * SYM_PF;
        memcpy(q, n + SYM_NF + c * SYM_PF, SYM_PF);
#ifdef HANDOFF
        q[SYM_ANN] = tk[q[SYM_ANN]];
#endif
      }
    }
    for (c = 0; c < C; c++) {
      uchar *r = cand + N * SYM_NK + sg[c] * SYM_CF;
      memcpy(r, cli[c], SYM_CF);
      r[SYM_TOK] = tk[r[SYM_TOK]];
    }
    /* sort the node records in place (insertion sort, N <= 5) */
    for (i = 1; i < N; i++)
      for (j = i; j > 0 && memcmp(cand + (j - 1) * SYM_NK, cand + j * SYM_NK, SYM_NK) > 0; j--) {
        uchar t[SYM_NK];
        memcpy(t, cand + j * SYM_NK, SYM_NK);
        memcpy(cand + j * SYM_NK, cand + (j - 1) * SYM_NK, SYM_NK);
        memcpy(cand + (j - 1) * SYM_NK, t, SYM_NK);
      }
    if (k == 0 || memcmp(cand, best, SYM_LEN) < 0) memcpy(best, cand, SYM_LEN);
  }
  for (c = 0; c < C; c++) now.mh[c] = 0;
#ifdef HANDOFF
  for (c = 0; c < C; c++) now.handed[c] = 0;
#endif
  for (i = 0; i < N; i++) {
    const uchar *n = best + i * SYM_NK;
    now.mark[i] = n[0]; now.key[i] = n[1]; now.kl[i] = n[2]; now.tomb[i] = n[3];
#ifdef HANDOFF
    now.line0[i] = n[4]; now.line1[i] = n[5];
#endif
    for (c = 0; c < C; c++) {
      const uchar *p = n + SYM_NF + c * SYM_PF; x = c * N + i;
      now.acq[x] = p[0]; now.rel[x] = p[1]; now.rep[x] = p[2]; now.repv[x] = p[3];
      now.conn[x] = p[4]; now.mh[c] |= p[5] << i;
#ifdef HANDOFF
      now.ann[x] = p[6]; now.handed[c] |= p[7] << i;
#endif
    }
  }
  for (c = 0; c < C; c++) {
    const uchar *r = best + N * SYM_NK + c * SYM_CF;
#ifdef HANDOFF
    now.byHand[c] = r[0];
#endif
    now.rnd[c] = r[1]; now.tok[c] = r[2];
    now.rl[c] = r[3]; now.ul[c] = r[4]; now.phase[c] = r[5];
  }
}
}
#define CANON c_code { symCanon(); }
#endif
