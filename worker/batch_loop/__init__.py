"""The scheduler loop of the kinds that do not generate (embedding, rerank,
speech, transcription).

Belongs here: the one loop those kinds' schedulers share — their inbox,
admission, aborts, deadlines, shutdown, failure and counters — with each
kind supplying only how it batches and runs its inputs
(:mod:`~worker.batch_loop.loop`).

Imports: the worker's contracts (:mod:`worker.messages`), :mod:`shared`;
nothing else of the worker, and no MLX (the kinds' own steps call it). Runs
on the scheduler thread of those kinds (``submit`` from any thread).
"""
