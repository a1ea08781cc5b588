"""Speculative decoding inside the shared decode batch.

Belongs here: prompt-lookup drafting and the acceptance rules
(:mod:`~worker.speculation.prompt_lookup`), drafting with a second model
(:mod:`~worker.speculation.draft_model`), verification inside the batch
(:mod:`~worker.speculation.step`), cutting caches back to what each row kept
(:mod:`~worker.speculation.draft_rollback`).

Imports: :mod:`worker.sampling`, :mod:`shared`, MLX and mlx-lm. Runs on the
scheduler thread.
"""
