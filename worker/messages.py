"""The worker's inter-thread contract: what its threads hand each other.

The input thread builds an :class:`Admission` (and sends :class:`Abort`
and :class:`ClearPrefixCache`) for the scheduler thread; the output thread
sends :class:`Release` back; :class:`Stop` ends the scheduler loop. The scheduler thread reports
:class:`Started`, :class:`TokenStep` and :class:`Terminal` items, in the
order they happen, to the output thread, and keeps :class:`Counters` that
the output thread reads for heartbeats. :class:`OutputSpec` travels
untouched from the input thread (which fixes it) to the output thread
(which parses text with it). :class:`OutputPace` keeps the scheduler
thread at most a step or two ahead of the output thread.

Declarative: plain data classes, and the one small handshake
(:class:`OutputPace`). Nothing here imports MLX (directly
or through another module), so the input and output threads' modules can
use these types without loading it; ``tests/unit/test_worker_messages.py``
checks that.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from shared.protocol import SamplingParams, Tool

if TYPE_CHECKING:  # the matcher's type only; llguidance loads on the input thread
    from llguidance import LLMatcher


@dataclass(frozen=True)
class VisionPrompt:
    """What the scheduler needs to prefill a prompt with images:
    ``model_ids`` (the prompt the model reads, image tokens expanded),
    ``pixel_values`` and ``image_grid_thw`` (NumPy arrays, every image of
    the request in order), and ``image_end``: the position just after the
    last image's, video's or clip's tokens and their markup (a cached
    prefix shorter than this cannot be continued without the vision
    tower); ``image_token_id``: the model's
    image token. Videos: ``pixel_values_videos`` and ``video_grid_thw``
    (None: no video; ``pixel_values`` and ``image_grid_thw`` are None when
    the request has videos only), the model's ``video_token_id``, and
    ``video_keys_from``: the cache keys at or past it stand for video
    tokens (the others past the vocabulary for ``image_token_id``).
    Audio clips (a model served for audio): ``input_features`` and
    ``input_features_mask`` (NumPy, one row per clip; None: none);
    ``image_token_id`` is then the model's audio token. ``image_inputs``:
    the processor's other image inputs by its own names (``image_sizes``,
    ``pixel_attention_mask``...; NumPy; None: none), passed to the model's
    call as they are."""

    model_ids: list[int]
    pixel_values: Any
    image_grid_thw: Any
    image_end: int
    image_token_id: int
    pixel_values_videos: Any = None
    video_grid_thw: Any = None
    video_token_id: int | None = None
    video_keys_from: int | None = None
    input_features: Any = None
    input_features_mask: Any = None
    image_inputs: dict[str, Any] | None = None


@dataclass(frozen=True)
class OutputSpec:
    """How the output thread splits a request's text: the tool-call format
    (None: no tool parsing), the reasoning format (None: no split), the
    offered tools, whether the prompt already opened a reasoning block, and
    the most tool calls kept (None: no limit; see
    :meth:`worker.prompting.builder.PromptBuilder.max_tool_calls`); ``end_on_repeat``:
    a forced (``required``) turn ends at the first call that repeats an
    earlier one."""

    tool_format: str | None
    reasoning_format: str | None
    tools: list[Tool] | None
    thinking_open: bool
    max_tool_calls: int | None
    end_on_repeat: bool = False


@dataclass(frozen=True)
class ThinkingBudget:
    """At most ``budget`` generated tokens inside a reasoning block that
    ``open_ids`` opens and ``close_ids`` closes; ``open_at_start``: the
    prompt already opened it."""

    budget: int
    open_ids: tuple[int, ...]
    close_ids: tuple[int, ...]
    open_at_start: bool


@dataclass
class Admission:
    """A tokenized request ready for the engine (built on the input thread).

    ``max_tokens`` is already resolved against the context limit;
    ``params`` has every sampling setting filled in (the model's defaults
    where the request set none, see :mod:`worker.sampling.defaults`);
    ``deadline`` is a ``time.monotonic()`` instant or None; ``matchers``
    holds one grammar matcher per choice for constrained decoding;
    ``output`` is passed through to the output thread untouched (how to
    parse the text; None: plain text); ``received`` is when the worker got
    the request (``time.monotonic()``); ``thinking_budget`` caps each
    choice's reasoning block (None: no cap). ``reasoning_close``: the prompt
    opened a reasoning block that these tokens close; the grammar
    (``matchers``) then applies only from the end of that block, so the
    model reasons first and the constrained answer follows. ``boundaries``:
    prompt positions where a chat message starts (the last message's
    start), where a model whose cache cannot be trimmed keeps a checkpoint.
    ``vision``: the request's images (None: none); ``prompt`` then holds
    the cache-key ids of :mod:`worker.vision.inputs`, which the model
    never reads.
    ``request``: the ``GenerateRequest`` it was built from, kept only in a
    tensor-parallel group (rank 0 shares it with the other ranks, see
    :mod:`worker.engine.step_plan`); None otherwise.
    ``key_name``: the API key's name the request came with
    (``GenerateRequest.key_name``), the scope of its speculative drafts.
    """

    request_id: str
    prompt: list[int]
    max_tokens: int
    params: SamplingParams
    n: int = 1
    deadline: float | None = None
    matchers: list[LLMatcher] | None = None
    output: OutputSpec | None = None
    received: float = 0.0
    thinking_budget: ThinkingBudget | None = None
    reasoning_close: tuple[int, ...] | None = None
    boundaries: tuple[int, ...] = ()
    vision: VisionPrompt | None = None
    request: Any = None
    key_name: str = ""


@dataclass
class Abort:
    """Drop these requests and report each one's terminal ``abort``."""

    request_ids: list[str]


