"""Gateway -> worker: a generation request and how it is aborted (part of
the wire contract, :mod:`shared.protocol`).

:class:`GenerateRequest` carries the rendered or raw prompt (chat messages,
tools, images), its :class:`SamplingParams` and :class:`ResponseFormat`;
:class:`AbortRequest` ends requests early.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request decoding settings, already validated by the gateway.

    ``max_tokens`` is the hard cap on generated tokens (None: up to the
    context limit). ``temperature``, ``top_p``, ``top_k``, ``min_p`` and
    ``repetition_penalty`` are None when the request did not set them: the
    worker then uses the model's :class:`SamplingDefaults`. ``temperature``
    0 means greedy. ``top_k`` 0, ``top_p`` 1, ``min_p`` 0 and
    ``repetition_penalty`` 1 disable those filters. ``seed`` makes sampling reproducible
    for this request regardless of what else shares its batch.
    ``logit_bias`` maps token id to an additive bias. ``stop`` holds stop
    strings; the matched string is not part of the output. ``logprobs``
    asks for each sampled token's log-probability and ``top_logprobs`` for
    that many most likely alternatives. ``ignore_eos`` keeps generating past
    end-of-sequence tokens; ``min_tokens`` forbids them before that many
    tokens were generated. ``speculative`` false opts this request out of
    the model's speculative decoding (output is the same either way).
    """

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float | None = None
    logit_bias: dict[int, float] = {}
    stop: list[str] = []
    logprobs: bool = False
    top_logprobs: int = 0
    ignore_eos: bool = False
    min_tokens: int = 0
    speculative: bool = True


class SamplingDefaults(msgspec.Struct, frozen=True, kw_only=True):
    """The sampling settings a model uses where a request sets none: per
    field, the config's ``sampling_defaults``, else the model's own
    recommendation (its ``generation_config.json``), else these class
    defaults (temperature 1, no top-p / top-k / min-p filter, no repetition
    penalty)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A complete tool call: ``arguments`` is a JSON object as text."""

    id: str
    name: str
    arguments: str


