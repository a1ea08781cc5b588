"""Prompt-lookup speculative decoding (worker/speculation.py and the
speculative step of worker/batch_engine.py).

Runs the tiny random-weight model in this process: greedy tokens with
speculation on must equal the tokens without it, token for token, for a
lone row (where drafts are verified), for rows that finish inside an
accepted run (max_tokens, stop tokens), and for a batch of several rows;
the cache a finished row hands back must hold exactly its tokens; and the
drafts must actually be drafted and accepted (a prompt that repeats a long
run of tokens, which the tiny model's greedy output also loops on).
"""

from __future__ import annotations

import pytest

from tests.tiny_model import build_tiny_model
from worker.speculation import ADAPTIVE_MIN_DRAFTED, ADAPTIVE_PAUSE_STEPS, Speculation, find_draft

REPEATED = [5, 17, 99, 23, 4, 250, 31, 77, 8, 61] * 6


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model, loaded in this process."""
    from worker.loader import load_model

    return load_model(str(build_tiny_model(tmp_path_factory.mktemp("spec") / "model"))).model


def generate(model, prompts, max_tokens, spec=None, stop_tokens=None):
    """Greedy tokens per prompt (and the finished rows' cache lengths and
    token lists), with speculation ``spec`` or without."""
    from worker.batch_engine import BatchEngine
    from worker.sampling import greedy

    engine = BatchEngine(
        model, host_sampling=True, speculation=spec, stop_tokens=stop_tokens, sampler=greedy, prefill_step_size=16
    )
    uids = engine.insert(prompts, max_tokens=[max_tokens] * len(prompts))
    out: dict[int, list[int]] = {uid: [] for uid in uids}
    finished: dict[int, tuple[int, list[int]]] = {}
    for _ in range(10 * max_tokens):
        if len(finished) == len(uids):
            break
        _, responses = engine.next()
        for r in responses:
            out[r.uid].append(r.token)
            if r.finish_reason:
                finished[r.uid] = (r.prompt_cache[0].offset, list(r.all_tokens))
    engine.close()
    return [out[u] for u in uids], [finished[u] for u in uids]


def test_find_draft_prefers_latest_and_longest_match():
    history = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert find_draft(history, 3, 2) == [7, 8]
    assert find_draft([4, 5, 6, 4], 3, 4) == [5, 6, 4]
    assert find_draft([1, 2, 3], 3, 4) == []
    assert find_draft(history, 3, 0) == []


def test_adaptive_pauses_a_failing_row_then_retries():
    spec = Speculation(tokens=4, ngram=2)
    spec.record(1, ADAPTIVE_MIN_DRAFTED, 1)
    spec.record(2, ADAPTIVE_MIN_DRAFTED, ADAPTIVE_MIN_DRAFTED)
    assert [spec.enabled_for(1) for _ in range(ADAPTIVE_PAUSE_STEPS)] == [False] * ADAPTIVE_PAUSE_STEPS
    assert spec.enabled_for(1)
    assert spec.enabled_for(2) and spec.enabled_for(3)
    spec.record(1, ADAPTIVE_MIN_DRAFTED, 1)
    assert not spec.enabled_for(1)
    spec.forget(1)
    assert spec.enabled_for(1)
    spec.opt_out(4)
    assert not spec.enabled_for(4)


@pytest.mark.parametrize("max_tokens", [1, 2, 7, 40])
def test_lone_row_greedy_identical_and_cache_exact(model, max_tokens):
    plain, plain_done = generate(model, [REPEATED], max_tokens)
    spec = Speculation(tokens=6, ngram=3)
    fast, fast_done = generate(model, [REPEATED], max_tokens, spec)
    assert fast == plain
    assert fast_done == plain_done
    offset, tokens = fast_done[0]
    assert int(offset) == len(tokens) - 1 or int(offset) == len(tokens)
    if max_tokens >= 7:
        assert spec.drafted > 0 and spec.accepted > 0


def test_stop_token_inside_accepted_run(model):
    plain, _ = generate(model, [REPEATED], 40)
    stop = plain[0][12]  # a token the greedy output reaches mid-run
    expected, expected_done = generate(model, [REPEATED], 40, stop_tokens=[[stop]])
    fast, fast_done = generate(model, [REPEATED], 40, Speculation(tokens=8, ngram=2), stop_tokens=[[stop]])
    assert fast == expected and fast_done == expected_done
    assert fast[0][-1] == stop


def test_batch_of_rows_identical(model):
    prompts = [REPEATED, [3, 4, 5, 3, 4, 5, 3, 4], REPEATED[:23]]
    plain, _ = generate(model, prompts, 30)
    fast, _ = generate(model, prompts, 30, Speculation(tokens=5, ngram=3))
    assert fast == plain
