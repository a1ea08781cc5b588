"""``make bench`` (speech line): text-to-speech throughput, mlxd against mlx-audio called in-process.

No Kokoro weights are on PyPI, so the model is the tests' tiny random Kokoro
(:mod:`tests.tiny_kokoro`: Kokoro's full-width iSTFTNet decoder, a small
text side); the numbers measure serving overhead and scheduling around the
decoder, not a real voice. Measured two ways on the same phonemes and the
same BLAS (the reference runs in a process of its own with mlxd's worker
environment):

* **mlxd**: a gateway with one speech worker, driven over HTTP
  (``POST /v1/audio/speech``, ``response_format`` ``pcm``) by one client,
  then by two clients at once (the worker interleaves them sentence by
  sentence; Kokoro is one sequence at a time, so the total rate stays);
* **in-process**: mlx-audio's ``KokoroPipeline.generate_from_tokens`` on the
  same phoneme chunks, one after another.

Prints audio seconds per wall second for each and mlxd's share, and with
``--write`` writes them to ``bench/results/speech.json``. Never asserts. Needs the ``speech``
extra. Usage::

    .venv/bin/python bench/speech.py [--requests 3]
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

import httpx
from harness import ROOT, blas_environment, mlxd
from record import add_write_flag
from record import write as write_results

TEXT = "Good morning. How are you today? The weather is fine."
"""The input of every request (three sentences: three chunks)."""

RATE = 24000


def model_dir(tmp: Path) -> Path:
    """Build (or reuse) the tiny random Kokoro under ``tmp``."""
    sys.path.insert(0, str(ROOT))
    from tests.tiny_kokoro import build_tiny_kokoro

    return build_tiny_kokoro(tmp / "tiny-kokoro")


def reference(directory: Path, requests: int) -> None:
    """In-process side (its own process): print one JSON line with the
    audio seconds per second of mlx-audio's pipeline on ``TEXT``'s chunks."""
    sys.path.insert(0, str(ROOT))
    import mlx.core as mx
    from mlx_audio.tts.models.kokoro.pipeline import KokoroPipeline
    from mlx_audio.tts.utils import load_model

    from worker.speech.model import SYNTHESIS_SEED
    from worker.speech.text import Phonemizer

    model = load_model(directory)
    pipeline = KokoroPipeline(lang_code="e", model=model, repo_id="offline/tiny-kokoro", model_path=str(directory))
    chunks = Phonemizer(510).chunks(TEXT, "af_tiny")
    voice = str(directory / "voices" / "af_tiny.safetensors")
    list(pipeline.generate_from_tokens(chunks[0], voice=voice))  # warm-up
    samples, start = 0, time.perf_counter()
    for _ in range(requests):
        for ps in chunks:
            mx.random.seed(SYNTHESIS_SEED)
            for result in pipeline.generate_from_tokens(ps, voice=voice):
                samples += result.audio.size
    print(json.dumps({"audio_seconds_per_second": samples / RATE / (time.perf_counter() - start)}), flush=True)


def drive(url: str, clients: int, requests: int) -> float:
    """Audio seconds per second of ``clients`` threads each sending
    ``requests`` speech requests one after another."""

    def one_client(_: int) -> int:
        got = 0
        with httpx.Client(timeout=900) as client:
            for _ in range(requests):
                r = client.post(
                    f"{url}/v1/audio/speech",
                    json={"model": "tts", "voice": "af_tiny", "input": TEXT, "response_format": "pcm"},
                )
                r.raise_for_status()
                got += len(r.content) // 2
        return got

    start = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as pool:
        samples = sum(pool.map(one_client, range(clients)))
    return samples / RATE / (time.perf_counter() - start)


def main() -> None:
    """Measure both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--requests", type=int, default=3, help="requests per client")
    parser.add_argument("--reference", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        reference(Path(args.reference), args.requests)
        return
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-speech-") as tmp:
        directory = model_dir(Path(tmp))
        proc = subprocess.run(
            [sys.executable, __file__, "--reference", str(directory), "--requests", str(args.requests)],
            cwd=ROOT / "bench",
            env=blas_environment(),
            capture_output=True,
            text=True,
            check=True,
        )
        ref = json.loads(proc.stdout.strip().splitlines()[-1])["audio_seconds_per_second"]
        model = {"name": "tts", "source": str(directory)}
        with mlxd(Path(tmp) / "gw", model) as server:
            drive(server.url, 1, 1)  # warm-up
            one = drive(server.url, 1, args.requests)
            two = drive(server.url, 2, args.requests)
    print("\nspeech: tiny random Kokoro (float32), 3-sentence inputs, audio seconds per second")
    print(f"{'shape':<30}{'mlxd':>10}{'in-process':>12}{'mlxd/ref':>10}")
    rows = [("1 client", one, ref), ("2 clients (interleaved)", two, ref)]
    for name, mine, theirs in rows:
        print(f"{name:<30}{mine:>10.3f}{theirs:>12.3f}{mine / theirs:>10.2f}")
    shapes = [
        {"shape": name, "mlxd_audio_s_per_s": mine, "in_process_audio_s_per_s": theirs} for name, mine, theirs in rows
    ]
    if args.write:
        write_results("speech", {"model": "tiny random Kokoro (float32)", "requests": args.requests, "shapes": shapes})


if __name__ == "__main__":
    main()
