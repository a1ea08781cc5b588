"""Ollama's model management over mlxd's hub pulls: ``POST /api/pull`` and
``DELETE /api/delete``, when ``server.allow_model_management`` is true
(otherwise both answer 403 as before; the auth middleware already requires
an API key when keys are set).

``POST /api/pull`` (``{"model": NAME, "stream": true}``; NAME is a catalog
name or ``org/name[@revision]``) runs :func:`gateway.hub.pull.pull` in a
thread and streams Ollama's progress objects as NDJSON
(:func:`progress_objects`): ``pulling manifest``, one ``pulling <file>``
object with ``digest``, ``total`` and ``completed`` per file as its bytes
arrive, ``verifying sha256 digest``, ``writing manifest``, ``success``; a
failure ends the stream with ``{"error": ...}``. With ``"stream": false``
one ``{"status": "success"}`` object (or an error status) answers when the
pull ends. On success the model is served at once under its catalog name
(else its repo id) and listed by ``/api/tags`` (see
:func:`gateway.hub.served.with_pulled_models`). A pull goes on to its end,
and its model is served, when its client goes away.

``DELETE /api/delete`` (``{"model": NAME}``) removes a model from the
cache and stops serving it; it is refused (400) while an entry of the
config file uses it. Both log and record who asked: the API key's
fingerprint (never the key) and the client address.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from gateway.hub.audit import key_fingerprint
from gateway.hub.catalog import CatalogError, Target, resolve
from gateway.hub.names import InvalidName
from gateway.hub.progress import PullStatus
from gateway.hub.pull import PullError, PullRefused, pull
from gateway.hub.served import catalog_of, model_name, pulled_names, with_pulled_models
from gateway.hub.store import StoreError, remove
from shared.config import Config
from shared.config_values import parse_size
from shared.model_names import find_name

NDJSON = "application/x-ndjson"


class PullBody(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/pull``'s body (``name`` is Ollama's older spelling)."""

    model: str = ""
    name: str = ""
    stream: bool = True
    insecure: bool = False


class DeleteBody(msgspec.Struct, forbid_unknown_fields=True):
    """``DELETE /api/delete``'s body."""

    model: str = ""
    name: str = ""


def _error(status: int, message: str) -> JSONResponse:
    """An Ollama error object."""
    return JSONResponse({"error": message}, status_code=status)


def who_asked(request: Request) -> str:
    """``api key sha256:<12 hex> from <address>`` (or without the key part)."""
    client = request.client.host if request.client else "?"
    header = request.headers.get("authorization", "")
    key = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key", "")
    return f"api key {key_fingerprint(key)} from {client}" if key else f"client {client}"


def progress_objects(status: PullStatus, sent: dict[str, int]) -> list[dict[str, Any]]:
    """The Ollama progress objects for one status; ``sent`` (file -> bytes
    last reported) keeps per-file objects to those whose bytes changed."""
    if status.phase == "listing":
        return [{"status": "pulling manifest"}]
    if status.phase == "failed":
        return [{"error": status.error}]
    objects: list[dict[str, Any]] = []
    for item in status.files:
        if sent.get(item.path) == item.done:
            continue
        sent[item.path] = item.done
        objects.append(
            {"status": f"pulling {item.path}", "digest": item.digest, "total": item.total, "completed": item.done}
        )
    if status.phase == "verifying":
        objects.append({"status": "verifying sha256 digest"})
    elif status.phase == "complete":
        objects += [{"status": "writing manifest"}, {"status": "success"}]
    return objects


def _file_config(config: Config) -> Config:
    """``config`` without the entries served only because they were pulled."""
    added = pulled_names()
    return msgspec.structs.replace(config, models=[m for m in config.models if m.name not in added])


_serving = asyncio.Lock()


async def _serve_pulled(request: Request) -> None:
    """Re-apply the running config with the pulled models (after a pull or
    a removal; one at a time)."""
    async with _serving:
        config = request.app.state.config
        catalog = await asyncio.to_thread(catalog_of, config)
        updated = await asyncio.to_thread(with_pulled_models, _file_config(config), catalog)
        await request.app.state.backend.reload(updated)
        request.app.state.config = updated


_finishing: set[asyncio.Task] = set()


