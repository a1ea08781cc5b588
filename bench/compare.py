"""``make bench``: mlxd against mlx_lm.server, vllm-mlx and the in-process engine.

One run, one machine, one environment: every contender gets OpenBLAS
preloaded exactly as mlxd's workers do (``gateway.workers.process.
worker_environment``), and all serve the same weights:

* the default model (SmolLM2-135M-Instruct) as one float32 directory written
  once by :mod:`models` (mlxd dequantizes to float32 on CPU anyway);
* a tiny random-weight llama whose forward pass is almost free, so serving
  overhead is what gets measured.

Contenders: mlxd (gateway + one worker, ``max_batch_size`` 32),
``mlx_lm.server`` (its flags: :data:`harness.MLX_LM_SERVER_FLAGS`), vllm-mlx
0.6.0 (``--continuous-batching``, :data:`harness.VLLM_MLX_FLAGS`; its own venv
made by ``bench/peers.py ensure-vllm-mlx``, skipped with the reason printed
when that venv is missing or the server does not start) and the in-process
mlx-lm engine (``stream_generate`` for one stream, ``BatchGenerator`` as
``batch_generate`` drives it for more) in a process of its own. The HTTP
contenders are driven by an async httpx client that streams greedy chat
completions and counts completion tokens from the usage chunk. Only mlxd
gets ``ignore_eos`` (neither peer has it); the prompts ask for long stories,
so greedy decoding runs past the token budget anyway.

Two workloads: all requests at once (per concurrency level), and spread
arrivals (issue #21: one request every ``--spread-gap-ms``, ``--spread-requests``
of them, ``--spread-tokens`` tokens each) on the HTTP servers.

The machine may be shared (other sessions run tests on it), so the
contenders of a model run side by side, interleaved: every round measures
each concurrency on each contender in turn (the order rotates per round),
each measurement first waits briefly for the machine to go quiet, and the
best round of each is reported (with the worst beside it and the CPU other
processes used meanwhile). With ``--nice`` the bench and every contender run
at a higher scheduling priority than the machine's other work.

Prints a table (aggregate and median per-stream tokens/s, p50 and p95
time to first token, per concurrency), the spread-arrival table (p50/p95
TTFT, aggregate tokens/s), the prefix-cache TTFT test, CPU time per token,
and the ratios the targets name with PASS/MISS; with ``--write`` writes the best
rounds to ``bench/results/compare.json`` (see ``bench/record.py``; ``bench/plots.py``
draws them). Never asserts. Usage::

    .venv/bin/python bench/compare.py [--real-tokens 64] [--tiny-tokens 128]
        [--streams 1,8,16,32] [--rounds 2] [--only real|tiny] [--nice -10]
        [--contenders in-process,mlx_lm.server,vllm-mlx,mlxd]
        [--spread-requests 32] [--spread-gap-ms 200] [--spread-tokens 64]
        [--json FILE] [--no-blas]

Last, mlxd runs the default model twice more, with OpenBLAS preloaded into
its worker and with the MLX wheel's reference BLAS (``MLXD_BLAS=builtin``),
at 1 and 8 streams of 16 tokens, and prints the ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import (
    MLX_LM_SERVER_FLAGS,
    QUIET_WAITED,
    VLLM_MLX_FLAGS,
    CpuWatch,
    InProcessEngine,
    Result,
    blas_environment,
    concurrent,
    cpu_seconds,
    median,
    mlx_lm_server,
    mlxd,
    percentile,
    ratio_line,
    spread,
    vllm_mlx_server,
    wait_for_quiet,
)
from models import float32_model, tiny_model
from peers import VLLM_MLX, vllm_mlx_python
from record import add_write_flag
from record import write as write_results

TOPICS = (
    "a dragon who collects clocks",
    "a lighthouse keeper",
    "a robot learning to paint",
    "a lost key",
    "the first city on the moon",
    "a small fishing town",
    "a clockmaker's apprentice",
    "a storm at sea",
    "a library that never closes",
    "two rival bakers",
    "a forgotten map",
    "a train that runs backwards",
    "a garden on a rooftop",
    "a detective cat",
    "an old violin",
    "the last day of summer",
)
WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi "
    "omicron pi rho sigma tau upsilon phi chi psi omega"
).split()
PREFIX_WORDS = 770
"""Words of the shared system prompt: about 1,000 tokens with SmolLM2's tokenizer."""
MLXD_NAME = "bench"
PEER_MODEL = "default_model"  # mlx_lm.server's name for its --model; vllm-mlx's --served-model-name
CONTENDERS = ("in-process", "mlx_lm.server", "vllm-mlx", "mlxd")
PEERS = ("mlx_lm.server", "vllm-mlx")
"""The serving systems mlxd is measured against (the in-process engine is a limit, not a peer)."""
SERVERS = ("mlxd", *PEERS)
IN_PROCESS_PREFILL = 8
"""``prefill_batch_size`` of the in-process ``batch_generate`` (mlx-lm's default)."""


