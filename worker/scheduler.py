"""The scheduler thread: the only thread of the worker that touches MLX.

It loads the model, warms it up, then runs continuous batching on mlx-lm's
``BatchGenerator``: each loop iteration takes every queued command (admit,
abort, release, shutdown) from its inbox, then runs one engine step in which
new prompts are prefilled while running sequences decode. The tokens of a
step go to the output thread as one :class:`TokenStep`; text, stop strings
and the wire messages are the output thread's job.

Threads: ``run`` executes on the scheduler thread. ``submit`` may be called
from any thread (the inbox is a thread-safe queue). ``stats`` is written only
here and read by the output thread (plain ints, each update atomic).
"""

from __future__ import annotations

import logging
import queue
from dataclasses import dataclass
from typing import Any, Callable

from shared.protocol import SamplingParams

log = logging.getLogger("mlxd.worker.scheduler")


@dataclass
class Admission:
    """A tokenized request ready for the engine (built on the input thread).

    ``max_tokens`` is already resolved against the context limit.
    """

    request_id: str
    prompt: list[int]
    max_tokens: int
    params: SamplingParams


@dataclass
class Abort:
    """Drop these requests and report each one's terminal ``abort``."""

    request_ids: list[str]


@dataclass
class Release:
    """Drop a request the output thread already finished (stop string)."""

    request_id: str


@dataclass
class Stop:
    """Abort everything in flight and leave the loop."""


@dataclass
class TokenStep:
    """The tokens one engine step produced: ``(request_id, token, finish)``
    triples, ``finish`` being None, ``"stop"`` (an EOS token) or
    ``"length"``."""

    step: int
    tokens: list[tuple[str, int, str | None]]


@dataclass
class Terminal:
    """A request ended without a token: ``reason`` is ``abort`` or ``error``."""

    request_id: str
    reason: str
    error_kind: str | None = None
    message: str | None = None


@dataclass
class Counters:
    """Live counters reported with each heartbeat."""

    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    running: int = 0
    waiting: int = 0
    max_batch_seen: int = 0


class Scheduler:
    """Owns the model's ``BatchGenerator`` and runs it on its own thread.

    ``emit`` receives :class:`TokenStep` and :class:`Terminal` items in the
    order they happen (it must be thread-safe and non-blocking, e.g. a
    queue's ``put``). ``model`` and ``tokenizer`` must have been loaded on
    the thread that calls :meth:`run`.
    """

    def __init__(
        self,
        model: Any,
        eos_token_ids: set[int],
        emit: Callable[[object], None],
        *,
        max_batch_size: int,
        prefill_batch_size: int,
        prefill_step_size: int,
    ) -> None:
        self._model = model
        self._eos = sorted(eos_token_ids)
        self._emit = emit
        self._batch_kwargs = dict(
            completion_batch_size=max_batch_size,
            prefill_batch_size=prefill_batch_size,
            prefill_step_size=prefill_step_size,
        )
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.counters = Counters()
        self._by_uid: dict[int, str] = {}
        self._by_request: dict[str, int] = {}
        self._engine: Any = None
        self._step = 0

    def submit(self, item: object) -> None:
        """Queue a command for the scheduler thread; any thread may call."""
        self.inbox.put(item)

    def warm_up(self, prompt: list[int]) -> None:
        """Run ``prompt`` through the engine for two tokens (scheduler thread).

        Compiles kernels and allocates buffers before the worker says Ready.
        """
        engine = self._new_engine()
        (uid,) = engine.insert([prompt], max_tokens=[2])
        done = False
        while not done:
            _, responses = engine.next()
            done = any(r.uid == uid and r.finish_reason for r in responses)
        engine.remove([uid])

    def run(self) -> None:
        """The scheduler loop; returns after a :class:`Stop` command."""
        self._engine = self._new_engine()
        while True:
            if not self._drain_inbox(block=not self._by_uid):
                return
            if self._by_uid:
                self._run_step()

    def _new_engine(self) -> Any:
        from mlx_lm.generate import BatchGenerator

        from worker.sampling import greedy

        return BatchGenerator(
            self._model,
            max_tokens=1,
            stop_tokens=[[t] for t in self._eos],
            sampler=greedy,
            **self._batch_kwargs,
        )

    def _drain_inbox(self, block: bool) -> bool:
        """Apply queued commands; False when a Stop was seen."""
        try:
            item = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
        except queue.Empty:
            return True
        while True:
            if isinstance(item, Stop):
                self._abort(list(self._by_request))
                return False
            self._apply(item)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, item: object) -> None:
        if isinstance(item, Admission):
            self._admit(item)
        elif isinstance(item, Abort):
            self._abort(item.request_ids)
        elif isinstance(item, Release):
            self._drop(item.request_id)
        self._update_gauges()

    def _admit(self, adm: Admission) -> None:
        from worker.sampling import make_processors, make_sampler

        try:
            sampler = make_sampler(adm.params)
            processors = make_processors(adm.params, len(adm.prompt))
            (uid,) = self._engine.insert(
                [adm.prompt],
                max_tokens=[adm.max_tokens],
                samplers=[sampler],
                logits_processors=[processors],
            )
        except Exception as exc:  # a bad request must not take the worker down
            log.exception("could not admit %s", adm.request_id)
            self._emit(Terminal(adm.request_id, "error", "internal", f"admission failed: {exc}"))
            return
        self._by_uid[uid] = adm.request_id
        self._by_request[adm.request_id] = uid
        self.counters.prompt_tokens += len(adm.prompt)

    def _drop(self, request_id: str) -> bool:
        uid = self._by_request.pop(request_id, None)
        if uid is None:
            return False
        del self._by_uid[uid]
        self._engine.remove([uid])
        return True

    def _abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            if self._drop(request_id):
                self.counters.requests_aborted += 1
                self._emit(Terminal(request_id, "abort"))

    def _run_step(self) -> None:
        try:
            _, responses = self._engine.next()
        except Exception as exc:
            log.exception("engine step failed; failing %d requests", len(self._by_uid))
            self._fail_all(f"engine step failed: {exc}")
            return
        self._step += 1
        c = self.counters
        c.steps = self._step
        tokens: list[tuple[str, int, str | None]] = []
        for r in responses:
            request_id = self._by_uid.get(r.uid)
            if request_id is None:
                continue
            tokens.append((request_id, r.token, r.finish_reason))
            if r.finish_reason is not None:
                del self._by_uid[r.uid]
                del self._by_request[request_id]
                c.requests_finished += 1
        c.generated_tokens += len(tokens)
        c.max_batch_seen = max(c.max_batch_seen, len(tokens))
        self._update_gauges()
        if tokens:
            self._emit(TokenStep(self._step, tokens))

    def _update_gauges(self) -> None:
        engine = self._engine
        running = len(engine._generation_batch) if engine is not None else 0
        self.counters.running = running
        self.counters.waiting = max(0, len(self._by_uid) - running)

    def _fail_all(self, message: str) -> None:
        for request_id in list(self._by_request):
            self._emit(Terminal(request_id, "error", "internal", message))
        self._by_uid.clear()
        self._by_request.clear()
        self._engine = self._new_engine()

