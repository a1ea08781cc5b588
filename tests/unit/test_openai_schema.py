"""Decoding, validation and translation of OpenAI request bodies."""

from __future__ import annotations

import json

import pytest

from gateway.core.backend import ModelLimits
from gateway.core.errors import APIError
from gateway.frontend.error_shapes import openai_error_type
from gateway.openai.checks import check_limits, decode_chat_request, decode_completion_request
from gateway.openai.translate import include_usage, to_generate_request
from shared.protocol import ChatMessage, GenerateRequest, ResponseFormat, SamplingParams, Tool, ToolCall

USER = [{"role": "user", "content": "hi"}]


def chat_body(**fields) -> bytes:
    body = {"model": "m", "messages": USER}
    body.update(fields)
    return json.dumps(body).encode()


def completion_body(**fields) -> bytes:
    body = {"model": "m", "prompt": "Once"}
    body.update(fields)
    return json.dumps(body).encode()


def refused(decode, body: bytes, param: str | None) -> APIError:
    with pytest.raises(APIError) as info:
        decode(body)
    err = info.value
    assert err.status == 400
    assert openai_error_type(err.status) == "invalid_request_error"
    assert err.param == param, err.message
    return err


def chat_refused(param: str | None, **fields) -> APIError:
    return refused(decode_chat_request, chat_body(**fields), param)


def completion_refused(param: str | None, **fields) -> APIError:
    return refused(decode_completion_request, completion_body(**fields), param)


# --- body shape ------------------------------------------------------------------


@pytest.mark.parametrize("body", [b"{", b"{'a': 1}", b'{"model": "m",}', b"NaN", b"\xff"])
def test_malformed_json(body):
    err = refused(decode_chat_request, body, None)
    assert "not valid JSON" in err.message


@pytest.mark.parametrize("body", [b"", b"   "])
def test_empty_body(body):
    assert "empty" in refused(decode_chat_request, body, None).message


@pytest.mark.parametrize("body", [b"[]", b'"x"', b"1", b"null"])
def test_non_object_body(body):
    err = refused(decode_chat_request, body, None)
    assert "JSON object" in err.message


def test_missing_fields():
    assert "model" in refused(decode_chat_request, b'{"messages": [{"role": "user", "content": "x"}]}', "model").message
    refused(decode_chat_request, b'{"model": "m"}', "messages")
    refused(decode_completion_request, b'{"model": "m"}', "prompt")


def test_unknown_field_is_named():
    err = chat_refused("foo", foo=1)
    assert "foo" in err.message
    completion_refused("foo", foo=None)
    chat_refused("messages[0].foo", messages=[{"role": "user", "content": "x", "foo": 1}])
    chat_refused("stream_options.bar", stream=True, stream_options={"bar": True})


def test_model_bounds():
    chat_refused("model", model="")
    chat_refused("model", model="x" * 257)
    chat_refused("model", model=5)


# --- minimal valid request and defaults ----------------------------------------------


def test_minimal_chat_translation():
    req = decode_chat_request(chat_body())
    gen = to_generate_request(req, "chatcmpl-1")
    assert isinstance(gen, GenerateRequest)
    assert gen.request_id == "chatcmpl-1"
    assert gen.messages == [ChatMessage(role="user", content="hi")]
    assert gen.prompt is None and gen.prompt_token_ids is None
    assert gen.sampling == SamplingParams(max_tokens=None)
    unset = (gen.sampling.temperature, gen.sampling.top_p, gen.sampling.top_k, gen.sampling.min_p)
    assert unset == (None, None, None, None) and gen.sampling.repetition_penalty is None  # the model's defaults
    assert not include_usage(req)


def test_full_chat_translation():
    req = decode_chat_request(
        chat_body(
            messages=[
                {"role": "developer", "content": "be brief"},
                {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": "q", "name": "bob"},
                {"role": "assistant", "content": None, "refusal": None, "tool_calls": None},
                {"role": "assistant", "content": "ok", "tool_calls": []},
            ],
            max_tokens=7,
            temperature=0,
            top_p=0.5,
            top_k=-1,
            min_p=0.1,
            stop="END",
            seed=-(2**63),
            presence_penalty=-2,
            frequency_penalty=2,
            repetition_penalty=1.1,
            logit_bias={"5": 100, "0": -100},
            stream=True,
            stream_options={"include_usage": True},
            user="u1",
            n=1,
            logprobs=False,
            top_logprobs=None,
            response_format={"type": "text"},
            tools=None,
            tool_choice="none",
            parallel_tool_calls=None,
            functions=None,
            function_call=None,
        )
    )
    gen = to_generate_request(req, "r")
    assert gen.messages == [
        ChatMessage(role="system", content="be brief"),
        ChatMessage(role="system", content="ab"),
        ChatMessage(role="user", content="q", name="bob"),
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="assistant", content="ok"),
    ]
    s = gen.sampling
    assert s.max_tokens == 7 and s.temperature == 0.0 and s.top_p == 0.5
    assert s.top_k == 0 and s.min_p == 0.1 and s.stop == ["END"]
    assert s.seed == -(2**63)
    assert s.presence_penalty == -2.0 and s.frequency_penalty == 2.0
    assert s.repetition_penalty == 1.1
    assert s.logit_bias == {5: 100.0, 0: -100.0}
    assert all(type(k) is int for k in s.logit_bias)
    assert include_usage(req)


def test_translation_survives_the_wire_codec():
    from shared.codec import gateway_codec, worker_codec

    body = chat_body(
        stop=["a", "b"], logit_bias={"3": 1}, n=3, logprobs=True, top_logprobs=4, ignore_eos=True, min_tokens=2
    )
    gen = to_generate_request(decode_chat_request(body), "r")
    assert gen.n == 3 and gen.timeout is None
    decoded = worker_codec().decode(gateway_codec().encode(gen))
    assert decoded == gen


