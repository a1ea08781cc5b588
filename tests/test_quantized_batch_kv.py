"""Quantized KV for running sequences (worker/caches/quantized_batch.py, wired
through worker/engine/batch_engine.py, worker/model_setup.py and
worker/caches/prefix.py), on tiny random-weight models in this process.

- Batched rows (merged, some with tokens already held, prefilled in chunks
  with right padding, extended while others decode, filtered as they
  finish) give the same greedy tokens
  and log-probabilities as each sequence run alone on mlx-lm's own
  ``QuantizedKVCache`` (quantized from the first token), for every family
  whose plain KV layers can be quantized, at 8 and 4 bits.
- A prefix-cache hit continues from the quantized state as stored (never
  dequantized) and equals a cold run with the same ``kv_bits``.
- The KV profile the scheduler measures reports the quantized bytes per
  token: the exact sizes of data, scales and biases, about 1/2 and 1/4
  (plus scales) of float16's.
- Every family runs with ``kv_bits = 4``: those that cannot take quantized
  attention (attention sinks, multi-head latent attention, a head size the
  group size does not divide) fall back to full precision, logged, and
  every family's batched answers equal its answers alone.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from shared.config import ModelConfig
from tests.engine_driver import Ask, EngineDriver, solo_reference
from tests.tiny_model import FAMILIES, SOLO_FAMILIES, build_tiny_model

GROUP = 32
"""The group size of the tests' quantized KV (MLX's smallest)."""

WIDE = {"lfm2": {"num_attention_heads": 2, "num_key_value_heads": 1}}
"""Config overrides giving a family's attention heads 32 values (GROUP
divides them); :data:`WIDE_DEFAULT` for the families not listed."""

WIDE_DEFAULT = {"head_dim": 32}

FALLBACK = {"gpt_oss": "attention sinks", "deepseek_v3": "multi-head latent attention"}
"""Families whose live KV must stay in full precision, and why."""

BATCHED = [f for f in sorted(FAMILIES) if f not in FALLBACK and f not in SOLO_FAMILIES]
"""Quantizable families mlx-lm's batch engine batches."""

BASE = dict(max_batch_size=8, prefill_batch_size=2, prefill_step_size=16, speculative="none")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Every tiny family with 32-wide attention heads, built once."""
    root = tmp_path_factory.mktemp("kvq-models")
    return {
        name: build_tiny_model(root / name, family=name, overrides=WIDE.get(name, WIDE_DEFAULT))
        for name in sorted(FAMILIES)
    }


def _config(source: Path, **settings) -> ModelConfig:
    return ModelConfig(name="tiny", source=str(source), **{**BASE, **settings})


# -- (a) batched rows against mlx-lm's QuantizedKVCache alone -----------------

PROMPTS = [
    list(range(5, 28)),
    [7, 8, 9],
    [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100],
    [42, 43, 44, 45, 46, 47],
]
MAX_TOKENS = [14, 6, 11, 9]
ARRIVALS = {0: [0, 1], 3: [2], 5: [3]}
"""Engine step -> prompts inserted before it: two join together, two more
while those decode."""

PREFILLED = {0: 9, 1: 2, 3: 4}
"""Prompt -> tokens of it prefilled outside the batch (the engine's own
``prefill``, as for a prefix-cache hit) and inserted as its cache: such a
row merges into the batch with tokens already held, beside empty ones."""


def _alone(model, prompt: list[int], steps: int, bits: int) -> tuple[list[int], list[np.ndarray]]:
    """``prompt`` alone on mlx-lm's caches, every plain KV layer an mlx-lm
    ``QuantizedKVCache`` from the first token: greedy tokens and each
    step's log-probabilities."""
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache, QuantizedKVCache, make_prompt_cache

    cache = [
        QuantizedKVCache(group_size=GROUP, bits=bits) if type(c) is KVCache else c for c in make_prompt_cache(model)
    ]
    logits = model(mx.array([prompt]), cache=cache)[0, -1].astype(mx.float32)
    tokens, rows = [], []
    for _ in range(steps):
        row = np.asarray(logits - mx.logsumexp(logits))
        tokens.append(int(row.argmax()))
        rows.append(row)
        logits = model(mx.array([[tokens[-1]]]), cache=cache)[0, -1].astype(mx.float32)
    return tokens, rows


