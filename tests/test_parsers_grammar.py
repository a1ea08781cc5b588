"""Tool-call grammars (worker.parsers.tool_call_grammar) in llguidance:
every family's grammar compiles; hermes and json accept valid calls and
reject wrong names and schema violations with the default model's
tokenizer; and for every family, a call the grammar accepts is parsed back
by that family's parser to the same call."""

from __future__ import annotations

import json

import pytest

llguidance = pytest.importorskip("llguidance")

from shared.protocol import Tool  # noqa: E402
from tests.test_parsers import TOOLS, run  # noqa: E402
from worker.parsers import (  # noqa: E402
    TOOL_FORMATS,
    grammar_markers,
    special_token_ids,
    tool_call_grammar,
)

SPECIALS = [
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|constrain|>",
    "<|return|>",
    "[TOOL_CALLS]",
    "[ARGS]",
]


def _compile(g: str) -> str:
    """llguidance's error for grammar ``g`` (empty when it compiles)."""
    return llguidance.LLMatcher.validate_grammar(llguidance.grammar_from("lark", g))


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
@pytest.mark.parametrize("choice,name", [("required", None), ("function", "search")])
@pytest.mark.parametrize("max_calls", [1, 4])
def test_grammar_compiles(fmt, choice, name, max_calls):
    g = tool_call_grammar(fmt, TOOLS, choice=choice, name=name, max_calls=max_calls)
    assert _compile(g) == ""


def test_grammar_compiles_with_awkward_schemas():
    tools = [
        Tool(
            name="odd-name.v2",
            parameters={
                "type": "object",
                "$schema": "http://json-schema.org/draft-07/schema#",
                "title": 'brace } and "quote" and \\ backslash',
                "properties": {
                    "when": {"type": "string", "format": "date-time"},
                    "maybe": {"type": ["integer", "null"]},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "mode": {"enum": ["a", 'b"c']},
                    "any": {},
                },
            },
        ),
        Tool(name="noargs"),
    ]
    for fmt in TOOL_FORMATS:
        g = tool_call_grammar(fmt, tools, choice="required", name=None, max_calls=4)
        assert _compile(g) == "", fmt


def test_grammar_argument_errors():
    with pytest.raises(ValueError):
        tool_call_grammar("hermes", TOOLS, choice="function", name="nope", max_calls=1)
    with pytest.raises(ValueError):
        tool_call_grammar("hermes", [], choice="required", name=None, max_calls=1)
    with pytest.raises(ValueError):
        tool_call_grammar("hermes", TOOLS, choice="auto", name=None, max_calls=1)
    with pytest.raises(ValueError):
        tool_call_grammar("bogus", TOOLS, choice="required", name=None, max_calls=1)
    with pytest.raises(ValueError):
        grammar_markers("bogus")


@pytest.fixture(scope="module")
def hf_tokenizer_file():
    """tokenizer.json of the default model (skips when it is not available)."""
    transformers = pytest.importorskip("transformers")
    from shared.config import DEFAULT_MODEL_SOURCE
    from worker.loading.loader import resolve_source

    try:
        path = resolve_source(DEFAULT_MODEL_SOURCE) / "tokenizer.json"
    except Exception as e:  # no local model: nothing to test against
        pytest.skip(f"default model not available: {e}")
    if not path.exists():
        pytest.skip("default model has no tokenizer.json")
    return transformers, str(path)


@pytest.fixture(scope="module")
def ll_tokenizer(hf_tokenizer_file):
    """The default model's tokenizer for llguidance."""
    import llguidance.hf

    transformers, path = hf_tokenizer_file
    return llguidance.hf.from_tokenizer(transformers.PreTrainedTokenizerFast(tokenizer_file=path))


@pytest.fixture(scope="module")
def hf_special(hf_tokenizer_file):
    """The default HF tokenizer plus Harmony/Mistral markers as special tokens."""
    transformers, path = hf_tokenizer_file
    tok = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    return tok


@pytest.fixture(scope="module")
def ll_special(hf_special):
    """:func:`hf_special` for llguidance, and the markers' ids."""
    import llguidance.hf

    ids = {s: hf_special.convert_tokens_to_ids(s) for s in SPECIALS}
    return llguidance.hf.from_tokenizer(hf_special), ids


