"""The short KV-budget soak in ``make test`` (``make soak`` runs the long
one): 16 agent-like sessions of two turns, whose contexts at once outgrow
the model's KV budget, on a worker with a low MLX memory limit. Every
request is answered (one oversized prompt refused with an OpenAI-shaped
``context_length_exceeded``), the worker never restarts, requests wait and
rows are preempted, the peak MLX memory stays within the budget, and every
answer equals the session's answer run alone without a budget. See
:mod:`tests.reliability.kv_soak`."""

from __future__ import annotations

from tests.reliability.kv_soak import quantized_soak, soak


def test_sessions_that_outgrow_the_kv_budget_are_all_served_within_it(tmp_path):
    """The soak's conditions hold for 16 sessions of 2 turns (3 long answers)."""
    failures, summary = soak(tmp_path, count=16, turns=2, long_every=5, minutes=3, quick=True)
    print(summary)
    assert not failures, "\n".join([summary, *failures])


def test_four_bit_kv_holds_several_times_the_context_within_the_same_budget(tmp_path):
    """The same sessions, every second turn long, with ``kv_bits = 4``
    under the same budget: every request answered in full (the oversized
    one refused by the budget), the peak MLX memory within the budget, and
    the rows holding at least ``HELD_RATIO`` times the context the budget
    holds in full precision at once."""
    failures, summary = quantized_soak(tmp_path, count=16, turns=2, long_every=1, minutes=4)
    print(summary)
    assert not failures, "\n".join([summary, *failures])
