"""The current OpenAI request surface through a real gateway and workers,
with the official ``openai`` SDK (or plain HTTP) as the client: each field
mlxd accepts with a local meaning shows that meaning, and Codex CLI's real
requests (``tests/fixtures/codex``, captured from ``codex exec`` 0.171.0
with long texts trimmed) are answered with valid streams.

Two tiny random-weight models with a long context (Codex's prompts are
several thousand tokens): ``tiny-long`` with the default chat template and
``tiny-think``, whose template opens a ``<think>`` block and renders earlier
reasoning (``reasoning_content``) back into the prompt.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import API_KEY, start_server
from tests.unit.test_openai_shapes import check_echo

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "codex"
LONG, THINK = "tiny-long", "tiny-think"

THINK_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message.get('reasoning_content') %}<think>{{ message['reasoning_content'] }}</think>{% endif %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
"""Opens a reasoning block for the answer and renders earlier reasoning
(rendering ``tools`` itself makes mlxd pass messages with their
``reasoning_content``)."""


def long_copy(base: Path, out: Path, template: str | None = None) -> Path:
    """A copy of the tiny model at ``base`` with a 32k context (rotary
    positions need no new weights) and, if given, another chat template."""
    shutil.copytree(base, out)
    config = json.loads((out / "config.json").read_text())
    config["max_position_embeddings"] = 32768
    (out / "config.json").write_text(json.dumps(config))
    if template is not None:
        tokenizer = json.loads((out / "tokenizer_config.json").read_text())
        tokenizer["chat_template"] = template
        (out / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    return out


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("surface")
    models = [
        {"name": LONG, "source": str(long_copy(tiny_model_dir, tmp / "long"))},
        {"name": THINK, "source": str(long_copy(tiny_model_dir, tmp / "think", THINK_TEMPLATE))},
    ]
    srv = start_server(tmp, models)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def post(server, path: str, body: dict) -> httpx.Response:
    """``body`` posted to ``path`` of ``server`` as plain HTTP."""
    return httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=120)


def sse_events(body: bytes) -> list[tuple[str, dict]]:
    """``(event, data)`` of each Responses stream frame."""
    events = []
    for frame in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.split("\n") if ": " in line)
        if "data" in lines:
            events.append((lines.get("event", ""), json.loads(lines["data"])))
    return events


# --- Codex CLI ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_codex_request_replays(server, name):
    """Each captured Codex request (its model swapped for the tiny one and
    its answer capped at 8 tokens) streams a complete, valid response."""
    body = json.loads((FIXTURES / f"{name}.json").read_text())
    assert body["stream"] is True and "client_metadata" in body
    body.update(model=LONG, max_output_tokens=8)
    resp = post(server, "/v1/responses", body)
    assert resp.status_code == 200, resp.text
    events = sse_events(resp.content)  # each of its official type (tests/shapes, after the test)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert events[-1][0] in ("response.completed", "response.incomplete")
    final = events[-1][1]["response"]
    check_echo(final)
    assert final["reasoning"]["summary"] == body["reasoning"].get("summary")
    dropped = resp.headers.get("x-mlxd-dropped-tools")
    has_web_search = any(tool["type"] == "web_search" for tool in body.get("tools", []))
    assert dropped == ("web_search" if has_web_search else None)


def test_codex_custom_tool_call(server):
    """Codex's freeform ``exec`` tool (a custom tool with a Lark grammar,
    inside a namespace of an ``additional_tools`` item) is offered as a
    function with one string argument; a forced call comes back as a
    ``custom_tool_call`` whose ``input`` is that string."""
    body = json.loads((FIXTURES / "tool_001.json").read_text())
    body.update(model=LONG, max_output_tokens=120, stream=False, tool_choice={"type": "custom", "name": "exec"})
    resp = post(server, "/v1/responses", body)
    assert resp.status_code == 200, resp.text
    check_echo(resp.json())
    calls = [item for item in resp.json()["output"] if item["type"].endswith("call")]
    assert calls and calls[0]["type"] == "custom_tool_call" and calls[0]["name"] == "exec"
    assert isinstance(calls[0]["input"], str) and calls[0]["namespace"] == "functions"


def test_namespace_tools_are_flattened(oai):
    """A namespaced function is offered under its own name (it reaches the
    prompt: more input tokens) and its call names the namespace."""
    inner = {"type": "function", "name": "close_agent", "parameters": {"type": "object", "properties": {}}}
    namespace = {"type": "namespace", "name": "multi_agent", "description": "Agents.", "tools": [inner]}
    plain = oai.responses.create(model=LONG, input="hi", max_output_tokens=2)
    r = oai.responses.create(
        model=LONG,
        input="hi",
        tools=[namespace],
        tool_choice={"type": "function", "name": "close_agent"},
        max_output_tokens=40,
    )
    assert r.usage.input_tokens > plain.usage.input_tokens
    call = [item for item in r.output if item.type == "function_call"][0]
    assert call.name == "close_agent" and call.namespace == "multi_agent"


def test_hosted_tools_are_dropped_with_a_header(oai):
    raw = oai.responses.with_raw_response.create(
        model=LONG,
        input="hi",
        tools=[{"type": "web_search"}, {"type": "code_interpreter", "container": {"type": "auto"}}],
        max_output_tokens=2,
    )
    assert raw.headers["x-mlxd-dropped-tools"] == "web_search,code_interpreter"
    assert raw.parse().tools == []
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model=LONG, input="hi", tools=[{"type": "web_search"}], tool_choice="required")
    assert info.value.param == "tool_choice"


# --- reasoning: summary and encrypted content ------------------------------------------------


def test_reasoning_summary_and_encrypted_content_round_trip(oai):
    """``reasoning.summary`` puts the reasoning text in the item's summary
    (streamed as summary events); ``include: reasoning.encrypted_content``
    seals it, and the sealed item sent back renders exactly as the same
    reasoning sent in the clear."""
    ask = {"model": THINK, "input": "Weather?", "max_output_tokens": 8, "temperature": 0}
    extra = {"reasoning": {"summary": "auto"}, "include": ["reasoning.encrypted_content"]}
    r = oai.responses.create(**ask, **extra)
    item = r.output[0]
    assert item.type == "reasoning" and item.summary[0].text and not item.content
    assert item.encrypted_content.startswith("mlxd1.")
    events = list(oai.responses.create(**ask, **extra, stream=True))
    streamed = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    assert streamed == item.summary[0].text

    def history(reasoning_item: dict | None) -> int:
        items = [{"role": "user", "content": "Weather?"}]
        items += [reasoning_item] if reasoning_item else []
        items += [{"role": "assistant", "content": "Sunny."}, {"role": "user", "content": "Tomorrow?"}]
        return oai.responses.create(model=THINK, input=items, max_output_tokens=1).usage.input_tokens

    sealed = history({"type": "reasoning", "id": item.id, "summary": [], "encrypted_content": item.encrypted_content})
    clear = history(
        {
            "type": "reasoning",
            "id": item.id,
            "summary": [],
            "content": [{"type": "reasoning_text", "text": item.summary[0].text}],
        }
    )
    assert sealed == clear > history(None)


# --- chat completions ---------------------------------------------------------------------------


def test_chat_accepts_todays_fields(server, oai):
    """The fields OpenAI clients send today are accepted, the answer
    validates, and a hosted web search is reported as dropped."""
    raw = oai.chat.completions.with_raw_response.create(
        model=LONG,
        messages=[
            {
                "role": "developer",
                "content": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
            },
            {"role": "user", "content": "hi"},
        ],
        max_completion_tokens=4,
        store=True,
        metadata={"k": "v"},
        service_tier="flex",
        prompt_cache_key="conv-1",
        safety_identifier="user-1",
        verbosity="low",
        prediction={"type": "content", "content": "hello"},
        modalities=["text"],
        reasoning_effort="xhigh",
        web_search_options={"search_context_size": "low"},
    )
    assert raw.headers["x-mlxd-dropped-tools"] == "web_search"
    body = json.loads(raw.text)  # of its official type (tests/shapes, after the test)
    assert body["service_tier"] == "default" and body["choices"][0]["message"]["refusal"] is None
    stream = post(
        server,
        "/v1/chat/completions",
        {"model": LONG, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True},
    )
    frames = [line[6:] for line in stream.text.split("\n") if line.startswith("data: ")]
    assert frames[-1] == "[DONE]" and all(json.loads(f)["object"] == "chat.completion.chunk" for f in frames[:-1])
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(
            model=LONG, messages=[{"role": "user", "content": "hi"}], modalities=["text", "audio"]
        )
    assert info.value.param == "modalities[1]"


def test_responses_logprobs(oai):
    r = oai.responses.create(
        model=LONG, input="hi", max_output_tokens=4, include=["message.output_text.logprobs"], top_logprobs=2
    )
    part = r.output[0].content[0]
    assert part.logprobs and all(len(t.top_logprobs) <= 2 for t in part.logprobs)
    assert "".join(t.token for t in part.logprobs) == part.text


def test_legacy_functions(oai):
    """The deprecated ``functions`` / ``function_call`` still work: a forced
    call comes back as the message's ``function_call``."""
    functions = [{"name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}]
    r = oai.chat.completions.create(
        model=LONG,
        messages=[{"role": "user", "content": "time?"}],
        functions=functions,
        function_call={"name": "get_time"},
        max_tokens=40,
    )
    message = r.choices[0].message
    assert message.function_call.name == "get_time" and not message.tool_calls
    follow = oai.chat.completions.create(
        model=LONG,
        messages=[
            {"role": "user", "content": "time?"},
            {"role": "assistant", "content": None, "function_call": message.function_call.model_dump()},
            {"role": "function", "name": "get_time", "content": "noon"},
        ],
        functions=functions,
        max_tokens=2,
    )
    assert follow.usage.prompt_tokens > r.usage.prompt_tokens


def test_completions_echo_and_best_of(oai):
    r = oai.completions.create(
        model=LONG, prompt="Once upon", echo=True, best_of=3, n=2, max_tokens=3, extra_body={"ignore_eos": True}
    )
    assert len(r.choices) == 2 and all(c.text.startswith("Once upon") for c in r.choices)
    assert all(c.logprobs is None for c in r.choices) and r.usage.completion_tokens == 9


def test_chat_custom_tool(oai):
    """A forced custom tool on chat comes back as a ``custom`` tool call."""
    tool = {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch."}}
    r = oai.chat.completions.create(
        model=LONG,
        messages=[{"role": "user", "content": "patch it"}],
        tools=[tool],
        tool_choice={"type": "custom", "custom": {"name": "apply_patch"}},
        max_tokens=60,
    )
    call = r.choices[0].message.tool_calls[0]
    assert call.type == "custom" and call.custom.name == "apply_patch" and isinstance(call.custom.input, str)
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(
            model=LONG, messages=[{"role": "user", "content": "x"}], tools=[tool], stream=True, max_tokens=2
        )
    assert info.value.param == "tools[0].type"
