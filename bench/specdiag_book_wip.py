import runpy, sys
sys.path.insert(0, "/work/s42")
import worker.speculation.controller as C
orig = C.DraftController._book
LOG = []
def book(self, pending, extra, after_clean):
    step, seconds, clean = pending
    before = self.credit
    orig(self, pending, extra, after_clean)
    plain = self.plain_seconds(step.rows)
    LOG.append((step.kind, step.rows, step.width, step.probe, round(seconds*1000), round(extra*1000), round((plain or 0)*1000), step.accepted, round(before,2), round(self.credit,2)))
C.DraftController._book = book
orig_choose = C.DraftController._choose
def choose(self, rows, eligible):
    r = orig_choose(self, rows, eligible)
    if r[0] > 1 and not r[2]:
        LOG.append(("plan", rows, r[0], round(self.cost(rows, r[0]),2), {w: round(v,2) for w, v in sorted(self._ratios.get(C.bucket(rows), {}).items())}, round(sum(self.expected(u)[r[0]-1] for u in eligible),2)))
    return r
C.DraftController._choose = choose
sys.argv = ["specdiag.py", "16", "64", "64", "/work/s42"]
import os; os.environ["ROUNDS"] = "1"
try:
    runpy.run_path("/tmp/s13/specdiag.py", run_name="__main__")
finally:
    for l in LOG[:80]: print(l)
