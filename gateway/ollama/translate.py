"""Decoding, checking and translation of Ollama-compatible request bodies
(:mod:`gateway.ollama.schema` has their shapes and, in its docstring, how
each maps): :func:`decode` any of them strictly, then
:func:`chat_request`, :func:`generate_request` (after
:func:`check_generate`) and :func:`embed_request` build the worker's
request; :func:`keep_alive_seconds` and :func:`show_model_name` read the
other fields. Every check raises :class:`~gateway.core.errors.APIError` (400),
which the routes render in Ollama's ``{"error": "..."}`` shape. Pure
functions, called on the event loop.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from gateway.core.errors import bad_request
from gateway.frontend.validation import decode_body
from gateway.images.parts import image_from_base64, image_part
from gateway.ollama.schema import (
    NO_VISION,
    REFUSED,
    THINK_LEVELS,
    Format,
    KeepAlive,
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaGeneration,
    OllamaMessage,
    OllamaOptions,
    OllamaShowRequest,
)
from shared.config_values import parse_duration
from shared.protocol import ChatMessage, EmbedRequest, GenerateRequest, ResponseFormat, SamplingParams, Tool, ToolCall

_NO_VALUE_REFUSED = ("mirostat_tau", "mirostat_eta")
"""Mirostat settings: refused whenever set (mirostat itself is refused)."""

_FINITE = ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty")
"""Float options refused when not finite."""

_decoders: dict[type, msgspec.json.Decoder] = {}


def decode(kind: type, body: bytes) -> Any:
    """Decode ``body`` as the Struct type ``kind``.

    Raises:
        APIError: 400 for an empty or malformed body, a field of the wrong
        type, an unknown or a missing field (naming it).
    """
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    return decode_body(decoder, body)


def show_model_name(body: OllamaShowRequest) -> str:
    """The model ``/api/show`` asks about (``model``, else ``name``).

    Raises:
        APIError: 400 when neither is set.
    """
    name = body.model or body.name
    if not name:
        raise bad_request("model is required", "model")
    return name


# --- shared translation -------------------------------------------------------------------


def keep_alive_seconds(value: KeepAlive) -> float | None:
    """``keep_alive`` in seconds: None when unset (the model's ``ttl``
    applies), negative (any negative number or duration) for "never
    unload", 0 for "unload after this request".

    Raises:
        APIError: 400 for a value that is not a number or a duration.
    """
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise bad_request("keep_alive must be a finite number of seconds or a duration", "keep_alive")
        return -1.0 if value < 0 else float(value)
    text = value.strip()
    if text.startswith("-"):
        return -1.0
    try:
        return parse_duration(text)
    except ValueError:
        raise bad_request(
            f"keep_alive: invalid duration {value!r} (use seconds, or e.g. 30s, 5m, 1h, -1)", "keep_alive"
        ) from None


def check_options(options: OllamaOptions | None) -> None:
    """Refuse options mlxd cannot honour and values out of range.

    Raises:
        APIError: 400 naming ``options.<field>``.
    """
    if options is None:
        return
    for name, off in REFUSED.items():
        value = getattr(options, name)
        if value is not None and value != off:
            raise bad_request(f"options.{name} is not supported by mlxd (only {off!r} is accepted)", f"options.{name}")
    for name in _NO_VALUE_REFUSED:
        if getattr(options, name) is not None:
            raise bad_request(
                f"options.{name} is not supported by mlxd (it has no mirostat sampler)", f"options.{name}"
            )
    for name in _FINITE:
        value = getattr(options, name)
        if value is not None and not math.isfinite(value):
            raise bad_request(f"options.{name} must be a finite number", f"options.{name}")
    if options.temperature is not None and options.temperature < 0:
        raise bad_request("options.temperature must not be negative", "options.temperature")
    if options.top_p is not None and not 0 <= options.top_p <= 1:
        raise bad_request("options.top_p must be between 0 and 1", "options.top_p")
    if options.min_p is not None and not 0 <= options.min_p <= 1:
        raise bad_request("options.min_p must be between 0 and 1", "options.min_p")
    if options.repeat_penalty is not None and options.repeat_penalty <= 0:
        raise bad_request("options.repeat_penalty must be positive", "options.repeat_penalty")
    if options.top_k is not None and options.top_k < 0:
        raise bad_request("options.top_k must not be negative (0 turns it off)", "options.top_k")
    predict = options.num_predict
    if predict is not None and (predict == 0 or predict < -2):
        raise bad_request("options.num_predict must be positive, or -1 (no limit)", "options.num_predict")
    if options.num_ctx is not None and options.num_ctx <= 0:
        raise bad_request("options.num_ctx must be positive", "options.num_ctx")


def sampling(options: OllamaOptions | None, logprobs: bool | None, top_logprobs: int | None) -> SamplingParams:
    """The worker's sampling settings from checked ``options``: unset
    fields stay None so the model's defaults apply; ``num_predict`` -1 or
    -2 mean no limit (up to the context); ``repeat_penalty`` is the
    repetition penalty."""
    o = options or OllamaOptions()
    stop = [o.stop] if isinstance(o.stop, str) else list(o.stop or [])
    return SamplingParams(
        max_tokens=o.num_predict if o.num_predict is not None and o.num_predict > 0 else None,
        temperature=o.temperature,
        top_p=o.top_p,
        top_k=o.top_k,
        min_p=o.min_p,
        seed=o.seed,
        presence_penalty=o.presence_penalty or 0.0,
        frequency_penalty=o.frequency_penalty or 0.0,
        repetition_penalty=o.repeat_penalty,
        stop=stop,
        logprobs=bool(logprobs) or bool(top_logprobs),
        top_logprobs=top_logprobs or 0,
    )


def response_format(value: Format) -> ResponseFormat | None:
    """``format`` as the grammar's constraint: ``"json"`` any JSON object,
    a schema object that schema, ``""``/None nothing.

    Raises:
        APIError: 400 for another string.
    """
    if value is None or value == "":
        return None
    if value == "json":
        return ResponseFormat(type="json_object")
    if isinstance(value, dict):
        return ResponseFormat(type="json_schema", schema=value, strict=True)
    raise bad_request(f'invalid format {value!r}: use "json" or a JSON schema object', "format")


def thinking(value: bool | str | None) -> bool | None:
    """``think`` as the template's reasoning switch (None: the template's
    default); ``"low"``/``"medium"``/``"high"`` mean on.

    Raises:
        APIError: 400 for another string.
    """
    if value is None or isinstance(value, bool):
        return value
    if value in THINK_LEVELS:
        return True
    raise bad_request(f'invalid think value {value!r}: use true, false, "low", "medium" or "high"', "think")


def _check_common(body: OllamaGeneration) -> None:
    """Checks shared by chat and generate (options, logprobs)."""
    check_options(body.options)
    if body.top_logprobs is not None and not 0 <= body.top_logprobs <= 20:
        raise bad_request("top_logprobs must be between 0 and 20", "top_logprobs")


# --- chat ---------------------------------------------------------------------------------


def is_load_only(body: OllamaChatRequest | OllamaGenerateRequest) -> bool:
    """Whether the request only loads (or unloads) the model: a chat with
    no messages, a generate with an empty prompt."""
    if isinstance(body, OllamaChatRequest):
        return not body.messages
    return not body.prompt


def _arguments(arguments: dict[str, Any]) -> str:
    """A call's argument object as the worker's JSON text."""
    return json.dumps(arguments, ensure_ascii=False)


def chat_messages(messages: list[OllamaMessage]) -> list[ChatMessage]:
    """The worker's messages: ``thinking`` becomes reasoning, calls get ids
    (``call_<turn>_<i>`` when absent) and a ``tool`` turn answers the
    oldest unanswered call of its ``tool_name`` (else the oldest
    unanswered call).

    Raises:
        APIError: 400 for images that are not base64, or tool calls on a
        turn that is not the assistant's.
    """
    unanswered: list[ToolCall] = []
    out = []
    for i, m in enumerate(messages):
        images = [
            image_part(image_from_base64(data, f"messages[{i}].images[{j}]"), 0, f"messages[{i}].images[{j}]")
            for j, data in enumerate(m.images or ())
        ]
        calls = None
        if m.tool_calls:
            if m.role != "assistant":
                raise bad_request("only assistant messages can carry tool_calls", f"messages[{i}].tool_calls")
            calls = [
                ToolCall(id=c.id or f"call_{i}_{j}", name=c.function.name, arguments=_arguments(c.function.arguments))
                for j, c in enumerate(m.tool_calls)
            ]
            unanswered.extend(calls)
        name, call_id = None, None
        if m.role == "tool":
            match = next((c for c in unanswered if c.id == m.tool_call_id), None) if m.tool_call_id else None
            if match is None:
                match = next((c for c in unanswered if c.name == m.tool_name), None)
            if match is None and unanswered and m.tool_name is None:
                match = unanswered[0]
            if match is not None:
                unanswered.remove(match)
            name = m.tool_name or (match.name if match else None)
            call_id = m.tool_call_id or (match.id if match else f"call_tool_{i}")
        out.append(
            ChatMessage(
                role=m.role,
                content=m.content or "",
                name=name,
                tool_calls=calls,
                tool_call_id=call_id,
                reasoning=m.thinking,
                images=images or None,
            )
        )
    return out


def chat_request(body: OllamaChatRequest, request_id: str) -> GenerateRequest:
    """The worker request for a checked chat body with messages.

    Raises:
        APIError: 400 for a field mlxd refuses (see the checks).
    """
    _check_common(body)
    tools = [
        Tool(name=t.function.name, description=t.function.description or "", parameters=t.function.parameters or {})
        for t in body.tools or []
    ]
    return GenerateRequest(
        request_id=request_id,
        sampling=sampling(body.options, body.logprobs, body.top_logprobs),
        messages=chat_messages(body.messages or []),
        tools=tools or None,
        tool_choice="auto" if tools else "none",
        response_format=response_format(body.format),
        thinking=thinking(body.think),
    )


# --- generate -----------------------------------------------------------------------------


def check_generate(body: OllamaGenerateRequest) -> None:
    """Refuse the generate fields mlxd cannot honour.

    Raises:
        APIError: 400 for ``images`` with ``raw`` or ``suffix`` (images
        go only into a chat turn), ``template`` (the model's
        own chat template is always used), ``context`` (no token history;
        send the conversation to ``/api/chat``), ``system`` with ``raw``,
        ``suffix`` with ``raw`` or ``system`` (a fill-in-the-middle prompt
        has neither a raw form nor a system turn) and the image-generation
        fields. Whether the model supports ``suffix`` at all is the
        worker's to tell (it knows the vocabulary).
    """
    _check_common(body)
    if body.images and (body.raw or body.suffix):
        raise bad_request(NO_VISION, "images")
    if body.template:
        raise bad_request(
            "template is not supported: mlxd always renders the model's own chat template (use raw for a "
            "pre-rendered prompt)",
            "template",
        )
    if body.context:
        raise bad_request(
            "context is not supported: mlxd returns no token history; send the conversation to /api/chat instead",
            "context",
        )
    if body.suffix and body.raw:
        raise bad_request(
            "suffix cannot be combined with raw: write the model's fill-in-the-middle tokens into the raw prompt "
            "instead",
            "suffix",
        )
    if body.suffix and body.system:
        raise bad_request(
            "system cannot be combined with suffix: a fill-in-the-middle prompt has no system turn", "system"
        )
    if body.raw and body.system:
        raise bad_request("system has no effect with raw: put it in the raw prompt", "system")
    for name in ("width", "height", "steps"):
        if getattr(body, name) is not None:
            raise bad_request(f"{name} is for image-generation models, which mlxd does not serve", name)


def generate_request(body: OllamaGenerateRequest, request_id: str) -> GenerateRequest:
    """The worker request for a checked generate body with a prompt: the
    raw prompt, ``prompt`` and ``suffix`` for a fill-in-the-middle prompt,
    or ``system`` and ``prompt`` as chat turns rendered with the model's
    template (``images``, base64, placed before the prompt's text: for a
    vision model).

    Raises:
        APIError: 400 for an image that is not base64.
    """
    common = {
        "request_id": request_id,
        "sampling": sampling(body.options, body.logprobs, body.top_logprobs),
        "response_format": response_format(body.format),
        "thinking": thinking(body.think),
    }
    if body.raw:
        return GenerateRequest(prompt=body.prompt, **common)
    if body.suffix:
        return GenerateRequest(prompt=body.prompt, suffix=body.suffix, **common)
    messages = [ChatMessage(role="system", content=body.system)] if body.system else []
    images = [
        image_part(image_from_base64(data, f"images[{j}]"), 0, f"images[{j}]")
        for j, data in enumerate(body.images or ())
    ]
    messages.append(ChatMessage(role="user", content=body.prompt or "", images=images or None))
    return GenerateRequest(messages=messages, **common)


# --- embeddings ---------------------------------------------------------------------------


def embed_request(body: OllamaEmbedRequest | OllamaEmbeddingsRequest, request_id: str) -> EmbedRequest:
    """The worker request for ``/api/embed`` or ``/api/embeddings``.

    Raises:
        APIError: 400 for empty input, a non-positive ``dimensions`` or
        refused options.
    """
    check_options(body.options)
    if isinstance(body, OllamaEmbeddingsRequest):
        return EmbedRequest(request_id=request_id, texts=[body.prompt or ""], truncate=True)
    texts = [body.input] if isinstance(body.input, str) else list(body.input)
    if not texts:
        raise bad_request("input must not be empty", "input")
    if body.dimensions is not None and body.dimensions <= 0:
        raise bad_request("dimensions must be positive", "dimensions")
    return EmbedRequest(
        request_id=request_id,
        texts=texts,
        truncate=body.truncate is not False,
        dimensions=body.dimensions,
    )
