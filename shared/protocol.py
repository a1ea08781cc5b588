"""The whole wire contract between the gateway and its worker processes.

Every message that crosses a ZeroMQ socket is one of the msgspec Structs in
this module, encoded with MessagePack by :mod:`shared.codec`. Nothing else is
ever sent and nothing is ever pickled. Each message type carries a ``type``
tag so a decoder can reject anything it does not know.

Declarative, and one file on purpose (so longer than the ~500 lines other
modules keep to): it holds only message shapes and the few rules that read
them (when an output ends a choice or the request,
:class:`OpenChoices`), no I/O and no threads. The contract is versioned as
a whole by :data:`PROTOCOL_VERSION`, so every shape that version covers
lives here, where a change to any of them is seen next to the version it
may need to bump; splitting it would let one side's copy drift.

Direction gateway -> worker (``GatewayMessage``):
    :class:`GenerateRequest`, :class:`AbortRequest`, :class:`Shutdown`,
    :class:`EmbedRequest` (embedding workers), :class:`RerankRequest`
    (rerank workers), :class:`SpeechRequest` (speech workers),
    :class:`TranscribeRequest` (transcription workers),
    :class:`ClearCache`.
Direction worker -> gateway (``WorkerMessage``):
    :class:`Hello`, :class:`Loaded`, :class:`Ready`, :class:`Heartbeat`,
    :class:`StepOutputs`, :class:`Failed`, :class:`CacheCleared`.

Lifecycle: a worker sends ``Hello`` as soon as its sockets are up, ``Loaded``
once the model and tokenizer are in memory, ``Ready`` after warm-up, then
``Heartbeat`` periodically and one ``StepOutputs`` per scheduler step that
produced anything. ``Failed`` reports a fatal start-up error just before the
worker exits.

Versioning: :data:`PROTOCOL_VERSION` names this contract. A worker reports
the version it was built with in its ``Hello``; a gateway refuses (and
stops) a worker whose version differs from its own, since the two may no
longer agree on any other message. ``Hello`` itself never changes
incompatibly, so that check always works. Bump the version whenever a
change is not one of: a new field appended last with a default, or a new
optional message type the other side may ignore.

Between machines (gateway <-> ``mlxd node``, see :mod:`gateway.workers.node_link`
and :mod:`gateway.node_main`) the same messages travel over CURVE-encrypted
tcp, plus a few transport messages: the gateway opens one session per
worker incarnation with :class:`NodeStart` and may end it with
:class:`NodeKill`; the node answers :class:`NodeStarted` once the worker
process exists and :class:`NodeExited` when it ends; both sides send
:class:`NodeAlive` every :data:`NODE_ALIVE_INTERVAL` seconds so either
notices when the other has gone (``NodeInbound`` / ``NodeOutbound``).

Request lifecycle: every ``GenerateRequest`` the worker receives is answered
by :class:`RequestOutput` entries; each of its ``n`` choices ends with exactly
one output whose ``finish_reason`` is ``stop``, ``length`` or ``tool_calls``, unless the
request ends early with one ``error`` or ``abort`` output, which ends every
choice at once. These rules live here once: :attr:`RequestOutput.ends_choice`,
:attr:`RequestOutput.ends_request` and :class:`OpenChoices` (the count of a
request's choices still open); every reader uses them. New fields are appended last
with defaults so older peers keep decoding.

Longer than ~500 lines on purpose: the wire contract is one versioned whole
(:data:`PROTOCOL_VERSION`): its message types and the few rules that go with them.
"""

from __future__ import annotations

from typing import Any, Literal, Union

import msgspec

PROTOCOL_VERSION = 2
"""Version of this wire contract (see the module docstring). 2: chat
messages carry ``images`` (:class:`ImagePart`); bumped although the field
is appended with a default, because a worker of version 1 would decode a
request with images and silently drop them."""

EXIT_THREAD_DIED = 3
"""Exit code of a worker one of whose threads died. Before exiting with it
the worker has sent every running request its error (unless its output
thread was the one that died) and waited for those frames to be written,
so the gateway keeps reading its socket a little longer after this exit
(``gateway.workers.process``) rather than answering those requests
itself."""

