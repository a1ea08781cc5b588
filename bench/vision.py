"""``make bench``: chat with media (an image cold and repeated, a video, an audio clip), mlxd against mlx-vlm in-process.

No real vision model is reachable offline, so the models are the tests'
tiny random-weight ones built from mlx-vlm's own classes (Qwen3-VL-style
for images and videos, Gemma 3 for images of another family, Gemma 4 with
an audio tower for audio): what this measures is the serving path around
the model (decoding and checking the media, the processor, the vision
tower's prefill, the prefix cache, the batch engine), not a large model's
arithmetic. Both sides run float32 on the same BLAS (the reference in a
process of its own with mlxd's worker environment).

* **mlxd**: a gateway with one vision worker per model, one client sending
  ``--requests`` chat requests in a row through the official openai SDK
  (greedy, 8 tokens): *cold*, every request a different image (or video, or
  clip), so the vision tower runs each time; *repeated*, the same image
  every time, so every request after the first is a prefix-cache hit.
* **in-process**: mlx-vlm's own ``generate`` on the same turn and media,
  request after request (it caches nothing between calls).

Prints the mean seconds per request of each side and the in-process time
over mlxd's (above 1: mlxd answers sooner), and with ``--write``
writes them to ``bench/results/vision.json``. Never asserts. Usage::

    .venv/bin/python bench/vision.py [--requests 12]
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import subprocess
import sys
import tempfile
import time
import wave
from pathlib import Path

from harness import ROOT, blas_environment, mlxd
from record import add_write_flag
from record import write as write_results

TOKENS = 8
CASES = (
    ("qwen3-vl", "image", "cold"),
    ("qwen3-vl", "image", "repeated"),
    ("qwen3-vl", "video", "cold"),
    ("gemma3", "image", "cold"),
    ("gemma3", "image", "repeated"),
    ("gemma4-audio", "audio", "cold"),
    ("gemma4-audio", "audio", "repeated"),
)
"""(model, media kind, cold or repeated) of each row."""


def models(directory: Path) -> dict[str, Path]:
    """The tiny models' directories, built once under ``directory``."""
    sys.path.insert(0, str(ROOT))
    from tests.tiny_vlm import build_tiny_audio_vlm, build_tiny_vlm
    from tests.tiny_vlm_families import build_tiny_gemma3

    return {
        "qwen3-vl": build_tiny_vlm(directory / "qwen3-vl"),
        "gemma3": build_tiny_gemma3(directory / "gemma3"),
        "gemma4-audio": build_tiny_audio_vlm(directory / "gemma4-audio"),
    }


def media(kind: str, index: int, directory: Path) -> bytes:
    """Media item ``index`` of ``kind``: a 64x64 PNG of its own colour, a
    2 s 96x64 MP4 of its own colour (OpenCV), or a 1.5 s WAV tone of its
    own pitch; different indexes give different bytes."""
    import numpy as np

    if kind == "image":
        from PIL import Image

        out = io.BytesIO()
        Image.new("RGB", (64, 64), ((index * 37) % 256, (index * 91) % 256, 200)).save(out, format="PNG")
        return out.getvalue()
    if kind == "video":
        import cv2

        path = directory / f"clip{index}.mp4"
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 8, (96, 64))
        for frame_index in range(16):
            frame = np.zeros((64, 96, 3), np.uint8)
            frame[:] = ((index * 37) % 256, (frame_index * 16) % 256, 128)
            writer.write(frame)
        writer.release()
        return path.read_bytes()
    rate = 16000
    t = np.arange(int(1.5 * rate)) / rate
    signal = 0.5 * np.sin(2 * np.pi * (300 + 40 * index) * t)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((signal * 32767).astype("<i2").tobytes())
    return out.getvalue()


def items(kind: str, mode: str, count: int, directory: Path) -> list[bytes]:
    """The media of one row's ``count`` requests (one item ``count`` times
    when ``repeated``)."""
    if mode == "repeated":
        return [media(kind, 0, directory)] * count
    return [media(kind, i, directory) for i in range(count)]