def _serve_when_done(request: Request, job: asyncio.Future) -> asyncio.Task:
    """A task that waits for the pull and, if it succeeded, serves the
    model; it runs to its end even when the client goes away."""

    async def finish() -> None:
        try:
            await job
        except Exception:  # the pull's own failure is reported by its stream or answer
            return
        await _serve_pulled(request)

    task = asyncio.create_task(finish())
    _finishing.add(task)
    task.add_done_callback(_finishing.discard)
    return task


def _decode(request_body: bytes, kind: type) -> Any:
    """The body decoded as ``kind``; raises ValueError with Ollama's wording."""
    try:
        return msgspec.json.decode(request_body or b"{}", type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(f"invalid request body: {exc}") from exc


async def pull_route(request: Request) -> Response:
    """``POST /api/pull`` (see the module docstring)."""
    config: Config = request.app.state.config
    try:
        body = _decode(await request.body(), PullBody)
    except ValueError as exc:
        return _error(400, str(exc))
    if body.insecure:
        return _error(400, "insecure pulls are not supported: mlxd pulls from the Hugging Face Hub over its own TLS")
    text = body.model or body.name
    if not text:
        return _error(400, "model is required")
    try:
        catalog = await asyncio.to_thread(catalog_of, config)
        target = resolve(text, catalog)
    except (InvalidName, CatalogError) as exc:
        return _error(400, str(exc))
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[PullStatus] = asyncio.Queue()
    job = loop.run_in_executor(
        None,
        lambda: pull(
            target,
            who=who_asked(request),
            max_bytes=parse_size(config.server.max_pull_bytes, 0),
            listener=lambda status: loop.call_soon_threadsafe(queue.put_nowait, status),
        ),
    )
    job.add_done_callback(lambda _job: loop.call_soon_threadsafe(queue.put_nowait, None))  # type: ignore[arg-type]
    served = _serve_when_done(request, job)
    if not body.stream:
        try:
            await job
        except PullError as exc:
            return _error(400 if isinstance(exc, PullRefused) else 500, str(exc))
        await asyncio.shield(served)
        return JSONResponse({"status": "success"})
    return StreamingResponse(_stream(target, job, served, queue), media_type=NDJSON)


async def _stream(
    target: Target, job: asyncio.Future, served: asyncio.Task, queue: asyncio.Queue
) -> AsyncIterator[bytes]:
    """The NDJSON lines of a streamed pull; the model is served before
    ``success`` is sent."""
    sent: dict[str, int] = {}
    while True:
        status = await queue.get()
        if status is None:
            break
        objects = progress_objects(status, sent)
        if status.phase == "complete":
            await asyncio.shield(served)
        for item in objects:
            yield msgspec.json.encode(item) + b"\n"
    error = job.exception()
    if error is not None and not isinstance(error, PullError):
        yield msgspec.json.encode({"error": f"pull of {target.label} failed: {error}"}) + b"\n"


async def delete_route(request: Request) -> Response:
    """``DELETE /api/delete`` (see the module docstring)."""
    config: Config = request.app.state.config
    try:
        body = _decode(await request.body(), DeleteBody)
    except ValueError as exc:
        return _error(400, str(exc))
    text = body.model or body.name
    if not text:
        return _error(400, "model is required")
    try:
        catalog = await asyncio.to_thread(catalog_of, config)
        target = _delete_target(text, config, catalog)
    except (InvalidName, CatalogError) as exc:
        return _error(404, f"model '{text}' not found ({exc})")
    file_config = _file_config(config)
    sources = {m.name: m.source for m in file_config.models}
    try:
        await asyncio.to_thread(remove, target, who=who_asked(request), sources=sources, catalog=catalog)
    except StoreError as exc:
        status = 404 if "not in the local store" in str(exc) else 400
        return _error(status, str(exc))
    await _serve_pulled(request)
    return Response(status_code=200)


def _delete_target(text: str, config: Config, catalog: dict) -> Target:
    """The hub target ``text`` names: a model served because it was pulled
    (by its served name, or that name's ``:latest`` twin:
    :func:`shared.model_names.find_name`), else a catalog name or repo id.

    Raises:
        InvalidName: none of those.
    """
    models = {model.name: model for model in config.models}
    served = find_name(text, models)
    if served is not None and served in pulled_names():
        target = resolve(models[served].source, catalog)
        if model_name(target) != served:
            target = Target(target.ref, served, catalog.get(served))
        return target
    return resolve(text, catalog)
