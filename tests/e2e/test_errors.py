"""Bad input, auth and unknown names: OpenAI-shaped errors, and the server
keeps serving."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.conftest import API_KEY, TINY


def post(server, path, body=None, content=None, headers=None):
    h = dict(server.headers)
    h.update(headers or {})
    return httpx.post(f"{server.url}{path}", json=body, content=content, headers=h, timeout=60)


def assert_error(r, status, param=None, code=None):
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param
    if code is not None:
        assert err["code"] == code
    return err


MSG = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": TINY, "messages": []}, "messages"),
        ({"model": TINY}, "messages"),
        ({"model": TINY, "messages": MSG, "temperature": 5}, "temperature"),
        ({"model": TINY, "messages": MSG, "temperature": "1"}, "temperature"),
        ({"model": TINY, "messages": MSG, "max_tokens": 0}, "max_tokens"),
        ({"model": TINY, "messages": MSG, "max_tokens": -1}, "max_tokens"),
        ({"model": TINY, "messages": MSG, "max_tokens": 2**63}, "max_tokens"),
        ({"model": TINY, "messages": MSG, "max_tokens": 1.5}, "max_tokens"),
        ({"model": TINY, "messages": MSG, "top_p": 0}, "top_p"),
        ({"model": TINY, "messages": MSG, "n": 99}, "n"),
        ({"model": TINY, "messages": MSG, "tools": [{"type": "hosted", "function": {"name": "f"}}]}, "tools[0].type"),
        ({"model": TINY, "messages": MSG, "frobnicate": True}, "frobnicate"),
        ({"model": TINY, "messages": [{"role": "user", "content": 5}]}, None),
        ({"model": TINY, "messages": MSG, "stop": ["a"] * 100}, "stop"),
    ],
)
def test_invalid_chat_requests(tiny_server, body, param):
    assert_error(post(tiny_server, "/v1/chat/completions", body), 400, param=param)


def test_malformed_and_non_object_bodies(tiny_server):
    assert_error(post(tiny_server, "/v1/chat/completions", content=b'{"model": "tiny", "mess'), 400)
    assert_error(post(tiny_server, "/v1/chat/completions", content=b"[1, 2]"), 400)
    assert_error(post(tiny_server, "/v1/chat/completions", content=b"\xff\xfe"), 400)


def test_body_too_large(tiny_server):
    big = b'{"model": "tiny", "prompt": "' + b"a" * (5 * 1024 * 1024) + b'"}'
    assert_error(post(tiny_server, "/v1/completions", content=big), 413)


def test_context_length_exceeded_is_400_even_streaming(tiny_server):
    for stream in (False, True):
        body = {"model": TINY, "prompt": "word " * 3000, "max_tokens": 10, "stream": stream}
        assert_error(post(tiny_server, "/v1/completions", body), 400, code="context_length_exceeded")
    body = {"model": TINY, "messages": MSG, "max_tokens": 100000}
    assert_error(post(tiny_server, "/v1/chat/completions", body), 400, code="context_length_exceeded")


def test_worker_side_refusals_name_their_field(tiny_server):
    """Errors only the worker can find (it knows the vocabulary and compiles
    grammars) still name the request field, in each endpoint's terms."""
    chat, completions = "/v1/chat/completions", "/v1/completions"
    oov = {"model": TINY, "messages": MSG, "logit_bias": {"99999999": 1}}
    assert_error(post(tiny_server, chat, oov), 400, param="logit_bias")
    assert_error(post(tiny_server, completions, {"model": TINY, "prompt": [1, 99999999]}), 400, param="prompt")
    assert_error(post(tiny_server, completions, {"model": TINY, "prompt": "word " * 3000}), 400, param="prompt")
    unsat = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "string", "minLength": 5, "maxLength": 2}},
    }
    err = assert_error(post(tiny_server, chat, {"model": TINY, "messages": MSG, "response_format": unsat}), 400)
    assert err["param"] == "response_format", err
    text = {"format": {"type": "json_schema", "name": "x", "schema": unsat["json_schema"]["schema"]}}
    r = post(tiny_server, "/v1/responses", {"model": TINY, "input": "hi", "text": text})
    assert_error(r, 400, param="text.format")


def test_unknown_model_and_route(tiny_server):
    assert_error(
        post(tiny_server, "/v1/chat/completions", {"model": "nope", "messages": MSG}), 404, code="model_not_found"
    )
    r = httpx.get(f"{tiny_server.url}/v1/models/nope", headers=tiny_server.headers, timeout=60)
    assert_error(r, 404, code="model_not_found")
    assert_error(httpx.get(f"{tiny_server.url}/v1/nothing", headers=tiny_server.headers, timeout=60), 404)


def test_auth(tiny_server):
    url = f"{tiny_server.url}/v1/models"
    assert_error(httpx.get(url, timeout=60), 401)
    assert_error(httpx.get(url, headers={"Authorization": "Bearer wrong"}, timeout=60), 401)
    assert_error(httpx.get(url, headers={"x-api-key": API_KEY + "x"}, timeout=60), 401)
    assert httpx.get(url, headers={"x-api-key": API_KEY}, timeout=60).status_code == 200
    assert httpx.get(url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60).status_code == 200
    assert_error(
        post(
            tiny_server,
            "/v1/chat/completions",
            {"model": TINY, "messages": MSG},
            headers={"Authorization": "Bearer no"},
        ),
        401,
    )
    assert httpx.get(f"{tiny_server.url}/health", timeout=60).status_code == 200


def test_sdk_raises_typed_errors(tiny_server):
    client = openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=MSG)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=TINY, messages=MSG, temperature=9)
    bad = openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key="wrong", max_retries=0, timeout=300)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    # and the server still serves
    assert client.chat.completions.create(model=TINY, messages=MSG, max_tokens=2).usage.completion_tokens == 2