class ImagePart(msgspec.Struct, frozen=True, kw_only=True):
    """One image of a chat turn, carried by value: ``data`` is the image
    file's bytes as the client sent them (never a path or a URL; a remote
    URL is fetched by the gateway first), ``sha256`` their hex digest
    (computed by the gateway; the worker checks it and keys its prefix
    cache on it, so a repeated image is recognised by content), and
    ``offset`` the character position in the turn's ``content`` where the
    image stands (0: before the text; ``len(content)``: after it), and
    ``param`` the request part it came from in the client's protocol (e.g.
    ``messages[0].content[1].image_url.url``), which a refusal names.
    ``kind``: what the bytes are, ``image``, ``video`` (a video file,
    sampled into frames by a vision worker that takes videos) or ``audio``
    (an OpenAI ``input_audio`` clip, ``wav`` or ``mp3``); a turn's parts
    share one order, by ``offset``. (Appended with a default: a worker that
    predates it refuses a video or audio clip as a bad image.)"""

    data: bytes
    sha256: str
    offset: int = 0
    param: str = ""
    kind: Literal["image", "video", "audio"] = "image"


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One chat turn with its content flattened to text by the gateway.

    ``role`` is ``system``, ``user``, ``assistant`` or ``tool``. An assistant
    turn may carry earlier ``reasoning`` and ``tool_calls``; a ``tool`` turn
    answers the call ``tool_call_id`` (``name`` is the tool's name).
    ``images`` (None: none) are the turn's pictures, in order, each placed
    at its ``offset`` in ``content``; only a vision worker accepts them.
    """

    role: str
    content: str
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None
    images: list[ImagePart] | None = None


class Tool(msgspec.Struct, frozen=True, kw_only=True):
    """A function the model may call: ``parameters`` is its JSON Schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


ToolChoice = Literal["none", "auto", "required", "function"]
"""``none``: no calls; ``auto``: the model decides; ``required``: at least one
call (grammar-enforced); ``function``: a call of ``tool_choice_name``."""


class ResponseFormat(msgspec.Struct, frozen=True, kw_only=True):
    """Constrain the output: ``json_object`` (any JSON object) or
    ``json_schema`` (valid against ``schema``). Enforced by a grammar.
    ``strict`` is recorded; mlxd always enforces the schema."""

    type: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    strict: bool = False


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True, tag="generate"):
    """Admit one generation request.

    Exactly one of ``messages`` (rendered with the model's chat template and
    a generation prompt), ``prompt`` (raw text) or ``prompt_token_ids`` is set.
    ``request_id`` is unique among the gateway's in-flight requests.
    ``n`` independent choices are generated from one prefill; choice ``i``
    of a seeded request uses seed ``seed + i``. ``timeout`` (seconds, None
    for none) is the deadline after which the worker ends the request with
    a ``timeout`` error and frees its memory.

    ``tools`` are rendered through the chat template; calls in the output
    come back as ``RequestOutput.tool_calls`` per ``tool_choice``;
    ``parallel_tool_calls`` False allows at most one call, and a named
    ``tool_choice`` exactly one; otherwise a turn carries at most
    ``max_tool_calls`` calls (None: the model's ``max_tool_calls_per_turn``
    for forced calls, no limit for ``auto``).
    ``response_format`` constrains the text. ``thinking`` turns a model's
    reasoning mode on or off where its template supports that (None: the
    template's default); reasoning text comes back as
    ``RequestOutput.reasoning``. ``continue_final`` (``messages`` only, the
    last of them an assistant turn): the prompt ends with that turn's text
    after the generation prompt, so the model continues it (a pre-filled
    response) instead of starting a new turn; the output is the
    continuation only. ``thinking_budget`` (None: no separate cap) is the
    most tokens a reasoning block may take: when it is used up, the worker
    writes the model's closing marker for the block, so the answer follows
    within ``max_tokens``. ``thinking_budget_best_effort``: a model whose
    reasoning block cannot be capped (no single closing marker) ignores the
    budget instead of refusing the request. ``max_tokens_ceiling``: the
    request's ``max_tokens`` is only a ceiling (Anthropic's required
    field, which clients set far above a local model's context): more than
    the room the prompt leaves in the context is cut to that room instead
    of refused; the choice then ends with ``length`` when the context is
    full. A prompt that leaves no room is still refused.
    ``suffix`` (``prompt`` only): fill in the middle. The prompt becomes
    the model's fill-in-the-middle tokens around ``prompt`` (the text
    before the gap) and ``suffix`` (the text after it), with no chat
    template; a model whose vocabulary has no such tokens refuses the
    request (``invalid_request``, ``error_param`` ``suffix``).
    ``key_name``: the name of the server's API key the request presented
    (``server.api_keys``' name for it, never the key itself; ``""`` when
    the server has no keys). The worker keeps what one key's requests wrote
    apart from every other key's (speculative drafting from earlier
    requests, see :mod:`worker.speculation.drafting`).
    """

    request_id: str
    sampling: SamplingParams
    messages: list[ChatMessage] | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    n: int = 1
    timeout: float | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice = "auto"
    tool_choice_name: str | None = None
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    thinking: bool | None = None
    count_only: bool = False
    continue_final: bool = False
    thinking_budget: int | None = None
    max_tool_calls: int | None = None
    thinking_budget_best_effort: bool = False
    max_tokens_ceiling: bool = False
    suffix: str | None = None
    key_name: str = ""


class AbortRequest(msgspec.Struct, frozen=True, tag="abort"):
    """Abort these requests (unknown ids are ignored). Each still gets its
    terminal ``RequestOutput`` with ``finish_reason="abort"``."""

    request_ids: list[str]
