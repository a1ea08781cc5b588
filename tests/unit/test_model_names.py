"""Issue 34's naming rule without workers: an untagged name means
``:latest`` (:mod:`shared.model_names`), for the pool's resolution (every
protocol's routes), the names the Ollama listings give, and the hub
catalog's short names."""

from __future__ import annotations

import pytest

from gateway.core.errors import APIError
from gateway.core.grants import KeyGrant, current_grant
from gateway.hub.catalog import CatalogEntry, resolve
from gateway.hub.names import InvalidName
from gateway.workers.model_files import read_models_files
from gateway.workers.pool import WorkerPool
from shared.config import Config, ModelConfig
from shared.model_names import latest_twin, listed_name, tag_of


def _pool(tmp_path, *names: str) -> WorkerPool:
    """A pool of models named ``names`` with its handles made (no worker
    started)."""
    pool = WorkerPool(Config(models=[ModelConfig(name=n, source=f"org/m{i}") for i, n in enumerate(names)]))
    pool._socket_dir = str(tmp_path)
    pool._apply_models(pool.config.models, read_models_files(pool.config.models))
    return pool


def test_tags_and_twins():
    assert [tag_of(n) for n in ("tiny", "qwen3:4b", "x:latest", "host:8080/m", "tiny:")] == ["", "4b", "latest", "", ""]
    assert listed_name("tiny") == "tiny:latest" and listed_name("qwen3:4b") == "qwen3:4b"
    assert listed_name("org/a") == "org/a:latest" and listed_name("host:8080/m") == "host:8080/m:latest"
    assert latest_twin("tiny") == "tiny:latest" and latest_twin("tiny:latest") == "tiny"
    assert (
        latest_twin("qwen3:4b") is latest_twin("q:4b:latest") is None
        and latest_twin("host:8080/m") == "host:8080/m:latest"
    )


def test_untagged_names_mean_latest_as_in_ollama(tmp_path):
    """``X:latest`` finds ``X`` and ``X`` finds ``X:latest``; another tag does
    not, and its 404 names the model as asked."""
    pool = _pool(tmp_path, "tiny", "qwen3:latest", "qwen3:4b")
    assert pool.resolve("tiny") == pool.resolve("tiny:latest") == "tiny"
    assert pool.resolve("qwen3") == pool.resolve("qwen3:latest") == "qwen3:latest"
    assert pool.resolve("qwen3:4b") == "qwen3:4b"
    for name in ("tiny:4b", "qwen3:8b", "tiny:", "qwen3:4b:latest"):
        with pytest.raises(APIError) as refused:
            pool.resolve(name)
        assert refused.value.status == 404 and name in refused.value.message


def test_every_listed_name_resolves_back(tmp_path):
    names = ("tiny", "qwen3:4b", "org/a", "host:8080/m", "x:latest")
    pool = _pool(tmp_path, *names)
    assert [pool.resolve(listed_name(n)) for n in names] == list(names)


def test_catalog_names_follow_the_same_rule():
    """A pull names a catalog entry as a request names a model; the target
    keeps the catalog's own spelling (the name it is served under)."""
    catalog = {
        "plain": CatalogEntry(repo="org/plain"),
        "qwen3:4b": CatalogEntry(repo="org/qwen3-4b"),
        "gemma:latest": CatalogEntry(repo="org/gemma"),
    }
    assert resolve("plain:latest", catalog).name == resolve("plain", catalog).name == "plain"
    assert resolve("gemma", catalog).name == "gemma:latest"
    assert resolve("qwen3:4b", catalog).ref.repo_id == "org/qwen3-4b"
    for text in ("qwen3", "qwen3:latest", "plain:4b"):
        with pytest.raises(InvalidName, match="not in the model catalog"):
            resolve(text, catalog)


def test_a_keys_model_list_follows_the_same_rule(tmp_path):
    """A key limited to ``tiny:latest`` may use ``tiny`` by either name;
    one limited to ``qwen3`` may use ``qwen3:latest``; no other model
    exists for them."""
    pool = _pool(tmp_path, "tiny", "qwen3:latest", "other")
    for allowed, names, refused in (
        ("tiny:latest", ("tiny", "tiny:latest"), "qwen3"),
        ("qwen3", ("qwen3", "qwen3:latest"), "tiny"),
    ):
        token = current_grant.set(KeyGrant(name="k", models=frozenset({allowed})))
        try:
            assert {pool.resolve(n) for n in names} == {pool.resolve(names[0])}
            with pytest.raises(APIError) as caught:
                pool.resolve(refused)
            assert caught.value.status == 404
            assert [info.name for info in pool.models()] == [pool.resolve(names[0])]
        finally:
            current_grant.reset(token)


def test_a_pulled_model_is_not_served_twice_under_one_name(monkeypatch, tmp_path):
    """A pulled ``plain`` is not added beside a config entry named
    ``plain:latest`` (one name under the rule); a pulled ``other`` is."""
    from pathlib import Path

    from gateway.hub import served
    from gateway.hub.store import LocalModel
    from shared.config import ServerConfig

    catalog = {"plain": CatalogEntry(repo="org/plain"), "other": CatalogEntry(repo="org/other")}

    def local(repo: str, name: str) -> LocalModel:
        return LocalModel(repo, "c" * 40, ("main",), Path("/x"), 1, "generate", "complete", (name,), ())

    monkeypatch.setattr(served, "list_local", lambda *_: [local("org/plain", "plain"), local("org/other", "other")])
    config = Config(
        server=ServerConfig(allow_model_management=True),
        models=[ModelConfig(name="plain:latest", source=str(tmp_path))],
    )
    assert [m.name for m in served.with_pulled_models(config, catalog).models] == ["plain:latest", "other"]
