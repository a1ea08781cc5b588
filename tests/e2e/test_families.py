"""Today's model families under continuous batching and prefix reuse.

One gateway serves a tiny random-weight model of every family in
``tests.tiny_model.FAMILIES`` (plain KV, sliding window, linear-attention
and state-space hybrids, attention sinks, MLA, chunked attention). For
each: it serves, it batches with other concurrent requests (greedy batched
equals greedy solo; a family mlx-lm cannot batch runs them one at a time
with the same answers), a cache hit gives the cold answer, and the next
turn of a chat reuses the previous turn's prefix.
"""

from __future__ import annotations

import concurrent.futures as cf

import openai
import pytest

from tests.conftest import API_KEY, settled_stats, start_server
from tests.tiny_model import FAMILIES, SLIDING_WINDOW, SOLO_FAMILIES, build_tiny_model

NAMES = sorted(FAMILIES)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    models = [
        {"name": name, "source": str(build_tiny_model(root / name, family=name)), "max_batch_size": 8} for name in NAMES
    ]
    (root / "gw").mkdir()
    srv = start_server(root / "gw", models)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def chat(client, model, messages, max_tokens=6):
    return client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0)


def user(text):
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("family", NAMES)
def test_family_serves_and_batches(server, client, family):
    prompts = [user(f"Question {i} about {family}: " + "words to fill the window " * (3 + i)) for i in range(4)]
    solo = [chat(client, family, p).choices[0].message.content for p in prompts]
    assert all(solo)
    fresh = [user(p[0]["content"] + " again") for p in prompts]
    start = settled_stats(server, family)
    solo_fresh = []
    for p in fresh:
        r = chat(client, family, p)
        solo_fresh.append(r.choices[0].message.content)
        assert r.usage.prompt_tokens > SLIDING_WINDOW
    alone = settled_stats(server, family)
    # the same prompts, all at once: they share engine steps (fewer steps
    # than the same work one request at a time, in this test's own window)
    with cf.ThreadPoolExecutor(len(fresh)) as pool:
        together = list(pool.map(lambda p: chat(client, family, p).choices[0].message.content, fresh))
    assert together == solo_fresh
    shared = settled_stats(server, family)
    if family in SOLO_FAMILIES:  # one sequence at a time: no shared steps, never a batch
        assert shared["max_batch_seen"] == 1, shared
        return
    assert shared["steps"] - alone["steps"] < 0.75 * (alone["steps"] - start["steps"]), (start, alone, shared)


@pytest.mark.parametrize("family", NAMES)
def test_family_cache_hit_equals_cold(client, family):
    messages = user(f"A repeatable {family} answer, please. " + "more context here " * 6)
    cold = chat(client, family, messages, max_tokens=10)
    warm = chat(client, family, messages, max_tokens=10)
    assert cold.usage.prompt_tokens_details.cached_tokens < cold.usage.prompt_tokens - 1
    assert warm.usage.prompt_tokens_details.cached_tokens == warm.usage.prompt_tokens - 1
    assert warm.choices[0].message.content == cold.choices[0].message.content


@pytest.mark.parametrize("family", NAMES)
def test_family_next_turn_reuses_the_previous_turn(client, family):
    first = user(f"Start a {family} conversation. " + "context words " * 8)
    r1 = chat(client, family, first, max_tokens=8)
    second = first + [
        {"role": "assistant", "content": r1.choices[0].message.content},
        {"role": "user", "content": "And then?"},
    ]
    r2 = chat(client, family, second, max_tokens=4)
    assert r2.usage.prompt_tokens_details.cached_tokens >= r1.usage.prompt_tokens - 1
    third = second + [
        {"role": "assistant", "content": r2.choices[0].message.content},
        {"role": "user", "content": "Once more?"},
    ]
    warm = chat(client, family, third, max_tokens=6)
    assert warm.usage.prompt_tokens_details.cached_tokens > 0


@pytest.mark.parametrize("family", NAMES)
def test_family_edited_last_message_reuses_the_history(client, family):
    history = user(f"A long {family} history to keep. " + "earlier turns " * 12) + [
        {"role": "assistant", "content": "Noted."}
    ]
    first = chat(client, family, history + [{"role": "user", "content": "First version of the question?"}])
    edited = chat(client, family, history + [{"role": "user", "content": "Edited question instead?"}])
    assert first.usage.prompt_tokens_details.cached_tokens < 30  # the template's preamble at most
    assert edited.usage.prompt_tokens_details.cached_tokens >= 40  # the whole history


@pytest.mark.parametrize("family", NAMES)
def test_family_repeat_of_a_prompt_prefilled_beside_a_decode_equals_the_cold_answer(client, family):
    """A new prompt whose prefill ends while another request decodes, sent
    again once that request is over: the repeat reuses all but its last
    token and gives the cold answer (the prompt-end checkpoint is the
    state of exactly its prefix, whatever moved the sequence)."""
    import threading

    decoding = threading.Event()

    def long_answer():
        stream = client.chat.completions.create(
            model=family,
            messages=user(f"Talk about {family} for a long time."),
            max_tokens=160,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                decoding.set()

    with cf.ThreadPoolExecutor(1) as pool:
        running = pool.submit(long_answer)
        assert decoding.wait(120)
        messages = user(f"A new {family} prompt, long enough to need two prefill chunks. " + "filler words " * 200)
        first = chat(client, family, messages, max_tokens=8)
        running.result(timeout=300)
    repeat = chat(client, family, messages, max_tokens=8)
    assert repeat.usage.prompt_tokens_details.cached_tokens == repeat.usage.prompt_tokens - 1
    assert repeat.choices[0].message.content == first.choices[0].message.content
