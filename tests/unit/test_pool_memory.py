"""The memory budget's arithmetic (gateway/workers/memory_budget.py, gateway/workers/model_paths.py):
what a model is estimated to use, what a percentage budget is a share of,
the MLX limits a worker gets, and Hugging Face snapshots sized from the
local cache. No processes: handles are never started."""

from __future__ import annotations

import psutil
import pytest

from gateway.workers import memory_budget, model_paths
from gateway.workers.model_paths import source_bytes
from gateway.workers.pool import WorkerPool
from shared.config import Config, ModelConfig, ServerConfig

GIB = 1 << 30
MIB = 1 << 20


def make_pool(tmp_path, budget, *models: ModelConfig) -> WorkerPool:
    p = WorkerPool(Config(server=ServerConfig(memory_budget=budget), models=list(models)))
    p._socket_dir = str(tmp_path)
    p._apply_models(p.config.models)
    return p


def weights(tmp_path, name: str, size: int):
    directory = tmp_path / name
    directory.mkdir()
    (directory / "model.safetensors").write_bytes(b"\0" * size)
    (directory / "config.json").write_text("{}")  # not a weight file
    return directory


def test_estimate_is_the_largest_of_files_peak_and_configured(tmp_path):
    source = weights(tmp_path, "m", 1 * MIB)
    p = make_pool(tmp_path, 0, ModelConfig(name="m", source=str(source)))
    handle = p.handles["m"]
    by_files = int(1 * MIB * memory_budget.EXPANSION)
    assert p.memory.estimate(handle) == by_files
    handle.status.memory_bytes = 100 * GIB  # RSS at ready no longer counts
    assert p.memory.estimate(handle) == by_files
    handle.status.observe_peak(by_files + 5)
    handle.status.observe_peak(7)  # a later, smaller report does not lower it
    assert p.memory.estimate(handle) == by_files + 5
    handle.model = ModelConfig(name="m", source=str(source), memory_estimate=10 * GIB)
    assert p.memory.estimate(handle) == 10 * GIB


def test_estimate_without_anything_known(tmp_path):
    p = make_pool(tmp_path, 0, ModelConfig(name="m", source=str(tmp_path / "missing")))
    assert p.memory.estimate(p.handles["m"]) == memory_budget.UNKNOWN_MODEL_BYTES


def test_percentage_budget_is_of_the_working_set_once_reported(tmp_path):
    p = make_pool(tmp_path, "75%", ModelConfig(name="a"), ModelConfig(name="b"))
    ram = psutil.virtual_memory().total
    assert p.memory.budget() == int(ram * 0.75)  # nothing reported yet (and always off Metal)
    p.handles["b"].status.working_set_bytes = 16 * GIB
    assert p.memory.budget() == 12 * GIB
    p.config.server.memory_budget = "12GiB"  # absolute sizes ignore the working set
    assert p.memory.budget() == 12 * GIB
    p.config.server.memory_budget = 0
    assert p.memory.budget() == 0


def test_mlx_limits_from_the_budget(tmp_path):
    a = weights(tmp_path, "a", 100 * MIB)
    b = weights(tmp_path, "b", 10 * MIB)
    p = make_pool(tmp_path, 0, ModelConfig(name="a", source=str(a)), ModelConfig(name="b", source=str(b)))
    assert p.memory.mlx_limits(p.handles["a"]) == (0, None)  # no budget: MLX's defaults
    p.config.server.memory_budget = 2 * GIB
    assert p.memory.mlx_limits(p.handles["a"]) == (2 * GIB, int(2 * GIB * memory_budget.CACHE_SHARE))
    p.handles["b"].status.peak_memory_bytes = GIB  # b is resident and peaked at 1 GiB
    p.handles["b"]._task = _Running()
    assert p.memory.mlx_limits(p.handles["a"]) == (GIB, int(GIB * memory_budget.CACHE_SHARE))
    p.handles["b"].status.peak_memory_bytes = 2 * GIB  # a still gets at least its own estimate
    assert p.memory.mlx_limits(p.handles["a"])[0] == p.memory.estimate(p.handles["a"])


class _Running:
    """Stands in for a live supervise task (``resident`` is True)."""

    def done(self) -> bool:
        return False


def test_hugging_face_snapshot_sized_from_the_local_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    repo = cache / "models--org--model"
    revision = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / revision
    blobs = repo / "blobs"
    snapshot.mkdir(parents=True)
    blobs.mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    for name, size in (("model-00001-of-00002.safetensors", 3000), ("model-00002-of-00002.safetensors", 500)):
        blob = blobs / name.replace(".", "_")
        blob.write_bytes(b"\0" * size)
        (snapshot / name).symlink_to(blob)  # the cache's layout: snapshot files link to blobs
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    assert source_bytes("org/model") == 3500
    assert model_paths.cached_snapshot("org/other") is None
    assert source_bytes("org/other") is None
    assert source_bytes("not a repo") is None


@pytest.mark.parametrize("source", ["./x/y", "~/x", "/abs/path"])
def test_paths_are_not_repo_ids(source):
    assert model_paths.cached_snapshot(source) is None


def test_a_node_has_its_own_budget_and_working_set():
    from types import SimpleNamespace

    from shared.config import NodeEntry

    key = "k" * 40
    nodes = [
        NodeEntry(name="big", address="tcp://10.0.0.2:7000", public_key=key, memory_budget="48GiB"),
        NodeEntry(name="plain", address="tcp://10.0.0.3:7000", public_key=key),
    ]
    handles = {
        name: SimpleNamespace(model=ModelConfig(name=name, node=node), status=SimpleNamespace(working_set_bytes=0))
        for name, node in (("here", ""), ("there", "big"), ("p", "plain"))
    }
    budget = memory_budget.MemoryBudget(
        lambda: ServerConfig(memory_budget="50%"), lambda: list(handles.values()), lambda: nodes
    )
    ram = psutil.virtual_memory().total
    assert budget.budget("big") == 48 * GIB  # the node's own size
    assert budget.budget() == ram // 2
    # a working set reported on one machine is not another machine's
    handles["p"].status.working_set_bytes = 64 * GIB
    assert budget.budget("plain") == 32 * GIB
    assert budget.budget() == ram // 2
    assert budget.budget("big") == 48 * GIB
