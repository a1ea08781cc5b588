"""Which official type every mlxd response must be, route by route, and the
check of one recorded exchange against it.

:data:`ROUTES` maps each protocol route to the official types of its
non-streamed body and of each event of its stream (SSE or NDJSON, by the
response's content type); an error status gets its protocol's error type.
Each body or event is checked with :func:`tests.shapes.official.validate`
against every type listed for it. An Anthropic request that came through
the SDKs' beta surface (``client.beta.messages``, which Claude Code uses:
``?beta=true`` or an ``anthropic-beta`` header) is answered in the beta
types (:data:`BETA_ROUTES`), any other in the GA ones, as each SDK parses
it.

:data:`UNTYPED` lists the protocol routes with no official response type
(mlxd's MCP endpoints, Ollama's banner and version), :data:`OWN` mlxd's
operational endpoints (health, readiness, metrics, its OpenAPI document) and
:data:`REFUSED` the routes that only ever answer with an error. Any other path under ``/v1`` or
``/api`` with a success status fails the check until it is added to a
table, so a new route cannot go unchecked.

Three documented allowances where the official Python type is narrower than
the official wire format (each applied only where stated):

* a streamed ``text_completion`` chunk carries ``finish_reason: null`` until
  its choice ends (as OpenAI's do); the SDK's ``Completion`` type, shared by
  whole answers and chunks, has no null there, so such a chunk is checked
  with ``"stop"`` in its place;
* an embedding asked for with ``encoding_format: "base64"`` is a base64
  string of little-endian float32s, which the SDK decodes before parsing; it
  is checked decoded;
* Anthropic's ``ping`` event has no SDK type (the SDK skips it); it must be
  exactly ``{"type": "ping"}``;
* the text-to-speech SSE events (``speech.audio.delta``,
  ``speech.audio.done``, OpenAI's documented wire format) have no type in the
  pinned SDK, which only returns the raw bytes: they are checked against
  :class:`SpeechAudioDelta` / :class:`SpeechAudioDone` written here from
  that format; a ``POST /v1/audio/speech`` answer that is audio (any
  ``audio/*`` content type, :data:`AUDIO_MEDIA`) is binary with no type to
  check (the tests decode it).

The rerank routes have no official type in any SDK: they are checked against
mlxd's own (:mod:`tests.shapes.rerank`), written from the clients' shape.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

import anthropic.types as anthropic_types
import anthropic.types.beta as anthropic_beta
import ollama._types as ollama_types
import openai.types as openai_types
import openai.types.audio as openai_audio
import openai.types.chat as openai_chat
import openai.types.responses as openai_responses
import pydantic
from openai.pagination import SyncPage

from gateway.dashboard.pages import PAGE_PATHS
from tests.shapes.frames import ndjson_lines, sse_events
from tests.shapes.official import validate
from tests.shapes.rerank import RerankResponse

# --- error bodies ----------------------------------------------------------------------


class OpenAIErrorBody(pydantic.BaseModel):
    """OpenAI's error body: ``{"error": ErrorObject}`` (the SDK reads
    ``error`` from the body and has no type for the wrapper itself)."""

    error: openai_types.ErrorObject


class OllamaErrorBody(pydantic.BaseModel):
    """Ollama's error body and NDJSON error line, ``{"error": "message"}``
    (the server's ``api.StatusError`` on the wire; the Python client reads
    ``error`` and has no type for it)."""

    error: str


OPENAI_ERROR = (OpenAIErrorBody,)
ANTHROPIC_ERROR = (anthropic_types.ErrorResponse, anthropic_types.BetaErrorResponse)
OLLAMA_ERROR = (OllamaErrorBody,)


def protocol_errors(path: str) -> tuple[type, ...]:
    """The error types of the protocol at ``path``: Ollama's at ``/`` and
    under ``/api``, Anthropic's under ``/v1/messages``, else OpenAI's."""
    if path == "/" or path == "/api" or path.startswith("/api/"):
        return OLLAMA_ERROR
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return ANTHROPIC_ERROR
    return OPENAI_ERROR


# --- streams ---------------------------------------------------------------------------

EventCheck = Callable[[str, bool], int]
"""Checks a whole streamed body (its text, whether it ran to its end);
returns the number of events checked."""


def _all(types: tuple[Any, ...], data: Any) -> None:
    for model_type in types:
        validate(model_type, data)


def openai_stream(types: tuple[Any, ...], adapt: Callable[[dict], dict] = lambda d: d) -> EventCheck:
    """An OpenAI stream: ``data:`` frames of ``types`` (after ``adapt``) or
    an ``{"error": ...}`` frame, ended by ``data: [DONE]``."""

    def check(text: str, complete: bool) -> int:
        events = sse_events(text, complete)
        if complete:
            assert events and events[-1] == (None, "[DONE]"), f"stream does not end with [DONE]: {events[-1:]}"
            events = events[:-1]
        for event, data in events:
            assert event is None, f"OpenAI frames carry no event name: {event!r}"
            assert data != "[DONE]", "[DONE] before the end of the stream"
            payload = json.loads(data)
            _all(OPENAI_ERROR if "error" in payload else types, adapt(payload))
        return len(events)

    return check


def named_stream(types: tuple[Any, ...], errors: tuple[Any, ...] = (), ping: bool = False) -> EventCheck:
    """A stream of ``event: <type>`` frames whose data's ``type`` is the
    event name: an ``error`` event of ``errors`` (when given), a bare
    ``ping`` (when allowed), else every one of ``types``."""

    def check(text: str, complete: bool) -> int:
        events = sse_events(text, complete)
        for event, data in events:
            assert data != "[DONE]", "this protocol has no [DONE] frame"
            payload = json.loads(data)
            assert event == payload.get("type"), f"event {event!r} carries {data[:200]}"
            if ping and event == "ping":
                assert payload == {"type": "ping"}, payload
            elif errors and event == "error":
                _all(errors, payload)
            else:
                _all(types, data)
        return len(events)

    return check


def ndjson_stream(types: tuple[Any, ...]) -> EventCheck:
    """An Ollama NDJSON stream: each line one of ``types`` or an error line."""

    def check(text: str, complete: bool) -> int:
        lines = ndjson_lines(text, complete)
        for line in lines:
            payload = json.loads(line)
            _all(OLLAMA_ERROR if set(payload) == {"error"} else types, payload)
        return len(lines)

    return check


# --- the allowances ----------------------------------------------------------------------


def completion_chunk(data: dict) -> dict:
    """A ``text_completion`` chunk with each open choice's ``null``
    ``finish_reason`` read as ``"stop"`` (see the module docstring)."""
    choices = [{**c, "finish_reason": c.get("finish_reason") or "stop"} for c in data.get("choices", [])]
    return {**data, "choices": choices}


def decoded_embeddings(data: dict) -> dict:
    """An embeddings body with each base64 ``embedding`` decoded to floats."""

    def decode(item: dict) -> dict:
        vector = item.get("embedding")
        if not isinstance(vector, str):
            return item
        raw = base64.b64decode(vector, validate=True)
        assert len(raw) % 4 == 0, "base64 embedding is not a float32 array"
        return {**item, "embedding": list(struct.unpack(f"<{len(raw) // 4}f", raw))}

    return {**data, "data": [decode(item) for item in data.get("data", [])]}


class SpeechUsage(pydantic.BaseModel, extra="forbid"):
    """``usage`` of ``speech.audio.done`` (OpenAI's documented wire format)."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioDelta(pydantic.BaseModel, extra="forbid"):
    """A ``speech.audio.delta`` event: a chunk of audio, base64-encoded."""

    type: Literal["speech.audio.delta"]
    audio: str


class SpeechAudioDone(pydantic.BaseModel, extra="forbid"):
    """The ``speech.audio.done`` event that ends a speech stream."""

    type: Literal["speech.audio.done"]
    usage: SpeechUsage


SpeechStreamEvent = Annotated[Union[SpeechAudioDelta, SpeechAudioDone], pydantic.Field(discriminator="type")]
"""Either speech event."""


def speech_stream(text: str, complete: bool) -> int:
    """A speech SSE stream: ``data:`` frames of speech events (or an OpenAI
    error frame), the last one ``speech.audio.done`` when it ran to its end
    without error; no ``[DONE]``."""
    events = sse_events(text, complete)
    for event, data in events:
        assert event is None and data != "[DONE]", (event, data[:200])
        payload = json.loads(data)
        if "error" in payload:
            _all(OPENAI_ERROR, payload)
            continue
        validate(SpeechStreamEvent, payload)
        base64.b64decode(payload.get("audio", ""), validate=True)
    if complete and events and "error" not in json.loads(events[-1][1]):
        assert json.loads(events[-1][1])["type"] == "speech.audio.done", "stream does not end with speech.audio.done"
    return len(events)


class VoiceEntry(openai_audio.Voice):
    """An entry of ``GET /v1/audio/voices``: OpenAI's ``audio.voice`` plus
    mlxd's ``model`` (the model that has the voice)."""

    model: str


class VoiceList(pydantic.BaseModel):
    """The ``GET /v1/audio/voices`` list (no SDK method lists voices)."""

    object: Literal["list"]
    data: list[VoiceEntry]


AUDIO_MEDIA = "audio/"
"""Content types of binary audio answers."""


# --- the table ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Shapes:
    """The official types of one route: its JSON body (each type in
    ``body``, after ``adapt``) and its stream (``stream``, by framing: ``sse``
    or ``ndjson``); ``binary``: the content-type prefix of a binary answer
    the route may send instead (nothing in it is checked)."""

    body: tuple[Any, ...] = ()
    stream: EventCheck | None = None
    framing: str = "sse"
    adapt: Callable[[dict], dict] = lambda d: d
    binary: str = ""
    plain: tuple[str, ...] = ()
    """Media types the route also answers in with no official type (the
    speech-to-text ``text``, ``srt`` and ``vtt`` formats)."""
    verbose: tuple[Any, ...] = ()
    """The types of a body carrying ``segments`` or ``words`` (the
    speech-to-text ``verbose_json`` answer), checked instead of ``body``."""


SPEECH_TEXT = ("text/plain", "application/x-subrip", "text/vtt")
"""The plain-text answers of the speech-to-text routes (``text``, ``srt``, ``vtt``)."""

ROUTES: dict[tuple[str, str], Shapes] = {
    ("GET", "/v1/models"): Shapes(body=(SyncPage[openai_types.Model],)),
    ("GET", "/v1/models/{model}"): Shapes(body=(openai_types.Model,)),
    ("POST", "/v1/chat/completions"): Shapes(
        body=(openai_chat.ChatCompletion,), stream=openai_stream((openai_chat.ChatCompletionChunk,))
    ),
    ("POST", "/v1/completions"): Shapes(
        body=(openai_types.Completion,), stream=openai_stream((openai_types.Completion,), completion_chunk)
    ),
    ("POST", "/v1/embeddings"): Shapes(body=(openai_types.CreateEmbeddingResponse,), adapt=decoded_embeddings),
    ("POST", "/v1/audio/transcriptions"): Shapes(
        body=(openai_audio.Transcription,),
        stream=openai_stream((openai_audio.TranscriptionStreamEvent,)),
        plain=SPEECH_TEXT,
        verbose=(openai_audio.TranscriptionVerbose,),
    ),
    ("POST", "/v1/audio/translations"): Shapes(
        body=(openai_audio.Translation,), plain=SPEECH_TEXT, verbose=(openai_audio.TranslationVerbose,)
    ),
    ("POST", "/v1/responses"): Shapes(
        body=(openai_responses.Response,), stream=named_stream((openai_responses.ResponseStreamEvent,))
    ),
    ("POST", "/v1/messages"): Shapes(
        body=(anthropic_types.Message,),
        stream=named_stream((anthropic_types.RawMessageStreamEvent,), errors=ANTHROPIC_ERROR, ping=True),
    ),
    ("POST", "/v1/messages/count_tokens"): Shapes(body=(anthropic_types.MessageTokensCount,)),
    ("GET", "/api/tags"): Shapes(body=(ollama_types.ListResponse,)),
    ("GET", "/api/ps"): Shapes(body=(ollama_types.ProcessResponse,)),
    ("POST", "/api/show"): Shapes(body=(ollama_types.ShowResponse,)),
    ("POST", "/api/chat"): Shapes(
        body=(ollama_types.ChatResponse,), stream=ndjson_stream((ollama_types.ChatResponse,)), framing="ndjson"
    ),
    ("POST", "/api/generate"): Shapes(
        body=(ollama_types.GenerateResponse,),
        stream=ndjson_stream((ollama_types.GenerateResponse,)),
        framing="ndjson",
    ),
    ("POST", "/api/embed"): Shapes(body=(ollama_types.EmbedResponse,)),
    ("POST", "/api/embeddings"): Shapes(body=(ollama_types.EmbeddingsResponse,)),
    **{("POST", path): Shapes(body=(RerankResponse,)) for path in ("/v1/rerank", "/rerank", "/v2/rerank")},
    ("POST", "/v1/audio/speech"): Shapes(stream=speech_stream, binary=AUDIO_MEDIA),
    ("GET", "/v1/audio/voices"): Shapes(body=(VoiceList,)),
    ("POST", "/api/pull"): Shapes(
        body=(ollama_types.ProgressResponse,),
        stream=ndjson_stream((ollama_types.ProgressResponse,)),
        framing="ndjson",
    ),
}
"""(method, path pattern) -> the official types of the answer."""

BETA_ROUTES: dict[tuple[str, str], Shapes] = {
    ("POST", "/v1/messages"): Shapes(
        body=(anthropic_beta.BetaMessage,),
        stream=named_stream((anthropic_beta.BetaRawMessageStreamEvent,), errors=ANTHROPIC_ERROR, ping=True),
    ),
    ("POST", "/v1/messages/count_tokens"): Shapes(body=(anthropic_beta.BetaMessageTokensCount,)),
}
"""The Anthropic routes as the SDKs' beta surface reads them (see the module docstring)."""

UNTYPED: dict[str, str] = {
    "/": "Ollama's banner: plain text, no type",
    "/api/version": "no official client type (a one-field object)",
    "/v1/mcp/tools": "mlxd's own listing",
    "/v1/mcp/execute": "mlxd's own",
    "/api/delete": "an empty 200, as Ollama's (the client reads only the status)",
}
"""Protocol paths with no official response type, and why (their error
bodies are still checked)."""

OWN = (
    "/health",
    "/ready",
    "/metrics",
    "/openapi.json",
    "/v1/status",
    "/v1/admin/load",
    "/v1/admin/unload",
    "/v1/admin/reload",
    "/v1/cache/stats",
    "/v1/cache",
    *sorted(PAGE_PATHS),
)
"""mlxd's operational endpoints and the dashboard page's files: their
answers are mlxd's own formats, failures included (``/ready`` answers 503
with its own body; ``/v1/status`` and the admin actions are checked against
their own Structs by their tests), so nothing there is checked."""

OWN_PATTERNS = (re.compile(r"/v1/requests/[^/]+/cancel"),)  # also matches the route's own {request_id}
"""mlxd's own endpoints with a path parameter (cancelling a request), as
:data:`OWN`."""


def is_own(path: str) -> bool:
    """Whether ``path`` is one of mlxd's own endpoints (:data:`OWN`,
    :data:`OWN_PATTERNS`)."""
    return path in OWN or any(p.fullmatch(path) for p in OWN_PATTERNS)


REFUSED = ("/api/push", "/api/create", "/api/copy")
"""Ollama's model-management routes mlxd always refuses (403 in Ollama's
error shape), so a success there is itself a failure. ``/api/pull`` and
``/api/delete`` answer when ``server.allow_model_management`` is set."""


def roots() -> list[Any]:
    """Every official type the table checks against (for the generator)."""
    found: list[Any] = [*OPENAI_ERROR, *ANTHROPIC_ERROR, *OLLAMA_ERROR]
    found += [openai_chat.ChatCompletionChunk, openai_responses.ResponseStreamEvent]
    found += [anthropic_types.RawMessageStreamEvent, anthropic_beta.BetaRawMessageStreamEvent]
    for shapes in [*ROUTES.values(), *BETA_ROUTES.values()]:
        found += shapes.body + shapes.verbose
    return found


def route_of(method: str, path: str, beta: bool = False) -> Shapes | None:
    """The table entry for ``method`` and ``path`` (a model id fills
    ``{model}``), on Anthropic's beta surface when ``beta``."""
    if beta and (method, path) in BETA_ROUTES:
        return BETA_ROUTES[(method, path)]
    if (method, path) in ROUTES:
        return ROUTES[(method, path)]
    if method == "GET" and re.fullmatch(r"/v1/models/.+", path):
        return ROUTES[("GET", "/v1/models/{model}")]
    return None


# --- one exchange -----------------------------------------------------------------------

NO_BODY = (204, 304, 499)
"""Statuses without a body to check (499: mlxd's placeholder for a client
that left before the answer started, which nobody receives)."""


@dataclass(frozen=True)
class Exchange:
    """One recorded response: the request's method and path, whether it came
    through Anthropic's beta surface, the status, content type and body
    text, and whether the body ran to its end (False when the client left or
    the connection broke)."""

    method: str
    path: str
    beta: bool
    status: int
    content_type: str
    body: str
    complete: bool = True

    def describe(self) -> str:
        """``METHOD path -> status (content type)``, for messages."""
        return f"{self.method} {self.path} -> {self.status} ({self.content_type or 'no content type'})"


def check_exchange(ex: Exchange) -> int:
    """Check one exchange against the official types of its route; return
    the number of objects checked (a body, or each event of a stream; 0 for
    an exchange with nothing to check).

    Raises ``AssertionError`` or ``pydantic.ValidationError`` when a body or
    an event does not validate, or when a successful answer comes from a
    protocol route no table names.
    """
    media = ex.content_type.split(";")[0].strip()
    if ex.method in ("HEAD", "OPTIONS") or ex.status in NO_BODY or (not ex.body and not ex.complete) or is_own(ex.path):
        return 0
    if ex.status >= 400:
        if media == "application/json":
            _all(protocol_errors(ex.path), ex.body)
            return 1
        assert ex.path in UNTYPED or not _is_protocol(ex.path), f"error without a JSON body: {ex.body[:200]!r}"
        return 0
    assert ex.path not in REFUSED, "a model-management route answered with success"
    if ex.path in UNTYPED:
        return 0
    shapes = route_of(ex.method, ex.path, ex.beta)
    if shapes is None:
        assert not _is_protocol(ex.path), "no official type for this route: add it to tests/shapes/routes.py"
        return 0
    if media == "text/event-stream" and shapes.stream and shapes.framing == "sse":
        return shapes.stream(ex.body, ex.complete)
    if media == "application/x-ndjson" and shapes.stream and shapes.framing == "ndjson":
        return shapes.stream(ex.body, ex.complete)
    if shapes.binary and media.startswith(shapes.binary):
        return 0
    if media == "application/json" and shapes.body:
        if not ex.complete:
            return 0
        data = shapes.adapt(json.loads(ex.body))
        verbose = shapes.verbose and isinstance(data, dict) and ("segments" in data or "words" in data)
        _all(shapes.verbose if verbose else shapes.body, data)
        return 1
    if media in shapes.plain:
        return 0
    raise AssertionError(f"unexpected content type {ex.content_type!r} for this route")


def _is_protocol(path: str) -> bool:
    return path == "/v1" or path.startswith(("/v1/", "/api/")) or path == "/api"
