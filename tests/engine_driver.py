"""The worker's scheduler driven turn by turn, in this process, for tests that
must choose exactly when each request arrives or is cancelled.

:class:`EngineDriver` loads a model the way a worker does (the language
model through :mod:`worker.loading.loader`, a vision model through
:mod:`worker.vision.model`), builds the prompt builder, the prefix cache
(with a disk tier when asked), prompt checkpoints for models whose cache
cannot be trimmed, speculation and the one-at-a-time engine for models
whose cache cannot be batched, as the worker's composition does, and runs
the real :class:`~worker.engine.scheduler.Scheduler` one loop turn at a time on
the calling thread (which is then the scheduler thread: it must also be
the thread that built the driver). Commands go through the scheduler's
own inbox; everything it emits is collected into one :class:`Outcome` per
request.

Nothing here waits on time: a turn is a function call, and the drafting
controller of speculation reads the driver's turn count as its clock (one
second a turn) instead of the wall clock, whose step timings would change
its grid widths, and so the turns a request takes, from run to run; so a
schedule of arrivals and cancellations by turn number replays exactly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from shared.protocol import ChatMessage, GenerateRequest, ImagePart, SamplingParams


@dataclass
class Outcome:
    """What the scheduler emitted for one request.

    ``tokens[i]``: choice ``i``'s tokens in order; ``finishes[i]``: the
    finish reasons its token events carried (exactly one, last, for a
    choice that ended normally); ``terminals``: the terminal items
    (``abort``, ``error``) in order; ``cached``: prompt tokens reused from
    the prefix cache, as its ``Started`` reported (None before it
    started); ``after_end``: token events that arrived after the request
    had ended (must stay 0).
    """

    n: int
    tokens: dict[int, list[int]] = field(default_factory=dict)
    finishes: dict[int, list[str]] = field(default_factory=dict)
    terminals: list[str] = field(default_factory=list)
    cached: int | None = None
    after_end: int = 0

    @property
    def ended(self) -> bool:
        """Every choice finished, or a terminal item ended the request."""
        return bool(self.terminals) or (
            len(self.finishes) == self.n and all(len(f) >= 1 for f in self.finishes.values())
        )


@dataclass(frozen=True)
class Ask:
    """One request of a schedule: a token prompt (``prompt``) or chat
    messages (``messages``, with ``images`` as (bytes, position) pairs
    placed in the last message), and its sampling settings (a
    ``frequency_penalty`` keeps a tiny random model's long greedy answers
    from settling on one repeated token, where a lost or repeated token
    would not show)."""

    request_id: str
    max_tokens: int
    prompt: tuple[int, ...] = ()
    messages: tuple[tuple[str, str], ...] = ()
    images: tuple[tuple[bytes, int], ...] = ()
    n: int = 1
    temperature: float = 0.0
    seed: int | None = None
    speculative: bool = True
    ignore_eos: bool = True
    frequency_penalty: float = 0.0

    def request(self) -> GenerateRequest:
        """The wire request the worker's input thread would receive."""
        sampling = SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
            ignore_eos=self.ignore_eos,
            speculative=self.speculative,
            frequency_penalty=self.frequency_penalty,
        )
        if self.prompt:
            return GenerateRequest(
                request_id=self.request_id, sampling=sampling, prompt_token_ids=list(self.prompt), n=self.n
            )
        messages = []
        for i, (role, text) in enumerate(self.messages):
            last = i == len(self.messages) - 1
            parts = None
            if last and self.images:
                parts = [
                    ImagePart(data=data, sha256=hashlib.sha256(data).hexdigest(), offset=at) for data, at in self.images
                ]
            messages.append(ChatMessage(role=role, content=text, images=parts))
        return GenerateRequest(request_id=self.request_id, sampling=sampling, messages=messages, n=self.n)

    def key(self) -> tuple:
        """What makes two asks the same request (everything but the id)."""
        return (
            self.max_tokens,
            self.prompt,
            self.messages,
            self.images,
            self.n,
            self.temperature,
            self.seed,
            self.ignore_eos,
            self.frequency_penalty,
        )