# --- numeric bounds and strictness ------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", 3),
        ("temperature", -0.1),
        ("temperature", "1"),
        ("temperature", True),
        ("top_p", 0),
        ("top_p", 1.01),
        ("top_k", -2),
        ("top_k", 1_000_001),
        ("top_k", 1.5),
        ("min_p", 1.5),
        ("min_p", -0.5),
        ("presence_penalty", 2.5),
        ("frequency_penalty", -3),
        ("repetition_penalty", 0),
        ("repetition_penalty", 10.5),
        ("max_tokens", 0),
        ("max_tokens", -1),
        ("max_tokens", 2**63),
        ("max_tokens", 1.5),
        ("max_tokens", 1.0),
        ("max_tokens", "5"),
        ("max_tokens", 1_000_001),
        ("max_completion_tokens", 0),
        ("seed", 2**63),
        ("seed", -(2**63) - 1),
        ("seed", 1.5),
        ("stream", "true"),
        ("stream", 1),
        ("user", "u" * 257),
        ("user", 5),
    ],
)
def test_bad_values_name_their_field(field, value):
    chat_refused(field, **{field: value})


@pytest.mark.parametrize(
    "field,value",
    [
        ("temperature", 2),
        ("temperature", 0),
        ("top_p", 1),
        ("top_k", 0),
        ("top_k", 1_000_000),
        ("min_p", 0),
        ("repetition_penalty", 10),
        ("max_tokens", 1_000_000),
        ("seed", 2**63 - 1),
        ("user", "u" * 256),
        ("stream", False),
        ("stream", None),
        ("temperature", None),
    ],
)
def test_boundary_values_accepted(field, value):
    decode_chat_request(chat_body(**{field: value}))


def test_out_of_range_float_literal():
    # 1e400 parses as infinity; it must not get through
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1e400}'
    refused(decode_chat_request, body, "temperature")
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"logit_bias":{"1":-1e400}}'
    refused(decode_chat_request, body, "logit_bias")


def test_nan_literal_is_malformed_json():
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}],"temperature":NaN}'
    refused(decode_chat_request, body, None)


def test_max_tokens_and_max_completion_tokens():
    chat_refused("max_completion_tokens", max_tokens=5, max_completion_tokens=6)
    gen = to_generate_request(decode_chat_request(chat_body(max_tokens=5, max_completion_tokens=5)), "r")
    assert gen.sampling.max_tokens == 5
    gen = to_generate_request(decode_chat_request(chat_body(max_completion_tokens=9)), "r")
    assert gen.sampling.max_tokens == 9


def test_top_k_translation():
    for value, expected in ((-1, 0), (0, 0), (40, 40)):
        gen = to_generate_request(decode_chat_request(chat_body(top_k=value)), "r")
        assert gen.sampling.top_k == expected


# --- stop and logit_bias -------------------------------------------------------------------


def test_stop_string_and_list():
    for stop, expected in (("x", ["x"]), (["a", "b"], ["a", "b"]), (None, []), ([], [])):
        gen = to_generate_request(decode_chat_request(chat_body(stop=stop)), "r")
        assert gen.sampling.stop == expected


def test_stop_bounds():
    chat_refused("stop", stop="")
    chat_refused("stop[1]", stop=["a", ""])
    chat_refused("stop", stop=[str(i) for i in range(17)])
    chat_refused("stop", stop="x" * 513)
    chat_refused("stop[0]", stop=["x" * 513])
    chat_refused("stop[0]", stop=[1])
    decode_chat_request(chat_body(stop=[str(i) for i in range(16)]))
    decode_chat_request(chat_body(stop="x" * 512))


@pytest.mark.parametrize(
    "bias",
    [
        {"a": 1},
        {"-1": 1},
        {"1.5": 1},
        {str(2**31): 1},
        {"1": 101},
        {"1": -100.5},
        {"1": "5"},
        {str(i): 1 for i in range(1025)},
        [1, 2],
    ],
)
def test_logit_bias_refused(bias):
    chat_refused("logit_bias", logit_bias=bias)


def test_logit_bias_accepted():
    bias = {str(i): 0.5 for i in range(1024)}
    gen = to_generate_request(decode_chat_request(chat_body(logit_bias=bias)), "r")
    assert len(gen.sampling.logit_bias) == 1024 and gen.sampling.logit_bias[1023] == 0.5


# --- messages --------------------------------------------------------------------------


def test_messages_bounds():
    chat_refused("messages", messages=[])
    chat_refused("messages", messages=[{"role": "user", "content": "x"}] * 2049)
    decode_chat_request(chat_body(messages=[{"role": "user", "content": "x"}] * 2048))
    chat_refused("messages", messages="hi")


def test_roles():
    err = chat_refused("messages[0].role", messages=[{"role": "wizard", "content": "x"}])
    assert "tool" in err.message
    chat_refused("messages[0].role", messages=[{"content": "x"}])


def test_content_parts():
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    gen = to_generate_request(decode_chat_request(chat_body(messages=[{"role": "user", "content": parts}])), "r")
    assert gen.messages[0].content == "ab"


