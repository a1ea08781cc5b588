"""A differential concurrency fuzzer for the worker's engine and caches.

For every test family (each kind of cache mlx-lm has, the one-at-a-time
chunked family and the tiny vision-language model), a seeded random
schedule drives the worker's real scheduler turn by turn
(:class:`tests.engine_driver.EngineDriver`): requests arrive while others
prefill or decode; exact repeats, extensions of earlier prompts and next
turns of earlier chats (prompt, the answer it got, a new message) follow;
some ask for ``n`` = 2, some sample with a seed, some opt out of
speculation; some are cancelled before their first token (mid-prefill) or
after it (mid-decode). Variants run with speculation on, and with a prefix
cache so small that it evicts, backed by a disk tier that survives a
restart of the engine between two phases, and under a KV budget so small
that requests wait for memory and running rows are preempted and resumed
(some asks then run long enough to outgrow it; the budget holds about
two such rows of the family's model), and with the running sequences' KV
quantized to 4 bits (``kv_bits``, with speculation, the small evicting
prefix cache and the disk tier; the twin quantizes too). The plain-cache variant samples
and normalizes with MLX on the device, the path a Metal GPU takes; the
others on the host, the CPU backend's default.

Checked for every schedule:

* every greedy answer equals the same request run alone, from scratch, on
  a cache-less twin, token for token;
* every seeded sampled answer equals itself when the recorded schedule is
  replayed on a fresh engine (sampled answers are not compared with the
  twin: a batched forward pass rounds differently from a lone one, which
  greedy decoding absorbs but a draw near a boundary of the tiny random
  models' flat distributions does not);
* every request ends exactly once (each choice one finish, or one abort)
  and nothing follows its end;
* the prefix cache never refused a state (a state that does not hold
  exactly its key's tokens, see ``PrefixCache.insert``);
* once idle, the engine holds nothing: no sequence, no drafting record,
  nothing waiting for memory; the KV-budget variant waited and preempted.

A failure prints the family, variant, seed and the schedule that
reproduces it (rerun with ``MLXD_FUZZ_SEEDS=<seed>``). ``MLXD_FUZZ=long``
runs more seeds and longer schedules than ``make test``'s short profile.
"""

from __future__ import annotations

import os
import random
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import pytest

from shared.config import ModelConfig
from tests.engine_driver import Ask, EngineDriver, png, solo_reference
from tests.tiny_model import FAMILIES, build_tiny_model

LONG = os.environ.get("MLXD_FUZZ") == "long"
SEEDS = [int(s) for s in os.environ.get("MLXD_FUZZ_SEEDS", "").split(",") if s] or (list(range(8)) if LONG else [0])
ASKS = 40 if LONG else 14
"""Requests per schedule."""

FAMILY_NAMES = sorted(FAMILIES)
VLM = "qwen3_vl"
"""The tiny vision-language model's name among the fuzzed families."""

VARIANTS = {
    "cache": {},  # sampled on the device (MLX), as on a Metal GPU; the others on the host
    "speculation": {"speculative": "auto", "speculative_tokens": 4},
    "evict+disk": {"prefix_cache_bytes": 96 * 1024, "disk_cache_bytes": 64 << 20},
    "kv_budget": {"speculative": "auto", "speculative_tokens": 4},  # kv_budget: see budget_for
    "kv_bits": {
        "kv_bits": 4,
        "kv_group_size": 32,
        "speculative": "auto",
        "speculative_tokens": 4,
        "prefix_cache_bytes": 96 * 1024,
        "disk_cache_bytes": 64 << 20,
    },  # on the family's wide model (see WIDE)
}
"""Config overrides of each variant (on top of :data:`BASE`)."""

BASE = dict(
    max_batch_size=6, prefill_batch_size=2, prefill_step_size=32, prefix_cache_bytes=64 << 20, speculative="none"
)
"""Small prefill chunks, so prompts take several steps and arrivals land
beside prefills as well as decodes; speculation off but in its variant
(the default ``auto``: suffix drafting from the rows' own and earlier
requests' tokens, with the drafting controller)."""


