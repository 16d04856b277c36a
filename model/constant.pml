/*
 * constant.pml: with CONSTCHECK (and KEEPALL, which keeps every variable
 * in the stored state), every step of redlock.pml ends (in CLEAN) by
 * checking that each group of variables this configuration would hide
 * (redlock.pml's HIDE_* groups) still has the values it had when the
 * first step ended. A change is an error of the run. That each group is
 * constant is what makes hiding it sound; check.sh's const-* runs check
 * it for the configurations they name, and that they store as many
 * states as the same runs with the groups hidden.
 */

#ifdef CONSTCHECK
#ifndef KEEPALL
#error "CONSTCHECK needs KEEPALL: a hidden variable is not in the state it compares"
#endif

c_code {
extern void (*Uerror)(char *);   /* pan's: reports an error */

#define CONST_SAME(v) if (memcmp(&now.v, &constFirst.v, sizeof now.v) != 0) Uerror("CONSTCHECK: " #v " changed");

void
constCheck(void)
{
  static int started;
  static State constFirst;
  if (!started) { constFirst = now; started = 1; return; }
#if HIDE_REPLICA
  CONST_SAME(pkey) CONST_SAME(pkl) CONST_SAME(pg) CONST_SAME(psid) CONST_SAME(pf) CONST_SAME(prr) CONST_SAME(prp)
  CONST_SAME(pmark) CONST_SAME(pst) CONST_SAME(ptomb) CONST_SAME(pmk)
#endif
#if HIDE_FRESHV
  CONST_SAME(mk) CONST_SAME(estRound) CONST_SAME(markRound) CONST_SAME(hsh) CONST_SAME(inService)
  CONST_SAME(estId) CONST_SAME(repm)
#endif
#if HIDE_SERVER
  CONST_SAME(st) CONST_SAME(g) CONST_SAME(sid) CONST_SAME(f) CONST_SAME(rr) CONST_SAME(rid)
  CONST_SAME(newId) CONST_SAME(faults) CONST_SAME(runid) CONST_SAME(rp) CONST_SAME(r2)
  CONST_SAME(idChanges) CONST_SAME(kills) CONST_SAME(idwait)
#endif
#if HIDE_FENCEV
  CONST_SAME(fence) CONST_SAME(seq) CONST_SAME(wrote) CONST_SAME(checked)
  CONST_SAME(resMax) CONST_SAME(resSeq) CONST_SAME(seqs) CONST_SAME(maxFence) CONST_SAME(clk)
#endif
#if HIDE_XV
  CONST_SAME(xl) CONST_SAME(extended) CONST_SAME(xreq) CONST_SAME(xrep)
#endif
}
}
#define CONST_STEP c_code { constCheck(); }
#endif
