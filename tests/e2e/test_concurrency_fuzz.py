"""The concurrency fuzzer through a real gateway and real worker processes.

``tests/test_cache_fuzz.py`` replays exact schedules turn by turn inside
one process; this is its companion at the level a client sees: one
gateway serves, for a plain-KV, a sliding-window and a hybrid family, a
model with the prefix cache and speculation on and its cache-less twin
(``prefix_cache_bytes = 0``, no speculation). Seeded bursts of chat
requests (new prompts, exact repeats, next turns, ``n`` = 2, streamed and
whole, some streams dropped after their first chunk) run concurrently,
with arrivals beside prefills and decodes wherever the timing puts them.
Every greedy answer that completed must equal the twin's answer to the
same request, and no worker may have refused a cache state.

Timing is the machine's, so a failure prints the seed and the requests
(which burst, which were dropped) rather than an exact schedule; rerun
the in-process fuzzer with the same kind of traffic to pin it down.
"""

from __future__ import annotations

import concurrent.futures as cf
import random
import re

import httpx
import openai
import pytest

from tests.conftest import API_KEY, start_server
from tests.tiny_model import build_tiny_model

FAMILIES = ("llama", "gemma3_text", "qwen3_next")
SEEDS = (0, 1)
BURSTS = 3
PER_BURST = 6


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e-fuzz")
    models = []
    for family in FAMILIES:
        source = str(build_tiny_model(root / family, family=family))
        models.append(
            {
                "name": family,
                "source": source,
                "max_batch_size": 8,
                "prefill_batch_size": 2,
                "prefill_step_size": 64,
                "speculative": "prompt_lookup",
                "speculative_tokens": 4,
            }
        )
        models.append({"name": f"{family}-twin", "source": source, "prefix_cache_bytes": 0})
    (root / "gw").mkdir()
    srv = start_server(root / "gw", models)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def _ask(client, model: str, messages: list[dict], max_tokens: int, n: int, stream: bool, drop: bool) -> list | None:
    """One chat request; each choice's text (None for a dropped stream)."""
    settings = dict(model=model, messages=messages, max_tokens=max_tokens, temperature=0, n=n)
    if not stream:
        response = client.chat.completions.create(**settings)
        return [c.message.content or "" for c in sorted(response.choices, key=lambda c: c.index)]
    texts = [""] * n
    with client.chat.completions.create(**settings, stream=True) as chunks:
        for chunk in chunks:
            for choice in chunk.choices:
                texts[choice.index] += choice.delta.content or ""
            if drop and any(texts):
                return None
    return texts


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_concurrent_answers_equal_the_cache_less_twin(server, client, family, seed):
    rng = random.Random(f"{family}/{seed}")
    words = ("alpha", "beta", "river", "stone", "cloud", "seven", "green", "quick", "owl", "lamp", "map")
    history: list[tuple[list[dict], list[str]]] = []
    record: list[str] = []
    checked = 0
    for burst in range(BURSTS):
        asks = []
        for i in range(PER_BURST):
            roll = rng.random()
            if history and roll < 0.3:
                messages, _ = rng.choice(history)
                how = "repeat"
            elif history and roll < 0.55:
                earlier, answers = rng.choice(history)
                messages = earlier + [
                    {"role": "assistant", "content": answers[0]},
                    {"role": "user", "content": " ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))},
                ]
                how = "next turn"
            else:
                text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 160)))
                messages = [{"role": "user", "content": text}]
                how = "new"
            n = 2 if rng.random() < 0.2 else 1
            stream = rng.random() < 0.5
            drop = stream and rng.random() < 0.2
            asks.append((messages, rng.randint(4, 12), n, stream, drop))
            record.append(f"burst {burst} #{i}: {how}, {len(messages)} messages, n={n}, stream={stream}, drop={drop}")
        with cf.ThreadPoolExecutor(len(asks)) as pool:
            futures = [pool.submit(_ask, client, family, m, t, n, s, d) for m, t, n, s, d in asks]
            results = [f.result() for f in futures]
        for (messages, max_tokens, n, _, _), got in zip(asks, results):
            if got is None:
                continue
            (want,) = _ask(client, f"{family}-twin", messages, max_tokens, 1, False, False)
            schedule = "\n".join(record)
            assert got == [want] * n, f"seed {seed}: {got} != twin {want!r}\n{schedule}"
            history.append((messages, got))
            checked += 1
    assert checked >= BURSTS * PER_BURST // 2
    metrics = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=30).text
    refused = re.findall(r'mlxd:prefix_cache_refused_total\{model="([^"]+)"\} ([0-9.]+)', metrics)
    assert refused and all(float(v) == 0 for _, v in refused), refused
