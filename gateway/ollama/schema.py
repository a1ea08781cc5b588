"""Request bodies of mlxd's Ollama-compatible API (``/api/...``): the msgspec
Struct shapes (declarative; decoding, checks and the translation to worker
requests are in :mod:`gateway.ollama.translate`).

The field set is the official ``ollama`` client's (``ollama._types``): every
field it can send is decoded here and is either honoured, accepted with no
effect, or refused with a 400 naming it (see ``docs/api/ollama.md``); a
field in no Ollama schema is a 400 too.

- :class:`OllamaChatRequest` (``POST /api/chat``) and :class:`OllamaGenerateRequest`
  (``POST /api/generate``) become a :class:`~shared.protocol.GenerateRequest`
  with :func:`~gateway.ollama.translate.chat_request` / :func:`~gateway.ollama.translate.generate_request`: ``options`` map field
  by field onto :class:`~shared.protocol.SamplingParams`
  (:func:`~gateway.ollama.translate.sampling`), ``format`` (``"json"`` or a JSON schema) onto the
  grammar's :class:`~shared.protocol.ResponseFormat`, ``think`` onto the
  template's reasoning switch, ``tools`` / ``tool_calls`` / ``tool_name``
  onto the worker's tools and calls.
- ``keep_alive`` (a number of seconds or a duration such as ``"5m"``;
  negative: forever; ``0``: unload after the request) is parsed by
  :func:`~gateway.ollama.translate.keep_alive_seconds` and handed to the pool.
- :class:`OllamaEmbedRequest` (``POST /api/embed``) and :class:`OllamaEmbeddingsRequest`
  (``POST /api/embeddings``) become an :class:`~shared.protocol.EmbedRequest`.
- :class:`OllamaShowRequest` (``POST /api/show``).

Every check (:mod:`gateway.ollama.translate`) raises :class:`~gateway.core.errors.APIError` (400); the routes
render it in Ollama's ``{"error": "..."}`` shape.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

NO_VISION = "images cannot be combined with raw or suffix: they go into a chat turn, for a vision model"
"""The 400 for ``images`` of a raw or fill-in-the-middle ``/api/generate``."""

FROM_CONFIG = (
    "mlxd serves the models of its config file; models cannot be pulled, pushed, created, copied or deleted "
    "through the API (edit the config's [[models]] and reload instead; "
    "server.allow_model_management = true enables /api/pull and /api/delete)"
)
"""The answer of the model-management routes."""

THINK_LEVELS = ("low", "medium", "high")
"""``think`` strings accepted as "on" (mlxd has no graded reasoning effort)."""


class OllamaOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Ollama's ``options`` (runtime parameters). Honoured: ``num_predict``,
    ``temperature``, ``top_p``, ``top_k``, ``min_p``, ``seed``, ``stop``,
    ``repeat_penalty``, ``presence_penalty``, ``frequency_penalty``,
    ``num_ctx`` (checked against the model's context). Accepted without
    effect: the load and hardware settings (:data:`NO_EFFECT`). Refused
    unless set to their "off" value: the samplers mlxd does not have
    (:data:`REFUSED`)."""

    numa: bool | None = None
    num_ctx: int | None = None
    num_batch: int | None = None
    num_gpu: int | None = None
    main_gpu: int | None = None
    low_vram: bool | None = None
    f16_kv: bool | None = None
    logits_all: bool | None = None
    vocab_only: bool | None = None
    use_mmap: bool | None = None
    use_mlock: bool | None = None
    embedding_only: bool | None = None
    num_thread: int | None = None
    num_keep: int | None = None
    seed: int | None = None
    num_predict: int | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    tfs_z: float | None = None
    typical_p: float | None = None
    repeat_last_n: int | None = None
    temperature: float | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    penalize_newline: bool | None = None
    stop: Union[list[str], str, None] = None


