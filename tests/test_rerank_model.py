"""The rerank worker's pieces in-process: kind detection, cross-encoders
(BERT and XLM-RoBERTa) on mlxd's encoder against an independent NumPy
forward of the same weights (alone and batched), score activations, pair
limits and truncation, the scheduler, the wire messages and the
gateway-side body and answer.

The tiny models are built by :mod:`tests.tiny_cross_encoder` in Hugging
Face's checkpoint layout; the reference (:func:`~tests.tiny_cross_encoder.reference_logits`)
is written from the architecture, not from mlxd's code.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from gateway.core.errors import APIError
from gateway.rerank.routes import rerank_body
from gateway.rerank.schema import decode_rerank_request
from shared.codec import gateway_codec, node_codec, worker_codec
from shared.model_kind import capabilities, detect_kind, model_kind, serves, wrong_kind_message
from shared.protocol import RequestOutput, RerankRequest, StepOutputs
from tests.tiny_cross_encoder import build_cross_encoder, reference_logits, reference_pairs, sigmoid
from worker.loading.loader import ModelLoadError
from worker.rerank.model import RerankInputError, load_rerank_model

QUERY = "how do whisper models transcribe speech"
DOCS = [
    "Whisper is an encoder-decoder transformer trained on 680k hours of audio.",
    "Bananas are rich in potassium.",
    "The decoder predicts text tokens conditioned on log-mel features of 30 second windows.",
    "short",
]
FAMILIES = ("bert", "xlm-roberta")


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory):
    """``(family, path, weights)`` of a tiny cross-encoder of each family."""
    path = tmp_path_factory.mktemp("ce") / request.param
    return request.param, path, build_cross_encoder(path, request.param)


def ask(query=QUERY, documents=DOCS, truncate=False) -> RerankRequest:
    return RerankRequest(request_id="r", query=query, documents=list(documents), truncate=truncate)


def expected_scores(family, path, weights, query=QUERY, documents=DOCS) -> np.ndarray:
    return np.array(
        [
            sigmoid(reference_logits(weights, family, ids, types)[0])
            for ids, types in reference_pairs(path, family, query, documents)
        ]
    )


# --- kind --------------------------------------------------------------------------------------


def test_sequence_classification_checkpoints_are_rerankers(tiny, tmp_path):
    family, path, _ = tiny
    assert detect_kind(path) == "rerank"
    assert model_kind(path, "generate") == "generate"  # the config's kind wins
    plain = tmp_path / "plain"
    plain.mkdir()
    config = json.loads((path / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps({**config, "architectures": ["BertModel"]}))
    assert detect_kind(plain) == "embedding"  # an encoder without a classification head embeds


def test_kind_helpers_name_both_kinds():
    message = wrong_kind_message("ce", "rerank", "embedding")
    assert "kind 'rerank'" in message and "kind 'embedding'" in message and "/v1/rerank" in message
    message = wrong_kind_message("chat", "generate", "rerank")
    assert "generation model" in message and "kind 'rerank'" in message
    assert serves("vision", "generate") and serves("rerank", "rerank") and not serves("rerank", "embedding")
    assert capabilities("rerank") == ["rerank"] and capabilities(None) == []
    assert capabilities("vision", "{% if tools %}{{ think }}", thinking=True) == [
        "completion",
        "tools",
        "thinking",
        "vision",
    ]
    assert capabilities("generate", "{{ enable_thinking }}") == ["completion"]  # only the markup rule says thinking


# --- scores against the reference ----------------------------------------------------------------


def test_scores_equal_the_reference_alone_and_batched(tiny):
    family, path, weights = tiny
    model = load_rerank_model(str(path))
    assert model.activation == "sigmoid" and model.dtype == "float32"
    assert model.max_tokens == (64 if family == "bert" else 66 - 1)  # RoBERTa reserves pad + 1 positions
    pairs = model.tokenizer.prepare(ask())
    assert [(p.ids, p.types) for p in pairs] == reference_pairs(path, family, QUERY, DOCS)
    if family == "bert":
        assert pairs[0].types[-1] == 1  # the document is segment B
    expected = expected_scores(family, path, weights)
    batched = model.encode(pairs)  # right-padded to the longest pair
    alone = np.array([model.encode([pair])[0] for pair in pairs])
    np.testing.assert_allclose(batched, expected, atol=2e-6)
    np.testing.assert_allclose(alone, expected, atol=2e-6)
    assert len(set(np.argsort(-batched).tolist())) == len(DOCS) and np.ptp(batched) > 0.05  # documents differ


def test_scores_equal_mlx_vlm_reranker_classes(tiny):
    """The library's own forward: mlx-vlm's ``SequenceClassificationModel``
    (the ``vision`` extra) on the same checkpoint and token ids, alone and
    as one right-padded batch."""
    mlx_vlm_loader = pytest.importorskip("mlx_vlm.reranker_loader", reason="pip install -e '.[vision]'")
    import mlx.core as mx

    family, path, _ = tiny
    theirs = mlx_vlm_loader.load_sequence_classification_model(path)
    model = load_rerank_model(str(path))
    pairs = model.tokenizer.prepare(ask())

    def library(rows) -> np.ndarray:
        n = max(len(p) for p in rows)
        ids, types, mask = (np.zeros((len(rows), n), np.int32) for _ in range(3))
        for r, p in enumerate(rows):
            ids[r, : len(p)], types[r, : len(p)], mask[r, : len(p)] = p.ids, p.types, 1
        out = theirs(mx.array(ids), attention_mask=mx.array(mask), token_type_ids=mx.array(types))
        return np.array(mx.sigmoid(out.logits[:, 0].astype(mx.float32)))

    np.testing.assert_allclose(model.encode(pairs), library(pairs), atol=2e-6)
    np.testing.assert_allclose([model.encode([p])[0] for p in pairs], [library([p])[0] for p in pairs], atol=2e-6)


def test_two_labels_score_the_second_by_softmax_and_identity_gives_logits(tmp_path):
    weights = build_cross_encoder(tmp_path / "two", "bert", labels=2)
    model = load_rerank_model(str(tmp_path / "two"))
    assert model.activation == "softmax"
    pairs = reference_pairs(tmp_path / "two", "bert", QUERY, DOCS)
    logits = np.array([reference_logits(weights, "bert", ids, types) for ids, types in pairs])
    expected = np.exp(logits[:, 1]) / np.exp(logits).sum(axis=1)
    np.testing.assert_allclose(model.encode(model.tokenizer.prepare(ask())), expected, atol=2e-6)

    raw = {"sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}}
    weights = build_cross_encoder(tmp_path / "raw", "bert", extra_config=raw)
    model = load_rerank_model(str(tmp_path / "raw"))
    assert model.activation == "identity"
    logits = [
        reference_logits(weights, "bert", i, t)[0] for i, t in reference_pairs(tmp_path / "raw", "bert", QUERY, DOCS)
    ]
    np.testing.assert_allclose(model.encode(model.tokenizer.prepare(ask())), logits, atol=1e-5)

    build_cross_encoder(tmp_path / "three", "bert", labels=3)
    with pytest.raises(ModelLoadError, match="3 labels"):
        load_rerank_model(str(tmp_path / "three"))


def test_a_family_the_encoder_does_not_run_is_refused(tmp_path):
    build_cross_encoder(tmp_path / "x", "bert")
    config = json.loads((tmp_path / "x" / "config.json").read_text())
    (tmp_path / "x" / "config.json").write_text(json.dumps({**config, "model_type": "deberta-v2"}))
    with pytest.raises(ModelLoadError, match="deberta-v2"):
        load_rerank_model(str(tmp_path / "x"))


# --- limits ---------------------------------------------------------------------------------------


def test_over_long_pairs_are_refused_unless_truncated(tiny):
    family, path, weights = tiny
    model = load_rerank_model(str(path), context_length=24)
    assert model.max_tokens == 24
    long_doc = "the decoder predicts text tokens " * 6
    with pytest.raises(RerankInputError) as refused:
        model.tokenizer.prepare(ask(documents=["short", long_doc]))
    assert refused.value.kind == "context_length_exceeded" and "documents[1]" in refused.value.message
    pairs = model.tokenizer.prepare(ask(documents=["short", long_doc], truncate=True))
    assert len(pairs[1]) == 24 and len(pairs[0]) < 24
    # the truncated pair is the query with the document's first tokens, as a shorter document gives
    ((ids, types),) = reference_pairs(path, family, QUERY, [long_doc])
    framing = model.tokenizer.frame
    query_tokens = len(reference_pairs(path, family, QUERY, ["x"])[0][0]) - framing - 1
    keep = 24 - framing - query_tokens
    assert pairs[1].ids[-keep - 1 : -1] == ids[-(len(ids) - query_tokens - framing) - 1 : -1][:keep]
    expected = sigmoid(reference_logits(weights, family, pairs[1].ids, pairs[1].types)[0])
    np.testing.assert_allclose(model.encode(pairs)[1], expected, atol=2e-6)
    with pytest.raises(RerankInputError) as refused:
        model.tokenizer.prepare(ask(query="speech " * 30, truncate=True))
    assert refused.value.kind == "context_length_exceeded" and refused.value.field == "query"
    with pytest.raises(RerankInputError, match="documents\\[0\\] is empty"):
        model.tokenizer.prepare(ask(documents=["", "x"]))


# --- scheduler --------------------------------------------------------------------------------------


def test_scheduler_batches_pairs_of_several_requests_and_ends_each_once(tiny):
    """The test thread loads the model; then only the scheduler thread runs it."""
    from worker.messages import Abort, Stop
    from worker.rerank.scheduler import RerankJob, RerankScheduler

    family, path, weights = tiny
    model = load_rerank_model(str(path))
    a = model.tokenizer.prepare(ask())
    b = model.tokenizer.prepare(ask(query="bananas", documents=DOCS[:2]))
    emitted: list[StepOutputs] = []
    ended: set[str] = set()
    done = threading.Event()

    def emit(message: StepOutputs) -> None:
        emitted.append(message)
        ended.update(o.request_id for o in message.outputs)
        if ended >= {"a", "b", "gone"}:
            done.set()

    scheduler = RerankScheduler(model, emit, max_batch_size=4)
    for command in (RerankJob("a", a), RerankJob("b", b), RerankJob("gone", a), Abort(["gone"])):
        scheduler.submit(command)
    thread = threading.Thread(target=scheduler.run, daemon=True)
    thread.start()
    try:
        assert done.wait(120), f"ended so far: {sorted(ended)}"
    finally:  # stopped on every path, so no scheduler thread outlives the test
        scheduler.submit(Stop())
        thread.join(60)
    assert not thread.is_alive(), "the scheduler thread did not stop"
    outputs = {o.request_id: o for message in emitted for o in message.outputs}
    assert sum(len(m.outputs) for m in emitted) == 3
    assert outputs["gone"].finish_reason == "abort"
    np.testing.assert_allclose(outputs["a"].scores, expected_scores(family, path, weights), atol=2e-6)
    np.testing.assert_allclose(
        outputs["b"].scores, expected_scores(family, path, weights, "bananas", DOCS[:2]), atol=2e-6
    )
    assert outputs["a"].prompt_tokens == sum(len(p) for p in a) and outputs["a"].finish_reason == "stop"
    c = scheduler.counters
    assert c.rerank_pairs == 6 and c.max_batch_seen == 4 and c.steps == 2  # 6 pairs, 4 per step


# --- wire and gateway ---------------------------------------------------------------------------------


def test_wire_messages_round_trip():
    codec = worker_codec()  # the worker decodes what the gateway sends
    request = RerankRequest(request_id="x", query="q", documents=["a", "b"], truncate=True, timeout=3.0)
    assert codec.decode(codec.encode(request)) == request
    assert node_codec().decode(node_codec().encode(request)) == request  # and so does a node
    step = StepOutputs(step=1, outputs=[RequestOutput(request_id="x", finish_reason="stop", scores=[0.25, 0.1])])
    back = gateway_codec().decode(gateway_codec().encode(step))
    assert back == step and back.outputs[0].scores == [0.25, 0.1]


def test_body_accepts_strings_and_text_objects_and_refuses_the_rest():
    body = decode_rerank_request(
        json.dumps({"model": "m", "query": "q", "documents": ["a", {"text": "b"}], "top_n": 1}).encode()
    )
    assert body.texts() == ["a", "b"] and body.top_n == 1 and body.return_documents
    for bad, param in [
        ({"model": "m", "query": "", "documents": ["a"]}, "query"),
        ({"model": "m", "query": "q", "documents": []}, "documents"),
        ({"model": "m", "query": "q", "documents": ["a", ""]}, "documents"),
        ({"model": "m", "query": "q", "documents": [{"text": "a", "title": "t"}]}, None),
        ({"model": "m", "query": "q", "documents": ["a"], "top_n": 0}, None),
        ({"model": "m", "query": "q", "documents": ["a"], "max_chunks_per_doc": 2}, None),
        ({"model": "m", "documents": ["a"]}, None),
    ]:
        with pytest.raises(APIError) as refused:
            decode_rerank_request(json.dumps(bad).encode())
        assert refused.value.status == 400
        if param:
            assert refused.value.param == param


def test_answer_sorts_cuts_to_top_n_and_keeps_indexes():
    body = decode_rerank_request(
        json.dumps({"model": "m", "query": "q", "documents": ["a", "b", "c"], "top_n": 2}).encode()
    )
    answer = json.loads(rerank_body(body.texts(), [0.1, 0.9, 0.5], body, "m", "rerank-1", 12))
    assert [(r["index"], r["relevance_score"], r["document"]["text"]) for r in answer["results"]] == [
        (1, 0.9, "b"),
        (2, 0.5, "c"),
    ]
    assert answer["usage"] == {"prompt_tokens": 12, "total_tokens": 12} and answer["model"] == "m"
    plain = decode_rerank_request(
        json.dumps({"model": "m", "query": "q", "documents": ["a", "b"], "return_documents": False}).encode()
    )
    answer = json.loads(rerank_body(plain.texts(), [0.5, 0.5], plain, "m", "rerank-2", 4))
    assert answer["results"] == [{"index": 0, "relevance_score": 0.5}, {"index": 1, "relevance_score": 0.5}]
