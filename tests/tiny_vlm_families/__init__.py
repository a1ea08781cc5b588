"""Tiny random-weight vision-language models of several mlx-vlm families.

One builder per family (:data:`BUILDERS`), in the style of
:mod:`tests.tiny_vlm`: the model is mlx-vlm 0.7.10's own ``Model`` class
with a 2-layer, 64-wide language model and a 1-layer, 32-wide vision
tower (Llama 3.2 Vision's language model: 4 layers, 2 of them
cross-attention), random weights from ``mx.random.seed(seed)`` saved with
``mx.save_safetensors``, a ``config.json``, a byte-level BPE tokenizer of
about 350 tokens trained here (with the family's real special tokens) and
saved with ``save_pretrained`` along with a Jinja chat template
(``chat_template.jinja``), and the family's preprocessor/processor configs.
Everything is built offline in well under a second; ``mlx_vlm.load`` loads
each directory without network access and returns the processor class
mlx-vlm uses for the family. Images are resized so a 64x64 image costs 4
image tokens (Llama 3.2 Vision's: one ``<|image|>`` token and 20
cross-attended vision tokens). Run ``python -m tests.tiny_vlm_families
[family ...]`` to build each family in a temporary directory and
greedy-decode a red-image, a blue-image and a text-only prompt with
``mlx_vlm.generate`` (the two images give different tokens).

The package:

* :mod:`tests.tiny_vlm_families.common`: the tokenizer training, the JSON
  configs and the weights file every builder shares.
* one module per family (:mod:`~tests.tiny_vlm_families.gemma3`,
  :mod:`~tests.tiny_vlm_families.idefics3`,
  :mod:`~tests.tiny_vlm_families.mistral3`,
  :mod:`~tests.tiny_vlm_families.mllama`,
  :mod:`~tests.tiny_vlm_families.lfm2_vl`,
  :mod:`~tests.tiny_vlm_families.qwen2_vl`,
  :mod:`~tests.tiny_vlm_families.qwen2_5_vl`,
  :mod:`~tests.tiny_vlm_families.qwen3_5`,
  :mod:`~tests.tiny_vlm_families.qwen3_5_moe`,
  :mod:`~tests.tiny_vlm_families.smolvlm`): its builder, special tokens
  and chat template.
* :mod:`tests.tiny_vlm_families.gemma3n` and
  :mod:`tests.tiny_vlm_families.qwen3_omni_moe`: Gemma 3n and Qwen3-Omni,
  not in :data:`BUILDERS` (served for audio only, checked by
  tests/test_vision_audio.py; Gemma 3n's vision tower cannot be made
  small, so an image costs seconds here: see that module).
* :mod:`tests.tiny_vlm_families.selfcheck`: :func:`check`, the three
  greedy generations of a built directory.
* :mod:`tests.tiny_vlm_families.__main__`: the command above.

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
``mllama`` (Llama 3.2 Vision: 4 text layers, 1 and 3 cross-attention; 28x28 tiles, up to 4)
    Processor ``MllamaProcessor`` (mlx-vlm's ``processing_mllama``; image
    processor transformers' ``MllamaImageProcessorPil``, 28x28 tiles,
    ``max_image_tiles`` 4). The template writes ``<|image|>`` for an image
    part and the processor leaves it as is (one token, no expansion; it adds
    ``<|begin_of_text|>`` only if the prompt lacks it): the image reaches the
    text only through the cross-attention layers. ``<|image|>`` is the last
    token, id = ``text_config.vocab_size`` (the real 128256: outside
    ``lm_head``, inside ``embed_tokens``' vocab + 8 rows). Config field
    ``image_token_index``; ``text_config.cross_attention_layers`` (layer 0
    must be self-attention: the cross-attention mask is sliced by the first
    self-attention cache's offset). No ``make_cache`` (mlx-vlm falls back to
    plain ``KVCache`` per layer; the cross-attention layers' stay empty).
    Processor output keys, as ``mx.array`` whatever ``return_tensors``
    says: ``input_ids``, ``attention_mask`` (1, L) int64, ``pixel_values``
    (1, 1, 4, 3, 28, 28) float32 (always padded to 4 tiles, zeros after
    the image's), ``aspect_ratio_ids`` (1, 1) int64, ``aspect_ratio_mask``
    (1, 1, 4) int64, ``cross_attention_mask`` (1, L, 1, 4) int64 (1 from the
    ``<|image|>`` row to the end, on the image's tiles). A 64x64 image uses
    4 tiles (2x2: id 6, mask ``[1, 1, 1, 1]``); 64x32 (wide) uses 2 (id 2,
    mask ``[1, 1, 0, 0]``), 32x64 (tall) 2 (id 5), 20x20 one (id 1), 200x50
    four in a row (id 4). ``get_input_embeddings`` needs
    ``aspect_ratio_ids`` (ValueError without) and ``aspect_ratio_mask``
    (AttributeError without); ``cross_attention_mask`` is optional (without
    it every text row sees every vision token). It returns
    ``cross_attention_states`` (1, 20, 64): 4 tiles x 5 tokens (4 patches +
    class token) for every image, square or not; the padded tiles are hidden
    only by the cross-attention mask (1, 1, L, 20) and
    ``full_text_row_masked_out_mask`` (1, 1, L, 1), which zeroes the
    cross-attention layers' MLP for the rows before the image.
    ``mlx_vlm.generate`` passes only ``cross_attention_states`` to the
    decode steps (no mask), so generated tokens also attend to the padded
    tiles' tokens. Text-only works but not as in transformers (which skips
    the cross-attention layers): with no ``cross_attention_states`` mlx-vlm
    runs them on keys and values split from the query heads, unmasked.
    mlx-vlm starts the ``tanh`` gates (``cross_attn_attn_gate``,
    ``cross_attn_mlp_gate``, the vision tower's) at zero, where the image
    has no effect: the saved ones are random (0.5 to 1.5; the position
    embedding's, which mixes in the tile-position embedding, 0.2 to 0.5).
``qwen2_vl`` and ``qwen2_5_vl`` (the real checkpoints' flat ``config.json``: text fields at the top level)
    Qwen2.5-VL's tower has 2 blocks (windowed attention, then full).
    Processors ``Qwen2VLProcessor`` and ``Qwen2_5_VLProcessor`` (mlx-vlm's
    ``processing_qwen2_vl`` / ``processing_qwen2_5_vl``; image processor
    mlx-vlm's ``Qwen3VLImageProcessor``, video processor its
    ``Qwen3VLVideoProcessor``, both numpy). The processor's chat template is
    the tokenizer's, so ``processor.apply_chat_template`` works. The
    template writes ``<|vision_start|><|image_pad|><|vision_end|>`` for an
    image part and ``<|vision_start|><|video_pad|><|vision_end|>`` for a
    video part; the pad becomes 4 x ``<|image_pad|>`` for a 64x64 image
    (``image_grid_thw`` ``[[1, 4, 4]]``: 16-pixel patches merged 2x2). A
    video's pixel bound (64x64) counts frames x height x width, so the
    frames shrink to 32x32 and each pair of frames costs one token: a 3 s
    96x64 clip sampled at 2 fps (max 8 frames: 6 frames) is 3 x
    ``<|video_pad|>`` (``video_grid_thw`` ``[[3, 2, 2]]``); all its 24
    frames would be 12. Config fields ``image_token_id``,
    ``video_token_id``, ``vision_start_token_id`` (Qwen2.5-VL's config
    class also reads ``vision_end_token_id``; its ``vision_token_id`` is
    unused). No ``make_cache`` (mlx-vlm falls back to plain ``KVCache`` per
    layer). Processor output keys, as ``mx.array`` whatever
    ``return_tensors`` says: ``input_ids``, ``attention_mask``,
    ``pixel_values`` (16, 1536), ``image_grid_thw`` (1, 3) for an image;
    ``pixel_values_videos`` (12, 1536), ``video_grid_thw`` (1, 3) for a
    video (given as a (T, C, H, W) uint8 array; no ``second_per_grid_ts``:
    the M-RoPE time index is the frame pair's index in both families).
    ``get_input_embeddings`` needs the grid; it takes ``pixel_values`` or,
    only without it, ``pixel_values_videos``, and runs the tower on
    ``image_grid_thw`` if given, else ``video_grid_thw``: with an image and
    a video in one prompt the video's pads keep their token embeddings
    (and ``pixel_values_videos`` with both grids fails in the tower).
``qwen3_5``
    Processor ``Qwen3VLProcessor`` (mlx-vlm's; its ``chat_template`` is
    set, so ``processor.apply_chat_template`` works).
    The template writes ``<|vision_start|><|image_pad|><|vision_end|>``; the
    pad becomes 4 x ``<|image_pad|>`` for a 64x64 image (images are resized
    to at most 64x64 pixels: 16-pixel patches merged 2x2). Config field
    ``image_token_id`` (also ``video_token_id``, ``vision_start_token_id``,
    ``vision_end_token_id``). ``make_cache()``: ``[ArraysCache, KVCache]``
    (gated delta net, then full attention). Processor output keys
    ``input_ids``, ``attention_mask``, ``pixel_values`` (16, 1536),
    ``image_grid_thw`` (1, 3), as ``mx.array``. ``get_input_embeddings``
    needs ``image_grid_thw``.
``qwen3_5_moe`` (Qwen 3.5's layout, each layer's MLP a mixture of experts)
    As ``qwen3_5`` (same tokenizer, template, vision tower, processor
    ``Qwen3VLProcessor`` with video processor mlx-vlm's
    ``Qwen3VLVideoProcessor``, processor outputs, ``make_cache()``
    ``[ArraysCache, KVCache]``), but config ``model_type`` ``qwen3_5_moe``
    (text ``qwen3_5_moe_text``, vision ``qwen3_5_moe``) and each layer's MLP
    is a sparse MoE block: 4 experts (``moe_intermediate_size`` 32), 2 per
    token (``norm_topk_prob``), plus a shared expert
    (``shared_expert_intermediate_size`` 32; the block always has one,
    gated by ``sigmoid(shared_expert_gate)``). The experts are saved in
    mlx-vlm's stacked layout, ``mlp.switch_mlp.{gate,up,down}_proj.weight``
    (4, out, in), which ``sanitize`` keeps (it would also stack per-expert
    ``mlp.experts.E.*`` or split a fused ``mlp.experts.gate_up_proj`` under
    the Hugging Face ``model.language_model.`` prefix). A video (a (T, C,
    H, W) uint8 array; 6 frames of 96x64) is ``pixel_values_videos`` (12,
    1536), ``video_grid_thw`` ``[[3, 2, 2]]``, 3 x ``<|video_pad|>``, as in
    Qwen2-VL.
``smolvlm`` (SmolVLM2's layout: Idefics3's model, SigLIP tower ``smolvlm_vision``, text ``llama``)
    Processor ``SmolVLMProcessor`` (mlx-vlm's ``processing_smolvlm``; image
    processor transformers' ``SmolVLMImageProcessorPil``, longest edge 32,
    splitting off; it takes the tokenizer's chat template as its own, so
    ``processor.apply_chat_template`` works). The template writes
    ``<|im_start|>User:<image>...<end_of_utterance>\nAssistant:``; the
    ``<image>`` is expanded as in Idefics3 to ``<fake_token_around_image>``
    ``<global-img>`` + 4 x ``<image>`` + ``<fake_token_around_image>``
    (always 4 tokens: every image is resized to 32x32). Config field
    ``image_token_id`` (the config class derives ``image_token_index``). The
    language model has no ``make_cache`` (mlx-vlm falls back to plain
    ``KVCache`` per layer). Processor output keys ``pixel_values`` (1, 1, 3,
    32, 32), ``pixel_attention_mask`` (1, 1, 32, 32), ``input_ids``,
    ``attention_mask``, as ``mx.array`` whatever ``return_tensors`` says.
    ``pixel_attention_mask`` is optional (all-ones without it).

Only the Qwen processors' and SmolVLM's have a chat template after
``mlx_vlm.load``: for the other five, ``processor.apply_chat_template``
raises ValueError (mlx-vlm builds them without one; the real checkpoints
behave the same), so render with ``processor.tokenizer.apply_chat_template``
or mlx-vlm's ``mlx_vlm.prompt_utils.apply_chat_template(processor,
model.config, messages)``, which falls back to the tokenizer.
``mlx_vlm.generate`` works with an image and text-only for all ten, and
with a video for Qwen2-VL, Qwen2.5-VL, Qwen3.5 and Qwen 3.5 MoE (a moving
clip and a red one give different tokens).

LFM2-VL, Qwen3.5 and Qwen 3.5 MoE tie their output to the input embedding; at random init
every step then predicts the token it was fed, so their layers' output
projections are scaled up (x8), and the vision projection (x16) so the image
changes the answer.
"""

