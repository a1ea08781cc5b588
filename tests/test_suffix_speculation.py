"""Suffix drafting across requests and the drafting controller
(worker/speculation/suffix_index.py, drafting.py, controller.py).

The index: longest-match drafts, scopes kept apart, a finished row's
sequence kept (and the earlier turn it repeats dropped), the token budget.
(The drafting controller's own tests: tests/unit/test_draft_controller.py.)
Through the engine with the tiny random models: greedy
output with suffix drafting equals output without speculation, for every
family speculation serves, and a request repeated after an earlier one
drafts from that one's output (even on a family whose output never repeats
itself), but not across API keys.
"""

from __future__ import annotations

import pytest

from tests.test_speculation import NEVER_REPEATS, PROMPTS, assert_cache_holds, generate
from tests.tiny_model import build_tiny_model
from worker.speculation.drafting import SUFFIX_ORDERS, Speculation
from worker.speculation.suffix_index import TokenIndex

# -- the index ------------------------------------------------------------------


def test_match_prefers_the_longest_agreement_then_the_recent():
    index = TokenIndex((4, 2))
    index.extend(1, [1, 2, 3, 4, 10, 11, 9, 3, 4, 20, 21])
    index.settle(1)
    # ends with 3 4 after 2: the first place agrees longer (2 3 4)
    assert index.match([7, 2, 3, 4], 2) == (3, [10, 11])
    # only the bigram agrees: the more recent place wins
    assert index.match([8, 3, 4], 2) == (2, [20, 21])
    assert index.match([5, 6], 3) == (0, [])
    assert index.match([3, 4], 0) == (0, [])


def test_a_running_sequence_drafts_from_itself_but_not_past_its_end():
    index = TokenIndex((2,))
    index.extend(1, [5, 6, 7, 8, 5, 6])
    assert index.match([5, 6], 4)[1] == [7, 8, 5, 6]
    index.extend(1, [7])
    assert index.match([5, 6, 7], 2)[1] == [8, 5]


def test_scopes_never_see_each_other():
    index = TokenIndex((2,))
    index.extend(1, [1, 2, 3, 4], scope="key-a")
    index.settle(1)
    assert index.match([1, 2], 2, scope="key-a")[1] == [3, 4]
    assert index.match([1, 2], 2, scope="key-b") == (0, [])
    assert index.match([1, 2], 2) == (0, [])


def test_settling_drops_the_earlier_turn_it_repeats_and_the_budget_evicts_oldest():
    index = TokenIndex((2,), budget=12)
    index.extend(1, [1, 2, 3])
    index.settle(1)
    index.extend(2, [1, 2, 3, 4, 5])  # the next turn re-sends turn 1
    index.settle(2)
    assert 1 not in index and 2 in index and index.tokens == 5
    index.extend(3, [9, 9, 8, 8, 7, 7, 6])
    assert 2 in index  # 12 tokens: within the budget
    index.extend(3, [6])
    assert 2 not in index and index.tokens == 8  # over: the oldest settled sequence went
    index.extend(4, list(range(100, 120)))
    assert 3 in index and 4 in index  # running sequences are never dropped
    assert index.match([100, 101], 3)[1] == [102, 103, 104]
    index.drop(4)
    index.drop(3)
    assert index.tokens == 0 and not index._places


# -- through the engine --------------------------------------------------------------


def suffix_spec(**kwargs) -> Speculation:
    return Speculation(tokens=5, index=TokenIndex(SUFFIX_ORDERS), **kwargs)


@pytest.fixture(scope="module", params=["llama", "qwen3", "deepseek_v3", "qwen3_next", "lfm2", "nemotron_h"])
def family_model(request, tmp_path_factory):
    """A tiny model of each family speculation serves, as ``(family, model)``."""
    from worker.loading.loader import load_model

    root = tmp_path_factory.mktemp(f"suffix-{request.param}")
    return request.param, load_model(str(build_tiny_model(root / "model", family=request.param))).model