def accepts(tokenizer, grammar: str, text: str) -> bool:
    """Whether a matcher for ``grammar`` takes ``text``'s tokens and is then
    in an accepting state."""
    m = llguidance.LLMatcher(tokenizer, llguidance.grammar_from("lark", grammar), log_level=0)
    assert not m.is_error(), m.get_error()
    return m.consume_tokens(tokenizer.tokenize_str(text)) and m.is_accepting()


HERMES_OK = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
HERMES_SEARCH = '<tool_call>\n{"name": "search", "arguments": {"query": "mlx"}}\n</tool_call>'
HERMES_TWO = HERMES_OK + "\n" + HERMES_SEARCH


def test_hermes_grammar_accepts_and_rejects(ll_tokenizer):
    g = tool_call_grammar("hermes", TOOLS, choice="required", name=None, max_calls=1)
    assert accepts(ll_tokenizer, g, HERMES_OK)
    assert accepts(ll_tokenizer, g, HERMES_OK.replace('", "', '","').replace(": ", ":"))
    assert not accepts(ll_tokenizer, g, HERMES_OK.replace("get_weather", "get_wether"))  # no such tool
    assert not accepts(ll_tokenizer, g, HERMES_OK.replace("3", '"three"'))  # integer expected
    assert not accepts(ll_tokenizer, g, HERMES_OK.replace('"city": "Paris", ', ""))  # city required
    assert not accepts(ll_tokenizer, g, HERMES_TWO)  # only one call
    assert not accepts(ll_tokenizer, g, "Sure! " + HERMES_OK)  # nothing else
    gp = tool_call_grammar("hermes", TOOLS, choice="required", name=None, max_calls=4)
    assert accepts(ll_tokenizer, gp, HERMES_TWO)
    gf = tool_call_grammar("hermes", TOOLS, choice="function", name="search", max_calls=4)
    assert not accepts(ll_tokenizer, gf, HERMES_OK)  # wrong function
    assert accepts(ll_tokenizer, gf, HERMES_SEARCH)


def only_end_allowed(tokenizer, grammar: str, text: str) -> bool:
    """Whether, after ``text``, ``grammar`` allows nothing but end-of-sequence."""
    import llguidance.numpy as lln
    import numpy as np

    m = llguidance.LLMatcher(tokenizer, llguidance.grammar_from("lark", grammar), log_level=0)
    assert m.consume_tokens(tokenizer.tokenize_str(text)) and not m.is_error()
    words = lln.allocate_token_bitmask(1, tokenizer.vocab_size)
    lln.fill_next_token_bitmask(m, words)
    allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[: tokenizer.vocab_size])
    return allowed.tolist() == [tokenizer.eos_token]


ONE_CALL = {
    "hermes": (HERMES_SEARCH, "\n"),
    "llama3_json": ('{"name": "search", "parameters": {"query": "mlx"}}', "; "),
    "qwen3_coder": (
        "<tool_call>\n<function=search>\n<parameter=query>\nmlx\n</parameter>\n</function>\n</tool_call>",
        "\n",
    ),
    "glm45": ("<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>mlx</arg_value>\n</tool_call>", "\n"),
}


@pytest.mark.parametrize("fmt", list(ONE_CALL))
def test_grammar_ends_the_turn_after_max_calls(fmt, ll_tokenizer):
    """N calls are accepted, N + 1 are not, and after the N-th call only
    end-of-sequence may follow: a model cannot repeat calls forever."""
    one, sep = ONE_CALL[fmt]
    g = tool_call_grammar(fmt, TOOLS, choice="required", name=None, max_calls=3)
    assert accepts(ll_tokenizer, g, sep.join([one] * 3))
    assert not accepts(ll_tokenizer, g, sep.join([one] * 4))
    assert only_end_allowed(ll_tokenizer, g, sep.join([one] * 3))
    assert not only_end_allowed(ll_tokenizer, g, sep.join([one] * 2))


def test_named_choice_is_exactly_one_call(ll_tokenizer):
    g = tool_call_grammar("hermes", TOOLS, choice="function", name="search", max_calls=8)
    assert accepts(ll_tokenizer, g, HERMES_SEARCH)
    assert not accepts(ll_tokenizer, g, HERMES_SEARCH + "\n" + HERMES_SEARCH)
    assert only_end_allowed(ll_tokenizer, g, HERMES_SEARCH)


