"""The worker's two sampling paths through the real gateway and worker.

On the CPU backend a worker samples and computes log-probabilities with
NumPy (the host path); on Metal with MLX (the device path).
``MLXD_HOST_SAMPLING=0`` forces the device path, so Linux exercises both:
the module's second gateway runs on the device path and must answer like
the first (host path) for greedy text and log-probabilities, and sample
reproducibly with a seed, and apply the presence, frequency and repetition
penalties with the same effect. Mixed batches (plain greedy rows next to sampled
and log-probability rows) run concurrently on each.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from collections import Counter

import openai
import pytest

from tests.conftest import API_KEY, TINY, start_server

MSG = [{"role": "user", "content": "tell me about sampling paths"}]


@pytest.fixture(scope="module")
def servers(tiny_model_dir, tmp_path_factory):
    """Two gateways on the tiny model: host sampling, then device sampling."""
    started = []
    try:
        for label, flag in (("host", "1"), ("device", "0")):
            started.append(
                start_server(
                    tmp_path_factory.mktemp(f"sampling-{label}"),
                    [{"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 8}],
                    env={"MLXD_HOST_SAMPLING": flag},
                )
            )
        yield started
    finally:
        for srv in started:
            srv.stop()


def clients(servers):
    return [openai.OpenAI(base_url=f"{s.url}/v1", api_key=API_KEY, max_retries=0, timeout=300) for s in servers]


def mixed_batch(client) -> list:
    """Plain greedy, greedy with log-probabilities, and two seeded sampled
    requests, all in flight together."""
    calls = [
        dict(temperature=0),
        dict(temperature=0, logprobs=True, top_logprobs=3),
        dict(temperature=1.0, seed=21, top_p=0.9),
        dict(temperature=0.7, seed=22, extra_body={"top_k": 40}, logprobs=True, top_logprobs=2),
    ]
    with cf.ThreadPoolExecutor(len(calls)) as pool:
        futures = [
            pool.submit(client.chat.completions.create, model=TINY, messages=MSG, max_tokens=12, **kw) for kw in calls
        ]
        return [f.result() for f in futures]


def test_each_worker_reports_its_sampling_path(servers):
    assert [s.worker(TINY)["sampling"] for s in servers] == ["host", "device"]


def test_host_and_device_paths_agree_on_greedy_and_logprobs(servers):
    host, device = (mixed_batch(c) for c in clients(servers))
    assert host[0].choices[0].message.content == device[0].choices[0].message.content
    assert host[1].choices[0].message.content == device[1].choices[0].message.content
    assert host[0].choices[0].message.content == host[1].choices[0].message.content
    for a, b in zip(host[1].choices[0].logprobs.content, device[1].choices[0].logprobs.content):
        assert a.token == b.token
        assert math.isclose(a.logprob, b.logprob, abs_tol=1e-3)
        assert [t.token for t in a.top_logprobs] == [t.token for t in b.top_logprobs]
    assert host[0].choices[0].logprobs is None


@pytest.mark.parametrize("path", [0, 1], ids=["host", "device"])
def test_seeded_sampling_repeats_on_each_path(servers, path):
    client = clients(servers)[path]
    first, again = mixed_batch(client), mixed_batch(client)
    for a, b in zip(first, again):
        assert a.choices[0].message.content == b.choices[0].message.content
    sampled = first[3].choices[0].logprobs.content
    assert len(sampled) == first[3].usage.completion_tokens
    for t in sampled:
        assert t.logprob <= 0 and len(t.top_logprobs) == 2
        # top_k 40 sampling may pick a token below the top two, never one
        # more likely than the most likely
        assert t.logprob <= t.top_logprobs[0].logprob + 1e-6
    other = client.chat.completions.create(model=TINY, messages=MSG, max_tokens=12, temperature=1.0, seed=99)
    assert other.choices[0].message.content != first[2].choices[0].message.content


def generated_tokens(client, **kw) -> list[str]:
    """The tokens of a greedy 48-token completion (from its log-probabilities)."""
    r = client.chat.completions.create(
        model=TINY,
        messages=MSG,
        max_tokens=48,
        temperature=0,
        logprobs=True,
        extra_body={"ignore_eos": True, **kw.pop("extra_body", {})},
        **kw,
    )
    tokens = [t.token for t in r.choices[0].logprobs.content]
    assert len(tokens) == 48
    return tokens


def repeats(tokens: list[str]) -> int:
    """How many tokens repeat an earlier one."""
    return len(tokens) - len(set(tokens))


PENALTIES = {
    "presence": dict(presence_penalty=2.0),
    "frequency": dict(frequency_penalty=2.0),
    "repetition": dict(extra_body={"repetition_penalty": 2.0}),
}


@pytest.mark.parametrize("penalty", PENALTIES, ids=list(PENALTIES))
def test_penalties_reduce_repetition_on_each_path(servers, penalty):
    """Greedy, the tiny model loops on one token; each penalty breaks the
    loop, the same way on the host and the device path. Presence subtracts
    a constant once a token was generated, frequency one that grows with
    its count, so frequency leaves fewer repeats; the repetition penalty
    (2.0, multiplicative) leaves almost none."""
    plain, penalized, presence = (
        [generated_tokens(c, **kw) for c in clients(servers)] for kw in ({}, PENALTIES[penalty], PENALTIES["presence"])
    )
    assert plain[0] == plain[1] and penalized[0] == penalized[1] and presence[0] == presence[1]
    plain, penalized, presence = plain[0], penalized[0], presence[0]
    looped, count = Counter(plain).most_common(1)[0]
    assert count >= 24, plain
    assert penalized[0] == plain[0]  # nothing generated yet: same first token
    assert Counter(penalized)[looped] <= count // 4, penalized
    assert repeats(penalized) < repeats(plain)
    if penalty == "frequency":
        assert repeats(penalized) < repeats(presence) and max(Counter(penalized).values()) <= 4
    if penalty == "repetition":
        assert repeats(penalized) <= 4, penalized


def test_negative_presence_penalty_favours_repetition(servers):
    """The sign is honoured: a negative presence penalty brings back the
    loop that the repetition penalty breaks."""
    for client in clients(servers):
        broken = generated_tokens(client, extra_body={"repetition_penalty": 1.3})
        rewarded = generated_tokens(client, presence_penalty=-2.0, extra_body={"repetition_penalty": 1.3})
        assert repeats(rewarded) > repeats(broken), (broken, rewarded)
