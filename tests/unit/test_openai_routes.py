"""The OpenAI endpoints against a scripted ModelBackend (no MLX, no workers).

The ModelBackend (``ScriptedBackend`` of ``tests/unit/support.py``) replays
predetermined RequestOutputs (of every choice, interleaved, ending like a
real RequestStream once all ``n`` choices finished or at the first
error/abort); it exists to test the HTTP formatting and the request-stream
lifecycle only. Requests go through httpx's ASGI transport, the real
``openai`` SDK, or (for disconnects) a hand-driven ASGI call.
"""

from __future__ import annotations

import json

import msgspec
import openai
import pytest
from starlette.routing import Route

from gateway.core.backend import ModelInfo
from gateway.core.errors import APIError, unavailable
from gateway.frontend.error_shapes import openai_error_response
from gateway.openai.routes import (
    chat_completions,
    completions,
    list_models,
    retrieve_model,
)
from shared.config import Config, ServerConfig
from shared.protocol import (
    ChatMessage,
    ResponseFormat,
    TokenLogprob,
    Tool,
    ToolCall,
    TopLogprob,
)
from tests.unit import support
from tests.unit.support import HELLO, Client, Gateway, call, out

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


# --- scripts and clients ---------------------------------------------------------------


def lp(token: str, logprob: float, *alts: tuple[str, float]) -> TokenLogprob:
    """A sampled token (id = its length) with alternatives ``(text, logprob)``."""
    top = [TopLogprob(len(t), t, t.encode(), v) for t, v in alts]
    return TokenLogprob(len(token), token, token.encode(), logprob, top)


def usage_dict(prompt: int, completion: int, cached: int = 0) -> dict:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class ScriptedBackend(support.ScriptedBackend):
    """The shared scripted engine also serving ``org/other`` (starting), with
    ``n`` up to 4 unless ``max_n`` says otherwise."""

    MODELS = (
        ModelInfo("m", 1_700_000_000, "ready", ("alias",), {"temperature": 0.6, "top_p": 0.95, "top_k": 20}),
        ModelInfo("org/other", 1_700_000_001, "starting"),
    )
    MAX_N = 4


GATEWAY = Gateway(
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
)
http, sdk, run_app = GATEWAY.http, GATEWAY.openai, GATEWAY.run


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def sse_data(body: bytes) -> list[str]:
    """The data of each SSE frame, checking the framing on the way."""
    assert body.endswith(b"\n\n")
    frames = body.decode().split("\n\n")[:-1]
    result = []
    for frame in frames:
        assert frame.startswith("data: "), frame
        assert "\n" not in frame
        result.append(frame[6:])
    return result


# --- chat, non-streaming ---------------------------------------------------------------


async def test_chat_non_streaming_shape():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["id"].startswith("chatcmpl-") and len(body["id"]) == len("chatcmpl-") + 32
    assert isinstance(body["created"], int)
    assert body == {
        "id": body["id"],
        "object": "chat.completion",
        "created": body["created"],
        "model": "m",
        "service_tier": "default",
        "system_fingerprint": "fp_mlxd",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!", "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": usage_dict(5, 4),
    }
    model, request = engine.submitted[0]
    assert model == "m" and request.request_id == body["id"]
    assert engine.stream.aclose_calls >= 1


async def test_chat_via_alias_reports_canonical_model_and_length():
    engine = ScriptedBackend([out("ab", "length", completion=2)])
    async with sdk(engine) as client:
        result = await client.chat.completions.create(
            model="alias", messages=[{"role": "user", "content": "x"}], max_tokens=2
        )
    assert result.model == "m"
    assert result.choices[0].message.content == "ab"
    assert result.choices[0].finish_reason == "length"
    assert result.usage.total_tokens == 7
    assert engine.submitted[0][1].sampling.max_tokens == 2


async def test_chat_sdk_non_streaming():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        result = await client.chat.completions.create(**CHAT)
    assert result.object == "chat.completion"
    assert result.choices[0].message.content == "Hello!"
    assert result.choices[0].message.role == "assistant"
    assert result.usage.prompt_tokens == 5 and result.usage.completion_tokens == 4


@pytest.mark.parametrize(
    "terminal,status,code",
    [
        (out(finish="error", error="worker died", kind="unavailable"), 503, "model_unavailable"),
        (out(finish="error", error="boom", kind="internal"), 500, "internal_error"),
        (out(finish="abort"), 503, "aborted"),
    ],
)
async def test_chat_non_streaming_error_after_first_output(terminal, status, code):
    engine = ScriptedBackend([out("partial", completion=1), terminal])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status_code == status
    assert resp.json()["error"]["code"] == code
    assert engine.stream.aclose_calls >= 1


# --- errors before the first token -----------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_context_length_error_is_400_even_when_streaming(stream):
    engine = ScriptedBackend(
        [out(finish="error", error="prompt is 9000 tokens; limit 8192", kind="context_length_exceeded")]
    )
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    assert resp.status_code == 400
    assert resp.headers["content-type"] == "application/json"
    assert resp.json() == {
        "error": {
            "message": "prompt is 9000 tokens; limit 8192",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }
    assert engine.stream.aclose_calls >= 1


async def test_completions_context_length_names_prompt():
    engine = ScriptedBackend([out(finish="error", error="too long", kind="context_length_exceeded")])
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"


@pytest.mark.parametrize(
    "terminal,status,retry_after",
    [
        (out(finish="error", error="queue full", kind="overloaded"), 503, "1"),
        (out(finish="error", error="gone", kind="unavailable"), 503, "1"),
        (out(finish="error", error="bad", kind="invalid_request"), 400, None),
        (out(finish="error", error="oops", kind="internal"), 500, None),
        (out(finish="error", error=None, kind=None), 500, None),
        (out(finish="abort"), 503, "1"),
    ],
)
async def test_first_output_errors_map_to_status(terminal, status, retry_after):
    engine = ScriptedBackend([terminal])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert resp.status_code == status
    assert resp.headers.get("retry-after") == retry_after
    error = resp.json()["error"]
    assert error["message"]
    assert error["type"] == ("invalid_request_error" if status == 400 else "server_error")


async def test_sdk_raises_status_errors():
    engine = ScriptedBackend([out(finish="error", error="too long", kind="context_length_exceeded")])
    async with sdk(engine) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(**CHAT, stream=True)
    assert info.value.code == "context_length_exceeded"
    engine = ScriptedBackend([out(finish="error", error="queue full", kind="overloaded")])
    async with sdk(engine) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(**CHAT)
    assert info.value.status_code == 503


async def test_invalid_body_is_400_and_never_submitted():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "temperature": 3})
        bad_json = await client.post("/v1/chat/completions", content=b"{nope")
        no_type = await client.post("/v1/chat/completions", content=json.dumps(CHAT).encode())
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "temperature"
    assert bad_json.status_code == 400 and bad_json.json()["error"]["type"] == "invalid_request_error"
    assert no_type.status_code == 200  # no Content-Type header is fine
    assert len(engine.submitted) == 1