@dataclass
class Row:
    """One contender at one concurrency, in one round."""

    streams: int
    aggregate: float
    per_stream: float | None
    ttft_median: float | None
    ttft_p95: float | None
    tokens: int
    errors: int = 0
    counted_by: str = "usage"
    foreign_cpu: float = 0.0
    cpu: dict | None = None
    error_sample: str | None = None
    ttft_p99: float | None = None


@dataclass
class Section:
    """Every measurement of one contender on one model: all rounds per
    concurrency, the spread-arrival rounds and the prefix test. ``skipped``
    says why the contender did not run (empty when it ran)."""

    contender: str
    model: str
    rounds: dict[int, list[Row]] = field(default_factory=dict)
    spread: list[Row] = field(default_factory=list)
    prefix: dict | None = None
    note: str = ""
    skipped: str = ""

    def best(self, streams: int) -> Row | None:
        """The round with the highest aggregate rate at ``streams``."""
        rows = self.rounds.get(streams) or []
        return max(rows, key=lambda r: r.aggregate) if rows else None

    def worst(self, streams: int) -> Row | None:
        """The round with the lowest aggregate rate at ``streams``."""
        rows = self.rounds.get(streams) or []
        return min(rows, key=lambda r: r.aggregate) if rows else None

    def best_spread(self) -> Row | None:
        """The spread-arrival round with the lowest median TTFT (the figure
        that workload is about), if any round ran."""
        rows = [r for r in self.spread if r.ttft_median is not None]
        return min(rows, key=lambda r: r.ttft_median) if rows else None  # type: ignore[arg-type, return-value]

    def worst_spread(self) -> Row | None:
        """The spread-arrival round with the highest median TTFT, if any."""
        rows = [r for r in self.spread if r.ttft_median is not None]
        return max(rows, key=lambda r: r.ttft_median) if rows else None  # type: ignore[arg-type, return-value]


# --- requests --------------------------------------------------------------------------


def story_prompts(streams: int, tag: str) -> list[list[dict]]:
    """``streams`` distinct chats asking for a long story (greedy decoding
    keeps them going well past the token budget). ``tag`` keeps one run's
    prompts apart from another's, so no server reuses a cached prompt; the
    contenders of one round and concurrency get the same prompts."""
    return [
        [
            {
                "role": "user",
                "content": f"Write a long, detailed story about {TOPICS[i % len(TOPICS)]}. (story {tag}-{i})",
            }
        ]
        for i in range(streams)
    ]