def run_after(model, spec, earlier, prompts, max_tokens, scope=""):
    """Run ``earlier`` then ``prompts`` through engines sharing ``spec``,
    every row begun in ``scope`` and forgotten with its tokens when it
    finishes (as the scheduler does); the second run's tokens and caches."""
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    results = []
    for batch in (earlier, prompts):
        engine = BatchEngine(model, host_sampling=True, speculation=spec, sampler=greedy, prefill_step_size=16)
        uids = engine.insert(batch, max_tokens=[max_tokens] * len(batch))
        for uid in uids:
            spec.begin(uid, scope)
        out = {uid: [] for uid in uids}
        caches = {}
        while len(caches) < len(uids):
            _, responses = engine.next()
            for r in responses:
                out[r.uid].append(r.token)
                if r.finish_reason:
                    caches[r.uid] = (r.prompt_cache, list(r.all_tokens))
                    spec.forget(r.uid, list(r.all_tokens))
        engine.close()
        results.append(([out[u] for u in uids], [caches[u] for u in uids]))
    assert spec.idle
    return results[1]


def test_suffix_drafting_is_exact_per_family(family_model):
    family, model = family_model
    plain, plain_done = generate(model, PROMPTS, 24)
    spec = suffix_spec()
    fast, fast_done = generate(model, PROMPTS, 24, spec, opted_out=(1,))
    assert fast == plain and fast_done == plain_done
    assert family in NEVER_REPEATS or spec.accepted > 0


def test_a_repeated_request_drafts_from_the_earlier_output_per_family(family_model):
    family, model = family_model
    plain, _ = generate(model, PROMPTS, 24)
    spec = suffix_spec()
    # the earlier requests: the same prompts with their first token changed
    earlier = [[p[0] + 1, *p[1:]] for p in PROMPTS]
    fast, caches = run_after(model, spec, earlier, PROMPTS, 24)
    drafted, accepted = spec.drafted, spec.accepted
    assert fast == plain
    for cache, tokens in caches:
        assert_cache_holds(model, cache, tokens)
    # a second run of the very same prompts copies the first run's output
    again = suffix_spec()
    fast, _ = run_after(model, again, PROMPTS, PROMPTS, 24)
    assert fast == plain
    assert again.accepted >= 0.8 * sum(len(p) - 1 for p in plain), (family, again.accepted, again.drafted)
    assert again.accepted > accepted or accepted >= 0.8 * drafted


def test_another_keys_requests_are_not_drafted_from(tmp_path):
    """On a family whose output never repeats itself (so nothing is
    accepted but from an earlier request), the same request under another
    key gets nothing from the first key's."""
    from worker.loading.loader import load_model

    assert "nemotron_h" in NEVER_REPEATS
    model = load_model(str(build_tiny_model(tmp_path / "model", family="nemotron_h"))).model
    plain, _ = generate(model, PROMPTS[:1], 24)
    spec = suffix_spec()
    engine_prompts = PROMPTS[:1]
    # the earlier request under key a; the same request under key b
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    for scope in ("key-a", "key-b"):
        engine = BatchEngine(model, host_sampling=True, speculation=spec, sampler=greedy, prefill_step_size=16)
        (uid,) = engine.insert(engine_prompts, max_tokens=[24])
        spec.begin(uid, scope)
        tokens = []
        while True:
            _, responses = engine.next()
            tokens += [r.token for r in responses]
            done = [r for r in responses if r.finish_reason]
            if done:
                spec.forget(uid, list(done[0].all_tokens))
                break
        engine.close()
        assert tokens == plain[0]
        if scope == "key-a":
            first = spec.accepted
    assert spec.accepted == first == 0
    # the same key: the earlier output is drafted from
    engine = BatchEngine(model, host_sampling=True, speculation=spec, sampler=greedy, prefill_step_size=16)
    (uid,) = engine.insert(engine_prompts, max_tokens=[24])
    spec.begin(uid, "key-a")
    tokens, finished = [], False
    while not finished:
        _, responses = engine.next()
        tokens += [r.token for r in responses]
        finished = any(r.finish_reason for r in responses)
    engine.close()
    assert tokens == plain[0] and spec.accepted > 0