def test_image_parts_only_in_user_messages():
    """An image part outside a user message is refused by type; in a user
    message it is placed at its offset (a data URL's bytes with their
    digest; an http URL as a remote placeholder), and a bad one is a 400
    naming the part."""
    import base64
    import hashlib

    from gateway.images.parts import RemoteImage, remote_of

    content = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "http://x"}}]
    err = chat_refused("messages[0].content[1].type", messages=[{"role": "system", "content": content}])
    assert "image_url" in err.message and "not supported" in err.message
    png = b"\x89PNG\r\n\x1a\nrest"
    data = "data:image/png;base64," + base64.b64encode(png).decode()
    content = [
        {"type": "text", "text": "ab"},
        {"type": "image_url", "image_url": {"url": data, "detail": "low"}},
        {"type": "text", "text": "c"},
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}},
    ]
    req = decode_chat_request(json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode())
    message = to_generate_request(req, "r").messages[0]
    assert message.content == "abc"
    first, second = message.images
    assert (first.data, first.sha256, first.offset) == (png, hashlib.sha256(png).hexdigest(), 2)
    assert remote_of(second) == RemoteImage("http://x/y.png", "messages[0].content[3].image_url.url")
    assert second.offset == 3
    bad = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]
    req = decode_chat_request(json.dumps({"model": "m", "messages": [{"role": "user", "content": bad}]}).encode())
    with pytest.raises(APIError) as caught:
        to_generate_request(req, "r")
    assert caught.value.param == "messages[0].content[0].image_url.url"


def test_bad_parts():
    def msg(content):
        return [{"role": "user", "content": content}]

    chat_refused("messages[0].content[0].text", messages=msg([{"type": "text"}]))
    chat_refused("messages[0].content[0].type", messages=msg([{"text": "a"}]))
    chat_refused("messages[0].content[0].type", messages=msg([{"type": "file", "file": {}}]))
    chat_refused("messages[0].content[0].input_audio", messages=msg([{"type": "input_audio"}]))
    chat_refused("messages[0].content[0].video_url", messages=msg([{"type": "video_url"}]))
    assistant = [{"role": "assistant", "content": [{"type": "input_audio", "input_audio": {}}]}]
    chat_refused("messages[0].content[0].type", messages=assistant)
    chat_refused("messages[0].content[0].video", messages=msg([{"type": "video", "video": {}}]))
    chat_refused("messages[0].content[0].extra", messages=msg([{"type": "text", "text": "a", "extra": 1}]))
    chat_refused("messages[0].content[0].image_url", messages=msg([{"type": "text", "text": "a", "image_url": {}}]))
    chat_refused("messages[0].content[0].text", messages=msg([{"type": "text", "text": 5}]))
    chat_refused("messages[0].content", messages=msg([]))
    chat_refused("messages[0].content", messages=msg(5))
    chat_refused("messages[0].content", messages=msg({"type": "text", "text": "a"}))


def test_null_content_only_for_assistant():
    chat_refused("messages[0].content", messages=[{"role": "user", "content": None}])
    chat_refused("messages[0].content", messages=[{"role": "user"}])
    decode_chat_request(chat_body(messages=[USER[0], {"role": "assistant"}]))


def test_message_echo_fields():
    chat_refused("messages[0].refusal", messages=[{"role": "assistant", "content": "", "refusal": "no"}])
    chat_refused(
        "messages[0].function_call.arguments", messages=[{"role": "assistant", "function_call": {"name": "f"}}]
    )
    chat_refused(
        "messages[0].function_call",
        messages=[{"role": "user", "content": "x", "function_call": {"name": "f", "arguments": "{}"}}],
    )


def test_message_name_bounds():
    chat_refused("messages[0].name", messages=[{"role": "user", "content": "x", "name": "n" * 257}])


# --- legacy function calling ----------------------------------------------------------------


LEGACY = [{"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}, {"name": "get_time"}]


def test_legacy_functions_become_tools():
    gen = to_generate_request(decode_chat_request(chat_body(functions=LEGACY)), "r")
    assert [t.name for t in gen.tools] == ["get_weather", "get_time"] and gen.tool_choice == "auto"
    assert gen.parallel_tool_calls is False
    gen = to_generate_request(decode_chat_request(chat_body(functions=LEGACY, function_call={"name": "get_time"})), "r")
    assert (gen.tool_choice, gen.tool_choice_name) == ("function", "get_time")
    gen = to_generate_request(decode_chat_request(chat_body(functions=LEGACY, function_call="none")), "r")
    assert gen.tool_choice == "none"


def test_legacy_function_history():
    messages = [
        USER[0],
        {"role": "assistant", "content": None, "function_call": {"name": "get_time", "arguments": "{}"}},
        {"role": "function", "name": "get_time", "content": "noon"},
    ]
    gen = to_generate_request(decode_chat_request(chat_body(functions=LEGACY, messages=messages)), "r")
    call = gen.messages[1].tool_calls[0]
    assert (call.name, call.arguments) == ("get_time", "{}")
    assert gen.messages[2] == ChatMessage(role="tool", content="noon", name="get_time", tool_call_id=call.id)


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"function_call": "auto"}, "function_call"),
        ({"functions": LEGACY, "function_call": "sometimes"}, "function_call"),
        ({"functions": LEGACY, "function_call": {"name": "nope"}}, "function_call.name"),
        ({"functions": [{"name": "f"}, {"name": "f"}]}, "functions[1].name"),
        ({"functions": LEGACY, "tools": [{"type": "function", "function": {"name": "w"}}]}, "tools"),
        ({"functions": LEGACY, "tool_choice": "auto"}, "tool_choice"),
        ({"messages": [{"role": "function", "content": "x"}]}, "messages[0].name"),
    ],
)
def test_legacy_function_refusals(fields, param):
    chat_refused(param, **fields)


def test_legacy_function_fields_null_accepted():
    decode_chat_request(chat_body(functions=None, function_call=None))


def test_stream_options_requires_stream():
    chat_refused("stream_options", stream_options={"include_usage": True})
    chat_refused("stream_options", stream=False, stream_options={"include_usage": True})
    chat_refused("stream_options.include_usage", stream=True, stream_options={"include_usage": 1})
    req = decode_chat_request(chat_body(stream=True, stream_options={"include_usage": False}))
    assert not include_usage(req)
    assert not include_usage(decode_chat_request(chat_body(stream=True, stream_options=None)))


