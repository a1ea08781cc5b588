"""Starlette endpoints of the Ollama-compatible API (``/api/...`` and ``/``).

``POST /api/chat`` and ``POST /api/generate`` decode and check their body
(:mod:`gateway.ollama.translate`), resolve the model and submit one
:class:`~shared.protocol.GenerateRequest` through the
:class:`~gateway.core.backend.ModelBackend` with the request's ``keep_alive``
(which sets the worker's idle timer, see
:meth:`gateway.workers.handle.WorkerHandle.submit`), then answer with
:func:`gateway.frontend.answer_driver.answer` driving a
:class:`gateway.ollama.builder.ReplyBuilder`: the first output is
awaited before any header, so a refused request gets its status even when
streaming. Streaming (``stream`` defaults to true, as in Ollama) is NDJSON:
one object per line from the builder, an
empty ``done: false`` object every ``server.stream_keepalive`` seconds
while a long prompt is prefilled, and on a failure after the stream began
an ``{"error": "..."}`` line (the ``ollama`` clients raise on it).
Without ``stream`` the same builder is drained and its final object is the
answer. A chat
without messages or a generate with an empty prompt only loads the model
(``done_reason`` ``load``) or, with ``keep_alive`` 0, unloads it
(``unload``). ``think`` true or a level for a model without reasoning
markup is refused as Ollama refuses it (400 ``"<model>" does not support
thinking``; only on these two routes: the OpenAI and Anthropic routes keep
their own rules).

Also: ``GET /api/tags``, ``POST /api/show``, ``GET /api/ps``,
``GET /api/version``, ``POST /api/embed``, ``POST /api/embeddings``,
``GET``/``HEAD /`` ("Ollama is running"), and ``/api/pull``, ``/api/push``,
``/api/create``, ``/api/copy``, ``/api/delete``, which answer 403 (pull and
delete are :mod:`gateway.hub.ollama_pull`'s with
``server.allow_model_management``; :mod:`gateway.app` routes them): models
come from the config. Every error is Ollama's ``{"error": "..."}`` with the
status of the matching OpenAI error (400, 401, 404, 413, 503, 504, 500).
Runs on the gateway's event loop; the listings read a model's files
(weight sizes, ``config.json``, the chat template) in a worker thread on
every call (:meth:`gateway.core.backend.ModelBackend.model_files`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from gateway.core.backend import ModelBackend, ModelFiles, ModelInfo, RequestStream
from gateway.core.errors import APIError, bad_request, worker_error
from gateway.core.ids import new_id
from gateway.frontend.answer_driver import answer
from gateway.frontend.embedding_vectors import embedding_rows, floats_of
from gateway.frontend.error_shapes import ollama_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of, respond_to_only_output
from gateway.ollama.builder import (
    NDJSON_MEDIA_TYPE,
    Kind,
    ReplyBuilder,
    Timing,
    encode,
    line,
    load_reply,
    timestamp,
)
from gateway.ollama.schema import (
    FROM_CONFIG,
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaShowRequest,
)
from gateway.ollama.translate import (
    chat_request,
    check_generate,
    decode,
    embed_request,
    generate_request,
    is_load_only,
    keep_alive_seconds,
    show_model_name,
    thinking,
)
from shared.model_kind import capabilities, wrong_kind_message
from shared.model_names import listed_name
from shared.protocol import RequestOutput

OLLAMA_VERSION = "0.12.0"
"""The Ollama API version mlxd reports on ``GET /api/version``: clients
gate features on it, and mlxd speaks that version's chat and generate
fields (tools, thinking, structured outputs)."""

RUNNING = "Ollama is running"
"""The body of ``GET /``: what Ollama clients look for when they probe a
server."""


def _resolve(backend: ModelBackend, name: str) -> str:
    """The canonical model for ``name``; 404 in Ollama's words."""
    try:
        return backend.resolve(name)
    except APIError as err:
        if err.status == 404:
            raise APIError(404, f"model '{name}' not found", code="model_not_found") from None
        raise


# --- chat and generate --------------------------------------------------------------------


@dataclass(frozen=True)
class _Job:
    """One admitted chat or generate request."""

    stream: RequestStream
    builder: ReplyBuilder
    request_id: str
    streaming: bool
    prompt_param: str


async def chat(request: Request) -> Response:
    """``POST /api/chat``: NDJSON chat objects, or one object without
    ``stream``; errors as Ollama error objects."""
    return await _generation(request, "chat")


async def generate(request: Request) -> Response:
    """``POST /api/generate``: NDJSON generate objects, or one object
    without ``stream``; errors as Ollama error objects."""
    return await _generation(request, "generate")