class EngineDriver:
    """A model's scheduler, composed as a worker composes it, driven turn by
    turn on the calling thread.

    ``config`` is the model's ``[[models]]`` entry (its ``source`` the
    model directory): its prefix cache (``prefix_cache_bytes`` 0 turns it
    off, and with it prompt checkpoints: the cache-less twin), disk tier
    (``disk_cache_bytes``, ``disk_cache_dir``), speculation, KV budget
    (``kv_budget``), quantized live KV (``kv_bits``; :attr:`kv_bits` says
    whether it applies) and batch sizes are built by the worker's own composition functions
    (:mod:`worker.model_setup`). ``vision``: load it as a
    vision-language model. ``host_sampling``: sample and normalize on the
    host with NumPy (the CPU backend's default) or with MLX (False: the
    path a Metal GPU takes).
    """

    def __init__(self, config: Any, *, vision: bool = False, host_sampling: bool = True) -> None:
        from worker.caches.profile import profile_model
        from worker.engine.scheduler import Scheduler
        from worker.model_setup import kv_budget_for, live_kv_bits, prefix_cache_for, speculation_for, weight_bytes
        from worker.prompting.builder import PromptBuilder
        from worker.prompting.model_formats import model_formats
        from worker.sampling.constrained_decoding import GrammarCompiler

        images = None
        if vision:
            from worker.vision.inputs import ImagePreparer
            from worker.vision.model import load_vision_model

            loaded, processor = load_vision_model(config.source)
            text_vocab = (loaded.config.get("text_config") or {}).get("vocab_size", 0)
            images = ImagePreparer(
                processor, max(len(loaded.tokenizer), int(text_vocab or 0)), template=loaded.tokenizer
            )
        else:
            from worker.loading.loader import load_model

            loaded = load_model(config.source, dtype=config.dtype)
        self.config = config
        self.loaded = loaded
        self.profile = profile_model(loaded.model)
        vocab = len(loaded.tokenizer)
        self.prompts = PromptBuilder(
            loaded.tokenizer,
            context_length=4096,
            default_max_tokens=16,
            message_boundaries=not self.profile.trimmable and config.prefix_cache_bytes > 0,
            vocab_size=vocab,
            formats=model_formats(loaded.tokenizer, "auto", "auto"),
            grammars=GrammarCompiler(getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer), 0, vocab),
            images=images,
        )
        self.kv_bits = live_kv_bits(config, loaded.model, vision=vision)
        cache = prefix_cache_for(config, loaded, self.profile.trimmable, live_quantized=self.kv_bits > 0)
        spec = None if vision else speculation_for(config, self.profile, vocab)
        if spec is not None and spec.controller is not None:
            spec.controller.clock = self._clock  # measured step times, but the same on every run
        self.speculating = spec is not None
        self.outcomes: dict[str, Outcome] = {}
        self.turns = 0
        self.scheduler = Scheduler(
            loaded.model,
            set(loaded.eos_token_ids),
            self._collect,
            cache=cache,
            max_batch_size=config.max_batch_size,
            prefill_batch_size=config.prefill_batch_size,
            prefill_step_size=config.prefill_step_size,
            host_sampling=host_sampling,
            checkpoints=not self.profile.trimmable,
            speculation=spec,
            solo=self.profile.solo,
            kv_budget=kv_budget_for(config, weight_bytes(loaded.model)[0]),
            kv_bits=self.kv_bits,
            kv_group_size=config.kv_group_size,
        )
        self.scheduler.start()

    # -- commands -----------------------------------------------------------

    def submit(self, ask: Ask) -> None:
        """Queue ``ask`` (built by the worker's prompt builder) for the next
        turn."""
        self.outcomes[ask.request_id] = Outcome(n=ask.n)
        self.scheduler.submit(self.prompts.build(ask.request()))

    def abort(self, request_id: str) -> None:
        """Queue a cancellation of ``request_id`` for the next turn."""
        from worker.messages import Abort

        self.scheduler.submit(Abort([request_id]))

    def turn(self) -> None:
        """One scheduler loop turn: apply the queued commands, then step."""
        assert self.scheduler.apply_pending()
        self.scheduler.turn()
        self.turns += 1

    def _clock(self) -> float:
        """The drafting controller's clock: the turns run, as seconds."""
        return float(self.turns)

    @property
    def busy(self) -> bool:
        """Sequences are still in flight or waiting for KV memory."""
        return bool(self.scheduler._seqs or self.scheduler._memory_queue)

    def run_until_idle(self, limit: int = 100_000) -> None:
        """Turn until nothing is in flight (at most ``limit`` turns)."""
        self.turn()
        for _ in range(limit):
            if not self.busy:
                return
            self.turn()
        raise AssertionError(f"still busy after {limit} turns")

    def close(self) -> None:
        """End the loop as a worker's stop does (the disk tier gets the last
        entries and its writer finishes)."""
        self.scheduler.close()
        cache = self.scheduler.cache
        if cache is not None and cache.disk is not None:
            cache.disk.close()

    # -- what came out ----------------------------------------------------------

    def _collect(self, item: object) -> None:
        from worker.messages import Started, Terminal, TokenStep

        if isinstance(item, Started):
            self.outcomes[item.request_id].cached = item.cached_tokens
        elif isinstance(item, Terminal):
            outcome = self.outcomes[item.request_id]
            outcome.terminals.append(item.reason)
        elif isinstance(item, TokenStep):
            for request_id, index, token, finish, _ in item.tokens:
                outcome = self.outcomes[request_id]
                if outcome.terminals or len(outcome.finishes.get(index, ())) > 0:
                    outcome.after_end += 1
                    continue
                outcome.tokens.setdefault(index, []).append(token)
                if finish is not None:
                    outcome.finishes.setdefault(index, []).append(finish)

    @property
    def refused(self) -> int:
        """States the prefix cache refused to store (must stay 0)."""
        cache = self.scheduler.cache
        return cache.refused if cache is not None else 0