def _batched(model, bits: int) -> tuple[dict[int, list[tuple[int, np.ndarray]]], set[str]]:
    """:data:`PROMPTS` through the batch engine with ``kv_bits``, arriving
    as :data:`ARRIVALS` says: each prompt's (token, log-probabilities) and
    the cache classes the running batch held."""
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import TokenSampler, greedy

    engine = BatchEngine(
        model,
        host_sampling=True,
        stop_tokens=None,
        sampler=greedy,
        prefill_step_size=4,
        completion_batch_size=8,
        prefill_batch_size=2,
        kv_bits=bits,
        kv_group_size=GROUP,
    )
    by_uid: dict[int, int] = {}
    out: dict[int, list[tuple[int, np.ndarray]]] = {i: [] for i in range(len(PROMPTS))}
    kinds: set[str] = set()
    try:
        for step in range(200):
            for i in ARRIVALS.get(step, []):
                held = PREFILLED.get(i, 0)
                state = engine.prefill(None, PROMPTS[i][:held]) if held else None
                (uid,) = engine.insert(
                    [PROMPTS[i][held:]],
                    max_tokens=[MAX_TOKENS[i]],
                    caches=[state] if state is not None else None,
                    samplers=[TokenSampler(0.0, logprobs=True)],
                )
                by_uid[uid] = i
            _, responses = engine.step()
            kinds |= {type(c).__name__ for c in engine._generation_batch.prompt_cache}
            for r in responses:
                out[by_uid[r.uid]].append((r.token, np.asarray(r.logprobs)))
            if step > max(ARRIVALS) and all(len(out[i]) == MAX_TOKENS[i] for i in out):
                break
    finally:
        engine.close()
    return out, kinds


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("family", BATCHED)
def test_batched_rows_equal_each_sequence_alone_on_mlx_lm_quantized_cache(models, family, bits):
    from worker.loading.loader import load_model

    model = load_model(str(models[family])).model
    got, kinds = _batched(model, bits)
    assert "QuantizedBatchKVCache" in kinds and "BatchKVCache" not in kinds, kinds
    for i, prompt in enumerate(PROMPTS):
        tokens, rows = _alone(model, prompt, MAX_TOKENS[i], bits)
        assert [t for t, _ in got[i]] == tokens, f"{family} prompt {i}"
        for step, ((_, row), expected) in enumerate(zip(got[i], rows)):
            worst = float(np.max(np.abs(row - expected)))
            assert worst < 2e-3, f"{family} prompt {i} step {step}: log-probabilities differ by {worst}"


def test_quantized_rows_differ_from_full_precision(models):
    """The comparison above can tell: full-precision KV gives other
    log-probabilities than 4-bit KV (so equal rows mean quantized rows)."""
    from worker.loading.loader import load_model

    model = load_model(str(models["llama"])).model
    got, _ = _batched(model, 4)
    plain, _ = _batched(model, 0)
    worst = max(float(np.max(np.abs(a[1] - b[1]))) for a, b in zip(got[0], plain[0]))
    assert worst > 1e-2


# -- (b) a prefix-cache hit with quantized state ---------------------------------


