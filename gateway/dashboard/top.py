"""``mlxd top``, ``mlxd ps`` and the model table of ``mlxd status``: the
dashboard in a terminal, drawn with rich from ``GET /v1/status``.

- ``mlxd top [--url URL] [--api-key KEY] [--interval S]``: a live view
  redrawn in place (the terminal's alternate screen, as ``top`` uses) every
  ``interval`` seconds: each model's state, memory, requests, cache and
  speculation numbers; tokens/s and TTFT over the last minute as sparklines;
  the recent requests; MCP servers and nodes. Ctrl-C ends it with status 0
  and the terminal as it was. While the server does not answer it says so
  and keeps trying.
- ``mlxd ps``: the model table once (exit 1 when the server cannot be read).
- ``mlxd status`` (the launchd facts, see :mod:`gateway.service.launchd`) appends
  the same table when the server answers (:func:`print_models`).

Plain text over ssh; no colour with ``NO_COLOR`` set or when the output
is not a terminal (rich's own rules). The server, key and config are
found by :func:`gateway.dashboard.client.target`; the command-line
arguments are in :mod:`gateway.dashboard.commands`.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Iterable

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from gateway.dashboard.client import StatusUnavailable, Target, fetch_status
from gateway.dashboard.schema import ModelStatus, Sample, Status

PLAIN_WIDTH = 1000
"""Line width of the one-shot table when the output is not a terminal (a
pipe or a file): wide enough never to cut a column."""

HISTORY = 60
"""Samples the sparklines show (one a second)."""

SPARKS = "▁▂▃▄▅▆▇█"
"""The eight levels of a sparkline."""

STATE_STYLES = {
    "ready": "green",
    "loading": "yellow",
    "starting": "yellow",
    "draining": "yellow",
    "restarting": "yellow",
    "failed": "bold red",
    "unloaded": "dim",
    "stopped": "dim",
}
"""How each model state is coloured (none under ``NO_COLOR``)."""


# -- formatting ---------------------------------------------------------------------------


def human_bytes(n: int | None) -> str:
    """``n`` bytes as B, KiB, MiB, GiB or TiB ("-" for None)."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" or value >= 100 else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def share(rate: float | None) -> str:
    """A ratio as a whole percentage ("-" for None)."""
    return "-" if rate is None else f"{rate * 100:.0f}%"