def reference(directory: Path, count: int) -> None:
    """In-process side (run in its own process): print one JSON line of
    mean seconds per request by row."""
    from mlx_vlm import load

    paths = models(directory)
    loaded = {name: load(str(path)) for name, path in paths.items()}
    seconds = {}
    for name, kind, mode in CASES:
        model, processor = loaded[name]
        templater = processor if getattr(processor, "chat_template", None) else processor.tokenizer
        prompt = templater.apply_chat_template(
            [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": kind}]}],
            add_generation_prompt=True,
            tokenize=False,
        )
        files = []
        for i, blob in enumerate(items(kind, mode, count + 1, directory)):
            path = (
                directory / f"ref-{name}-{kind}-{mode}-{i}.{ {'image': 'png', 'video': 'mp4', 'audio': 'wav'}[kind] }"
            )
            path.write_bytes(blob)
            files.append(path)

        ask = (model, processor, prompt, kind)
        library_answer(ask, files[-1])  # warm-up on an item of its own
        start = time.perf_counter()
        for path in files[:count]:
            library_answer(ask, path)
        seconds[f"{name}/{kind}/{mode}"] = (time.perf_counter() - start) / count
    print(json.dumps(seconds))


def library_answer(ask: tuple, path: Path) -> None:
    """mlx-vlm's ``generate`` for ``ask`` (model, processor, prompt, media
    kind) with the media file at ``path``."""
    from mlx_vlm import generate
    from PIL import Image

    model, processor, prompt, kind = ask
    if kind == "image":
        extra = {"image": [Image.open(path).convert("RGB")]}
    else:
        extra = {kind: [str(path)]}
    generate(model, processor, prompt, max_tokens=TOKENS, temperature=0.0, **extra)


def part(kind: str, blob: bytes) -> dict:
    """The openai chat content part carrying ``blob``."""
    data = base64.b64encode(blob).decode()
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}}
    if kind == "video":
        return {"type": "video_url", "video_url": {"url": f"data:video/mp4;base64,{data}"}}
    return {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}


def drive(url: str, name: str, kind: str, blobs: list[bytes]) -> float:
    """Mean seconds per request of one client sending ``blobs`` in a row."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)

    def ask(blob: bytes) -> None:
        client.chat.completions.create(
            model=name,
            messages=[{"role": "user", "content": [{"type": "text", "text": "Hi"}, part(kind, blob)]}],
            max_tokens=TOKENS,
            temperature=0,
        )

    start = time.perf_counter()
    for blob in blobs:
        ask(blob)
    return (time.perf_counter() - start) / len(blobs)


def main() -> None:
    """Measure both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--requests", type=int, default=12)
    parser.add_argument("--reference", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        reference(args.reference, args.requests)
        return
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-vision-") as tmp:
        directory = Path(tmp)
        paths = models(directory)
        proc = subprocess.run(
            [sys.executable, __file__, "--reference", str(directory), "--requests", str(args.requests)],
            cwd=ROOT / "bench",
            env=blas_environment(),
            capture_output=True,
            text=True,
            check=True,
        )
        theirs = json.loads(proc.stdout.strip().splitlines()[-1])
        ours = {}
        for name, path in paths.items():
            with mlxd(directory / f"gw-{name}", {"name": name, "source": str(path), "max_batch_size": 4}) as server:
                for case_name, kind, mode in CASES:
                    if case_name != name:
                        continue
                    # warm-up on an item the row does not use
                    drive(server.url, name, kind, [media(kind, 10_000, directory)])
                    blobs = items(kind, mode, args.requests, directory)
                    ours[f"{name}/{kind}/{mode}"] = drive(server.url, name, kind, blobs)
    print(f"\nchat with media: tiny random-weight models, {TOKENS} greedy tokens, one client, seconds per request")
    print(f"{'row':<32}{'mlxd':>10}{'in-process':>12}{'ref/mlxd':>10}")
    rows = []
    for key in ours:
        print(f"{key:<32}{ours[key]:>10.3f}{theirs[key]:>12.3f}{theirs[key] / ours[key]:>10.2f}")
        rows.append({"row": key, "mlxd_s_per_request": ours[key], "in_process_s_per_request": theirs[key]})
    print("(repeated: every mlxd request after the first is a prefix-cache hit; mlx-vlm's generate caches nothing)")
    if args.write:
        write_results("vision", {"requests": args.requests, "tokens": TOKENS, "rows": rows})


if __name__ == "__main__":
    main()
