"""The official-type checks of :mod:`tests.shapes` can fail: each kind of
wrong answer they exist to catch is caught, each framing rule holds, the
recorder records what a client saw, the required-field table matches the
pinned SDKs, and its generator reads the sources it is made from.

Every response of the suite goes through these checks (the autouse fixture
of ``tests/conftest.py``); this file shows they are not vacuous.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

import anthropic.types as anthropic_types
import ollama._types as ollama_types
import pydantic
import pytest
from anthropic.types.beta import BetaMessage
from openai.types.chat import ChatCompletion

from tests.shapes import required_fields_gen as gen
from tests.shapes.frames import ndjson_lines, sse_events
from tests.shapes.official import PINNED_PACKAGES, table_is_current, validate
from tests.shapes.recorder import ResponseRecorder
from tests.shapes.routes import ROUTES, Exchange, check_exchange, roots

ROOT = Path(__file__).resolve().parents[2]

USAGE = {
    "input_tokens": 3,
    "output_tokens": 1,
    "cache_creation": None,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "fallback_credit": None,
    "inference_geo": None,
    "iterations": None,
    "output_tokens_details": None,
    "server_tool_use": None,
    "service_tier": "standard",
    "speed": None,
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [
        {"type": "text", "text": "hi", "citations": None},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}, "caller": {"type": "direct"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "stop_details": None,
    "container": None,
    "context_management": None,
    "diagnostics": None,
    "usage": USAGE,
}
CHAT = {
    "id": "c",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "x", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
}
OLLAMA_CHAT = {
    "model": "m",
    "created_at": "2026-01-01T00:00:00Z",
    "message": {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"index": 0, "name": "f", "arguments": {}}}],
    },
    "done": True,
    "done_reason": "stop",
}


def without(data: dict, *path) -> dict:
    """A deep copy of ``data`` with the key at ``path`` removed."""
    data = copy.deepcopy(data)
    target = data
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return data


# --- one object ------------------------------------------------------------------------------


def test_complete_objects_validate():
    for model_type in (anthropic_types.Message, BetaMessage):
        validate(model_type, MESSAGE)
    validate(ChatCompletion, CHAT)
    validate(ollama_types.ChatResponse, OLLAMA_CHAT)


@pytest.mark.parametrize(
    "model_type, data, path, where",
    [
        (anthropic_types.Message, MESSAGE, ("content", 1, "caller"), r"\$\.content\[1\]: .*'caller'"),
        (anthropic_types.Message, MESSAGE, ("stop_sequence",), r"\$: .*'stop_sequence'"),
        (anthropic_types.Message, MESSAGE, ("usage", "cache_read_input_tokens"), r"\$\.usage: "),
        (anthropic_types.Message, MESSAGE, ("content", 0, "citations"), r"\$\.content\[0\]: .*'citations'"),
        (BetaMessage, MESSAGE, ("context_management",), r"\$: .*'context_management'"),
        (ChatCompletion, CHAT, ("choices", 0, "message", "refusal"), r"\$\.choices\[0\]\.message: .*'refusal'"),
        (ChatCompletion, CHAT, ("choices", 0, "logprobs"), r"\$\.choices\[0\]: .*'logprobs'"),
        (ollama_types.ChatResponse, OLLAMA_CHAT, ("created_at",), r"\$: .*'created_at'"),
        (ollama_types.ChatResponse, OLLAMA_CHAT, ("message", "tool_calls", 0, "function", "index"), r"'index'"),
    ],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else None,
)
def test_a_required_nullable_field_left_out_is_named(model_type, data, path, where):
    """The fields the SDK models leave optional but the official schema
    requires (from the table)."""
    with pytest.raises(AssertionError, match=where):
        validate(model_type, without(data, *path))


@pytest.mark.parametrize(
    "model_type, data, path",
    [
        (anthropic_types.Message, MESSAGE, ("usage",)),
        (anthropic_types.Message, MESSAGE, ("content", 1, "input")),
        (ChatCompletion, CHAT, ("created",)),
        (ChatCompletion, CHAT, ("choices", 0, "finish_reason")),
    ],
    ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else None,
)
def test_a_field_the_model_requires_left_out_fails(model_type, data, path):
    with pytest.raises(pydantic.ValidationError):
        validate(model_type, without(data, *path))


@pytest.mark.parametrize(
    "change",
    [
        {"content": "hi"},
        {"stop_reason": "finished"},
        {"usage": {**USAGE, "input_tokens": "3"}},
        {"usage": {**USAGE, "input_tokens": 3.0}},
        {"content": [{"type": "tool_result", "tool_use_id": "x", "content": "y"}]},
        {"content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}, "caller": {"type": "someone"}}]},
    ],
    ids=["text-content", "stop-reason", "string-count", "float-count", "unknown-block", "unknown-caller"],
)
def test_wrong_types_and_unknown_discriminators_fail(change):
    with pytest.raises(pydantic.ValidationError):
        validate(anthropic_types.Message, {**MESSAGE, **change})


# --- exchanges ---------------------------------------------------------------------------------


def sse(*frames: tuple[str | None, object]) -> str:
    """An SSE body of ``(event, data)`` frames."""
    out = ""
    for event, data in frames:
        text = data if isinstance(data, str) else json.dumps(data)
        out += (f"event: {event}\n" if event else "") + f"data: {text}\n\n"
    return out


def exchange(path: str, body: str, content_type: str = "application/json", status: int = 200, **kw) -> Exchange:
    """A POST exchange."""
    return Exchange(kw.pop("method", "POST"), path, kw.pop("beta", False), status, content_type, body, **kw)


CHUNK = {
    "id": "c",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
}


def test_openai_stream_needs_done_and_valid_chunks():
    good = sse((None, CHUNK), (None, "[DONE]"))
    check_exchange(exchange("/v1/chat/completions", good, "text/event-stream"))
    with pytest.raises(AssertionError, match=r"\[DONE\]"):
        check_exchange(exchange("/v1/chat/completions", sse((None, CHUNK)), "text/event-stream"))
    check_exchange(exchange("/v1/chat/completions", sse((None, CHUNK)), "text/event-stream", complete=False))
    with pytest.raises(pydantic.ValidationError):
        body = sse((None, {**CHUNK, "created": None}), (None, "[DONE]"))
        check_exchange(exchange("/v1/chat/completions", body, "text/event-stream"))
    with pytest.raises(AssertionError, match="'finish_reason'"):
        chunk = {**CHUNK, "choices": [{"index": 0, "delta": {}}]}
        check_exchange(exchange("/v1/chat/completions", sse((None, chunk), (None, "[DONE]")), "text/event-stream"))
    error = {"error": {"message": "m", "type": "server_error", "param": None, "code": None}}
    check_exchange(exchange("/v1/chat/completions", sse((None, error), (None, "[DONE]")), "text/event-stream"))
    with pytest.raises(AssertionError, match="'param'"):
        bad = {"error": {"message": "m", "type": "server_error", "code": None}}
        check_exchange(exchange("/v1/chat/completions", sse((None, bad), (None, "[DONE]")), "text/event-stream"))


def test_anthropic_stream_event_names_pings_and_errors():
    stop = {"type": "message_stop"}
    check_exchange(
        exchange("/v1/messages", sse(("ping", {"type": "ping"}), ("message_stop", stop)), "text/event-stream")
    )
    with pytest.raises(AssertionError, match="event 'message_delta'"):
        check_exchange(exchange("/v1/messages", sse(("message_delta", stop)), "text/event-stream"))
    with pytest.raises(AssertionError):
        check_exchange(exchange("/v1/messages", sse(("ping", {"type": "ping", "x": 1})), "text/event-stream"))
    error = {"type": "error", "error": {"type": "api_error", "message": "m"}}
    with pytest.raises(AssertionError, match="'request_id'"):
        check_exchange(exchange("/v1/messages", sse(("error", error)), "text/event-stream"))
    check_exchange(exchange("/v1/messages", sse(("error", {**error, "request_id": None})), "text/event-stream"))


def test_anthropic_beta_requests_are_checked_as_beta_types():
    ga = without(MESSAGE, "context_management")
    check_exchange(exchange("/v1/messages", json.dumps(ga)))
    with pytest.raises(AssertionError, match="'context_management'"):
        check_exchange(exchange("/v1/messages", json.dumps(ga), beta=True))


def test_ollama_ndjson_lines():
    line = json.dumps(OLLAMA_CHAT)
    check_exchange(exchange("/api/chat", f"{line}\n{json.dumps({'error': 'x'})}\n", "application/x-ndjson"))
    with pytest.raises(AssertionError, match="empty NDJSON line"):
        check_exchange(exchange("/api/chat", f"{line}\n\n{line}\n", "application/x-ndjson"))
    with pytest.raises(AssertionError, match="'created_at'"):
        bad = json.dumps(without(OLLAMA_CHAT, "created_at"))
        check_exchange(exchange("/api/chat", f"{bad}\n", "application/x-ndjson"))


def test_errors_unknown_routes_and_untyped_paths():
    check_exchange(exchange("/v1/messages", "", "", status=499))
    check_exchange(exchange("/health", '{"anything": 1}', method="GET"))
    check_exchange(exchange("/ready", '{"ready": false}', status=503, method="GET"))
    check_exchange(exchange("/api/version", '{"version": "1"}', method="GET"))
    with pytest.raises(pydantic.ValidationError):
        check_exchange(exchange("/api/version", '{"message": "x"}', status=500, method="GET"))
    with pytest.raises(AssertionError, match="no official type"):
        check_exchange(exchange("/v1/new-route", "{}"))
    with pytest.raises(AssertionError, match="unexpected content type"):
        check_exchange(exchange("/v1/chat/completions", "x", "text/plain"))
    check_exchange(exchange("/api/nope", '{"error": "not found"}', status=404, method="GET"))
    with pytest.raises(pydantic.ValidationError):
        check_exchange(exchange("/api/nope", '{"message": "not found"}', status=404, method="GET"))
    with pytest.raises(pydantic.ValidationError):
        body = {"type": "error", "error": {"type": "no_such_error", "message": "m"}, "request_id": None}
        check_exchange(exchange("/v1/messages", json.dumps(body), status=400))


def test_embeddings_in_base64_are_checked_decoded():
    body = {
        "object": "list",
        "model": "m",
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
        "data": [{"object": "embedding", "index": 0, "embedding": "AACAPwAAAEA="}],
    }
    check_exchange(exchange("/v1/embeddings", json.dumps(body)))
    with pytest.raises(Exception, match="float32"):
        check_exchange(
            exchange("/v1/embeddings", json.dumps({**body, "data": [{**body["data"][0], "embedding": "AAA="}]}))
        )


def test_every_route_of_the_app_is_typed_or_named_untyped():
    """A route added to the gateway without an entry here would be checked
    only for its errors: every registered path is in one table."""
    from starlette.routing import Route

    from gateway.app import build_app
    from shared.config import Config
    from tests.shapes.routes import REFUSED, UNTYPED, is_own, route_of

    app = build_app(Config())
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        path = route.path.replace("{model:path}", "m")
        for method in sorted((route.methods or set()) - {"HEAD"}):
            assert path in UNTYPED or is_own(path) or path in REFUSED or route_of(method, path), (method, path)
    with pytest.raises(AssertionError, match="model-management"):
        check_exchange(exchange("/api/push", "{}"))


# --- frames ----------------------------------------------------------------------------------


def test_sse_parser_skips_keepalives_and_joins_data_lines():
    text = ': keep-alive\n\nevent: ping\ndata: {"type":\ndata: "ping"}\n\n'
    assert sse_events(text) == [("ping", '{"type":\n"ping"}')]
    assert sse_events("data: 1\n\ndata: 2", complete=False) == [(None, "1")]
    with pytest.raises(AssertionError):
        sse_events("data: 1\n\ndata: 2")
    with pytest.raises(AssertionError, match="not an SSE line"):
        sse_events("oops\n\n")


def test_ndjson_needs_a_final_newline():
    assert ndjson_lines("1\n2\n") == ["1", "2"]
    assert ndjson_lines("1\n2", complete=False) == ["1"]
    with pytest.raises(AssertionError):
        ndjson_lines("1\n2")


# --- the recorder -----------------------------------------------------------------------------


def test_recorder_records_whole_and_cut_responses():
    records: list[dict] = []

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        if scope["path"] == "/cut":
            raise OSError("connection reset")
        await send({"type": "http.response.body", "body": b"b"})

    seen: list[int] = []

    async def send(message):
        if message["type"] == "http.response.body" and not message.get("more_body"):
            seen.append(len(records))  # the record exists before the last chunk goes out

    recorder = ResponseRecorder(app, records.append)
    scope = {"type": "http", "method": "POST", "path": "/x", "query_string": b"beta=true", "headers": []}
    asyncio.run(recorder(scope, None, send))
    with pytest.raises(OSError):
        asyncio.run(recorder({**scope, "path": "/cut", "query_string": b""}, None, send))
    assert seen == [1]
    assert records == [
        {
            "method": "POST",
            "path": "/x",
            "beta": True,
            "status": 200,
            "content_type": "text/plain",
            "body": "ab",
            "complete": True,
        },
        {
            "method": "POST",
            "path": "/cut",
            "beta": False,
            "status": 200,
            "content_type": "text/plain",
            "body": "a",
            "complete": False,
        },
    ]


# --- the table and the pins -------------------------------------------------------------------


def test_the_table_was_made_for_the_pinned_sdks():
    """``required_fields.json`` names the installed SDK versions, and
    ``pyproject.toml`` pins exactly those: bumping one without regenerating
    the table (``tests/shapes/required_fields_gen.py``) fails here."""
    assert table_is_current() == []
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    pins = dict(re.fullmatch(r"([\w-]+)==([\w.]+)", spec).groups() for spec in extra if "==" in spec)
    assert {name: pins.get(name) for name in PINNED_PACKAGES} == {name: version(name) for name in PINNED_PACKAGES}


def test_the_table_covers_every_checked_type():
    """Every class the checks reach is a model the generator walked (no
    table entry names a class the checks cannot meet)."""
    from tests.shapes.official import REQUIRED

    reachable = gen.reachable(roots())
    assert set(REQUIRED) <= set(reachable)
    assert "anthropic.types.tool_use_block.ToolUseBlock" in REQUIRED
    assert len(ROUTES) >= 15


TS = """export interface Outer {
    id: string;
    caller: Caller | null;
    note?: string;
}
export declare namespace Outer {
    interface Choice {
        index: number;
        logprobs: Choice.Logprobs | null;
    }
    namespace Choice {
        interface Logprobs {
            content: Array<string> | null;
        }
    }
}
export interface Child extends Outer {
    extra: number;
}
"""

GO = """type Reply struct {
\tModel     string    `json:"model"`
\tCreatedAt time.Time `json:"created_at,omitempty"`
\tDetails   Details   `json:"details,omitempty"`
\tNote      string    `json:"note,omitempty"`
\tSkip      string    `json:"-"`
\tMetrics
}

type Metrics struct {
\tTotal int `json:"total_duration,omitempty"`
\tCount int `json:"count"`
}

type Details struct {
\tFormat string `json:"format"`
}
"""


def test_generator_reads_typescript_namespaces_and_bases(tmp_path):
    (tmp_path / "x.d.ts").write_text(TS)
    found = {i.path: i for i in gen.with_bases(gen.typescript_interfaces([tmp_path / "x.d.ts"]))}
    assert found[("Outer",)].fields == {"id": False, "caller": False, "note": True}
    assert found[("Outer", "Choice", "Logprobs")].fields == {"content": False}
    assert found[("Outer", "Choice")].fields == {"index": False, "logprobs": False}
    assert found[("Child",)].fields == {"id": False, "caller": False, "note": True, "extra": False}


def test_generator_reads_go_omitempty():
    structs = gen.go_structs(GO)
    assert gen.go_required(structs, "Reply") == {"model", "created_at", "details", "count"}