# --- completions -------------------------------------------------------------------------


def test_completion_prompt_forms():
    cases = [
        ("hello", "hello", None),
        (["hello"], "hello", None),
        ([1, 2, 3], None, [1, 2, 3]),
        ([[4, 5]], None, [4, 5]),
        ([0, 2**31 - 1], None, [0, 2**31 - 1]),
    ]
    for prompt, text, ids in cases:
        gen = to_generate_request(decode_completion_request(completion_body(prompt=prompt)), "cmpl-1")
        assert (gen.prompt, gen.prompt_token_ids, gen.messages) == (text, ids, None)


def test_completion_prompt_refused():
    assert "batched" in completion_refused("prompt", prompt=["a", "b"]).message
    assert "batched" in completion_refused("prompt", prompt=[[1], [2]]).message
    completion_refused("prompt", prompt="")
    completion_refused("prompt", prompt=[])
    completion_refused("prompt", prompt=[""])
    completion_refused("prompt", prompt=[[]])
    completion_refused("prompt", prompt=[1, "a"])
    completion_refused("prompt", prompt=None)
    completion_refused("prompt[1]", prompt=[1, -1])
    completion_refused("prompt[0]", prompt=[2**31])
    completion_refused("prompt[0][0]", prompt=[[1.5]])
    completion_refused("prompt", prompt=5)


def test_completion_fields():
    req = decode_completion_request(
        completion_body(
            max_tokens=3,
            temperature=0.5,
            stop=["x"],
            seed=1,
            echo=False,
            suffix=None,
            best_of=1,
            logprobs=None,
            n=1,
            user="u",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    gen = to_generate_request(req, "c")
    assert gen.sampling.max_tokens == 3 and gen.sampling.temperature == 0.5
    assert gen.sampling.stop == ["x"] and gen.sampling.seed == 1
    assert include_usage(req)


@pytest.mark.parametrize(
    "field,value",
    [("suffix", "x")],
)
def test_completion_unsupported(field, value):
    completion_refused(field, **{field: value})


def test_completion_echo():
    from gateway.openai.checks import echoed_prompt

    assert echoed_prompt(decode_completion_request(completion_body(echo=True))) == "Once"
    assert echoed_prompt(decode_completion_request(completion_body(echo=False))) == ""
    completion_refused("echo", echo=True, prompt=[1, 2])
    completion_refused("echo", echo=True, logprobs=1)


def test_completion_rejects_chat_only_fields():
    completion_refused("messages", messages=USER)
    completion_refused("max_completion_tokens", max_completion_tokens=5)
    completion_refused("tools", tools=None)


# --- n -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "decode,body", [(decode_chat_request, chat_body), (decode_completion_request, completion_body)]
)
def test_n_translation(decode, body):
    assert to_generate_request(decode(body()), "r").n == 1
    assert to_generate_request(decode(body(n=None)), "r").n == 1
    assert to_generate_request(decode(body(n=1)), "r").n == 1
    assert to_generate_request(decode(body(n=3, stream=True)), "r").n == 3


@pytest.mark.parametrize("value", [0, -1, 1.5, 2.0, "2", True, 2**31])
def test_bad_n(value):
    chat_refused("n", n=value)
    completion_refused("n", n=value)


def test_n_limit():
    for decode, body in ((decode_chat_request, chat_body), (decode_completion_request, completion_body)):
        check_limits(decode(body()), "m", ModelLimits(max_n=1))
        check_limits(decode(body(n=4)), "m", ModelLimits(max_n=4))
        with pytest.raises(APIError) as info:
            check_limits(decode(body(n=5)), "org/m", ModelLimits(max_n=4))
        err = info.value
        assert err.status == 400 and err.param == "n" and openai_error_type(err.status) == "invalid_request_error"
        assert "at most 4" in err.message and "org/m" in err.message


def test_best_of_generates_candidates():
    from gateway.openai.checks import check_limits

    gen = to_generate_request(decode_completion_request(completion_body(best_of=3)), "r")
    assert gen.n == 3 and gen.sampling.logprobs is True and gen.sampling.top_logprobs == 0
    gen = to_generate_request(decode_completion_request(completion_body(best_of=2, n=2)), "r")
    assert gen.n == 2 and gen.sampling.logprobs is False
    completion_refused("best_of", best_of=2, stream=True)
    decode_completion_request(completion_body(best_of=2, n=2, stream=True))
    req = decode_completion_request(completion_body(best_of=5))
    with pytest.raises(APIError) as info:
        check_limits(req, "m", ModelLimits(max_n=4))
    assert info.value.param == "best_of"


def test_best_of_must_cover_n():
    completion_refused("best_of", best_of=1, n=2)
    assert to_generate_request(decode_completion_request(completion_body(best_of=1, n=1)), "r").n == 1
    assert to_generate_request(decode_completion_request(completion_body(best_of=None, n=2)), "r").n == 2


# --- logprobs ------------------------------------------------------------------------------


def test_chat_logprobs_translation():
    cases = [
        ({}, (False, 0)),
        ({"logprobs": None}, (False, 0)),
        ({"logprobs": False}, (False, 0)),
        ({"logprobs": True}, (True, 0)),
        ({"logprobs": True, "top_logprobs": None}, (True, 0)),
        ({"logprobs": True, "top_logprobs": 0}, (True, 0)),
        ({"logprobs": True, "top_logprobs": 20}, (True, 20)),
    ]
    for fields, expected in cases:
        sampling = to_generate_request(decode_chat_request(chat_body(**fields)), "r").sampling
        assert (sampling.logprobs, sampling.top_logprobs) == expected, fields


@pytest.mark.parametrize("value", [-1, 21, 1.5, "2", True])
def test_chat_top_logprobs_bounds(value):
    chat_refused("top_logprobs", logprobs=True, top_logprobs=value)


@pytest.mark.parametrize("logprobs", [None, False, "absent"])
def test_chat_top_logprobs_needs_logprobs(logprobs):
    fields = {} if logprobs == "absent" else {"logprobs": logprobs}
    for top in (0, 3):
        err = chat_refused("top_logprobs", top_logprobs=top, **fields)
        assert "logprobs" in err.message


@pytest.mark.parametrize("value", [1, "true", 0])
def test_chat_logprobs_must_be_bool(value):
    chat_refused("logprobs", logprobs=value)


def test_completion_logprobs_translation():
    for value, expected in ((None, (False, 0)), (0, (True, 0)), (5, (True, 5)), (20, (True, 20))):
        sampling = to_generate_request(decode_completion_request(completion_body(logprobs=value)), "r").sampling
        assert (sampling.logprobs, sampling.top_logprobs) == expected, value


@pytest.mark.parametrize("value", [-1, 21, 1.5, "5", True, False])
def test_completion_logprobs_bounds(value):
    completion_refused("logprobs", logprobs=value)


def test_completion_rejects_top_logprobs():
    completion_refused("top_logprobs", logprobs=2, top_logprobs=2)


# --- ignore_eos and min_tokens -----------------------------------------------------------


@pytest.mark.parametrize(
    "decode,body", [(decode_chat_request, chat_body), (decode_completion_request, completion_body)]
)
def test_ignore_eos_and_min_tokens_translation(decode, body):
    sampling = to_generate_request(decode(body()), "r").sampling
    assert (sampling.ignore_eos, sampling.min_tokens) == (False, 0)
    sampling = to_generate_request(decode(body(ignore_eos=None, min_tokens=None)), "r").sampling
    assert (sampling.ignore_eos, sampling.min_tokens) == (False, 0)
    sampling = to_generate_request(decode(body(ignore_eos=True, min_tokens=7, max_tokens=7)), "r").sampling
    assert (sampling.ignore_eos, sampling.min_tokens, sampling.max_tokens) == (True, 7, 7)
    sampling = to_generate_request(decode(body(min_tokens=1_000_000)), "r").sampling
    assert sampling.min_tokens == 1_000_000 and sampling.max_tokens is None


@pytest.mark.parametrize(
    "field,value",
    [
        ("min_tokens", -1),
        ("min_tokens", 1_000_001),
        ("min_tokens", 1.5),
        ("min_tokens", "3"),
        ("ignore_eos", 1),
        ("ignore_eos", "yes"),
    ],
)
def test_ignore_eos_and_min_tokens_bounds(field, value):
    chat_refused(field, **{field: value})
    completion_refused(field, **{field: value})


def test_min_tokens_above_max_tokens():
    err = chat_refused("min_tokens", min_tokens=5, max_tokens=4)
    assert "4" in err.message and "5" in err.message
    chat_refused("min_tokens", min_tokens=5, max_completion_tokens=4)
    completion_refused("min_tokens", min_tokens=5, max_tokens=4)
    decode_chat_request(chat_body(min_tokens=4, max_completion_tokens=4))
    decode_chat_request(chat_body(min_tokens=0, max_tokens=1))


# --- tools ------------------------------------------------------------------------------------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "strict": True,
    },
}
TIME = {"type": "function", "function": {"name": "get-time_2"}}