@pytest.mark.parametrize(
    "family,bits", [("llama", 8), ("llama", 4), ("gemma3_text", 4), ("qwen3_next", 4), ("llama4", 4)]
)
def test_prefix_hit_continues_from_the_quantized_state_as_a_cold_run(models, family, bits):
    """A repeated prompt and a continuation of an answer reuse the stored
    quantized state (handed out as mlx-lm's ``QuantizedKVCache``, never
    dequantized) and answer exactly as the same asks cold with ``kv_bits``."""
    from mlx_lm.models.cache import KVCache, QuantizedKVCache

    config = _config(models[family], kv_bits=bits, kv_group_size=GROUP, prefix_cache_bytes=1 << 28)
    first = Ask("first", max_tokens=40, prompt=tuple(range(10, 70)), frequency_penalty=1.5)
    driver = EngineDriver(config)
    try:
        assert driver.kv_bits == bits
        driver.submit(first)
        driver.run_until_idle()
        answer = driver.outcomes["first"].tokens[0]
        again = Ask("again", max_tokens=40, prompt=first.prompt, frequency_penalty=1.5)
        more = Ask("more", max_tokens=30, prompt=(*first.prompt, *answer, 500, 501, 502), frequency_penalty=1.5)
        driver.submit(again)
        driver.submit(more)
        driver.run_until_idle()
        found = driver.scheduler.cache.fetch(list(more.prompt))
        layers = [c for c in found.cache or [] if isinstance(c, (KVCache, QuantizedKVCache))]
        assert layers and all(type(c) is QuantizedKVCache and c.bits == bits for c in layers), layers
    finally:
        driver.close()
    assert driver.outcomes["again"].cached >= len(first.prompt) - 1
    assert driver.outcomes["more"].cached >= len(first.prompt)
    cold = solo_reference(config, [first, again, more])
    for ask in (first, again, more):
        outcome = driver.outcomes[ask.request_id]
        assert not outcome.terminals and driver.refused == 0
        assert outcome.tokens == cold[ask.key()], f"{family} {ask.request_id}"


# -- (c) the KV profile at 16, 8 and 4 bits ----------------------------------------


