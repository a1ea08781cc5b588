"""Streaming output parsers (worker.parsers): every tool-call family on
realistic outputs, fed whole, one character at a time and in random chunks,
must give the same content, reasoning and calls; plus hold-back, streaming,
truncation and max_tool_calls behaviour.

The helpers here (``run``, ``chunkings``, ``TOOLS``) are shared by the other
``test_parsers_*`` files.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

import pytest

from shared.protocol import Tool
from worker.parsers import ParsedDelta, make_parser

TOOLS = [
    Tool(
        name="get_weather",
        description="Current weather",
        parameters={
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "detailed": {"type": "boolean"},
                "coords": {"type": "object"},
            },
            "required": ["city"],
        },
    ),
    Tool(
        name="search",
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "number"}},
            "required": ["query"],
        },
    ),
    Tool(name="get_time", parameters={}),
]

ID_RE = re.compile(r"^call_[0-9a-f]{24}$")


@dataclass
class Result:
    """Everything a parser let out for one output."""

    content: str = ""
    reasoning: str = ""
    calls: list[dict] = field(default_factory=list)  # {id, name, arguments(text)}
    deltas: list[ParsedDelta] = field(default_factory=list)
    done: bool = False
    saw: bool = False

    @property
    def parsed_calls(self) -> list[tuple[str, dict]]:
        """(name, parsed arguments) of each call, in index order."""
        return [(c["name"], json.loads(c["arguments"])) for c in self.calls]


def chunkings(text: str, seeds=(0, 1, 2, 3, 4)) -> dict[str, list[str]]:
    """The ways a test feeds ``text``: whole, per character, random chunks."""
    out = {"whole": [text], "chars": list(text)}
    for seed in seeds:
        rnd = random.Random(seed)
        pieces, i = [], 0
        while i < len(text):
            n = rnd.randint(1, 9)
            pieces.append(text[i : i + n])
            i += n
        out[f"random{seed}"] = pieces
    return out


def run(pieces: list[str], *, tool_format=None, reasoning_format=None, tools=TOOLS, **kw) -> Result:
    """Feed ``pieces`` to a fresh parser, check the delta protocol, collect."""
    p = make_parser(tool_format=tool_format, reasoning_format=reasoning_format, tools=tools, **kw)
    res = Result()
    deltas = [p.feed(x) for x in pieces] + [p.finish()]
    res.deltas = deltas
    for d in deltas:
        res.content += d.content
        res.reasoning += d.reasoning
        for tc in d.tool_calls:
            if tc.index == len(res.calls):
                assert tc.id is not None and ID_RE.match(tc.id), tc
                assert tc.name, tc
                res.calls.append({"id": tc.id, "name": tc.name, "arguments": tc.arguments})
            else:
                assert tc.index == len(res.calls) - 1, "deltas must continue the newest call"
                assert tc.id is None and tc.name is None, tc
                res.calls[tc.index]["arguments"] += tc.arguments
    for c in res.calls:
        assert isinstance(json.loads(c["arguments"]), dict), c
    assert len({c["id"] for c in res.calls}) == len(res.calls)
    res.done = p.done
    res.saw = p.saw_tool_call
    assert res.saw == bool(res.calls)
    return res


def check_all_chunkings(text: str, content: str, calls: list, reasoning: str = "", **kw) -> None:
    """Every chunking of ``text`` gives exactly the expected streams."""
    for how, pieces in chunkings(text).items():
        r = run(pieces, **kw)
        assert r.content == content, how
        assert r.reasoning == reasoning, how
        assert r.parsed_calls == calls, how


W = ("get_weather", {"city": "Paris", "days": 3})
S = ("search", {"query": 'mlx "fast" {inference}'})

CASES = {
    "hermes": [
        (
            "no call",
            "The weather is nice.\nNo tools <needed> here: a < b.",
            "The weather is nice.\nNo tools <needed> here: a < b.",
            [],
        ),
        (
            "content then call",
            'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>',
            "Let me check.",
            [W],
        ),
        (
            "two calls",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n'
            '<tool_call>\n{"name": "search", "arguments": {"query": "mlx \\"fast\\" {inference}"}}\n</tool_call>\n',
            "",
            [W, S],
        ),
        (
            "compact, no newlines",
            '<tool_call>{"name":"get_weather","arguments":{"city":"Paris","days":3}}</tool_call>',
            "",
            [W],
        ),
        (
            "arguments first",
            '<tool_call>\n{"arguments": {"city": "Paris", "days": 3}, "name": "get_weather"}\n</tool_call>',
            "",
            [W],
        ),
        (
            "arguments as a JSON string",
            '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\", \\"days\\": 3}"}\n</tool_call>',
            "",
            [W],
        ),
        ("no arguments", '<tool_call>\n{"name": "get_time"}\n</tool_call>', "", [("get_time", {})]),
        (
            "nested arguments",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "coords": {"lat": -1.5e3, "v": [true, null, "}"]}}}\n</tool_call>',
            "",
            [("get_weather", {"city": "Paris", "coords": {"lat": -1500.0, "v": [True, None, "}"]}})],
        ),
        (
            "missing outer brace",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}\n</tool_call>',
            "",
            [W],
        ),
        (
            "content after call",
            '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\nDone.',
            "\nDone.",
            [("get_time", {})],
        ),
        (
            "raw newline in string",
            '<tool_call>\n{"name": "search", "arguments": {"query": "a\nb"}}\n</tool_call>',
            "",
            [("search", {"query": "a\nb"})],
        ),
        (
            "unicode",
            'Voilà 🌦\n<tool_call>\n{"name": "search", "arguments": {"query": "météo ☀ \\u00e9"}}\n</tool_call>',
            "Voilà 🌦",
            [("search", {"query": "météo ☀ é"})],
        ),
    ],
    "qwen3_coder": [
        ("no call", "Use <function> pointers.", "Use <function> pointers.", []),
        (
            "content then call",
            "I'll look that up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
            "I'll look that up.",
            [W],
        ),
        (
            "two calls, typed values",
            "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=detailed>\ntrue\n</parameter>\n"
            '<parameter=coords>\n{"lat": 1}\n</parameter>\n</function>\n</tool_call>\n'
            "<tool_call>\n<function=search>\n<parameter=query>\nline1\nline2\n</parameter>\n<parameter=limit>\n2.5\n</parameter>\n</function>\n</tool_call>",
            "",
            [
                ("get_weather", {"city": "New York", "detailed": True, "coords": {"lat": 1}}),
                ("search", {"query": "line1\nline2", "limit": 2.5}),
            ],
        ),
        (
            "string typed stays string",
            "<tool_call>\n<function=search>\n<parameter=query>\n42\n</parameter>\n</function>\n</tool_call>",
            "",
            [("search", {"query": "42"})],
        ),
        (
            "missing </parameter> and <tool_call>",
            "<function=get_weather>\n<parameter=city>\nParis\n<parameter=days>\n3\n</function>\nok",
            "\nok",
            [W],
        ),
        ("no parameters", "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", "", [("get_time", {})]),
    ],
    "llama3_json": [
        ("no call", "It is sunny in Paris today.", "It is sunny in Paris today.", []),
        ("json answer is content", '{"city": "Paris"}', '{"city": "Paris"}', []),
        ("unknown name is content", '{"name": "Bob", "parameters": {}}', '{"name": "Bob", "parameters": {}}', []),
        ("call", '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}', "", [W]),
        (
            "python tag, two calls",
            '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; '
            '{"name": "search", "parameters": {"query": "mlx \\"fast\\" {inference}"}}<|eom_id|>',
            "",
            [W, S],
        ),
        ("leading whitespace", '\n {"name": "get_time", "parameters": {}}', "", [("get_time", {})]),
        (
            "call not at start is content",
            'Sure: {"name": "get_time", "parameters": {}}',
            'Sure: {"name": "get_time", "parameters": {}}',
            [],
        ),
    ],
    "mistral": [
        ("no call", "Bonjour [not a tool] call.", "Bonjour [not a tool] call.", []),
        (
            "old form, two calls",
            'Checking.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
            '{"name": "search", "arguments": {"query": "mlx \\"fast\\" {inference}"}}]',
            "Checking.",
            [W, S],
        ),
        (
            "new form, two calls",
            '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]search[ARGS]{"query": "mlx \\"fast\\" {inference}"}',
            "",
            [W, S],
        ),
        (
            "new form with call id",
            '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris", "days": 3}',
            "",
            [W],
        ),
        ("old form single object", '[TOOL_CALLS] {"name": "get_time", "arguments": {}}', "", [("get_time", {})]),
    ],
    "deepseek_v3": [
        ("no call", "Plain answer with ｜ characters.", "Plain answer with ｜ characters.", []),
        (
            "v3 form, two calls",
            "Let me see.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
            '{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n'
            '```json\n{"query": "mlx \\"fast\\" {inference}"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
            "Let me see.",
            [W, S],
        ),
        (
            "v3.1 form",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "",
            [W],
        ),
    ],
    "glm45": [
        ("no call", "Nothing to call <here>.", "Nothing to call <here>.", []),
        (
            "content then two calls",
            "Checking.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
            "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>search\n"
            '<arg_key>query</arg_key>\n<arg_value>mlx "fast" {inference}</arg_value>\n</tool_call>',
            "Checking.",
            [W, S],
        ),
        (
            "no newline after name",
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
            "<arg_value>3</arg_value></tool_call>",
            "",
            [W],
        ),
        ("no arguments", "<tool_call>get_time\n</tool_call>", "", [("get_time", {})]),
    ],
    "harmony": [
        ("final only", "<|channel|>final<|message|>Hello there.<|return|>", "Hello there.", []),
        (
            "analysis then call",
            "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>',
            "",
            [W],
        ),
        (
            "recipient before channel",
            ' to=functions.search<|channel|>commentary json<|message|>{"query": "mlx \\"fast\\" {inference}"}<|call|>',
            "",
            [S],
        ),
        (
            "preamble then call",
            "<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant to=functions.get_time"
            "<|channel|>commentary <|constrain|>json<|message|>{}<|call|>",
            "Checking now.",
            [("get_time", {})],
        ),
        ("not harmony at all", "Just text.", "Just text.", []),
    ],
    "json": [
        ("plain text", "Hello {world}", "Hello {world}", []),
        ("json answer is content", '{"answer": 42}', '{"answer": 42}', []),
        ("single call", '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}', "", [W]),
        (
            "array",
            ' [{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
            '{"name": "search", "arguments": {"query": "mlx \\"fast\\" {inference}"}}]',
            "",
            [W, S],
        ),
        ("fenced", '```json\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n```\n', "", [W]),
        ("fenced non-call", "```json\n[1, 2]\n```", "```json\n[1, 2]\n```", []),
        ("code fence of another language", "```python\nprint(1)\n```", "```python\nprint(1)\n```", []),
        ("empty array", "[]", "[]", []),
    ],
}

FAMILY_CASES = [
    pytest.param(fmt, text, content, calls, id=f"{fmt}-{name}")
    for fmt, cases in CASES.items()
    for name, text, content, calls in cases
]


@pytest.mark.parametrize("fmt,text,content,calls", FAMILY_CASES)
def test_family_outputs_any_chunking(fmt, text, content, calls):
    reasoning = ""
    if fmt == "harmony" and "analysis" in text:
        reasoning = "Need weather."
    check_all_chunkings(text, content, calls, reasoning=reasoning, tool_format=fmt)


def test_no_tools_means_no_tool_parsing():
    text = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    for tools in (None, []):
        r = run([text], tool_format="hermes", tools=tools)
        assert r.content == text and not r.calls
    r = run([text], tool_format=None)
    assert r.content == text and not r.calls


def test_unknown_formats_rejected():
    with pytest.raises(ValueError):
        make_parser(tool_format="nope", reasoning_format=None, tools=TOOLS)
    with pytest.raises(ValueError):
        make_parser(tool_format=None, reasoning_format="nope", tools=TOOLS)


def test_hold_back_partial_marker():
    p = make_parser(tool_format="hermes", reasoning_format=None, tools=TOOLS)
    assert p.feed("Hello <tool").content == "Hello "
    assert p.feed("box> is").content == "<toolbox> is"
    d = p.feed(" here\n")
    assert d.content == " here"  # the newline may precede <tool_call>
    assert p.feed("x").content == "\nx"
    assert p.finish().content == ""


def test_content_streams_before_call_ends_and_arguments_stream():
    p = make_parser(tool_format="hermes", reasoning_format=None, tools=TOOLS)
    assert p.feed("Sure").content == "Sure"
    d = p.feed('\n<tool_call>\n{"name": "search", "arguments": {"query": "long te')
    assert d.content == ""
    assert len(d.tool_calls) == 1
    first = d.tool_calls[0]
    assert first.index == 0 and first.name == "search" and ID_RE.match(first.id)
    assert first.arguments == '{"query": "long te'
    d = p.feed('xt", "limit": 1')
    assert [t.arguments for t in d.tool_calls] == ['xt", "limit": 1']
    assert d.tool_calls[0].id is None and d.tool_calls[0].name is None
    d = p.feed("0}}\n</tool_call>")
    assert "".join(t.arguments for t in d.tool_calls) == "0}"
    assert p.saw_tool_call and not p.done
    assert p.finish().empty


def test_xml_families_stream_each_parameter():
    p = make_parser(tool_format="qwen3_coder", reasoning_format=None, tools=TOOLS)
    d = p.feed("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n")
    assert d.tool_calls[0].name == "get_weather"
    assert d.tool_calls[0].arguments == '{"city": "Paris"'
    d = p.feed("<parameter=days>\n3\n</parameter>\n")
    assert d.tool_calls[0].arguments == ', "days": 3'
    d = p.feed("</function>\n</tool_call>")
    assert d.tool_calls[0].arguments == "}"


@pytest.mark.parametrize(
    "fmt,text",
    [
        ("hermes", 'Hi <tool_call>\n{"name": "get_wea'),
        ("hermes", "Hi\n<tool_call>\n"),
        ("hermes", 'Hi\n<tool_call>\n{"na'),
        ("qwen3_coder", "Hi\n<tool_call>\n<function=get_wea"),
        ("glm45", "Hi\n<tool_call>get_wea"),
        ("mistral", "Hi[TOOL_CALLS]get_wea"),
        ("mistral", 'Hi[TOOL_CALLS][{"name": "get'),
        ("deepseek_v3", "Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_wea"),
        ("llama3_json", '<|python_tag|>{"name": "get_'),
        ("json", '{"name": "get_'),
        ("json", '```json\n[{"name'),
    ],
)
def test_truncated_before_name_becomes_content(fmt, text):
    for how, pieces in chunkings(text).items():
        r = run(pieces, tool_format=fmt)
        assert r.calls == [], how
        assert r.content == text, how


@pytest.mark.parametrize(
    "fmt,text,expected",
    [
        ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "mlx', {"query": "mlx"}),
        (
            "hermes",
            '<tool_call>\n{"name": "search", "arguments": {"query": "a", "limit": 1.',
            {"query": "a", "limit": 1},
        ),
        ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "a", "lim', {"query": "a"}),
        ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": "a\\u00', {"query": "a"}),
        ("hermes", '<tool_call>\n{"name": "get_time", "argu', {}),
        (
            "hermes",
            '<tool_call>\n{"name": "get_weather", "arguments": {"coords": {"v": [1, tru',
            {"coords": {"v": [1]}},
        ),
        ("qwen3_coder", "<tool_call>\n<function=search>\n<parameter=query>\nmlx is", {"query": "mlx is"}),
        ("glm45", "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>ml", {"query": "ml"}),
        ("mistral", '[TOOL_CALLS]search[ARGS]{"query": "ml', {"query": "ml"}),
        (
            "deepseek_v3",
            '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"query": "ml',
            {"query": "ml"},
        ),
        (
            "harmony",
            '<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"query": "ml',
            {"query": "ml"},
        ),
        ("json", '[{"name": "search", "arguments": {"query": "ml', {"query": "ml"}),
        ("llama3_json", '{"name": "search", "parameters": {"query": "ml', {"query": "ml"}),
    ],
)
def test_truncated_call_is_completed(fmt, text, expected):
    for how, pieces in chunkings(text).items():
        r = run(pieces, tool_format=fmt)
        assert r.content == "", how
        assert [c[1] for c in r.parsed_calls] == [expected], how


def test_malformed_hermes_block_goes_back_to_content():
    text = 'Try:\n<tool_call>\nget_weather(city="Paris")\n</tool_call>\nThen <tool_call>\n{"name": "get_time"}\n</tool_call>'
    for how, pieces in chunkings(text).items():
        r = run(pieces, tool_format="hermes")
        assert r.content == 'Try:\n<tool_call>\nget_weather(city="Paris")\n</tool_call>\nThen ', how
        assert r.parsed_calls == [("get_time", {})], how


def test_hermes_invalid_json_after_name_closes_call():
    text = '<tool_call>\n{"name": "search", "arguments": {"query": "x" oops}}\n</tool_call>after'
    for how, pieces in chunkings(text).items():
        r = run(pieces, tool_format="hermes")
        assert r.parsed_calls == [("search", {"query": "x"})], how
        assert r.content == "after", how


@pytest.mark.parametrize("fmt", list(CASES))
def test_parallel_false_keeps_first_call_and_sets_done(fmt):
    samples = sorted(((text, calls) for _, text, _, calls in CASES[fmt] if calls), key=lambda s: -len(s[1]))
    text, calls = samples[0]  # a multi-call sample where the family has one
    text += "\ntrailing text"
    for how, pieces in chunkings(text).items():
        p = make_parser(tool_format=fmt, reasoning_format=None, tools=TOOLS, max_tool_calls=1)
        deltas, done_at = [], None
        for k, piece in enumerate(pieces):
            deltas.append(p.feed(piece))
            if p.done and done_at is None:
                done_at = k
        deltas.append(p.finish())
        assert p.done, how
        assert done_at is not None, how  # known done before finish()
        names = {tc.name for d in deltas for tc in d.tool_calls if tc.name}
        assert names == {calls[0][0]}, how
        assert all(tc.index == 0 for d in deltas for tc in d.tool_calls), how
        assert "trailing" not in "".join(d.content for d in deltas), how
        assert p.feed("more").empty


def test_parallel_false_single_call_output():
    p = make_parser(tool_format="hermes", reasoning_format=None, tools=TOOLS, max_tool_calls=1)
    d = p.feed('<tool_call>\n{"name": "get_time", "arguments": {}}')
    assert p.done and d.tool_calls[0].name == "get_time"
    assert "".join(t.arguments for t in d.tool_calls) == "{}"
    assert p.feed("\n</tool_call>").empty and p.finish().empty


def test_max_tool_calls_keeps_that_many_calls_and_sets_done():
    text = "".join(
        f'<tool_call>\n{{"name": "get_time", "arguments": {{"zone": "{zone}"}}}}\n</tool_call>\n'
        for zone in ("UTC", "CET", "EST")
    )
    text += "trailing"
    for how, pieces in chunkings(text).items():
        p = make_parser(tool_format="hermes", reasoning_format=None, tools=TOOLS, max_tool_calls=2)
        deltas = [p.feed(piece) for piece in pieces] + [p.finish()]
        assert p.done, how
        assert sorted({tc.index for d in deltas for tc in d.tool_calls}) == [0, 1], how
        assert "trailing" not in "".join(d.content for d in deltas), how
    unlimited = run([text], tool_format="hermes")
    assert len(unlimited.parsed_calls) == 3 and "trailing" in unlimited.content


def test_a_repeated_call_ends_the_turn_and_is_dropped():
    """Small models repeat a forced call until their token limit: in a
    forced turn the first repeat (same name, same arguments as JSON) ends
    the turn; elsewhere identical calls are kept."""
    first = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\n'
    other = '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>\n'
    repeat = '<tool_call>\n{"name":"get_time","arguments":{ "zone" : "UTC" }}\n</tool_call>\n'
    text = first + other + repeat + other + "trailing"
    for how, pieces in chunkings(text).items():
        p = make_parser(tool_format="hermes", reasoning_format=None, tools=TOOLS, end_on_repeat=True)
        deltas = [p.feed(piece) for piece in pieces] + [p.finish()]
        assert p.done, how
        calls = [tc for d in deltas for tc in d.tool_calls]
        assert sorted({tc.index for tc in calls}) == [0, 1], how
        assert [tc.name for tc in calls if tc.name] == ["get_time", "get_time"], how
        args = {i: "".join(tc.arguments for tc in calls if tc.index == i) for i in (0, 1)}
        assert [json.loads(a)["zone"] for a in args.values()] == ["UTC", "CET"], how
        assert "trailing" not in "".join(d.content for d in deltas), how
    assert len(run([text], tool_format="hermes").parsed_calls) == 4


def test_a_call_still_open_at_the_end_is_released():
    """A later call held for the repeat check still reaches the client when
    generation ends inside it."""
    text = (
        '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}'
    )
    p = make_parser(tool_format="hermes", reasoning_format=None, tools=TOOLS, end_on_repeat=True)
    deltas = [p.feed(text), p.finish()]
    calls = [tc for d in deltas for tc in d.tool_calls]
    args = ["".join(tc.arguments for tc in calls if tc.index == i) for i in (0, 1)]
    assert [json.loads(a) for a in args] == [{"zone": "UTC"}, {"zone": "CET"}]


def test_whitespace_after_last_call_is_dropped_but_content_kept():
    r = run(['<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>\n'], tool_format="hermes")
    assert r.content == ""
    r = run(['Hi\n\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'], tool_format="hermes")
    assert r.content == "Hi\n"  # only the one newline right before <tool_call> is markup


def test_ids_are_fresh_per_call_and_per_parser():
    text = CASES["hermes"][2][1]
    a = run([text], tool_format="hermes")
    b = run([text], tool_format="hermes")
    ids = [c["id"] for c in a.calls + b.calls]
    assert len(set(ids)) == 4


def test_every_split_point_of_a_call():
    """Split a two-call output into two pieces at every position."""
    text = CASES["hermes"][1][1]
    for i in range(len(text) + 1):
        r = run([text[:i], text[i:]], tool_format="hermes")
        assert r.content == "Let me check." and r.parsed_calls == [W], i


@pytest.mark.parametrize("fmt", list(CASES))
def test_truncation_at_every_point(fmt):
    """Cut every sample after every character: calls are always valid JSON
    objects, the cut is chunking-independent, and when no call came out
    nothing is lost (Harmony headers excepted: they are never content)."""
    for _, text, _, _ in CASES[fmt]:
        for i in range(len(text) + 1):
            prefix = text[:i]
            whole = run([prefix], tool_format=fmt)
            chars = run(list(prefix), tool_format=fmt)
            assert (whole.content, whole.reasoning, whole.parsed_calls) == (
                chars.content,
                chars.reasoning,
                chars.parsed_calls,
            ), prefix
            if not whole.calls and fmt != "harmony":
                assert whole.content == prefix, prefix


def _random_json(rnd: random.Random, depth: int = 0):
    """A random JSON value with awkward strings and numbers."""
    kind = rnd.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rnd.choice([True, False, None])
    if kind == 1:
        return rnd.choice([0, -1, 7, 123456789, -0.5, 1e-7, 2.5e10, 3.0])
    if kind in (2, 3, 4):
        alphabet = 'ab "\\/{}[]:,\n\t<>é☀🌦\u0001'
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(12)))
    if kind == 5:
        return [_random_json(rnd, depth + 1) for _ in range(rnd.randrange(4))]
    suffixes = ["", " ", '"', "}"]
    return {f"k{j}{rnd.choice(suffixes)}": _random_json(rnd, depth + 1) for j in range(rnd.randrange(4))}


@pytest.mark.parametrize("seed", range(20))
def test_fuzzed_arguments_round_trip(seed):
    rnd = random.Random(seed)
    args = {f"p{j}": _random_json(rnd) for j in range(rnd.randrange(1, 5))}
    ascii_only = rnd.random() < 0.5
    compact = rnd.random() < 0.5
    dumped = json.dumps(args, ensure_ascii=ascii_only, separators=(",", ":") if compact else None)
    outputs = {
        "hermes": f'<tool_call>\n{{"name": "search", "arguments": {dumped}}}\n</tool_call>',
        "json": f'{{"name": "search", "arguments": {dumped}}}',
        "llama3_json": f'<|python_tag|>{{"name": "search", "parameters": {dumped}}}',
        "mistral": f"[TOOL_CALLS]search[ARGS]{dumped}",
        "deepseek_v3": f"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{dumped}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "harmony": f"<|channel|>commentary to=functions.search <|constrain|>json<|message|>{dumped}<|call|>",
    }
    for fmt, text in outputs.items():
        for how, pieces in chunkings(text, seeds=(seed,)).items():
            r = run(pieces, tool_format=fmt)
            assert r.parsed_calls == [("search", args)], (fmt, how)
            assert r.content == "", (fmt, how)


def test_parser_satisfies_protocol():
    from worker.parsers import OutputParser

    for fmt in (None, "hermes", "harmony"):
        for rf in (None, "think", "harmony"):
            p = make_parser(tool_format=fmt, reasoning_format=rf, tools=TOOLS)
            assert isinstance(p, OutputParser)
            assert p.saw_tool_call is False and p.done is False


def test_passthrough_without_formats():
    text = "<think>x</think> <tool_call>{}</tool_call> [TOOL_CALLS]"
    for how, pieces in chunkings(text).items():
        r = run(pieces)
        assert r.content == text and r.reasoning == "" and not r.calls, how


SOUP = [
    "<tool_call>",
    "</tool_call>",
    "\n",
    " ",
    "{",
    "}",
    "[",
    "]",
    '"name"',
    ":",
    ",",
    '"get_weather"',
    '"search"',
    '"arguments"',
    '"parameters"',
    '{"city": "Paris"}',
    '"x',
    "\\",
    "1",
    "tru",
    "<function=",
    "get_weather",
    ">",
    "<parameter=",
    "city",
    "</parameter>",
    "</function>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
    "function",
    "```json\n",
    "```",
    "<|channel|>",
    "analysis",
    "final",
    "commentary to=functions.search",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|start|>assistant",
    "<|return|>",
    "<think>",
    "</think>",
    "[THINK]",
    "[/THINK]",
    "<|python_tag|>",
    ";",
    "hello",
    "é🌦",
    "<",
    "<|",
]


@pytest.mark.parametrize("seed", range(400))
def test_marker_soup_is_chunking_independent(seed):
    """Random mixes of every family's markup, JSON bits and text, with any
    format pair and options: no errors, valid calls, and the same result
    for every chunking."""
    rnd = random.Random(seed)
    text = "".join(rnd.choice(SOUP) for _ in range(rnd.randrange(1, 40)))
    kw = dict(
        tool_format=rnd.choice((*CASES, None)),
        reasoning_format=rnd.choice((None, "think", "think_mistral", "harmony")),
        max_tool_calls=rnd.choice((None, None, 1, 2)),
        thinking_open=rnd.random() < 0.2,
    )
    results = [run(pieces, **kw) for pieces in chunkings(text, seeds=(seed,)).values()]
    first = results[0]
    for r in results[1:]:
        assert (r.content, r.reasoning, r.parsed_calls) == (first.content, first.reasoning, first.parsed_calls), (
            text,
            kw,
        )
