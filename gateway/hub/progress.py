"""Watching a pull's bytes arrive and showing them.

:class:`DownloadWatcher` measures progress from the files themselves, not
from huggingface-hub's progress bars (whose internals change between
releases): every ``interval`` seconds it sums, per fetched file, the size
of its finished blob in the cache (named by its etag) or of the
temporary ``<etag>.<id>.incomplete`` file huggingface-hub writes while
downloading it, and hands a :class:`PullStatus` to its listener. That
works the same for plain HTTP and for Xet transfers.

Two ways to show a status: :class:`TerminalBar` (one redrawn line with a
bar, bytes, rate and ETA, for a terminal) and :class:`LineReport` (a plain
line at most every few seconds and at each change of phase, for logs and
pipes). The Ollama route turns statuses into Ollama's progress objects.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, TextIO

from gateway.hub.selection import RemoteFile

Phase = Literal["listing", "downloading", "verifying", "complete", "failed"]


@dataclass(frozen=True)
class FileProgress:
    """One file of a pull: its path, digest, size and bytes on disk so far."""

    path: str
    digest: str
    total: int
    done: int


@dataclass(frozen=True)
class PullStatus:
    """Where a pull is: its phase, files, byte totals, the recent rate in
    bytes per second and the estimated seconds left (None when unknown);
    ``error`` says why a failed pull failed."""

    label: str
    phase: Phase
    files: tuple[FileProgress, ...] = ()
    rate: float = 0.0
    eta: float | None = None
    error: str = ""

    @property
    def total(self) -> int:
        """Bytes of every file to fetch."""
        return sum(f.total for f in self.files)

    @property
    def done(self) -> int:
        """Bytes on disk so far."""
        return sum(f.done for f in self.files)

    @property
    def fraction(self) -> float:
        """``done / total`` (1 for an empty pull)."""
        return self.done / self.total if self.total else 1.0


Listener = Callable[[PullStatus], None]


@dataclass
class DownloadWatcher:
    """Measures the files of one pull in ``blobs`` every ``interval``
    seconds on its own thread (:meth:`start`, :meth:`stop`) and passes each
    :class:`PullStatus` to ``listener``."""

    label: str
    blobs: Path
    files: list[RemoteFile]
    listener: Listener
    interval: float = 0.5
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _samples: deque = field(default_factory=lambda: deque(maxlen=20))

    def measure(self, phase: Phase = "downloading") -> PullStatus:
        """The status now (also records a rate sample)."""
        progress = tuple(FileProgress(f.path, f.digest, f.size, min(self._on_disk(f), f.size)) for f in self.files)
        now = time.monotonic()
        done = sum(p.done for p in progress)
        self._samples.append((now, done))
        first_time, first_done = self._samples[0]
        rate = (done - first_done) / (now - first_time) if now > first_time else 0.0
        total = sum(p.total for p in progress)
        eta = (total - done) / rate if rate > 0 else None
        return PullStatus(self.label, phase, progress, rate, eta)

    def _on_disk(self, remote: RemoteFile) -> int:
        """Bytes of ``remote`` on disk: its blob, else its largest partial file."""
        try:
            return (self.blobs / remote.blob_name).stat().st_size
        except OSError:
            pass
        sizes = []
        for partial in self.blobs.glob(f"{remote.blob_name}.*incomplete"):
            try:
                sizes.append(partial.stat().st_size)
            except OSError:
                continue
        return max(sizes, default=0)

    def start(self) -> None:
        """Report a first status now, then every ``interval`` seconds."""
        self.listener(self.measure())
        self._thread = threading.Thread(target=self._run, name=f"pull-progress {self.label}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """The watcher thread: measure and report until stopped."""
        while not self._stop.wait(self.interval):
            self.listener(self.measure())

    def stop(self) -> None:
        """Stop reporting (waits for the thread)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def human_bytes(count: float) -> str:
    """``count`` bytes in decimal units (``"1.2 GB"``)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(count) < 1000 or unit == "TB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1000
    return f"{count:.1f} TB"


def human_seconds(seconds: float | None) -> str:
    """``h:mm:ss`` or ``m:ss``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    seconds = int(seconds + 0.5)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def summary(status: PullStatus) -> str:
    """One plain line: phase, share, bytes, rate and time left."""
    if status.phase == "failed":
        return f"pull {status.label}: failed: {status.error}"
    if status.phase == "complete":
        return f"pull {status.label}: complete, {human_bytes(status.total)} in {len(status.files)} files"
    if status.phase == "listing":
        return f"pull {status.label}: reading the file list"
    if status.phase == "verifying":
        return f"pull {status.label}: checking hashes of {len(status.files)} files"
    return (
        f"pull {status.label}: {status.fraction:.0%} ({human_bytes(status.done)} of {human_bytes(status.total)})"
        f" at {human_bytes(status.rate)}/s, {human_seconds(status.eta)} left"
    )


class TerminalBar:
    """Draws a status as one line redrawn in place on ``stream`` (a
    terminal): label, bar, percentage, bytes, rate and ETA; other phases
    get a line of their own."""

    WIDTH = 28

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._drawn = False
        self._lock = threading.Lock()

    def __call__(self, status: PullStatus) -> None:
        with self._lock:
            if status.phase == "downloading":
                filled = int(self.WIDTH * status.fraction)
                bar = "#" * filled + "-" * (self.WIDTH - filled)
                line = (
                    f"{status.label} [{bar}] {status.fraction:4.0%} "
                    f"{human_bytes(status.done)}/{human_bytes(status.total)} "
                    f"{human_bytes(status.rate)}/s ETA {human_seconds(status.eta)}"
                )
                self.stream.write("\r" + line + "\x1b[K")
                self._drawn = True
            else:
                if self._drawn:
                    self.stream.write("\n")
                    self._drawn = False
                self.stream.write(summary(status) + "\n")
            self.stream.flush()


class LineReport:
    """Writes :func:`summary` lines through ``write``: on every change of
    phase, and while downloading at most once per ``every`` seconds."""

    def __init__(self, write: Callable[[str], None], every: float = 10.0) -> None:
        self.write = write
        self.every = every
        self._phase: str = ""
        self._last = 0.0
        self._lock = threading.Lock()

    def __call__(self, status: PullStatus) -> None:
        with self._lock:
            now = time.monotonic()
            if status.phase == self._phase and now - self._last < self.every:
                return
            self._phase, self._last = status.phase, now
        self.write(summary(status))


def with_phase(status: PullStatus, phase: Phase, error: str = "") -> PullStatus:
    """``status`` moved to another phase."""
    return replace(status, phase=phase, error=error)
