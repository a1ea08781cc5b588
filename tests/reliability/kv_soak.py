"""The KV-budget soak: agent-like sessions whose contexts outgrow a model's
KV budget, against a real gateway and worker whose MLX memory limit is low.

Each session is a system prompt and then turns: the assistant's previous
answer and a new user message are appended, so the context grows turn by
turn; answers are greedy (temperature 0, ``ignore_eos``, so every answer has
its ``max_tokens``) and some turns ask for a long answer, longer than the
scheduler's lookahead, so running rows outgrow what they were admitted with
and get preempted. All sessions run at once on a gateway whose model has a
small ``kv_budget``, then on a gateway without one (``kv_budget = 0``),
first one session at a time with the messages the first run sent (the
reference answers), then at once (the peak MLX memory without a budget,
which must be clearly above the budget: the budget is what held it); see
:func:`soak`. :func:`check` then asks for:

- every request answered, or refused with a 400 ``context_length_exceeded``
  whose body is an OpenAI error object (one deliberately oversized prompt
  is sent to see that refusal);
- no worker death (same pid and incarnation, no restart);
- requests waited for memory and rows were preempted (``/v1/status``);
- the worker's peak MLX memory less its weights within the KV budget plus
  :data:`ACTIVATION_ALLOWANCE`;
- every answer's text equal to the session's answer run alone (an answer
  the budget cut short, because the context and ``max_tokens`` could not
  fit even alone, the start of it).

:func:`quantized_soak` then runs the same sessions with ``kv_bits = 4``
under the same budget: every turn answered in full, the oversized prompt
refused, the peak within the budget, and the rows holding at least
:data:`HELD_RATIO` times the context the budget holds in full precision
(16 x 8 turns: 7,562 tokens at once, 4.73x, peak 48.6 MiB above the
weights).

``make soak`` runs :func:`main` (more turns, bounded by ``--minutes``);
``tests/reliability/test_kv_soak.py`` runs a short version of both in
``make test``.

Usage: ``.venv/bin/python tests/reliability/kv_soak.py [--sessions 16] [--turns 8] [--minutes 20] [--kv-bits 4]``
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import Server, settled_stats, start_server  # noqa: E402
from tests.tiny_model import build_tiny_model  # noqa: E402

FREQUENCY_PENALTY = 1.5
"""Keeps the tiny model's long greedy answers from settling into a short
loop, where a token lost or repeated at a resume far from the answer's end
would not show."""

MODEL = "kvsoak"

WIDE_KV = {
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
"""Config overrides of the tiny llama so that its KV cache dominates its
memory: 4 layers x 8 KV heads x 64 dims, keys and values in float32, are
16 KiB per token (the default tiny llama: 1 KiB), while the weights stay
about 28 MiB (mostly the 49152 x 64 embedding and output head). A long
context, so the oversized prompt is refused by the KV budget, not by the
context length. An output head of its own: with the embedding tied to it,
the tiny network's greedy answer soon repeats one token forever, and an
answer that repeats one token reads the same whatever a preemption did to
its context; with its own head the answer keeps changing with the context
(a resume that dropped a token was seen only then)."""

KV_BUDGET = 50 << 20
"""The model's ``kv_budget`` in bytes. The scheduler books a row of ``t``
tokens at 16 KiB x (t + 255) and admits rows against half the budget
(``TRANSIENT``), each with room for its ``max_tokens`` (at most 256 more):
two long answers (:data:`LONG_TOKENS`) on prompts of 150 to 290 tokens fit
at once and a third does not, so the two run without admissions between
them until they outgrow what they were admitted with, and the newer is
preempted. Sixteen short turns of that length fit six at a time, so
requests wait; a prompt of about 1300 tokens fits alone, a longer one is
refused."""

MEMORY_BUDGET = "160MiB"
"""``[server] memory_budget``: the worker's MLX memory limit (and a quarter
of it for MLX's buffer cache): the weights, the KV budget and activations
fit, 16 sessions' unbudgeted KV does not."""