FinishReason = Literal["stop", "length", "abort", "error", "tool_calls"]
"""Why a request ended: a stop token or string, the token limit, an abort
(client gone, shutdown), an error (see ``RequestOutput.error``), or the
model ended its turn with tool calls."""

ErrorKind = Literal["invalid_request", "context_length_exceeded", "overloaded", "unavailable", "internal", "timeout"]
"""Class of a request error; the gateway maps it to an HTTP status
(400, 400, 503, 503, 500, 504). ``unavailable`` is what the gateway itself
reports when a worker dies or stops answering mid-request; ``timeout`` means
the request ran past its deadline and was stopped."""


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


class Shutdown(msgspec.Struct, frozen=True, tag="shutdown"):
    """Ask the worker to exit: abort everything in flight, then exit 0."""


class WorkerStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters a worker reports with every heartbeat.

    Totals since the worker started, except the current values ``running``
    (sequences decoding), ``waiting`` (admitted, not yet decoding),
    ``cache_bytes`` and ``cache_entries`` (prefix cache contents).
    ``prompt_tokens`` counts tokens actually prefilled; ``cached_tokens``
    those reused from the prefix cache instead. ``cache_queries`` and
    ``cache_hits`` count look-ups and look-ups that reused anything.
    ``step_seconds`` is the wall time spent in engine steps.
    ``active_memory_bytes``, ``cache_memory_bytes`` and
    ``peak_memory_bytes`` are MLX's own accounting (``mx.get_active_memory``,
    ``mx.get_cache_memory``, ``mx.get_peak_memory``): buffers in use, freed
    buffers MLX keeps for reuse, and the most ever in use by this worker.
    On Metal these count GPU buffers that the process's RSS misses.
    ``disk_cache_*``: the prefix cache's disk tier (see
    :mod:`worker.caches.disk`): bytes and entries on disk now; look-ups
    served from disk and the prompt tokens they covered; entries written;
    files rejected (truncated, corrupt or another model's).
    ``draft_tokens`` / ``draft_accepted_tokens``: speculative decoding's
    drafted tokens and those verification accepted (0 when it is off);
    ``draft_steps``: engine steps that verified drafts;
    ``draft_skipped_steps``: steps that did not, by reason (see
    :meth:`worker.speculation.drafting.Speculation.count`).
    ``cache_refused``: states the prefix cache refused to store because
    they did not hold exactly the tokens of their key (always 0 unless a
    bug moved a sequence past its key; see
    :meth:`worker.caches.prefix.PrefixCache.insert`).
    ``heartbeat_seq``: this heartbeat's number within the worker
    incarnation (1, 2, ...; 0 in a snapshot that is not a heartbeat), so a
    reader can tell a fresh heartbeat from one it has already seen.
    ``vision_prefills``: prompts whose images went through the vision
    tower (a prompt whose images were all found in the prefix cache is not
    counted); ``vision_image_tokens``: the image, video and audio tokens of those prompts.
    ``rerank_pairs``: query-document pairs a rerank worker scored.
    ``audio_seconds_in``: seconds of audio a transcription worker has
    transcribed (counted when a request finishes).
    ``cache_evictions`` / ``disk_cache_evictions``: entries the memory /
    disk tier dropped to stay within its budget (not those a clear or a
    longer entry of the same prefix replaced). ``warm_prompts`` /
    ``warm_tokens``: the model's ``warm_prompts`` prefilled into the prefix
    cache at load, and their prompt tokens.
    """

    running: int = 0
    waiting: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    max_batch_seen: int = 0
    cache_bytes: int = 0
    cache_budget_bytes: int = 0
    cache_entries: int = 0
    cache_queries: int = 0
    cache_hits: int = 0
    cached_tokens: int = 0
    step_seconds: float = 0.0
    requests_timed_out: int = 0
    active_memory_bytes: int = 0
    cache_memory_bytes: int = 0
    peak_memory_bytes: int = 0
    disk_cache_bytes: int = 0
    disk_cache_entries: int = 0
    disk_cache_hits: int = 0
    disk_cached_tokens: int = 0
    disk_cache_writes: int = 0
    disk_cache_rejected: int = 0
    draft_tokens: int = 0
    draft_accepted_tokens: int = 0
    draft_steps: int = 0
    draft_skipped_steps: dict[str, int] = msgspec.field(default_factory=dict)
    cache_refused: int = 0
    heartbeat_seq: int = 0
    vision_prefills: int = 0
    vision_image_tokens: int = 0
    rerank_pairs: int = 0
    audio_seconds_in: float = 0.0
    cache_evictions: int = 0
    disk_cache_evictions: int = 0
    warm_prompts: int = 0
    warm_tokens: int = 0


class Hello(msgspec.Struct, frozen=True, kw_only=True, tag="hello"):
    """First message of a worker incarnation: its sockets are connected.

    ``protocol`` is the worker's :data:`PROTOCOL_VERSION` (0: a worker from
    before versioning). This message's fields never change incompatibly.
    """

    worker_id: str
    pid: int
    model: str
    protocol: int = 0


class Loaded(msgspec.Struct, frozen=True, kw_only=True, tag="loaded"):
    """The model and tokenizer are in memory.

    ``context_length`` is the most tokens (prompt + completion) a request may
    use; ``load_seconds`` is the wall time of resolving and loading;
    ``blas`` names what runs the matrix products (``metal``, ``accelerate``,
    ``openblas`` or ``builtin``) and
    ``sampling`` where sampling runs (``host``: NumPy, ``device``: MLX).
    ``sampling_defaults`` (None from an older worker) are the settings the
    worker uses where a request sets none.
    The ``*_memory_bytes`` fields are MLX's accounting right after loading
    (as in :class:`WorkerStats`); ``working_set_bytes`` is the device's
    ``max_recommended_working_set_size`` on Metal (0 where the device
    reports none, as on the CPU backend) and ``memory_limit_bytes`` MLX's
    memory limit in effect (``mx.get_memory_limit``). ``vision``: the model
    takes images (a vision worker, see :mod:`shared.model_kind`).
    ``speculation``: the speculative drafting in effect (``suffix``,
    ``prompt_lookup`` or ``draft:<source>``; ``""``: off, also when the
    config asked for it and the model cannot speculate).
    """

    worker_id: str
    context_length: int
    load_seconds: float
    model_path: str
    blas: str = ""
    sampling: str = ""
    sampling_defaults: SamplingDefaults | None = None
    active_memory_bytes: int = 0
    cache_memory_bytes: int = 0
    peak_memory_bytes: int = 0
    working_set_bytes: int = 0
    memory_limit_bytes: int = 0
    vision: bool = False
    speculation: str = ""


class Ready(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    """Warm-up finished; the worker accepts ``GenerateRequest`` from now on."""

    worker_id: str


class Failed(msgspec.Struct, frozen=True, kw_only=True, tag="failed"):
    """A fatal start-up error (for example the model could not be loaded);
    the worker exits right after sending it."""

    worker_id: str
    message: str


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat"):
    """Periodic liveness signal with the worker's current counters."""

    worker_id: str
    stats: WorkerStats


