"""Tiny random-weight vision-language models of several mlx-vlm families.

One builder per family (:data:`BUILDERS`), in the style of
:mod:`tests.tiny_vlm`: the model is mlx-vlm 0.7.10's own ``Model`` class
with a 2-layer, 64-wide language model and a 1-layer, 32-wide vision
tower, random weights from ``mx.random.seed(seed)`` saved with
``mx.save_safetensors``, a ``config.json``, a byte-level BPE tokenizer of
about 350 tokens trained here (with the family's real special tokens) and
saved with ``save_pretrained`` along with a Jinja chat template
(``chat_template.jinja``), and the family's preprocessor/processor configs.
Everything is built offline in well under a second; ``mlx_vlm.load`` loads
each directory without network access and returns the processor class
mlx-vlm uses for the family. Images are resized so a 64x64 image costs 4
image tokens. Run ``python -m tests.tiny_vlm_families [family ...]`` to
build each family in a temporary directory and greedy-decode a red-image,
a blue-image and a text-only prompt with ``mlx_vlm.generate`` (the two
images give different tokens).

Facts per family (``processor(...)`` below is
``processor(text=[prompt], images=[image], return_tensors="np")``):

``gemma3``
    Processor ``Gemma3Processor`` (mlx-vlm's ``processing_gemma3``; image
    processor ``Gemma3ImageProcessorPil``, 32x32, pan-and-scan off). The
    template writes ``<start_of_image>`` for an image part; the processor
    expands it to ``\\n\\n<start_of_image>`` + 4 x ``<image_soft_token>`` +
    ``<end_of_image>\\n\\n`` (always 4 tokens, whatever the image size).
    Config field ``image_token_index`` (also ``boi_token_index``,
    ``eoi_token_index``). ``make_cache()``: ``[RotatingKVCache(64),
    KVCache]`` (sliding window 64, ``sliding_window_pattern`` 2). Processor
    output keys ``input_ids``, ``attention_mask``, ``pixel_values`` (1, 3,
    32, 32), but as ``mx.array`` whatever ``return_tensors`` says.
    ``get_input_embeddings(input_ids, pixel_values, mask=attention_mask)``
    needs the ``mask`` (it builds a 4-D mask from it; without it: TypeError).
``idefics3``
    Processor ``Idefics3Processor`` (mlx-vlm's; image processor
    ``Idefics3ImageProcessorPil``, longest edge 32, splitting off). The
    template writes ``<image>``; expanded to ``<fake_token_around_image>``
    ``<global-img>`` + 4 x ``<image>`` + ``<fake_token_around_image>``.
    Config field ``image_token_id`` (the config class derives
    ``image_token_index``). The language model has no ``make_cache``
    (mlx-vlm falls back to plain ``KVCache`` per layer). Processor output
    keys ``pixel_values`` (1, 1, 3, 32, 32), ``pixel_attention_mask`` (1, 1,
    32, 32), ``input_ids``, ``attention_mask``, as ``mx.array``.
    ``pixel_attention_mask`` is optional (all-ones without it).
``mistral3`` (Mistral Small 3.1 layout: Pixtral tower, patch merger, text ``mistral``)
    Processor ``Mistral3Processor`` (mlx-vlm's; image processor mlx-vlm's
    ``PixtralImageProcessor``, longest edge 32, multiple of 16). The template
    writes ``[IMG]``; expanded to rows of ``[IMG]`` (one per 16x16 pixels)
    separated by ``[IMG_BREAK]`` and ended by ``[IMG_END]``: a 64x64 image is
    ``[IMG][IMG][IMG_BREAK][IMG][IMG][IMG_END]`` (4 image tokens, 6 in all).
    Config field ``image_token_index``. ``make_cache()``: ``[KVCache,
    KVCache]``. Processor output keys ``input_ids``, ``attention_mask``,
    ``pixel_values`` (1, 3, 32, 32), ``image_sizes`` (1, 2), as ``mx.array``.
    ``get_input_embeddings`` needs ``image_sizes`` (TypeError without);
    ``__call__``'s ``mask`` has no default. ``add_generation_prompt`` adds
    nothing (the answer follows ``[/INST]``, as in Mistral's templates).
``lfm2_vl``
    Processor transformers' ``Lfm2VlProcessor`` as patched by mlx-vlm (its
    image processor is mlx-vlm's ``Lfm2VlNumpyImageProcessor``). The template
    writes ``<image>``; expanded to ``<|image_start|>`` + 4 x ``<image>`` +
    ``<|image_end|>`` for a 64x64 image. mlx-vlm forces tiling on when it
    loads the processor: images over 4096 pixels become 32x32 tiles
    (``<|img_row_R_col_C|>`` + 4 x ``<image>`` each) plus
    ``<|img_thumbnail|>`` + a thumbnail (200x120: 26 image tokens). Config
    field ``image_token_id``. ``make_cache()``: ``[ArraysCache, KVCache]``
    (a short-convolution layer, then attention). ``return_tensors="np"``
    really gives numpy: ``pixel_values`` (1, 16, 192) (packed patches),
    ``pixel_attention_mask`` (1, 16), ``spatial_shapes`` (1, 2),
    ``input_ids``, ``attention_mask``. ``get_input_embeddings`` needs
    ``spatial_shapes`` and ``pixel_attention_mask``.
``qwen3_5``
    Processor ``Qwen3VLProcessor`` (mlx-vlm's; the only one here whose
    ``chat_template`` is set, so ``processor.apply_chat_template`` works).
    The template writes ``<|vision_start|><|image_pad|><|vision_end|>``; the
    pad becomes 4 x ``<|image_pad|>`` for a 64x64 image (images are resized
    to at most 64x64 pixels: 16-pixel patches merged 2x2). Config field
    ``image_token_id`` (also ``video_token_id``, ``vision_start_token_id``,
    ``vision_end_token_id``). ``make_cache()``: ``[ArraysCache, KVCache]``
    (gated delta net, then full attention). Processor output keys
    ``input_ids``, ``attention_mask``, ``pixel_values`` (16, 1536),
    ``image_grid_thw`` (1, 3), as ``mx.array``. ``get_input_embeddings``
    needs ``image_grid_thw``.

Only Qwen3.5's processor has a chat template after ``mlx_vlm.load``: for
the other four, ``processor.apply_chat_template`` raises ValueError (mlx-vlm
builds them without one; the real checkpoints behave the same), so render
with ``processor.tokenizer.apply_chat_template`` or mlx-vlm's
``mlx_vlm.prompt_utils.apply_chat_template(processor, model.config,
messages)``, which falls back to the tokenizer. ``mlx_vlm.generate``
works with an image and text-only for all five.

LFM2-VL and Qwen3.5 tie their output to the input embedding; at random init
every step then predicts the token it was fed, so their layers' output
projections are scaled up (x8), and the vision projection (x16) so the image
changes the answer.
"""