@dataclass
class Schedule:
    """The record of one fuzzed run, printed when a check fails, and what
    :func:`replay` needs to run it again: ``plan`` lists, by turn, each
    request submitted (an :class:`Ask`), cancelled (its id) and the
    engine restarts (None)."""

    family: str
    variant: str
    seed: int
    events: list[str] = field(default_factory=list)
    plan: list[tuple[int, Ask | str | None]] = field(default_factory=list)

    def note(self, turn: int, what: str, action: Ask | str | None = None, planned: bool = True) -> None:
        """Record ``what`` happened at ``turn`` (and ``action`` in the plan)."""
        self.events.append(f"turn {turn}: {what}")
        if planned:
            self.plan.append((turn, action))

    def __str__(self) -> str:
        head = f"family={self.family} variant={self.variant} seed={self.seed} (rerun: MLXD_FUZZ_SEEDS={self.seed})"
        return "\n".join([head, *self.events])


class Fuzzer:
    """Builds one seeded schedule online (each decision from the seeded
    random generator and the engine's deterministic state) and drives it."""

    def __init__(self, config: ModelConfig, schedule: Schedule, *, vision: bool, disk: bool) -> None:
        self.config = config
        self.schedule = schedule
        self.rng = random.Random(f"{schedule.family}/{schedule.variant}/{schedule.seed}")
        self.vision = vision
        self.disk = disk
        self.host_sampling = schedule.variant != "cache"
        self.driver = EngineDriver(config, vision=vision, host_sampling=self.host_sampling)
        self.asks: list[Ask] = []
        self.cancelled: set[str] = set()
        self.outcomes: dict[str, object] = {}
        self._max_tokens: dict[str, int] = {}
        self._images = [png(color) for color in ((200, 30, 30), (30, 200, 30), (30, 30, 200))]

    # -- building requests ----------------------------------------------------

    def _tokens(self, lo: int, hi: int) -> tuple[int, ...]:
        return tuple(self.rng.randrange(200, 40000) for _ in range(self.rng.randint(lo, hi)))

    def _words(self, lo: int, hi: int) -> str:
        words = ("alpha", "beta", "river", "stone", "cloud", "seven", "green", "quick", "owl", "lamp", "map")
        return " ".join(self.rng.choice(words) for _ in range(self.rng.randint(lo, hi)))

    def _answer_text(self, ask: Ask) -> str | None:
        outcome = self.driver.outcomes.get(ask.request_id)
        if outcome is None or not outcome.ended or outcome.terminals:
            return None
        return self.driver.loaded.tokenizer.decode(outcome.tokens[0])

    def _new_ask(self, index: int) -> tuple[Ask, str]:
        """The next request and how it was made."""
        rid = f"r{index}"
        rng = self.rng
        budgeted = self.schedule.variant == "kv_budget"
        long = budgeted and (index < 2 or rng.random() < 0.5)  # the first two outgrow the budget together
        settings = dict(
            max_tokens=rng.randint(*LONG_OUTPUT) if long else rng.randint(3, 14),
            frequency_penalty=1.5 if long else 0.0,  # a long answer must not settle on one token
            n=2 if rng.random() < 0.15 else 1,
            speculative=rng.random() < 0.8,
        )
        if rng.random() < 0.2:
            settings.update(temperature=0.8, seed=rng.randrange(1 << 20))
        earlier = [a for a in self.asks if a.request_id not in self.cancelled]
        roll = rng.random()
        if earlier and roll < 0.25:
            base = rng.choice(earlier)
            return replace(base, request_id=rid), f"exact repeat of {base.request_id}"
        if earlier and roll < 0.45:
            base = rng.choice(earlier)
            if base.prompt:
                answer = self.driver.outcomes[base.request_id].tokens.get(0, []) if self._ended(base) else []
                prompt = base.prompt + tuple(answer) + self._tokens(1, 30)
                return Ask(rid, prompt=prompt, **settings), f"extension of {base.request_id} (+answer {len(answer)})"
            answer = self._answer_text(base)
            if answer is not None:
                messages = base.messages + (("assistant", answer), ("user", self._words(2, 12)))
                return Ask(rid, messages=messages, images=base.images, **settings), f"next turn of {base.request_id}"
            messages = base.messages[:-1] + (("user", self._words(3, 20)),)
            return Ask(rid, messages=messages, **settings), f"edited last message of {base.request_id}"
        if budgeted and index < 2:  # one choice each, never cancelled
            return Ask(rid, prompt=self._tokens(150, 200), **{**settings, "n": 1}), "new long prompt"
        if self.vision or rng.random() < 0.4:
            messages = (("system", self._words(5, 40)), ("user", self._words(3, 30)))
            images = ()
            if self.vision and rng.random() < 0.7:
                text = messages[-1][1]
                images = ((rng.choice(self._images), rng.randint(0, len(text))),)
            return Ask(rid, messages=messages, images=images, **settings), "new chat"
        return Ask(rid, prompt=self._tokens(10, 200), **settings), "new prompt"

    def _started(self, request_id: str) -> bool:
        return bool(self.driver.outcomes[request_id].tokens)

    def _ended(self, ask: Ask) -> bool:
        outcome = self.driver.outcomes.get(ask.request_id)
        return outcome is not None and outcome.ended

    # -- driving ----------------------------------------------------------------

    def _in_flight(self) -> list[str]:
        return [rid for rid, o in self.driver.outcomes.items() if not o.ended and rid not in self.cancelled]

    def run(self) -> None:
        """Drive the whole schedule (two phases, an engine restart between
        them in the disk variant)."""
        half = ASKS // 2
        self._phase(0, half)
        if self.disk:
            self.driver.run_until_idle()
            self._restart()
        self._phase(half, ASKS)
        self.driver.run_until_idle()

    def _phase(self, start: int, stop: int) -> None:
        index = start
        while index < stop:
            turn = self.driver.turns
            in_flight = self._in_flight()
            if len(in_flight) < 5 and self.rng.random() < 0.45:
                ask, how = self._new_ask(index)
                self.asks.append(ask)
                self._max_tokens[ask.request_id] = ask.max_tokens
                self.driver.submit(ask)
                self.schedule.note(turn, f"submit {ask.request_id}: {how}; {_describe(ask)}", ask)
                index += 1
            if self.schedule.variant == "kv_budget":  # long asks are cancelled only while they wait
                in_flight = [
                    r
                    for r in in_flight
                    if r not in ("r0", "r1") and (self._max_tokens[r] < LONG_OUTPUT[0] or not self._started(r))
                ]
            if in_flight and self.rng.random() < 0.06:
                victim = self.rng.choice(in_flight)
                stage = "mid-decode" if self.driver.outcomes[victim].tokens else "mid-prefill"
                self.driver.abort(victim)
                self.cancelled.add(victim)
                self.schedule.note(turn, f"cancel {victim} ({stage})", victim)
            self.driver.turn()

    def _restart(self) -> None:
        """Stop the engine as a worker's stop does and start a new one on the
        same disk tier (the memory tier starts empty)."""
        old = self.driver
        old.close()
        self.schedule.note(old.turns, "restart (memory tier dropped, disk tier kept)", None)
        fresh = EngineDriver(self.config, vision=self.vision, host_sampling=self.host_sampling)
        fresh.outcomes = old.outcomes
        fresh.turns = old.turns
        self._refused_before = old.refused
        self.driver = fresh

    # -- checks -------------------------------------------------------------------

    def check(self) -> None:
        """Every check of the module docstring; fails with the schedule."""
        driver = self.driver
        schedule = str(self.schedule)
        refused = driver.refused + getattr(self, "_refused_before", 0)
        assert refused == 0, f"the prefix cache refused {refused} states\n{schedule}"
        scheduler = driver.scheduler
        assert not scheduler._seqs and not scheduler._uids, f"sequences left behind\n{schedule}"
        assert not scheduler._memory_queue, f"requests left waiting for memory\n{schedule}"
        if self.schedule.variant == "kv_budget":
            counters = scheduler.counters
            assert counters.kv_waited and counters.kv_preemptions, f"the budget never bit: {counters}\n{schedule}"
        assert scheduler._engine.running == 0, f"the engine still decodes\n{schedule}"
        if scheduler.speculation is not None:
            assert scheduler.speculation.idle, f"drafting records left behind\n{schedule}"
            if self.schedule.variant == "speculation":
                assert scheduler.speculation.index is not None, "the variant must run the suffix drafter"
        finished = []
        for ask in self.asks:
            outcome = driver.outcomes[ask.request_id]
            assert outcome.after_end == 0, f"{ask.request_id}: tokens after its end\n{schedule}"
            if outcome.terminals:
                assert outcome.terminals == ["abort"] and ask.request_id in self.cancelled, (
                    f"{ask.request_id} ended with {outcome.terminals}\n{schedule}"
                )
                continue
            assert sorted(outcome.finishes) == list(range(ask.n)), f"{ask.request_id}: {outcome}\n{schedule}"
            assert all(len(f) == 1 for f in outcome.finishes.values()), f"{ask.request_id}: {outcome}\n{schedule}"
            finished.append(ask)
        greedy = [ask for ask in finished if not ask.temperature]
        expected = solo_reference(self.config, greedy, vision=self.vision)
        for ask in greedy:
            got = driver.outcomes[ask.request_id]
            want = expected[ask.key()]
            assert got.tokens == want, (
                f"{ask.request_id} ({_describe(ask)}, cached {got.cached}) differs from the cache-less twin:\n"
                f"  got  {got.tokens}\n  want {want}\n{schedule}"
            )
        sampled = [ask for ask in finished if ask.temperature]
        if sampled and (LONG or self.schedule.variant == "cache"):
            again = replay(self.config, self.schedule, vision=self.vision, host_sampling=self.host_sampling)
            for ask in sampled:
                got, want = again[ask.request_id].tokens, driver.outcomes[ask.request_id].tokens
                assert got == want, (
                    f"{ask.request_id} ({_describe(ask)}) sampled differently when the schedule was replayed:\n"
                    f"  first  {want}\n  replay {got}\n{schedule}"
                )