class TopLogprob(msgspec.Struct, frozen=True, array_like=True):
    """One candidate token: its id, text (lossy for partial UTF-8), ``raw``
    bytes and log-probability."""

    token_id: int
    token: str
    raw: bytes
    logprob: float


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    """A sampled token with its log-probability and the ``top`` most likely
    alternatives at that position (most likely first)."""

    token_id: int
    token: str
    raw: bytes
    logprob: float
    top: list[TopLogprob]


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of the ``index``-th tool call of a choice.

    The first piece of a call carries its ``id`` and ``name``; every piece
    may carry more ``arguments`` text (the JSON object, in order).
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class RequestOutput(msgspec.Struct, frozen=True, kw_only=True):
    """New output of one choice of one request in one scheduler step.

    ``index`` is the choice (0 .. n-1). ``text`` is the newly decoded text
    (may be empty while a multi-byte character or a possible stop string is
    held back). ``prompt_tokens``, ``cached_tokens`` (prompt tokens reused
    from the prefix cache) and ``completion_tokens`` (this choice's) are
    running totals. ``logprobs`` holds the tokens sampled in this step when
    the request asked for them. ``reasoning`` is new reasoning text (split
    out of the model's thinking markers) and ``tool_calls`` new pieces of
    tool calls; tool-call and reasoning markup never appears in ``text``.
    When ``finish_reason`` is ``stop``, ``length`` or ``tool_calls`` this
    choice is done; ``error`` or ``abort`` end the whole request (every
    choice): ``error`` holds a message safe to show the client,
    ``error_kind`` its class and ``error_param`` (None: not one field) the
    request field at fault, in the worker's terms (``prompt``,
    ``logit_bias``, ``response_format``, ``tools``, ...). ``stop_sequence`` names the stop string that
    ended the choice, if one did. ``queue_seconds`` (on a request's first
    output) is how long it waited in the worker before the engine took it.
    ``disk_cached_tokens``: the part of ``cached_tokens`` loaded from the
    prefix cache's disk tier.
    ``accepted_prediction_tokens`` / ``rejected_prediction_tokens``: this
    choice's speculative draft tokens that verification kept / threw away
    (running totals, as ``completion_tokens``; accepted ones are part of
    ``completion_tokens``, rejected ones are not).
    An :class:`EmbedRequest` is answered by one output with
    ``finish_reason="stop"``, ``prompt_tokens`` the tokens of all its
    inputs, and ``embeddings`` its vectors: little-endian float32,
    row-major, ``embedding_dim`` values per input, in input order.
    A :class:`RerankRequest` is answered likewise, with ``scores`` holding
    each document's relevance score in document order (``prompt_tokens``:
    the tokens of every pair).
    A :class:`SpeechRequest` is answered by outputs whose ``audio`` holds
    the next bytes of the encoded audio (a streamed request: one output per
    synthesised chunk, the bytes in order make the file; otherwise the whole
    file in the terminal output) and ``audio_seconds`` the seconds of audio
    those bytes add; ``prompt_tokens`` is the input's phoneme count and
    ``completion_tokens`` 0 (the model makes samples, not tokens).
    A :class:`TranscribeRequest` gets one output per decoded 30-second
    window with that window's new ``text`` (may be empty), then one
    ``finish_reason="stop"`` output holding the whole ``transcript``.
    """

    request_id: str
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    error_param: str | None = None
    index: int = 0
    cached_tokens: int = 0
    logprobs: list[TokenLogprob] | None = None
    reasoning: str = ""
    tool_calls: list[ToolCallDelta] | None = None
    stop_sequence: str | None = None
    queue_seconds: float | None = None
    disk_cached_tokens: int = 0
    embeddings: bytes | None = None
    embedding_dim: int = 0
    scores: list[float] | None = None
    audio: bytes | None = None
    audio_seconds: float = 0.0
    transcript: Transcript | None = None
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0

    @property
    def ends_choice(self) -> bool:
        """Whether this output ends its own choice only (finish reason in
        :data:`CHOICE_END_REASONS`); the request's other choices go on."""
        return self.finish_reason in CHOICE_END_REASONS

    @property
    def ends_request(self) -> bool:
        """Whether this output ends the whole request, every choice at once
        (finish reason in :data:`REQUEST_END_REASONS`)."""
        return self.finish_reason in REQUEST_END_REASONS