FULL_PRECISION_TOKENS = KV_BUDGET // (2 * (16 << 10))
"""The most tokens the running rows can hold at once within
:data:`KV_BUDGET` in full precision: 16 KiB per token, and the rows take
half the budget (``TRANSIENT`` in ``worker/engine/kv_budget.py``); mlx-lm's
padding of every row to the longest (and its 256-token growth step) only
lowers it. 1,600 tokens."""

QUANTIZED_BITS = 4
"""``kv_bits`` of the quantized soak (:func:`quantized_soak`): 4-bit keys
and values with a float32 scale and bias per 64 values are 40 bytes per
64 dims instead of 256, so the budget holds 6.4 times the tokens."""

HELD_RATIO = 3.5
"""How many times :data:`FULL_PRECISION_TOKENS` the rows must hold at once
with :data:`QUANTIZED_BITS`-bit KV within the same budget (the issue asks
for about four times; the bytes allow 6.4, the sessions' demand and the
rows' padding take some of it)."""

QUANTIZED_ATTENTION_COPY = KV_BUDGET // 2 // WIDE_KV["num_hidden_layers"]
"""What the quantized soak's peak may exceed :data:`ACTIVATION_ALLOWANCE`
by: mlx-lm's attention over quantized keys and values reads them through
``mx.quantized_matmul``, which copies the strided view of one layer's
packed keys and values (measured on the CPU backend: a decode step over
16 rows of 600 tokens needed 16.2 MB beside 15.4 MB of 4-bit KV, against
nothing beside full-precision KV), so a step holds one layer's share of
the rows' KV twice: a quarter of the rows' half of the budget for this
4-layer model (a 28-layer model: under 4 %). Needs a Mac to confirm."""

ACTIVATION_ALLOWANCE = 16 << 20
"""What the peak MLX memory may exceed the weights plus the KV budget by:
the activations of a step (prefill chunks of ``PREFILL_STEP`` tokens for up
to ``PREFILL_BATCH`` rows, attention scores over the context, the logits),
which the KV budget does not cover. Measured on the CPU backend: the peak
less the weights was 36.0 to 42.8 MiB in five runs of the short test and
45.2 MiB in the 8-turn soak, under the 50 MiB budget (the scheduler keeps
half the budget for the caches' copies while a batch is rebuilt, so the
activations fit in the other half); without a budget the same sessions
peaked at 198 to 237 MiB (short test, short answers) and 996 MiB (the
8-turn soak). With the budget's copies not reserved (``TRANSIENT = 1`` in
``worker/engine/kv_budget.py``) the short test peaked at 56.2 and 71.0 MiB
in two runs: above the budget, but past this allowance (66 MiB in all)
only in the second; that break fails the test anyway, as the doubled room
leaves no row to preempt."""

PREFILL_STEP = 128
"""The model's ``prefill_step_size``: smaller than the default so that a
prefill chunk's attention scores stay a few MiB (they are activations the
KV budget does not cover)."""

PREFILL_BATCH = 4
"""The model's ``prefill_batch_size``."""

SHORT_TOKENS = 12
"""``max_tokens`` of an ordinary turn."""

LONG_TOKENS = 400
"""``max_tokens`` of a long turn: above the scheduler's lookahead (256), so
a long answer grows past what its row was admitted with."""

OVERSIZED_PROMPT_WORDS = 3000
"""Words of the one prompt that cannot fit the KV budget alone."""

QUANTIZED_OVERSIZED_WORDS = 12000
"""Words of the one prompt that cannot fit the KV budget alone with
:data:`QUANTIZED_BITS`-bit KV (which holds 6.4 times the tokens; still
within the model's context length, so the budget refuses it)."""

WORDS = (
    "the agent reads files and runs tools then writes a patch for the failing test in the parser module "
    "while the user asks about memory limits queues cache budget tokens layers heads batches and rows "
    "open close list search replace build check commit review plan step result error retry wait done"
).split()


