"""Profile mlxd's gateway and worker with py-spy under a steady streaming load.

Starts an mlxd gateway with one worker (``max_batch_size`` 32) on the tiny or
the float32 default model, keeps ``--streams`` streaming chat requests in
flight (each stream sends its next request as soon as the last one ends),
and meanwhile samples both processes with ``py-spy record`` (raw collapsed
stacks, one file each, all threads, GIL-idle samples left out). Then prints,
per process and thread, the share of samples and the heaviest functions
(self and inclusive), plus the gateway's CPU milliseconds per streamed token
over the same window.

Needs py-spy (``.venv/bin/pip install py-spy``) and permission to trace
(root, or ptrace allowed). Usage::

    .venv/bin/python bench/pyspy_profile.py [--model tiny|real] [--streams 32]
        [--tokens 128] [--seconds 15] [--out DIR] [--native]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness import concurrent, cpu_seconds, mlxd
from models import float32_model, tiny_model

NAME = "bench"


def chat(i: int, tokens: int) -> dict:
    """A greedy streaming request body that always makes ``tokens`` tokens."""
    return {
        "model": NAME,
        "max_tokens": tokens,
        "temperature": 0,
        "ignore_eos": True,
        "messages": [{"role": "user", "content": f"Write a long, detailed story about topic {i}."}],
    }


class Load:
    """``streams`` closed-loop clients on a thread of their own, counting
    completion tokens as they arrive (from the usage chunks)."""

    def __init__(self, url: str, streams: int, tokens: int) -> None:
        self.url, self.streams, self.tokens = url, streams, tokens
        self.done = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _client(self, index: int) -> None:
        i = index
        while not self.stop.is_set():
            (result,), _ = await concurrent(self.url, [chat(i, self.tokens)])
            self.done += result.tokens
            i += self.streams

    async def _run(self) -> None:
        await asyncio.gather(*(self._client(i) for i in range(self.streams)))


def record(pid: int, seconds: float, out: Path, native: bool) -> subprocess.Popen:
    """Start ``py-spy record`` on ``pid`` for ``seconds`` into ``out`` (raw)."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    args = [
        spy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(int(seconds)),
        "--rate",
        "100",
        "--format",
        "raw",
        "--output",
        str(out),
        "--threads",
        "--nonblocking",
    ]
    if native:
        args.append("--native")
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def short(frame: str) -> str:
    """``function (file.py:line)`` reduced to ``function (file.py)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    return f"{name} ({Path(where).name})" if where else name


def summarize(path: Path, top: int = 12) -> str:
    """Per thread: sample share, and the heaviest self and inclusive functions."""
    threads: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    selfs: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    totals: collections.Counter = collections.Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        thread = next((f for f in frames if f.startswith("thread ")), "thread ?")
        thread = thread.split(" ")[-1].strip('"') if '"' in thread else thread
        calls = [short(f) for f in frames if not f.startswith(("thread ", "process "))]
        n = int(count)
        totals[thread] += n
        for fn in set(calls):
            threads[thread][fn] += n
        if calls:
            selfs[thread][calls[-1]] += n
    grand = sum(totals.values()) or 1
    lines = [f"{path.name}: {grand} samples (non-idle)"]
    for thread, n in totals.most_common():
        lines.append(f"  thread {thread}: {100 * n / grand:.0f}% of samples")
        lines.append("    self:")
        lines += [f"      {100 * c / n:5.1f}%  {fn}" for fn, c in selfs[thread].most_common(top)]
        lines.append("    inclusive:")
        lines += [f"      {100 * c / n:5.1f}%  {fn}" for fn, c in threads[thread].most_common(top)]
    return "\n".join(lines)


def main() -> None:
    """Start mlxd, load it, profile both processes, print the summaries."""
    parser = argparse.ArgumentParser(description="py-spy the mlxd gateway and worker under load")
    parser.add_argument("--model", choices=("tiny", "real"), default="tiny")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mlxd-profiles")
    parser.add_argument("--native", action="store_true", help="include native (C/C++) frames")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    model_dir = tiny_model() if args.model == "tiny" else float32_model()
    tag = f"{args.model}-{args.streams}"
    with tempfile.TemporaryDirectory(prefix="mlxd-profile-") as tmp:
        with mlxd(Path(tmp), {"name": NAME, "source": str(model_dir), "max_batch_size": 32}) as server:
            gateway, worker = server.proc.pid, server.worker(NAME)["pid"]
            load = Load(f"{server.url}/v1/chat/completions", args.streams, args.tokens)
            load.thread.start()
            time.sleep(3)  # every stream admitted and decoding
            tokens0, cpu0, t0 = load.done, cpu_seconds(gateway), time.monotonic()
            spies = [
                record(gateway, args.seconds, args.out / f"gateway-{tag}.txt", False),
                record(worker, args.seconds, args.out / f"worker-{tag}.txt", args.native),
            ]
            for spy in spies:
                _, err = spy.communicate()
                if spy.returncode != 0:
                    print(f"py-spy failed: {err.strip()[-500:]}")
            tokens, cpu, wall = load.done - tokens0, cpu_seconds(gateway) - cpu0, time.monotonic() - t0
            load.stop.set()
            load.thread.join(timeout=120)
    print(
        f"{args.model} model, {args.streams} streams x {args.tokens} tokens: "
        f"{tokens} tokens in {wall:.1f} s ({tokens / wall:.0f} tok/s while sampled); "
        f"gateway CPU {1000 * cpu / max(tokens, 1):.3f} ms/token (py-spy's own cost included)"
    )
    for name in (f"gateway-{tag}.txt", f"worker-{tag}.txt"):
        path = args.out / name
        if path.exists():
            print()
            print(summarize(path))
    print(f"\nraw stacks in {args.out}", file=sys.stderr)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