from __future__ import annotations

import json
from pathlib import Path

CORPUS = [
    "Hi there, hello. What is in this image? Describe the picture, the colour and the shape.",
    "user model assistant system User: Assistant: [INST] [/INST]",
] * 20
"""Text the tiny tokenizers are trained on."""


def _tokenizer(specials: list[str], roles: dict[str, str], vocab_size: int = 400, **tokens: str):
    """A byte-level BPE tokenizer trained on :data:`CORPUS`, with ``specials``
    as special tokens (in that order, ids from 0), ``roles`` as named extra
    special tokens and ``tokens`` (bos_token, eos_token, ...) set."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, extra_special_tokens=roles, **tokens)


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2))


def _save_model(model, out_dir: Path, scales: dict[str, float] | None = None) -> None:
    """Save ``model``'s parameters as ``model.safetensors``, multiplying each
    whose name ends with a key of ``scales`` by that factor."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    weights = dict(tree_flatten(model.parameters()))
    for name, value in weights.items():
        for suffix, factor in (scales or {}).items():
            if name.endswith(suffix):
                weights[name] = value * factor
    mx.save_safetensors(str(out_dir / "model.safetensors"), weights)


# ---------------------------------------------------------------- gemma3

GEMMA3_ROLES = {"image_token": "<image_soft_token>", "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>"}
"""The special tokens Gemma 3's processor reads from its tokenizer, by role."""