def test_tools_translation():
    gen = to_generate_request(decode_chat_request(chat_body(tools=[WEATHER, TIME])), "r")
    assert gen.tools == [
        Tool(name="get_weather", description="Weather of a city", parameters=WEATHER["function"]["parameters"]),
        Tool(name="get-time_2", description="", parameters={}),
    ]
    assert gen.tool_choice == "auto" and gen.tool_choice_name is None
    assert gen.parallel_tool_calls is True


def test_no_tools_defaults():
    for body in (chat_body(), chat_body(tools=[]), chat_body(tools=None, tool_choice="none")):
        gen = to_generate_request(decode_chat_request(body), "r")
        assert gen.tools is None and gen.tool_choice == "none" and gen.tool_choice_name is None


@pytest.mark.parametrize(
    "choice,expected",
    [
        ("none", ("none", None)),
        ("auto", ("auto", None)),
        ("required", ("required", None)),
        ({"type": "function", "function": {"name": "get-time_2"}}, ("function", "get-time_2")),
    ],
)
def test_tool_choice_variants(choice, expected):
    gen = to_generate_request(decode_chat_request(chat_body(tools=[WEATHER, TIME], tool_choice=choice)), "r")
    assert (gen.tool_choice, gen.tool_choice_name) == expected


def test_parallel_tool_calls():
    gen = to_generate_request(decode_chat_request(chat_body(tools=[WEATHER], parallel_tool_calls=False)), "r")
    assert gen.parallel_tool_calls is False
    chat_refused("parallel_tool_calls", tools=[WEATHER], parallel_tool_calls="no")


def test_tool_choice_refusals():
    err = chat_refused(
        "tool_choice.function.name", tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}}
    )
    assert "nope" in err.message
    err = chat_refused("tool_choice", tool_choice="auto")
    assert "'tools'" in err.message
    chat_refused("tool_choice", tool_choice="required", tools=[])
    chat_refused("tool_choice", tool_choice={"type": "function", "function": {"name": "get_weather"}})
    chat_refused("tool_choice", tools=[WEATHER], tool_choice="sometimes")
    chat_refused("tool_choice", tools=[WEATHER], tool_choice=5)
    chat_refused("tool_choice.custom.name", tools=[WEATHER], tool_choice={"type": "custom", "custom": {"name": "x"}})
    chat_refused("tool_choice.type", tools=[WEATHER], tool_choice={"type": "custom", "custom": {"name": "get_weather"}})
    chat_refused(
        "tool_choice.allowed_tools.mode", tools=[WEATHER], tool_choice={"type": "allowed_tools", "allowed_tools": {}}
    )
    chat_refused("tool_choice.function", tools=[WEATHER], tool_choice={"type": "function"})
    chat_refused("tool_choice.function.name", tools=[WEATHER], tool_choice={"type": "function", "function": {}})
    chat_refused(
        "tool_choice.extra", tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "f"}, "extra": 1}
    )


