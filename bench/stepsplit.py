"""Where one decode step of the mlxd worker spends its time, in process.

Loads a model (OpenBLAS preloaded by re-executing itself with mlxd's worker
environment), fills a batch of N greedy sequences the way mlxd's scheduler
does, and times, per step (median over the steps, milliseconds):

* ``engine.next``: mlx-lm's ``BatchGenerator.next()``, what the scheduler
  thread calls once per step;
* ``scheduler step``: mlxd's ``Scheduler._run_step`` around it, and its
  own bookkeeping alone (token events, counters, the hand-off to the output
  thread);
* the pieces of ``GenerationBatch._step`` on their own: the forward pass,
  the log-softmax (``logsumexp``) over the vocabulary, the greedy
  ``argmax``, splitting the log-probabilities into one array per row;
* a lean greedy loop: forward, ``argmax``, ``async_eval`` and one
  ``tolist`` a step, with no log-probabilities at all;
* mlxd's own ``BatchEngine.next`` (``worker/engine/batch_engine.py``) for plain greedy
  rows, temperature-sampled rows and rows with log-probabilities, with
  sampling on the host (NumPy) and on the device (MLX);
* the output thread: ``OutputLoop`` handling one step's tokens
  (detokenize, build ``RequestOutput``s, encode the ``StepOutputs``).

Usage: ``.venv/bin/python bench/stepsplit.py [--model real|tiny|DIR]
[--batch 16,32] [--steps 20]``. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def timed(fn, steps: int) -> float:
    """Median milliseconds of ``fn()`` over ``steps`` calls (after one warm-up)."""
    fn()
    samples = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def prompts(tokenizer, n: int) -> list[list[int]]:
    """``n`` short distinct chat prompts, rendered like the bench's."""
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"Write a long, detailed story about topic {i}."}],
            add_generation_prompt=True,
        )
        for i in range(n)
    ]


def fill(engine, batch: list[list[int]], max_tokens: int = 100_000) -> None:
    """Insert ``batch`` and step until every sequence is decoding."""
    engine.insert(batch, max_tokens=[max_tokens] * len(batch))
    while len(engine._generation_batch) < len(batch):
        engine.next()


def split_engine(model, tokenizer, n: int, steps: int) -> dict[str, float]:
    """``BatchGenerator.next`` and the pieces of its decode step."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    from worker.sampling.samplers import greedy

    engine = BatchGenerator(model, stop_tokens=None, sampler=greedy, completion_batch_size=32, prefill_batch_size=32)
    fill(engine, prompts(tokenizer, n))
    out: dict[str, float] = {}
    out["engine.next (BatchGenerator)"] = timed(engine.next, steps)
    gen = engine._generation_batch
    cache = gen.prompt_cache
    tokens = mx.array([[1]] * n)
    with mx.stream(engine.stream):

        def forward():
            mx.eval(model(tokens, cache=cache)[:, -1, :])

        vocab = model(tokens, cache=cache)[:, -1, :]
        mx.eval(vocab)

        def logsumexp():
            mx.eval(vocab - mx.logsumexp(vocab, axis=-1, keepdims=True))

        def argmax():
            mx.eval(mx.argmax(vocab, axis=-1))

        logprobs = vocab - mx.logsumexp(vocab, axis=-1, keepdims=True)
        mx.eval(logprobs)

        def split_rows():
            rows = list(logprobs)
            mx.eval(rows)

        out["  forward pass"] = timed(forward, steps)
        out["  log-softmax over the vocabulary"] = timed(logsumexp, steps)
        out["  greedy argmax"] = timed(argmax, steps)
        out["  split logprobs into rows + eval"] = timed(split_rows, steps)

        state = {"next": mx.argmax(model(tokens, cache=cache)[:, -1, :], axis=-1)}
        mx.async_eval(state["next"])

        def lean():
            current = state["next"]
            state["next"] = mx.argmax(model(current[:, None], cache=cache)[:, -1, :], axis=-1)
            mx.async_eval(state["next"])
            current.tolist()

        out["lean greedy loop (forward+argmax, async)"] = timed(lean, steps)
    engine.close()
    return out


def split_scheduler(model, tokenizer, model_dir: Path, n: int, steps: int) -> dict[str, float]:
    """mlxd's scheduler step and output-thread work for one step of ``n``."""
    from shared.codec import worker_codec
    from shared.protocol import SamplingDefaults, SamplingParams, WorkerStats
    from worker.engine.scheduler import Scheduler
    from worker.messages import Admission, TokenStep
    from worker.output.detok import TokenDecoder
    from worker.output.loop import OutputLoop
    from worker.sampling.defaults import with_defaults

    emitted: list = []
    scheduler = Scheduler(
        model,
        set(tokenizer.eos_token_ids),
        emitted.append,
        cache=None,
        max_batch_size=32,
        prefill_batch_size=32,
        prefill_step_size=512,
    )
    scheduler._engine = scheduler._new_engine()
    params = with_defaults(SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=100_000), SamplingDefaults())
    for i, prompt in enumerate(prompts(tokenizer, n)):
        scheduler._admit(Admission(f"r{i}", prompt, 100_000, params, received=time.monotonic()))
    while len(scheduler._engine._generation_batch) < n:
        scheduler._run_step()
    engine_only = timed(scheduler._engine.next, steps)
    with_scheduler = timed(scheduler._run_step, steps)
    progress, responses = scheduler._engine.next()
    bookkeeping = timed(lambda: (scheduler._scheduled(progress, responses), scheduler._events(responses)), steps)

    codec = worker_codec()
    sent: list[int] = []
    loop = OutputLoop(
        "bench", send=lambda m: sent.append(len(codec.encode(m))), release=lambda item: None, stats=WorkerStats
    )
    loop.decoder = TokenDecoder(tokenizer, model_dir)
    starts = [e for e in emitted if not isinstance(e, TokenStep)]
    for item in starts:
        loop._handle(item)
    step = next(e for e in reversed(emitted) if isinstance(e, TokenStep) and len(e.tokens) == n)
    out_ms = timed(lambda: loop._handle(step), steps)
    scheduler._engine.close()
    return {
        "engine.next (inside the scheduler)": engine_only,
        "Scheduler._run_step (engine + mlxd bookkeeping)": with_scheduler,
        "  mlxd bookkeeping (_scheduled + _events)": bookkeeping,
        "output thread: one step's tokens -> StepOutputs": out_ms,
        "  per token (us)": out_ms * 1000 / n,
    }


