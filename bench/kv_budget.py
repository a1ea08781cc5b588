"""KV-budget benchmark: 32 concurrent long prompts under a small
``kv_budget`` finish with MLX's peak memory within the budget.

Two gateways, one after the other in one run, each the default config of
``make run`` (``configs/mlxd.toml``: its ``[server]`` settings and its
first ``[[models]]`` table, the default model SmolLM2-135M) and differing
only in the model's ``kv_budget``:

* ``budget``: ``--budget`` (default 1GiB: on this model, float32 on CPU at
  45 KiB of KV per token, a row of ~1.2k prompt tokens is admitted at
  about 140 MB (its prompt, its output and the cache's growth step, held
  twice: see :mod:`worker.engine.kv_budget`), so about 7 of the 32 rows
  fit at once and the rest wait for memory);
* ``none``: ``kv_budget = 0``.

(Each gateway also gets its own empty disk tier directory, so neither
reads the other's prefix-cache entries.) Each gateway is waited on
``/ready``; then ``--requests`` distinct greedy chat requests (prompts of
``--min-words`` to ``--max-words`` random words, about 0.9-1.2k tokens
with the chat template, ``--max-tokens`` output tokens with
``ignore_eos``) are sent at once. (With at most :data:`LOOKAHEAD
<worker.engine.kv_budget.LOOKAHEAD>` output tokens an admitted row has
room for all of its output, so preemptions should stay 0 here. On a
quiet 2-core machine a few minutes per side; with other sessions'
tests running, 10-15.)

Prints, per side: MLX's peak memory above the weights (the worker's
``peak_memory_bytes`` from ``/v1/status`` after the run, less the MLX
memory the worker reported when the model had loaded, which the gateway
logs), that peak at ``/ready`` (what loading and warm-up left), wall time,
output tokens/s, the KV counters (requests that waited for memory,
preemptions) and how many requests were answered; then the ratios
peak above weights / budget (expect <= 1) and throughput with the budget /
without (the prediction in ``bench/NOTES.md``: >= 0.85), and how many
greedy answers are equal between the two sides. Nothing here asserts;
with ``--write`` the numbers go to ``bench/results/kv_budget.json``.

Usage: ``python bench/kv_budget.py [--budget 1GiB] [--requests 32]
[--max-tokens 64] [--min-words 800] [--max-words 1100] [--write]``; a
smoke run: ``--requests 4 --max-tokens 16 --min-words 100 --max-words 200
--budget 256MiB``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import tempfile
import time
import tomllib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import ROOT, concurrent, ratio_line  # noqa: E402
from record import add_write_flag  # noqa: E402
from record import write as write_results  # noqa: E402

from shared.config_values import parse_size  # noqa: E402
from tests.conftest import Server, start_server  # noqa: E402

CONFIG = ROOT / "configs" / "mlxd.toml"
"""The config ``make run`` serves."""

SERVER_KEYS_SET_BY_HARNESS = frozenset({"host", "port", "api_keys", "pid_file"})
"""``[server]`` keys the test harness writes itself (a free loopback port, no keys)."""

LOADED_LINE = re.compile(r"model (\S+) loaded in .*MLX memory: (\d+) MiB")
"""The gateway's log line for a worker's ``Loaded`` message, with the MLX
memory in use once the model had loaded (whole MiB)."""

WORDS = (
    "river stone market window garden engine letter silver morning cable forest ladder "
    "planet harbor signal pencil valley rocket candle mirror island basket thunder copper"
).split()

HEARTBEAT_WAIT = 2.5
"""Seconds to wait after the run for a heartbeat to carry the final counters."""


def default_server_and_model(path: Path = CONFIG) -> tuple[dict, dict]:
    """The ``[server]`` table (less what the harness sets) and the first
    ``[[models]]`` table of the config at ``path``."""
    config = tomllib.loads(path.read_text())
    server = {k: v for k, v in config.get("server", {}).items() if k not in SERVER_KEYS_SET_BY_HARNESS}
    return server, dict(config["models"][0])


def prompts(count: int, min_words: int, max_words: int, seed: int = 0) -> list[str]:
    """``count`` distinct prompts of ``min_words`` to ``max_words`` random
    words each (each begins with its index, so no two share a prefix past
    the chat template)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words)))
        out.append(f"Document {i}: {words}\n\nSummarise document {i} in detail.")
    return out


