"""The worker process: one model, three threads, two sockets.

Threads:
- the main thread reads the requests socket, decodes each frame (typed;
  garbage is logged and dropped), tokenizes new requests and hands them to
  the scheduler;
- the scheduler thread loads the model, warms up and runs the engine; it is
  the only thread that touches MLX;
- the output thread detokenizes and is the only writer of the outputs socket.

A watchdog thread (:mod:`worker.parent_watch`) ends the process when the
gateway that started it is gone, so a worker never outlives its gateway.
What the worker loads and builds around its model (the prompt builder,
the scheduler, prefix cache, speculation, the tensor-parallel shard) is
:mod:`worker.model_setup`; how the main thread prepares the requests of
the kinds that do not generate is :mod:`worker.kind_requests`; this module
is the threads and the sockets.

Tensor parallelism: with ``tensor_parallel`` > 1 this process is one rank
of an MLX distributed group started by :mod:`worker.tensor_parallel.launch`. Rank 0 is
the worker the gateway sees (sockets, threads, heartbeats, all as above)
and shares its scheduling decisions each loop turn; the other ranks open no
socket, load and shard the same model and follow rank 0's plans
(:mod:`worker.tensor_parallel.lockstep`). A broken group (a dead rank) fails rank
0's engine step, which is a thread death as below.

Thread death: when any exception escapes the input, scheduler or output
thread (including a failed engine step), the worker stops heartbeating, ends
every request the output thread knows with an ``internal`` error (when the
output thread itself is alive to send them), waits until those errors are
written to its socket (:func:`shared.sockets.flush_and_close`) and exits with
:data:`shared.protocol.EXIT_THREAD_DIED`. The gateway then ends whatever else was in flight
with ``unavailable`` and starts a fresh worker. Heartbeats are sent only
while all three threads are alive, so a half-dead worker never looks
healthy.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from typing import Any, Callable, NoReturn

import zmq

from shared.codec import DecodeError, worker_codec
from shared.config import ModelConfig, decode_model_config
from shared.logging import setup_logging
from shared.protocol import (
    EXIT_THREAD_DIED,
    PROTOCOL_VERSION,
    AbortRequest,
    CacheCleared,
    ClearCache,
    EmbedRequest,
    Failed,
    GenerateRequest,
    Hello,
    Ready,
    RequestOutput,
    RerankRequest,
    Shutdown,
    SpeechRequest,
    StepOutputs,
    TranscribeRequest,
    WorkerStats,
)
from shared.sockets import Endpoints, flush_and_close, open_worker_link
from worker.caches.disk import disk_stats
from worker.engine import mlx_memory
from worker.engine.scheduler import Scheduler
from worker.faults import armed, reached
from worker.kind_requests import KindRequests
from worker.messages import Abort, ClearPrefixCache, OutputPace, Stop
from worker.model_setup import KIND_BUILDERS, GenerationSetup, KindSetup, build_generation, served_kind
from worker.output.loop import Exit, FailAll, OutputLoop
from worker.parent_watch import watch_parent
from worker.prompting.builder import PromptBuilder, PromptError
from worker.speculation.drafting import draft_step_stats

log = logging.getLogger("mlxd.worker")

FOLLOWER_FAIL_GRACE = 10.0
"""Seconds a tensor-parallel rank other than 0 that failed to load waits
before exiting (rank 0 reports the failure to the gateway meanwhile)."""

EXIT_FLUSH_SECONDS = 2.0
"""How long an exiting worker waits for its last frames to reach the
gateway (which kills a worker it stopped after 5 s)."""

FAIL_ALL_SECONDS = 15.0
"""How long a dying worker waits for its output thread to send the errors
(a busy machine may not run that thread for a few seconds)."""


class Worker:
    """One worker incarnation serving ``config`` over the given sockets.

    ``requests`` is a connected PULL socket and ``outputs`` a connected PUSH
    socket; :meth:`run` uses ``requests`` on the calling thread and hands
    ``outputs`` to the output thread. ``memory_limit`` and ``cache_limit``
    (bytes; 0 and None keep MLX's defaults) are applied on the scheduler
    thread before the model loads (see :func:`worker.engine.mlx_memory.apply_limits`).
    """

    def __init__(
        self,
        worker_id: str,
        config: ModelConfig,
        requests: zmq.Socket,
        outputs: zmq.Socket,
        *,
        memory_limit: int = 0,
        cache_limit: int | None = None,
        rank: int = 0,
    ) -> None:
        self.worker_id = worker_id
        self.rank = rank
        self.config = config
        self.memory_limit = memory_limit
        self.cache_limit = cache_limit
        self._requests = requests
        self._outputs = outputs
        out_codec = worker_codec()
        self._scheduler: Scheduler | None = None
        self._prompts: PromptBuilder | None = None
        # the requests and models of the kinds that do not generate
        self._kinds = KindRequests(config, self._refuse, lambda job: self._scheduler.submit(job))  # type: ignore[union-attr]
        self._lockstep: Any = None  # a tensor-parallel group's Lockstep, once joined
        self._ready = threading.Event()
        self._failed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._dying = threading.Lock()
        self._dead = False
        self._pace = OutputPace()
        self.output = OutputLoop(
            worker_id,
            send=(lambda m: outputs.send(out_codec.encode(m), copy=False)) if rank == 0 else (lambda m: None),
            release=lambda item: self._scheduler.submit(item) if self._scheduler else None,
            stats=self.stats,
            healthy=self.healthy,
            pace=self._pace,
        )

    def run(self) -> int:
        """Serve until Shutdown, a load failure or the gateway's death.

        Returns the process exit code (0 after a requested shutdown); never
        returns when a thread dies (the process exits, see the module
        docstring).
        """
        self._threads.append(threading.current_thread())
        out_thread = self._start("output", self.output.run)
        protocol = PROTOCOL_VERSION + 1 if armed("protocol") else PROTOCOL_VERSION
        self.output.queue.put(
            Hello(worker_id=self.worker_id, pid=os.getpid(), model=self.config.name, protocol=protocol)
        )
        sched_thread = self._start("scheduler", self._scheduler_main)
        try:
            code = self._input_loop()
        except BaseException as exc:
            self._die("input", exc)
        if self._scheduler is not None:
            self._scheduler.submit(Stop())
        sched_thread.join(timeout=10)
        self.output.queue.put(Exit())
        out_thread.join(timeout=5)
        return code

    def follow(self) -> int:
        """Serve as a tensor-parallel rank other than 0: load, shard and
        run rank 0's plans on the scheduler thread until rank 0 stops the
        group. Returns 0 after a stop, 1 when the model failed to load;
        never returns when the thread dies (a broken group)."""
        self._threads.append(threading.current_thread())
        self._start("scheduler", self._scheduler_main).join()
        if self._failed.is_set():
            # rank 0 fails the same way and tells the gateway why; leave it
            # time to do so before mlx.launch stops the group on our exit
            time.sleep(FOLLOWER_FAIL_GRACE)
            return 1
        log.info("rank %d of model %s stopped with rank 0", self.rank, self.config.name)
        return 0

    def healthy(self) -> bool:
        """True while every thread of this worker is alive and, for rank 0
        of a tensor-parallel group, the group is not stalled (a hung rank,
        see :meth:`worker.tensor_parallel.lockstep.Lockstep.stalled`); any thread."""
        lockstep = self._lockstep
        if lockstep is not None and lockstep.stalled(time.monotonic()):
            return False
        return not self._dead and all(t.is_alive() for t in self._threads)

    def _start(self, name: str, target: Callable[[], None]) -> threading.Thread:
        """Start daemon thread ``mlxd-<name>`` running ``target``; an
        exception escaping it ends the worker (:meth:`_die`)."""

        def guarded() -> None:
            try:
                target()
            except BaseException as exc:
                self._die(name, exc)

        thread = threading.Thread(target=guarded, name=f"mlxd-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def _die(self, thread: str, exc: BaseException) -> NoReturn:
        """Thread ``thread`` died of ``exc``: stop heartbeats, have the
        output thread (unless it is the dead one) end every running request
        with an error, and exit with :data:`EXIT_THREAD_DIED`. Called on the
        dying thread; a second dying thread waits here for the exit."""
        with self._dying:
            self._dead = True
            log.critical(
                "the %s thread died (%s: %s); failing the requests in flight and exiting",
                thread,
                type(exc).__name__,
                exc,
                exc_info=exc,
            )
            quiet = thread == "output"  # the dying thread is the socket's only writer
            if self.rank:  # a follower rank has no socket and nobody to tell
                logging.shutdown()
                os._exit(EXIT_THREAD_DIED)
            if not quiet:
                fail = FailAll("the model worker failed; retry the request")
                self.output.fail_now(fail)
                quiet = fail.done.wait(FAIL_ALL_SECONDS)  # the output thread has returned
            if quiet:  # deliver what was sent before exiting (os._exit drops queued frames)
                flush_and_close(self._outputs, FAIL_ALL_SECONDS)
            logging.shutdown()
            os._exit(EXIT_THREAD_DIED)

    def _scheduler_main(self) -> None:
        """Scheduler thread: load, warm up, announce, then run the engine
        (what is loaded and built: :mod:`worker.model_setup`)."""
        kind = served_kind(self.config)
        try:
            started = time.monotonic()
            setup: GenerationSetup | KindSetup
            if kind in KIND_BUILDERS:
                setup = KIND_BUILDERS[kind](self.config, self.output.queue.put)
            else:
                mlx_memory.apply_limits(self.memory_limit, self.cache_limit)
                self._lockstep = self._join_group()
                emit = self.output.queue.put if self.rank == 0 else lambda item: None
                pace = self._pace if self.rank == 0 else None
                setup = build_generation(self.config, emit, self._lockstep, pace)
                self.output.decoder = setup.decoder
                self._prompts = setup.prompts
            if isinstance(setup, KindSetup):
                setup.scheduler.warm_up()
                self._kinds.take_model(setup)
                context = setup.context
            else:
                setup.scheduler.warm_up(list(setup.loaded.tokenizer.encode("Hello")) or [0])
                if self.config.warm_prompts:
                    self._warm_prefix(setup)
                context = setup.context
            self._scheduler = setup.scheduler  # type: ignore[assignment]
            # announced once warm, with the memory the heartbeats report from now on
            self.output.queue.put(setup.report(self.worker_id, time.monotonic() - started))
        except BaseException as exc:
            log.exception("model %s failed to load", self.config.name)
            self.output.queue.put(Failed(worker_id=self.worker_id, message=f"{type(exc).__name__}: {exc}"))
            self._failed.set()
            return
        grammars = self._prompts.grammars if self._prompts is not None else None
        if grammars is not None:
            threading.Thread(target=grammars.warm, name="mlxd-grammar-warm", daemon=True).start()
        self._serve(setup.scheduler, context)

    def _warm_prefix(self, setup: GenerationSetup) -> None:
        """Scheduler thread, at load: prefill the model's ``warm_prompts``
        into the prefix cache (rendered as requests with those messages
        would be). A file that cannot be read or rendered fails the load."""
        from worker.prompting.warm_prompts import read_warm_prompts

        started = time.monotonic()
        prompts = [setup.prompts.build(request).prompt for request in read_warm_prompts(self.config.warm_prompts)]
        tokens = setup.scheduler.warm_prefix(prompts)
        log.info(
            "model %s: %d warm prompts (%d tokens) prefilled into the prefix cache in %.2fs",
            self.config.name,
            setup.scheduler.counters.warm_prompts,
            tokens,
            time.monotonic() - started,
        )

    def _join_group(self) -> Any:
        """Scheduler thread: the tensor-parallel group's
        :class:`~worker.tensor_parallel.lockstep.Lockstep` (None: one process)."""
        if self.config.tensor_parallel == 1:
            return None
        from worker.tensor_parallel.lockstep import join_lockstep

        return join_lockstep(self.config.tensor_parallel, lambda: self._prompts)

    def _serve(self, scheduler: Any, context: int) -> None:
        """Announce Ready and run ``scheduler`` until it stops (an engine
        failure propagates: the worker exits, see the module docstring)."""
        self.output.queue.put(Ready(worker_id=self.worker_id))
        self._ready.set()
        log.info("model %s ready (context %d tokens, rank %d)", self.config.name, context, self.rank)
        try:
            if self.rank:
                scheduler.follow()
            else:
                scheduler.run()
        finally:
            disk = getattr(getattr(scheduler, "cache", None), "disk", None)
            if disk is not None:
                disk.close(timeout=4.0)  # the gateway kills a stopping worker after 5 s

    def _input_loop(self) -> int:
        """Main thread: read and dispatch gateway messages."""
        codec = worker_codec()
        poller = zmq.Poller()
        poller.register(self._requests, zmq.POLLIN)
        while not self._failed.is_set():
            if not poller.poll(0):
                self._signal_preparing(False)
                if not poller.poll(200):
                    continue
            frame = self._requests.recv(copy=False)
            try:
                message = codec.decode(frame.buffer)
            except DecodeError as exc:
                log.warning("dropped a malformed frame (%d bytes): %s", len(frame.buffer), exc)
                continue
            if isinstance(message, Shutdown):
                return 0
            self._ready.wait()
            if isinstance(message, GenerateRequest):
                reached("input")
                self._signal_preparing(True)
                self._admit(message)
            elif isinstance(message, EmbedRequest):
                self._kinds.embed(message)
            elif isinstance(message, RerankRequest):
                self._kinds.rerank(message)
            elif isinstance(message, SpeechRequest):
                self._kinds.speak(message)
            elif isinstance(message, TranscribeRequest):
                self._kinds.transcribe(message)
            elif isinstance(message, AbortRequest):
                self._scheduler.submit(Abort(list(message.request_ids)))  # type: ignore[union-attr]
            elif isinstance(message, ClearCache):
                self._clear_cache(message)
        return 1

    def _clear_cache(self, message: ClearCache) -> None:
        """Input thread: have the scheduler empty the prefix cache; a
        worker of another kind (embeddings, rerank, speech, transcription)
        has none and answers at once."""
        if not isinstance(self._scheduler, Scheduler):
            self.output.queue.put(CacheCleared(worker_id=self.worker_id, clear_id=message.clear_id))
            return
        self._scheduler.submit(ClearPrefixCache(message.clear_id, self.worker_id))  # type: ignore[union-attr]

    def _signal_preparing(self, busy: bool) -> None:
        """Input thread: tell the scheduler whether requests are still being
        prepared (one is being rendered and tokenized, or more wait on the
        socket), so an idle engine waits for the whole burst."""
        scheduler = self._scheduler
        preparing = getattr(scheduler, "preparing", None)
        if preparing is None:
            return
        if busy:
            preparing.set()
        else:
            preparing.clear()

    def stats(self) -> WorkerStats:
        """The heartbeat counters (read on the output thread)."""
        scheduler = self._scheduler
        if scheduler is None:
            return WorkerStats()
        c, cache = scheduler.counters, scheduler.cache
        return WorkerStats(
            running=c.running,
            waiting=c.waiting,
            steps=c.steps,
            prompt_tokens=c.prompt_tokens,
            generated_tokens=c.generated_tokens,
            requests_finished=c.requests_finished,
            requests_aborted=c.requests_aborted,
            max_batch_seen=c.max_batch_seen,
            cache_bytes=cache.nbytes if cache else 0,
            cache_budget_bytes=cache.budget_bytes if cache else 0,
            cache_entries=cache.entries if cache else 0,
            cache_queries=cache.queries if cache else 0,
            cache_hits=cache.hits if cache else 0,
            cached_tokens=cache.reused_tokens if cache else 0,
            **disk_stats(cache.disk if cache else None),
            step_seconds=c.step_seconds,
            requests_timed_out=c.requests_timed_out,
            draft_tokens=scheduler.speculation.drafted if scheduler.speculation else 0,
            draft_accepted_tokens=scheduler.speculation.accepted if scheduler.speculation else 0,
            **draft_step_stats(scheduler.speculation),
            active_memory_bytes=c.active_memory,
            cache_memory_bytes=c.cache_memory,
            peak_memory_bytes=c.peak_memory,
            cache_refused=cache.refused if cache else 0,
            cache_evictions=cache.evictions if cache else 0,
            warm_prompts=c.warm_prompts,
            warm_tokens=c.warm_tokens,
            vision_prefills=c.vision_prefills,
            vision_image_tokens=c.vision_image_tokens,
            rerank_pairs=c.rerank_pairs,
            audio_seconds_in=c.audio_seconds_in,
            kv_bytes=c.kv_bytes,
            kv_budget_bytes=c.kv_budget_bytes,
            kv_waiting=c.kv_waiting,
            kv_preemptions=c.kv_preemptions,
            kv_waited=c.kv_waited,
            kv_tokens=c.kv_tokens,
        )

    def _admit(self, request: GenerateRequest) -> None:
        if self._kinds.own_kind() != "generate":
            from shared.model_kind import wrong_kind_message

            self._refuse(
                request.request_id,
                "invalid_request",
                wrong_kind_message(self.config.name, self._kinds.own_kind(), "generate"),
                "model",
            )
            return
        assert self._prompts is not None and self._scheduler is not None
        try:
            if request.count_only:
                counted = self._prompts.count(request)
                self._reply(RequestOutput(request_id=request.request_id, prompt_tokens=counted, finish_reason="stop"))
                return
            admission = self._prompts.build(request)
            if self.config.tensor_parallel > 1:
                admission.request = request  # shared with the other ranks
        except PromptError as exc:
            self._refuse(request.request_id, exc.kind, exc.message, exc.field)
            return
        except Exception as exc:  # never let one request take the input thread down
            log.exception("could not prepare request %s", request.request_id)
            self._refuse(
                request.request_id, "invalid_request", f"the request could not be prepared: {type(exc).__name__}"
            )
            return
        self._scheduler.submit(admission)

    def _refuse(self, request_id: str, kind: str, message: str, field: str | None = None) -> None:
        """End a request that never reached the engine with an error
        (``field``: the request field at fault, see ``PromptError``)."""
        self._reply(
            RequestOutput(
                request_id=request_id,
                finish_reason="error",
                error=message,
                error_kind=kind,  # type: ignore[arg-type]
                error_param=field,
            )
        )

    def _reply(self, output: RequestOutput) -> None:
        """Answer a request without the engine (a count, or a refusal)."""
        self.output.queue.put(StepOutputs(step=-1, outputs=[output]))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line the gateway builds for a worker."""
    p = argparse.ArgumentParser(prog="python -m worker", description="mlxd model worker")
    p.add_argument("--worker-id", required=True)
    p.add_argument("--model-config", required=True, help="the model's config as JSON")
    p.add_argument("--requests", required=True, help="ipc:// endpoint to pull requests from")
    p.add_argument("--outputs", required=True, help="ipc:// endpoint to push outputs to")
    p.add_argument("--parent-pid", type=int, required=True)
    p.add_argument("--log-level", default="info")
    p.add_argument("--log-file", default=None, help="append logs here instead of stderr")
    p.add_argument("--memory-limit", type=int, default=0, help="MLX memory limit in bytes (0: MLX's default)")
    p.add_argument("--cache-limit", type=int, default=None, help="MLX buffer-cache limit in bytes (default: MLX's)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m worker``; returns the exit code."""
    args = parse_args(argv)
    config = decode_model_config(args.model_config)
    # a tensor-parallel rank: mlx.launch set MLX_RANK; its parent is the launcher
    rank = int(os.environ.get("MLX_RANK", "0")) if config.tensor_parallel > 1 else 0
    name = f"worker:{args.worker_id}" + (f":rank{rank}" if config.tensor_parallel > 1 else "")
    setup_logging(args.log_level, name=name, log_file=args.log_file)
    endpoints = Endpoints(requests=args.requests, outputs=args.outputs)
    parent = os.getppid() if config.tensor_parallel > 1 else args.parent_pid
    if parent == 1:  # the launcher died before this rank started: orphaned already
        return 0
    # a rank's parent is the launcher, which removes the sockets if the gateway dies
    watch_parent(parent, None if config.tensor_parallel > 1 else endpoints)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the gateway's to handle
    if rank:
        return Worker(args.worker_id, config, None, None, rank=rank).follow()  # type: ignore[arg-type]
    ctx = zmq.Context()
    outputs, requests = open_worker_link(ctx, endpoints, "worker", send_context=zmq.Context())
    try:
        return Worker(
            args.worker_id,
            config,
            requests,
            outputs,
            memory_limit=args.memory_limit,
            cache_limit=args.cache_limit,
        ).run()
    finally:
        requests.close(0)
        ctx.term()
        flush_and_close(outputs, EXIT_FLUSH_SECONDS)  # a load failure's Failed, the last outputs
