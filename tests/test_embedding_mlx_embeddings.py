"""Embedding directories mlxd's BERT encoder does not run, loaded with
mlx-embeddings (the ``embeddings`` extra) through mlxd's embedding model
code: a tiny random XLM-RoBERTa built from mlx-embeddings' own model class.

The reference vectors come from a direct mlx-embeddings forward pass
(``mlx_embeddings.utils.load_model``, one unpadded input at a time) and
pooling written out here in NumPy, not from mlxd's code.
"""

from __future__ import annotations

import json
import sys

import mlx.core as mx
import numpy as np
import pytest

pytest.importorskip("mlx_embeddings", reason="pip install -e '.[embeddings]'")

from mlx_embeddings.utils import load_model as mlx_embeddings_load_model  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from shared.model_kind import detect_kind  # noqa: E402
from shared.protocol import EmbedRequest  # noqa: E402
from tests.hub_watch import assert_no_hub_and_no_environment_change, watching_the_hub  # noqa: E402
from tests.test_embedding_model import run_scheduler  # noqa: E402
from tests.tiny_xlm_roberta import TINY_XLMR, build_tiny_xlm_roberta  # noqa: E402
from worker.embeddings.model import load_embedding_model  # noqa: E402
from worker.embeddings.scheduler import EmbeddingScheduler, EmbedJob  # noqa: E402
from worker.loading.loader import ModelLoadError  # noqa: E402

SENTENCES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog",
    "MLX runs on Apple silicon",
    "a",
    "Embeddings of many lengths are batched together, padded to the longest one",
]


def reference(path, sentences, mode):
    """Vectors by mlx-embeddings directly: each sentence alone (no
    padding), pooled in NumPy (``own``: the model's ``text_embeds``)."""
    model = mlx_embeddings_load_model(path, path_to_repo=str(path))
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    tokenizer.no_padding()  # the shipped file pads every input to 128 tokens
    out = []
    for text in sentences:
        ids = mx.array([tokenizer.encode(text).ids])
        output = model(ids, attention_mask=mx.ones(ids.shape, dtype=mx.int32))
        if mode == "own":
            vector = np.array(output.text_embeds[0], dtype=np.float64)
        else:
            states = np.array(output.last_hidden_state[0], dtype=np.float64)
            vector = {"cls": states[0], "mean": states.mean(axis=0), "max": states.max(axis=0)}[mode]
            vector = vector / np.linalg.norm(vector)
        out.append(vector)
    return np.stack(out)


@pytest.fixture(scope="module")
def xlmr_dir(tmp_path_factory):
    return build_tiny_xlm_roberta(tmp_path_factory.mktemp("xlmr") / "m")


def test_xlm_roberta_loads_on_mlx_embeddings(xlmr_dir):
    assert detect_kind(xlmr_dir) == "embedding"
    model = load_embedding_model(str(xlmr_dir), dtype="float32")
    assert model.engine == "mlx-embeddings" and model.own_pooling
    assert model.dim == TINY_XLMR["hidden_size"] and model.dtype == "float32"
    assert model.max_tokens == TINY_XLMR["max_position_embeddings"] - 1  # positions start after pad_token_id
    assert model.pooling.normalize
    ids = model.tokenizer.prepare(EmbedRequest(request_id="r", texts=SENTENCES))
    batched = model.encode(ids)
    one_by_one = np.stack([model.encode([row])[0] for row in ids])
    assert batched.shape == (len(SENTENCES), TINY_XLMR["hidden_size"]) and batched.dtype == np.float32
    np.testing.assert_allclose(batched, one_by_one, atol=2e-5)
    np.testing.assert_allclose(batched, reference(xlmr_dir, SENTENCES, "own"), atol=2e-5)
    np.testing.assert_allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(batched[0], batched[1], atol=1e-3)  # random weights still tell inputs apart


@pytest.mark.parametrize("mode", ["cls", "max", "mean"])
def test_sentence_transformers_pooling_on_mlx_embeddings(tmp_path, mode):
    path = build_tiny_xlm_roberta(tmp_path / mode, seed=1, pooling={f"pooling_mode_{mode}_tokens": True})
    if mode == "cls":
        path.joinpath("1_Pooling", "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    model = load_embedding_model(str(path), dtype="float32")
    assert model.engine == "mlx-embeddings" and not model.own_pooling and model.pooling.modes == (mode,)
    ids = model.tokenizer.prepare(EmbedRequest(request_id="r", texts=SENTENCES))
    batched = model.encode(ids)
    np.testing.assert_allclose(batched, np.stack([model.encode([row])[0] for row in ids]), atol=2e-5)
    np.testing.assert_allclose(batched, reference(path, SENTENCES, mode), atol=2e-5)


def test_loading_on_mlx_embeddings_asks_no_hub_and_leaves_the_environment(xlmr_dir, monkeypatch):
    """The loader hands mlx-embeddings a local ``Path``: with the hub at a
    counting loopback listener (and not switched offline) the load connects
    nowhere and sets no variable (``HF_HUB_OFFLINE`` among them)."""
    with watching_the_hub(monkeypatch) as watch:
        model = load_embedding_model(str(xlmr_dir), dtype="float32")
    assert model.engine == "mlx-embeddings"
    assert_no_hub_and_no_environment_change(watch)


def test_scheduler_batches_mlx_embeddings_model(xlmr_dir):
    """On the embedding scheduler (as in the worker): two requests batched
    together get their own vectors, equal to one input at a time."""
    model = load_embedding_model(str(xlmr_dir), dtype="float32")
    EmbeddingScheduler(model, lambda _message: None, max_batch_size=8).warm_up()
    ids = model.tokenizer.prepare(EmbedRequest(request_id="r", texts=SENTENCES))
    _, outputs = run_scheduler(model, [EmbedJob("a", ids[:2]), EmbedJob("b", ids[2:])], max_batch_size=8)
    dim = TINY_XLMR["hidden_size"]
    got = np.concatenate([np.frombuffer(outputs[r][0].embeddings, dtype="<f4").reshape(-1, dim) for r in "ab"])
    np.testing.assert_allclose(got, np.stack([model.encode([row])[0] for row in ids]), atol=2e-5)


def test_roberta_model_type_runs_as_xlm_roberta(tmp_path, xlmr_dir):
    path = build_tiny_xlm_roberta(tmp_path / "r")
    path.joinpath("config.json").write_text(json.dumps({**TINY_XLMR, "model_type": "roberta"}))
    model = load_embedding_model(str(path), dtype="float32")
    ids = [[101, 7592, 2088, 102]]
    want = load_embedding_model(str(xlmr_dir), dtype="float32").encode(ids)
    np.testing.assert_allclose(model.encode(ids), want, atol=1e-6)


def test_without_mlx_embeddings_the_refusal_names_the_extra(xlmr_dir, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlx_embeddings", None)
    with pytest.raises(ModelLoadError, match=r"xlm-roberta.*pip install -e '\.\[embeddings\]'"):
        load_embedding_model(str(xlmr_dir))


def test_model_types_mlx_embeddings_lacks_are_refused(tmp_path):
    path = build_tiny_xlm_roberta(tmp_path / "d")
    path.joinpath("config.json").write_text(json.dumps({**TINY_XLMR, "model_type": "distilbert"}))
    with pytest.raises(ModelLoadError, match="no model for model_type 'distilbert'"):
        load_embedding_model(str(path))