def replay(config: ModelConfig, schedule: Schedule, *, vision: bool, host_sampling: bool = True) -> dict:
    """Run ``schedule``'s recorded plan again on a fresh engine (the same
    submissions, cancellations and restarts at the same turns) with an
    empty disk tier of its own (the first run's files would turn its
    misses into hits); return its outcomes by request id."""
    if config.disk_cache_dir:
        fresh_dir = tempfile.mkdtemp(prefix="replay-", dir=Path(config.disk_cache_dir).parent)
        config = msgspec.structs.replace(config, disk_cache_dir=fresh_dir)
    driver = EngineDriver(config, vision=vision, host_sampling=host_sampling)
    plan = list(schedule.plan)
    try:
        while plan:
            while plan and plan[0][0] <= driver.turns:
                _, action = plan.pop(0)
                if isinstance(action, Ask):
                    driver.submit(action)
                elif isinstance(action, str):
                    driver.abort(action)
                else:
                    assert not driver.busy, "the replay diverged: busy where the first run restarted"
                    driver.close()
                    fresh = EngineDriver(config, vision=vision, host_sampling=host_sampling)
                    fresh.outcomes, fresh.turns = driver.outcomes, driver.turns
                    driver = fresh
            driver.turn()
        driver.run_until_idle()
    finally:
        driver.close()
    return driver.outcomes