def test_tool_definition_refusals():
    def fn(**function):
        return [{"type": "function", "function": {"name": "f", **function}}]

    chat_refused("tools[0].function.name", tools=fn(name="a b"))
    chat_refused("tools[0].function.name", tools=fn(name="a.b"))
    chat_refused("tools[0].function.name", tools=fn(name=""))
    chat_refused("tools[0].function.name", tools=fn(name="x" * 65))
    decode_chat_request(chat_body(tools=fn(name="x" * 64)))
    chat_refused("tools[0].function.name", tools=[{"type": "function", "function": {}}])
    chat_refused("tools[0].function.parameters", tools=fn(parameters=[1]))
    chat_refused("tools[0].function.parameters", tools=fn(parameters="{}"))
    chat_refused("tools[0].function.strict", tools=fn(strict="yes"))
    chat_refused("tools[0].function.extra", tools=fn(extra=1))
    chat_refused("tools[1].function.name", tools=[TIME, TIME])
    chat_refused("tools[0].function", tools=[{"type": "function"}])
    err = chat_refused("tools[0].type", tools=[{"type": "custom", "custom": {"name": "x"}}], stream=True)
    assert "custom" in err.message
    chat_refused("tools[0].type", tools=[{"type": "web_search"}])
    chat_refused("tools", tools=[TIME] * 129)
    chat_refused("tools", tools={"type": "function"})


def test_max_tools_accepted():
    tools = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(128)]
    assert len(to_generate_request(decode_chat_request(chat_body(tools=tools)), "r").tools) == 128


# --- tool calls and reasoning in the history ---------------------------------------------------------------


def test_tool_history_translation():
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    other = {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call, other], "reasoning_content": "think"},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": [{"type": "text", "text": "12"}, {"type": "text", "text": ":00"}],
            "name": "clock",
        },
        {"role": "tool", "tool_call_id": "unknown", "content": "?"},
        {"role": "assistant", "content": "Sunny.", "reasoning": "easy"},
    ]
    gen = to_generate_request(decode_chat_request(chat_body(messages=messages, tools=[WEATHER])), "r")
    assert gen.messages == [
        ChatMessage(role="user", content="weather?"),
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=[
                ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}'),
                ToolCall(id="call_2", name="get_time", arguments="{}"),
            ],
            reasoning="think",
        ),
        ChatMessage(role="tool", content="sunny", name="get_weather", tool_call_id="call_1"),
        ChatMessage(role="tool", content="12:00", name="clock", tool_call_id="call_2"),
        ChatMessage(role="tool", content="?", tool_call_id="unknown"),
        ChatMessage(role="assistant", content="Sunny.", reasoning="easy"),
    ]


def test_tool_history_does_not_need_tools():
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        USER[0],
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "1"},
    ]
    gen = to_generate_request(decode_chat_request(chat_body(messages=messages)), "r")
    assert gen.messages[2] == ChatMessage(role="tool", content="1", name="f", tool_call_id="c")


def test_tool_history_refusals():
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}

    def refused_history(param, message):
        return chat_refused(param, messages=[USER[0], message])

    refused_history("messages[1].tool_call_id", {"role": "tool", "content": "x"})
    refused_history("messages[1].content", {"role": "tool", "tool_call_id": "c"})
    refused_history("messages[1].content", {"role": "tool", "tool_call_id": "c", "content": None})
    refused_history("messages[1].tool_call_id", {"role": "user", "content": "x", "tool_call_id": "c"})
    refused_history("messages[1].tool_call_id", {"role": "tool", "content": "x", "tool_call_id": ""})
    refused_history("messages[1].tool_calls", {"role": "user", "content": "x", "tool_calls": [call]})
    refused_history(
        "messages[1].tool_calls[0].custom", {"role": "assistant", "tool_calls": [{**call, "type": "custom"}]}
    )
    refused_history(
        "messages[1].tool_calls[0].function", {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}]}
    )
    refused_history(
        "messages[1].tool_calls[0].id",
        {"role": "assistant", "tool_calls": [{"type": "function", "function": call["function"]}]},
    )
    refused_history(
        "messages[1].tool_calls[0].function.arguments",
        {"role": "assistant", "tool_calls": [{**call, "function": {"name": "f"}}]},
    )
    refused_history(
        "messages[1].tool_calls[0].function.arguments",
        {"role": "assistant", "tool_calls": [{**call, "function": {"name": "f", "arguments": {}}}]},
    )
    refused_history("messages[1].reasoning_content", {"role": "user", "content": "x", "reasoning_content": "r"})
    refused_history("messages[1].reasoning", {"role": "tool", "tool_call_id": "c", "content": "x", "reasoning": "r"})
    refused_history(
        "messages[1].reasoning", {"role": "assistant", "content": "x", "reasoning": "a", "reasoning_content": "b"}
    )
    same = {"role": "assistant", "content": "x", "reasoning": "a", "reasoning_content": "a"}
    assert (
        to_generate_request(decode_chat_request(chat_body(messages=[USER[0], same])), "r").messages[1].reasoning == "a"
    )
    # an empty tool_calls list (as some clients echo it) is no tool calls, on any role
    gen = to_generate_request(
        decode_chat_request(chat_body(messages=[{"role": "user", "content": "x", "tool_calls": []}])), "r"
    )
    assert gen.messages[0].tool_calls is None