def split_sampling(model, tokenizer, n: int, steps: int) -> dict[str, float]:
    """mlxd's ``BatchEngine.next`` for ``n`` rows that are plain greedy, sampled
    at temperature 0.8, or greedy with log-probabilities, on the host (NumPy)
    and the device (MLX) sampling paths."""
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import TokenSampler, greedy

    out: dict[str, float] = {}
    kinds = {
        "plain greedy": lambda: None,
        "temperature 0.8, top_p 0.95": lambda: TokenSampler(0.8, top_p=0.95),
        "greedy + log-probabilities": lambda: TokenSampler(0.0, logprobs=True),
    }
    for kind, make in kinds.items():
        for host in (True, False):
            if kind == "plain greedy" and not host:
                continue
            engine = BatchEngine(model, host_sampling=host, stop_tokens=None, sampler=greedy, prefill_batch_size=32)
            batch = prompts(tokenizer, n)
            engine.insert(batch, max_tokens=[100_000] * n, samplers=[make() for _ in batch])
            while len(engine._generation_batch) < n:
                engine.next()
            where = "" if kind == "plain greedy" else (" (host)" if host else " (device)")
            out[f"mlxd BatchEngine.next: {kind}{where}"] = timed(engine.next, steps)
            engine.close()
    return out


def main() -> None:
    """Parse arguments, load the model, print the split per batch size."""
    parser = argparse.ArgumentParser(description="Split a decode step's time.")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batch", default="16,32")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    if "LD_PRELOAD" not in os.environ:
        from harness import blas_environment

        env = blas_environment()
        if "LD_PRELOAD" in env:
            os.execve(sys.executable, [sys.executable, *sys.argv], env)
    from mlx_lm.utils import load
    from models import float32_model, tiny_model

    model_dir = {"real": float32_model, "tiny": tiny_model}.get(args.model, lambda: Path(args.model))()
    model, tokenizer = load(str(model_dir))
    print(f"model {model_dir.name}; LD_PRELOAD={os.environ.get('LD_PRELOAD', '')}; median ms per step")
    for n in (int(x) for x in args.batch.split(",")):
        rows = split_engine(model, tokenizer, n, args.steps)
        rows.update(split_scheduler(model, tokenizer, model_dir, n, args.steps))
        rows.update(split_sampling(model, tokenizer, n, args.steps))
        print(f"\nbatch {n}:")
        for name, ms in rows.items():
            print(f"  {name:<52} {ms:8.2f}")


if __name__ == "__main__":
    main()
