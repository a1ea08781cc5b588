"""Fill-in-the-middle prompts (``GenerateRequest.suffix``) as the worker's
:class:`worker.prompting.builder.PromptBuilder` lays them out, with a stand-in
tokenizer (one id per character, specials parsed unless split)."""

from __future__ import annotations

import pytest

from shared.protocol import GenerateRequest, SamplingParams
from worker.prompting.builder import PromptBuilder, PromptError
from worker.prompting.model_formats import ModelFormats

QWEN = {"<|fim_prefix|>": 900, "<|fim_suffix|>": 901, "<|fim_middle|>": 902}


class CharTokenizer:
    """One id per character; ``specials`` are single ids unless split;
    ``bos`` (when set) leads every text encoded with special tokens."""

    def __init__(self, specials: dict[str, int], bos: int | None = None) -> None:
        self.specials, self.bos = specials, bos

    def get_vocab(self) -> dict[str, int]:
        return {**{chr(i): i for i in range(128)}, **self.specials}

    def encode(self, text: str, add_special_tokens: bool = True, split_special_tokens: bool = False) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            hit = None if split_special_tokens else next((s for s in self.specials if text.startswith(s, i)), None)
            ids.append(self.specials[hit] if hit else ord(text[i]))
            i += len(hit) if hit else 1
        return ([self.bos] if add_special_tokens and self.bos is not None else []) + ids


def builder(tokenizer: CharTokenizer) -> PromptBuilder:
    return PromptBuilder(
        tokenizer,
        context_length=256,
        default_max_tokens=8,
        vocab_size=1000,
        formats=ModelFormats("hermes", None, None),
        grammars=None,  # type: ignore[arg-type]  (no request here is constrained)
    )


def fim(prompt: str | None, suffix: str) -> GenerateRequest:
    return GenerateRequest(request_id="r", sampling=SamplingParams(), prompt=prompt, suffix=suffix)


def test_prefix_suffix_middle_after_the_bos():
    admission = builder(CharTokenizer(QWEN, bos=1)).build(fim("ab", "c"))
    assert admission.prompt == [1, 900, ord("a"), ord("b"), 901, ord("c"), 902]
    assert admission.output.reasoning_format is None and admission.output.tools is None


def test_client_text_stays_plain_and_an_empty_suffix_still_closes_the_gap():
    ids = builder(CharTokenizer(QWEN)).build(fim("<|fim_middle|>", "")).prompt
    assert ids[0] == 900 and ids[-2:] == [901, 902] and 902 not in ids[1:-1]
    assert len(ids) == 3 + len("<|fim_middle|>")


def test_a_model_without_fim_tokens_refuses_the_suffix():
    with pytest.raises(PromptError) as err:
        builder(CharTokenizer({"<fim_prefix>": 900, "<fim_middle>": 902})).build(fim("a", "b"))
    assert err.value.field == "suffix" and "no fill-in-the-middle support" in err.value.message
    assert err.value.kind == "invalid_request"
    with pytest.raises(PromptError, match="text prompt"):
        builder(CharTokenizer(QWEN)).build(
            GenerateRequest(request_id="r", sampling=SamplingParams(), prompt_token_ids=[5], suffix="b")
        )
