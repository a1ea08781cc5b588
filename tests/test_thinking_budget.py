"""The thinking-budget logits processor (worker/sampling/samplers.py): it lets a
reasoning block run for its budget, then forces the closing marker."""

from __future__ import annotations

import mlx.core as mx

from worker.messages import ThinkingBudget
from worker.sampling.samplers import thinking_budget_processor

VOCAB = 32
OPEN, CLOSE = (10,), (20, 21)
PROMPT = [1, 2, 3]


def forced_after(processor, generated: list[int]) -> int | None:
    """The token the processor forces after ``generated`` (None: free)."""
    out = processor(mx.array(PROMPT + generated), mx.zeros((1, VOCAB)))
    allowed = [i for i, v in enumerate(out[0].tolist()) if v != float("-inf")]
    return None if len(allowed) == VOCAB else allowed[0] if len(allowed) == 1 else -1


def test_block_opened_by_the_prompt_is_closed_after_the_budget():
    p = thinking_budget_processor(ThinkingBudget(3, OPEN, CLOSE, open_at_start=True), len(PROMPT))
    assert forced_after(p, []) is None
    assert forced_after(p, [5, 6]) is None
    assert forced_after(p, [5, 6, 7]) == 20  # budget used: first closing token
    assert forced_after(p, [5, 6, 7, 20]) == 21  # then the next one
    assert forced_after(p, [5, 6, 7, 20, 21]) is None  # closed: the answer is free


def test_block_opened_by_the_model_and_closed_early():
    p = thinking_budget_processor(ThinkingBudget(2, OPEN, CLOSE, open_at_start=False), len(PROMPT))
    assert forced_after(p, [4, 4, 4]) is None  # no block open: no limit
    assert forced_after(p, [4, 4, 4, 10, 5]) is None
    assert forced_after(p, [4, 4, 4, 10, 5, 6]) == 20
    q = thinking_budget_processor(ThinkingBudget(5, OPEN, CLOSE, open_at_start=True), len(PROMPT))
    assert forced_after(q, [5, 20, 21, 7, 7, 7, 7, 7]) is None  # the model closed it itself
    assert forced_after(q, [5, 20, 21, 7, 7, 7, 7, 7, 10, 1, 2, 3, 4, 5]) == 20  # a new block, new budget


def test_grammar_waits_for_the_reasoning_block_to_close(tmp_path):
    """A prompt that opens a reasoning block, a JSON schema, and a budget of
    0: the worker's own pieces (prompt builder, scheduler, engine) close the
    block first, then the grammar shapes the answer after it."""
    import json

    from shared.protocol import ChatMessage, GenerateRequest, ResponseFormat, SamplingParams
    from tests.tiny_model import build_thinking_model, build_tiny_model
    from worker.engine.scheduler import Scheduler
    from worker.loading.loader import load_model
    from worker.messages import TokenStep
    from worker.prompting.builder import PromptBuilder
    from worker.prompting.model_formats import model_formats
    from worker.sampling.constrained_decoding import GrammarCompiler

    model_dir = build_thinking_model(tmp_path / "think", build_tiny_model(tmp_path / "tiny"))
    loaded = load_model(str(model_dir))
    vocab = len(loaded.tokenizer)
    builder = PromptBuilder(
        loaded.tokenizer,
        context_length=2048,
        default_max_tokens=64,
        vocab_size=vocab,
        formats=model_formats(loaded.tokenizer, "auto", "auto"),
        grammars=GrammarCompiler(loaded.tokenizer._tokenizer, min(loaded.eos_token_ids), vocab),
    )
    schema = {
        "type": "object",
        "properties": {"a": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["a"],
        "additionalProperties": False,
    }
    request = GenerateRequest(
        request_id="r",
        sampling=SamplingParams(temperature=0.0, max_tokens=48),
        messages=[ChatMessage(role="user", content="answer")],
        response_format=ResponseFormat(type="json_schema", schema=schema),
        thinking_budget=0,
    )
    admission = builder.build(request)
    assert admission.output.thinking_open and admission.reasoning_close
    emitted: list = []
    scheduler = Scheduler(
        loaded.model,
        set(loaded.eos_token_ids),
        emitted.append,
        cache=None,
        max_batch_size=4,
        prefill_batch_size=4,
        prefill_step_size=512,
    )
    scheduler._engine = scheduler._new_engine()
    scheduler._admit(admission)
    while scheduler._seqs:
        scheduler._run_step()
    tokens = [event[2] for item in emitted if isinstance(item, TokenStep) for event in item.tokens]
    assert tokens[-1] in loaded.eos_token_ids  # the grammar ended the answer
    text = loaded.tokenizer.decode(tokens[:-1])
    reasoning, _, answer = text.partition("</think>")
    assert reasoning == ""
    assert json.loads(answer) in ({"a": "yes"}, {"a": "no"})


def test_best_effort_budget_is_ignored_where_reasoning_cannot_be_capped(tmp_path):
    """A reasoning format without a single closing marker (Harmony): an
    enforced budget is refused, a best-effort one (Anthropic adaptive
    thinking, effort) is dropped so the request still runs."""
    import pytest

    from shared.protocol import ChatMessage, GenerateRequest, SamplingParams
    from tests.tiny_model import build_tiny_model
    from worker.loading.loader import load_model
    from worker.prompting.builder import PromptBuilder, PromptError
    from worker.prompting.model_formats import ModelFormats
    from worker.sampling.constrained_decoding import GrammarCompiler

    loaded = load_model(str(build_tiny_model(tmp_path / "tiny")))
    vocab = len(loaded.tokenizer)
    builder = PromptBuilder(
        loaded.tokenizer,
        context_length=2048,
        default_max_tokens=64,
        vocab_size=vocab,
        formats=ModelFormats(tool_format="hermes", reasoning_format="harmony", reasoning_open_marker=None),
        grammars=GrammarCompiler(loaded.tokenizer._tokenizer, min(loaded.eos_token_ids), vocab),
    )

    def request(best_effort: bool) -> GenerateRequest:
        return GenerateRequest(
            request_id="r",
            sampling=SamplingParams(max_tokens=16),
            messages=[ChatMessage(role="user", content="hi")],
            thinking_budget=8,
            thinking_budget_best_effort=best_effort,
        )

    with pytest.raises(PromptError):
        builder.build(request(False))
    assert builder.build(request(True)).thinking_budget is None
