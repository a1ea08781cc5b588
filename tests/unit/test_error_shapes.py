"""The one worker error-kind table and each protocol's rendering of it
(:mod:`gateway.core.errors`, :mod:`gateway.frontend.error_shapes`)."""

from __future__ import annotations

import json

import pytest

from gateway.core.errors import WORKER_ERRORS, APIError, stream_error_code, worker_error
from gateway.frontend import error_shapes as shapes
from shared.protocol import ErrorKind, RequestOutput


def out(finish="error", kind=None, error="worker says no", param=None) -> RequestOutput:
    return RequestOutput(request_id="r", finish_reason=finish, error=error, error_kind=kind, error_param=param)


# (finish, kind) -> OpenAI (status, type, code, Retry-After), Anthropic (status, type, Retry-After)
CASES = [
    (("error", "invalid_request"), (400, "invalid_request_error", None, None), (400, "invalid_request_error", None)),
    (
        ("error", "context_length_exceeded"),
        (400, "invalid_request_error", "context_length_exceeded", None),
        (400, "invalid_request_error", None),
    ),
    (("error", "overloaded"), (503, "server_error", "overloaded", "1"), (529, "overloaded_error", "1")),
    (("error", "unavailable"), (503, "server_error", "model_unavailable", "1"), (529, "overloaded_error", "1")),
    (("error", "internal"), (500, "server_error", "internal_error", None), (500, "api_error", None)),
    (("error", "timeout"), (504, "server_error", "timeout", None), (504, "timeout_error", None)),
    (("error", None), (500, "server_error", "internal_error", None), (500, "api_error", None)),
    (("abort", None), (503, "server_error", "aborted", "1"), (529, "overloaded_error", "1")),
]


def test_every_error_kind_has_a_row():
    assert set(WORKER_ERRORS) == set(ErrorKind.__args__)


@pytest.mark.parametrize("terminal, openai, anthropic", CASES)
def test_openai_rendering_of_worker_errors(terminal, openai, anthropic):
    finish, kind = terminal
    resp = shapes.openai_error_response(worker_error(out(finish, kind), "messages"))
    status, type_, code, retry_after = openai
    message = "The request was aborted before it finished" if finish == "abort" else "worker says no"
    param = "messages" if kind == "context_length_exceeded" else None
    assert resp.status_code == status and resp.headers.get("retry-after") == retry_after
    assert json.loads(resp.body) == {"error": {"message": message, "type": type_, "param": param, "code": code}}


@pytest.mark.parametrize("terminal, openai, anthropic", CASES)
def test_anthropic_rendering_of_worker_errors(terminal, openai, anthropic):
    finish, kind = terminal
    resp = shapes.anthropic_error_response(worker_error(out(finish, kind)))
    status, type_, retry_after = anthropic
    message = "The request was aborted before it finished" if finish == "abort" else "worker says no"
    body = json.loads(resp.body)
    assert resp.status_code == status and resp.headers.get("retry-after") == retry_after
    assert body == {"type": "error", "error": {"type": type_, "message": message}, "request_id": body["request_id"]}
    assert body["request_id"].startswith("req_") and resp.headers["request-id"] == body["request_id"]
    frame = shapes.anthropic_error_frame(worker_error(out(finish, kind)))
    assert (
        frame
        == b"event: error\ndata: "
        + json.dumps({"type": "error", "error": {"type": type_, "message": message}}, separators=(",", ":")).encode()
        + b"\n\n"
    )


@pytest.mark.parametrize("terminal, openai, anthropic", CASES)
def test_ollama_rendering_of_worker_errors(terminal, openai, anthropic):
    finish, kind = terminal
    resp = shapes.ollama_error_response(worker_error(out(finish, kind), "prompt"))
    status, _, _, retry_after = openai
    message = "The request was aborted before it finished" if finish == "abort" else "worker says no"
    assert resp.status_code == status and resp.headers.get("retry-after") == retry_after
    assert json.loads(resp.body) == {"error": message}


def test_default_messages_and_params():
    assert worker_error(out(kind="timeout", error=None)).message == "The request ran past its deadline and was stopped"
    assert worker_error(out(kind="invalid_request", param="prompt"), "input").param == "input"
    params = {"response_format": "text.format"}
    assert worker_error(out(kind="invalid_request", param="response_format"), "input", params).param == "text.format"
    assert worker_error(out(kind="invalid_request", param="tools"), "input", params).param == "tools"


@pytest.mark.parametrize(
    "finish, kind, code",
    [
        ("error", "invalid_request", "invalid_request"),
        ("error", "overloaded", "overloaded"),
        ("error", None, "internal_error"),
        ("abort", None, "aborted"),
    ],
)
def test_stream_error_code(finish, kind, code):
    output = out(finish, kind)
    assert stream_error_code(worker_error(output), output) == code


def test_openai_mid_stream_frame():
    frame = shapes.openai_error_frame("gone", "timeout")
    assert frame == (b'data: {"error":{"message":"gone","type":"server_error","param":null,"code":"timeout"}}\n\n')


def test_overloaded_openai_error_always_has_retry_after():
    resp = shapes.openai_error_response(APIError(503, "busy", code="overloaded"))
    assert resp.headers["retry-after"] == "1"
    assert "retry-after" not in shapes.ollama_error_response(APIError(503, "busy", code="overloaded")).headers


@pytest.mark.parametrize(
    "status, mapped, error_type",
    [
        (503, 529, "overloaded_error"),
        (418, 418, "invalid_request_error"),
        (502, 502, "api_error"),
        (413, 413, "request_too_large"),
    ],
)
def test_anthropic_status_and_type_mapping(status, mapped, error_type):
    assert shapes.anthropic_status(status) == mapped
    assert shapes.anthropic_error_type(mapped) == error_type


def test_anthropic_error_body():
    assert json.loads(shapes.anthropic_error_body(404, "gone", "req_1")) == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "gone"},
        "request_id": "req_1",
    }


@pytest.mark.parametrize(
    "path, protocol",
    [
        ("/v1/messages", "anthropic"),
        ("/v1/messages/count_tokens", "anthropic"),
        ("/v1/messagesx", "openai"),
        ("/v1/chat/completions", "openai"),
        ("/", "ollama"),
        ("/api", "ollama"),
        ("/api/chat", "ollama"),
        ("/apix", "openai"),
    ],
)
def test_error_response_for_picks_the_protocol(path, protocol):
    body = json.loads(shapes.error_response_for(path, APIError(400, "bad")).body)
    shape = "ollama" if body == {"error": "bad"} else "anthropic" if body.get("type") == "error" else "openai"
    assert shape == protocol
