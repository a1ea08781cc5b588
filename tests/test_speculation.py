"""Prompt-lookup speculative decoding (worker/speculation/prompt_lookup.py and the
speculative step of worker/engine/batch_engine.py).

Runs the tiny random-weight model in this process: greedy tokens with
speculation on must equal the tokens without it, token for token, for a
lone row (where drafts are verified), for rows that finish inside an
accepted run (max_tokens, stop tokens), and for a batch of several rows;
the cache a finished row hands back must hold exactly its tokens; and the
drafts must actually be drafted and accepted (a prompt that repeats a long
run of tokens, which the tiny model's greedy output also loops on).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.tiny_model import build_tiny_model
from worker.speculation.drafting import Speculation
from worker.speculation.prompt_lookup import find_draft

REPEATED = [5, 17, 99, 23, 4, 250, 31, 77, 8, 61] * 6


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """The tiny model, loaded in this process."""
    from worker.loading.loader import load_model

    return load_model(str(build_tiny_model(tmp_path_factory.mktemp("spec") / "model"))).model


def generate(
    model,
    prompts,
    max_tokens,
    spec=None,
    stop_tokens=None,
    *,
    opted_out=(),
    samplers=None,
    processors=None,
    host_sampling=True,
    trace=None,
    caches=None,
):
    """Tokens per prompt (and the finished rows' cache lengths and token
    lists), with speculation ``spec`` or without. Greedy unless
    ``samplers`` (a factory per row: fresh state for each run) are given;
    ``processors``: a factory of each row's logits processors; rows whose
    index is in ``opted_out`` opt out of speculation; ``trace`` (a list)
    gets, for every step, how many tokens each row (by index) emitted;
    ``caches`` (a dict) gets each finished row's cache and tokens by
    index."""
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    engine = BatchEngine(
        model,
        host_sampling=host_sampling,
        speculation=spec,
        stop_tokens=stop_tokens,
        sampler=greedy,
        prefill_step_size=16,
    )
    uids = engine.insert(
        prompts,
        max_tokens=[max_tokens] * len(prompts),
        samplers=[make() for make in samplers] if samplers else None,
        logits_processors=[make() for make in processors] if processors else None,
    )
    for i in opted_out:
        spec.opt_out(uids[i])
    out: dict[int, list[int]] = {uid: [] for uid in uids}
    finished: dict[int, tuple[int, list[int]]] = {}
    for _ in range(10 * max_tokens):
        if len(finished) == len(uids):
            break
        _, responses = engine.next()
        if trace is not None:
            trace.append(Counter(uids.index(r.uid) for r in responses))
        for r in responses:
            out[r.uid].append(r.token)
            if r.finish_reason:
                offset = next(c.offset for c in r.prompt_cache if hasattr(c, "offset"))
                finished[r.uid] = (offset, list(r.all_tokens))
                if caches is not None:
                    caches[uids.index(r.uid)] = (r.prompt_cache, list(r.all_tokens))
    engine.close()
    return [out[u] for u in uids], [finished[u] for u in uids]


def test_find_draft_prefers_latest_and_longest_match():
    history = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert find_draft(history, 3, 2) == [7, 8]
    assert find_draft([4, 5, 6, 4], 3, 4) == [5, 6, 4]
    assert find_draft([1, 2, 3], 3, 4) == []
    assert find_draft(history, 3, 0) == []
    # a loop: the latest occurrence runs into the end, an earlier one has a full draft
    assert find_draft([7, 7, 7, 7, 7, 7], 2, 3) == [7, 7, 7]
    assert find_draft([1, 2, 8, 1, 2, 9, 4], 2, 3) == [] and find_draft([1, 2, 8, 5, 1, 2], 2, 3) == [8, 5, 1]


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


PROMPTS = [
    REPEATED,
    [3, 4, 5, 3, 4, 5, 3, 4],
    REPEATED[:23],
    [7, 300, 12, 7, 300, 12, 7, 300, 45, 9, 7, 300],
    list(range(40, 70)) + list(range(40, 52)),
]


def drafted_beside_others(trace):
    """Whether some step emitted several tokens for a row while other rows
    decoded in the same step (verification inside the shared batch)."""
    return any(len(step) > 1 and max(step.values()) > 1 for step in trace)


NEVER_REPEATS = ("nemotron_h",)
"""Families whose tiny random model's greedy output repeats nothing, so
their prompt-lookup drafts are all rejected (the rejection path is still
checked; partial acceptance by
:func:`test_hybrid_partial_acceptance_replays_recurrent_state`)."""


@pytest.fixture(scope="module", params=["llama", "qwen3", "deepseek_v3", "qwen3_next", "lfm2", "nemotron_h"])
def family_model(request, tmp_path_factory):
    """A tiny model of each family that speculation serves: plain KV and
    MLA (trimmed per row) and the linear-attention and state-space hybrids
    (recurrent state restored and the kept tokens fed again); as
    ``(family, model)``."""
    from worker.loading.loader import load_model

    root = tmp_path_factory.mktemp(f"spec-{request.param}")
    return request.param, load_model(str(build_tiny_model(root / "model", family=request.param))).model


def test_concurrent_greedy_rows_identical_per_family(family_model):
    family, family_model = family_model
    plain, plain_done = generate(family_model, PROMPTS, 24)
    spec = Speculation(tokens=5, ngram=3)
    trace: list = []
    caches: dict = {}
    fast, fast_done = generate(family_model, PROMPTS, 24, spec, opted_out=(1, 3), trace=trace, caches=caches)
    assert fast == plain
    assert fast_done == plain_done
    for offset, tokens in fast_done:
        assert int(offset) == len(tokens)
    assert spec.drafted > 0
    assert family in NEVER_REPEATS or drafted_beside_others(trace)
    for cache, tokens in caches.values():
        assert_cache_holds(family_model, cache, tokens)


class OracleDrafter:
    """A draft source built by the test (in the place of a draft model):
    each row's draft is its own next greedy tokens without speculation
    (``plain``, one list per prompt), with the token at a position that
    moves from step to step and row to row replaced by another, so
    verification accepts all of a draft, part of it or none of it; each
    verification's (drafted, accepted) counts are kept in ``verified``."""

    def __init__(self, prompts: list[list[int]], plain: list[list[int]], vocab: int) -> None:
        self.rows = sorted(zip(prompts, plain), key=lambda row: -len(row[0]))  # longest prompt first
        self.vocab = vocab
        self.drafts = 0

    def draft(self, uid: int, history: list[int], limit: int) -> list[int]:
        """The next tokens of the row whose prompt ``history`` starts with,
        one of them wrong (or none, every few drafts)."""
        prompt, out = next((p, o) for p, o in self.rows if history[: len(p)] == p)
        done = len(history) - len(prompt)  # emitted tokens, the pending one included
        truth = out[done : done + limit]
        self.drafts += 1
        wrong = (self.drafts * 3 + uid) % (len(truth) + 2) if truth else 0
        return [(t + 1) % self.vocab if j == wrong else t for j, t in enumerate(truth)]

    def forget(self, uid: int) -> None:
        """Nothing is kept per row."""