async def test_unknown_model_404_and_submit_503():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "nope"})
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "model_not_found"
    engine = ScriptedBackend(HELLO, submit_error=unavailable("model is starting"))
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1"


def test_error_response_helper():
    resp = openai_error_response(APIError(503, "busy", code="overloaded", retry_after=2))
    assert resp.status_code == 503
    assert resp.headers["retry-after"] == "2"
    assert json.loads(resp.body) == {
        "error": {"message": "busy", "type": "server_error", "param": None, "code": "overloaded"}
    }


# --- chat, streaming -----------------------------------------------------------------------


async def test_chat_stream_frames_with_usage():
    engine = ScriptedBackend(HELLO)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    assert resp.headers["x-accel-buffering"] == "no"
    data = sse_data(resp.content)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-")
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks)
    assert len({c["created"] for c in chunks}) == 1
    choices = [c["choices"] for c in chunks]
    assert choices == [
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "lo"}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "!"}, "finish_reason": None}],
        [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        [],
    ]
    assert all(c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"] == usage_dict(5, 4)
    assert engine.stream.aclose_calls >= 1


async def test_chat_stream_without_usage_has_no_usage_key():
    engine = ScriptedBackend([out("a"), out("", "length", completion=1)])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    chunks = [json.loads(d) for d in sse_data(resp.content)[:-1]]
    assert all("usage" not in c for c in chunks)
    assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant", "content": ""}, {"content": "a"}, {}]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_chat_stream_sdk_reassembles():
    text = ["Hé", "llo\n", '"wor', 'ld"\u2028', " 🙂"]
    script = [out(t, completion=i + 1) for i, t in enumerate(text)] + [out("", "stop", completion=6)]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        stream = await client.chat.completions.create(**CHAT, stream=True, stream_options={"include_usage": True})
        pieces, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage is not None:
                usage = chunk.usage
    assert "".join(pieces) == "".join(text)
    assert finish == "stop"
    assert usage.total_tokens == 11


async def test_chat_stream_sdk_helper_accumulates():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        async with client.chat.completions.stream(**CHAT, stream_options={"include_usage": True}) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_completion()
    assert final.choices[0].message.content == "Hello!"
    assert final.choices[0].finish_reason == "stop"
    assert final.usage.completion_tokens == 4


async def test_first_output_terminal_stream():
    engine = ScriptedBackend([out("all at once", "stop", completion=3)])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    chunks = [json.loads(d) for d in sse_data(resp.content)[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "all at once"},
        {},
    ]


@pytest.mark.parametrize(
    "terminal,code",
    [
        (out("tail", "error", error="worker died", kind="unavailable"), "model_unavailable"),
        (out(finish="error", error="bug", kind="internal"), "internal_error"),
        (out(finish="abort"), "aborted"),
    ],
)
async def test_mid_stream_error_frame(terminal, code):
    engine = ScriptedBackend([out("a", completion=1), terminal])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert resp.status_code == 200
    data = sse_data(resp.content)
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])
    assert error["error"]["type"] == "server_error" and error["error"]["code"] == code
    assert error["error"]["message"]
    assert engine.stream.aclose_calls >= 1


async def test_mid_stream_error_raises_in_sdk():
    engine = ScriptedBackend([out("a", completion=1), out(finish="error", error="worker died", kind="unavailable")])
    async with sdk(engine) as client:
        stream = await client.chat.completions.create(**CHAT, stream=True)
        seen = []
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                seen.append(chunk)
    assert "worker died" in str(info.value)
    assert seen and seen[-1].choices[0].delta.content == "a"


async def test_stream_ending_without_terminal_reports_error():
    engine = ScriptedBackend([out("a")])  # broken stream: no terminal output
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    data = sse_data(resp.content)
    assert data[-1] == "[DONE]" and "error" in json.loads(data[-2])


# --- completions -------------------------------------------------------------------------


async def test_completions_non_streaming():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json={"model": "m", "prompt": [1, 2, 3], "max_tokens": 4})
    body = resp.json()
    assert body["id"].startswith("cmpl-")
    assert body == {
        "id": body["id"],
        "object": "text_completion",
        "created": body["created"],
        "model": "m",
        "system_fingerprint": "fp_mlxd",
        "choices": [{"text": "Hello!", "index": 0, "logprobs": None, "finish_reason": "stop"}],
        "usage": usage_dict(5, 4),
    }
    assert engine.submitted[0][1].prompt_token_ids == [1, 2, 3]


async def test_completions_stream_frames_and_sdk():
    engine = ScriptedBackend(HELLO)
    body = {"model": "m", "prompt": "Say", "stream": True, "stream_options": {"include_usage": True}}
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json=body)
    chunks = [json.loads(d) for d in sse_data(resp.content)[:-1]]
    assert all(c["object"] == "text_completion" and c["id"].startswith("cmpl-") for c in chunks)
    assert [c["choices"] for c in chunks] == [
        [{"text": "Hel", "index": 0, "logprobs": None, "finish_reason": None}],
        [{"text": "lo", "index": 0, "logprobs": None, "finish_reason": None}],
        [{"text": "!", "index": 0, "logprobs": None, "finish_reason": "stop"}],
        [],
    ]
    assert chunks[-1]["usage"]["total_tokens"] == 9

    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        stream = await client.completions.create(model="m", prompt="Say", stream=True)
        text = [c.choices[0].text async for c in stream]
    assert "".join(text) == "Hello!"