async def _generation(request: Request, kind: Kind) -> Response:
    """The shared flow of chat and generate (see the module docstring)."""
    timing = Timing()
    try:
        job = await _submit(request, kind, timing)
    except APIError as err:
        return ollama_error_response(err)
    if isinstance(job, Response):
        return job
    return await answer(
        request,
        job.stream,
        job.request_id,
        job.builder,
        streaming=job.streaming,
        refuse=lambda output: ollama_error_response(worker_error(output, job.prompt_param)),
        body=lambda builder: Response(encode(builder.final), media_type=JSON_MEDIA_TYPE),
        keepalive=line(job.builder.empty()),
        media_type=NDJSON_MEDIA_TYPE,
    )


async def _submit(request: Request, kind: Kind, timing: Timing) -> _Job | Response:
    """Decode, check and submit; a load-only request is answered here.

    Raises:
        APIError: 400 invalid body or refused field (also ``num_ctx`` above
        the model's context: checked before submitting when the context is
        known from an earlier load, so a lazy worker is not started only to
        refuse; else right after), 404 unknown model, 503 worker not ready
        or overloaded.
    """
    body: OllamaChatRequest | OllamaGenerateRequest = decode(
        OllamaChatRequest if kind == "chat" else OllamaGenerateRequest, await request.body()
    )
    backend = backend_of(request)
    model = _resolve(backend, body.model)
    keep = keep_alive_seconds(body.keep_alive)
    if isinstance(body, OllamaGenerateRequest):
        check_generate(body)
    if is_load_only(body) and keep == 0:
        await backend.unload(model)
        return JSONResponse(load_reply(kind, body.model, timing, unloaded=True))
    await _check_think(backend, model, body.model, thinking(body.think), keep)
    if is_load_only(body):
        await backend.load(model, keep)
        return JSONResponse(load_reply(kind, body.model, timing, unloaded=False))
    request_id = new_id("ollama-")
    if isinstance(body, OllamaChatRequest):
        work, prompt_param = chat_request(body, request_id), "messages"
    else:
        work, prompt_param = generate_request(body, request_id), "prompt"
    num_ctx = body.options.num_ctx if body.options is not None else None
    known = _info(backend, model).context_length is not None
    if known:
        _check_num_ctx(backend, model, num_ctx)
    stream = await backend.submit(model, work, keep_alive=keep)
    timing.mark_submitted()
    if not known:  # the worker has just loaded the model: its context is known now
        try:
            _check_num_ctx(backend, model, num_ctx)
        except APIError:
            await stream.aclose()
            raise
    logprobs = bool(body.logprobs or body.top_logprobs)
    builder = ReplyBuilder(
        kind, body.model, timing, logprobs, error_of=lambda output: worker_error(output, prompt_param)
    )
    return _Job(stream, builder, request_id, body.stream is not False, prompt_param)


async def _check_think(backend: ModelBackend, model: str, name: str, think: bool | None, keep: float | None) -> None:
    """Refuse ``think`` on (as Ollama does) for canonical ``model``, asked
    for as ``name``, when it has no reasoning markup; ``think`` false or
    unset always passes. The rule is :attr:`ModelInfo.thinking`; while it
    is unknown (only the worker can tell), the model is loaded first, with
    the request's ``keep`` (awaited: the event loop keeps running), then
    asked again; still unknown (a worker that does not report its
    reasoning format), the request passes and the worker applies its
    template as asked.

    Raises:
        APIError: 400 ``"<name>" does not support thinking`` (Ollama's
        words), or the load's own errors (503).
    """
    if not think:
        return
    if _info(backend, model).thinking is None:
        await backend.load(model, keep)
    if _info(backend, model).thinking is False:
        quoted = json.dumps(name, ensure_ascii=False)
        raise APIError(400, f"{quoted} does not support thinking", code="thinking_not_supported", param="think")


def _check_num_ctx(backend: ModelBackend, model: str, num_ctx: int | None) -> None:
    """Refuse an ``options.num_ctx`` above canonical ``model``'s context
    (nothing to check while the context is unknown).

    Raises:
        APIError: 400 naming ``num_ctx``.
    """
    context = _info(backend, model).context_length
    if num_ctx is not None and context is not None and num_ctx > context:
        raise bad_request(f"options.num_ctx {num_ctx} is above the model's context of {context} tokens", "num_ctx")


def _info(backend: ModelBackend, model: str) -> ModelInfo:
    """The :class:`ModelInfo` of canonical ``model``."""
    return next(m for m in backend.models() if m.name == model)


# --- embeddings ---------------------------------------------------------------------------


