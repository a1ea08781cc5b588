"""A prompt-end checkpoint is the state of exactly its prefix, also when the
prompt's prefill ends while other sequences decode (the case a joining
prompt is moved into the decoding batch early).

For every family whose cache cannot be trimmed (checkpoints are how it
reuses prompts): one request decodes a long answer while a second, new
prompt is prefilled beside it; after both end, the second prompt is sent
again. The repeat must reuse all but its last token and answer exactly as
the same request does alone on a cache-less twin.
"""

from __future__ import annotations

import random

import pytest

from shared.config import ModelConfig
from tests.engine_driver import Ask, EngineDriver, solo_reference
from tests.tiny_model import build_tiny_model

UNTRIMMABLE = ("gemma3_text", "qwen3_next", "lfm2", "nemotron_h", "gpt_oss")


@pytest.mark.parametrize("family", UNTRIMMABLE)
def test_a_checkpoint_taken_beside_a_decode_is_the_state_of_its_prefix(family, tmp_path_factory):
    path = build_tiny_model(tmp_path_factory.mktemp(family) / "model", family=family)
    config = ModelConfig(name=family, source=str(path), prefill_step_size=32, prefill_batch_size=2, max_batch_size=8)
    rng = random.Random(7)
    long_answer = Ask("decoding", max_tokens=60, prompt=tuple(rng.randrange(200, 40000) for _ in range(24)))
    new_prompt = tuple(rng.randrange(200, 40000) for _ in range(150))
    first = Ask("first", max_tokens=6, prompt=new_prompt)
    repeat = Ask("repeat", max_tokens=6, prompt=new_prompt)
    expected = solo_reference(config, [first])[first.key()]

    driver = EngineDriver(config)
    try:
        driver.submit(long_answer)
        while not driver.outcomes["decoding"].tokens:
            driver.turn()
        driver.submit(first)
        driver.run_until_idle()
        assert driver.outcomes["decoding"].tokens[0][-1:] and not driver.outcomes["decoding"].terminals
        driver.submit(repeat)
        driver.run_until_idle()
    finally:
        driver.close()
    assert driver.outcomes["first"].tokens == expected
    assert driver.outcomes["repeat"].cached == len(new_prompt) - 1
    assert driver.outcomes["repeat"].tokens == expected
    assert driver.refused == 0


def test_a_state_that_does_not_hold_its_keys_tokens_is_never_stored():
    """The prefix cache stores a state only under a key of exactly the
    tokens its KV layers hold; anything else is refused and counted (a
    later lookup misses instead of continuing from a wrong state)."""
    import mlx.core as mx
    from mlx_lm.models.cache import ArraysCache, KVCache

    from worker.caches.prefix import PrefixCache

    def state(tokens: int) -> list:
        layer = KVCache()
        layer.update_and_fetch(mx.zeros((1, 2, tokens, 8)), mx.zeros((1, 2, tokens, 8)))
        recurrent = ArraysCache(1)
        recurrent[0] = mx.ones((1, 4))
        return [layer, recurrent]

    cache = PrefixCache("m", 1 << 24)
    cache.insert(list(range(5)), state(6))
    assert (cache.entries, cache.refused) == (0, 1)
    assert cache.fetch(list(range(8))).cached == 0
    cache.insert(list(range(6)), state(6))
    assert (cache.entries, cache.refused) == (1, 1)
    assert cache.fetch(list(range(8))).cached == 6