async def test_completions_sdk_non_streaming():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        result = await client.completions.create(model="m", prompt="Say")
    assert result.choices[0].text == "Hello!" and result.usage.total_tokens == 9


# --- models ---------------------------------------------------------------------------


async def test_list_and_retrieve_models():
    engine = ScriptedBackend()
    async with http(engine) as client:
        listing = (await client.get("/v1/models")).json()
        one = await client.get("/v1/models/org/other")
        alias = await client.get("/v1/models/alias")
        missing = await client.get("/v1/models/nope")
    assert listing == {
        "object": "list",
        "data": [
            {
                "id": "m",
                "object": "model",
                "created": 1_700_000_000,
                "owned_by": "mlxd",
                "state": "ready",
                "aliases": ["alias"],
                "sampling_defaults": {"temperature": 0.6, "top_p": 0.95, "top_k": 20},
                "vision": None,
                "kind": None,
                "capabilities": [],
            },
            {
                "id": "org/other",
                "object": "model",
                "created": 1_700_000_001,
                "owned_by": "mlxd",
                "state": "starting",
                "aliases": [],
                "sampling_defaults": None,
                "vision": None,
                "kind": None,
                "capabilities": [],
            },
        ],
    }
    assert one.json() == listing["data"][1]
    assert alias.json()["id"] == "m"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_models_via_sdk():
    engine = ScriptedBackend()
    async with sdk(engine) as client:
        ids = [m.id async for m in client.models.list()]
        model = await client.models.retrieve("m")
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("nope")
    assert ids == ["m", "org/other"] and model.owned_by == "mlxd"


# --- client disconnects ------------------------------------------------------------------


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_stream_disconnect_closes_request(spec_version):
    engine = ScriptedBackend([out("a"), out("b")], hang=True)
    client = Client({**CHAT, "stream": True}, read_chunks=2, raise_on_send=True)
    await run_app(engine, client, "/v1/chat/completions", spec_version)
    assert engine.stream.aclose_calls >= 1
    starts = [m for m in client.messages if m["type"] == "http.response.start"]
    assert starts and starts[0]["status"] == 200


async def test_non_streaming_disconnect_closes_request():
    engine = ScriptedBackend([out("a")], hang=True)
    client = Client(CHAT, read_chunks=0)
    await run_app(engine, client, "/v1/chat/completions")
    assert engine.stream.aclose_calls >= 1


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_before_first_output_closes_request(stream):
    engine = ScriptedBackend([], hang=True)
    client = Client({"model": "m", "prompt": "x", "stream": stream}, read_chunks=0)
    await run_app(engine, client, "/v1/completions")
    assert engine.stream.aclose_calls >= 1
    assert engine.stream.delivered == 0


async def test_sdk_stops_reading_early():
    """Breaking out of the SDK's iterator: the whole exchange still ends with
    the request stream closed."""
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        stream = await client.chat.completions.create(**CHAT, stream=True)
        async for _ in stream:
            break
        await stream.close()
    assert engine.stream.aclose_calls >= 1


def NO_ERROR(output):
    """A builder's error mapper for tests that never fail."""
    raise AssertionError("no error expected")


# --- chunk templates ------------------------------------------------------------------


@pytest.mark.parametrize("include_usage", [False, True])
def test_chunk_templates_escape_everything(include_usage):
    from gateway.openai import format as fmt
    from gateway.openai.builder import ChatBuilder, CompletionBuilder

    rid, model, text = 'id"\\x', 'org/mo"del\n', 'a"\\\n\u2028\x00🙂'
    extra = {"usage": None} if include_usage else {}
    chat = ChatBuilder(rid, 7, model, include_usage, NO_ERROR, n=2)
    head = {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": 7,
        "model": model,
        "service_tier": "default",
        "system_fingerprint": "fp_mlxd",
    }
    frame = chat.add(out(text, index=1))
    assert frame.startswith(b"data: ") and frame.endswith(b"\n\n") and frame.count(b"\n") == 2
    assert json.loads(frame[6:]) == {
        **head,
        "choices": [{"index": 1, "delta": {"content": text}, "finish_reason": None}],
        **extra,
    }
    frames = sse_data(chat.add(out(finish="length", index=0)) + chat.final_usage(fmt.usage(2, 3, 1)))
    assert json.loads(frames[0]) == {
        **head,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        **extra,
    }
    if include_usage:
        assert json.loads(frames[1]) == {**head, "choices": [], "usage": usage_dict(2, 3, 1)}
    else:
        assert len(frames) == 1

    comp = CompletionBuilder(rid, 7, model, include_usage, NO_ERROR)
    assert comp.start(out()) == b""
    frames = sse_data(comp.add(out(text, "stop")))
    assert json.loads(frames[0]) == {
        "id": rid,
        "object": "text_completion",
        "created": 7,
        "model": model,
        "system_fingerprint": "fp_mlxd",
        "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}],
        **extra,
    }


# --- n choices -------------------------------------------------------------------------

# two choices, interleaved; choice 1 finishes first
TWO = [
    out("A", index=0, completion=1, cached=2),
    out("x", index=1, completion=1, cached=2),
    out("y", "length", index=1, completion=2, cached=2),
    out("B", index=0, completion=2, cached=2),
    out("", "stop", index=0, completion=3, cached=2),
]


async def test_chat_n_non_streaming_orders_choices():
    engine = ScriptedBackend(TWO)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "alias", "n": 2})
    assert resp.status_code == 200
    body = resp.json()
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "AB", "refusal": None, "annotations": []},
            "logprobs": None,
            "finish_reason": "stop",
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "xy", "refusal": None, "annotations": []},
            "logprobs": None,
            "finish_reason": "length",
        },
    ]
    assert body["usage"] == usage_dict(5, 5, 2)
    assert engine.submitted[0][1].n == 2
    assert engine.limits_asked == ["m"]  # the canonical name, not the alias
    assert engine.stream.aclose_calls >= 1


async def test_completions_n_non_streaming():
    engine = ScriptedBackend(TWO)
    async with sdk(engine) as client:
        result = await client.completions.create(model="m", prompt="Say", n=2)
    assert [(c.index, c.text, c.finish_reason) for c in result.choices] == [(0, "AB", "stop"), (1, "xy", "length")]
    assert result.usage.completion_tokens == 5 and result.usage.prompt_tokens == 5
    assert result.usage.prompt_tokens_details.cached_tokens == 2