async def embed(request: Request) -> Response:
    """``POST /api/embed``: ``{"model", "embeddings", ...}`` with one
    vector per input, in order."""
    return await _embedding(request, OllamaEmbedRequest)


async def embeddings(request: Request) -> Response:
    """``POST /api/embeddings`` (Ollama's older form): ``{"embedding"}``,
    the vector of ``prompt`` (empty for an empty prompt, which only loads
    the model)."""
    return await _embedding(request, OllamaEmbeddingsRequest)


async def _embedding(request: Request, kind: type) -> Response:
    """The shared flow of both embedding routes."""
    timing = Timing()
    try:
        body: OllamaEmbedRequest | OllamaEmbeddingsRequest = decode(kind, await request.body())
        backend = backend_of(request)
        model = _resolve(backend, body.model)
        keep = keep_alive_seconds(body.keep_alive)
        if isinstance(body, OllamaEmbeddingsRequest) and not body.prompt:
            kind = _info(backend, model).kind
            if kind is not None and kind != "embedding":
                raise bad_request(wrong_kind_message(model, kind, "embedding"), "model", code="wrong_model_kind")
            await backend.load(model, keep)
            return JSONResponse({"embedding": []})
        work = embed_request(body, new_id("ollama-embd-"))
        stream = await backend.submit(model, work, keep_alive=keep)
        timing.mark_submitted()
    except APIError as err:
        return ollama_error_response(err)

    def answer(output: RequestOutput) -> Response:
        timing.mark_output()
        rows = embedding_rows(output, len(work.texts or ()))
        if rows is None:
            return ollama_error_response(APIError(500, "The model worker returned malformed embeddings"))
        vectors = [floats_of(row) for row in rows]
        if isinstance(body, OllamaEmbeddingsRequest):
            return Response(encode({"embedding": vectors[0]}), media_type=JSON_MEDIA_TYPE)
        durations = timing.durations()
        reply = {
            "model": body.model,
            "embeddings": vectors,
            "total_duration": durations["total_duration"],
            "load_duration": durations["load_duration"],
            "prompt_eval_count": output.prompt_tokens,
        }
        return Response(encode(reply), media_type=JSON_MEDIA_TYPE)

    return await respond_to_only_output(
        request,
        stream,
        work.request_id,
        refuse=lambda output: ollama_error_response(worker_error(output, "input")),
        answer=answer,
    )


# --- model listings -----------------------------------------------------------------------


def digest(name: str, source: str) -> str:
    """A stable sha256 hex digest naming a configured model (Ollama lists
    one per model; mlxd has no blobs, so it hashes the name and source)."""
    return hashlib.sha256(f"{name}\0{source}".encode()).hexdigest()