NO_EFFECT = (
    "numa",
    "num_batch",
    "num_gpu",
    "main_gpu",
    "low_vram",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "use_mmap",
    "use_mlock",
    "embedding_only",
    "num_thread",
    "num_keep",
    "penalize_newline",
)
"""Options accepted with no effect: how llama.cpp loads and runs a model
(threads, GPU layers, memory mapping) has no meaning for an MLX worker."""

REFUSED: dict[str, Any] = {
    "tfs_z": 1.0,
    "typical_p": 1.0,
    "mirostat": 0,
    "repeat_last_n": 64,
}
"""Options mlxd has no sampler for, with the one value accepted (the
sampler off, or Ollama's default window); any other value is a 400."""


class OllamaCalledFunction(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A tool call's function: ``arguments`` is a JSON object (not text);
    ``index`` (position in the turn) is accepted and ignored."""

    name: str
    arguments: dict[str, Any] = {}
    index: int | None = None


class OllamaToolCall(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One call in an assistant message's ``tool_calls`` (``id`` optional:
    mlxd makes one up when absent)."""

    function: OllamaCalledFunction
    id: str | None = None
    type: Literal["function"] | None = None


class OllamaMessage(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One chat turn: ``thinking`` is earlier reasoning of an assistant
    turn; a ``tool`` turn names its tool with ``tool_name`` (and may name
    the call with ``tool_call_id``); ``images`` (base64) go to a vision
    model, placed before the turn's text."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    thinking: str | None = None
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class OllamaFunction(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A tool's function: ``parameters`` is its JSON Schema."""

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class OllamaTool(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of ``tools`` (only ``function`` tools exist)."""

    function: OllamaFunction
    type: Literal["function"] = "function"


KeepAlive = Union[float, str, None]
"""``keep_alive`` as sent: seconds, or a duration string."""

Format = Union[str, dict[str, Any], None]
"""``format`` as sent: ``"json"``, ``""`` (none) or a JSON schema object."""


class OllamaGeneration(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Fields shared by chat and generate."""

    model: str
    stream: bool | None = None
    options: OllamaOptions | None = None
    format: Format = None
    keep_alive: KeepAlive = None
    think: Union[bool, str, None] = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


class OllamaChatRequest(OllamaGeneration, forbid_unknown_fields=True, kw_only=True):
    """``POST /api/chat``. No ``messages`` (or none at all) only loads the
    model (or, with ``keep_alive`` 0, unloads it)."""

    messages: list[OllamaMessage] | None = None
    tools: list[OllamaTool] | None = None


class OllamaGenerateRequest(OllamaGeneration, forbid_unknown_fields=True, kw_only=True):
    """``POST /api/generate``. An empty ``prompt`` only loads the model (or,
    with ``keep_alive`` 0, unloads it). ``raw`` sends ``prompt`` as is;
    otherwise it is one user turn (after ``system``) through the chat
    template. ``suffix`` asks for fill-in-the-middle: ``prompt`` is the
    text before the gap and the worker lays both out with the model's
    fill-in-the-middle tokens, without the chat template (a model without
    them refuses it). ``template``, ``context``, ``images`` and the
    image-generation fields are refused (see :func:`check_generate`)."""

    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool | None = None
    images: list[str] | None = None
    width: int | None = None
    height: int | None = None
    steps: int | None = None


class OllamaEmbedRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /api/embed``: ``truncate`` defaults to true as in Ollama."""

    model: str
    input: Union[str, list[str]]
    truncate: bool | None = None
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None
    dimensions: int | None = None


class OllamaEmbeddingsRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /api/embeddings`` (Ollama's older single-prompt form)."""

    model: str
    prompt: str | None = None
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaShowRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``POST /api/show``: ``name`` is the older spelling of ``model``;
    ``verbose`` is accepted (mlxd has no tokenizer dump to add)."""

    model: str | None = None
    name: str | None = None
    verbose: bool | None = None