def test_kv_profile_reports_quantized_bytes_per_token(tmp_path):
    """float16 llama, 2 layers, 2 KV heads of 64 values, group 64: per token
    float16 holds 2 layers x (K+V) x 2 heads x 64 x 2 B = 1024 B; b bits
    hold 2 x 2 x 2 x (64 b/8 B of data + 2 x 2 B of scale and bias)."""
    source = build_tiny_model(tmp_path / "f16", dtype="float16", overrides={"head_dim": 64})
    measured = {}
    for bits in (0, 8, 4):
        config = _config(source, dtype="float16", kv_bits=bits, kv_group_size=64, kv_budget="1GiB")
        driver = EngineDriver(config)
        try:
            assert driver.kv_bits == bits
            measured[bits] = driver.scheduler._ledger.profile.per_token
            driver.submit(Ask("r", max_tokens=20, prompt=tuple(range(5, 45)), frequency_penalty=1.5))
            engine = driver.scheduler._engine
            driver.turn()
            while driver.busy and not engine._generation_batch.prompt_cache:
                driver.turn()
            live = engine._generation_batch.prompt_cache
            kinds = {type(c).__name__ for c in live}
            assert kinds == ({"BatchKVCache"} if bits == 0 else {"QuantizedBatchKVCache"}), kinds
            driver.run_until_idle()
        finally:
            driver.close()
    layers, sides, heads, dim = 2, 2, 2, 64
    expected = {
        0: layers * sides * heads * dim * 2,
        8: layers * sides * heads * (dim * 8 // 8 + 2 * 2 * dim // 64),
        4: layers * sides * heads * (dim * 4 // 8 + 2 * 2 * dim // 64),
    }
    assert expected == {0: 1024, 8: 544, 4: 288}
    assert measured == expected
    assert 0.5 < measured[8] / measured[0] < 0.55
    assert 0.25 < measured[4] / measured[0] < 0.3


# -- (d) every family with kv_bits = 4 ----------------------------------------------


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_runs_with_kv_bits_4_falling_back_where_it_must(models, family, caplog):
    """Three asks together, then a repeat of one (a prefix hit): every
    answer equals the same ask alone with the same settings; the families
    that cannot quantize their live KV say why and run in full precision
    (their prefix entries are still stored quantized and handed out
    dequantized, so only their repeat may differ from a cold run)."""
    config = _config(models[family], kv_bits=4, kv_group_size=GROUP, prefix_cache_bytes=1 << 28)
    asks = [
        Ask(f"r{i}", max_tokens=n, prompt=tuple(range(3 + i, 3 + i + length)), frequency_penalty=1.5)
        for i, (length, n) in enumerate([(30, 24), (12, 18), (45, 20)])
    ]
    repeat = Ask("repeat", max_tokens=24, prompt=asks[0].prompt, frequency_penalty=1.5)
    with caplog.at_level(logging.WARNING, logger="mlxd.worker"):
        driver = EngineDriver(config)
    try:
        if family in FALLBACK:
            assert driver.kv_bits == 0
            assert any(FALLBACK[family] in r.getMessage() for r in caplog.records), caplog.text
        else:
            assert driver.kv_bits == 4
        for ask in asks:
            driver.submit(ask)
        driver.run_until_idle()
        driver.submit(repeat)
        driver.run_until_idle()
    finally:
        driver.close()
    reference = solo_reference(config, [*asks, repeat])
    for ask in (*asks, repeat):
        outcome = driver.outcomes[ask.request_id]
        assert outcome.ended and not outcome.terminals, (family, outcome)
        if ask is repeat and family in FALLBACK:
            continue  # continues from a dequantized entry: rounded KV, may differ (documented)
        assert outcome.tokens == reference[ask.key()], f"{family} {ask.request_id}"
    assert driver.outcomes["repeat"].cached > 0


def test_a_head_size_the_group_does_not_divide_falls_back(tmp_path, caplog):
    """The default tiny llama's heads hold 16 values: no group size divides
    them, so its live KV stays in full precision (logged)."""
    source = build_tiny_model(tmp_path / "narrow")
    with caplog.at_level(logging.WARNING, logger="mlxd.worker"):
        driver = EngineDriver(_config(source, kv_bits=8, kv_group_size=GROUP))
    try:
        assert driver.kv_bits == 0
        assert "not a multiple of kv_group_size" in caplog.text
        ask = Ask("r", max_tokens=12, prompt=tuple(range(5, 25)), frequency_penalty=1.5)
        driver.submit(ask)
        driver.run_until_idle()
        assert driver.outcomes["r"].ended and not driver.outcomes["r"].terminals
    finally:
        driver.close()


# -- speculative verification on quantized rows -------------------------------------


def test_speculative_steps_on_quantized_rows_keep_greedy_answers(models, monkeypatch):
    """Drafts verified inside a quantized batch (several rows: the batch is
    trimmed and rows re-padded after each verification) leave every greedy
    answer as the same ask alone without speculation, with the same
    ``kv_bits``; drafts were made and some accepted."""
    monkeypatch.setenv("MLXD_SPECULATION_TIMING", "0")
    config = _config(models["llama"], kv_bits=4, kv_group_size=GROUP, speculative="prompt_lookup", speculative_tokens=4)
    pattern = (11, 12, 13, 14, 15, 16, 17, 18)
    prompts = [pattern * 6, tuple(range(300, 340)), (21, 22, 23) * 9, (40, 41) * 12 + (7, 8, 9)]
    asks = [Ask(f"r{i}", max_tokens=24 + 4 * i, prompt=p) for i, p in enumerate(prompts)]
    driver = EngineDriver(config)
    try:
        assert driver.kv_bits == 4 and driver.speculating
        for ask in asks:
            driver.submit(ask)
        driver.run_until_idle()
        spec = driver.scheduler.speculation
        drafted, accepted = spec.drafted, spec.accepted
    finally:
        driver.close()
    assert drafted > 0 and accepted > 0, (drafted, accepted)
    reference = solo_reference(config, asks)
    for ask in asks:
        outcome = driver.outcomes[ask.request_id]
        assert not outcome.terminals
        assert outcome.tokens == reference[ask.key()], ask.request_id


def test_the_disk_tier_keeps_quantized_states_across_a_restart(models, tmp_path):
    """A quantized state written by the disk tier loads after a restart as
    mlx-lm's ``QuantizedKVCache`` (the class names it records) and the hit
    answers as a cold run with the same ``kv_bits``."""
    config = _config(
        models["llama"],
        kv_bits=8,
        kv_group_size=GROUP,
        prefix_cache_bytes=1 << 28,
        disk_cache_bytes=64 << 20,
        disk_cache_dir=str(tmp_path / "disk"),
    )
    ask = Ask("first", max_tokens=20, prompt=tuple(range(40, 200)), frequency_penalty=1.5)
    again = Ask("again", max_tokens=20, prompt=(*ask.prompt, 7, 8, 9), frequency_penalty=1.5)
    first = EngineDriver(config)
    try:
        first.submit(ask)
        first.run_until_idle()
    finally:
        first.close()
    second = EngineDriver(config)
    try:
        second.submit(again)
        second.run_until_idle()
        disk = second.scheduler.cache.disk
        assert disk.stats.hits == 1 and disk.stats.rejected == 0, disk.stats
    finally:
        second.close()
    assert second.outcomes["again"].cached >= len(ask.prompt) - 1
    cold = solo_reference(config, [again])
    assert second.outcomes["again"].tokens == cold[again.key()]


# -- the batch cache alone, on random keys and values ----------------------------


def test_batch_operations_keep_each_row_equal_to_its_own_quantized_cache():
    """Rows merged with different lengths (one empty), extended by a batch
    with nothing fed yet, fed together, filtered and extracted hold exactly
    what each row's own mlx-lm ``QuantizedKVCache`` holds when fed the same
    vectors (bit for bit: each token is quantized on its own)."""
    import mlx.core as mx
    from mlx_lm.models.cache import QuantizedKVCache

    from worker.caches.quantized_batch import QuantizedBatchKVCache, as_rows

    heads, dim, bits = 2, 64, 4
    mx.random.seed(3)

    def vectors(rows: int, n: int) -> tuple[mx.array, mx.array]:
        return mx.random.normal((rows, heads, n, dim)), mx.random.normal((rows, heads, n, dim))

    alone = [QuantizedKVCache(group_size=GROUP, bits=bits) for _ in range(4)]

    def feed_alone(i: int, keys: mx.array, values: mx.array) -> None:
        alone[i].update_and_fetch(keys, values)

    held = []
    for i, n in enumerate([5, 0, 3]):
        row = QuantizedKVCache(group_size=GROUP, bits=bits)
        if n:
            k, v = vectors(1, n)
            row.update_and_fetch(k, v)
            feed_alone(i, k, v)
        held.append(as_rows([row], bits, GROUP)[0])
    batch = held[0].merge(held)
    assert isinstance(batch, QuantizedBatchKVCache) and batch.left_padding.tolist() == [0, 5, 2]
    later = QuantizedBatchKVCache.merge([QuantizedKVCache(group_size=GROUP, bits=bits)])
    assert later.keys is None
    batch.extend(later)
    for _ in range(3):
        k, v = vectors(4, 1)
        batch.update_and_fetch(k, v)
        for i in range(4):
            feed_alone(i, k[i : i + 1], v[i : i + 1])
    kept = [1, 2, 3]  # the longest row leaves: the others' common left padding is dropped
    batch.filter(kept)
    assert batch.left_padding.tolist() == [3, 0, 3]
    k, v = vectors(3, 2)
    batch.update_and_fetch(k, v)
    for j, i in enumerate(kept):
        feed_alone(i, k[j : j + 1], v[j : j + 1])
    for j, i in enumerate(kept):
        row = batch.extract(j)
        assert type(row) is QuantizedKVCache and row.offset == alone[i].offset
        for got, want in zip((*row.keys, *row.values), (*alone[i].keys, *alone[i].values)):
            assert mx.array_equal(got, want[..., : alone[i].offset, :]).item(), (i, got.shape, want.shape)
    assert batch.nbytes == sum(x.nbytes for x in (*batch.keys, *batch.values))