async def test_chat_n_stream_frames():
    engine = ScriptedBackend(TWO)
    body = {**CHAT, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=body)
    data = sse_data(resp.content)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(len(c["choices"]) == 1 for c in chunks[:-1])
    seen = [(c["choices"][0]["index"], c["choices"][0]["delta"], c["choices"][0]["finish_reason"]) for c in chunks[:-1]]
    assert seen == [
        (0, {"role": "assistant", "content": ""}, None),
        (1, {"role": "assistant", "content": ""}, None),
        (0, {"content": "A"}, None),
        (1, {"content": "x"}, None),
        (1, {"content": "y"}, None),
        (1, {}, "length"),
        (0, {"content": "B"}, None),
        (0, {}, "stop"),
    ]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == usage_dict(5, 5, 2)
    assert engine.stream.aclose_calls >= 1


async def test_chat_n_stream_sdk():
    engine = ScriptedBackend(TWO)
    async with sdk(engine) as client:
        stream = await client.chat.completions.create(**CHAT, n=2, stream=True, stream_options={"include_usage": True})
        text, finish, usage = {0: "", 1: ""}, {}, None
        async for chunk in stream:
            for choice in chunk.choices:
                text[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finish[choice.index] = choice.finish_reason
            usage = chunk.usage or usage
    assert text == {0: "AB", 1: "xy"} and finish == {0: "stop", 1: "length"}
    assert usage.completion_tokens == 5 and usage.prompt_tokens_details.cached_tokens == 2


async def test_chat_n_stream_sdk_helper():
    # (the helper itself raises LengthFinishReasonError on "length", so both stop)
    engine = ScriptedBackend([msgspec.structs.replace(o, finish_reason="stop") if o.finish_reason else o for o in TWO])
    async with sdk(engine) as client:
        async with client.chat.completions.stream(**CHAT, n=2) as stream:
            final = await stream.get_final_completion()
    assert [(c.index, c.message.content, c.finish_reason) for c in final.choices] == [
        (0, "AB", "stop"),
        (1, "xy", "stop"),
    ]


async def test_completions_n_stream_frames():
    engine = ScriptedBackend(TWO)
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json={"model": "m", "prompt": "x", "n": 2, "stream": True})
    chunks = [json.loads(d) for d in sse_data(resp.content)[:-1]]
    assert [c["choices"] for c in chunks] == [
        [{"text": "A", "index": 0, "logprobs": None, "finish_reason": None}],
        [{"text": "x", "index": 1, "logprobs": None, "finish_reason": None}],
        [{"text": "y", "index": 1, "logprobs": None, "finish_reason": "length"}],
        [{"text": "B", "index": 0, "logprobs": None, "finish_reason": None}],
        [{"text": "", "index": 0, "logprobs": None, "finish_reason": "stop"}],
    ]


@pytest.mark.parametrize(
    "path,body", [("/v1/chat/completions", CHAT), ("/v1/completions", {"model": "m", "prompt": "x"})]
)
async def test_n_above_model_limit_is_400(path, body):
    engine = ScriptedBackend(HELLO, max_n=2)
    async with http(engine) as client:
        resp = await client.post(path, json={**body, "n": 3, "stream": True})
        ok = await client.post(path, json={**body, "n": 2})
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["param"] == "n" and "at most 2" in error["message"]
    assert len(engine.submitted) == 1 and engine.submitted[0][1].n == 2
    assert ok.status_code != 400


async def test_unknown_model_is_404_before_the_n_check():
    engine = ScriptedBackend(HELLO, max_n=1)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "nope", "n": 5})
    assert resp.status_code == 404


async def test_error_in_one_choice_ends_the_stream():
    script = [
        out("A", index=0),
        out("x", "stop", index=1, completion=1),
        out("!", "error", error="worker died", kind="unavailable", index=0),
    ]
    engine = ScriptedBackend(script)
    body = {**CHAT, "n": 2, "stream": True, "stream_options": {"include_usage": True}}
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=body)
    data = sse_data(resp.content)
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["error"]["code"] == "model_unavailable"
    chunks = [json.loads(d) for d in data[:-2]]
    assert all(c["choices"] for c in chunks)  # no usage chunk after an error
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {"content": "!"}, "finish_reason": None}


async def test_error_in_one_choice_fails_non_streaming():
    script = [out("x", "stop", index=1, completion=1), out(finish="error", error="bug", kind="internal")]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json={"model": "m", "prompt": "x", "n": 2})
    assert resp.status_code == 500 and resp.json()["error"]["code"] == "internal_error"


@pytest.mark.parametrize("stream", [False, True])
async def test_stream_ending_before_every_choice_finished(stream):
    engine = ScriptedBackend([out("x", "stop", index=1, completion=1)])  # choice 0 never finishes
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "n": 2, "stream": stream})
    if stream:
        data = sse_data(resp.content)
        assert data[-1] == "[DONE]" and json.loads(data[-2])["error"]["code"] == "model_unavailable"
    else:
        assert resp.status_code == 503