# --- response_format ---------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, None),
        ({"type": "text"}, None),
        ({"type": "json_object"}, ResponseFormat(type="json_object")),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "thing", "description": "d", "schema": SCHEMA, "strict": True},
            },
            ResponseFormat(type="json_schema", schema=SCHEMA, strict=True),
        ),
        (
            {"type": "json_schema", "json_schema": {"name": "t", "schema": {}}},
            ResponseFormat(type="json_schema", schema={}),
        ),
    ],
)
def test_response_format_translation(value, expected):
    gen = to_generate_request(decode_chat_request(chat_body(response_format=value)), "r")
    assert gen.response_format == expected


def test_response_format_refusals():
    def schema(**fields):
        return {"type": "json_schema", "json_schema": {"name": "t", "schema": {}, **fields}}

    chat_refused("response_format.json_schema.schema", response_format=schema(schema=[1]))
    chat_refused("response_format.json_schema.schema", response_format=schema(schema="{}"))
    chat_refused(
        "response_format.json_schema.schema", response_format={"type": "json_schema", "json_schema": {"name": "t"}}
    )
    chat_refused(
        "response_format.json_schema.name", response_format={"type": "json_schema", "json_schema": {"schema": {}}}
    )
    chat_refused("response_format.json_schema.name", response_format=schema(name=""))
    chat_refused("response_format.json_schema.name", response_format=schema(name="n" * 65))
    decode_chat_request(chat_body(response_format=schema(name="n" * 64)))
    chat_refused("response_format.json_schema.strict", response_format=schema(strict=1))
    chat_refused("response_format.json_schema.extra", response_format=schema(extra=1))
    chat_refused("response_format.json_schema", response_format={"type": "json_schema"})
    chat_refused(
        "response_format.json_schema",
        response_format={"type": "json_object", "json_schema": {"name": "t", "schema": {}}},
    )
    err = chat_refused("response_format.type", response_format={"type": "grammar"})
    assert "grammar" in err.message
    chat_refused("response_format.type", response_format={})
    chat_refused("response_format", response_format="json_object")
    completion_refused("response_format", response_format={"type": "json_object"})


# --- thinking ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields,thinking",
    [
        ({}, None),
        ({"reasoning_effort": "none"}, False),
        ({"reasoning_effort": "minimal"}, False),
        ({"reasoning_effort": "low"}, True),
        ({"reasoning_effort": "medium"}, True),
        ({"reasoning_effort": "high"}, True),
        ({"chat_template_kwargs": {"enable_thinking": False}}, False),
        ({"chat_template_kwargs": {"enable_thinking": True}}, True),
        ({"chat_template_kwargs": {}}, None),
        ({"chat_template_kwargs": {"enable_thinking": None}, "reasoning_effort": "high"}, True),
        ({"chat_template_kwargs": {"enable_thinking": True}, "reasoning_effort": "low"}, True),
        ({"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "none"}, False),
    ],
)
def test_thinking_translation(fields, thinking):
    assert to_generate_request(decode_chat_request(chat_body(**fields)), "r").thinking is thinking


def test_thinking_refusals():
    err = chat_refused("reasoning_effort", reasoning_effort="extreme")
    assert "extreme" in err.message
    chat_refused("reasoning_effort", reasoning_effort=1)
    err = chat_refused(
        "chat_template_kwargs.add_generation_prompt", chat_template_kwargs={"add_generation_prompt": False}
    )
    assert "add_generation_prompt" in err.message
    chat_refused("chat_template_kwargs.enable_thinking", chat_template_kwargs={"enable_thinking": "yes"})
    chat_refused("chat_template_kwargs", chat_template_kwargs=[])
    err = chat_refused(
        "chat_template_kwargs.enable_thinking", chat_template_kwargs={"enable_thinking": True}, reasoning_effort="none"
    )
    assert "reasoning_effort" in err.message
    completion_refused("reasoning_effort", reasoning_effort="low")
    completion_refused("chat_template_kwargs", chat_template_kwargs={"enable_thinking": True})


def test_continue_final_message():
    prefilled = [*USER, {"role": "assistant", "content": "The answer is"}]
    req = to_generate_request(decode_chat_request(chat_body(messages=prefilled, continue_final_message=True)), "r")
    assert req.continue_final is True and req.messages[-1] == ChatMessage(role="assistant", content="The answer is")
    fields = {"messages": prefilled, "continue_final_message": True, "add_generation_prompt": False}
    assert to_generate_request(decode_chat_request(chat_body(**fields)), "r").continue_final is True
    assert to_generate_request(decode_chat_request(chat_body(messages=prefilled)), "r").continue_final is False
    chat_refused("messages[0].role", continue_final_message=True)
    chat_refused("add_generation_prompt", add_generation_prompt=False)
    chat_refused("add_generation_prompt", messages=prefilled, continue_final_message=True, add_generation_prompt=True)
    chat_refused("n", messages=prefilled, continue_final_message=True, n=2)
    chat_refused(
        "response_format", messages=prefilled, continue_final_message=True, response_format={"type": "json_object"}
    )
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    with_call = [*USER, {"role": "assistant", "content": None, "tool_calls": [call]}]
    chat_refused("messages[1].tool_calls", messages=with_call, continue_final_message=True)


# --- today's request surface (issue #20) ---------------------------------------------------------


def allowed(mode: str, *names: str) -> dict:
    tools = [{"type": "function", "function": {"name": name}} for name in names]
    return {"type": "allowed_tools", "allowed_tools": {"mode": mode, "tools": tools}}


def test_allowed_tools_restrict_the_tools():
    gen = to_generate_request(
        decode_chat_request(chat_body(tools=[WEATHER, TIME], tool_choice=allowed("required", "get-time_2"))), "r"
    )
    assert [t.name for t in gen.tools] == ["get-time_2"] and gen.tool_choice == "required"
    gen = to_generate_request(decode_chat_request(chat_body(tools=[WEATHER], tool_choice=allowed("auto"))), "r")
    assert gen.tools is None and gen.tool_choice == "none"
    chat_refused("tool_choice.allowed_tools.mode", tools=[WEATHER], tool_choice=allowed("always", "get_weather"))
    chat_refused(
        "tool_choice.allowed_tools.tools[0].function.name", tools=[WEATHER], tool_choice=allowed("auto", "nope")
    )
    chat_refused("tool_choice", tool_choice=allowed("auto", "get_weather"))


ACCEPTED = [
    {"store": True},
    {"metadata": {"k" * 64: "v" * 512}},
    {"service_tier": "flex"},
    {"service_tier": "priority"},
    {"prompt_cache_key": "conv-1"},
    {"prompt_cache_retention": "24h"},
    {"prompt_cache_options": {"mode": "explicit", "ttl": "30m"}},
    {"safety_identifier": "user-1"},
    {"verbosity": "low"},
    {"prediction": {"type": "content", "content": "draft"}},
    {"prediction": {"type": "content", "content": [{"type": "text", "text": "draft"}]}},
    {"modalities": ["text"]},
    {"web_search_options": {"search_context_size": "high", "user_location": None}},
    {"reasoning_effort": "xhigh"},
    {"reasoning_effort": "max"},
    {"stream": True, "stream_options": {"include_usage": True, "include_obfuscation": False}},
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
        ]
    },
    {
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi", "prompt_cache_breakpoint": {"mode": "explicit"}}],
            }
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "audio": None},
        ]
    },
]