def body(contender: str, messages: list[dict], max_tokens: int) -> dict:
    """A greedy streaming chat body for ``contender``; mlxd gets
    ``ignore_eos`` (mlx_lm.server and vllm-mlx have no such field; both
    serve the model as :data:`PEER_MODEL`)."""
    if contender == "mlxd":
        return {
            "model": MLXD_NAME,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
    return {"model": PEER_MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0}


def row_from(streams: int, results: list[Result], wall: float, foreign: float) -> Row:
    """Summarize one concurrent run (failed requests count as errors; the
    tokens they delivered before failing still count)."""
    ok = [r for r in results if r.error is None]
    errors = [r.error for r in results if r.error]
    return Row(
        streams=streams,
        aggregate=sum(r.tokens for r in results) / wall,
        per_stream=median([r.stream_rate for r in ok]) if ok else None,
        ttft_median=median([r.ttft for r in ok]) if ok else None,
        ttft_p95=percentile([r.ttft for r in ok], 95) if ok else None,
        ttft_p99=percentile([r.ttft for r in ok], 99) if ok else None,
        tokens=sum(r.tokens for r in results),
        errors=len(errors),
        counted_by="+".join(sorted({r.counted_by for r in results})),
        foreign_cpu=foreign,
        error_sample=errors[0] if errors else None,
    )


# --- contenders ------------------------------------------------------------------------------


class HttpContender:
    """A running server measured over HTTP. ``pids`` are its processes (for
    CPU accounting); ``front`` is the one that speaks HTTP (mlxd's gateway)."""

    def __init__(self, name: str, base_url: str, pids: list[int], front: int) -> None:
        self.name = name
        self.url = f"{base_url}/v1/chat/completions"
        self.pids = pids
        self.front = front

    def warm_up(self) -> None:
        """Two short requests, so first-use costs stay out of the numbers."""
        asyncio.run(concurrent(self.url, [body(self.name, m, 4) for m in story_prompts(2, "warm")]))

    def measure(self, chats: list[list[dict]], tokens: int) -> Row:
        """All chats at once; the row, with CPU seconds of the front process,
        the others and this load generator."""
        return self._run(chats, tokens, None)

    def measure_spread(self, chats: list[list[dict]], tokens: int, gap: float) -> Row:
        """Chat ``i`` sent ``i * gap`` seconds after the first (see
        :func:`harness.spread`); the row as :meth:`measure` makes it (its
        ``streams`` is the number of requests, its aggregate counts from the
        first send to the last finish)."""
        return self._run(chats, tokens, gap)

    def _run(self, chats: list[list[dict]], tokens: int, gap: float | None) -> Row:
        bodies = [body(self.name, m, tokens) for m in chats]
        before = {pid: cpu_seconds(pid) for pid in self.pids}
        client_before = time.process_time()
        with CpuWatch(self.pids + [os.getpid()]) as watch:
            if gap is None:
                results, wall = asyncio.run(concurrent(self.url, bodies))
            else:
                results, wall = asyncio.run(spread(self.url, bodies, gap))
        spent = {pid: cpu_seconds(pid) - before[pid] for pid in self.pids}
        row = row_from(len(chats), results, wall, watch.foreign)
        row.cpu = {
            "front_s": spent[self.front],
            "rest_s": sum(v for pid, v in spent.items() if pid != self.front),
            "client_s": time.process_time() - client_before,
            "wall": wall,
        }
        return row


class InProcessContender:
    """The in-process engine (bench/inprocess.py) as a contender."""

    name = "in-process"

    def __init__(self, engine: InProcessEngine) -> None:
        self.engine = engine

    def warm_up(self) -> None:
        """Nothing: the engine warmed itself up before saying it was ready."""

    def measure(self, chats: list[list[dict]], tokens: int) -> Row:
        """``stream_generate`` for one chat, ``BatchGenerator`` (as
        ``batch_generate`` runs it) for more; TTFT from every prompt's first
        token."""
        m = self.engine.run(chats, tokens, IN_PROCESS_PREFILL)
        single = m["streams"] == 1
        ttfts = [m["ttft"]] if single else m.get("ttfts") or []
        return Row(
            streams=m["streams"],
            aggregate=m["tokens"] / m["wall"],
            per_stream=((m["tokens"] - 1) / (m["wall"] - m["ttft"])) if single else None,
            ttft_median=median(ttfts) if ttfts else None,
            ttft_p95=percentile(ttfts, 95) if ttfts else None,
            ttft_p99=percentile(ttfts, 99) if ttfts else None,
            tokens=m["tokens"],
            counted_by="ids",
            foreign_cpu=m["foreign_cpu"],
        )


async def prefix_pair(url: str, contender: str, system: str, take: int) -> tuple[Result, Result]:
    """A request with a new ~1,000-token system prompt (cold), then one
    sharing it with a different question (warm)."""
    first = [{"role": "system", "content": system}, {"role": "user", "content": f"Summarize, take {take}."}]
    second = [{"role": "system", "content": system}, {"role": "user", "content": f"Count the words, take {take}."}]
    (cold,), _ = await concurrent(url, [body(contender, first, 4)])
    wait_for_quiet(max_wait=3)
    (warm,), _ = await concurrent(url, [body(contender, second, 4)])
    return cold, warm


def prefix_test(servers: list[HttpContender], sections: dict[str, Section], rounds: int = 3) -> None:
    """TTFT cold vs warm with a shared ~1,000-token prefix, interleaved over
    the servers; medians over ``rounds`` fresh prefixes (the same prefixes
    for every server) go to each server's section."""
    rng = random.Random(1234)
    samples: dict[str, list[tuple[Result, Result]]] = {s.name: [] for s in servers}
    for take in range(rounds):
        system = " ".join(rng.choice(WORDS) for _ in range(PREFIX_WORDS))
        for server in servers:
            wait_for_quiet(max_wait=5)
            samples[server.name].append(asyncio.run(prefix_pair(server.url, server.name, system, take)))
    for name, pairs in samples.items():
        failed = next((r.error for pair in pairs for r in pair if r.error), None)
        if failed:
            sections[name].prefix = {"error": failed}
            continue
        cold, warm = median([a.ttft for a, _ in pairs]), median([b.ttft for _, b in pairs])
        sections[name].prefix = {
            "cold": cold,
            "warm": warm,
            "ratio": warm / cold if cold else float("nan"),
            "cached_tokens": pairs[-1][1].cached,
            "prompt_tokens": pairs[-1][1].prompt_tokens,
        }


def start_mlxd(
    stack: contextlib.ExitStack, tmp: Path, model_dir: Path, env: dict[str, str] | None = None
) -> tuple[HttpContender, dict]:
    """Start an mlxd gateway (one worker, ``max_batch_size`` 32) on
    ``model_dir`` with ``env`` added to its environment, stopped when
    ``stack`` closes; return it as a contender, and its worker's status."""
    model = {"name": MLXD_NAME, "source": str(model_dir), "max_batch_size": 32}
    server = stack.enter_context(mlxd(tmp, model, env=env))
    status = server.worker(MLXD_NAME)
    return HttpContender("mlxd", server.url, [server.proc.pid, status["pid"]], server.proc.pid), status


@dataclass
class SpreadPlan:
    """The spread-arrival workload: ``requests`` requests of ``tokens``
    tokens, one every ``gap`` seconds (``requests`` 0: not run)."""

    requests: int = 32
    gap: float = 0.2
    tokens: int = 64


def start_vllm_mlx(stack: contextlib.ExitStack, tmp: Path, model_dir: Path) -> HttpContender:
    """Start vllm-mlx (``--continuous-batching``) from the venv bench/peers.py
    made, serving ``model_dir`` as :data:`PEER_MODEL`, stopped when ``stack``
    closes. Raises RuntimeError with the reason when its venv is not usable
    (the server failing to start raises too)."""
    python, reason = vllm_mlx_python()
    if python is None:
        raise RuntimeError(reason)
    peer = stack.enter_context(vllm_mlx_server(tmp, model_dir, python, PEER_MODEL))
    return HttpContender("vllm-mlx", peer.url, [peer.proc.pid], peer.proc.pid)


def run_spread(servers: list[HttpContender], sections: dict[str, Section], plan: SpreadPlan, rounds: int) -> None:
    """The spread-arrival workload on every server, interleaved (the order
    rotates per round; the same prompts for every server within a round);
    each round's row goes to the server's section."""
    for r in range(rounds):
        chats = story_prompts(plan.requests, f"spread{r}")
        for server in servers[r % len(servers) :] + servers[: r % len(servers)]:
            wait_for_quiet()
            sections[server.name].spread.append(server.measure_spread(chats, plan.tokens, plan.gap))


def run_model(
    label: str,
    model_dir: Path,
    levels: list[int],
    tokens: int,
    rounds: int,
    wanted: list[str],
    tmp: Path,
    plan: SpreadPlan | None = None,
) -> dict[str, Section]:
    """Start every wanted contender on ``model_dir``, measure them interleaved
    for ``rounds`` rounds, run the spread-arrival workload (``plan``) on the
    servers, and (real model) the prefix test. vllm-mlx is skipped, with the
    reason in its section's ``skipped`` (and on stderr), when it cannot run;
    every process started here is stopped before returning."""
    sections = {name: Section(name, label) for name in wanted}
    with contextlib.ExitStack() as stack:
        contenders: list = []
        for name in wanted:
            t0 = time.monotonic()
            if name == "in-process":
                engine = InProcessEngine(model_dir)
                stack.callback(engine.close)
                contenders.append(InProcessContender(engine))
                sections[name].note = (
                    f"stream_generate (1 stream) / BatchGenerator as batch_generate runs it (prefill_batch_size "
                    f"{IN_PROCESS_PREFILL}); EOS ignored"
                )
            elif name == "mlx_lm.server":
                peer = stack.enter_context(mlx_lm_server(tmp / f"peer-{label}", model_dir))
                contenders.append(HttpContender(name, peer.url, [peer.proc.pid], peer.proc.pid))
            elif name == "vllm-mlx":
                try:
                    contenders.append(start_vllm_mlx(stack, tmp / f"vllm-mlx-{label}", model_dir))
                except (RuntimeError, TimeoutError, OSError) as exc:
                    sections[name].skipped = str(exc).strip().splitlines()[0][:300]
                    print(f"[{label}] vllm-mlx skipped: {sections[name].skipped}", file=sys.stderr, flush=True)
                    continue
                sections[name].note = f"{VLLM_MLX} {' '.join(VLLM_MLX_FLAGS)}; no ignore_eos"
            else:
                contender, status = start_mlxd(stack, tmp / f"mlxd-{label}", model_dir)
                contenders.append(contender)
                sections[name].note = f"worker BLAS: {status.get('blas')}"
            contenders[-1].warm_up()
            print(f"[{label}] {name} up in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        if not contenders:
            return sections
        for r in range(rounds):
            t0 = time.monotonic()
            order = contenders[r % len(contenders) :] + contenders[: r % len(contenders)]
            for streams in levels:
                chats = story_prompts(streams, f"r{r}s{streams}")
                for contender in order:
                    wait_for_quiet()
                    sections[contender.name].rounds.setdefault(streams, []).append(contender.measure(chats, tokens))
            print(f"[{label}] round {r + 1} of {rounds} in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        servers = [c for c in contenders if isinstance(c, HttpContender)]
        if plan and plan.requests and servers:
            t0 = time.monotonic()
            run_spread(servers, sections, plan, rounds)
            print(f"[{label}] spread arrivals in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        if label == "real" and servers:
            t0 = time.monotonic()
            prefix_test(servers, sections)
            print(f"[{label}] prefix test in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return sections


BLAS_STREAMS = (1, 8)
BLAS_TOKENS = 16


def blas_test(model_dir: Path, tmp: Path, rounds: int) -> dict[int, dict[str, Row]] | None:
    """mlxd on ``model_dir`` with OpenBLAS preloaded into its worker and with
    the MLX wheel's own reference BLAS (``MLXD_BLAS=builtin``), both up,
    interleaved at :data:`BLAS_STREAMS` streams of :data:`BLAS_TOKENS`
    tokens; the best of ``rounds`` per configuration. None when this system
    has no OpenBLAS to preload (nothing to compare)."""
    if "LD_PRELOAD" not in blas_environment():
        return None
    found: dict[int, dict[str, Row]] = {n: {} for n in BLAS_STREAMS}
    with contextlib.ExitStack() as stack:
        contenders = []
        for label, env in (("openblas", {}), ("reference", {"MLXD_BLAS": "builtin"})):
            contender, status = start_mlxd(stack, tmp / f"blas-{label}", model_dir, env)
            contender.warm_up()
            contenders.append((str(status.get("blas") or label), contender))
        for r in range(rounds):
            for streams in BLAS_STREAMS:
                chats = story_prompts(streams, f"blas{r}s{streams}")
                for label, contender in contenders[r % 2 :] + contenders[: r % 2]:
                    wait_for_quiet()
                    row = contender.measure(chats, BLAS_TOKENS)
                    best = found[streams].get(label)
                    if best is None or row.aggregate > best.aggregate:
                        found[streams][label] = row
    return found


def print_blas(found: dict[int, dict[str, Row]] | None) -> None:
    """The OpenBLAS vs reference BLAS table and ratios."""
    print(f"\n== mlxd worker BLAS, default model, {BLAS_TOKENS} tokens per request, best of the rounds ==")
    if found is None:
        print("no OpenBLAS on this system: nothing to compare (the worker runs on the wheel's BLAS)")
        return
    for streams, rows in found.items():
        parts = [
            f"{label}: {row.aggregate:7.1f} tok/s, TTFT p50 {row.ttft_median * 1000:6.0f} ms"
            for label, row in rows.items()
            if row.ttft_median is not None
        ]
        values = list(rows.values())
        ratio = values[0].aggregate / values[1].aggregate if len(values) == 2 and values[1].aggregate else None
        shown = f"{ratio:6.1f}x" if ratio else "   n/a"
        print(f"{streams:>2} stream(s): OpenBLAS / reference {shown}   ({'; '.join(parts)})")


# --- report ----------------------------------------------------------------------------------


def fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    """``value`` formatted, or ``-`` when unknown."""
    return "-" if value is None else format(value * scale, spec)


def print_table(title: str, sections: dict[str, Section], levels: list[int], tokens: int) -> None:
    """The per-concurrency table of one model (best round per cell)."""
    print(f"\n== {title}: {tokens} tokens per request, greedy; best of the rounds ==")
    print(
        f"{'contender':<14}{'streams':>7}{'agg tok/s':>10}{'(worst)':>9}{'stream tok/s':>13}"
        f"{'TTFT p50':>9}{'TTFT p95':>9}{'tokens':>7}{'err':>4}{'other cpu':>10}  counted by"
    )
    for section in sections.values():
        for n in levels:
            row, worst = section.best(n), section.worst(n)
            if row is None or worst is None:
                continue
            print(
                f"{section.contender:<14}{n:>7}{row.aggregate:>10.1f}{f'({worst.aggregate:.1f})':>9}"
                f"{fmt(row.per_stream, '.1f'):>13}{fmt(row.ttft_median, '.0f', 1000):>7}ms"
                f"{fmt(row.ttft_p95, '.0f', 1000):>7}ms{row.tokens:>7}{row.errors:>4}"
                f"{row.foreign_cpu:>10.2f}  {row.counted_by}"
            )
    print_notes(sections)


def print_notes(sections: dict[str, Section]) -> None:
    """One line per contender: its note, why it was skipped, its failed
    streams (all workloads, all rounds) and an example error."""
    for section in sections.values():
        if section.skipped:
            print(f"  {section.contender}: SKIPPED ({section.skipped})")
            continue
        all_rows = [r for rows in section.rounds.values() for r in rows] + section.spread
        errors = [r.error_sample for r in all_rows if r.error_sample]
        notes = [section.note] if section.note else []
        if errors:
            total = sum(r.errors for r in all_rows)
            notes.append(f"{total} failed streams over all rounds, e.g. {errors[0]!r}")
        if notes:
            print(f"  {section.contender}: {'; '.join(notes)}")


def print_spread(title: str, sections: dict[str, Section], plan: SpreadPlan) -> None:
    """The spread-arrival table of one model (best round by median TTFT,
    the worst round's median TTFT beside it)."""
    if not any(s.spread for s in sections.values()):
        return
    print(
        f"\n== {title}: spread arrivals, {plan.requests} requests one every {plan.gap * 1000:.0f} ms, "
        f"{plan.tokens} tokens each, greedy; best of the rounds by median TTFT =="
    )
    print(
        f"{'contender':<14}{'TTFT p50':>9}{'(worst)':>9}{'TTFT p95':>9}{'agg tok/s':>10}{'stream tok/s':>13}"
        f"{'tokens':>7}{'err':>4}{'other cpu':>10}"
    )
    for section in sections.values():
        row, worst = section.best_spread(), section.worst_spread()
        if row is None or worst is None:
            continue
        print(
            f"{section.contender:<14}{fmt(row.ttft_median, '.0f', 1000):>7}ms"
            f"{fmt(worst.ttft_median, '.0f', 1000):>7}ms{fmt(row.ttft_p95, '.0f', 1000):>7}ms"
            f"{row.aggregate:>10.1f}{fmt(row.per_stream, '.1f'):>13}{row.tokens:>7}{row.errors:>4}"
            f"{row.foreign_cpu:>10.2f}"
        )
    others = [s.contender for s in sections.values() if not s.spread and not s.skipped]
    if others:
        print(f"  not run: {', '.join(others)} (spread arrivals need a server)")


def agg(sections: dict[tuple[str, str], Section], contender: str, model: str, streams: int) -> float | None:
    """Best aggregate tokens/s of one contender at one level, if measured."""
    section = sections.get((contender, model))
    row = section.best(streams) if section else None
    return row.aggregate if row else None


TARGETS = (
    ("default model, 16 streams: mlxd / mlx_lm.server", "real", 16, "mlx_lm.server", 1.15),
    ("default model, 16 streams: mlxd / in-process batch_generate", "real", 16, "in-process", 0.95),
    ("default model, 1 stream: mlxd / in-process stream_generate", "real", 1, "in-process", 0.95),
    ("tiny model, 32 streams: mlxd / mlx_lm.server", "tiny", 32, "mlx_lm.server", 2.0),
)
"""The aggregate-throughput targets: title, model, streams, the contender
mlxd is compared with, and the least ratio that passes."""

BURST_TARGETS = (
    ("default model, 16 streams: mlxd / vllm-mlx", "real", 16, "vllm-mlx", 1.15),
    ("default model, 16 streams: mlxd / mlx_lm.server (#21)", "real", 16, "mlx_lm.server", 1.5),
)
"""Issue #21's aggregate targets at 16 simultaneous streams (same shape as
:data:`TARGETS`)."""


def ttft(
    sections: dict[tuple[str, str], Section], contender: str, model: str, streams: int | None, stat: str
) -> float | None:
    """``stat`` (``"ttft_median"`` or ``"ttft_p95"``) of one contender's best
    round at ``streams`` (``None``: the spread-arrival workload's best round),
    if measured."""
    section = sections.get((contender, model))
    if section is None:
        return None
    row = section.best_spread() if streams is None else section.best(streams)
    return getattr(row, stat) if row else None


def better_peer(
    sections: dict[tuple[str, str], Section], model: str, streams: int | None, stat: str
) -> tuple[str | None, float | None]:
    """The peer (of :data:`PEERS`) with the lowest ``stat`` TTFT (see
    :func:`ttft`) and that value; ``(None, None)`` when no peer measured it."""
    found = [(v, p) for p in PEERS if (v := ttft(sections, p, model, streams, stat))]
    if not found:
        return None, None
    value, name = min(found)
    return name, value


def print_issue21(sections: dict[tuple[str, str], Section]) -> None:
    """Issue #21's ratio lines, PASS/MISS: at 16 simultaneous streams mlxd's
    TTFT p50 and p95 at most the better peer's and its aggregate at least
    1.15x vllm-mlx's and 1.5x mlx_lm.server's; under spread arrivals mlxd's
    median TTFT at most the better peer's (aggregate beside it, no target)."""
    print("\n== issue #21 targets (first tokens under a burst and spread arrivals; best rounds, this run) ==")
    for stat, shown in (("ttft_median", "p50"), ("ttft_p95", "p95")):
        peer, value = better_peer(sections, "real", 16, stat)
        title = f"default model, 16 streams: mlxd TTFT {shown} / better peer ({peer or 'none'})"
        print(ratio_line(title, ttft(sections, "mlxd", "real", 16, stat), value, 1.0, at_most=True))
    for title, model, streams, other, target in BURST_TARGETS:
        print(ratio_line(title, agg(sections, "mlxd", model, streams), agg(sections, other, model, streams), target))
    peer, value = better_peer(sections, "real", None, "ttft_median")
    title = f"default model, spread: mlxd TTFT p50 / better peer ({peer or 'none'})"
    print(ratio_line(title, ttft(sections, "mlxd", "real", None, "ttft_median"), value, 1.0, at_most=True))
    mine = sections.get(("mlxd", "real"))
    row = mine.best_spread() if mine else None
    if row:
        parts = [f"mlxd {row.aggregate:.1f} tok/s"]
        for p in PEERS:
            section = sections.get((p, "real"))
            other = section.best_spread() if section else None
            if other and other.aggregate:
                parts.append(f"{p} {other.aggregate:.1f} (mlxd {row.aggregate / other.aggregate:.2f}x)")
        print(f"  spread arrivals, aggregate (no target): {'; '.join(parts)}")


def print_report(sections: dict[tuple[str, str], Section]) -> None:
    """The prefix test, the CPU figures and the target ratios."""
    print("\n== shared ~1,000-token prefix (default model): TTFT cold vs warm, median of 3 ==")
    for contender in SERVERS:
        section = sections.get((contender, "real"))
        p = section.prefix if section else None
        if not p:
            continue
        if "error" in p:
            print(f"{contender:<14} error: {p['error']}")
            continue
        print(
            f"{contender:<14} cold {p['cold'] * 1000:6.0f} ms   warm {p['warm'] * 1000:5.0f} ms   "
            f"warm/cold {p['ratio']:.2f}   ({p['cached_tokens']} of {p['prompt_tokens']} prompt tokens cached)"
        )

    print("\n== CPU per streamed token, 32 streams (best round) ==")
    for model in ("tiny", "real"):
        for contender in SERVERS:
            section = sections.get((contender, model))
            row = section.best(32) if section else None
            if row is None or not row.cpu or not row.tokens:
                continue
            c, per = row.cpu, 1000 / row.tokens
            what = (
                f"gateway {c['front_s'] * per:.3f} ms, worker {c['rest_s'] * per:.3f} ms"
                if contender == "mlxd"
                else f"server {c['front_s'] * per:.3f} ms"
            )
            print(
                f"{model:<5}{contender:<14} {what}; load generator {c['client_s'] * per:.3f} ms "
                f"({row.tokens} tokens in {c['wall']:.1f} s)"
            )

    print("\n== targets (ratios of best rounds, this run) ==")
    for title, model, streams, other, target in TARGETS:
        print(ratio_line(title, agg(sections, "mlxd", model, streams), agg(sections, other, model, streams), target))
    tiny = sections.get(("mlxd", "tiny"))
    row = tiny.best(32) if tiny else None
    if row and row.cpu and row.tokens:
        print(
            f"{'tiny model, 32 streams: mlxd gateway CPU per token':<70} "
            f"{row.cpu['front_s'] * 1000 / row.tokens:>7.3f} ms  (no target)"
        )
    real = sections.get(("mlxd", "real"))
    p = real.prefix if real else None
    ok = bool(p) and "error" not in p  # type: ignore[operator]
    print(
        ratio_line(
            "shared 1,000-token prefix, mlxd: warm / cold TTFT",
            p["warm"] if ok else None,
            p["cold"] if ok else None,
            0.2,
            at_most=True,
        )
    )  # type: ignore[index]
    print_issue21(sections)
    print("\nFor context (no target):")
    for model in ("real", "tiny"):
        for n in (1, 8, 16, 32):
            parts = []
            for other in (*PEERS, "in-process"):
                a, b = agg(sections, "mlxd", model, n), agg(sections, other, model, n)
                if a and b:
                    parts.append(f"mlxd / {other} {a / b:5.2f}x")
            if parts:
                print(f"  {model:<4} {n:>2} streams: {'   '.join(parts)}")


def peer_versions(python: Path) -> str:
    """``mlx X, mlx-lm Y`` as installed in the venv of ``python`` (or why
    that could not be read)."""
    import subprocess

    code = "from importlib.metadata import version as v; print(f\"mlx {v('mlx')}, mlx-lm {v('mlx-lm')}\")"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return done.stdout.strip() or f"versions unknown: {done.stderr.strip()[-100:]}"


def print_header(args: argparse.Namespace, levels: list[int]) -> None:
    """What ran, where, with which settings."""
    from importlib.metadata import version

    env = blas_environment()
    load = os.getloadavg()
    print("mlxd bench: mlxd vs mlx_lm.server vs vllm-mlx vs the in-process mlx-lm engine")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}; "
        f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}; Python {platform.python_version()}"
    )
    print(f"BLAS for every contender: LD_PRELOAD={env.get('LD_PRELOAD', '(none: built-in BLAS)')}")
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; scheduling priority: nice {os.nice(0)}")
    print(
        f"streams {levels}; {args.real_tokens} tokens/request (default model), {args.tiny_tokens} (tiny); "
        f"{args.rounds} interleaved rounds: best reported, (worst) beside it"
    )
    print(f"mlx_lm.server flags: {' '.join(MLX_LM_SERVER_FLAGS)}")
    python, reason = vllm_mlx_python()
    if "vllm-mlx" not in args.contenders.split(","):
        print("vllm-mlx: not wanted (--contenders)")
    elif python is None:
        print(f"vllm-mlx: SKIPPED ({reason})")
    else:
        print(f"vllm-mlx: {VLLM_MLX} {' '.join(VLLM_MLX_FLAGS)}, venv {python.parent.parent} ({peer_versions(python)})")
    if args.spread_requests:
        print(
            f"spread arrivals: {args.spread_requests} requests, one every {args.spread_gap_ms} ms, "
            f"{args.spread_tokens} tokens each, on the HTTP servers"
        )
    print("mlxd: one worker, max_batch_size 32, other settings default; its requests carry ignore_eos")
    print(
        "tokens counted from each stream's usage chunk ('usage'; 'chunks' for a failed stream); "
        "in-process: generated ids"
    )
    print("stream tok/s = (tokens - 1) / (time after the first token), median over streams;")
    print("'other cpu' = cores used meanwhile by processes outside the contender and this client")


def main() -> None:
    """Parse arguments, run every contender on both models, print the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--real-tokens", type=int, default=64)
    parser.add_argument("--tiny-tokens", type=int, default=128)
    parser.add_argument("--streams", default="1,8,16,32")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", choices=("real", "tiny"))
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument(
        "--nice",
        type=int,
        default=-10,
        help="niceness increment for the bench and its contenders (0: leave as is; "
        "a negative value needs root and is skipped without it)",
    )
    parser.add_argument(
        "--spread-requests", type=int, default=32, help="spread-arrival workload: requests (0: skip it)"
    )
    parser.add_argument("--spread-gap-ms", type=float, default=200, help="spread-arrival workload: ms between sends")
    parser.add_argument("--spread-tokens", type=int, default=64, help="spread-arrival workload: tokens per request")
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument(
        "--no-blas", action="store_true", help="skip mlxd with OpenBLAS vs the reference BLAS (default model)"
    )
    args = parser.parse_args()
    levels = [int(x) for x in args.streams.split(",")]
    unknown = set(args.contenders.split(",")) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contender(s) {sorted(unknown)}; choose from {', '.join(CONTENDERS)}")
    wanted = [c for c in CONTENDERS if c in args.contenders.split(",")]
    plan = SpreadPlan(args.spread_requests, args.spread_gap_ms / 1000, args.spread_tokens)
    if args.nice:
        with contextlib.suppress(PermissionError):
            os.nice(args.nice)
    started = time.monotonic()
    print_header(args, levels)
    sections: dict[tuple[str, str], Section] = {}
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-") as tmp_name:
        for label, make, tokens, title in (
            ("real", float32_model, args.real_tokens, "default model (SmolLM2-135M-Instruct, float32)"),
            ("tiny", tiny_model, args.tiny_tokens, "tiny model (random weights, 2 layers x 64 wide)"),
        ):
            if args.only and label != args.only:
                continue
            by_name = run_model(label, make(), levels, tokens, args.rounds, wanted, Path(tmp_name), plan)
            sections.update({(name, label): s for name, s in by_name.items()})
            print_table(title, by_name, levels, tokens)
            print_spread(title, by_name, plan)
            sys.stdout.flush()
        blas = None
        if not args.no_blas and args.only != "tiny":
            t0 = time.monotonic()
            blas = blas_test(float32_model(), Path(tmp_name), args.rounds)
            print(f"[blas] in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    print_report(sections)
    if not args.no_blas and args.only != "tiny":
        print_blas(blas)
    print(
        f"\ntotal bench time: {time.monotonic() - started:.0f} s "
        f"(of which {QUIET_WAITED[0]:.0f} s waiting for other processes to go quiet)"
    )
    if args.json:
        args.json.write_text(json.dumps({f"{c}/{m}": asdict(s) for (c, m), s in sections.items()}, indent=2))
    if args.write:
        write_results(
            "compare", results_data(sections, levels, {"real": args.real_tokens, "tiny": args.tiny_tokens}, plan)
        )


def results_data(
    sections: dict[tuple[str, str], Section], levels: list[int], tokens: dict[str, int], plan: SpreadPlan
) -> dict:
    """What ``bench/results/compare.json`` holds: per model and contender,
    the best round's aggregate tokens/s, TTFT p50 and p95 (seconds) and
    errors at each concurrency (None where it did not run), and the spread
    workload's best round."""
    models: dict = {}
    for (contender, model), section in sections.items():
        if section.skipped:
            continue
        entry = models.setdefault(model, {"tokens_per_request": tokens[model], "contenders": {}})
        rows = [section.best(n) for n in levels]
        entry["contenders"][contender] = {
            "streams": levels,
            "aggregate_tok_s": [r.aggregate if r else None for r in rows],
            "ttft_p50_s": [r.ttft_median if r else None for r in rows],
            "ttft_p95_s": [r.ttft_p95 if r else None for r in rows],
            "errors": [r.errors if r else None for r in rows],
        }
        spread = section.best_spread()
        if spread is not None:
            entry.setdefault("spread", {"requests": plan.requests, "gap_s": plan.gap, "tokens": plan.tokens})
            entry["spread"][contender] = {
                "ttft_p50_s": spread.ttft_median,
                "ttft_p95_s": spread.ttft_p95,
                "aggregate_tok_s": spread.aggregate,
            }
    return {"models": models}


if __name__ == "__main__":
    main()
