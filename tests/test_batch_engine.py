"""The worker's decode step (worker/engine/batch_engine.py) against mlx-lm's own engine,
and host sampling (worker/sampling/samplers.py ``TokenSampler.sample_host``).

Runs the tiny random-weight model in this process: greedy tokens and
log-probabilities from :class:`worker.engine.batch_engine.BatchEngine`, on its host (NumPy)
and device (MLX) paths, must equal what mlx-lm's stock ``BatchGenerator``
produces for the same prompts.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.tiny_model import build_tiny_model

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], [100, 200, 300, 400, 500, 600, 700], [42, 43]]
STEPS = 10


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model, loaded in this process."""
    from worker.loading.loader import load_model

    return load_model(str(build_tiny_model(tmp_path_factory.mktemp("decode") / "model"))).model


def run(engine, samplers=None) -> dict[int, list[tuple[int, object]]]:
    """Generate STEPS tokens for every prompt; return uid -> [(token, logprobs)]."""
    uids = engine.insert(PROMPTS, max_tokens=[STEPS] * len(PROMPTS), samplers=samplers)
    out: dict[int, list[tuple[int, object]]] = {uid: [] for uid in uids}
    while any(len(v) < STEPS for v in out.values()):
        _, responses = engine.next()
        for r in responses:
            out[r.uid].append((r.token, r.logprobs))
    return {i: out[uid] for i, uid in enumerate(uids)}


def stock(model):
    from mlx_lm.generate import BatchGenerator

    from worker.sampling.samplers import greedy

    return run(BatchGenerator(model, stop_tokens=None, sampler=greedy, prefill_step_size=4))


def lean(model, host: bool, samplers=None):
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    engine = BatchEngine(model, host_sampling=host, stop_tokens=None, sampler=greedy, prefill_step_size=4)
    return run(engine, samplers)


@pytest.mark.parametrize("host", [True, False], ids=["host", "device"])
def test_plain_greedy_matches_mlx_lm_and_skips_normalizing(model, host):
    expected = stock(model)
    got = lean(model, host)
    for i in range(len(PROMPTS)):
        assert [t for t, _ in got[i]] == [t for t, _ in expected[i]]
        assert all(lp is None for _, lp in got[i])  # nothing was normalized


@pytest.mark.parametrize("host", [True, False], ids=["host", "device"])
def test_mixed_batch_logprob_rows_match_mlx_lm(model, host):
    """Rows 1 and 3 ask for log-probabilities, rows 0 and 2 do not: tokens
    stay greedy everywhere, and the normalized rows equal mlx-lm's."""
    from worker.sampling.samplers import TokenSampler

    expected = stock(model)
    samplers = [None, TokenSampler(0.0, logprobs=True), None, TokenSampler(0.0, logprobs=True)]
    got = lean(model, host, samplers)
    for i in range(len(PROMPTS)):
        assert [t for t, _ in got[i]] == [t for t, _ in expected[i]]
        for (token, lp), (_, ref) in zip(got[i], expected[i]):
            if samplers[i] is None:
                assert lp is None
            else:
                np.testing.assert_allclose(np.asarray(lp), np.asarray(ref), atol=1e-4)
                assert math.isclose(float(np.asarray(lp).max()), float(np.asarray(lp)[token]))


@pytest.mark.parametrize("host", [True, False], ids=["host", "device"])
def test_seeded_sampling_repeats_and_seeds_differ(model, host):
    from worker.sampling.samplers import TokenSampler

    def sampled(seed: int) -> list[int]:
        samplers = [TokenSampler(1.5, seed=seed), None, TokenSampler(1.0, top_k=50, seed=seed + 1), None]
        got = lean(model, host, samplers)
        return [t for t, _ in got[0]] + [t for t, _ in got[2]]

    first = sampled(11)
    assert sampled(11) == first
    assert sampled(12) != first  # random weights: near-uniform over 49k tokens