GEMMA3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "<start_of_turn>{{ role }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<start_of_image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
"""Gemma 3's turn format; an image part is written ``<start_of_image>``
(the processor expands it)."""


def build_tiny_gemma3(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``gemma3`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide language model (one sliding-window layer of 64 tokens, one
    global layer), a 1-layer 32-wide SigLIP tower on 32x32 images (8-pixel
    patches, average-pooled to 4 image tokens), a small (~350-token) byte-level BPE
    tokenizer trained here with Gemma 3's special tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import gemma3

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>", *GEMMA3_ROLES.values()]
    tokenizer = _tokenizer(
        specials, GEMMA3_ROLES, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>", unk_token="<unk>"
    )
    tokenizer.chat_template = GEMMA3_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    image_tokens = 4
    text = {
        "model_type": "gemma3_text",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "intermediate_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "query_pre_attn_scalar": 32,
        "vocab_size": vocab_size,
        "sliding_window": 64,
        "sliding_window_pattern": 2,
        "mm_tokens_per_image": image_tokens,
        "max_position_embeddings": 2048,
    }
    vision = {
        "model_type": "siglip_vision_model",
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "patch_size": 8,
        "image_size": 32,
    }
    config = {
        "model_type": "gemma3",
        "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "mm_tokens_per_image": image_tokens,
        "image_token_index": tokenizer.convert_tokens_to_ids("<image_soft_token>"),
        "boi_token_index": tokenizer.convert_tokens_to_ids("<start_of_image>"),
        "eoi_token_index": tokenizer.convert_tokens_to_ids("<end_of_image>"),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")],
    }
    mx.random.seed(seed)
    model_config = gemma3.ModelConfig.from_dict(config)
    model_config.text_config = gemma3.TextConfig.from_dict(text)
    model_config.vision_config = gemma3.VisionConfig.from_dict(vision)
    model = gemma3.Model(model_config)
    projector = model.multi_modal_projector
    # the projection starts as all ones (every image token the same vector): randomize it
    projector.mm_input_projection_weight = mx.random.normal(projector.mm_input_projection_weight.shape)
    _save_model(model, out_dir)
    _write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Gemma3ImageProcessor",
        "processor_class": "Gemma3Processor",
        "size": {"height": 32, "width": 32},
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "do_pan_and_scan": False,
        "resample": 2,
    }
    _write_json(out_dir / "preprocessor_config.json", image_processor)
    _write_json(
        out_dir / "processor_config.json", {"processor_class": "Gemma3Processor", "image_seq_length": image_tokens}
    )
    return out_dir


# ---------------------------------------------------------------- idefics3

IDEFICS3_TOKENS = ("<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>")
"""Idefics3's image and turn tokens (the processor adds the first three to
its tokenizer anyway; ``<global-img>`` tags the whole-image block)."""

IDEFICS3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] | capitalize }}"
    "{% if message['content'] is string %}: {{ message['content'] }}{% else %}"
    "{% if message['content'][0]['type'] == 'image' %}:{% else %}: {% endif %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
"""Idefics3's ``User: ...<end_of_utterance>`` format; an image part is
written ``<image>`` (the processor expands it)."""


def build_tiny_idefics3(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``idefics3`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Llama-style language model, a 1-layer 32-wide SigLIP tower on
    32x32 images (8-pixel patches, pixel-shuffled 2x2 to 4 image tokens),
    image splitting off, and a small (~350-token) byte-level BPE tokenizer trained
    here with Idefics3's image tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import idefics3

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", "<|begin_of_text|>", "<unk>", *IDEFICS3_TOKENS]
    tokenizer = _tokenizer(
        specials,
        {},
        bos_token="<|begin_of_text|>",
        eos_token="<end_of_utterance>",
        pad_token="<|endoftext|>",
        unk_token="<unk>",
    )
    tokenizer.chat_template = IDEFICS3_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
    }
    vision = {
        "model_type": "idefics3_vision",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "patch_size": 8,
        "image_size": 32,
    }
    config = {
        "model_type": "idefics3",
        "architectures": ["Idefics3ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "scale_factor": 2,
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "eos_token_id": [tokenizer.convert_tokens_to_ids("<end_of_utterance>")],
    }
    mx.random.seed(seed)
    model_config = idefics3.ModelConfig.from_dict(config)
    model_config.text_config = idefics3.TextConfig.from_dict(text)
    model_config.vision_config = idefics3.VisionConfig.from_dict(vision)
    model = idefics3.Model(model_config)
    _save_model(model, out_dir)
    _write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_resize": True,
        "size": {"longest_edge": 32},
        "max_image_size": {"longest_edge": 32},
        "do_image_splitting": False,
        "do_pad": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_convert_rgb": True,
        "resample": 1,
    }
    _write_json(out_dir / "preprocessor_config.json", image_processor)
    _write_json(out_dir / "processor_config.json", {"processor_class": "Idefics3Processor", "image_seq_len": 4})
    return out_dir


