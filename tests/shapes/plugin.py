"""Checking every recorded response of the test suite against the official types.

Test gateways record their responses (:mod:`tests.shapes.recorder`): gateway
processes into files registered here with :func:`record_file`, in-process
route apps into :data:`LOCAL`. After each test, :func:`check_new` reads what
was recorded since the last call and checks each exchange with
:func:`tests.shapes.routes.check_exchange`; ``tests/conftest.py`` runs it
from an autouse fixture (failing the test whose responses broke a type) and
once more at the end of the session for responses that ended later (a
client that left a stream early).

Cost: the checks import the SDK types once, on the first recorded response;
then each body and stream event is one strict pydantic validation.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.shapes.recorder import Record

LOCAL: list[Record] = []
"""Records of the in-process route apps (``tests/unit/support.py``)."""

MAX_REPORTED = 5
"""Problems shown per check (the rest are counted)."""


@dataclass
class _Files:
    """The registered record files and how far each has been read."""

    offsets: dict[Path, int] = field(default_factory=dict)
    closed: set[Path] = field(default_factory=set)


_FILES = _Files()
_NUMBERS = itertools.count()
CHECKED = {"responses": 0, "objects": 0, "seconds": 0.0}
"""How many responses had something to check this session, how many bodies
and stream events were checked in them, and the time it took (for the
summary line)."""


def record_file(directory: Path) -> Path:
    """A new, empty record file in ``directory`` for a gateway to append to,
    registered for checks (a gateway started again in the same directory
    gets a file of its own)."""
    path = directory / f"responses-{next(_NUMBERS)}.jsonl"
    path.write_bytes(b"")
    _FILES.offsets[path] = 0
    return path


def close_file(path: Path) -> None:
    """Note that nothing more will be appended to ``path``: it is forgotten
    after its next read."""
    _FILES.closed.add(path)


def _new_records() -> list[Record]:
    records = LOCAL[:]
    LOCAL.clear()
    for path, offset in list(_FILES.offsets.items()):
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        _FILES.offsets[path] = offset + end
        records += [json.loads(line) for line in data[:end].splitlines() if line]
        if path in _FILES.closed:
            del _FILES.offsets[path]
            _FILES.closed.discard(path)
    return records


def check_new() -> list[str]:
    """Check every response recorded since the last call; return one
    message per exchange that does not validate (empty when all do)."""
    started = time.perf_counter()
    records = _new_records()
    if not records:
        return []
    from tests.shapes.routes import Exchange, check_exchange

    problems = []
    for record in records:
        exchange = Exchange(**record)
        try:
            objects = check_exchange(exchange)
        except Exception as err:  # a ValidationError or an AssertionError, reported alike
            problems.append(f"{exchange.describe()}: {type(err).__name__}: {err}\n  body: {exchange.body[:600]!r}")
            continue
        CHECKED["responses"] += objects > 0
        CHECKED["objects"] += objects
    CHECKED["seconds"] += time.perf_counter() - started
    return problems


def report(problems: list[str]) -> str:
    """The failure message for ``problems``."""
    shown = "\n".join(problems[:MAX_REPORTED])
    more = f"\n(and {len(problems) - MAX_REPORTED} more)" if len(problems) > MAX_REPORTED else ""
    return f"{len(problems)} response(s) not of their official type (tests/shapes):\n{shown}{more}"