def test_json_array_is_bounded(ll_tokenizer):
    call = '{"name": "get_time", "arguments": {}}'
    g = tool_call_grammar("json", TOOLS, choice="required", name=None, max_calls=2)
    assert accepts(ll_tokenizer, g, f"[{call}, {call}]")
    assert not accepts(ll_tokenizer, g, f"[{call}, {call}, {call}]")


def test_max_calls_below_one_is_refused():
    with pytest.raises(ValueError):
        tool_call_grammar("hermes", TOOLS, choice="required", name=None, max_calls=0)


def test_json_grammar_accepts_and_rejects(ll_tokenizer):
    ok = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
    g = tool_call_grammar("json", TOOLS, choice="required", name=None, max_calls=1)
    assert accepts(ll_tokenizer, g, ok)
    assert not accepts(ll_tokenizer, g, ok.replace("get_weather", "weather"))
    assert not accepts(ll_tokenizer, g, ok.replace('"Paris"', "7"))  # city must be a string
    assert not accepts(ll_tokenizer, g, ok.replace('"Paris"', '"Paris", "unit": "kelvin"'))  # not in enum
    assert not accepts(ll_tokenizer, g, f"[{ok}]")  # single call: no array
    gp = tool_call_grammar("json", TOOLS, choice="required", name=None, max_calls=4)
    two = f'[{ok}, {{"name": "get_time", "arguments": {{}}}}]'
    assert accepts(ll_tokenizer, gp, two)
    assert accepts(ll_tokenizer, gp, ok)
    gf = tool_call_grammar("json", TOOLS, choice="function", name="get_time", max_calls=1)
    assert accepts(ll_tokenizer, gf, '{"name": "get_time", "arguments": {}}')
    assert not accepts(ll_tokenizer, gf, ok)


ROUND_TRIP = {
    "hermes": HERMES_TWO,
    "json": '[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
    '{"name": "search", "arguments": {"query": "mlx"}}]',
    "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}; '
    '{"name": "search", "parameters": {"query": "mlx"}}',
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n"
    "<function=search>\n<parameter=query>\nmlx\n</parameter>\n</function>\n</tool_call>",
    "glm45": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n<tool_call>search\n"
    "<arg_key>query</arg_key>\n<arg_value>mlx</arg_value>\n</tool_call>",
    "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    '{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>search'
    '<｜tool▁sep｜>{"query": "mlx"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}[TOOL_CALLS]search[ARGS]{"query": "mlx"}',
    "harmony": "<|channel|>analysis<|message|>Weather, then search.<|end|><|start|>assistant<|channel|>"
    'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3}<|call|>',
}
EXPECTED = [("get_weather", {"city": "Paris", "days": 3}), ("search", {"query": "mlx"})]


@pytest.mark.parametrize("fmt", TOOL_FORMATS)
def test_grammar_output_parses_back(fmt, ll_tokenizer, ll_special):
    special_tok, ids = ll_special
    text = ROUND_TRIP[fmt]
    markers = grammar_markers(fmt)
    needs_special = any(m in ids for m in markers)
    tokenizer = special_tok if needs_special else ll_tokenizer
    special = {m: ids[m] for m in markers if m in ids} if fmt == "mistral" else None
    g = tool_call_grammar(fmt, TOOLS, choice="required", name=None, max_calls=4, special_tokens=special)
    assert accepts(tokenizer, g, text), fmt
    r = run([text], tool_format=fmt)
    expected = EXPECTED[:1] if fmt == "harmony" else EXPECTED
    assert r.parsed_calls == expected
    assert r.content == ""


def test_special_token_map_is_used(ll_special):
    tokenizer, ids = ll_special
    text = ROUND_TRIP["mistral"]
    plain = tool_call_grammar("mistral", TOOLS, choice="required", name=None, max_calls=4)
    assert not accepts(tokenizer, plain, text)  # literal text cannot match a special token
    special = {m: ids[m] for m in grammar_markers("mistral")}
    g = tool_call_grammar("mistral", TOOLS, choice="required", name=None, max_calls=4, special_tokens=special)
    assert f"<[{ids['[TOOL_CALLS]']}]>" in g
    assert accepts(tokenizer, g, text)
    assert accepts(tokenizer, g, '[TOOL_CALLS][{"name": "get_time", "arguments": {}}]')


