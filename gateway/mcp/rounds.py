"""The one driver of server-side MCP tool rounds, for every front-end that runs them.

A request whose tools name configured MCP servers is answered in rounds,
each an ordinary worker request of its front-end: the model answers; its
calls to MCP tools are run through the :class:`~gateway.mcp.client.McpHub`
and their results go back to the model in the next round. What a round
looks like on the wire (Responses items and events, Anthropic content
blocks) is the front-end's :class:`RoundAdapter`; the rules are held here,
the same for every protocol:

- **Tool choice per round**: the client's own for round 0, ``auto`` for
  the rounds after, ``none`` for the last of ``max_rounds`` (an adapter
  may narrow a round further: Responses' ``max_tool_calls`` budget, or
  keep a client's plain ``required``).
- **When the loop ends**: a round failed, called no MCP tool, or was the
  last; a round called one of the client's own tools (its MCP calls run
  first, then the answer ends with the client's calls); a call needs the
  client's approval (the round's other calls still run).
- **Calls**: arguments that are not JSON are an ``invalid_arguments``
  outcome and are never sent; every call is bounded and audited by the hub;
  the model reads a failed call as ``Error: <text>`` (:func:`result_text`).
- **Usage** is summed field by field over the rounds (:func:`add_usage`).
- **Streamed or collected**: :func:`run_rounds` yields the adapter's pieces
  batch by batch as they come, so a stream sends each batch at once and a
  whole answer drains the run and keeps the adapter's final object.

Runs on the gateway's event loop; each round reaches the workers through
the adapter's submission (the front-end's ``submit`` module).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any, AsyncIterator, Generic, Literal, Protocol, TypeVar

from gateway.core.backend import RequestStream
from gateway.frontend.request_flow import next_output
from gateway.mcp.client import CallOutcome, McpHub
from shared.protocol import RequestOutput

Choice = Literal["client", "auto", "none"]
"""The tool choice of a round: the client's own (round 0), ``auto``, or
``none`` (the last round)."""

P = TypeVar("P")
"""What an adapter shows of a round: a Responses event, an Anthropic block."""


@dataclass
class McpCall:
    """One call of the model to an MCP tool: ``call_id`` its id in the
    model's answer, ``name`` the tool, ``arguments`` the decoded arguments
    (None: not JSON, never sent), ``raw`` the arguments as the protocol
    carries them, ``server`` the label of the server that offers the tool.
    ``shown`` is the adapter's own note of how it showed the call."""

    call_id: str
    name: str
    arguments: Any
    raw: Any
    server: str
    shown: Any = None


@dataclass
class RoundRead:
    """What a finished round left: its MCP calls (in order), whether it also
    called one of the client's own tools, its ``usage`` (None: none given)
    and ``failed``, the output that ended a failed round."""

    mcp_calls: list[McpCall]
    client_calls: bool = False
    usage: dict[str, Any] | None = None
    failed: RequestOutput | None = None


class RoundJob(Protocol):
    """A submitted round: its worker request stream and request id."""

    @property
    def stream(self) -> RequestStream:
        """The round's worker request stream."""
        ...

    @property
    def request_id(self) -> str:
        """The round's request id."""
        ...


class RoundAdapter(Protocol[P]):
    """A protocol front-end's side of the rounds (see the module docstring)."""

    async def submit(self, round_: int, choice: Choice) -> RoundJob:
        """Submit round ``round_`` with tool choice ``choice``.

        Raises:
            APIError: the round cannot be submitted (400, 404, 503).
        """
        ...

    def read(self, first: RequestOutput, last: bool) -> AsyncIterator[list[P]]:
        """Read the submitted round from its ``first`` output to its end,
        closing its stream; yield what it shows as it comes (``last``: no
        round follows it). :meth:`ended` then tells what it left."""
        ...

    def ended(self) -> RoundRead:
        """What the round just read left."""
        ...

    def approval(self, call: McpCall) -> list[P] | None:
        """What asks the client to approve ``call`` (the loop then ends), or
        None when the call may run."""
        ...

    def opened(self, call: McpCall) -> list[P]:
        """What shows ``call`` before it runs."""
        ...

    def closed(self, call: McpCall, outcome: CallOutcome) -> list[P]:
        """What shows ``call``'s ``outcome``."""
        ...

    def feed_back(self, done: list[tuple[McpCall, CallOutcome]]) -> None:
        """Add the round's answer and its calls' results to the next round's
        conversation."""
        ...

    def finish(self, usage: dict[str, Any] | None, failed: RequestOutput | None) -> list[P]:
        """End the answer (``usage`` summed over the rounds; ``failed``: the
        output that ended a failed round) and keep its final object; what
        is left to show."""
        ...