async def test_out_of_range_choice_is_ignored():
    engine = ScriptedBackend([out("bogus", index=7), *HELLO])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        whole = await client.post("/v1/chat/completions", json=CHAT)
    chunks = [json.loads(d) for d in sse_data(resp.content)[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "Hello!"
    assert whole.json()["choices"][0]["message"]["content"] == "Hello!"


# --- logprobs -------------------------------------------------------------------------------

LP_SCRIPT = [
    out(
        "Hé",
        completion=2,
        logprobs=[lp("H", -0.5, ("H", -0.5), ("J", -1.5)), lp("é", -0.25, ("é", -0.25), ("e", -2.0))],
    ),
    out("", completion=3, logprobs=[lp("\ufffd", -1.0, ("\ufffd", -1.0), ("x", float("-inf")))]),  # text held back
    out("!", "stop", completion=4, logprobs=[lp("!", -0.125, ("!", -0.125), (".", -3.0))]),
]


async def test_chat_logprobs_non_streaming_via_sdk():
    engine = ScriptedBackend(LP_SCRIPT)
    async with sdk(engine) as client:
        result = await client.chat.completions.create(**CHAT, logprobs=True, top_logprobs=2)
    sampling = engine.submitted[0][1].sampling
    assert sampling.logprobs is True and sampling.top_logprobs == 2
    choice = result.choices[0]
    assert choice.message.content == "Hé!"
    content = choice.logprobs.content
    assert [t.token for t in content] == ["H", "é", "\ufffd", "!"]
    assert content[1].bytes == list("é".encode()) and content[1].logprob == -0.25
    assert [(a.token, a.logprob) for a in content[0].top_logprobs] == [("H", -0.5), ("J", -1.5)]
    assert content[2].top_logprobs[1].logprob == -9999.0  # -inf clamped
    assert choice.logprobs.refusal is None


async def test_chat_logprobs_raw_shape():
    engine = ScriptedBackend([out("H", "stop", completion=1, logprobs=[lp("H", -0.5, ("H", -0.5))])])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "logprobs": True})
    assert resp.json()["choices"][0]["logprobs"] == {
        "content": [
            {
                "token": "H",
                "logprob": -0.5,
                "bytes": [72],
                "top_logprobs": [{"token": "H", "logprob": -0.5, "bytes": [72]}],
            }
        ],
        "refusal": None,
    }


async def test_chat_logprobs_stream_frames():
    engine = ScriptedBackend(LP_SCRIPT)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "logprobs": True, "stream": True})
    chunks = [json.loads(d)["choices"][0] for d in sse_data(resp.content)[:-1]]
    assert [c["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Hé"},
        {"content": ""},
        {"content": "!"},
        {},
    ]
    assert chunks[0]["logprobs"] is None and chunks[-1]["logprobs"] is None
    assert [[t["token"] for t in c["logprobs"]["content"]] for c in chunks[1:4]] == [["H", "é"], ["\ufffd"], ["!"]]
    assert all(c["logprobs"]["refusal"] is None for c in chunks[1:4])


async def test_chat_logprobs_stream_sdk_helper_accumulates():
    engine = ScriptedBackend(LP_SCRIPT)
    async with sdk(engine) as client:
        async with client.chat.completions.stream(**CHAT, logprobs=True, top_logprobs=2) as stream:
            final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.message.content == "Hé!"
    assert [t.token for t in choice.logprobs.content] == ["H", "é", "\ufffd", "!"]
    assert choice.logprobs.content[0].top_logprobs[1].token == "J"


async def test_logprobs_not_requested_stay_null_even_if_sent():
    engine = ScriptedBackend(LP_SCRIPT)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        whole = await client.post("/v1/completions", json={"model": "m", "prompt": "x"})
    chunks = [json.loads(d)["choices"][0] for d in sse_data(resp.content)[:-1]]
    assert [c["delta"] for c in chunks] == [
        {"role": "assistant", "content": ""},
        {"content": "Hé"},
        {"content": "!"},
        {},
    ]
    assert all("logprobs" not in c for c in chunks)  # chunks carry the key only when asked
    assert whole.json()["choices"][0]["logprobs"] is None


async def test_completions_logprobs_non_streaming():
    engine = ScriptedBackend(LP_SCRIPT)
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json={"model": "m", "prompt": "x", "logprobs": 1})
    assert engine.submitted[0][1].sampling.top_logprobs == 1
    assert resp.json()["choices"][0]["logprobs"] == {
        "tokens": ["H", "é", "\ufffd", "!"],
        "token_logprobs": [-0.5, -0.25, -1.0, -0.125],
        # the top alternative plus the sampled token when it is not among them
        "top_logprobs": [{"H": -0.5}, {"é": -0.25}, {"\ufffd": -1.0}, {"!": -0.125}],
        "text_offset": [0, 1, 2, 3],
    }


async def test_completions_logprobs_zero_and_sampled_token_added():
    script = [out("ab", "stop", completion=2, logprobs=[lp("ab", -2.0, ("x", -0.1))])]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        zero = await client.completions.create(model="m", prompt="x", logprobs=0)
        one = await client.completions.create(model="m", prompt="x", logprobs=1)
    assert zero.choices[0].logprobs.top_logprobs is None
    assert zero.choices[0].logprobs.tokens == ["ab"] and zero.choices[0].logprobs.text_offset == [0]
    assert one.choices[0].logprobs.top_logprobs == [{"x": -0.1, "ab": -2.0}]


async def test_completions_logprobs_stream_offsets_continue():
    engine = ScriptedBackend(LP_SCRIPT)
    body = {"model": "m", "prompt": "x", "logprobs": 2, "stream": True}
    async with http(engine) as client:
        resp = await client.post("/v1/completions", json=body)
    choices = [json.loads(d)["choices"][0] for d in sse_data(resp.content)[:-1]]
    assert [c["text"] for c in choices] == ["Hé", "", "!"]
    assert [c["logprobs"]["tokens"] for c in choices] == [["H", "é"], ["\ufffd"], ["!"]]
    assert [c["logprobs"]["text_offset"] for c in choices] == [[0, 1], [2], [3]]
    assert choices[1]["logprobs"]["top_logprobs"] == [{"\ufffd": -1.0, "x": -9999.0}]
    assert choices[-1]["finish_reason"] == "stop"


async def test_completions_logprobs_stream_sdk():
    engine = ScriptedBackend(LP_SCRIPT)
    async with sdk(engine) as client:
        stream = await client.completions.create(model="m", prompt="x", logprobs=1, stream=True)
        tokens = [t async for c in stream for t in c.choices[0].logprobs.tokens]
    assert tokens == ["H", "é", "\ufffd", "!"]


