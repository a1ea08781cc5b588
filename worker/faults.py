"""Fault injection for the end-to-end tests of worker failure handling.

Off unless the ``MLXD_FAULT`` environment variable is set (the gateway
passes its environment to its workers). Its value names one injection point
and, after ``@``, how many times the point is passed before the fault fires
(default 1):

* ``scheduler@N``: the scheduler loop raises :class:`InjectedFault` on its
  N-th engine step, outside the step itself;
* ``input@N``: the input thread raises on its N-th ``GenerateRequest``;
* ``output@N``: the output thread raises on its N-th token step;
* ``protocol``: the worker reports a wire protocol version that is not
  :data:`shared.protocol.PROTOCOL_VERSION` in its ``Hello``.

When ``MLXD_FAULT_MARKER`` names a file, a fault fires only if that file
does not exist yet, and creates it: so one fault fires once per test,
however many workers the gateway starts after it.

:func:`reached` may be called from any thread; each point is passed by one
thread only, so its counter needs no lock.
"""

from __future__ import annotations

import os

FAULT_ENV = "MLXD_FAULT"
"""Environment variable naming the injection point (see the module docstring)."""

MARKER_ENV = "MLXD_FAULT_MARKER"
"""Environment variable naming the file that makes a fault fire only once."""


class InjectedFault(RuntimeError):
    """The exception an armed injection point raises."""


def _parse(spec: str) -> tuple[str | None, int]:
    point, _, count = spec.strip().partition("@")
    return (point or None), int(count or 1)


_POINT, _AT = _parse(os.environ.get(FAULT_ENV, ""))
_passed: dict[str, int] = {}


def _claim() -> bool:
    """True when this fault may fire (no marker, or we created it now)."""
    marker = os.environ.get(MARKER_ENV)
    if not marker:
        return True
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except FileExistsError:
        return False
    return True


def armed(point: str) -> bool:
    """True when ``point`` is the configured fault and it may fire now
    (used for faults that change a value instead of raising)."""
    return _POINT == point and _claim()


def reached(point: str) -> None:
    """Pass injection point ``point``; raises :class:`InjectedFault` when it
    is the configured one and this is its N-th pass. Costs one comparison
    when no fault is configured."""
    if _POINT != point:
        return
    _passed[point] = count = _passed.get(point, 0) + 1
    if count == _AT and _claim():
        raise InjectedFault(f"injected fault at {point} (pass {count})")