# ---------------------------------------------------------------- mistral3

PIXTRAL_TOKENS = ("[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]")
"""Mistral's instruction tokens and Pixtral's image tokens."""

MISTRAL3_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}[INST]{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}[IMG]{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}"
    "{% if message['role'] == 'user' %}[/INST]{% elif message['role'] == 'assistant' %}{{ eos_token }}{% endif %}"
    "{% endfor %}"
)
"""Mistral's ``[INST]...[/INST]`` format; an image part is written ``[IMG]``
(the processor expands it). As in Mistral's templates the assistant's turn
starts right after ``[/INST]``, so ``add_generation_prompt`` adds nothing."""


def build_tiny_mistral3(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``mistral3`` model directory (Mistral Small 3.1's
    layout: a Pixtral vision tower, a patch merger and a Mistral language
    model) with random weights to ``out_dir`` and return it (an existing
    build is reused): a 2-layer, 64-wide language model, a 1-layer 32-wide
    Pixtral tower on images resized to fit 32x32 (8-pixel patches merged
    2x2, so a square image is 2x2 image tokens plus one break and one end
    token), and a small (~350-token) byte-level BPE tokenizer trained here with
    Pixtral's image tokens.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import mistral3

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<unk>", "<s>", "</s>", "<pad>", *PIXTRAL_TOKENS]
    tokenizer = _tokenizer(specials, {}, bos_token="<s>", eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    tokenizer.chat_template = MISTRAL3_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "mistral",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
    }
    vision = {
        "model_type": "pixtral",
        "num_hidden_layers": 1,
        "hidden_size": 32,
        "head_dim": 16,
        "intermediate_size": 64,
        "num_attention_heads": 2,
        "image_size": 32,
        "patch_size": 8,
        "rope_theta": 10000.0,
    }
    config = {
        "model_type": "mistral3",
        "architectures": ["Mistral3ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "vocab_size": vocab_size,
        "spatial_merge_size": 2,
        "vision_feature_layer": -1,
        "multimodal_projector_bias": False,
        "image_token_index": tokenizer.convert_tokens_to_ids("[IMG]"),
        "eos_token_id": [tokenizer.eos_token_id],
    }
    mx.random.seed(seed)
    model_config = mistral3.ModelConfig.from_dict(config)
    model_config.text_config = mistral3.TextConfig.from_dict(text)
    model_config.vision_config = mistral3.VisionConfig.from_dict(vision)
    model = mistral3.Model(model_config)
    _save_model(model, out_dir)
    _write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "PixtralImageProcessor",
        "processor_class": "PixtralProcessor",
        "size": {"longest_edge": 32},
        "patch_size": {"height": 8, "width": 8},
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.48145466, 0.4578275, 0.40821073],
        "image_std": [0.26862954, 0.26130258, 0.27577711],
        "do_convert_rgb": True,
        "resample": 3,
    }
    _write_json(out_dir / "preprocessor_config.json", image_processor)
    _write_json(
        out_dir / "processor_config.json",
        {"processor_class": "PixtralProcessor", "patch_size": 8, "spatial_merge_size": 2, "image_token": "[IMG]"},
    )
    return out_dir


