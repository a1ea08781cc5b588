"""Choosing tokens: per-request samplers and logits processors.

Belongs here: samplers and processors (:mod:`~worker.sampling.samplers`),
a model's sampling defaults (:mod:`~worker.sampling.defaults`),
grammar-constrained decoding (:mod:`~worker.sampling.constrained_decoding`),
following a choice in and out of reasoning blocks
(:mod:`~worker.sampling.reasoning_tokens`).

Imports: :mod:`worker.messages`, :mod:`shared`, MLX, llguidance. Samplers
and masks run on the scheduler thread; defaults and grammar compilation
(MLX-free at import) also run on the input thread.
"""
