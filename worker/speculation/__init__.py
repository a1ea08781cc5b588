"""Speculative decoding inside the shared decode batch.

Belongs here: one model's drafting settings, records and totals
(:mod:`~worker.speculation.drafting`), suffix drafting from an index over
running and earlier requests' tokens (:mod:`~worker.speculation.suffix_index`),
prompt-lookup drafting and the acceptance rules
(:mod:`~worker.speculation.prompt_lookup`), drafting with a second model
(:mod:`~worker.speculation.draft_model`), when drafting pays
(:mod:`~worker.speculation.controller`), verification inside the batch
(:mod:`~worker.speculation.step`), cutting caches back to what each row kept
(:mod:`~worker.speculation.draft_rollback`).

Imports: :mod:`worker.sampling`, :mod:`shared`, MLX and mlx-lm. Runs on the
scheduler thread.
"""