def duration(seconds: float | None) -> str:
    """Seconds as ms below one second, else seconds ("-" for None)."""
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def uptime(seconds: float) -> str:
    """A duration as ``1d02h``, ``3h04m``, ``5m06s`` or ``7s``."""
    s = int(max(0, seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{s:02d}s" if minutes else f"{s}s"


def sparkline(values: Iterable[float | None]) -> str:
    """``values`` as a row of block characters scaled to their maximum
    (a gap for None)."""
    values = list(values)
    top = max((v for v in values if v is not None), default=0.0)
    if top <= 0:
        return "".join(" " if v is None else SPARKS[0] for v in values)
    last = len(SPARKS) - 1
    return "".join(" " if v is None else SPARKS[min(last, round(v / top * last))] for v in values)


# -- the views ----------------------------------------------------------------------------


def _state(model: ModelStatus) -> Text:
    return Text(model.state, style=STATE_STYLES.get(model.state, ""))


def _until(model: ModelStatus) -> str:
    """When ``model``'s idle worker unloads: a local time, ``never`` for a
    worker kept loaded, ``-`` when it has none."""
    if model.expires_at is not None:
        return time.strftime("%H:%M:%S", time.localtime(model.expires_at))
    return "never" if model.pid is not None or model.state == "ready" else "-"


def models_table(status: Status, expand: bool = True, lifetimes: bool = False) -> Table:
    """One row per model: kind, state, MLX memory against the worker's
    limit, running / queued / in flight, prefix-cache and disk-tier hit
    rates and sizes, speculation acceptance; with ``lifetimes`` (``mlxd
    ps``, where the width is the table's) also the context length and when
    an idle worker unloads (``never``; ``-`` without a worker) (errors:
    :func:`model_errors`)."""
    table = Table(title="models", title_justify="left", expand=expand, pad_edge=False)
    names = ["MODEL", "KIND", "STATE", "MLX MEM", "LIMIT", "RUN", "QUEUE", "CACHE HIT", "CACHE", "DISK HIT", "SPEC"]
    if lifetimes:
        names.insert(3, "CTX")
        names.append("UNTIL")
    for name in names:
        table.add_column(name, justify="left" if name in ("MODEL", "KIND", "STATE") else "right", no_wrap=True)
    for m in status.models:
        memory = m.memory
        cells = [
            m.name + (f" @{m.node}" if m.node else ""),
            m.kind or "-",
            _state(m),
            human_bytes(memory.mlx_active_bytes),
            human_bytes(memory.limit_bytes or memory.estimate_bytes),
            str(m.running),
            f"{m.waiting}/{m.inflight}",
            share(m.prefix_cache.hit_rate),
            human_bytes(m.prefix_cache.bytes),
            share(m.disk_cache.hit_rate),
            "off" if m.speculation is None else share(m.speculation.acceptance),
        ]
        if lifetimes:
            cells.insert(3, str(m.context_length) if m.context_length else "-")
            cells.append(_until(m))
        table.add_row(*cells)
    return table


def model_errors(status: Status) -> Text:
    """One line per model with an error: its name and the reason."""
    lines = Text()
    for m in status.models:
        if m.error:
            lines.append(f"{m.name}: ", style="bold red")
            lines.append(f"{m.error}\n", style="red")
    return lines


def requests_table(status: Status, rows: int) -> Table:
    """The ``rows`` most recent requests: id, model, protocol, token
    counts, TTFT, duration and finish (``running`` while it runs)."""
    table = Table(title="recent requests", title_justify="left", expand=True, pad_edge=False)
    for name in ("ID", "MODEL", "PROTOCOL", "PROMPT", "CACHED", "COMPL", "TTFT", "TIME", "FINISH"):
        table.add_column(
            name, justify="left" if name in ("ID", "MODEL", "PROTOCOL", "FINISH") else "right", no_wrap=True
        )
    for r in status.requests[:rows]:
        table.add_row(
            r.id,
            r.model,
            r.protocol,
            str(r.prompt_tokens),
            str(r.cached_tokens),
            str(r.completion_tokens),
            duration(r.ttft_seconds),
            duration(r.duration_seconds),
            Text(r.finish or "running", style="yellow" if r.finish is None else ""),
        )
    return table


def header(status: Status, server: Target) -> Text:
    """The first line: version, address, state, uptime, budget, time."""
    line = Text()
    line.append(f"mlxd {status.version}", style="bold")
    line.append(f"  {server.url}  ")
    line.append("draining" if status.draining else "ok", style="yellow" if status.draining else "green")
    line.append(f"  up {uptime(status.time - status.started_at)}")
    if status.memory_budget_bytes:
        line.append(f"  budget {human_bytes(status.memory_budget_bytes)}")
    line.append(f"  {time.strftime('%H:%M:%S', time.localtime(status.time))}  (Ctrl-C quits)", style="dim")
    return line


def activity(samples: list[Sample]) -> Text:
    """Tokens/s and TTFT over the kept samples, as sparklines with the latest
    and peak readings, and the MLX memory now."""
    recent = samples[-HISTORY:]
    rate = [s.tokens_per_second for s in recent]
    timed = [s for s in recent if s.ttft_p50 is not None]
    line = Text()
    line.append("tok/s  ", style="bold")
    line.append(sparkline(rate).ljust(HISTORY), style="cyan")
    line.append(f"  now {rate[-1] if rate else 0:.1f}  peak {max(rate, default=0):.1f}\n")
    line.append("TTFT   ", style="bold")
    line.append(sparkline(s.ttft_p50 for s in recent).ljust(HISTORY), style="magenta")
    if timed:
        line.append(f"  p50 {duration(timed[-1].ttft_p50)}  p95 {duration(timed[-1].ttft_p95)}")
    else:
        line.append("  no first token in the last minute")
    memory = sum(recent[-1].memory_bytes.values()) if recent else 0
    line.append(f"\nMLX memory now {human_bytes(memory)}")
    return line


def others(status: Status) -> Text:
    """One line for the MCP servers and one for the nodes (when configured)."""
    line = Text()
    if status.mcp_servers:
        line.append("mcp    ", style="bold")
        for s in status.mcp_servers:
            line.append(f"{s.name} ")
            line.append("connected" if s.connected else "disconnected", style="green" if s.connected else "red")
            line.append(f" ({s.tools} tools)   ")
        line.append("\n")
    if status.nodes:
        line.append("nodes  ", style="bold")
        for n in status.nodes:
            line.append(f"{n.name} {n.address} ")
            line.append(n.state, style={"up": "green", "down": "red"}.get(n.state, "dim"))
            line.append(f"{': ' + n.error if n.error else ''}   ")
    return line


def screen(status: Status, samples: list[Sample], server: Target, height: int) -> Group:
    """The whole ``mlxd top`` view for a terminal ``height`` lines high."""
    errors = model_errors(status)
    used = (
        1 + 5 + len(status.models) + len(errors.plain.splitlines()) + 3 + bool(status.mcp_servers) + bool(status.nodes)
    )
    room = max(1, height - used - 6)
    parts = [header(status, server), models_table(status), errors, activity(samples), others(status)]
    return Group(*parts, requests_table(status, room))


def unreachable(server: Target, reason: str) -> Text:
    """What ``mlxd top`` shows while the server cannot be read."""
    line = Text()
    line.append("mlxd top", style="bold")
    line.append(f"  {server.url}  ")
    line.append(reason, style="red")
    line.append(f"\nretrying every second  {time.strftime('%H:%M:%S')}  (Ctrl-C quits)", style="dim")
    return line


# -- the commands -------------------------------------------------------------------------


def run_top(server: Target, interval: float = 1.0, console: Console | None = None) -> int:
    """Show the live view until Ctrl-C; return 0."""
    console = console or Console()
    samples: deque[Sample] = deque(maxlen=HISTORY)
    since: float | None = None
    try:
        with Live(console=console, screen=True, auto_refresh=False, redirect_stdout=False) as live:
            while True:
                try:
                    status = fetch_status(server, since)
                except StatusUnavailable as exc:
                    live.update(unreachable(server, str(exc)), refresh=True)
                else:
                    if status.samples and since is not None and status.samples[0].t <= since:
                        samples.clear()  # cannot happen with an honest server; start over
                    samples.extend(status.samples)
                    since = samples[-1].t if samples else since
                    live.update(screen(status, list(samples), server, console.size.height), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def print_models(server: Target, console: Console | None = None) -> int:
    """Print the model table once, then the models' errors; 0, or 1 (and
    why, on stderr) when the server cannot be read. Not on a terminal the
    lines are as long as the table needs (:data:`PLAIN_WIDTH` at most)."""
    console = console or Console(width=None if sys.stdout.isatty() else PLAIN_WIDTH)
    try:
        status = fetch_status(server)
    except StatusUnavailable as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 1
    console.print(models_table(status, expand=False, lifetimes=True))
    console.print(model_errors(status), end="")
    return 0
