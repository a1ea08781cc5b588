"""Format detection from chat templates and vocabularies (short,
representative template snippets of each family)."""

from __future__ import annotations

import pytest

from worker.parsers import (
    GENERIC_TOOL_FORMAT,
    REASONING_FORMATS,
    TOOL_FORMATS,
    detect_reasoning_format,
    detect_tool_format,
    make_parser,
)

QWEN25 = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}# Tools\\n\\nYou may call one or more functions to assist "
    "with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:"
    "\\n<tools>{%- for tool in tools %}{{- tool | tojson }}{%- endfor %}\\n</tools>\\n\\nFor each function "
    "call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:"
    '\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>'
    "<|im_end|>\\n{%- endif %}"
)
QWEN3 = QWEN25 + (
    "{%- if reasoning_content %}{{- '<|im_start|>' + message.role + '\\n<think>\\n' + "
    "reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}{%- endif %}"
)
QWEN3_CODER = (
    "{{- '\\n\\nIf you choose to call a function ONLY reply in the following format with NO suffix:"
    "\\n\\n<tool_call>\\n<function=example_function_name>\\n<parameter=example_parameter_1>\\nvalue_1"
    "\\n</parameter>\\n</function>\\n</tool_call>' }}"
)
GLM45 = (
    "For each function call, output the function name and arguments within the following XML format:"
    "\\n<tool_call>{function-name}\\n<arg_key>{arg-key-1}</arg_key>\\n<arg_value>{arg-value-1}</arg_value>"
    "\\n</tool_call>{%- if enable_thinking is defined and not enable_thinking -%}<think></think>{%- endif %}"
)
MISTRAL = (
    "{%- elif message.tool_calls is defined %}{{- '[TOOL_CALLS]' }}{%- for tool_call in message.tool_calls %}"
    "{{- tool_call.function.name + '[ARGS]' + tool_call.function.arguments|tojson }}{%- endfor %}"
)
MAGISTRAL = MISTRAL + "{{- '[THINK]' + message.reasoning + '[/THINK]' }}"
DEEPSEEK_V3 = (
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\\n' + '```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}"
)
DEEPSEEK_R1 = DEEPSEEK_V3 + "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
GPT_OSS = (
    "{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.thinking + '<|end|>' }}"
    "{{- '<|start|>assistant to=' + 'functions.' + tool_call.name + '<|channel|>commentary json<|message|>' }}"
)
LLAMA31 = (
    "{%- if builtin_tools is defined or tools is not none %}{{- 'Environment: ipython\\n' }}{%- endif %}"
    '{%- elif message.role == "tool" or message.role == "ipython" %}'
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' }}"
    "{{- '<|python_tag|>' + tool_call.name + '.call(' }}"
)
LLAMA32 = (
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    '{%- elif message.role == "tool" or message.role == "ipython" %}'
    '{{- \'{"name": "\' + tool_call.name + \'", "parameters": \' }}'
)
SMOLLM2 = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SMOLLM3 = SMOLLM2 + "{{ '<|im_start|>assistant\\n<think>\\n\\n</think>\\n' }}"


@pytest.mark.parametrize(
    "template,tool,reasoning",
    [
        (QWEN25, "hermes", None),
        (QWEN3, "hermes", "think"),
        (QWEN3_CODER, "qwen3_coder", None),
        (GLM45, "glm45", "think"),
        (MISTRAL, "mistral", None),
        (MAGISTRAL, "mistral", "think_mistral"),
        (DEEPSEEK_V3, "deepseek_v3", None),
        (DEEPSEEK_R1, "deepseek_v3", "think"),
        (GPT_OSS, "harmony", "harmony"),
        (LLAMA31, "llama3_json", None),
        (LLAMA32, "llama3_json", None),
        (SMOLLM2, None, None),
        (SMOLLM3, None, "think"),
        (None, None, None),
    ],
)
def test_detect_from_template(template, tool, reasoning):
    assert detect_tool_format(template, []) == tool
    assert detect_reasoning_format(template, []) == reasoning
    assert tool is None or tool in TOOL_FORMATS
    assert reasoning is None or reasoning in REASONING_FORMATS


def test_template_wins_over_vocabulary():
    # an R1 distill of Qwen: Qwen's tokens in the vocabulary, DeepSeek's template
    vocab = ["hello", "<tool_call>", "</tool_call>", "<think>", "</think>", "<｜tool▁calls▁begin｜>"]
    assert detect_tool_format(DEEPSEEK_R1, vocab) == "deepseek_v3"


@pytest.mark.parametrize(
    "vocab,tool,reasoning",
    [
        (["<|im_start|>", "<tool_call>", "</tool_call>", "<think>", "</think>"], "hermes", "think"),
        (["<tool_call>", "<arg_key>", "</arg_key>"], "glm45", None),
        (["[INST]", "[TOOL_CALLS]", "[ARGS]", "[THINK]"], "mistral", "think_mistral"),
        (["<|start|>", "<|channel|>", "<|message|>"], "harmony", "harmony"),
        (["<|begin_of_text|>", "<|python_tag|>", "<|eom_id|>"], "llama3_json", None),
        (["<｜tool▁calls▁begin｜>", "<｜tool▁sep｜>"], "deepseek_v3", None),
        (["a", "b", "<|im_start|>"], None, None),
    ],
)
def test_detect_from_vocabulary(vocab, tool, reasoning):
    assert detect_tool_format(None, vocab) == tool
    assert detect_tool_format("", iter(vocab)) == tool
    assert detect_reasoning_format(None, dict.fromkeys(vocab, 0)) == reasoning


def test_generic_format_is_hermes_and_usable():
    assert GENERIC_TOOL_FORMAT == "hermes"
    assert make_parser(tool_format=GENERIC_TOOL_FORMAT, reasoning_format=None, tools=None).feed("x").content == "x"