def _describe(ask: Ask) -> str:
    kind = f"{len(ask.prompt)} tokens" if ask.prompt else f"{len(ask.messages)} messages"
    extra = [f"max_tokens={ask.max_tokens}"]
    if ask.images:
        extra.append(f"{len(ask.images)} image")
    if ask.n > 1:
        extra.append(f"n={ask.n}")
    if ask.temperature:
        extra.append(f"sampled seed={ask.seed}")
    if not ask.speculative:
        extra.append("no drafting")
    return f"{kind}, " + ", ".join(extra)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Every fuzzed family's tiny model, built once."""
    from tests.tiny_vlm import build_tiny_vlm

    root = tmp_path_factory.mktemp("fuzz-models")
    built = {name: build_tiny_model(root / name, family=name) for name in FAMILY_NAMES}
    built[VLM] = build_tiny_vlm(root / VLM)
    for name in KV_BITS_FAMILIES:
        built[f"{name}+wide"] = build_tiny_model(
            root / f"{name}+wide", family=name, overrides=WIDE.get(name, WIDE_HEADS)
        )
    return built


WIDE = {"lfm2": {"num_attention_heads": 2, "num_key_value_heads": 1}}
"""Config overrides that give a family 32-value attention heads, which
4-bit KV in groups of 32 needs; :data:`WIDE_HEADS` for the others."""