# ---------------------------------------------------------------- lfm2_vl

LFM2_VL_ROLES = {
    "image_token": "<image>",
    "image_start_token": "<|image_start|>",
    "image_end_token": "<|image_end|>",
    "image_thumbnail_token": "<|img_thumbnail|>",
}
"""The image tokens LFM2-VL's processor reads from its tokenizer, by role."""

LFM2_VL_TILE_TOKENS = tuple(f"<|img_row_{row}_col_{col}|>" for row in range(1, 4) for col in range(1, 4))
"""LFM2-VL's tile markers for grids of up to 3x3 tiles (enough for the tile
counts of images up to a few hundred pixels here)."""

CHATML_IMAGE_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""LFM2-VL's ChatML format; an image part is written ``<image>`` (the
processor expands it)."""


def build_tiny_lfm2_vl(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``lfm2_vl`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide LFM2 language model (one short-convolution layer, then one
    attention layer), a 1-layer 32-wide SigLIP2 (NaFlex) tower with 8-pixel
    patches pixel-unshuffled 2x2, images smart-resized to at most 4 image
    tokens (a 64x64 image becomes one 32x32 view), and a small (~350-token)
    byte-level BPE tokenizer trained here with LFM2-VL's image tokens. The
    layers' output projections are scaled x8 and the projector's output x16
    (see the module docstring).
    mlx-vlm forces LFM2-VL's tiling on when it loads the processor, so
    images over 4096 pixels are split into 32x32 tiles (4 tokens each,
    at least 2 tiles) plus a 4-token thumbnail.

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import lfm2_vl

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = [
        "<|pad|>",
        "<|startoftext|>",
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        *LFM2_VL_ROLES.values(),
        *LFM2_VL_TILE_TOKENS,
    ]
    tokenizer = _tokenizer(
        specials, LFM2_VL_ROLES, bos_token="<|startoftext|>", eos_token="<|im_end|>", pad_token="<|pad|>"
    )
    tokenizer.chat_template = CHATML_IMAGE_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    vocab_size = len(tokenizer)
    text = {
        "model_type": "lfm2",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "layer_types": ["conv", "full_attention"],
        "intermediate_size": 128,
        "block_dim": 64,
        "block_ff_dim": 128,
        "block_multiple_of": 16,
        "block_auto_adjust_ff_dim": True,
        "conv_dim": 64,
        "conv_dim_out": 64,
        "conv_L_cache": 3,
        "num_attention_heads": 4,
        "num_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": vocab_size,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "norm_eps": 1e-5,
        "tie_word_embeddings": True,
        "eos_token_id": tokenizer.eos_token_id,
    }
    vision = {
        "model_type": "siglip2_vision_model",
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "patch_size": 8,
        "num_patches": 16,
        "image_size": 32,
    }
    tiling = {
        "downsample_factor": 2,
        "encoder_patch_size": 8,
        "min_image_tokens": 1,
        "max_image_tokens": 4,
        "max_num_patches": 16,
        "max_pixels_tolerance": 4.0,
        "tile_size": 32,
        "min_tiles": 2,
        "max_tiles": 10,
        "use_thumbnail": True,
        "do_image_splitting": True,
    }
    config = {
        "model_type": "lfm2_vl",
        "architectures": ["Lfm2VlForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        **tiling,
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "projector_hidden_size": 64,
        "projector_bias": True,
        "projector_use_layernorm": True,
        "vision_feature_layer": -1,
        "use_image_special_tokens": True,
        "eos_token_id": tokenizer.eos_token_id,
    }
    mx.random.seed(seed)
    model_config = lfm2_vl.ModelConfig.from_dict(config)
    model_config.text_config = lfm2_vl.TextConfig.from_dict(text)
    model_config.vision_config = lfm2_vl.VisionConfig.from_dict(vision)
    model = lfm2_vl.Model(model_config)
    # at random init each layer's output is small next to the tied input
    # embedding, so every step predicts the token it was fed: scale the
    # layers' outputs up, and the image features so they steer the answer
    _save_model(
        model, out_dir, {"out_proj.weight": 8.0, "w2.weight": 8.0, "multi_modal_projector.linear_2.weight": 16.0}
    )
    _write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Siglip2ImageProcessorFast",
        "processor_class": "Lfm2VlProcessor",
        **tiling,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "do_pad": True,
        "resample": 2,
    }
    _write_json(out_dir / "preprocessor_config.json", image_processor)
    _write_json(
        out_dir / "processor_config.json", {"processor_class": "Lfm2VlProcessor", "use_image_special_tokens": True}
    )
    return out_dir


# ---------------------------------------------------------------- qwen3_5

QWEN_VL_TOKENS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
"""ChatML's turn tokens and Qwen-VL's vision tokens."""

QWEN_VL_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
    "{% for part in message['content'] %}{% if part['type'] == 'image' %}"
    "<|vision_start|><|image_pad|><|vision_end|>{% elif part['type'] == 'video' %}"
    "<|vision_start|><|video_pad|><|vision_end|>{% elif part['type'] == 'text' %}{{ part['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen-VL's ChatML format; an image part is written
``<|vision_start|><|image_pad|><|vision_end|>`` (the processor repeats the
pad token), a video part likewise with ``<|video_pad|>``."""


