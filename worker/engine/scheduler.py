"""The scheduler thread: the only thread of the worker that touches MLX.

It runs continuous batching on mlx-lm's ``BatchGenerator``: each loop
iteration applies every queued command (admit, abort, release, clear the
prefix cache, stop), ends requests past their deadline, then runs one engine
step in which new prompts are prefilled while running sequences decode. The
tokens of a step (with log-probabilities where asked) go to the output thread
as one :class:`TokenStep`; text, stop strings and wire messages are that
thread's job. Admission (a prompt's reuse of the prefix cache, its prefill,
each choice's sampler and logits processors) is the scheduler's base class,
in :mod:`worker.engine.admission`.

Finished (or aborted) sequences leave their state in the :class:`PrefixCache`.
For a model whose cache cannot be trimmed (state-space layers, sliding
windows; see :mod:`worker.caches.profile`) a finished sequence's state only
helps a prompt that continues exactly where it ended, so the scheduler also
keeps prompt-end checkpoints (see :mod:`worker.engine.checkpoints`).

Every mlx-lm internal stays in :mod:`worker.engine.batch_engine`; the
scheduler uses the engine's public methods only.

Threads: :meth:`Scheduler.run` and :meth:`Scheduler.warm_up` execute on the
scheduler thread; :meth:`Scheduler.submit` may be called from any thread
(the inbox is a thread-safe queue). ``counters`` is written only here and
read by the output thread (plain numbers, each update atomic under the GIL).
MLX's memory counters are sampled into ``counters`` on every loop turn, and
once the engine has been idle for :data:`IDLE_CLEAR_SECONDS` MLX's buffer
cache is cleared (here, never from another thread).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Callable

from worker.caches.prefix import PrefixCache
from worker.engine import mlx_memory
from worker.engine.admission import PREFILL_UID, Admitter, Resumption, Seq
from worker.engine.checkpoints import PromptCheckpoints
from worker.engine.kv_budget import KVLedger
from worker.engine.step_plan import Expire, PlanLink
from worker.messages import (
    Abort,
    Admission,
    ClearPrefixCache,
    Counters,
    OutputPace,
    Release,
    Stop,
    Terminal,
    TokenEvent,
    TokenLogprobs,
    TokenStep,
)
from worker.speculation.drafting import Speculation

if TYPE_CHECKING:  # loads MLX; imported on the scheduler thread
    from worker.engine.batch_engine import BatchEngine

log = logging.getLogger("mlxd.worker.scheduler")

BURST_GAP = 0.004
"""Seconds without a new command that end a burst (see ``_gather_burst``)."""

BURST_WINDOW = 0.02
"""The longest an idle engine waits for the rest of a burst, in seconds."""

PREPARING_WINDOW = 0.25
"""The longest an idle engine waits for the rest of a burst while the
worker's input thread is still preparing requests (see
:attr:`Scheduler.preparing`), in seconds: rendering and tokenizing a long
prompt takes longer than :data:`BURST_GAP`, but far less than prefilling it."""

SPILL_EVERY = 64
"""Engine steps between two disk-tier spills while the engine is busy."""

IDLE_CLEAR_SECONDS = 2.0
"""Seconds the engine must stay idle before MLX's buffer cache is cleared:
long enough that back-to-back requests (an agent's next turn) reuse the
cached buffers, short enough that an idle model gives its cache back."""

OUTPUT_AHEAD = 2
"""Steps the scheduler may run ahead of the output thread (see
:class:`~worker.messages.OutputPace`): enough to overlap the two threads'
work, few enough that a stop string ends its choice within two tokens."""


class Scheduler(Admitter):
    """Owns the model's ``BatchGenerator`` and runs it on its own thread.

    ``emit`` receives :class:`Started`, :class:`TokenStep` and
    :class:`Terminal` items in the order they happen (it must be
    thread-safe and non-blocking, e.g. a queue's ``put``). ``model`` must
    have been loaded on the thread that calls :meth:`run`. ``cache`` is the
    prefix cache (None disables reuse). ``preparing`` is an event the
    worker's input thread sets while it has requests it is still turning
    into admissions; an idle engine waits longer for the rest of a burst
    while it is set (see :meth:`_gather_burst`). At most ``max_batch_size``
    sequences decode together (``prefill_batch_size`` is capped by it).
    ``host_sampling`` picks where
    sampling and log-probabilities are computed (see :mod:`worker.engine.batch_engine`;
    None: NumPy on the CPU backend, MLX on a GPU). ``checkpoints``: keep
    prompt-end and message-boundary snapshots (for caches that cannot be
    trimmed; see the module docstring). ``speculation``: a
    :class:`~worker.speculation.drafting.Speculation` turns on speculative
    drafting (None: off; only for models whose cache can be trimmed).
    ``solo``: the model's cache cannot be batched; sequences run one at a
    time (the engine's batch sizes are then 1; see :mod:`worker.engine.solo_cache`).
    ``lockstep``: this scheduler is one rank of a tensor-parallel group
    (:mod:`worker.tensor_parallel.lockstep`); rank 0 runs :meth:`run` and shares
    each loop turn, the other ranks run :meth:`follow`. ``pace``: the
    :class:`~worker.messages.OutputPace` shared with the output thread
    (None: the loop never waits for it). ``kv_budget``: bytes the
    running sequences' KV caches and the prefix cache may hold together
    (0: no budget; see :mod:`worker.engine.kv_budget`): requests wait
    until they fit, the newest rows are preempted when the rows outgrow
    it, a prompt that cannot fit alone is refused (not for a
    tensor-parallel rank, whose steps other ranks mirror). ``kv_bits``
    (4 or 8; 0: full precision) and ``kv_group_size``: the running
    sequences' plain KV layers are kept quantized (see
    :class:`~worker.engine.batch_engine.BatchEngine`; the caller has checked
    that the model can take it).
    """

    def __init__(
        self,
        model: Any,
        eos_token_ids: set[int],
        emit: Callable[[object], None],
        *,
        cache: PrefixCache | None,
        max_batch_size: int,
        prefill_batch_size: int,
        prefill_step_size: int,
        host_sampling: bool | None = None,
        checkpoints: bool = False,
        speculation: Speculation | None = None,
        solo: bool = False,
        lockstep: PlanLink | None = None,
        pace: OutputPace | None = None,
        kv_budget: int = 0,
        kv_bits: int = 0,
        kv_group_size: int = 64,
    ) -> None:
        self._model = model
        self._eos = sorted(eos_token_ids)
        self._emit = emit
        self.cache = cache
        self._host_sampling = host_sampling
        self.speculation = speculation
        self._lockstep = lockstep
        self._pace = pace
        # mlx-lm decodes max(completion, prefill) batch sizes together: keep
        # the prefill batch within max_batch_size so that one is the limit
        self._prefill_batch = min(prefill_batch_size, max_batch_size)
        self._checkpoints = PromptCheckpoints(checkpoints and cache is not None)
        self._batch_kwargs = dict(
            solo=solo,
            completion_batch_size=max_batch_size,
            prefill_batch_size=self._prefill_batch,
            prefill_step_size=prefill_step_size,
            kv_bits=kv_bits,
            kv_group_size=kv_group_size,
        )
        self.inbox: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.preparing = threading.Event()
        self.counters = Counters()
        self._seqs: dict[int, Seq] = {}
        self._uids: dict[str, list[int]] = {}
        self._deadlines: dict[str, float] = {}
        self._waiting_since: dict[str, float] = {}
        self._engine: BatchEngine | None = None
        self._step = 0
        self._idle_since: float | None = None
        self._cache_cleared = False
        self._spilled_at = 0
        self._kv_budget = kv_budget if lockstep is None else 0
        self._ledger: KVLedger | None = None
        self._memory_queue: deque[Admission | Resumption] = deque()
        self._prefill_step = prefill_step_size

    def submit(self, item: object) -> None:
        """Queue a command for the scheduler thread; any thread may call."""
        self.inbox.put(item)
        if self._pace is not None:
            self._pace.wake()

    def warm_up(self, prompt: list[int]) -> None:
        """Run ``prompt`` through a throwaway engine for two tokens.

        Allocates buffers and builds kernels before the worker says Ready.
        The engine is closed before returning (a ``BatchGenerator`` restores
        the wired-memory limit when closed, and must not do so later, from
        the garbage collector, under the engine :meth:`run` starts).
        """
        engine = self._new_engine()
        try:
            (uid,) = engine.insert([prompt], max_tokens=[2])
            done = False
            while not done:
                _, responses = engine.next()
                done = any(r.uid == uid and r.finish_reason for r in responses)
        finally:
            engine.close()
        self._update_gauges()  # heartbeats from now on report the loaded weights

    def warm_prefix(self, prompts: list[list[int]]) -> int:
        """Prefill each of ``prompts`` (all but its last token, as a
        request's prefill leaves it) through a throwaway engine into the
        prefix cache, before :meth:`run`; return the tokens prefilled (0
        without a prefix cache). Counted in ``counters.warm_prompts`` and
        ``warm_tokens``."""
        if self.cache is None:
            return 0
        engine = self._new_engine()
        engine.set_delta(PREFILL_UID, 0)
        try:
            for prompt in prompts:
                if len(prompt) < 2:
                    continue
                state = engine.prefill(None, prompt[:-1], uid=PREFILL_UID)
                self.cache.insert(prompt[:-1], state)
                self.counters.warm_prompts += 1
                self.counters.warm_tokens += len(prompt) - 1
        finally:
            engine.drop_delta(PREFILL_UID)
            engine.close()
        return self.counters.warm_tokens

    def run(self) -> None:
        """The scheduler loop; returns after a :class:`Stop` command.

        Any exception that escapes a step or the loop itself (a failed
        engine step, a bug) propagates to the caller: the engine and its
        arrays cannot be trusted any more, so the worker fails every
        request in flight and exits (see ``worker.main``). One bad command
        or one request that cannot be admitted does not stop the loop.

        When the engine was idle and a request arrives, the loop first
        gathers the rest of its burst (see :meth:`_gather_burst`) and then
        prefills every waiting prompt in one batch; while sequences are
        decoding, new prompts join in chunks of ``prefill_batch_size`` so
        running streams are not stalled by a long prefill. Before each
        turn with sequences in flight, the loop waits (given a ``pace``) until
        the output thread is at most :data:`OUTPUT_AHEAD` steps behind.
        """
        self.start()
        try:
            while True:
                idle = not self._seqs and not self._memory_queue
                if idle and self.speculation is not None:
                    self.speculation.pause()  # a step's interval must not span the idle time
                if not idle and self._pace is not None:
                    self._pace.wait(OUTPUT_AHEAD, lambda: not self.inbox.empty())
                if not self._drain_inbox(block=idle):
                    return
                if idle and self._seqs and not self._gather_burst():
                    return
                self.turn()
        finally:
            self.close()

    def start(self) -> None:
        """Build the engine (:meth:`run` does; a test that drives the loop
        turn by turn with :meth:`apply_pending` and :meth:`turn` calls it
        first, on the thread that then drives), and read the memory gauges
        once, so the heartbeats of an idle worker report its weights from
        the start (they are read again after every loop turn)."""
        self._engine = self._new_engine()
        if self._kv_budget > 0 and self._ledger is None:
            self._ledger = self._measure_kv()
        self._update_gauges()

    def _measure_kv(self) -> KVLedger:
        """The ledger of the KV budget, with the model's KV profile read from
        the cache of a one-token prompt (see :class:`KVProfile`)."""
        from worker.engine.kv_budget import KVProfile

        cache = self._engine.prefill(None, [0])  # type: ignore[union-attr]
        profile = KVProfile.of_cache(cache, self._prefill_step)
        del cache
        log.info("KV budget %d bytes; KV profile: %s", self._kv_budget, profile.describe())
        self.counters.kv_budget_bytes = self._kv_budget
        return KVLedger(profile, self._kv_budget)

    def apply_pending(self) -> bool:
        """Apply every queued command without waiting; False when a
        :class:`Stop` was among them (everything in flight is then
        aborted)."""
        return self._drain_inbox(block=False)

    def turn(self) -> None:
        """The rest of one loop turn, after the queued commands were
        applied: end requests past their deadline, run one engine step when
        sequences are in flight, then release idle memory, spill to the
        disk tier and update the gauges."""
        from worker.faults import reached

        if self._deadlines:
            self._expire(time.monotonic())
        self._fit_memory()
        stepped = bool(self._seqs)
        if self._lockstep is not None:
            self._lockstep.publish(stepped)
        if stepped:
            reached("scheduler")
            self._run_step()
        self._release_idle_memory(time.monotonic(), busy=stepped or bool(self._seqs))
        self._spill(busy=bool(self._seqs))
        self._update_gauges()

    def close(self) -> None:
        """Close the engine and hand the prefix cache's last entries to the
        disk tier (the end of :meth:`run`)."""
        self._engine.close()
        if self.cache is not None:
            try:
                self.cache.spill()  # what the disk tier has not got yet
            except Exception:  # must not mask why the loop ended
                log.exception("could not hand the last prefix-cache entries to the disk tier")

    def follow(self) -> None:
        """The loop of a tensor-parallel rank other than 0: apply each plan
        rank 0 shares (:meth:`~worker.engine.step_plan.PlanLink.receive`) and step when it steps;
        returns after the plan's stop. Anything that goes wrong here (a
        broken group, a plan this rank cannot apply) propagates: a rank out
        of step must take the group down rather than compute garbage."""
        assert self._lockstep is not None
        self._engine = self._new_engine()
        try:
            while True:
                plan = self._lockstep.receive()
                for item in plan.items:
                    command = self._lockstep.command(item)
                    if isinstance(command, Stop):
                        self._abort(list(self._uids))
                        return
                    if isinstance(command, Expire):
                        self._end_expired(command.request_ids)
                    else:
                        self._apply(command)
                if plan.step:
                    self._run_step()
                self._release_idle_memory(time.monotonic(), busy=plan.step or bool(self._seqs))
        finally:
            self._engine.close()

    def _spill(self, busy: bool) -> None:
        """Hand new prefix-cache entries to the disk tier: one per loop turn
        while the engine is idle (a request that arrives meanwhile waits for
        one entry's copy at most), one every :data:`SPILL_EVERY` steps while
        it is busy (each is a copy of the entry's state on this thread; the
        file write happens on the tier's writer thread)."""
        cache = self.cache
        if cache is None or cache.disk is None:
            return
        if not busy:
            cache.spill(limit=1)
        elif self._step - self._spilled_at >= SPILL_EVERY:
            self._spilled_at = self._step
            cache.spill(limit=1)

    # -- engine -------------------------------------------------------------

    def _new_engine(self) -> BatchEngine:
        from worker.engine.batch_engine import BatchEngine
        from worker.sampling.samplers import greedy

        return BatchEngine(
            self._model,
            host_sampling=self._host_sampling,
            speculation=self.speculation,
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
        return self._apply_queued(item)

    def _gather_burst(self) -> bool:
        """Keep applying commands until none arrived for ``BURST_GAP``
        seconds, or ``BURST_WINDOW`` seconds passed (``PREPARING_WINDOW``
        while :attr:`preparing` is set); False when a Stop was seen.
        Requests of a burst reach the worker a few milliseconds apart (HTTP
        parsing, then rendering and tokenizing, one request at a time):
        waiting for them lets the first step prefill them together instead
        of one by one behind decode steps of the growing batch."""
        start = time.monotonic()
        while True:
            window = PREPARING_WINDOW if self.preparing.is_set() else BURST_WINDOW
            wait = min(BURST_GAP, start + window - time.monotonic())
            if wait <= 0:
                return True
            try:
                item = self.inbox.get(timeout=wait)
            except queue.Empty:
                if self.preparing.is_set():
                    continue
                return True
            if not self._apply_queued(item):
                return False

    def _apply_queued(self, item: object) -> bool:
        """Apply ``item`` and every command queued behind it; False when a
        Stop was seen (everything in flight is then aborted)."""
        while True:
            if self._lockstep is not None:
                item = self._lockstep.record(item)
            if isinstance(item, Stop):
                self._abort([*self._uids, *self._unstarted_ids()])
                if self._lockstep is not None:
                    self._lockstep.publish(False)
                return False
            try:
                self._apply(item)
            except Exception:  # one bad command must not stop the loop
                log.exception("scheduler command %s failed", type(item).__name__)
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
            self._release(item)
        elif isinstance(item, ClearPrefixCache):
            self._clear_prefix_cache(item)

    def _clear_prefix_cache(self, item: ClearPrefixCache) -> None:
        """Empty the prefix cache's tiers (running sequences keep their own
        state) and report what was dropped."""
        from shared.protocol import CacheCleared

        dropped = self.cache.clear(disk=True) if self.cache is not None else (0, 0, 0, 0)
        log.info("prefix cache cleared: %d entries (%d bytes) in memory, %d (%d bytes) on disk", *dropped)
        entries, nbytes, disk_entries, disk_bytes = dropped
        self._emit(
            CacheCleared(
                worker_id=item.worker_id,
                clear_id=item.clear_id,
                entries=entries,
                bytes=nbytes,
                disk_entries=disk_entries,
                disk_bytes=disk_bytes,
            )
        )

    # -- removal --------------------------------------------------------------

    def _forget(self, request_id: str) -> list[int]:
        """Drop a request from the maps; return its live uids."""
        uids = self._uids.pop(request_id, [])
        self._deadlines.pop(request_id, None)
        self._waiting_since.pop(request_id, None)
        for uid in uids:
            self._seqs.pop(uid, None)
            if self._ledger is not None:
                self._ledger.drop(uid)
            self._engine.drop_delta(uid)  # type: ignore[union-attr]
            self._checkpoints.forget(uid)
            if self.speculation is not None:
                self.speculation.forget(uid)
        return uids

    def _remove_keeping_state(self, uids: list[int]) -> None:
        """Take ``uids`` out of the engine; what they had computed stays in
        the prefix cache (a client that retries an aborted or timed-out
        request continues from it)."""
        caches = self._engine.remove(uids, return_prompt_caches=self.cache is not None)
        for cache, tokens in caches.values():
            if tokens and cache:
                self.cache.insert(list(tokens), cache)  # type: ignore[union-attr]

    def _abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            unstarted = self._unqueue(request_id) if self._memory_queue else None
            if request_id not in self._uids and unstarted is None:
                continue
            uids = self._forget(request_id)
            if uids:
                self._remove_keeping_state(uids)
            self.counters.requests_aborted += 1
            if unstarted is not None:
                self._end_unstarted(unstarted, Terminal(request_id, "abort"))
            else:
                self._emit(Terminal(request_id, "abort"))

    def _release(self, item: Release) -> None:
        uids = self._uids.get(item.request_id, [])
        uid = next((u for u in uids if self._seqs[u].index == item.index), None)
        if uid is None:
            self._release_waiting(item)
            return
        caches = self._engine.remove([uid], return_prompt_caches=self.cache is not None)
        self._finish_seq(uid)
        if uid in caches:
            cache, tokens = caches[uid]
            self.cache.insert(tokens, cache)  # type: ignore[union-attr]

    def _finish_seq(self, uid: int, tokens: list[int] | None = None) -> None:
        """Retire choice ``uid`` (``tokens``: its prompt and output, when
        known, kept for drafting later requests)."""
        seq = self._seqs.pop(uid)
        self._engine.drop_delta(uid)  # type: ignore[union-attr]
        self._checkpoints.forget(uid)
        if self._ledger is not None:
            self._ledger.drop(uid)
        if self.speculation is not None:
            self.speculation.forget(uid, tokens)
        self._uids[seq.request_id].remove(uid)
        self._end_if_done(seq.request_id)

    def _end_if_done(self, request_id: str) -> None:
        """Count ``request_id`` finished once no choice of it runs or waits."""
        if not self._uids[request_id] and not self._waits_for_memory(request_id):
            del self._uids[request_id]
            self._deadlines.pop(request_id, None)
            self.counters.requests_finished += 1

    def _release_waiting(self, item: Release) -> None:
        """Release a preempted choice waiting for memory (its output ended
        on a stop string while it was being preempted)."""
        queue = self._memory_queue
        found = next(
            (
                w
                for w in queue
                if isinstance(w, Resumption) and w.seq.request_id == item.request_id and w.seq.index == item.index
            ),
            None,
        )
        if found is not None:
            queue.remove(found)
            self._end_if_done(item.request_id)

    def _expire(self, now: float) -> None:
        expired = [request_id for request_id, deadline in self._deadlines.items() if deadline <= now]
        if expired and self._lockstep is not None:
            self._lockstep.record_expired(expired)
        self._end_expired(expired)

    def _end_expired(self, request_ids: list[str]) -> None:
        """End ``request_ids`` with a timeout error, keeping their state."""
        for request_id in request_ids:
            unstarted = self._unqueue(request_id) if self._memory_queue else None
            uids = self._forget(request_id)
            if uids:
                self._remove_keeping_state(uids)
            self.counters.requests_timed_out += 1
            terminal = Terminal(request_id, "error", "timeout", "the request exceeded its time limit")
            if unstarted is not None:
                self._end_unstarted(unstarted, terminal)
            else:
                self._emit(terminal)

    # -- stepping ---------------------------------------------------------------

    def _run_step(self) -> None:
        started = time.perf_counter()
        engine = self._engine
        progress, responses = engine.step()
        self._step += 1
        if self._checkpoints:
            self._checkpoints.take(progress, self._seqs, engine, self.cache)
        scheduled = self._scheduled(progress, responses)
        drafts = self._drafts()
        events = self._events(responses)
        c = self.counters
        c.step_seconds += time.perf_counter() - started
        c.steps = self._step
        c.generated_tokens += len(events)
        # a speculative step gives a row several events: count rows
        c.max_batch_seen = max(c.max_batch_seen, len({(e[0], e[1]) for e in events}))
        if events or scheduled:
            self._emit(TokenStep(self._step, events, scheduled, drafts))
            if self._pace is not None:
                self._pace.emitted()

    def _scheduled(self, progress: list[Any], responses: list[Any]) -> list[tuple[str, float]]:
        """Requests the engine worked on for the first time in this step,
        with how long each waited since the worker received it."""
        if not self._waiting_since:
            return []
        now = time.monotonic()
        found: list[tuple[str, float]] = []
        for r in (*progress, *responses):
            seq = self._seqs.get(r.uid)
            if seq is not None and seq.request_id in self._waiting_since:
                found.append((seq.request_id, now - self._waiting_since.pop(seq.request_id)))
        return found

    def _drafts(self) -> list[tuple[str, int, int, int]]:
        """This step's speculative verifications, by request and choice."""
        if self.speculation is None:
            return []
        found = []
        for uid, drafted, accepted in self.speculation.take_records():
            seq = self._seqs.get(uid)
            if seq is not None:
                found.append((seq.request_id, seq.index, drafted, accepted))
        return found

    def _events(self, responses: list[Any]) -> list[TokenEvent]:
        """Turn engine responses into token events; retire finished choices."""
        wanted = [r for r in responses if r.uid in self._seqs and self._wants_logprobs(r)]
        logprobs = self._logprobs(wanted) if wanted else {}
        events: list[TokenEvent] = []
        for r in responses:
            seq = self._seqs.get(r.uid)
            if seq is None:
                continue
            events.append((seq.request_id, seq.index, r.token, r.finish_reason, logprobs.get(id(r))))
            if self._ledger is not None:
                seq.generated.append(r.token)
                self._ledger.grew(r.uid)
            if r.finish_reason is not None:
                self._finish_seq(r.uid, r.all_tokens)
                if self.cache is not None and r.prompt_cache is not None:
                    self.cache.insert(r.all_tokens, r.prompt_cache)
        return events

    def _wants_logprobs(self, r: Any) -> bool:
        return self._seqs[r.uid].top_logprobs is not None and r.finish_reason != "stop"

    def _logprobs(self, responses: list[Any]) -> dict[int, TokenLogprobs]:
        """Each response's token log-probability and its top alternatives
        (see :func:`worker.engine.batch_engine.response_logprobs`), by the
        response's ``id`` (a speculative step returns several responses
        for one row)."""
        from worker.engine.batch_engine import response_logprobs

        wants = [self._seqs[r.uid].top_logprobs or 0 for r in responses]
        return {id(r): found for r, found in zip(responses, response_logprobs(responses, wants))}

    def _update_gauges(self) -> None:
        engine = self._engine
        running = engine.running if engine is not None else 0
        self.counters.running = running
        self.counters.waiting = max(0, len(self._seqs) - running)
        if self._ledger is not None:
            self.counters.kv_bytes = self._ledger.nbytes()
            self.counters.kv_tokens = self._ledger.tokens()
            self.counters.kv_waiting = self._kv_waiting()
        memory = mlx_memory.sample()
        self.counters.active_memory = memory.active
        self.counters.cache_memory = memory.cache
        self.counters.peak_memory = memory.peak

    def _release_idle_memory(self, now: float, busy: bool) -> None:
        """Clear MLX's buffer cache once per idle period, after the engine
        has had nothing to run for :data:`IDLE_CLEAR_SECONDS` (``busy``: a
        step ran in this loop turn, or sequences remain)."""
        if busy:
            self._idle_since = None
            self._cache_cleared = False
        elif self._idle_since is None:
            self._idle_since = now
        elif not self._cache_cleared and now - self._idle_since >= IDLE_CLEAR_SECONDS:
            mlx_memory.clear_cache()
            self._cache_cleared = True
