"""Batched prefill of prompts of different lengths gives each prompt the
answer it gets alone, for every test family (worker/model_fixes.py
corrects the layers mlx-lm batches wrongly).

The prompts share one prefill chunk, so the shorter ones are padded on the
right: a layer that does not honour the cache's real lengths gives them a
wrong state.
"""

from __future__ import annotations

import random

import pytest

from tests.tiny_model import FAMILIES, SOLO_FAMILIES, build_tiny_model

BATCHED = sorted(set(FAMILIES) - set(SOLO_FAMILIES))
TOKENS = 5


def _prompts() -> list[list[int]]:
    rng = random.Random(0)
    return [[rng.randrange(200, 40000) for _ in range(n)] for n in (70, 120, 23)]


def _answers(model, prompts: list[list[int]], together: bool) -> list[list[int]]:
    """Greedy tokens of each prompt, prefilled together (one chunk) or each
    alone."""
    from worker.batch_engine import BatchEngine
    from worker.sampling import greedy

    def engine():
        return BatchEngine(model, host_sampling=True, stop_tokens=None, sampler=greedy, prefill_step_size=512)

    groups = [prompts] if together else [[p] for p in prompts]
    answers = []
    for group in groups:
        e = engine()
        uids = e.insert(group, max_tokens=[TOKENS] * len(group))
        out = {uid: [] for uid in uids}
        while any(len(v) < TOKENS for v in out.values()):
            for r in e.step()[1]:
                out[r.uid].append(r.token)
        answers.extend(out[uid] for uid in uids)
    return answers


@pytest.mark.parametrize("family", BATCHED)
def test_prompts_prefilled_together_answer_as_alone(family, tmp_path):
    from worker.loader import load_model

    model = load_model(str(build_tiny_model(tmp_path / family, family=family))).model
    prompts = _prompts()
    assert _answers(model, prompts, together=True) == _answers(model, prompts, together=False)


def test_the_nemotron_h_fix_is_still_needed(tmp_path):
    """Without the fix, mlx-lm's own Nemotron-H layers answer a right-padded
    prompt wrongly (when this fails, mlx-lm fixed them: drop the fix)."""
    from mlx_lm.utils import load

    from worker.model_fixes import apply_model_fixes

    path = build_tiny_model(tmp_path / "nemotron_h", family="nemotron_h")
    model, _ = load(str(path))
    prompts = _prompts()
    assert _answers(model, prompts, together=True) != _answers(model, prompts, together=False)
    assert apply_model_fixes(model) == ["NemotronHMamba2Mixer"]
    assert _answers(model, prompts, together=True) == _answers(model, prompts, together=False)