@dataclass
class Session:
    """One agent-like conversation: its number, system prompt and user
    messages (one per turn), and each turn's ``max_tokens``. ``answers``,
    ``completion_tokens`` and ``outcomes`` fill in as it runs (an outcome:
    ``"ok"`` or the error code of a refusal). An answer with fewer
    completion tokens than its ``max_tokens`` was cut to what the KV budget
    holds alone."""

    number: int
    system: str
    users: list[str]
    max_tokens: list[int]
    answers: list[str] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)


def sessions(count: int, turns: int, long_every: int, seed: int = 0) -> list[Session]:
    """``count`` sessions of ``turns`` turns, the same for a given ``seed``;
    a turn after the first is long (:data:`LONG_TOKENS`) when session +
    turn is a multiple of ``long_every`` (0: no long turns), else
    :data:`SHORT_TOKENS`."""
    made = []
    for number in range(count):
        rng = random.Random(seed * 1000 + number)
        system = f"You are coding agent {number}. " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 70)))
        users = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(30, 60))) for _ in range(turns)]
        tokens = [
            LONG_TOKENS if turn and long_every and (number + turn) % long_every == 0 else SHORT_TOKENS
            for turn in range(turns)
        ]
        made.append(Session(number, system, users, tokens))
    return made


def fresh(plan: list[Session]) -> list[Session]:
    """Copies of ``plan`` with no answers yet."""
    return [Session(s.number, s.system, s.users, s.max_tokens) for s in plan]


def messages(session: Session, turn: int) -> list[dict]:
    """The chat messages of ``session``'s ``turn``: the system prompt, and
    every earlier user message followed by its answer, then this turn's."""
    built = [{"role": "system", "content": session.system}]
    for before in range(turn):
        built += [
            {"role": "user", "content": session.users[before]},
            {"role": "assistant", "content": session.answers[before]},
        ]
    return built + [{"role": "user", "content": session.users[turn]}]


def chat(http: httpx.Client, server: Server, body: dict) -> httpx.Response:
    """POST ``body`` to the gateway's ``/v1/chat/completions``."""
    return http.post(f"{server.url}/v1/chat/completions", json=body, headers=server.headers)


def refusal_problem(response: httpx.Response) -> str | None:
    """None when ``response`` is a 400 ``context_length_exceeded`` refusal
    by the KV budget (its message names it) with an OpenAI-shaped error
    object (a message, type and code); else what is wrong."""
    try:
        error = response.json()["error"]
    except (ValueError, KeyError, TypeError):
        return f"{response.status_code} without an OpenAI error object: {response.text[:300]}"
    if response.status_code != 400 or error.get("code") != "context_length_exceeded":
        return f"{response.status_code} {error}"
    if not isinstance(error.get("message"), str) or not error["message"] or not isinstance(error.get("type"), str):
        return f"a refusal without a message and type: {error}"
    if "KV budget" not in error["message"]:
        return f"refused, but not by the KV budget: {error['message']}"
    return None