WIDE_HEADS = {"head_dim": 32}

KV_BITS_FAMILIES = (
    {"llama", "qwen3", "gemma3_text", "qwen3_next", "lfm2", "nemotron_h", "llama4"}
    if LONG
    else {"llama", "gemma3_text", "qwen3_next"}
)
"""The families the quantized-KV variant runs for (on their wide models,
where the live KV really is quantized: plain, sliding-window and
recurrent hybrids in the short profile). The families that fall back to
full-precision live KV are left out: their prefix-cache entries are still
stored quantized and a hit dequantizes them, so their hits may differ from
the twin's cold answers by design (tests/test_quantized_batch_kv.py runs
them)."""


KV_BUDGET_FAMILIES = set(FAMILY_NAMES) | {VLM} if LONG else {"llama", "gemma3_text", "qwen3_next", "gpt_oss", VLM}
"""The families the KV-budget variant runs for in the short profile: plain,
sliding-window, recurrent, attention-sink KV and the vision model."""

LONG_OUTPUT = (300, 420)
"""The output lengths of the KV-budget variant's long asks."""

CASES = [
    (family, variant)
    for family in [*FAMILY_NAMES, VLM]
    for variant in VARIANTS
    if (variant != "kv_budget" or family in KV_BUDGET_FAMILIES) and (variant != "kv_bits" or family in KV_BITS_FAMILIES)
]


def budget_for(config: ModelConfig, vision: bool) -> int:
    """A KV budget holding about two rows of a long ask of ``config``'s
    model (its KV profile as the scheduler measures it)."""
    from worker.engine.kv_budget import LOOKAHEAD, TRANSIENT

    probe = EngineDriver(config, vision=vision)
    try:
        profile = probe.scheduler._ledger.profile
    finally:
        probe.close()
    return TRANSIENT * 2 * profile.row_bytes(200 + LOOKAHEAD)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("family", "variant"), CASES, ids=[f"{f}-{v}" for f, v in CASES])
def test_cached_and_batched_answers_equal_a_cache_less_twin(models, tmp_path, family, variant, seed):
    vision = family == VLM
    settings = {**BASE, **VARIANTS[variant]}
    if "disk_cache_bytes" in settings:
        settings["disk_cache_dir"] = str(tmp_path / "disk")
    source = models[f"{family}+wide" if variant == "kv_bits" else family]
    config = msgspec.convert({"name": family, "source": str(source), **settings}, ModelConfig)
    if variant == "kv_budget":
        config = msgspec.structs.replace(config, kv_budget=budget_for(config, vision))
    schedule = Schedule(family, variant, seed)
    fuzzer = Fuzzer(config, schedule, vision=vision, disk="disk_cache_bytes" in settings)
    try:
        assert fuzzer.driver.kv_bits == config.kv_bits, "the quantized-KV variant must quantize the live KV"
        fuzzer.run()
    finally:
        fuzzer.driver.close()
    fuzzer.check()