class CountingSpeculation(Speculation):
    """:class:`Speculation` that also keeps each verification's
    ``(drafted, accepted)`` counts."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.verified: list[tuple[int, int]] = []

    def record(self, uid: int, drafted: int, accepted: int) -> None:
        """Count as :class:`Speculation` does, and keep the counts."""
        super().record(uid, drafted, accepted)
        self.verified.append((drafted, accepted))


@pytest.mark.parametrize("family", ["nemotron_h", "qwen3_next"])
def test_hybrid_partial_acceptance_replays_recurrent_state(family, tmp_path_factory):
    """State-space and linear-attention hybrids (whose greedy output may
    repeat nothing, so prompt lookup alone never gets a draft accepted)
    with drafts the test builds from their own greedy output: in the same
    steps rows accept all, part or none of their drafts, so each row's
    recurrent state is restored and a different number of kept tokens is
    fed again per row. Tokens, finishing rows' caches and their contents
    equal decoding without speculation."""
    from worker.loading.loader import load_model

    root = tmp_path_factory.mktemp(f"partial-{family}")
    hybrid = load_model(str(build_tiny_model(root / "model", family=family))).model
    plain, plain_done = generate(hybrid, PROMPTS, 24)
    vocab = int(hybrid.args.vocab_size)
    spec = CountingSpeculation(tokens=4, draft_model=OracleDrafter(PROMPTS, plain, vocab))
    trace: list = []
    caches: dict = {}
    fast, fast_done = generate(hybrid, PROMPTS, 24, spec, trace=trace, caches=caches)
    assert fast == plain
    assert fast_done == plain_done
    partial = [(d, a) for d, a in spec.verified if 0 < a < d]
    assert partial and any(a == d for d, a in spec.verified) and any(a == 0 for _, a in spec.verified)
    # several rows, different numbers of tokens each, in one step
    assert any(len(set(step.values())) > 1 and max(step.values()) > 1 for step in trace)
    for cache, tokens in caches.values():
        assert_cache_holds(hybrid, cache, tokens)


def assert_cache_holds(model, cache, tokens, atol=1e-2):
    """``cache`` (a finished row's, as the prefix cache stores it) holds
    exactly ``tokens``: continuing it with one token gives the logits a
    fresh forward over ``tokens`` and that token gives (within ``atol``)."""
    import mlx.core as mx
    from mlx_lm.models.cache import make_prompt_cache

    probe = [11]
    fresh = model(mx.array([tokens + probe]), cache=make_prompt_cache(model))[0, -1]
    continued = model(mx.array([probe]), cache=cache)[0, -1]
    assert mx.allclose(fresh, continued, atol=atol).item(), float(mx.abs(fresh - continued).max())


def test_stop_inside_accepted_run_beside_other_rows(model):
    plain, _ = generate(model, PROMPTS, 30)
    stop = plain[0][9]
    expected, expected_done = generate(model, PROMPTS, 30, stop_tokens=[[stop]])
    fast, fast_done = generate(model, PROMPTS, 30, Speculation(tokens=8, ngram=2), stop_tokens=[[stop]])
    assert fast == expected and fast_done == expected_done


def test_max_batch_turns_drafting_off(model):
    spec = Speculation(tokens=5, ngram=3, max_batch=len(PROMPTS) - 1)
    trace: list = []
    plain, _ = generate(model, PROMPTS, 10)
    fast, _ = generate(model, PROMPTS, 10, spec, trace=trace)
    assert fast == plain
    full = [step for step in trace if len(step) == len(PROMPTS)]
    assert full and all(max(step.values()) == 1 for step in full)


@pytest.mark.parametrize("host_sampling", [True, False])
def test_seeded_sampled_rows_draft_and_emit_the_same_tokens(model, host_sampling):
    """A sampled row draws once per emitted token with or without drafts
    (the acceptance rule in its draw-and-compare form), so a seeded row's
    tokens are the same either way; a greedy row with log-probabilities
    reports the same log-probabilities."""
    from worker.sampling.samplers import TokenSampler

    samplers = [lambda i=i: TokenSampler(0.5, seed=i) for i in range(len(PROMPTS))]
    samplers[2] = lambda: TokenSampler(0.0, logprobs=True)
    kwargs = {"samplers": samplers, "host_sampling": host_sampling}
    plain, _ = generate(model, PROMPTS, 24, **kwargs)
    spec = Speculation(tokens=5, ngram=3)
    trace: list = []
    fast, _ = generate(model, PROMPTS, 24, spec, trace=trace, **kwargs)
    assert fast == plain
    assert spec.accepted > 0 and drafted_beside_others(trace)


def test_rows_with_logits_processors_never_draft(model):
    from shared.protocol import SamplingParams
    from worker.sampling.samplers import make_processors

    params = SamplingParams(temperature=0.0, repetition_penalty=1.3)
    processors = [lambda: []] * len(PROMPTS)
    processors[0] = lambda: make_processors(params, len(PROMPTS[0]), [])
    plain, _ = generate(model, PROMPTS, 20, processors=processors)
    spec = Speculation(tokens=5, ngram=3)
    trace: list = []
    fast, _ = generate(model, PROMPTS, 20, spec, processors=processors, trace=trace)
    assert fast == plain
    assert all(step[0] <= 1 for step in trace)
    assert drafted_beside_others(trace)


def test_row_removed_after_a_speculative_step_frees_its_kv(model):
    """Cancelling a row whose last step verified a draft (its next token
    pending) removes it cleanly: its cache rows go, the others finish with
    the tokens they have without speculation."""
    from worker.engine.batch_engine import BatchEngine
    from worker.sampling.samplers import greedy

    plain, _ = generate(model, PROMPTS, 24)
    engine = BatchEngine(model, host_sampling=True, speculation=Speculation(tokens=5, ngram=3), sampler=greedy)
    uids = engine.insert(PROMPTS, max_tokens=[24] * len(PROMPTS))
    out: dict[int, list[int]] = {uid: [] for uid in uids}
    victim = uids[0]
    finished = set()
    for _ in range(200):
        if len(finished) == len(uids) - 1:
            break
        _, responses = engine.next()
        for r in responses:
            out[r.uid].append(r.token)
            if r.finish_reason:
                finished.add(r.uid)
        if (
            victim in engine._generation_batch.uids
            and len(out[victim]) > 1
            and Counter(r.uid for r in responses)[victim] > 1
        ):
            engine.remove([victim])
            batch = engine._generation_batch
            assert victim not in batch.uids
            assert all(layer.keys.shape[0] == len(batch.uids) for layer in batch.prompt_cache)
    assert victim not in finished and len(out[victim]) < 24
    assert out[victim] == plain[0][: len(out[victim])]
    assert [out[u] for u in uids[1:]] == plain[1:]
    engine.close()


def chi_square(counts: np.ndarray, p: np.ndarray) -> float:
    expected = p * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


# 99.9th percentile of chi-square with 5 degrees of freedom
CHI2_5_999 = 20.52


@pytest.mark.parametrize("drafted", [0, 2, 5])
def test_deterministic_draft_rule_keeps_the_target_distribution(drafted):
    from worker.speculation.prompt_lookup import accept_deterministic

    p = np.array([0.05, 0.1, 0.4, 0.2, 0.15, 0.1])
    rng = np.random.default_rng(7)
    counts = np.bincount([accept_deterministic(p, drafted, rng) for _ in range(20000)], minlength=6)
    assert chi_square(counts, p) < CHI2_5_999


def test_engine_verification_keeps_each_position_distribution():
    """The draw-and-compare verification the engine runs: the first
    emitted token is distributed as position 0's p whatever the draft, and
    after an accepted draft token the next as position 1's."""
    from worker.speculation.prompt_lookup import verify_draft

    p = np.array([[0.05, 0.1, 0.4, 0.2, 0.15, 0.1], [0.3, 0.05, 0.05, 0.2, 0.2, 0.2]])
    rng = np.random.default_rng(3)
    first, second = [], []
    for _ in range(20000):
        accepted, follow = verify_draft([2, 4], lambda j: int(rng.choice(6, p=p[min(j, 1)])))
        first.append(2 if accepted else follow)
        if accepted >= 1:
            second.append(4 if accepted == 2 else follow)
    assert chi_square(np.bincount(first, minlength=6), p[0]) < CHI2_5_999
    assert chi_square(np.bincount(second, minlength=6), p[1]) < CHI2_5_999


def test_draft_model_rule_keeps_the_target_distribution():
    from worker.speculation.prompt_lookup import accept_from_draft_model

    p = np.array([0.05, 0.1, 0.4, 0.2, 0.15, 0.1])
    q = np.array([0.3, 0.3, 0.1, 0.1, 0.1, 0.1])
    rng = np.random.default_rng(11)
    emitted = [accept_from_draft_model(p, q, int(rng.choice(6, p=q)), rng) for _ in range(20000)]
    counts = np.bincount(emitted, minlength=6)
    assert chi_square(counts, p) < CHI2_5_999
    # and the rule is not the identity: taking drafts as they come gives q
    assert chi_square(np.bincount(rng.choice(6, size=20000, p=q), minlength=6), p) > CHI2_5_999


def test_scheduler_abort_after_a_speculative_step_ends_the_request_once(tmp_path):
    """Through the worker's scheduler: a request aborted right after a step
    in which its row verified a draft (several tokens at once) gets exactly
    one terminal ``abort`` and nothing after it, its row leaves the batch
    and its drafting record is dropped; the other requests each end with
    exactly one finishing token; the heartbeat's batch size counts rows,
    not tokens."""
    from shared.protocol import GenerateRequest, SamplingParams
    from worker.engine.scheduler import Scheduler
    from worker.loading.loader import load_model
    from worker.messages import Terminal, TokenStep
    from worker.prompting.builder import PromptBuilder
    from worker.prompting.model_formats import model_formats
    from worker.sampling.constrained_decoding import GrammarCompiler

    loaded = load_model(str(build_tiny_model(tmp_path / "tiny")))
    builder = PromptBuilder(
        loaded.tokenizer,
        context_length=2048,
        default_max_tokens=64,
        vocab_size=len(loaded.tokenizer),
        formats=model_formats(loaded.tokenizer, "auto", "auto"),
        grammars=GrammarCompiler(loaded.tokenizer._tokenizer, min(loaded.eos_token_ids), len(loaded.tokenizer)),
    )
    emitted: list = []
    spec = Speculation(tokens=5, ngram=3)
    scheduler = Scheduler(
        loaded.model,
        set(loaded.eos_token_ids),
        emitted.append,
        cache=None,
        max_batch_size=8,
        prefill_batch_size=8,
        prefill_step_size=512,
        speculation=spec,
    )
    scheduler._engine = scheduler._new_engine()
    ids = [f"r{i}" for i in range(len(PROMPTS))]
    for request_id, prompt in zip(ids, PROMPTS):
        sampling = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
        scheduler._admit(
            builder.build(GenerateRequest(request_id=request_id, sampling=sampling, prompt_token_ids=prompt))
        )
    victim = None
    while scheduler._seqs:
        scheduler._run_step()
        last = emitted[-1] if emitted and isinstance(emitted[-1], TokenStep) else None
        if victim is None and last is not None:
            per_request = Counter(event[0] for event in last.tokens if event[3] is None)
            if per_request and max(per_request.values()) > 1 and len(per_request) > 1:
                victim = max(per_request, key=per_request.get)
                uid = scheduler._uids[victim][0]
                scheduler._abort([victim])
                assert uid not in scheduler._engine._generation_batch.uids
                assert uid not in spec._rows
    assert victim is not None
    terminals = [item for item in emitted if isinstance(item, Terminal)]
    assert [(t.request_id, t.reason) for t in terminals] == [(victim, "abort")]
    abort_at = emitted.index(terminals[0])
    events = [e for item in emitted if isinstance(item, TokenStep) for e in item.tokens]
    later = [e for item in emitted[abort_at:] if isinstance(item, TokenStep) for e in item.tokens]
    assert all(e[0] != victim for e in later)
    for request_id in ids:
        if request_id != victim:
            mine = [e for e in events if e[0] == request_id]
            assert len(mine) == 30 and [e[3] for e in mine].count("length") == 1 and mine[-1][3] == "length"
    assert scheduler.counters.max_batch_seen <= len(PROMPTS)


@pytest.mark.parametrize("seed", [0, 1])
def test_draft_model_rows_identical(model, tmp_path_factory, seed):
    """Drafts from a second model (the same weights: nearly all accepted;
    other weights: mostly rejected) leave greedy rows and seeded sampled
    rows with the tokens they have without speculation."""
    from worker.loading.loader import load_model
    from worker.sampling.samplers import TokenSampler
    from worker.speculation.draft_model import DraftModel

    draft = load_model(str(build_tiny_model(tmp_path_factory.mktemp(f"draft{seed}") / "m", seed=seed))).model
    samplers = [lambda: None, lambda: TokenSampler(0.5, seed=3)] * 2 + [lambda: None]
    plain, plain_done = generate(model, PROMPTS, 24, samplers=samplers)
    spec = Speculation(tokens=4, draft_model=DraftModel(draft, prefill_step=16))
    trace: list = []
    fast, fast_done = generate(model, PROMPTS, 24, spec, opted_out=(4,), samplers=samplers, trace=trace)
    assert fast == plain and fast_done == plain_done
    assert spec.drafted > 0
    if seed == 0:  # greedy rows (0 and 2: uids 0 and 2) accept every draft of their own weights
        greedy_rows = [(d, a) for uid, d, a in spec.take_records() if uid in (0, 2)]
        assert greedy_rows and all(d == a for d, a in greedy_rows) and drafted_beside_others(trace)