CHOICE_END_REASONS: frozenset[str] = frozenset(("stop", "length", "tool_calls"))
"""Finish reasons that end one choice (and only that choice)."""

REQUEST_END_REASONS: frozenset[str] = frozenset(("error", "abort"))
"""Finish reasons that end every choice of a request at once."""


class OpenChoices:
    """The one count of a request's choices still waiting for their end.

    Built with the request's ``n`` (below 1 counts as 1); :meth:`close` is fed every output of the
    request in order and says how many choices that output ended (one for a
    choice's end, all still open for an error/abort, none otherwise).
    :attr:`open` is what is left; the request is over when it reaches 0.
    Not thread-safe: one owner (an event loop or one thread) feeds it.
    """

    __slots__ = ("open",)

    def __init__(self, n: int) -> None:
        self.open = max(1, n)

    def close(self, output: RequestOutput) -> int:
        """Count ``output``'s end; return how many choices it ended (0 when
        it ends none or the request was already over)."""
        if output.finish_reason is None or self.open == 0:
            return 0
        ended = self.open if output.ends_request else 1
        self.open -= ended
        return ended

    def close_all(self) -> int:
        """End every open choice at once (the request was given up); return
        how many were still open."""
        ended, self.open = self.open, 0
        return ended

    @property
    def done(self) -> bool:
        """Whether no choice is open any more."""
        return self.open == 0


