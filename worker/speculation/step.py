"""Draft verification inside the shared decode batch.

:class:`SpeculativeSteps` is mixed into the engine's generation batch
(:class:`worker.engine.batch_engine.LeanGenerationBatch`): when some rows of the
batch have a draft (:meth:`worker.speculation.drafting.Speculation.draft`: the suffix
index, prompt lookup or a draft model),
one forward pass feeds every row its pending token followed by its draft,
all rows padded to the longest draft plus one (a row without a draft gets
padding after its pending token; padding sits after every real position,
so the causal mask keeps it out of what the real positions see). Then:

* a row without a draft takes its next token from the first position
  exactly as a plain step would (its logits processors and sampler run on
  that position only);
* a drafting row accepts the longest prefix of its draft that equals, at
  each position, the token the row's own rule picks there: the arg-max
  for plain greedy rows; for sampled rows a draw from the sampler (one
  draw per position, stopping at the first mismatch). For a deterministic
  draft that draw is the speculative-sampling acceptance rule (accept
  ``x`` with probability ``p(x)``, else emit a draw from ``p`` without
  ``x``; see :func:`worker.speculation.prompt_lookup.accept_deterministic`), and it
  consumes the sampler's random stream exactly as plain decoding does, so
  a seeded row emits the same tokens either way;
* every row's cache is brought back to exactly the tokens it kept, each
  row by its own count (:mod:`worker.speculation.draft_rollback`: trimmed, or for
  recurrent layers restored and the kept tokens fed again).

Rows with logits processors (penalties, logit bias, grammars, the thinking
budget, ``min_tokens``) never draft: a processor would have to run on each
drafted position with the context as it would be there.

Threads: the scheduler thread only (MLX arrays, the model's forward).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from worker.sampling.samplers import TokenSampler, host_log_softmax
from worker.speculation.draft_rollback import Rollback, rollback_for
from worker.speculation.drafting import Speculation
from worker.speculation.prompt_lookup import verify_draft


class SpeculativeSteps:
    """The speculative step of a generation batch (a mixin: the attributes
    it reads are mlx-lm ``GenerationBatch``'s, and ``_process``,
    ``_sample_host``, ``_sample_device`` and ``host_sampling`` are
    :class:`worker.engine.batch_engine.LeanGenerationBatch`'s)."""

    speculation: Speculation | None

    def _speculate(self, spec: Speculation) -> list[Any] | None:
        """Draft and verify for the whole batch; None when this step is not
        speculative (the batch is larger than ``spec.max_batch``, its cache
        cannot be brought back per row, or no row has a draft), and the caller
        runs a plain step.

        Returns one response per emitted token, several per drafting row,
        in row order; rows that finish inside their accepted run return
        their cache holding exactly their tokens and leave the batch.
        """
        if len(self.uids) > spec.max_batch:
            spec.count("batch")
            return None
        rollback = rollback_for(self.prompt_cache, len(self.uids))
        if rollback is None:
            return None
        eligible = [uid for i, uid in enumerate(self.uids) if self._may_draft(i, spec)]
        if spec.plan(len(self.uids), eligible) <= 1:
            return None  # the plain step keeps mlx-lm's pipelining: no host sync
        pending = self._next_tokens.tolist()
        drafts = [self._draft(i, pending[i], spec) if spec.limit(uid) else [] for i, uid in enumerate(self.uids)]
        for i, uid in enumerate(self.uids):
            if spec.limit(uid) and not drafts[i]:
                spec.record(uid, 0, 0)
        if not any(drafts):
            spec.missed()
            return None
        width = 1 + max(len(d) for d in drafts)
        spec.verifying(width)
        grid = [[p, *d] + [p] * (width - 1 - len(d)) for p, d in zip(pending, drafts)]
        rollback.save(self.prompt_cache)
        logits = self.model(mx.array(grid, dtype=mx.uint32), cache=self.prompt_cache)

        first, token_context = self._process(logits[:, 0, :], self._next_tokens)
        samplers = list(self.samplers or [self.fallback_sampler] * len(self.uids))
        special = [i for i, s in enumerate(samplers) if isinstance(s, TokenSampler) and not drafts[i]]
        if not special:
            sampled, next_rows = mx.argmax(first, axis=-1), [None] * len(self.uids)
        elif self.host_sampling:
            sampled, next_rows = self._sample_host(first, samplers, special)
        else:
            sampled, next_rows = self._sample_device(first, samplers, special)
        next_tokens = sampled.tolist()
        mx.eval(token_context, [r for r in next_rows if isinstance(r, mx.array)])

        emitted: list[list[int]] = []
        emitted_rows: list[list[Any]] = []
        for i, draft in enumerate(drafts):
            previous = self._next_logprobs[i] if i < len(self._next_logprobs) else None
            if not draft:
                emitted.append([pending[i]])
                emitted_rows.append([previous])
                continue
            accepted, follow, rows = self._verify(logits[i, : len(draft) + 1], draft, samplers[i])
            spec.record(self.uids[i], len(draft), accepted)
            emitted.append([pending[i], *draft[:accepted]])
            emitted_rows.append([previous, *rows[:accepted]])
            next_tokens[i] = follow
            next_rows[i] = rows[accepted]
        return self._emit(emitted, emitted_rows, rollback, width, next_tokens, next_rows)

    def _may_draft(self, i: int, spec: Speculation) -> bool:
        """Whether row ``i`` may draft this step (decided before its pending
        token is read): not with logits processors, not when it opted out
        (:meth:`Speculation.enabled_for`), not one token from its
        ``max_tokens``; the controller then picks among these rows
        (:meth:`Speculation.plan`)."""
        if self.logits_processors and self.logits_processors[i]:
            return False
        if self.max_tokens[i] - self._num_tokens[i] - 1 < 1:
            return False
        return spec.enabled_for(self.uids[i])

    def _draft(self, i: int, pending: int, spec: Speculation) -> list[int]:
        """Row ``i``'s draft (prompt lookup or the draft model, see
        :meth:`Speculation.draft`) after its ``pending`` token
        (empty: it decodes one token this step), at most the tokens left
        before its ``max_tokens``."""
        room = self.max_tokens[i] - self._num_tokens[i] - 1
        uid = self.uids[i]
        return spec.draft(uid, [*self.tokens[i], pending], min(spec.limit(uid), room))

    def _verify(self, logits: mx.array, draft: list[int], sampler: Any) -> tuple[int, int, list[Any]]:
        """Verify one row's ``draft`` against its logits at the pending
        position and each drafted position (``len(draft) + 1`` rows).

        Returns the number of draft tokens accepted, the row's own token
        after them, and the normalized log-probability rows of the
        positions looked at (None for each position of a plain greedy row,
        which reports none).
        """
        if not isinstance(sampler, TokenSampler):
            targets = mx.argmax(logits, axis=-1).tolist()
            accepted, follow = verify_draft(draft, targets.__getitem__)
            return accepted, follow, [None] * len(targets)
        if self.host_sampling:
            rows = list(host_log_softmax(np.asarray(logits.astype(mx.float32))))
            accepted, follow = verify_draft(draft, lambda j: sampler.sample_host(rows[j]))
        else:
            chosen = logits.astype(mx.float32)
            rows = list(chosen - mx.logsumexp(chosen, axis=-1, keepdims=True))
            accepted, follow = verify_draft(draft, lambda j: int(sampler(rows[j][None]).item()))
        return accepted, follow, rows

    def _emit(
        self,
        emitted: list[list[int]],
        emitted_rows: list[list[Any]],
        rollback: Rollback,
        width: int,
        next_tokens: list[int],
        next_rows: list[Any],
    ) -> list[Any]:
        """Append each row's emitted tokens (ending a row at its stop
        sequence or ``max_tokens``), trim every row's cache to its tokens,
        build the responses and drop finished rows from the batch."""
        kept: list[int] = []
        finishes: list[str | None] = []
        for i, tokens in enumerate(emitted):
            finish = None
            count = 0
            for token in tokens:
                count += 1
                self._num_tokens[i] += 1
                self.tokens[i].append(token)
                if self._num_tokens[i] >= self.max_tokens[i]:
                    finish = "length"
                if self._matchers[i].advance(token):
                    finish = "stop"
                if finish is not None:
                    break
            kept.append(count)
            finishes.append(finish)
        rollback.restore(self.model, self.prompt_cache, width, [tokens[:k] for tokens, k in zip(emitted, kept)])

        responses = []
        keep = []
        for i, count in enumerate(kept):
            uid = self.uids[i]
            for position in range(count):
                last = position == count - 1
                finish = finishes[i] if last else None
                cache = self.extract_cache(i) if finish else None
                tokens = self.tokens[i] if finish else None
                responses.append(
                    self.Response(uid, emitted[i][position], emitted_rows[i][position], finish, cache, tokens)
                )
            if finishes[i] is None:
                keep.append(i)
        self._current_tokens = mx.array([e[k - 1] for e, k in zip(emitted, kept)], dtype=mx.uint32)
        self._current_logprobs = [r[k - 1] for r, k in zip(emitted_rows, kept)]
        self._next_tokens = mx.array(next_tokens, dtype=mx.uint32)
        self._next_logprobs = next_rows
        if len(keep) < len(self.uids):
            self.filter(keep)
        return responses
