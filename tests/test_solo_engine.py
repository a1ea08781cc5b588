"""A model whose cache mlx-lm cannot batch (chunked attention, llama4) runs
on the batch engine one sequence at a time, with the answers of mlx-lm's own
single-sequence generation, and its stored states are independent copies of
the plain cache classes."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from mlx_lm import load  # noqa: E402
from mlx_lm.generate import generate_step  # noqa: E402
from mlx_lm.models.cache import ChunkedKVCache, load_prompt_cache, make_prompt_cache, save_prompt_cache  # noqa: E402

from tests.tiny_model import SLIDING_WINDOW, build_tiny_model  # noqa: E402
from worker.caches.profile import profile_model  # noqa: E402
from worker.engine.batch_engine import BatchEngine  # noqa: E402
from worker.engine.solo_cache import SoloBatch, solo_caches  # noqa: E402
from worker.sampling.samplers import greedy  # noqa: E402


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    model, tokenizer = load(str(build_tiny_model(tmp_path_factory.mktemp("llama4") / "m", family="llama4")))
    return model, tokenizer


def reference(model, prompt, tokens):
    """mlx-lm's single-sequence greedy tokens."""
    out = []
    for token, _ in generate_step(mx.array(prompt), model, max_tokens=tokens, sampler=greedy):
        out.append(int(token))
    return out


def run(engine, uids, tokens):
    got = {uid: [] for uid in uids}
    most = 0
    while any(len(v) < tokens for v in got.values()):
        _, responses = engine.step()
        most = max(most, len(responses))
        for r in responses:
            got[r.uid].append(r.token)
    return got, most


def test_solo_engine_serves_every_sequence_like_single_generation(llama4):
    model, tokenizer = llama4
    profile = profile_model(model)
    assert profile.solo and "ChunkedKVCache" in profile.unbatchable and not profile.trimmable
    prompts = [tokenizer.encode("chunked attention prompt " * n) for n in (2, 9, 5)]
    assert max(len(p) for p in prompts) > 2 * SLIDING_WINDOW  # the chunks roll over
    tokens = 10
    engine = BatchEngine(model, solo=True, max_tokens=tokens, stop_tokens=[], sampler=greedy, completion_batch_size=8)
    try:
        uids = engine.insert(prompts, max_tokens=[tokens] * len(prompts))
        got, most = run(engine, uids, tokens)
    finally:
        engine.close()
    assert most == 1  # one sequence at a time, whatever the configured batch
    assert [got[u] for u in uids] == [reference(model, p, tokens) for p in prompts]


def test_solo_extract_is_an_independent_plain_copy(llama4, tmp_path):
    model, tokenizer = llama4
    prompt = tokenizer.encode("state to keep " * 8)
    engine = BatchEngine(model, solo=True, max_tokens=4, stop_tokens=[], sampler=greedy)
    try:
        (uid,) = engine.insert([prompt], max_tokens=[4])
        run(engine, [uid], 2)
        stored, _ = engine.extract_cache([uid])[uid]
        before = [mx.array(c.state[0]) for c in stored]
        run(engine, [uid], 2)  # the live sequence goes on
    finally:
        engine.close()
    assert not any(isinstance(c, SoloBatch) for c in stored)
    assert type(stored[0]) is ChunkedKVCache
    assert all(mx.array_equal(b, c.state[0]).item() for b, c in zip(before, stored))
    path = str(tmp_path / "entry.safetensors")
    save_prompt_cache(path, stored)
    assert [type(c).__name__ for c in load_prompt_cache(path)] == [type(c).__name__ for c in stored]


def test_solo_caches_refuse_a_second_sequence(llama4):
    model, _ = llama4
    first, second = solo_caches(make_prompt_cache(model)), solo_caches(make_prompt_cache(model))
    assert type(first[0]).merge([first[0]]) is first[0]
    with pytest.raises(RuntimeError, match="batch of 2"):
        type(first[0]).merge([first[0], second[0]])
    with pytest.raises(RuntimeError, match="second sequence"):
        first[0].extend(second[0])
    with pytest.raises(RuntimeError, match="rows"):
        first[0].filter([0, 1])


def test_solo_engine_hands_back_plain_caches_of_a_sequence_not_yet_prefilled(llama4):
    model, tokenizer = llama4
    engine = BatchEngine(model, solo=True, max_tokens=4, stop_tokens=[], sampler=greedy)
    try:
        (uid,) = engine.insert([tokenizer.encode("never started")], max_tokens=[4])
        caches = engine.remove([uid], return_prompt_caches=True)
    finally:
        engine.close()
    cache, _ = caches[uid]
    assert cache and not any(isinstance(c, SoloBatch) for c in cache)