def test_host_sampler_filters():
    from worker.sampling.samplers import TokenSampler

    logprobs = np.log(np.array([0.05, 0.5, 0.3, 0.1, 0.05], dtype=np.float32))
    draws = lambda sampler, n=400: [sampler.sample_host(logprobs) for _ in range(n)]  # noqa: E731
    assert set(draws(TokenSampler(0.0))) == {1}
    assert set(draws(TokenSampler(1.0, top_k=1, seed=1))) == {1}
    assert set(draws(TokenSampler(1.0, top_k=2, seed=2))) == {1, 2}
    assert set(draws(TokenSampler(1.0, min_p=0.5, seed=3))) == {1, 2}  # 0.3 >= 0.5 * 0.5
    assert set(draws(TokenSampler(1.0, top_p=0.45, seed=4))) == {1}  # 0.5 alone covers 0.45
    assert set(draws(TokenSampler(1.0, top_p=0.75, seed=5))) == {1, 2}
    assert set(draws(TokenSampler(1e-4, seed=6))) == {1}  # tiny temperature: nearly greedy
    counts = np.bincount(draws(TokenSampler(1.0, seed=7), 8000), minlength=5) / 8000
    np.testing.assert_allclose(counts, np.exp(logprobs), atol=0.025)
    assert draws(TokenSampler(1.0, seed=8), 50) == draws(TokenSampler(1.0, seed=8), 50)
    assert draws(TokenSampler(1.0, seed=8), 50) != draws(TokenSampler(1.0, seed=9), 50)


def test_host_log_softmax_matches_mlx():
    import mlx.core as mx

    from worker.sampling.samplers import host_log_softmax

    logits = np.random.default_rng(0).normal(scale=5.0, size=(3, 1000)).astype(np.float32)
    ref = mx.array(logits) - mx.logsumexp(mx.array(logits), axis=-1, keepdims=True)
    np.testing.assert_allclose(host_log_softmax(logits), np.asarray(ref), atol=1e-4)


def joining_run(model, ours: bool) -> tuple[dict[int, list[int]], int]:
    """Start two prompts decoding, then insert a third while they decode;
    return prompt index -> greedy tokens and how many steps after its
    insertion the third prompt's first token came out, on the worker's
    engine (``ours``) or on mlx-lm's own with the same batch sizes."""
    from mlx_lm.generate import BatchGenerator

    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    settings = dict(stop_tokens=None, sampler=greedy, prefill_step_size=4, prefill_batch_size=1)
    if ours:
        engine = BatchEngine(model, host_sampling=True, **settings)
        step = engine.step
    else:
        engine = BatchGenerator(model, **settings)
        step = engine.next
    first = engine.insert(PROMPTS[:2], max_tokens=[STEPS] * 2)
    out: dict[int, list[int]] = {uid: [] for uid in first}
    while not all(out.values()):
        for r in step()[1]:
            out[r.uid].append(r.token)
    (late,) = engine.insert([PROMPTS[2]], max_tokens=[STEPS])
    out[late] = []
    steps = 0
    while any(len(v) < STEPS for v in out.values()):
        steps += 1
        for r in step()[1]:
            if r.uid == late and not out[late]:
                waited = steps
            out[r.uid].append(r.token)
    return {i: out[uid] for i, uid in enumerate([*first, late])}, waited


def test_a_prompt_joining_a_decoding_batch_gets_its_first_token_a_step_sooner(model):
    """The joining prompt's first token comes out one engine step earlier
    than on mlx-lm's own engine, and every sequence's greedy tokens are
    the same (and as mlx-lm's engine gives each prompt alone)."""
    stock_tokens, stock_steps = joining_run(model, ours=False)
    our_tokens, our_steps = joining_run(model, ours=True)
    assert our_tokens == stock_tokens
    assert our_steps == stock_steps - 1
    expected = stock(model)
    for i in range(3):
        assert our_tokens[i] == [t for t, _ in expected[i]]


def test_between_steps_a_cache_holds_what_the_last_progress_reported(model):
    """After every step, each sequence still in prefill holds exactly the
    prompt tokens its last progress response counted (a prompt checkpoint
    copied then is the state of that prefix), also for a prompt that
    finishes its prefill while others decode."""
    from worker.caches.profile import held_tokens
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    engine = BatchEngine(
        model, host_sampling=True, stop_tokens=None, sampler=greedy, prefill_step_size=4, prefill_batch_size=1
    )
    engine.insert(PROMPTS[:2], max_tokens=[STEPS] * 2)
    while engine.running < 2:
        engine.step()
    prompt = list(range(300, 330))
    (late,) = engine.insert_segments([[prompt[:-1], prompt[-1:]]], max_tokens=[STEPS])
    seen = []
    while True:
        progress, _ = engine.step()
        for r in progress:
            if r.uid != late:
                continue
            cache, tokens = engine.extract_cache([late])[late]
            seen.append((r.progress[0], r.end_of_prompt))
            if not r.end_of_prompt:
                assert held_tokens(cache) == r.progress[0] == len(tokens)
        if seen and seen[-1][1]:
            break
    assert (len(prompt) - 1, False) in seen and seen[-1] == (len(prompt), True)
