"""Issue #21: first tokens of this tree's mlxd against another commit's, under
a burst and under spread arrivals, in one run.

Both gateways (this checkout, and ``--baseline`` checked out into a
temporary git worktree) serve the same float32 SmolLM2 directory
(:func:`models.float32_model`) with the same config, one worker each,
OpenBLAS preloaded as ``make bench`` does. Rounds alternate the order of
the two, so a machine shared with other work loads both alike. Each round:

* burst: ``--streams`` chats sent at once, each with its own long prompt
  (``--prompt-words`` words, so rendering and tokenizing each one takes
  longer than the idle engine's 4 ms burst gap), ``--tokens`` greedy
  tokens with ``ignore_eos``;
* spread: ``--spread`` chats one every ``--gap-ms`` ms, short prompts.

Prints TTFT p50/p95 and aggregate tokens/s per tree and workload (best
round by p50, worst beside it), the engine steps each burst took (from the
worker's status: fewer steps for the same tokens means the burst was
prefilled in fewer groups), and the ratios this tree / baseline. Never
asserts. Usage::

    .venv/bin/python bench/burst_ab.py [--baseline 9a2bae3] [--rounds 3]
        [--streams 16] [--tokens 16] [--prompt-words 400] [--spread 16] [--gap-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import Result, blas_environment, concurrent, median, percentile, spread  # noqa: E402
from models import float32_model  # noqa: E402

from tests.conftest import Server, free_port, write_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = "smollm2"
WORDS = "river stone lantern orchard signal harbor meadow copper violin glacier".split()


def prompt(i: int, words: int, tag: str) -> list[dict]:
    """A distinct chat of about ``words`` words (no two share a prefix
    beyond the chat template)."""
    text = " ".join(WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(words))
    return [{"role": "user", "content": f"({tag}-{i}) Summarize: {text}"}]


def chat_body(messages: list[dict], tokens: int) -> dict:
    """A greedy streaming body that runs exactly ``tokens`` tokens."""
    return {"model": NAME, "messages": messages, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}


@contextlib.contextmanager
def gateway(tree: Path, tmp: Path, model_dir: Path):
    """An mlxd gateway run from ``tree`` (its code, its worker) serving
    ``model_dir``; stopped on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    model = {"name": NAME, "source": str(model_dir), "max_batch_size": 32, "preload": True}
    config = write_config(tmp / "mlxd.toml", port, [model], [])
    log_path = tmp / "gateway.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
            cwd=tree,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **blas_environment(), "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"},
        )
    server = Server(f"http://127.0.0.1:{port}", proc, None, log_path)
    try:
        server.wait_listening()
        server.wait_ready(NAME)
        yield server
    finally:
        server.stop()


def steps(server: Server) -> int:
    """The worker's engine steps so far."""
    return int(server.worker(NAME)["stats"]["steps"])


def summary(results: list[Result], wall: float) -> tuple[float, float, float]:
    """TTFT p50 and p95 in ms and aggregate tokens/s."""
    ttfts = [r.ttft for r in results if r.error is None]
    errors = [r.error for r in results if r.error]
    if errors:
        print(f"  {len(errors)} of {len(results)} requests failed, e.g. {errors[0]}", flush=True)
    if not ttfts:
        return float("nan"), float("nan"), 0.0
    return median(ttfts) * 1000, percentile(ttfts, 95) * 1000, sum(r.tokens for r in results) / wall


def main() -> None:
    """Run the A/B and print the table and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", default="9a2bae3")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--prompt-words", type=int, default=400)
    parser.add_argument("--spread", type=int, default=16)
    parser.add_argument("--gap-ms", type=float, default=200)
    args = parser.parse_args()
    model_dir = float32_model()
    with tempfile.TemporaryDirectory(prefix="mlxd-burst-ab-") as tmp_name:
        tmp = Path(tmp_name)
        old_tree = tmp / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(old_tree), args.baseline], check=True
        )
        try:
            with contextlib.ExitStack() as stack:
                trees = {
                    "this tree": stack.enter_context(gateway(ROOT, tmp / "new", model_dir)),
                    f"baseline {args.baseline}": stack.enter_context(gateway(old_tree, tmp / "old", model_dir)),
                }
                rows: dict[tuple[str, str], list[tuple[float, float, float, int]]] = {}
                for r in range(args.rounds):
                    order = list(trees.items())[r % 2 :] + list(trees.items())[: r % 2]
                    for label, server in order:
                        before = steps(server)
                        bodies = [
                            chat_body(prompt(i, args.prompt_words, f"b{r}"), args.tokens) for i in range(args.streams)
                        ]
                        results, wall = asyncio.run(concurrent(f"{server.url}/v1/chat/completions", bodies))
                        rows.setdefault((label, "burst"), []).append((*summary(results, wall), steps(server) - before))
                        time.sleep(1)
                        bodies = [chat_body(prompt(i, 12, f"s{r}"), args.tokens * 4) for i in range(args.spread)]
                        results, wall = asyncio.run(
                            spread(f"{server.url}/v1/chat/completions", bodies, args.gap_ms / 1000)
                        )
                        rows.setdefault((label, "spread"), []).append((*summary(results, wall), 0))
                        time.sleep(1)
                    print(f"round {r + 1} of {args.rounds} done", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)], check=False)
    print(
        f"\n{args.streams} simultaneous chats of ~{args.prompt_words} words x {args.tokens} tokens; "
        f"{args.spread} chats {args.gap_ms:.0f} ms apart x {args.tokens * 4} tokens; best round by TTFT p50"
    )
    print(f"{'tree':<22} {'workload':<8} {'TTFT p50':>9} {'(worst)':>9} {'TTFT p95':>9} {'agg tok/s':>9} {'steps':>6}")
    best: dict[tuple[str, str], tuple[float, float, float, int]] = {}
    for (label, workload), runs in rows.items():
        top = min(runs, key=lambda x: x[0])
        best[(label, workload)] = top
        worst = max(x[0] for x in runs)
        step_text = str(top[3]) if workload == "burst" else "-"
        print(
            f"{label:<22} {workload:<8} {top[0]:>7.0f}ms {worst:>7.0f}ms {top[1]:>7.0f}ms {top[2]:>9.1f} {step_text:>6}"
        )
    labels = list(dict.fromkeys(label for label, _ in rows))
    for workload in ("burst", "spread"):
        new, old = best[(labels[0], workload)], best[(labels[1], workload)]
        print(
            f"{workload}: this tree / baseline: TTFT p50 {new[0] / old[0]:.2f}x, p95 {new[1] / old[1]:.2f}x, "
            f"aggregate {new[2] / old[2]:.2f}x"
        )


if __name__ == "__main__":
    main()