@dataclass
class ClearPrefixCache:
    """Empty the prefix cache (memory and disk tiers) and report it as
    :class:`shared.protocol.CacheCleared` ``clear_id`` of worker
    ``worker_id``."""

    clear_id: str
    worker_id: str = ""


@dataclass
class Release:
    """Drop one choice the output thread already finished (stop string)."""

    request_id: str
    index: int


@dataclass
class Stop:
    """Abort everything in flight and leave the loop."""


@dataclass
class Started:
    """A request entered the engine: ``cached_tokens`` of its
    ``prompt_tokens`` were reused from the prefix cache
    (``disk_cached_tokens`` of them loaded from its disk tier). ``output`` is
    the admission's output settings."""

    request_id: str
    n: int
    prompt_tokens: int
    cached_tokens: int
    stop: list[str]
    output: OutputSpec | None = None
    disk_cached_tokens: int = 0


TokenLogprobs = tuple[float, list[tuple[int, float]]]
"""A sampled token's log-probability and its top alternatives (id, logprob)."""

TokenEvent = tuple[str, int, int, "str | None", "TokenLogprobs | None"]
"""``(request_id, choice index, token id, finish, logprobs)``; ``finish`` is
None, ``"stop"`` (the token is an end-of-sequence token) or ``"length"``."""


@dataclass
class TokenStep:
    """Every token one engine step produced, the requests the engine
    took up in this step with the seconds each had waited, and the
    speculative verifications of the step as ``(request_id, choice index,
    drafted, accepted)``."""

    step: int
    tokens: list[TokenEvent]
    scheduled: list[tuple[str, float]] = field(default_factory=list)
    drafts: list[tuple[str, int, int, int]] = field(default_factory=list)


@dataclass
class Terminal:
    """A whole request ended without a token: ``reason`` is ``abort`` or
    ``error`` (then ``error_kind`` and ``message`` say why)."""

    request_id: str
    reason: str
    error_kind: str | None = None
    message: str | None = None


