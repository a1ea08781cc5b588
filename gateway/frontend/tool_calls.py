"""Tool calls assembled from the worker's pieces, with the answer's call ids.

The worker streams each tool call as :class:`~shared.protocol.ToolCallDelta`
pieces: the first piece of call ``index`` carries its ``id`` and ``name``,
every piece may carry a fragment of its ``arguments`` (JSON text). Every
protocol family assembles them here, once: :class:`ToolCallAssembler`
collects the calls of one choice in the order their first piece arrived and
names each with an id minted by the protocol's :class:`CallIds` policy
(``call_…`` for OpenAI chat and Responses, ``toolu_…`` for Anthropic, the
worker's own id or none for Ollama).

Pure data; no I/O, no locks. One assembler per choice, used by one owner
(the event loop).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from gateway.core.ids import new_id
from shared.protocol import ToolCall, ToolCallDelta

log = logging.getLogger("mlxd.gateway.tool_calls")


@dataclass(frozen=True)
class CallIds:
    """How one protocol names its tool calls.

    ``prefix`` plus ``digits`` random hex digits is a fresh id, minted for a
    call whose first piece came without an id (or with one this answer
    already used). A worker id is kept as ``adopt`` rewrites it (unchanged
    by default). With an empty ``prefix`` no id is ever minted: a call
    without a worker id has none (``None``).
    """

    prefix: str
    digits: int = 32
    adopt: Callable[[str], str] = lambda worker_id: worker_id

    def fresh(self) -> str | None:
        """A new random id (None when this policy mints none)."""
        if not self.prefix:
            return None
        return new_id(self.prefix, self.digits)

    def __call__(self, worker_id: str | None) -> str | None:
        """The answer's id for a call the worker named ``worker_id`` (None:
        unnamed or already used)."""
        return self.adopt(worker_id) if worker_id else self.fresh()


def _anthropic_id(worker_id: str) -> str:
    """A worker id as a ``toolu_`` id: kept when it already is one, else its
    random part (after any ``call_``) behind ``toolu_``."""
    if worker_id.startswith(ANTHROPIC_PREFIX):
        return worker_id
    return ANTHROPIC_PREFIX + worker_id.removeprefix("call_")


ANTHROPIC_PREFIX = "toolu_"
"""What every Anthropic tool-use id starts with."""

OPENAI_CALL_IDS = CallIds("call_", digits=24)
"""Chat completions: the worker's id, else ``call_`` + 24 hex digits."""

RESPONSES_CALL_IDS = CallIds("call_")
"""Responses ``call_id``: the worker's id, else ``call_`` + 32 hex digits."""

ANTHROPIC_CALL_IDS = CallIds(ANTHROPIC_PREFIX, adopt=_anthropic_id)
"""Anthropic ``tool_use`` ids: ``toolu_`` + the worker id's random part,
else ``toolu_`` + 32 hex digits."""

OLLAMA_CALL_IDS = CallIds("")
"""Ollama: the worker's id when it gave one, else no id."""


@dataclass
class AssembledCall:
    """One tool call being assembled: its ``position`` among the choice's
    calls (0, 1, ... by first piece), the worker's ``index``, its id (None
    only under :data:`OLLAMA_CALL_IDS`), name and argument pieces so far."""

    position: int
    index: int
    id: str | None
    name: str
    pieces: list[str] = field(default_factory=list)

    @property
    def arguments(self) -> str:
        """The argument text received so far."""
        return "".join(self.pieces)

    def as_tool_call(self) -> ToolCall:
        """The call as a :class:`~shared.protocol.ToolCall` (empty id when
        it has none)."""
        return ToolCall(id=self.id or "", name=self.name, arguments=self.arguments)


class ToolCallAssembler:
    """The tool calls of one choice, assembled from their pieces.

    Calls are numbered by :attr:`AssembledCall.position` in the order their
    first piece arrives, whatever ``index`` the worker used, so the
    numbering is dense. A call's id comes from ``ids`` (the worker's id,
    rewritten, or a fresh one when it gave none or repeated one already
    used in this choice); its name from the first piece that has one.
    """

    def __init__(self, ids: CallIds) -> None:
        self._ids = ids
        self._calls: dict[int, AssembledCall] = {}
        self._used: set[str] = set()

    def add(self, piece: ToolCallDelta) -> tuple[AssembledCall, bool]:
        """Account for ``piece``; return its call and whether ``piece``
        started it."""
        call = self._calls.get(piece.index)
        started = call is None
        if call is None:
            if piece.id is None or piece.name is None:
                log.error("tool call %d started without its id or name", piece.index)
            worker_id = piece.id if piece.id not in self._used else None
            call = AssembledCall(len(self._calls), piece.index, self._ids(worker_id), piece.name or "")
            if call.id is not None:
                self._used.add(call.id)
            self._calls[piece.index] = call
        elif piece.name and not call.name:
            call.name = piece.name
        if piece.arguments:
            call.pieces.append(piece.arguments)
        return call, started

    def calls(self) -> list[AssembledCall]:
        """Every call so far, by position."""
        return list(self._calls.values())

    def __bool__(self) -> bool:
        """Whether any call has started."""
        return bool(self._calls)