class StepOutputs(msgspec.Struct, frozen=True, kw_only=True, tag="step"):
    """Every request's new output from one scheduler step, in one message."""

    step: int
    outputs: list[RequestOutput]


class EmbedRequest(msgspec.Struct, frozen=True, kw_only=True, tag="embed"):
    """Embed a batch of inputs with an embedding worker.

    Exactly one of ``texts`` (each tokenized with the model's tokenizer and
    its special tokens) or ``token_ids`` (each list taken as the text's
    tokens; the model's special tokens are added around it) is set and
    non-empty. An input longer than the model's limit fails the request
    with ``context_length_exceeded`` unless ``truncate`` is true (then it
    is cut to the limit, keeping its start). ``dimensions`` (None: the
    model's own) shortens every vector, renormalized when the model
    normalizes, where the model's config allows it. ``timeout`` as for
    :class:`GenerateRequest`. Answered by exactly one terminal
    :class:`RequestOutput` (see there); aborted like a generation.
    """

    request_id: str
    texts: list[str] | None = None
    token_ids: list[list[int]] | None = None
    truncate: bool = False
    dimensions: int | None = None
    timeout: float | None = None

    @property
    def n(self) -> int:
        """An embedding request has one result (one terminal output)."""
        return 1


class RerankRequest(msgspec.Struct, frozen=True, kw_only=True, tag="rerank"):
    """Score ``documents`` against ``query`` with a rerank (cross-encoder)
    worker: each document is paired with the query and the pair scored.

    ``documents`` is non-empty and no text is empty. A pair longer than the
    model's limit fails the request with ``context_length_exceeded``
    unless ``truncate`` is true (then the document is cut, keeping its
    start; a query that leaves no room for any document text still fails).
    ``timeout`` as for :class:`GenerateRequest`. Answered by exactly one
    terminal :class:`RequestOutput` (``scores`` in document order; sorting
    and ``top_n`` are the gateway's); aborted like a generation.
    """

    request_id: str
    query: str
    documents: list[str]
    truncate: bool = False
    timeout: float | None = None

    @property
    def n(self) -> int:
        """A rerank request has one result (one terminal output)."""
        return 1


class SpeechRequest(msgspec.Struct, frozen=True, kw_only=True, tag="speech"):
    """Synthesise speech with a speech worker.

    ``input`` is the text, ``voice`` one of the model's voices,
    ``response_format`` the container or raw encoding (``mp3``, ``opus``,
    ``aac``, ``flac``, ``wav``, ``pcm``), ``speed`` the speaking rate
    (1: the model's own), ``instructions`` how to speak (None: none; a
    model that cannot follow them refuses the request). ``stream``: send
    the audio as it is synthesised, chunk by chunk, in a byte stream that
    is a valid file when concatenated (else one terminal output holds the
    whole file). ``timeout`` as for :class:`GenerateRequest`. Answered as
    :class:`RequestOutput` says; aborted like a generation.
    """

    request_id: str
    input: str
    voice: str
    response_format: str = "mp3"
    speed: float = 1.0
    instructions: str | None = None
    stream: bool = False
    timeout: float | None = None

    @property
    def n(self) -> int:
        """A speech request has one result (one terminal output)."""
        return 1


class TranscriptWord(msgspec.Struct, frozen=True, kw_only=True):
    """One word of a transcript: its text and where it is spoken (seconds)."""

    word: str
    start: float
    end: float