@pytest.mark.parametrize("fields", ACCEPTED)
def test_todays_fields_are_accepted(fields):
    decode_chat_request(chat_body(**fields))


def test_accepted_fields_do_not_change_the_request():
    plain = to_generate_request(decode_chat_request(chat_body()), "r")
    for fields in ACCEPTED[:13]:
        gen = to_generate_request(decode_chat_request(chat_body(**fields)), "r")
        assert gen == plain, fields


def test_refusal_parts_become_assistant_text():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ]
    gen = to_generate_request(decode_chat_request(chat_body(messages=messages)), "r")
    assert gen.messages[1].content == "no"


def test_web_search_options_is_a_dropped_tool():
    from gateway.openai.checks import dropped_tools

    assert dropped_tools(decode_chat_request(chat_body(web_search_options={}))) == ["web_search"]
    assert dropped_tools(decode_chat_request(chat_body())) == []


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"modalities": ["text", "audio"]}, "modalities[1]"),
        ({"modalities": ["video"]}, "modalities[0]"),
        ({"audio": {"format": "wav", "voice": "alloy"}}, "audio"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
        ({"service_tier": "turbo"}, "service_tier"),
        ({"verbosity": "loud"}, "verbosity"),
        ({"prompt_cache_retention": "forever"}, "prompt_cache_retention"),
        ({"prompt_cache_options": {"ttl": "1y"}}, "prompt_cache_options.ttl"),
        ({"prediction": {"type": "diff", "content": "x"}}, "prediction.type"),
        ({"web_search_options": {"search_context_size": "huge"}}, "web_search_options.search_context_size"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "forever"}}]}
                ]
            },
            "messages[0].content[0].cache_control.type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "refusal", "refusal": "no"}]}]},
            "messages[0].content[0].type",
        ),
        ({"messages": [{"role": "assistant", "content": "x", "audio": {"id": "a"}}]}, "messages[0].audio"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}], "stream": True}, "tools[0].type"),
        (
            {"tools": [{"type": "custom", "custom": {"name": "x", "format": {"type": "grammar"}}}]},
            "tools[0].custom.format.grammar",
        ),
        (
            {
                "tools": [
                    {
                        "type": "custom",
                        "custom": {
                            "name": "x",
                            "format": {"type": "grammar", "grammar": {"syntax": "ebnf", "definition": "s"}},
                        },
                    }
                ]
            },
            "tools[0].custom.format.grammar.syntax",
        ),
        ({"tools": [{"type": "custom"}]}, "tools[0].custom"),
        ({"cache_control": {"type": "ephemeral"}}, "cache_control"),
    ],
)
def test_todays_refusals(fields, param):
    chat_refused(param, **fields)


def test_custom_tools_on_chat():
    grammar = {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /.+/"}}
    tool = {"type": "custom", "custom": {"name": "apply_patch", "description": "Patch.", "format": grammar}}
    gen = to_generate_request(
        decode_chat_request(
            chat_body(tools=[tool, WEATHER], tool_choice={"type": "custom", "custom": {"name": "apply_patch"}})
        ),
        "r",
    )
    assert gen.tools[0].name == "apply_patch" and gen.tools[0].parameters["required"] == ["input"]
    assert "lark grammar" in gen.tools[0].description and gen.tools[0].description.startswith("Patch.")
    assert (gen.tool_choice, gen.tool_choice_name) == ("function", "apply_patch")
    history = [
        USER[0],
        {
            "role": "assistant",
            "tool_calls": [{"id": "c1", "type": "custom", "custom": {"name": "apply_patch", "input": "x"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
    ]
    gen = to_generate_request(decode_chat_request(chat_body(tools=[tool], messages=history)), "r")
    assert gen.messages[1].tool_calls == [ToolCall(id="c1", name="apply_patch", arguments='{"input": "x"}')]
    assert gen.messages[2].name == "apply_patch"
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "required", "tools": [{"type": "custom", "custom": {"name": "apply_patch"}}]},
    }
    gen = to_generate_request(decode_chat_request(chat_body(tools=[tool, WEATHER], tool_choice=choice)), "r")
    assert [t.name for t in gen.tools] == ["apply_patch"]
