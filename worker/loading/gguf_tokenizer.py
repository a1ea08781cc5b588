"""The tokenizer of a GGUF file, rebuilt as a Hugging Face ``tokenizers`` one.

:func:`build_tokenizer` makes ``tokenizer.json``'s tokenizer from the GGUF's
byte-level BPE vocabulary and :func:`build_tokenizer_config` its
``tokenizer_config.json`` (see :mod:`worker.loading.gguf` for what is supported).
Plain data processing on the calling thread.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from worker.loading.gguf import (
    TOKEN_TYPE_CONTROL,
    TOKEN_TYPE_USER_DEFINED,
    ModelLoadError,
    meta_value,
    require_meta,
    token_types,
)

log = logging.getLogger("worker.loading.gguf")

SUPPORTED_PRE_TOKENIZERS = ("default", "gpt2", "gpt-2", "smollm", "llama3", "llama-bpe")
"""Values of ``tokenizer.ggml.pre`` that :func:`build_tokenizer` knows how to reproduce."""

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def build_tokenizer(metadata: Mapping[str, Any]) -> Any:
    """A ``tokenizers.Tokenizer`` equivalent to the GGUF's byte-level BPE vocabulary.

    Control tokens (type 3) become special added tokens (skipped by
    ``decode(skip_special_tokens=True)``); user-defined tokens (type 4) become
    non-special added tokens, so both are matched atomically in input but
    only the latter are shown in output, as in llama.cpp.

    Raises:
        ModelLoadError: not a ``gpt2`` (byte-level BPE) tokenizer, no merges,
            or an unknown ``tokenizer.ggml.pre``.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models

    kind = meta_value(metadata, "tokenizer.ggml.model")
    if kind != "gpt2":
        raise ModelLoadError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE 'gpt2')")
    tokens: list[str] = list(metadata.get("tokenizer.ggml.tokens") or [])
    merges: list[str] = list(metadata.get("tokenizer.ggml.merges") or [])
    if not tokens or not merges:
        raise ModelLoadError("GGUF tokenizer has no tokens or no merges")

    vocab: dict[str, int] = {}
    for index, text in enumerate(tokens):
        vocab.setdefault(text, index)
    pairs = [_merge_pair(merge) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = _pre_tokenizer(
        meta_value(metadata, "tokenizer.ggml.pre"),
        bool(meta_value(metadata, "tokenizer.ggml.add_space_prefix", False)),
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = _post_processor(metadata, tokens)

    types = token_types(metadata, len(tokens))
    tokenizer.add_special_tokens(
        [
            AddedToken(text, special=True, normalized=False)
            for text, kind_ in zip(tokens, types)
            if kind_ == TOKEN_TYPE_CONTROL
        ]
    )
    tokenizer.add_tokens(
        [
            AddedToken(text, special=False, normalized=False)
            for text, kind_ in zip(tokens, types)
            if kind_ == TOKEN_TYPE_USER_DEFINED
        ]
    )
    return tokenizer


def _merge_pair(merge: str) -> tuple[str, str]:
    """``"Ġ t"`` → ``("Ġ", "t")``.

    Raises:
        ModelLoadError: the merge is not two space-separated tokens.
    """
    left, sep, right = merge.partition(" ")
    if not sep or not left or not right or " " in right:
        raise ModelLoadError(f"GGUF tokenizer merge {merge!r} is not two tokens")
    return left, right


def _pre_tokenizer(pre: str | None, add_prefix_space: bool) -> Any:
    """The Hugging Face pre-tokenizer matching llama.cpp's ``tokenizer.ggml.pre``.

    ``None`` (older files) means llama.cpp's default, the GPT-2 split.

    Raises:
        ModelLoadError: ``pre`` is not in :data:`SUPPORTED_PRE_TOKENIZERS`.
    """
    from tokenizers import Regex, pre_tokenizers

    if pre is None:
        log.warning("GGUF has no tokenizer.ggml.pre; using the GPT-2 pre-tokenizer")
        pre = "default"
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    if pre in ("default", "gpt2", "gpt-2"):
        return byte_level
    if pre == "smollm":
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama3", "llama-bpe"):
        split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated", invert=False)
        raw_bytes = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)
        return pre_tokenizers.Sequence([split, raw_bytes])
    raise ModelLoadError(f"GGUF pre-tokenizer {pre!r} is not supported (known: {', '.join(SUPPORTED_PRE_TOKENIZERS)})")


def _post_processor(metadata: Mapping[str, Any], tokens: list[str]) -> Any:
    """Adds BOS/EOS around encodings when the metadata asks for it."""
    from tokenizers import processors

    add_bos, add_eos = _add_bos_eos(metadata)
    special: list[tuple[str, int]] = []
    single = "$A"
    if add_bos:
        bos = tokens[int(require_meta(metadata, "tokenizer.ggml.bos_token_id"))]
        special.append((bos, tokens.index(bos)))
        single = f"{bos} {single}"
    if add_eos:
        eos = tokens[int(require_meta(metadata, "tokenizer.ggml.eos_token_id"))]
        special.append((eos, tokens.index(eos)))
        single = f"{single} {eos}"
    if not special:
        return processors.ByteLevel(trim_offsets=False)
    pair = f"{single} {single.replace('$A', '$B:1')}"
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=special)


def _add_bos_eos(metadata: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(add_bos_token, add_eos_token)`` from the metadata (llama.cpp's BPE defaults: False)."""
    return (
        bool(meta_value(metadata, "tokenizer.ggml.add_bos_token", False)),
        bool(meta_value(metadata, "tokenizer.ggml.add_eos_token", False)),
    )


def build_tokenizer_config(metadata: Mapping[str, Any], context_length: int) -> dict[str, Any]:
    """``tokenizer_config.json``: class, special tokens, BOS/EOS policy, chat template."""
    tokens: list[str] = list(metadata.get("tokenizer.ggml.tokens") or [])
    add_bos, add_eos = _add_bos_eos(metadata)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context_length,
    }
    for role, key in (("bos", "bos"), ("eos", "eos"), ("unk", "unknown"), ("pad", "padding")):
        token_id = meta_value(metadata, f"tokenizer.ggml.{key}_token_id")
        if token_id is not None and 0 <= int(token_id) < len(tokens):
            config[f"{role}_token"] = tokens[int(token_id)]
    if (template := meta_value(metadata, "tokenizer.chat_template")) is not None:
        config["chat_template"] = template
    return config