@dataclass
class Answer:
    """One non-streamed request: its text, output and prompt tokens, the
    seconds it took, and the error when it failed (then ``text`` is empty)."""

    text: str = ""
    tokens: int = 0
    prompt_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass
class Side:
    """One gateway's measurements (see the module docstring)."""

    label: str
    budget_bytes: int
    weights_bytes: int = 0
    peak_at_ready_bytes: int = 0
    peak_bytes: int = 0
    wall_s: float = 0.0
    answers: list[Answer] = field(default_factory=list)
    kv: dict = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Output tokens over every answered request."""
        return sum(a.tokens for a in self.answers)

    @property
    def rate(self) -> float:
        """Output tokens per second of wall time (0 when nothing ran)."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def answered(self) -> int:
        """Requests that returned an answer."""
        return sum(a.error is None for a in self.answers)

    @property
    def above_weights(self) -> int:
        """MLX's peak memory above the weights."""
        return self.peak_bytes - self.weights_bytes

    def as_dict(self) -> dict:
        """The side's numbers for ``bench/results/kv_budget.json``."""
        return {
            "kv_budget_bytes": self.budget_bytes,
            "weights_bytes": self.weights_bytes,
            "peak_at_ready_bytes": self.peak_at_ready_bytes,
            "peak_bytes": self.peak_bytes,
            "peak_above_weights_bytes": self.above_weights,
            "wall_s": self.wall_s,
            "output_tokens": self.tokens,
            "tokens_per_s": self.rate,
            "answered": self.answered,
            "requests": len(self.answers),
            "kv": self.kv,
            "errors": [a.error for a in self.answers if a.error],
        }