class OutputPace:
    """How far the scheduler thread may run ahead of the output thread.

    The output thread is the one that matches stop strings and ends a
    choice whose parser is done (it then sends a :class:`Release`); every
    engine step the scheduler runs before that release arrives computes a
    token nobody reads. On a busy machine the output thread can fall many
    steps behind, so the scheduler, before each step, calls :meth:`wait`:
    it returns once no more than ``ahead`` of the :class:`TokenStep` items
    it emitted are still unhandled, or as soon as a command for the
    scheduler is queued (``pending``; :meth:`wake` is called with each
    one). The output thread calls :meth:`handled` after acting on each
    :class:`TokenStep` (its releases are queued before that call), and the
    scheduler :meth:`emitted` when it queues one.

    So a choice ended by a stop string costs at most ``ahead`` tokens past
    the stop (one per step without speculation), however late the output
    thread runs. Every method is cheap and never blocks but :meth:`wait`.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._emitted = 0
        self._handled = 0

    def emitted(self) -> None:
        """Scheduler thread: one more :class:`TokenStep` was queued."""
        self._emitted += 1

    def handled(self) -> None:
        """Output thread: one more :class:`TokenStep` was acted on."""
        with self._changed:
            self._handled += 1
            self._changed.notify_all()

    def wake(self) -> None:
        """Any thread, after queueing a command for the scheduler: end a
        :meth:`wait` in progress so the scheduler applies it."""
        with self._changed:
            self._changed.notify_all()

    def wait(self, ahead: int, pending: Callable[[], bool]) -> None:
        """Scheduler thread: return once at most ``ahead`` emitted steps
        are unhandled, or ``pending()`` is true (a command is queued; the
        worker's Stop is one, so this never outlasts the loop)."""
        with self._changed:
            while self._emitted - self._handled > ahead and not pending():
                self._changed.wait(timeout=1.0)  # the notify is the wake-up; the timeout only a safety net


@dataclass
class Counters:
    """Live counters reported with each heartbeat, written only by the
    scheduler thread and read by the output thread (plain numbers, each
    update atomic under the GIL; the ``*_memory`` ones are MLX's byte
    counts, sampled on every scheduler loop turn).

    The ``kv_*`` ones are the KV-memory budget's (:mod:`worker.engine`; all
    0 in a worker without one):

    - ``kv_bytes``: bytes the KV caches of the running sequences are
      bounded by now (the budget's accounting);
    - ``kv_budget_bytes``: the model's KV budget in bytes (0: no budget);
    - ``kv_waiting``: requests (choices) waiting for KV memory now;
    - ``kv_preemptions``: running sequences preempted (total) because the
      running sequences outgrew the budget;
    - ``kv_waited``: requests that had to wait for memory before starting
      (total);
    - ``kv_tokens``: tokens the KV caches of the running sequences hold
      now, all sequences together (the budget's accounting).
    """

    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    requests_timed_out: int = 0
    running: int = 0
    waiting: int = 0
    max_batch_seen: int = 0
    step_seconds: float = 0.0
    active_memory: int = 0
    cache_memory: int = 0
    peak_memory: int = 0
    vision_prefills: int = 0
    vision_image_tokens: int = 0
    rerank_pairs: int = 0
    audio_seconds_in: float = 0.0
    warm_prompts: int = 0
    warm_tokens: int = 0
    kv_bytes: int = 0
    kv_budget_bytes: int = 0
    kv_waiting: int = 0
    kv_preemptions: int = 0
    kv_waited: int = 0
    kv_tokens: int = 0


@dataclass
class Deferred:
    """Work the scheduler thread hands the output thread to turn into a
    contract message there (kept off the scheduler thread, never MLX): the
    output thread sends ``build()``'s message; when ``build`` raises it
    sends ``failed(message)`` instead (the request's terminal error) and
    aborts ``request_id`` in the scheduler. Used by the speech worker to
    encode audio (:mod:`worker.speech.encode`)."""

    request_id: str
    build: Any
    failed: Any
