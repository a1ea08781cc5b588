"""Fault injection for the end-to-end tests of worker failure handling.

Off unless the ``MLXD_FAULT`` environment variable is set (the gateway
passes its environment to its workers). The injection points are:

* ``scheduler``: the scheduler loop raises :class:`InjectedFault` on an
  engine step, outside the step itself;
* ``input``: the input thread raises on a ``GenerateRequest``;
* ``output``: the output thread raises on a token step;
* ``protocol``: the worker reports a wire protocol version that is not
  :data:`shared.protocol.PROTOCOL_VERSION` in its ``Hello``.

The variable's value is one of:

* ``POINT@N``: the fault at ``POINT`` fires on its N-th pass (``@N`` may be
  left out: the first). When ``MLXD_FAULT_MARKER`` names a file, it fires
  only if that file does not exist yet, and creates it: so it fires once,
  however many workers the gateway starts after it.
* ``files:DIR``: every point is armed by a file named after it in the
  directory ``DIR`` (``DIR/scheduler``, ``DIR/input``, ``DIR/output``,
  ``DIR/protocol``): the first pass of a point after its file appears
  fires, and renames the file to ``POINT.fired`` in ``DIR`` (atomically:
  exactly one pass, of one thread in one worker, fires for each file
  created). So a test picks the fault, and the moment it fires, while the
  gateway runs (e.g. once its requests are streaming), and one gateway
  serves several fault tests. Each pass of a point costs one ``stat``
  call.

:func:`reached` may be called from any thread; each point is passed by one
thread only, so its counter needs no lock.
"""

from __future__ import annotations

import os

FAULT_ENV = "MLXD_FAULT"
"""Environment variable naming the injection point (see the module docstring)."""

MARKER_ENV = "MLXD_FAULT_MARKER"
"""Environment variable naming the file that makes a ``POINT@N`` fault fire
only once."""

FILES_PREFIX = "files:"
"""The prefix of the ``MLXD_FAULT`` value that arms the points by files in
a directory (see the module docstring)."""

FIRED_SUFFIX = ".fired"
"""What the file arming a point is renamed to (``DIR/POINT.fired``) when
its fault fires."""


class InjectedFault(RuntimeError):
    """The exception an armed injection point raises."""


def _parse(spec: str) -> tuple[str | None, int, str | None]:
    """(point, N, directory) of an ``MLXD_FAULT`` value; point None when no
    point has a count (nothing configured, or ``files:DIR``)."""
    spec = spec.strip()
    if spec.startswith(FILES_PREFIX):
        return None, 0, spec.removeprefix(FILES_PREFIX)
    point, _, count = spec.partition("@")
    return (point or None), int(count or 1), None


_POINT, _AT, _DIR = _parse(os.environ.get(FAULT_ENV, ""))
_passed: dict[str, int] = {}


def _claim() -> bool:
    """True when a ``POINT@N`` fault may fire (no marker, or we created it now)."""
    marker = os.environ.get(MARKER_ENV)
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def _file_armed(directory: str, point: str) -> bool:
    """True when ``directory/point`` exists and this call renamed it to
    ``directory/point.fired`` (the one pass that fires for that file)."""
    armed_by = os.path.join(directory, point)
    if not os.path.exists(armed_by):
        return False
    try:
        os.rename(armed_by, armed_by + FIRED_SUFFIX)
    except FileNotFoundError:  # another thread or worker claimed it first
        return False
    return True


def armed(point: str) -> bool:
    """True when ``point`` is the configured fault and it may fire now
    (used for faults that change a value instead of raising); with
    ``files:DIR``, when its file is there (it is then renamed)."""
    if _DIR is not None:
        return _file_armed(_DIR, point)
    return _POINT == point and _claim()


def reached(point: str) -> None:
    """Pass injection point ``point``; raises :class:`InjectedFault` when the
    fault at it fires now: its N-th pass with ``POINT@N``, the first pass
    after its file appeared with ``files:DIR``. Costs two comparisons when
    no fault is configured."""
    if _DIR is not None:
        if _file_armed(_DIR, point):
            raise InjectedFault(f"injected fault at {point} (armed by {os.path.join(_DIR, point)})")
        return
    if _POINT != point:
        return
    _passed[point] = count = _passed.get(point, 0) + 1
    if count == _AT and _claim():
        raise InjectedFault(f"injected fault at {point} (pass {count})")