async def test_logprobs_with_two_choices():
    script = [
        out("a", index=1, completion=1, logprobs=[lp("a", -1.0)]),
        out("b", "stop", index=0, completion=1, logprobs=[lp("b", -2.0)]),
        out("c", "stop", index=1, completion=2, logprobs=[lp("c", -3.0)]),
    ]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        chat = await client.post("/v1/chat/completions", json={**CHAT, "n": 2, "logprobs": True})
        comp = await client.post(
            "/v1/completions", json={"model": "m", "prompt": "x", "n": 2, "logprobs": 0, "stream": True}
        )
    choices = chat.json()["choices"]
    assert [[t["token"] for t in c["logprobs"]["content"]] for c in choices] == [["b"], ["a", "c"]]
    assert [t["top_logprobs"] for c in choices for t in c["logprobs"]["content"]] == [[], [], []]
    chunks = [json.loads(d)["choices"][0] for d in sse_data(comp.content)[:-1]]
    assert [(c["index"], c["logprobs"]["text_offset"]) for c in chunks] == [(1, [0]), (0, [0]), (1, [1])]


# --- usage and cached tokens ---------------------------------------------------------------


async def test_cached_tokens_via_sdk():
    script = [out("a", prompt=9, cached=6, completion=1), out("b", "stop", prompt=9, cached=6, completion=2)]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        result = await client.chat.completions.create(**CHAT)
        stream = await client.chat.completions.create(**CHAT, stream=True, stream_options={"include_usage": True})
        last = [chunk async for chunk in stream][-1]
    assert result.usage.prompt_tokens_details.cached_tokens == 6
    assert result.usage.prompt_tokens == 9 and result.usage.total_tokens == 11
    assert last.choices == [] and last.usage.prompt_tokens_details.cached_tokens == 6


async def test_cached_tokens_default_zero():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        result = await client.completions.create(model="m", prompt="x")
    assert result.usage.prompt_tokens_details.cached_tokens == 0


# --- timeout and overload ------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_timeout_before_first_token_is_504(stream):
    engine = ScriptedBackend([out(finish="error", error="request timed out after 30s", kind="timeout")])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream})
    assert resp.status_code == 504
    assert resp.json() == {
        "error": {"message": "request timed out after 30s", "type": "server_error", "param": None, "code": "timeout"}
    }
    assert "retry-after" not in resp.headers


async def test_timeout_after_partial_output():
    script = [out("a", completion=1), out(finish="error", kind="timeout")]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        whole = await client.post("/v1/completions", json={"model": "m", "prompt": "x"})
        streamed = await client.post("/v1/completions", json={"model": "m", "prompt": "x", "stream": True})
    assert whole.status_code == 504 and whole.json()["error"]["code"] == "timeout"
    assert whole.json()["error"]["message"]
    data = sse_data(streamed.content)
    assert data[-1] == "[DONE]" and json.loads(data[-2])["error"]["code"] == "timeout"


async def test_timeout_in_sdk():
    engine = ScriptedBackend([out(finish="error", error="deadline", kind="timeout")])
    async with sdk(engine) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(**CHAT)
    assert info.value.status_code == 504 and info.value.code == "timeout"


async def test_overloaded_submit_always_has_retry_after():
    for err in (
        APIError(503, "queue full", code="overloaded"),
        APIError(503, "queue full", code="overloaded", retry_after=3),
    ):
        engine = ScriptedBackend(HELLO, submit_error=err)
        async with http(engine) as client:
            resp = await client.post("/v1/chat/completions", json=CHAT)
        assert resp.status_code == 503 and resp.json()["error"]["code"] == "overloaded"
        assert resp.headers["retry-after"] == str(err.retry_after or 1)


# --- chunk builders --------------------------------------------------------------------------


def test_chunk_builders_without_logprobs_use_templates_only():
    """The fast path never builds a logprobs object."""
    from gateway.openai.builder import ChatBuilder, CompletionBuilder

    chat = ChatBuilder("r", 1, "m", False, NO_ERROR, n=3)
    comp = CompletionBuilder("r", 1, "m", False, NO_ERROR, n=3)
    assert chat.deltas(out("", index=2)) == b"" and comp.deltas(out("", index=2)) == b""
    assert chat.deltas(out("", index=2, logprobs=[lp("a", -1.0)])) == b""  # not requested
    frame = json.loads(sse_data(comp.add(out("z", index=2, logprobs=[lp("a", -1.0)])))[0])
    assert frame["choices"] == [{"text": "z", "index": 2, "logprobs": None, "finish_reason": None}]
    assert len(sse_data(chat.start(out()))) == 3


# --- tool calls, reasoning, response formats ---------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CHAT = {**CHAT, "tools": [WEATHER_TOOL]}


# The wire-formats.md (section 1) example: text, one call in three pieces, finish.
WIRE_SCRIPT = [
    out("Let me check", prompt=42, completion=3, cached=32),
    out(calls=[call(0, id="call_1", name="get_weather")], prompt=42, completion=8, cached=32),
    out(calls=[call(0, '{"city": ')], prompt=42, completion=12, cached=32),
    out(calls=[call(0, '"Paris"}')], prompt=42, completion=16, cached=32),
    out(finish="tool_calls", prompt=42, completion=17, cached=32),
]

# wire-formats.md section 1, verbatim; "…" stands for the constant chunk head
WIRE_FRAMES = """\
data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1735000000,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}
data: {…,"choices":[{"index":0,"delta":{"content":"Let me check"},"finish_reason":null}],"usage":null}
data: {…,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}],"usage":null}
data: {…,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\": "}}]},"finish_reason":null}],"usage":null}
data: {…,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]},"finish_reason":null}],"usage":null}
data: {…,"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}
data: {…,"choices":[],"usage":{"prompt_tokens":42,"completion_tokens":17,"total_tokens":59,"prompt_tokens_details":{"cached_tokens":32,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}
data: [DONE]
"""


async def test_tool_call_stream_raw_frames_match_wire_formats():
    engine = ScriptedBackend(WIRE_SCRIPT)
    body = {**TOOL_CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=body)
    first = json.loads(sse_data(resp.content)[0])
    head = (
        f'{{"id":"{first["id"]}","object":"chat.completion.chunk","created":{first["created"]},"model":"m",'
        '"service_tier":"default","system_fingerprint":"fp_mlxd"'
    )
    expected = (
        WIRE_FRAMES.replace(
            '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1735000000,"model":"m"', head
        )
        .replace("{…", head)
        .replace("\n", "\n\n")
    )
    assert resp.content.decode() == expected