def json_arguments(text: str | None) -> Any:
    """A call's JSON arguments text decoded (None when it is not JSON or is
    ``null``; empty text is ``{}``)."""
    try:
        return json.loads(text or "{}")
    except ValueError:
        return None


def result_text(outcome: CallOutcome) -> str:
    """The text the model reads for a call's outcome."""
    return outcome.text if outcome.ok else f"Error: {outcome.text}"


def add_usage(total: dict[str, Any] | None, more: dict[str, Any] | None) -> dict[str, Any] | None:
    """``total`` with ``more`` added field by field: numbers summed, objects
    added likewise, anything else kept as first seen. Either may be None."""
    if more is None:
        return total
    if total is None:
        return copy.deepcopy(more)
    for key, value in more.items():
        if isinstance(value, dict):
            before = total.get(key)
            total[key] = add_usage(before if isinstance(before, dict) else None, value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            total[key] = (total.get(key) or 0) + value
        elif key not in total:
            total[key] = value
    return total


async def run_call(hub: McpHub, call: McpCall, origin: str) -> CallOutcome:
    """Run ``call`` on its server (``origin`` names the API, for the audit
    log); arguments that are not JSON are refused without a call."""
    if call.arguments is None:
        return CallOutcome("invalid_arguments", "the arguments are not JSON")
    return await hub.call(call.server, call.name, call.arguments, origin=origin)


class McpRounds(Generic[P]):
    """The rounds of one request: ``adapter`` is the front-end's, ``hub``
    the MCP sessions, ``origin`` the API name for the audit log,
    ``max_rounds`` the configured bound (``server.mcp_max_rounds``)."""

    def __init__(self, adapter: RoundAdapter[P], hub: McpHub, origin: str, max_rounds: int) -> None:
        self.adapter = adapter
        self._hub = hub
        self._origin = origin
        self.max_rounds = max_rounds

    async def start(self) -> RoundJob:
        """Submit round 0 (the client's tool choice); its job.

        Raises:
            APIError: as the adapter's :meth:`~RoundAdapter.submit`.
        """
        return await self.adapter.submit(0, self._choice(0))

    def _choice(self, round_: int) -> Choice:
        """The tool choice of round ``round_``."""
        if round_ == 0:
            return "client"
        return "none" if round_ >= self.max_rounds - 1 else "auto"

    async def run(self, first: RequestOutput) -> AsyncIterator[list[P]]:
        """Every round from round 0's ``first`` output on: yield the
        adapter's pieces batch by batch until the answer ends.

        Raises:
            APIError: a later round could not be submitted.
        """
        adapter = self.adapter
        usage: dict[str, Any] | None = None
        round_ = 0
        while True:
            last = round_ >= self.max_rounds - 1
            async for pieces in adapter.read(first, last):
                if pieces:
                    yield pieces
            read = adapter.ended()
            usage = add_usage(usage, read.usage)
            stop = read.failed is not None or not read.mcp_calls or last
            done: list[tuple[McpCall, CallOutcome]] = []
            if not stop:
                for call in read.mcp_calls:
                    asked = adapter.approval(call)
                    if asked is not None:
                        if asked:
                            yield asked
                        stop = True
                        continue
                    opened = adapter.opened(call)
                    if opened:
                        yield opened
                    outcome = await run_call(self._hub, call, self._origin)
                    closed = adapter.closed(call, outcome)
                    if closed:
                        yield closed
                    done.append((call, outcome))
                stop = stop or read.client_calls
            if stop:
                final = adapter.finish(usage, read.failed)
                if final:
                    yield final
                return
            adapter.feed_back(done)
            round_ += 1
            job = await adapter.submit(round_, self._choice(round_))
            first = await next_output(job.stream, job.request_id)
