"""gateway.mcp.rounds: the one MCP round driver's rules, with a scripted
adapter and hub (the Responses and Anthropic adapters are covered end to
end by tests/e2e/test_mcp.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from gateway.mcp.client import CallOutcome
from gateway.mcp.rounds import McpCall, McpRounds, RoundRead, add_usage, json_arguments, result_text
from shared.protocol import RequestOutput


class _Stream:
    """A request stream whose first output is all it holds."""

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> RequestOutput:
        return RequestOutput(request_id=self.request_id, text="")

    async def aclose(self) -> None:
        pass


@dataclass
class _Job:
    stream: _Stream
    request_id: str


@dataclass
class Scripted:
    """An adapter whose rounds are ``reads`` in order; it records what the
    driver asked of it."""

    reads: list[RoundRead]
    approve: set[str] = field(default_factory=set)
    choices: list[tuple[int, str]] = field(default_factory=list)
    fed: list[list[tuple[str, str]]] = field(default_factory=list)
    finished: list[tuple[Any, Any]] = field(default_factory=list)
    _round: int = 0

    async def submit(self, round_: int, choice: str) -> _Job:
        self.choices.append((round_, choice))
        return _Job(_Stream(f"r{round_}"), f"r{round_}")

    async def read(self, first: RequestOutput, last: bool):
        yield [f"round {self._round}{' (last)' if last else ''}"]

    def ended(self) -> RoundRead:
        read = self.reads[self._round]
        self._round += 1
        return read

    def approval(self, call: McpCall) -> list[str] | None:
        return [f"approve {call.name}"] if call.name in self.approve else None

    def opened(self, call: McpCall) -> list[str]:
        return [f"open {call.name}"]

    def closed(self, call: McpCall, outcome: CallOutcome) -> list[str]:
        return [f"close {call.name}: {result_text(outcome)}"]

    def feed_back(self, done: list[tuple[McpCall, CallOutcome]]) -> None:
        self.fed.append([(call.name, outcome.outcome) for call, outcome in done])

    def finish(self, usage: Any, failed: Any) -> list[str]:
        self.finished.append((usage, failed))
        return ["end"]


class Hub:
    """Records the calls it is asked to run; every call succeeds."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any, str]] = []

    async def call(self, server: str, name: str, arguments: Any, *, origin: str) -> CallOutcome:
        self.calls.append((server, name, arguments, origin))
        return CallOutcome("ok", f"{name} done")


def call(name: str, arguments: Any = None) -> McpCall:
    return McpCall(f"id-{name}", name, {} if arguments is None else arguments, "{}", "srv")


def run(adapter: Scripted, hub: Hub, max_rounds: int = 3) -> list[str]:
    rounds = McpRounds(adapter, hub, "test", max_rounds)

    async def drive() -> list[str]:
        job = await rounds.start()
        shown: list[str] = []
        async for pieces in rounds.run(await job.stream.__anext__()):
            shown += pieces
        return shown

    return asyncio.run(drive())


def test_tool_choice_is_the_clients_then_auto_then_none_and_the_last_round_ends_it():
    adapter = Scripted([RoundRead([call("add")], usage={"tokens": 1}) for _ in range(3)])
    hub = Hub()
    shown = run(adapter, hub, max_rounds=3)
    assert adapter.choices == [(0, "client"), (1, "auto"), (2, "none")]
    assert len(hub.calls) == 2  # the last round's calls never run
    assert shown[-2:] == ["round 2 (last)", "end"]
    assert adapter.finished == [({"tokens": 3}, None)]


def test_a_round_without_mcp_calls_ends_the_loop():
    adapter = Scripted([RoundRead([])])
    assert run(adapter, Hub()) == ["round 0", "end"]
    assert adapter.choices == [(0, "client")]


def test_client_calls_end_the_loop_after_the_rounds_mcp_calls_ran():
    adapter = Scripted([RoundRead([call("add")], client_calls=True)])
    hub = Hub()
    shown = run(adapter, hub)
    assert shown == ["round 0", "open add", "close add: add done", "end"]
    assert [c[1] for c in hub.calls] == ["add"] and adapter.fed == []


def test_an_approval_ends_the_loop_and_the_other_calls_still_run():
    adapter = Scripted([RoundRead([call("ask"), call("add")])], approve={"ask"})
    hub = Hub()
    shown = run(adapter, hub)
    assert shown == ["round 0", "approve ask", "open add", "close add: add done", "end"]
    assert [c[1] for c in hub.calls] == ["add"]


def test_arguments_that_are_not_json_never_reach_the_server():
    bad = McpCall("id", "add", json_arguments("{not json"), "{not json", "srv")
    adapter = Scripted([RoundRead([bad]), RoundRead([])])
    hub = Hub()
    shown = run(adapter, hub)
    assert hub.calls == []
    assert "close add: Error: the arguments are not JSON" in shown
    assert adapter.fed == [[("add", "invalid_arguments")]]


def test_a_failed_round_runs_no_calls_and_finishes_failed():
    failed = RequestOutput(request_id="r0", finish_reason="error", error="boom")
    adapter = Scripted([RoundRead([call("add")], failed=failed)])
    hub = Hub()
    assert run(adapter, hub) == ["round 0", "end"]
    assert hub.calls == [] and adapter.finished == [(None, failed)]


def test_calls_go_to_their_server_with_the_origin():
    adapter = Scripted([RoundRead([call("add", {"a": 1})]), RoundRead([])])
    hub = Hub()
    run(adapter, hub)
    assert hub.calls == [("srv", "add", {"a": 1}, "test")]


def test_usage_is_summed_field_by_field():
    total = add_usage(None, {"input_tokens": 2, "details": {"cached": 1}, "tier": "standard", "flag": True})
    total = add_usage(total, {"input_tokens": 3, "details": {"cached": 4}, "tier": "other", "new": 5})
    assert total == {"input_tokens": 5, "details": {"cached": 5}, "tier": "standard", "flag": True, "new": 5}
    assert add_usage(total, None) is total


def test_json_arguments():
    assert json_arguments("") == {} and json_arguments(None) == {}
    assert json_arguments('{"a": 1}') == {"a": 1}
    assert json_arguments("null") is None and json_arguments("{") is None