def solo_reference(config: Any, asks: list[Ask], *, vision: bool = False) -> dict[tuple, dict[int, list[int]]]:
    """Each distinct ask (by :meth:`Ask.key`) run alone, from scratch, on a
    cache-less twin of ``config``'s model (no prefix cache, no disk tier,
    no speculation, no KV budget): its choices' tokens."""
    import msgspec

    plain = msgspec.structs.replace(config, prefix_cache_bytes=0, disk_cache_bytes=0, speculative="none", kv_budget=0)
    twin = EngineDriver(plain, vision=vision)
    out: dict[tuple, dict[int, list[int]]] = {}
    try:
        for i, ask in enumerate(asks):
            if ask.key() in out:
                continue
            probe = Ask(**{**ask.__dict__, "request_id": f"twin-{i}"})
            twin.submit(probe)
            twin.run_until_idle()
            outcome = twin.outcomes[probe.request_id]
            assert outcome.ended and not outcome.terminals, outcome
            out[ask.key()] = outcome.tokens
    finally:
        twin.close()
    return out


def png(color: tuple[int, int, int], size: int = 64) -> bytes:
    """A one-color square PNG made by Pillow (for vision requests)."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), color).save(buffer, format="PNG")
    return buffer.getvalue()


def settings_for(driver: EngineDriver) -> dict[str, Any]:
    """A summary of how ``driver``'s model is served, for failure messages."""
    return {
        "cache": driver.profile.describe(),
        "speculating": driver.speculating,
        "solo": driver.profile.solo,
    }
