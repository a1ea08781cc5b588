"""The KV budget (worker/engine/kv_budget.py and the scheduler's memory
queue in worker/engine/admission.py), driven turn by turn in this process
on tiny random-weight models of every cache family.

- The cost the ledger books for the rows bounds the bytes mlx-lm's batch
  caches really hold, after every step, for every family (plain, windowed,
  recurrent, attention sinks, MLA, chunked attention).
- Under a budget too small for the whole burst, requests wait, the newest
  rows are preempted and resumed (state kept in the prefix cache, or
  recomputed without one), and every greedy answer equals the same request
  run alone without a budget.
- A prompt that cannot fit alone is refused with ``context_length_exceeded``;
  an output that could not is cut (finish ``length``); a request waiting for
  memory can be cancelled or time out, and gets exactly one terminal.
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest

from shared.config import ModelConfig
from tests.engine_driver import Ask, EngineDriver, solo_reference
from tests.tiny_model import FAMILIES, build_tiny_model
from worker.engine.kv_budget import TRANSIENT

BASE = dict(max_batch_size=8, prefill_batch_size=2, prefill_step_size=32, speculative="none")

SHORT_LOOKAHEAD = 32
"""The lookahead of the ledgers the preemption tests drive (the
scheduler's is ``LOOKAHEAD``, 256 tokens): a row outgrows its booking
after 32 tokens, so answers of about 100 tokens make rows wait and be
preempted, where the default needs 300-token answers and three times the
steps (what the tests check holds for any lookahead)."""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Every tiny family's model directory, built once."""
    root = tmp_path_factory.mktemp("kv-budget-models")
    return {name: build_tiny_model(root / name, family=name) for name in sorted(FAMILIES)}


def _asks(seed: int, count: int, prompt: tuple[int, int], output: tuple[int, int]) -> list[Ask]:
    rng = random.Random(seed)
    return [
        Ask(
            f"r{i}",
            max_tokens=rng.randint(*output),
            prompt=tuple(rng.randint(5, 500) for _ in range(rng.randint(*prompt))),
            frequency_penalty=1.5,
        )
        for i in range(count)
    ]


def _live_bytes(driver: EngineDriver) -> int:
    """Bytes mlx-lm's batch caches (prompts being prefilled, rows decoding) hold now."""
    from mlx.utils import tree_flatten

    def size(layer) -> int:
        inner = getattr(layer, "caches", None)
        if isinstance(inner, (list, tuple)):
            return sum(size(c) for c in inner)
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if keys is not None and values is not None and not isinstance(keys, (list, tuple)):
            return keys.nbytes + values.nbytes  # the whole buffers, not the filled part the state shows
        return sum(getattr(a, "nbytes", 0) for _, a in tree_flatten(layer.state))

    engine = driver.scheduler._engine
    return sum(
        size(layer) for batch in (engine._prompt_batch, engine._generation_batch) for layer in batch.prompt_cache or []
    )


def _config(source: Path, **settings) -> ModelConfig:
    return ModelConfig(name="tiny", source=str(source), **{**BASE, **settings})


def _short_lookahead_driver(config: ModelConfig) -> EngineDriver:
    """A driver of ``config`` whose ledger books :data:`SHORT_LOOKAHEAD`."""
    driver = EngineDriver(config)
    assert driver.scheduler._ledger is not None
    driver.scheduler._ledger.lookahead = SHORT_LOOKAHEAD
    return driver


def _budget_for_rows(source: Path, rows: int, tokens: int, **settings) -> int:
    """A budget that holds ``rows`` rows of ``tokens`` tokens of the model
    at ``source`` with ``settings`` (its KV profile as the scheduler
    measures it)."""
    driver = EngineDriver(_config(source, **settings))
    try:
        profile = driver.scheduler._ledger.profile
    finally:
        driver.close()
    return TRANSIENT * rows * profile.row_bytes(tokens)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_booked_cost_bounds_the_live_caches_and_answers_equal_solo(models, family):
    """Every step: what mlx-lm's caches hold <= the ledger's bound for the
    rows; a budget below the burst makes requests wait and preempts rows,
    and every answer equals the request alone without a budget."""
    asks = _asks(1, 5, (60, 90), (100, 120))
    config = _config(models[family], kv_budget=_budget_for_rows(models[family], 2, 90 + SHORT_LOOKAHEAD))
    driver = _short_lookahead_driver(config)
    try:
        ledger = driver.scheduler._ledger
        assert ledger is not None and ledger.profile.per_token > 0
        for ask in asks:
            driver.submit(ask)
        driver.turn()
        worst = 0.0
        for _ in range(20_000):
            if not driver.busy:
                break
            booked = ledger.nbytes()
            live = _live_bytes(driver)
            assert live <= booked, f"{family}: caches hold {live} bytes, the ledger booked {booked}"
            worst = max(worst, live / booked if booked else 0)
            driver.turn()
        assert not driver.busy
        counters = driver.scheduler.counters
        assert counters.kv_waited > 0, "the budget must be below the burst"
        assert counters.kv_preemptions > 0, "rows must outgrow the budget"
        assert driver.refused == 0
    finally:
        driver.close()
    reference = solo_reference(config, asks)
    for ask in asks:
        outcome = driver.outcomes[ask.request_id]
        assert not outcome.terminals and outcome.after_end == 0, (ask.request_id, outcome)
        assert outcome.tokens == reference[ask.key()], f"{family} {ask.request_id} differs from its solo run"


@pytest.mark.parametrize("prefix_cache_bytes", [64 << 20, 0], ids=["state-kept", "recomputed"])
@pytest.mark.parametrize("kv_bits", [0, 4], ids=["full", "4-bit"])
def test_preempted_rows_resume_with_their_answers_unchanged(models, tmp_path, prefix_cache_bytes, kv_bits):
    """Preempted rows continue from the prefix cache, or are recomputed
    without one, with their logits processors (a frequency penalty over
    prompt and output); greedy answers equal their solo runs. With 4-bit
    live KV (``kv_bits``, on a llama whose heads the group size divides,
    under a budget sized by the quantized profile) the kept state is the
    quantized one, and the solo runs have the same quantization."""
    source = models["llama"]
    if kv_bits:
        source = build_tiny_model(tmp_path / "wide", overrides={"head_dim": 64, "tie_word_embeddings": False})
    budget = _budget_for_rows(source, 3, 60 + SHORT_LOOKAHEAD, kv_bits=kv_bits)
    config = _config(source, kv_budget=budget, prefix_cache_bytes=prefix_cache_bytes, kv_bits=kv_bits)
    asks = _asks(2, 6, (20, 60), (100, 130))
    driver = _short_lookahead_driver(config)
    try:
        assert driver.kv_bits == kv_bits, "the live KV must be quantized as configured"
        for ask in asks:
            driver.submit(ask)
        driver.run_until_idle()
        preempted = driver.scheduler.counters.kv_preemptions
        hits = driver.scheduler.cache.hits if driver.scheduler.cache else 0
    finally:
        driver.close()
    assert preempted > 0
    assert hits > 0 or not prefix_cache_bytes, "a preempted row must resume from its kept state"
    reference = solo_reference(config, asks)
    for ask in asks:
        assert driver.outcomes[ask.request_id].tokens == reference[ask.key()], ask.request_id


def test_a_prompt_that_cannot_fit_alone_is_refused_and_an_output_cut(models):
    """Past the budget alone: the prompt is refused (one terminal,
    ``context_length_exceeded``), the output is cut to what fits (finish
    ``length``); the worker goes on serving."""
    from worker.messages import Terminal

    config = _config(models["llama"], kv_budget=600_000)
    driver = EngineDriver(config)
    terminals: list[Terminal] = []
    collect = driver.scheduler._emit
    driver.scheduler._emit = lambda item: (
        terminals.append(item) if isinstance(item, Terminal) else None,
        collect(item),
    )
    try:
        lone = driver.scheduler._ledger.lone_tokens()
        driver.submit(Ask("long", max_tokens=4, prompt=tuple(range(5, 5 + lone))))
        driver.submit(Ask("cut", max_tokens=lone, prompt=tuple(range(5, 25))))
        driver.run_until_idle()
    finally:
        driver.close()
    long, cut = driver.outcomes["long"], driver.outcomes["cut"]
    assert long.terminals == ["error"] and not long.tokens and long.cached is not None, "Started, then the error"
    assert [t.error_kind for t in terminals] == ["context_length_exceeded"]
    assert "KV budget" in terminals[0].message
    assert not cut.terminals and cut.finishes[0] == ["length"]
    assert len(cut.tokens[0]) == lone - 20


@pytest.mark.parametrize("end", ["cancel", "timeout"])
def test_a_request_waiting_for_memory_ends_once(models, end):
    """A request still waiting for memory that is cancelled (or passes its
    deadline) gets exactly one terminal and no token; the others finish."""
    import time

    config = _config(models["llama"], kv_budget=_budget_for_rows(models["llama"], 1, 110 + 300))
    driver = EngineDriver(config)
    try:
        first = Ask("first", max_tokens=300, prompt=tuple(range(5, 105)))
        second = Ask("second", max_tokens=300, prompt=tuple(range(10, 110)))
        driver.submit(first)
        driver.turn()
        if end == "timeout":
            adm = driver.prompts.build(second.request())
            adm.deadline = time.monotonic()
            driver.outcomes["second"] = type(driver.outcomes["first"])(n=1)
            driver.scheduler.submit(adm)
        else:
            driver.submit(second)
        driver.turn()
        assert driver.scheduler.counters.kv_waited == 1, "the second request must wait for memory"
        if end == "cancel":
            driver.abort("second")
        driver.run_until_idle()
        counters = driver.scheduler.counters
    finally:
        driver.close()
    waited = driver.outcomes["second"]
    assert waited.terminals == ["abort" if end == "cancel" else "error"] and not waited.tokens
    assert waited.cached is not None, "the output thread knows a request only after its Started"
    assert not driver.outcomes["first"].terminals and len(driver.outcomes["first"].tokens[0]) == 300
    assert counters.kv_waiting == 0 and not driver.scheduler._memory_queue


def test_the_ledger_arithmetic():
    """Rows are padded to the longest and rounded up to the growth step,
    count twice (TRANSIENT) and get their lookahead when they start."""
    from worker.engine.kv_budget import GROWTH_STEP, LOOKAHEAD, TRANSIENT, KVLedger, KVProfile

    profile = KVProfile(per_token=100, windows=((10, 50),), fixed=7)
    assert profile.row_bytes(1) == 100 * GROWTH_STEP + 10 * 50 + 7
    ledger = KVLedger(profile, budget=TRANSIENT * 2 * profile.row_bytes(100 + LOOKAHEAD))
    ledger.add(1, 100, 1000)
    assert ledger.nbytes() == profile.row_bytes(100)
    assert ledger.fits([(100, 1000)]) and not ledger.fits([(101, 1000)]) and ledger.fits([(101, 10)])
    ledger.add(2, 100, 1000)
    assert ledger.tokens() == 200
    assert not ledger.over() and ledger.room() == 0
    for _ in range(LOOKAHEAD + 1):
        ledger.grew(2)
    assert ledger.over() and ledger.newest() == [2, 1]
    ledger.drop(2)
    assert not ledger.over() and ledger.room() > 0
    assert TRANSIENT * profile.row_bytes(ledger.lone_tokens()) <= ledger.budget
    assert TRANSIENT * profile.row_bytes(ledger.lone_tokens() + 1) > ledger.budget


def test_budget_settings():
    """``auto``, a share of what the weights leave, a size, and none."""
    from worker.engine.kv_budget import AUTO_SHARE, budget_bytes

    assert budget_bytes("auto", 1000, 100) == int(1000 * AUTO_SHARE) - 100
    assert budget_bytes("auto", 1000, 900) == 0
    assert budget_bytes("50%", 1000, 200) == 400
    assert budget_bytes("1KiB", 1000, 200) == 1024
    assert budget_bytes(0, 1000, 200) == 0
    with pytest.raises(ValueError):
        budget_bytes("lots", 1000, 200)


def test_config_refuses_a_bad_kv_budget(tmp_path):
    """The config loader names the bad setting."""
    from shared.config import ConfigError
    from shared.config_loader import load_config

    path = tmp_path / "mlxd.toml"
    path.write_text('[[models]]\nname = "m"\nkv_budget = "plenty"\n')
    with pytest.raises(ConfigError, match="kv_budget"):
        load_config(path)
    path.write_text('[[models]]\nname = "m"\nkv_budget = "2GiB"\n')
    assert load_config(path).models[0].kv_budget == "2GiB"
    assert msgspec.structs.replace(load_config(path).models[0], kv_budget="auto").kv_budget == "auto"
