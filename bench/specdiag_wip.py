# Work-in-progress diagnosis for issue #42 (branch only): paths assume /work/main and /work/s42.
"""In-process diagnosis of speculation under concurrency (not committed).

Drives mlxd's Scheduler with S concurrent greedy requests of N tokens
(closed loop: a finished request is replaced at once), total R requests,
with speculation off and with the default (suffix + controller), and
logs every engine step: rows, speculative or not, grid width, accepted,
wall seconds.
"""

import json
import os
import sys
import time
from pathlib import Path

ROOT = Path("/work/main") if len(sys.argv) < 5 else Path(sys.argv[4])
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import mlx.core as mx  # noqa
from mlx_lm.utils import load  # noqa
from models import float32_model  # noqa

from shared.protocol import SamplingDefaults, SamplingParams  # noqa
from worker.engine.scheduler import Scheduler  # noqa
from worker.messages import Admission, TokenStep  # noqa
from worker.sampling.defaults import with_defaults  # noqa
from worker.speculation.controller import DraftController  # noqa
from worker.speculation.drafting import SUFFIX_ORDERS, Speculation  # noqa
from worker.speculation.suffix_index import TokenIndex  # noqa
import worker.engine.batch_engine as be  # noqa

TOPICS = ["rivers", "bread", "chess", "volcanoes", "owls", "trains", "glass", "bees", "tea", "kites",
          "moons", "ink", "salt", "maps", "bells", "clocks", "ferns", "wool", "coral", "dunes"]


def prompt(tok, i):
    t = TOPICS[i % len(TOPICS)]
    text = f"In a few sentences, tell me something interesting about {t} and why people in many places care about them today ({i})."
    return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)


STEPS = []
PAD = []
PREFILL = []


def instrument():
    orig_next = be.LeanGenerationBatch.next

    def next_(self):
        spec = self.speculation
        rows = len(self.uids)
        t0 = time.perf_counter()
        before = (spec.drafted, spec.accepted) if spec else (0, 0)
        out = orig_next(self)
        dt = time.perf_counter() - t0
        c = self.prompt_cache[0] if self.prompt_cache else None
        if c is not None and self.tokens:
            PAD.append((getattr(c, "_idx", 0), max(len(t) for t in self.tokens), min(len(t) for t in self.tokens)))
        idx = getattr(c, "_idx", 0) if c is not None else 0
        if spec is not None:
            STEPS.append((rows, len(out), spec.drafted - before[0], spec.accepted - before[1], dt, idx))
        else:
            STEPS.append((rows, len(out), 0, 0, dt, idx))
        return out

    be.LeanGenerationBatch.next = next_
    orig_prompt = be.LeanPromptBatch.prompt

    def prompt_(self, tokens):
        t0 = time.perf_counter()
        orig_prompt(self, tokens)
        mx.eval([c.state for c in self.prompt_cache] if False else [])
        PREFILL.append((len(tokens), time.perf_counter() - t0))

    be.LeanPromptBatch.prompt = prompt_


def run(model, tok, spec_on, streams, ntok, total, temp=0.0):
    STEPS.clear()
    emitted = []
    spec = None
    if spec_on:
        spec = Speculation(tokens=8, ngram=3, max_batch=32, index=TokenIndex(SUFFIX_ORDERS, budget=131072),
                           controller=DraftController(tokens=8, timed=True), method="suffix")
    sch = Scheduler(model, set(tok.eos_token_ids), emitted.append, cache=None, max_batch_size=32,
                    prefill_batch_size=8, prefill_step_size=512, speculation=spec)
    sch.start()
    nxt = 0
    live = set()
    done_tokens = 0

    def admit():
        nonlocal nxt
        params = with_defaults(SamplingParams(temperature=temp, ignore_eos=True, max_tokens=ntok, seed=nxt if temp else None), SamplingDefaults())
        rid = f"r{nxt}"
        sch.submit(Admission(rid, prompt(tok, nxt), ntok, params, received=time.monotonic()))
        live.add(rid)
        nxt += 1

    for _ in range(streams):
        admit()
    t0 = time.perf_counter()
    sch.apply_pending()
    while live:
        sch.turn()
        while emitted:
            e = emitted.pop()
            if isinstance(e, TokenStep):
                for rid, _, _, fin, _ in e.tokens:
                    done_tokens += 1
                    if fin is not None:
                        live.discard(rid)
                        if nxt < total:
                            admit()
        sch.apply_pending()
    wall = time.perf_counter() - t0
    sch.close()
    return done_tokens, wall, list(STEPS)


def summarize(label, steps):
    import collections
    by = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    for rows, out, dr, acc, dt, _ in steps:
        k = (rows >= 12, dr > 0 or out > rows)
        b = by[k]
        b[0] += 1; b[1] += dt; b[2] += out; b[3] += rows
    for k, (n, t, out, rows) in sorted(by.items()):
        print(f"  {label} wide={k[0]} spec={k[1]}: steps {n} time {t:.2f}s ms/step {1000*t/n:.1f} tokens {out} rows {rows}")


def main():
    streams = int(sys.argv[1]); ntok = int(sys.argv[2]); total = int(sys.argv[3])
    temp = float(os.environ.get("TEMP", "0"))
    model, tok = load(str(float32_model()))
    instrument()
    run(model, tok, False, 4, 8, 4)  # warm
    res = {}
    for rnd in range(int(os.environ.get("ROUNDS", "2"))):
        for on in (False, True):
            n, wall, steps = run(model, tok, on, streams, ntok, total, temp)
            print(f"round {rnd} spec={on}: {n} tokens {wall:.2f}s {n/wall:.1f} tok/s, steps {len(steps)}")
            summarize("on" if on else "off", steps)
            if PAD:
                print("  cache idx vs longest row (tokens incl. prompt), every 40th step:", PAD[::40][:12])
            PAD.clear()
            print(f"  prefill passes {len(PREFILL)}, rows {sum(n for n, _ in PREFILL)}, seconds in prompt() {sum(t for _, t in PREFILL):.2f}")
            PREFILL.clear()
            res.setdefault(on, []).append(n / wall)
            if os.environ.get("DUMP"):
                Path(os.environ["DUMP"] + ("on" if on else "off")).write_text(json.dumps(steps))
    print("ratio", [a / b for a, b in zip(res[True], res[False])])


main()