async def test_tool_call_stream_sdk_accumulator():
    script = [
        out(reasoning="User wants ", completion=1),
        out(reasoning="weather.", completion=2),
        out("Checking.", completion=3),
        out(calls=[call(0, '{"city"', id="call_a", name="get_weather")], completion=4),
        out(calls=[call(0, ': "Paris"}'), call(1, "", id="call_b", name="get_weather")], completion=5),
        out(calls=[call(1, '{"city": "Rome"}')], completion=6),
        out(finish="tool_calls", completion=7),
    ]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        async with client.chat.completions.stream(**TOOL_CHAT, stream_options={"include_usage": True}) as stream:
            final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Checking."
    calls = choice.message.tool_calls
    assert [(c.index, c.id, c.type, c.function.name, c.function.arguments) for c in calls] == [
        (0, "call_a", "function", "get_weather", '{"city": "Paris"}'),
        (1, "call_b", "function", "get_weather", '{"city": "Rome"}'),
    ]
    assert choice.message.model_extra["reasoning_content"] == "User wants weather."
    assert final.usage.completion_tokens == 7


async def test_tool_call_non_streaming_sdk():
    script = [
        out(calls=[call(0, '{"city": ', id="call_1", name="get_weather")]),
        out(calls=[call(0, '"Paris"}')]),
        out(finish="tool_calls", completion=9),
    ]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        result = await client.chat.completions.create(**TOOL_CHAT, tool_choice="required")
    choice = result.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [tool_call] = choice.message.tool_calls
    assert (tool_call.id, tool_call.type, tool_call.function.name) == ("call_1", "function", "get_weather")
    assert json.loads(tool_call.function.arguments) == {"city": "Paris"}
    assert engine.submitted[0][1].tool_choice == "required"


async def test_tool_call_non_streaming_raw_shape():
    script = [out("Sure.", reasoning="hmm"), out(calls=[call(3, "{}", id="c1", name="f")]), out(finish="tool_calls")]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=TOOL_CHAT)
    assert resp.json()["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Sure.",
                "refusal": None,
                "annotations": [],
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
                "reasoning_content": "hmm",
            },
            "logprobs": None,
            "finish_reason": "tool_calls",
        }
    ]


async def test_plain_answer_has_no_tool_or_reasoning_keys():
    engine = ScriptedBackend([out(finish="stop")])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json=TOOL_CHAT)
    assert resp.json()["choices"][0]["message"] == {
        "role": "assistant",
        "content": "",
        "refusal": None,
        "annotations": [],
    }


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_field_is_configurable(field):
    other = {"reasoning_content": "reasoning", "reasoning": "reasoning_content"}[field]
    config = Config(server=ServerConfig(reasoning_field=field))
    engine = ScriptedBackend([out(reasoning="Think", completion=1), out(reasoning="ing."), out("Answer", "stop")])
    async with http(engine, config) as client:
        whole = await client.post("/v1/chat/completions", json=CHAT)
        streamed = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    message = whole.json()["choices"][0]["message"]
    assert message[field] == "Thinking." and other not in message
    deltas = [json.loads(d)["choices"][0]["delta"] for d in sse_data(streamed.content)[:-1]]
    assert deltas == [
        {"role": "assistant", "content": ""},
        {field: "Think"},
        {field: "ing."},
        {"content": "Answer"},
        {},
    ]


async def test_reasoning_via_sdk_with_reasoning_name():
    config = Config(server=ServerConfig(reasoning_field="reasoning"))
    engine = ScriptedBackend([out("4", "stop", reasoning="2+2")])
    async with sdk(engine, config) as client:
        result = await client.chat.completions.create(**CHAT)
        async with client.chat.completions.stream(**CHAT) as stream:
            final = await stream.get_final_completion()
    assert result.choices[0].message.model_extra == {"reasoning": "2+2"}
    assert final.choices[0].message.model_extra["reasoning"] == "2+2"
    assert final.choices[0].message.content == "4"


async def test_one_output_with_reasoning_text_and_tool_call_is_split_in_order():
    engine = ScriptedBackend([out("Hi", "tool_calls", reasoning="r", calls=[call(0, '{"a": 1}', id="c", name="f")])])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**TOOL_CHAT, "stream": True})
    choices = [json.loads(d)["choices"] for d in sse_data(resp.content)[:-1]]
    assert choices == [
        [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        [{"index": 0, "delta": {"reasoning_content": "r"}, "finish_reason": None}],
        [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}],
        [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
                    ]
                },
                "finish_reason": None,
            }
        ],
        [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": 1}'}}]},
                "finish_reason": None,
            }
        ],
        [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
    ]


async def test_tool_call_indexes_are_dense_and_ids_filled_in():
    # worker indexes 5 and 2 become 0 and 1; a first piece without id gets one
    script = [
        out(calls=[call(5, "{}", id="a", name="f"), call(2, "{", name="g")]),
        out(calls=[call(2, "}")]),
        out(finish="tool_calls"),
    ]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        streamed = await client.post("/v1/chat/completions", json={**TOOL_CHAT, "stream": True})
        whole = await client.post("/v1/chat/completions", json=TOOL_CHAT)
    pieces = [c for d in sse_data(streamed.content)[1:-2] for c in json.loads(d)["choices"][0]["delta"]["tool_calls"]]
    assert [p["index"] for p in pieces] == [0, 0, 1, 1, 1]
    assert pieces[2]["id"].startswith("call_") and len(pieces[2]["id"]) > len("call_")
    calls = whole.json()["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [("f", "{}"), ("g", "{}")]
    assert calls[0]["id"] == "a" and calls[1]["id"].startswith("call_")


TOOL_TWO = [
    out(calls=[call(0, '{"n": 0}', id="c0", name="get_weather")], index=0, completion=1),
    out("plain", index=1, completion=1),
    out(calls=[call(0, '{"n": 1}', id="c1", name="get_weather")], index=1, completion=2),
    out(calls=[call(1, "{}", id="c2", name="get_weather")], index=1, completion=3),
    out(finish="tool_calls", index=1, completion=3),
    out(finish="tool_calls", index=0, completion=1),
]


async def test_tool_calls_with_two_choices_non_streaming():
    engine = ScriptedBackend(TOOL_TWO)
    async with sdk(engine) as client:
        result = await client.chat.completions.create(**TOOL_CHAT, n=2)
    first, second = result.choices
    assert first.message.content is None and [c.id for c in first.message.tool_calls] == ["c0"]
    assert second.message.content == "plain" and [c.id for c in second.message.tool_calls] == ["c1", "c2"]
    assert first.finish_reason == second.finish_reason == "tool_calls"
    assert result.usage.completion_tokens == 4


async def test_tool_calls_with_two_choices_stream():
    engine = ScriptedBackend(TOOL_TWO)
    async with sdk(engine) as client:
        async with client.chat.completions.stream(**TOOL_CHAT, n=2) as stream:
            final = await stream.get_final_completion()
    first, second = final.choices
    assert [(c.index, c.id, c.function.arguments) for c in first.message.tool_calls] == [(0, "c0", '{"n": 0}')]
    assert [(c.index, c.id, c.function.arguments) for c in second.message.tool_calls] == [
        (0, "c1", '{"n": 1}'),
        (1, "c2", "{}"),
    ]
    assert first.finish_reason == second.finish_reason == "tool_calls"


async def test_tool_call_chunks_carry_null_logprobs_when_asked():
    engine = ScriptedBackend([out(calls=[call(0, "{}", id="c", name="f")]), out(finish="tool_calls")])
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**TOOL_CHAT, "stream": True, "logprobs": True})
    choices = [json.loads(d)["choices"][0] for d in sse_data(resp.content)[:-1]]
    assert all(c["logprobs"] is None for c in choices) and len(choices) == 4