def test_qwen3_coder_grammar_types_values(ll_tokenizer):
    g = tool_call_grammar("qwen3_coder", TOOLS, choice="function", name="get_weather", max_calls=1)
    good = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=unit>\ncelsius\n</parameter>\n"
        '<parameter=coords>\n{"lat": 1}\n</parameter>\n</function>\n</tool_call>'
    )
    assert accepts(ll_tokenizer, g, good)
    assert not accepts(ll_tokenizer, g, good.replace("\n3\n", "\nthree\n"))
    assert not accepts(ll_tokenizer, g, good.replace("celsius", "kelvin"))
    assert not accepts(ll_tokenizer, g, good.replace("<parameter=city>\nNew\nYork\n</parameter>\n", ""))
    assert json.loads(json.dumps(run([good], tool_format="qwen3_coder").parsed_calls[0][1])) == {
        "city": "New\nYork",
        "days": 3,
        "unit": "celsius",
        "coords": {"lat": 1},
    }


def test_special_token_ids_from_tokenizer(hf_special, hf_tokenizer_file):
    transformers, path = hf_tokenizer_file
    plain = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    assert special_token_ids("hermes", plain) == {}  # <tool_call> is ordinary text there
    ids = special_token_ids("mistral", hf_special)
    assert set(ids) == {"[TOOL_CALLS]", "[ARGS]"}
    assert ids["[ARGS]"] == hf_special.convert_tokens_to_ids("[ARGS]")

    class Wrapper:  # mlx-lm style wrapper around the HF tokenizer
        _tokenizer = hf_special

    assert special_token_ids("harmony", Wrapper()) == {
        m: hf_special.convert_tokens_to_ids(m) for m in grammar_markers("harmony")
    }


def _end_only(matcher, vocab_size: int) -> bool:
    """Whether ``matcher`` now allows nothing but its end-of-sequence token."""
    import llguidance.numpy as lln
    import numpy as np

    words = lln.allocate_token_bitmask(1, vocab_size)
    lln.fill_next_token_bitmask(matcher, words)
    return np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[:vocab_size]).tolist() == [0]


@pytest.mark.parametrize(
    "choice,name,parallel,requested,expected",
    [
        ("required", None, True, None, 3),  # the model's max_tool_calls_per_turn
        ("required", None, True, 5, 5),  # the request's max_tool_calls wins
        ("required", None, False, 5, 1),  # parallel calls off
        ("function", "search", True, 5, 1),  # a named tool: exactly one call
        ("auto", None, True, None, None),  # auto: no limit, no grammar
        ("auto", None, True, 2, 2),  # auto: later calls dropped by the parser
    ],
)
def test_prompt_builder_bounds_the_calls_of_a_turn(
    hf_tokenizer_file, ll_tokenizer, choice, name, parallel, requested, expected
):
    """The worker's call limit per request, and the forced grammar it
    compiles: exactly ``expected`` calls, then only end-of-sequence."""
    from shared.protocol import GenerateRequest, SamplingParams
    from worker.prompting.builder import PromptBuilder
    from worker.prompting.model_formats import ModelFormats
    from worker.sampling.constrained_decoding import GrammarCompiler

    transformers, path = hf_tokenizer_file
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=path)
    builder = PromptBuilder(
        hf,
        context_length=4096,
        default_max_tokens=64,
        vocab_size=len(hf),
        formats=ModelFormats("hermes", None, None),
        grammars=GrammarCompiler(hf, 0, len(hf)),
        max_tool_calls_per_turn=3,
    )
    request = GenerateRequest(
        request_id="r",
        sampling=SamplingParams(),
        prompt="hi",
        tools=TOOLS,
        tool_choice=choice,
        tool_choice_name=name,
        parallel_tool_calls=parallel,
        max_tool_calls=requested,
    )
    admission = builder.build(request)
    assert admission.output.max_tool_calls == expected
    if choice == "auto":
        assert admission.matchers is None
        return
    tokens = ll_tokenizer.tokenize_str
    matcher = admission.matchers[0]
    for i in range(expected):
        assert not _end_only(matcher, len(hf))
        assert matcher.consume_tokens(tokens(("\n" if i else "") + HERMES_SEARCH))
    assert _end_only(matcher, len(hf))
