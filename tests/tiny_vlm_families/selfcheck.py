"""The self-check of a built model directory: greedy generations with
mlx-vlm for a red image, a blue image and no image."""

from __future__ import annotations

from pathlib import Path


def check(path: Path, max_tokens: int = 8) -> dict[str, list[int]]:
    """Load the model directory ``path`` with ``mlx_vlm.load`` and decode
    greedily ``max_tokens`` tokens with ``mlx_vlm.generate`` for a "Hi" +
    image prompt with a red and with a blue 64x64 image, and for a text-only
    "Hi" prompt; return the token ids by ``"red"``, ``"blue"``, ``"text"``.

    The prompt is rendered with the processor's chat template, or with its
    tokenizer's when the processor has none (mlx-vlm's processors for
    Gemma 3, Idefics3, Mistral 3, LFM2-VL and Llama 3.2 Vision leave it
    unset).
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