async def ask(client: httpx.AsyncClient, url: str, body: dict) -> Answer:
    """Send one non-streamed chat request; never raises (a failure is the
    answer's ``error``)."""
    started = time.perf_counter()
    try:
        response = await client.post(url, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        data = response.json()
        usage = data.get("usage") or {}
        return Answer(
            text=data["choices"][0]["message"].get("content") or "",
            tokens=usage.get("completion_tokens", 0),
            prompt_tokens=usage.get("prompt_tokens", 0),
            seconds=time.perf_counter() - started,
        )
    except (httpx.HTTPError, RuntimeError, ValueError, KeyError, IndexError) as exc:
        return Answer(seconds=time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}"[:200])


def model_status(url: str, name: str) -> dict:
    """``name``'s entry of ``GET /v1/status``."""
    status = httpx.get(f"{url}/v1/status", timeout=10).json()
    return next(m for m in status["models"] if m["name"] == name)


def wait_ready(url: str, timeout: float = 300) -> None:
    """Wait until ``GET /ready`` answers 200.

    Raises:
        TimeoutError: it did not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"{url}/ready did not answer 200 in {timeout:.0f} s")


def loaded_memory(log: str, name: str) -> int:
    """The MLX memory (bytes, MiB resolution) ``name``'s worker reported in
    use once its model had loaded, from the gateway's log ``log``.

    Raises:
        LookupError: the log has no such line.
    """
    for match in LOADED_LINE.finditer(log):
        if match.group(1) == name:
            return int(match.group(2)) << 20
    raise LookupError(f"no 'model {name} loaded ... MLX memory' line in the gateway log")


def measure(tmp: Path, label: str, server_cfg: dict, model: dict, bodies: list[dict]) -> Side:
    """Start a gateway for ``model`` (``server_cfg`` its ``[server]``), send
    ``bodies`` at once, read its status after a heartbeat, stop it."""
    name = model["name"]
    with gateway(tmp / label, model, server_cfg) as server:
        wait_ready(server.url)
        time.sleep(HEARTBEAT_WAIT)
        side = Side(label, budget_bytes=0)
        side.weights_bytes = loaded_memory(server.log_path.read_text(), name)
        side.peak_at_ready_bytes = model_status(server.url, name)["memory"]["mlx_peak_bytes"]
        side.answers, side.wall_s = asyncio.run(
            concurrent(f"{server.url}/v1/chat/completions", bodies, send=ask, timeout=900)
        )
        time.sleep(HEARTBEAT_WAIT)
        status = model_status(server.url, name)
        side.peak_bytes = status["memory"]["mlx_peak_bytes"]
        side.kv = status["kv"]
        side.budget_bytes = status["kv"]["budget_bytes"]
    return side


@contextmanager
def gateway(tmp: Path, model: dict, server_cfg: dict) -> Iterator[Server]:
    """Run a gateway serving ``model`` (a ``[[models]]`` table) with
    ``server_cfg`` as its ``[server]`` keys, without API keys (as
    :func:`harness.mlxd`, which writes no ``[server]`` keys); stop it on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    server = start_server(tmp, [model], api_key=None, **server_cfg)
    try:
        yield server
    finally:
        server.stop()


def mib(nbytes: int) -> str:
    """``nbytes`` in MiB, one decimal."""
    return f"{nbytes / (1 << 20):.1f} MiB"


def print_side(side: Side) -> None:
    """One block of lines for ``side``."""
    budget = mib(side.budget_bytes) if side.budget_bytes else "none"
    print(f"[{side.label}] kv_budget {budget}; weights (MLX memory at load) {mib(side.weights_bytes)}")
    print(
        f"  peak above weights: at /ready {mib(side.peak_at_ready_bytes - side.weights_bytes)}, "
        f"after the run {mib(side.above_weights)}"
    )
    print(
        f"  wall {side.wall_s:.1f} s, {side.tokens} output tokens, {side.rate:.1f} tok/s; "
        f"answered {side.answered}/{len(side.answers)}; kv waited {side.kv.get('waited', 0)}, "
        f"preemptions {side.kv.get('preemptions', 0)}"
    )
    for answer in side.answers:
        if answer.error:
            print(f"  error: {answer.error}")
    sys.stdout.flush()


def main() -> None:
    """Run both sides, print them and the ratios (and with ``--write``
    write ``bench/results/kv_budget.json``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--budget", default="1GiB", help="kv_budget of the budgeted side (a size or bytes)")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--min-words", type=int, default=800)
    parser.add_argument("--max-words", type=int, default=1100)
    args = parser.parse_args()
    server_cfg, model = default_server_and_model()
    texts = prompts(args.requests, args.min_words, args.max_words)
    bodies = [
        {
            "model": model["name"],
            "messages": [{"role": "user", "content": text}],
            "max_tokens": args.max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        for text in texts
    ]
    budget = parse_size(args.budget, 0)
    print(
        f"kv_budget on {model['name']} ({model['source']}): {args.requests} concurrent greedy requests, "
        f"{args.min_words}-{args.max_words} words, {args.max_tokens} output tokens each",
        flush=True,
    )
    sides = []
    with tempfile.TemporaryDirectory(prefix="mlxd-kvbench-") as tmp_name:
        tmp = Path(tmp_name)
        for label, setting in (("budget", budget), ("none", 0)):
            table = model | {"kv_budget": setting, "disk_cache_dir": str(tmp / label / "disk")}
            sides.append(measure(tmp, label, server_cfg, table, bodies))
            print_side(sides[-1])
    with_budget, without = sides
    prompt_tokens = [a.prompt_tokens for a in with_budget.answers if a.error is None]
    if prompt_tokens:
        print(f"prompt tokens {min(prompt_tokens)}-{max(prompt_tokens)}, {sum(prompt_tokens)} in all")
    equal = sum(
        a.error is None and b.error is None and a.text == b.text
        for a, b in zip(with_budget.answers, without.answers, strict=True)
    )
    print(f"greedy answers equal between the sides: {equal}/{args.requests}")
    print(ratio_line("peak above weights / kv_budget", with_budget.above_weights, budget, 1.0, at_most=True))
    print(ratio_line("throughput with the budget / without", with_budget.rate, without.rate, 0.85))
    print(
        f"{'(no budget) peak above weights / kv_budget':<70} "
        f"{without.above_weights / budget if budget else 0:>7.3f}x   (for scale)"
    )
    if args.write:
        write_results(
            "kv_budget",
            {
                "model": f"{model['name']} ({model['source']})",
                "requests": args.requests,
                "max_tokens": args.max_tokens,
                "prompt_tokens": prompt_tokens,
                "sides": {side.label: side.as_dict() for side in sides},
                "equal_answers": equal,
                "peak_above_weights_over_budget": with_budget.above_weights / budget if budget else None,
                "throughput_ratio": with_budget.rate / without.rate if without.rate else None,
            },
        )


if __name__ == "__main__":
    main()