async def test_error_output_delivers_its_pieces_before_the_error():
    script = [
        out(calls=[call(0, "{", id="c", name="f")]),
        out(finish="error", error="boom", kind="internal", reasoning="r", calls=[call(0, "}")]),
    ]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        resp = await client.post("/v1/chat/completions", json={**TOOL_CHAT, "stream": True})
    data = sse_data(resp.content)
    deltas = [json.loads(d)["choices"][0]["delta"] for d in data[1:-2]]
    assert deltas[-2:] == [{"reasoning_content": "r"}, {"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}]
    assert json.loads(data[-2])["error"]["code"] == "internal_error"


async def test_request_translation_reaches_the_engine():
    history = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "r",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c", "content": "sunny"},
    ]
    schema = {"type": "object", "properties": {"w": {"type": "string"}}}
    engine = ScriptedBackend([out("{}", "stop")])
    async with sdk(engine) as client:
        await client.chat.completions.create(
            model="m",
            messages=history,
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema, "strict": True}},
            reasoning_effort="low",
        )
    gen = engine.submitted[0][1]
    assert gen.tools == [Tool(name="get_weather", parameters=WEATHER_TOOL["function"]["parameters"])]
    assert (gen.tool_choice, gen.tool_choice_name, gen.parallel_tool_calls) == ("function", "get_weather", False)
    assert gen.response_format == ResponseFormat(type="json_schema", schema=schema, strict=True)
    assert gen.thinking is True
    assert gen.messages[1:] == [
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id="c", name="get_weather", arguments="{}")],
            reasoning="r",
        ),
        ChatMessage(role="tool", content="sunny", name="get_weather", tool_call_id="c"),
    ]


async def test_tool_and_format_errors_are_400_via_sdk():
    engine = ScriptedBackend([out("x", "stop")])
    async with sdk(engine) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(**CHAT, tool_choice="required")
        assert info.value.body["param"] == "tool_choice"
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                **CHAT, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}
            )
        assert info.value.body["param"] == "response_format.json_schema.schema"
    assert engine.submitted == []


async def test_completions_refuse_tools_and_response_format():
    engine = ScriptedBackend([out("x", "stop")])
    async with http(engine) as client:
        for field, value in (("tools", [WEATHER_TOOL]), ("response_format", {"type": "json_object"})):
            resp = await client.post("/v1/completions", json={"model": "m", "prompt": "x", field: value})
            assert resp.status_code == 400 and resp.json()["error"]["param"] == field
    assert engine.submitted == []


def test_chunk_stream_tool_call_escaping():
    from gateway.openai.builder import ChatBuilder

    chat = ChatBuilder("r", 1, "m", False, NO_ERROR, reasoning_field="reasoning")
    name, args, reasoning = 'we"ird\n', '{"q": "\\u2028\u2028"}', 'a"\n\x00'
    frames = sse_data(chat.add(out(reasoning=reasoning, calls=[call(0, args, id='i"d', name=name)])))
    deltas = [json.loads(f)["choices"][0]["delta"] for f in frames]
    assert deltas == [
        {"reasoning": reasoning},
        {"tool_calls": [{"index": 0, "id": 'i"d', "type": "function", "function": {"name": name, "arguments": ""}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": args}}]},
    ]


async def test_completions_echo_whole_and_streamed():
    body = {"model": "m", "prompt": "Say", "echo": True, "n": 2}
    script = [out(" hi", "stop", completion=1, index=0), out(" yo", "stop", completion=1, index=1)]
    async with http(ScriptedBackend(script)) as client:
        whole = (await client.post("/v1/completions", json=body)).json()
        streamed = await client.post("/v1/completions", json={**body, "stream": True})
    assert [c["text"] for c in whole["choices"]] == ["Say hi", "Say yo"]
    chunks = [json.loads(frame) for frame in sse_data(streamed.content)[:-1]]
    texts = ["", ""]
    for chunk in chunks:
        choice = chunk["choices"][0]
        texts[choice["index"]] += choice["text"]
    assert texts == ["Say hi", "Say yo"]


async def test_completions_best_of_keeps_the_likeliest():
    script = [
        out(" a", "stop", completion=1, index=0, logprobs=[lp(" a", -2.0)]),
        out(" b", "stop", completion=1, index=1, logprobs=[lp(" b", -0.1)]),
        out(" c", "stop", completion=1, index=2, logprobs=[lp(" c", -1.0)]),
    ]
    async with http(ScriptedBackend(script)) as client:
        body = (await client.post("/v1/completions", json={"model": "m", "prompt": "x", "best_of": 3, "n": 2})).json()
    assert [(c["index"], c["text"], c["logprobs"]) for c in body["choices"]] == [(0, " b", None), (1, " c", None)]
    assert body["usage"]["completion_tokens"] == 3