def run_session(
    server: Server, session: Session, problems: list[str], deadline: float, replay: Session | None = None
) -> None:
    """Run ``session``'s turns in order on ``server``, appending answers and
    outcomes; a turn refused with ``context_length_exceeded`` ends the
    session (its later turns would only be longer); anything else unexpected
    is added to ``problems`` and ends it too. With ``replay`` (the same
    session as run before), each turn's messages are built from
    ``replay``'s answers instead, and only the turns it answered run. No
    request starts after ``deadline`` (monotonic) and each has a timeout."""
    history = replay or session
    turns = replay.outcomes.count("ok") if replay else len(session.max_tokens)
    with httpx.Client(timeout=httpx.Timeout(600, connect=10)) as http:
        for turn, max_tokens in enumerate(session.max_tokens[:turns]):
            if time.monotonic() > deadline:
                problems.append(f"session {session.number}: out of time before turn {turn}")
                return
            body = {
                "model": MODEL,
                "messages": messages(history, turn),
                "max_tokens": max_tokens,
                "temperature": 0,
                "ignore_eos": True,
                "frequency_penalty": FREQUENCY_PENALTY,
            }
            try:
                response = chat(http, server, body)
            except httpx.HTTPError as exc:
                problems.append(f"session {session.number} turn {turn}: {type(exc).__name__}: {exc}")
                return
            if response.status_code != 200:
                wrong = refusal_problem(response)
                if wrong:
                    problems.append(f"session {session.number} turn {turn}: {wrong}")
                session.outcomes.append(response.json().get("error", {}).get("code", "?") if not wrong else "bad")
                return
            choice = response.json()["choices"][0]
            session.answers.append(choice["message"]["content"] or "")
            session.completion_tokens.append(response.json()["usage"]["completion_tokens"])
            session.outcomes.append("ok")


def run_all(
    server: Server, plan: list[Session], at_once: bool, deadline: float, replay: list[Session] | None = None
) -> tuple[list[Session], list[str]]:
    """Run copies of ``plan`` on ``server``: all at once (a thread each) or
    one after another, each replaying its session in ``replay`` when given
    (see :func:`run_session`); return them (answers filled in) and the
    problems seen."""
    ran, problems = fresh(plan), []
    replays: list[Session | None] = list(replay) if replay else [None] * len(ran)
    if at_once:
        with cf.ThreadPoolExecutor(len(ran)) as pool:
            running = [pool.submit(run_session, server, s, problems, deadline, r) for s, r in zip(ran, replays)]
            for future in running:
                future.result()
    else:
        for session, again in zip(ran, replays):
            run_session(server, session, problems, deadline, again)
    return ran, problems


class PeakWatch:
    """Samples ``/health``'s worker status of :data:`MODEL` in a thread
    while a run goes (until :meth:`stop`): the highest ``kv_bytes``,
    ``kv_tokens`` (the context the running rows hold at once) and
    ``kv_waiting`` seen."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.kv_bytes = 0
        self.kv_waiting = 0
        self.kv_tokens = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kv-soak-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with httpx.Client(timeout=10) as http:
            while not self._stop.wait(0.2):
                try:
                    stats = http.get(f"{self.server.url}/health").json()["models"][MODEL]["stats"]
                except (httpx.HTTPError, KeyError, ValueError):
                    continue
                self.kv_bytes = max(self.kv_bytes, stats.get("kv_bytes", 0))
                self.kv_waiting = max(self.kv_waiting, stats.get("kv_waiting", 0))
                self.kv_tokens = max(self.kv_tokens, stats.get("kv_tokens", 0))

    def stop(self) -> None:
        """End the sampling (waits for the thread)."""
        self._stop.set()
        self._thread.join(timeout=10)


@dataclass
class Measured:
    """What one gateway's runs left: the sessions as run at once, the
    problems seen, the worker's status when it became ready and after the
    runs, its settled heartbeat counters, ``/v1/status``'s ``kv`` block,
    and the sampled highs (:class:`PeakWatch`; ``watched_kv_tokens``: the
    most context the running rows held at once)."""

    ran: list[Session]
    problems: list[str]
    ready: dict
    after: dict
    stats: dict
    kv: dict
    watched_kv_bytes: int
    watched_kv_waiting: int
    watched_kv_tokens: int
    refusal: str | None = None

    @property
    def weights(self) -> int:
        """MLX memory in use once the model was loaded, before any request:
        the weights (and whatever loading left)."""
        return self.ready["stats"]["active_memory_bytes"]

    @property
    def peak(self) -> int:
        """The most MLX memory the worker had in use, loading included."""
        return max(self.after["peak_memory_bytes"] or 0, self.stats["peak_memory_bytes"])


def model_entry(source: Path, kv_budget: int, kv_bits: int = 0) -> dict:
    """The ``[[models]]`` table of the soak's model (``kv_bits``: the
    running sequences' KV quantized to that many bits; 0: full precision)."""
    return {
        "name": MODEL,
        "source": str(source),
        "max_batch_size": 16,
        "max_queued": 64,
        "prefill_step_size": PREFILL_STEP,
        "prefill_batch_size": PREFILL_BATCH,
        "speculative": "none",
        "kv_budget": kv_budget,
        "kv_bits": kv_bits,
    }