class TranscriptSegment(msgspec.Struct, frozen=True, kw_only=True):
    """One segment of a transcript, in the shape of OpenAI's ``verbose_json``
    segment; ``words`` is empty unless word timestamps were asked for."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[TranscriptWord] = []


class Transcript(msgspec.Struct, frozen=True, kw_only=True):
    """A finished transcription: the whole ``text``, the spoken ``language``
    (its English name in lower case, e.g. ``english``), the audio's
    ``duration`` in seconds and its ``segments``."""

    text: str
    language: str
    duration: float
    segments: list[TranscriptSegment] = []


class TranscribeRequest(msgspec.Struct, frozen=True, kw_only=True, tag="transcribe"):
    """Transcribe (``task`` ``transcribe``) or translate into English
    (``translate``) one uploaded audio file with a transcription worker.

    ``audio`` is the file's bytes (decoded by the worker; an unknown,
    corrupt, empty or too long file fails the request with
    ``invalid_request`` naming the reason). ``language`` (ISO-639-1, None:
    detected), ``prompt`` (text that prompts the first window),
    ``temperature`` (0: greedy with the fallback to higher temperatures),
    ``words``: word timestamps. ``timeout`` as for :class:`GenerateRequest`.
    Answered by window outputs and one terminal :class:`RequestOutput`
    (see there); aborted like a generation.
    """

    request_id: str
    audio: bytes
    task: Literal["transcribe", "translate"] = "transcribe"
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    words: bool = False
    timeout: float | None = None

    @property
    def n(self) -> int:
        """A transcription has one result (one terminal output)."""
        return 1


class ClearCache(msgspec.Struct, frozen=True, kw_only=True, tag="clear_cache"):
    """Empty the prefix cache, memory and disk tiers (the worker's
    scheduler thread does it between engine steps; requests running go on
    from their own state). Answered by one :class:`CacheCleared` with the
    same ``clear_id``."""

    clear_id: str


class CacheCleared(msgspec.Struct, frozen=True, kw_only=True, tag="cache_cleared"):
    """The answer to :class:`ClearCache` ``clear_id``: the entries and bytes
    dropped from the memory tier and from the disk tier (files deleted)."""

    worker_id: str
    clear_id: str
    entries: int = 0
    bytes: int = 0
    disk_entries: int = 0
    disk_bytes: int = 0


GatewayMessage = Union[
    GenerateRequest,
    AbortRequest,
    Shutdown,
    EmbedRequest,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
    ClearCache,
]
"""Any message the gateway sends to a worker."""

WorkerMessage = Union[Hello, Loaded, Ready, Failed, Heartbeat, StepOutputs, CacheCleared]
"""Any message a worker sends to the gateway."""


NODE_ALIVE_INTERVAL = 1.0
"""Seconds between :class:`NodeAlive` messages on a node session."""


class NodeStart(msgspec.Struct, frozen=True, kw_only=True, tag="node_start"):
    """Gateway -> node, first message of a session: start incarnation
    ``incarnation`` of the node's model ``model`` with these MLX limits
    (bytes; 0 and None: MLX's defaults). ``protocol`` is the gateway's
    :data:`PROTOCOL_VERSION`; a node with another one refuses the session."""

    model: str
    incarnation: int
    memory_limit: int = 0
    cache_limit: int | None = None
    protocol: int = PROTOCOL_VERSION


class NodeKill(msgspec.Struct, frozen=True, tag="node_kill"):
    """Gateway -> node: kill the session's worker at once (SIGKILL)."""


class NodeAlive(msgspec.Struct, frozen=True, tag="node_alive"):
    """Either direction: the sender is still there (sent every
    :data:`NODE_ALIVE_INTERVAL` seconds)."""


class NodeStarted(msgspec.Struct, frozen=True, kw_only=True, tag="node_started"):
    """Node -> gateway: the session's worker process exists (its pid on
    the node's machine)."""

    pid: int


class NodeExited(msgspec.Struct, frozen=True, kw_only=True, tag="node_exited"):
    """Node -> gateway, last message of a session: why it ended (the
    worker exited, was killed, or the session was refused)."""

    reason: str


NodeInbound = Union[
    NodeStart,
    NodeKill,
    NodeAlive,
    GenerateRequest,
    AbortRequest,
    Shutdown,
    EmbedRequest,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
    ClearCache,
]
"""Any message a gateway sends to a node."""

NodeOutbound = Union[
    NodeStarted, NodeExited, NodeAlive, Hello, Loaded, Ready, Failed, Heartbeat, StepOutputs, CacheCleared
]
"""Any message a node sends to a gateway."""
