"""The thinking-budget logits processor (worker/sampling.py): it lets a
reasoning block run for its budget, then forces the closing marker."""

from __future__ import annotations

import mlx.core as mx

from worker.sampling import thinking_budget_processor
from worker.scheduler import ThinkingBudget

VOCAB = 32
OPEN, CLOSE = (10,), (20, 21)
PROMPT = [1, 2, 3]


def forced_after(processor, generated: list[int]) -> int | None:
    """The token the processor forces after ``generated`` (None: free)."""
    out = processor(mx.array(PROMPT + generated), mx.zeros((1, VOCAB)))
    allowed = [i for i, v in enumerate(out[0].tolist()) if v != float("-inf")]
    return None if len(allowed) == VOCAB else allowed[0] if len(allowed) == 1 else -1


def test_block_opened_by_the_prompt_is_closed_after_the_budget():
    p = thinking_budget_processor(ThinkingBudget(3, OPEN, CLOSE, open_at_start=True), len(PROMPT))
    assert forced_after(p, []) is None
    assert forced_after(p, [5, 6]) is None
    assert forced_after(p, [5, 6, 7]) == 20  # budget used: first closing token
    assert forced_after(p, [5, 6, 7, 20]) == 21  # then the next one
    assert forced_after(p, [5, 6, 7, 20, 21]) is None  # closed: the answer is free


def test_block_opened_by_the_model_and_closed_early():
    p = thinking_budget_processor(ThinkingBudget(2, OPEN, CLOSE, open_at_start=False), len(PROMPT))
    assert forced_after(p, [4, 4, 4]) is None  # no block open: no limit
    assert forced_after(p, [4, 4, 4, 10, 5]) is None
    assert forced_after(p, [4, 4, 4, 10, 5, 6]) == 20
    q = thinking_budget_processor(ThinkingBudget(5, OPEN, CLOSE, open_at_start=True), len(PROMPT))
    assert forced_after(q, [5, 20, 21, 7, 7, 7, 7, 7]) is None  # the model closed it itself
    assert forced_after(q, [5, 20, 21, 7, 7, 7, 7, 7, 10, 1, 2, 3, 4, 5]) == 20  # a new block, new budget
