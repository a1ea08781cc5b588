"""The worker's output thread: token ids into text, parsed, and terminal events.

Belongs here: the output loop, the one place that decides when a request
ends (:mod:`~worker.output.loop`), incremental detokenization and stop
strings (:mod:`~worker.output.detok`).

Imports: :mod:`worker.parsers`, :mod:`worker.messages`, :mod:`worker.faults`
and :mod:`shared`. Never imports MLX, directly or through a module it
imports at load: it runs on the output thread, which never touches MLX.
"""