def build_tiny_qwen3_5(out_dir: Path, seed: int = 0) -> Path:
    """Write an mlx-vlm ``qwen3_5`` model directory with random weights to
    ``out_dir`` and return it (an existing build is reused): a 2-layer,
    64-wide Qwen 3.5 language model (a gated-delta-net linear-attention
    layer, then a gated full-attention layer with interleaved M-RoPE), a
    1-block 32-wide Qwen3-VL vision tower without deepstack (16-pixel
    patches merged 2x2; images resized to at most 64x64, so at most 4
    image tokens), and a small (~350-token) byte-level BPE tokenizer trained here
    with Qwen-VL's vision tokens. The layers' output projections are scaled
    x8 and the vision merger's output x16 (see the module docstring).

    Raises ImportError without mlx-vlm.
    """
    import mlx.core as mx
    from mlx_vlm.models import qwen3_5

    if (out_dir / "model.safetensors").exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    specials = ["<|endoftext|>", *QWEN_VL_TOKENS]
    tokenizer = _tokenizer(specials, {}, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.chat_template = QWEN_VL_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in QWEN_VL_TOKENS}
    vocab_size = len(tokenizer)
    eos = ids["<|im_end|>"]
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "full_attention_interval": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "linear_num_value_heads": 4,
        "linear_num_key_heads": 2,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_conv_kernel_dim": 4,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "eos_token_id": eos,
        "rope_parameters": {
            "type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    }
    vision = {
        "model_type": "qwen3_5",
        "depth": 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "out_hidden_size": 64,
        "num_heads": 2,
        "patch_size": 16,
        "spatial_patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
        "num_position_embeddings": 64,
        "deepstack_visual_indexes": [],
    }
    config = {
        "model_type": "qwen3_5",
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": text,
        "vision_config": vision,
        "tie_word_embeddings": True,
        "vocab_size": vocab_size,
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "eos_token_id": [eos],
    }
    mx.random.seed(seed)
    model = qwen3_5.Model(qwen3_5.ModelConfig.from_dict(config))
    # as for LFM2-VL: scale the layers' outputs and the image features up
    scales = {"out_proj.weight": 8.0, "o_proj.weight": 8.0, "down_proj.weight": 8.0, "merger.linear_fc2.weight": 16.0}
    _save_model(model, out_dir, scales)
    _write_json(out_dir / "config.json", config)
    image_processor = {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen3VLProcessor",
        "patch_size": 16,
        "merge_size": 2,
        "temporal_patch_size": 2,
        "image_mean": [0.5, 0.5, 0.5],
        "image_std": [0.5, 0.5, 0.5],
        "min_pixels": 32 * 32,
        "max_pixels": 64 * 64,
    }
    _write_json(out_dir / "preprocessor_config.json", image_processor)
    _write_json(out_dir / "video_preprocessor_config.json", image_processor)
    _write_json(out_dir / "processor_config.json", {"processor_class": "Qwen3VLProcessor"})
    return out_dir


BUILDERS = {
    "gemma3": build_tiny_gemma3,
    "idefics3": build_tiny_idefics3,
    "mistral3": build_tiny_mistral3,
    "lfm2_vl": build_tiny_lfm2_vl,
    "qwen3_5": build_tiny_qwen3_5,
}
"""The family builders that work, by mlx-vlm model type."""


def check(path: Path, max_tokens: int = 8) -> dict[str, list[int]]:
    """Load the model directory ``path`` with ``mlx_vlm.load`` and decode
    greedily ``max_tokens`` tokens with ``mlx_vlm.generate`` for a "Hi" +
    image prompt with a red and with a blue 64x64 image, and for a text-only
    "Hi" prompt; return the token ids by ``"red"``, ``"blue"``, ``"text"``.

    The prompt is rendered with the processor's chat template, or with its
    tokenizer's when the processor has none (mlx-vlm's processors for
    Gemma 3, Idefics3, Mistral 3 and LFM2-VL leave it unset).
    """
    from mlx_vlm import generate, load
    from PIL import Image

    model, processor = load(str(path))
    templater = processor if getattr(processor, "chat_template", None) else processor.tokenizer
    results = {}
    for name, content in (
        ("red", [{"type": "text", "text": "Hi"}, {"type": "image"}]),
        ("blue", [{"type": "text", "text": "Hi"}, {"type": "image"}]),
        ("text", [{"type": "text", "text": "Hi"}]),
    ):
        prompt = templater.apply_chat_template(
            [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
        )
        colour = {"red": (255, 0, 0), "blue": (0, 0, 255)}.get(name)
        image = None if colour is None else [Image.new("RGB", (64, 64), colour)]
        r = generate(model, processor, prompt, image=image, max_tokens=max_tokens, temperature=0.0, verbose=False)
        results[name] = list(r.token_ids)
    return results


if __name__ == "__main__":
    import sys
    import tempfile
    import time

    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in sys.argv[1:] or list(BUILDERS):
            start = time.monotonic()
            path = BUILDERS[family](Path(tmp) / family)
            built = time.monotonic()
            results = check(path)
            done = time.monotonic()
            print(f"{family}: built {built - start:.2f}s, load + 3 generations {done - built:.2f}s")
            for name, ids in results.items():
                print(f"  {name:5} {ids}")
            if results["red"] == results["blue"]:
                failed.append(family)
    if failed:
        sys.exit(f"the image does not change the answer: {failed}")