from __future__ import annotations

from .gemma3 import build_tiny_gemma3
from .idefics3 import build_tiny_idefics3
from .lfm2_vl import build_tiny_lfm2_vl
from .mistral3 import build_tiny_mistral3
from .mllama import build_tiny_mllama
from .qwen2_5_vl import build_tiny_qwen2_5_vl
from .qwen2_vl import build_tiny_qwen2_vl
from .qwen3_5 import build_tiny_qwen3_5
from .qwen3_5_moe import build_tiny_qwen3_5_moe
from .selfcheck import check
from .smolvlm import build_tiny_smolvlm

BUILDERS = {
    "gemma3": build_tiny_gemma3,
    "idefics3": build_tiny_idefics3,
    "mistral3": build_tiny_mistral3,
    "lfm2_vl": build_tiny_lfm2_vl,
    "qwen2_vl": build_tiny_qwen2_vl,
    "qwen2_5_vl": build_tiny_qwen2_5_vl,
    "qwen3_5": build_tiny_qwen3_5,
    "qwen3_5_moe": build_tiny_qwen3_5_moe,
    "smolvlm": build_tiny_smolvlm,
    "mllama": build_tiny_mllama,
}
"""The family builders that work, by mlx-vlm model type."""

__all__ = [
    "BUILDERS",
    "build_tiny_gemma3",
    "build_tiny_idefics3",
    "build_tiny_lfm2_vl",
    "build_tiny_mistral3",
    "build_tiny_mllama",
    "build_tiny_qwen2_5_vl",
    "build_tiny_qwen2_vl",
    "build_tiny_qwen3_5",
    "build_tiny_qwen3_5_moe",
    "build_tiny_smolvlm",
    "check",
]