def details(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Ollama's ``details`` of a model from its ``config.json`` contents
    (``{}`` when unknown): family from ``model_type``, quantization from
    MLX's ``quantization.bits``, format ``gguf`` or ``safetensors``."""
    family = str(config.get("model_type") or "")
    quant = config.get("quantization") or config.get("quantization_config") or {}
    bits = quant.get("bits") if isinstance(quant, dict) else None
    return {
        "parent_model": "",
        "format": "gguf" if source.lower().endswith(".gguf") else "safetensors",
        "family": family,
        "families": [family] if family else None,
        "parameter_size": "",
        "quantization_level": f"Q{bits}" if bits else "",
    }


def model_entry(
    name: str, source: str, created: float, size: int, config: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """One model of ``/api/tags`` (and, with ``extra``, of ``/api/ps``),
    named (``name`` and ``model`` alike) as Ollama lists it, with its tag
    (:func:`shared.model_names.listed_name`: ``tiny`` as ``tiny:latest``),
    a name every route resolves back to the model; the digest is of the
    configured ``name``."""
    shown = listed_name(name)
    return {
        "name": shown,
        "model": shown,
        "modified_at": timestamp(created),
        "size": size,
        "digest": digest(name, source),
        "details": details(config, source),
        **extra,
    }


NEVER = "2318-01-01T00:00:00Z"
"""``expires_at`` of a model that is never unloaded for idleness (Ollama
shows a far-future time too)."""


def expiry(expires_at: float | None) -> str:
    """``expires_at`` for ``/api/ps``."""
    return NEVER if expires_at is None else timestamp(expires_at)


def sampling_parameters(defaults: dict[str, float] | None) -> str:
    """``/api/show``'s ``parameters``: the model's sampling defaults, one
    ``name value`` per line in Ollama's option names."""
    if not defaults:
        return ""
    names = {"repetition_penalty": "repeat_penalty"}
    return "\n".join(f"{names.get(k, k)} {v}" for k, v in defaults.items())


# --- models and server --------------------------------------------------------------------


async def _files_of(backend: ModelBackend, infos: list[ModelInfo]) -> dict[str, ModelFiles]:
    """What each of ``infos``' files hold now, by model name: read in one
    worker thread (never on the event loop), once per model however many
    aliases it has, and on every call (so a listing never shows stale
    files)."""
    return await backend.model_files([info.name for info in infos])


def _entry(info: ModelInfo, files: ModelFiles, **extra: Any) -> dict[str, Any]:
    """The listing entry of one configured model."""
    size = extra.pop("size", None) or files.weight_bytes or 0
    return model_entry(info.name, info.source, info.created, size, files.config, **extra)


async def list_tags(request: Request) -> Response:
    """``GET /api/tags``: every configured model (aliases too, as their own
    entries, as Ollama lists a copied name), each name once and with its
    tag (:func:`model_entry`), with its size on disk and details, and (mlxd
    extensions) its ``kind`` and ``capabilities`` as ``/api/show`` names
    them."""
    backend = backend_of(request)
    infos = backend.models()
    files = await _files_of(backend, infos)
    entries: dict[str, dict[str, Any]] = {}
    for info in infos:
        found = capabilities(info.kind, files[info.name].chat_template, bool(info.thinking))
        entry = _entry(info, files[info.name], kind=info.kind, capabilities=found)
        for name in (info.name, *info.aliases):
            shown = listed_name(name)
            entries.setdefault(shown, {**entry, "name": shown, "model": shown})
    return JSONResponse({"models": list(entries.values())})


async def list_running(request: Request) -> Response:
    """``GET /api/ps``: the models whose workers are loaded, each once under
    its configured name with its tag (:func:`model_entry`), with memory in
    use (``size`` and ``size_vram``: unified memory), idle expiry and
    context length; a model being pulled by ``server.auto_pull`` is listed
    with size 0 and ``download`` (an mlxd extension: phase, bytes, rate,
    seconds left)."""
    backend = backend_of(request)
    infos = {m.name: m for m in backend.models()}
    resident = [r for r in backend.resident() if r.name in infos]
    files = await _files_of(backend, [infos[r.name] for r in resident])
    running = [
        _entry(
            infos[r.name],
            files[r.name],
            size=r.memory_bytes,
            expires_at=expiry(r.expires_at),
            size_vram=r.memory_bytes,
            context_length=r.context_length or 0,
            **({"download": r.download} if r.download is not None else {}),
        )
        for r in resident
    ]
    return JSONResponse({"models": running})


async def show(request: Request) -> Response:
    """``POST /api/show``: a configured model's details, chat template,
    sampling defaults (as ``parameters``), ``model_info``, capabilities
    (:func:`shared.model_kind.capabilities`; ``thinking`` only when
    :attr:`ModelInfo.thinking` says it has reasoning markup: not while only
    its worker can tell) and (an mlxd extension) its ``kind``."""
    try:
        body: OllamaShowRequest = decode(OllamaShowRequest, await request.body())
        backend = backend_of(request)
        model = _resolve(backend, show_model_name(body))
    except APIError as err:
        return ollama_error_response(err)
    info = _info(backend, model)
    files = (await _files_of(backend, [info]))[info.name]
    template = files.chat_template
    entry = model_entry(info.name, info.source, info.created, 0, files.config)
    family = entry["details"]["family"] or "unknown"
    model_info: dict[str, Any] = {"general.architecture": family}
    if info.context_length:
        model_info[f"{family}.context_length"] = info.context_length
    return JSONResponse(
        {
            "modelfile": f"# mlxd serves this model from its config: source = {info.source}\n",
            "parameters": sampling_parameters(info.sampling_defaults),
            "template": template,
            "details": entry["details"],
            "model_info": model_info,
            "capabilities": capabilities(info.kind or "generate", template, bool(info.thinking)),
            "kind": info.kind,
            "modified_at": entry["modified_at"],
        }
    )


async def version(request: Request) -> Response:
    """``GET /api/version``: the Ollama API version mlxd speaks."""
    return JSONResponse({"version": OLLAMA_VERSION})


async def root(request: Request) -> Response:
    """``GET /`` and ``HEAD /``: 200 "Ollama is running", what Ollama
    clients probe for."""
    return PlainTextResponse(RUNNING)


async def model_management(request: Request) -> Response:
    """``/api/pull``, ``/api/push``, ``/api/create``, ``/api/copy``,
    ``/api/delete``: 403, models come from the config."""
    return ollama_error_response(APIError(403, FROM_CONFIG, code="models_from_config"))