def start(tmp: Path, source: Path, kv_budget: int, kv_bits: int = 0) -> Server:
    """A gateway serving the soak's model with ``kv_budget``, ``kv_bits``
    and the low ``memory_budget`` (waits until its worker is ready)."""
    tmp.mkdir(parents=True, exist_ok=True)
    return start_server(
        tmp, [model_entry(source, kv_budget, kv_bits)], memory_budget=MEMORY_BUDGET, heartbeat_timeout=600
    )


def kv_status(server: Server) -> dict:
    """``/v1/status``'s ``kv`` block of :data:`MODEL`."""
    body = httpx.get(f"{server.url}/v1/status", headers=server.headers, timeout=30).json()
    return next(m for m in body["models"] if m["name"] == MODEL)["kv"]


def measure(server: Server, ready: dict, plan: list[Session], deadline: float, oversized: int) -> Measured:
    """Run ``plan`` at once on ``server`` (with, when ``oversized`` words
    are given, one prompt of that many, too long for the KV budget, sent
    among the sessions) and collect
    what :func:`check` needs; ``ready``: the worker's status from
    ``/health`` as it was when it became ready."""
    refusal: list[str | None] = []
    watch = PeakWatch(server)

    def oversized_request() -> None:
        words = " ".join(WORDS[i % len(WORDS)] for i in range(oversized))
        body = {"model": MODEL, "messages": [{"role": "user", "content": words}], "max_tokens": 4}
        with httpx.Client(timeout=600) as http:
            response = chat(http, server, body)
        refusal.append(refusal_problem(response) if response.status_code != 200 else "answered, not refused")

    extra = threading.Thread(target=oversized_request, name="kv-soak-oversized") if oversized else None
    try:
        if extra:
            extra.start()
        ran, problems = run_all(server, plan, at_once=True, deadline=deadline)
        if extra:
            extra.join(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        watch.stop()
    stats = settled_stats(server, MODEL, timeout=120)
    after = server.worker(MODEL)
    return Measured(
        ran,
        problems,
        ready,
        after,
        stats,
        kv_status(server),
        watch.kv_bytes,
        watch.kv_waiting,
        watch.kv_tokens,
        (refusal[0] if refusal else "no answer") if oversized else None,
    )


def check(budgeted: Measured, unbudgeted_peak: int, unbudgeted_weights: int, reference: list[Session]) -> list[str]:
    """Every way the budgeted run failed the soak's conditions (see the
    module docstring); empty when it passed."""
    failures = served_within_budget(budgeted)
    kv = budgeted.kv
    if kv["waited"] <= 0:
        failures.append(f"no request waited for KV memory: {kv}")
    if kv["preemptions"] <= 0:
        failures.append(f"no row was preempted: {kv}")
    free_used = unbudgeted_peak - unbudgeted_weights
    if free_used <= KV_BUDGET + ACTIVATION_ALLOWANCE:
        failures.append(
            f"without a budget the peak less the weights is only {free_used >> 20} MiB: the sessions do not"
            " outgrow the budget, so the soak shows nothing"
        )
    if budgeted.watched_kv_tokens > FULL_PRECISION_TOKENS:
        failures.append(
            f"the rows held {budgeted.watched_kv_tokens} tokens at once, more than the"
            f" {FULL_PRECISION_TOKENS} the budget holds in full precision"
        )
    return failures + answer_failures(budgeted.ran, reference)


def served_within_budget(budgeted: Measured, more: int = 0) -> list[str]:
    """The conditions every budgeted run must meet: no problems, the
    oversized prompt refused, no worker death or restart, the budget
    reported, the peak MLX memory less the weights within the budget plus
    :data:`ACTIVATION_ALLOWANCE` plus ``more`` bytes."""
    failures = list(budgeted.problems)
    if budgeted.refusal is not None:
        failures.append(f"the oversized prompt: {budgeted.refusal}")
    ready, after = budgeted.ready, budgeted.after
    if (after["pid"], after["incarnation"], after["restarts"], after["state"]) != (
        ready["pid"],
        ready["incarnation"],
        ready["restarts"],
        "ready",
    ):
        failures.append(f"the worker died or restarted: {ready['pid']} -> {after['pid']}, state {after['state']}")
    if budgeted.kv["budget_bytes"] != KV_BUDGET:
        failures.append(f"/v1/status reports a KV budget of {budgeted.kv['budget_bytes']}, not {KV_BUDGET}")
    used = budgeted.peak - budgeted.weights
    if used > KV_BUDGET + ACTIVATION_ALLOWANCE + more:
        failures.append(
            f"peak MLX memory less the weights {used / (1 << 20):.1f} MiB > KV budget {KV_BUDGET >> 20} MiB"
            f" + allowance {(ACTIVATION_ALLOWANCE + more) / (1 << 20):.1f} MiB"
        )
    return failures


def answer_failures(ran: list[Session], reference: list[Session]) -> list[str]:
    """Every session of ``ran`` whose answers differ from ``reference``'s
    (the same sessions run one at a time with ``ran``'s messages): an
    answer the budget cut short must be the start of the reference one,
    any other must equal it; a reference session that was not answered
    throughout is a failure too."""
    failures = []
    for got, want in zip(ran, reference):
        answered = got.outcomes.count("ok")
        if want.outcomes != ["ok"] * answered:
            failures.append(f"session {want.number} alone: {want.outcomes}")
            continue
        for turn in range(answered):
            mine, alone = got.answers[turn], want.answers[turn]
            cut = got.completion_tokens[turn] < got.max_tokens[turn]
            if (cut and not alone.startswith(mine)) or (not cut and mine != alone):
                failures.append(
                    f"session {got.number} turn {turn}{' (cut)' if cut else ''}: " + difference(mine, alone)
                )
                break
    return failures


def difference(got: str, want: str, around: int = 40) -> str:
    """Where answer ``got`` first differs from ``want`` (the session's
    answer alone), with ``around`` characters of each from there."""
    at = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    start = max(0, at - around)
    return (
        f"differs from its run alone at character {at} of {len(got)}:"
        f" {got[start : at + around]!r} against {want[start : at + around]!r}"
    )


def summary(budgeted: Measured, unbudgeted: Measured, seconds: dict[str, float]) -> str:
    """The soak's numbers, for the log."""
    outcomes: dict[str, int] = {}
    for session in budgeted.ran:
        for outcome in session.outcomes:
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        cut = sum(done < asked for done, asked in zip(session.completion_tokens, session.max_tokens))
        outcomes["of the ok: cut to the budget"] = outcomes.get("of the ok: cut to the budget", 0) + cut
    mib = 1 << 20
    lines = [
        f"sessions {len(budgeted.ran)}, turns {[len(s.max_tokens) for s in budgeted.ran][0]},"
        f" outcomes {outcomes}, oversized prompt: {budgeted.refusal or 'refused (context_length_exceeded)'}",
        f"KV budget {KV_BUDGET / mib:.0f} MiB, MLX memory limit {budgeted.after['memory_limit_bytes'] / mib:.0f} MiB"
        f" (memory_budget {MEMORY_BUDGET}), weights {budgeted.weights / mib:.1f} MiB",
        f"with the budget: peak MLX {budgeted.peak / mib:.1f} MiB, less weights"
        f" {(budgeted.peak - budgeted.weights) / mib:.1f} MiB (allowed {(KV_BUDGET + ACTIVATION_ALLOWANCE) / mib:.0f});"
        f" KV booked at most {budgeted.watched_kv_bytes / mib:.1f} MiB, waiting at most {budgeted.watched_kv_waiting},"
        f" held at most {budgeted.watched_kv_tokens} tokens at once (of {FULL_PRECISION_TOKENS});"
        f" /v1/status kv {budgeted.kv}",
        f"without a budget: peak MLX {unbudgeted.peak / mib:.1f} MiB, less weights"
        f" {(unbudgeted.peak - unbudgeted.weights) / mib:.1f} MiB",
        "seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in seconds.items()),
    ]
    return "\n".join(lines)


def capped(plan: list[Session]) -> list[Session]:
    """Copies of ``plan`` whose every turn asks for :data:`SHORT_TOKENS`:
    the same contexts at once, without the long answers' decoding time."""
    return [Session(s.number, s.system, s.users, [SHORT_TOKENS] * len(s.max_tokens)) for s in plan]


def soak(
    tmp: Path, count: int, turns: int, long_every: int, minutes: float, quick: bool = False
) -> tuple[list[str], str]:
    """Build the model, run the soak under ``tmp`` and return the failures
    and the summary. No request starts after about ``minutes``.

    Two gateways start at once, one with the budget and one without; the
    sessions run at once on the first, then one at a time on the second,
    each turn sent with the messages the first run sent (the reference
    answers: an answer the budget cut must be the start of the reference
    one, and later turns build on the cut answer in both runs); then at
    once on the second, for its peak. ``quick`` (the test): that last run
    asks only short answers, which are enough to show the peak without a
    budget."""
    deadline = time.monotonic() + minutes * 60
    source = build_tiny_model(tmp / "model", overrides=WIDE_KV)
    plan = sessions(count, turns, long_every)
    seconds: dict[str, float] = {}
    clock = time.monotonic()
    with cf.ThreadPoolExecutor(2) as pool:  # both gateways load at once
        starting = [pool.submit(start, tmp / name, source, budget) for name, budget in (("kv", KV_BUDGET), ("free", 0))]
        servers = []
        for future in starting:
            try:
                servers.append(future.result())
            except BaseException:
                for other in starting:
                    if other.done() and other.exception() is None:
                        other.result().stop()
                raise
    budget_server, free_server = servers
    seconds["start"] = time.monotonic() - clock
    try:
        ready = {server.url: server.worker(MODEL) for server in servers}
        clock = time.monotonic()
        budgeted = measure(budget_server, ready[budget_server.url], plan, deadline, OVERSIZED_PROMPT_WORDS)
        seconds["at once with the budget"] = time.monotonic() - clock
        budget_server.stop()
        clock = time.monotonic()
        reference, problems = run_all(free_server, plan, False, deadline, replay=budgeted.ran)
        seconds["one at a time without"] = time.monotonic() - clock
        clock = time.monotonic()
        unbudgeted = measure(free_server, ready[free_server.url], capped(plan) if quick else plan, deadline, 0)
        seconds["at once without the budget"] = time.monotonic() - clock
    finally:
        budget_server.stop()
        free_server.stop()
    failures = check(budgeted, unbudgeted.peak, unbudgeted.weights, reference)
    failures += unbudgeted.problems + problems
    return failures, summary(budgeted, unbudgeted, seconds)


def quantized_soak(
    tmp: Path, count: int, turns: int, long_every: int, minutes: float, bits: int = QUANTIZED_BITS
) -> tuple[list[str], str]:
    """The soak's sessions at once on one gateway with the same KV budget
    and ``kv_bits`` = ``bits``. Returns the failures and a summary: the
    conditions of :func:`served_within_budget` (the peak allowed
    :data:`QUANTIZED_ATTENTION_COPY` more), every turn answered with its
    full ``max_tokens`` (at 4 bits each fits alone), and the rows holding at least
    :data:`HELD_RATIO` times :data:`FULL_PRECISION_TOKENS` at once.

    Answers are not compared with the sessions run alone: with quantized
    KV a row's greedy answer in a batch may part from its answer alone (a
    last-bit difference of the batch's matrix products moves a key across
    a quantization step; measured on the soak's model: batched and solo
    logits differ by 1e-6 in full precision and up to 6e-4 with 4-bit KV,
    and 4 of 16 answers of 300 tokens parted after 65 to 287 tokens). That
    preemption and resumption keep quantized answers exact is tested turn
    by turn in ``tests/test_kv_budget.py``."""
    deadline = time.monotonic() + minutes * 60
    source = build_tiny_model(tmp / "model", overrides=WIDE_KV)
    plan = sessions(count, turns, long_every)
    server = start(tmp / "quantized", source, KV_BUDGET, bits)
    clock = time.monotonic()
    try:
        measured = measure(server, server.worker(MODEL), plan, deadline, QUANTIZED_OVERSIZED_WORDS)
    finally:
        server.stop()
    seconds = time.monotonic() - clock
    failures = served_within_budget(measured, QUANTIZED_ATTENTION_COPY)
    for session in measured.ran:
        if session.completion_tokens != session.max_tokens:
            failures.append(
                f"session {session.number}: {session.outcomes}, completion tokens {session.completion_tokens}"
                f" for max_tokens {session.max_tokens} (the budget holds every turn alone)"
            )
    held = measured.watched_kv_tokens
    if held < HELD_RATIO * FULL_PRECISION_TOKENS:
        failures.append(
            f"with {bits}-bit KV the rows held at most {held} tokens at once, under {HELD_RATIO} x the"
            f" {FULL_PRECISION_TOKENS} the budget holds in full precision"
        )
    mib = 1 << 20
    text = (
        f"{bits}-bit KV: sessions {len(measured.ran)}, answered {sum(s.outcomes.count('ok') for s in measured.ran)},"
        f" oversized prompt: {measured.refusal or 'refused (context_length_exceeded)'};"
        f" held at most {held} tokens at once ({held / FULL_PRECISION_TOKENS:.2f}x the {FULL_PRECISION_TOKENS}"
        f" of full precision), KV booked at most {measured.watched_kv_bytes / mib:.1f} MiB of {KV_BUDGET / mib:.0f};"
        f" peak MLX less weights {(measured.peak - measured.weights) / mib:.1f} MiB"
        f" (allowed {(KV_BUDGET + ACTIVATION_ALLOWANCE + QUANTIZED_ATTENTION_COPY) / mib:.1f});"
        f" /v1/status kv {measured.kv}; {seconds:.1f} s"
    )
    return failures, text


def main(argv: list[str] | None = None) -> int:
    """Run the soak, print its summary and failures; exit status 1 on any
    failure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--long-every", type=int, default=4, help="a turn is long when session + turn is a multiple")
    parser.add_argument("--minutes", type=float, default=20, help="no request starts after this (each soak)")
    parser.add_argument(
        "--kv-bits", type=int, default=QUANTIZED_BITS, help="then the quantized soak with this kv_bits (0: skip it)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mlxd-kv-soak-") as tmp:
        failures, text = soak(Path(tmp), args.sessions, args.turns, args.long_every, args.minutes)
    if args.kv_bits:
        with tempfile.TemporaryDirectory(prefix="mlxd-kv-soak-q-") as tmp:
            more, quantized = quantized_soak(
                Path(tmp), args.sessions, args.turns, args.long_every, args.minutes, args.kv_bits
            )
        failures, text = failures + more, text + "\n" + quantized
    print(text)
    for failure in failures:
        print("FAIL:", failure)
    print("kv soak:", "failed" if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
