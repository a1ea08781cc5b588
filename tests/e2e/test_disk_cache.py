"""The prefix cache's disk tier through real gateways and workers: a long
prompt repeated after an mlxd restart is served from disk with the cold
answer (every cache family), and truncated files or
another model's files are rejected, never loaded, never a crash."""

from __future__ import annotations

import shutil
import time

import httpx
import openai

from tests.conftest import API_KEY, start_server
from tests.tiny_model import build_tiny_model

PROMPT = "Here is a long agent context to keep across restarts. " + "tool output line " * 60


def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def ask(c, model, text):
    return c.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=8, temperature=0
    )


def wait_for_disk(server, model, entries=1, timeout=30.0):
    """Wait until ``model``'s worker reports ``entries`` files on disk."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.worker(model)["stats"]["disk_cache_entries"] >= entries:
            return
        time.sleep(0.3)
    raise AssertionError(f"{model}: nothing written to disk: {server.worker(model)['stats']}")


def test_restart_serves_from_disk_and_rejects_bad_files(tmp_path):
    models_dir = tmp_path / "models"
    sources = {
        "kv": build_tiny_model(models_dir / "kv", seed=0),
        "hybrid": build_tiny_model(models_dir / "hybrid", family="qwen3_next"),
        "corrupt": build_tiny_model(models_dir / "corrupt", seed=2),
        "other": build_tiny_model(models_dir / "other", seed=1),
    }
    disk = {name: tmp_path / "disk" / name for name in sources}
    models = [
        {"name": name, "source": str(src), "disk_cache_bytes": "64MiB", "disk_cache_dir": str(disk[name])}
        for name, src in sources.items()
    ]
    first_dir, second_dir = tmp_path / "gw1", tmp_path / "gw2"
    first_dir.mkdir()
    second_dir.mkdir()

    server = start_server(first_dir, models)
    try:
        c = client(server)
        cold = {name: ask(c, name, PROMPT + name) for name in ("kv", "hybrid", "corrupt")}
        for name, r in cold.items():
            assert r.usage.prompt_tokens > 200
            assert r.usage.prompt_tokens_details.cached_tokens < 30
            wait_for_disk(server, name)
    finally:
        server.stop()

    # damage the stored files: truncate one model's, and give "other" the
    # "kv" model's entry for the very prompt it will be asked (same shapes:
    # loading it would silently give a wrong answer)
    for path in disk["corrupt"].rglob("*.safetensors"):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    (kv_tier,) = [p for p in disk["kv"].iterdir() if p.is_dir()]
    other_tier = disk["other"] / kv_tier.name
    shutil.copytree(kv_tier, other_tier)
    # the wrong-model files must sit where "other" looks for its own
    server = start_server(second_dir, models)
    try:
        (own_tier,) = [p for p in disk["other"].iterdir() if p.is_dir() and p != other_tier]
        server.stop()
        for f in other_tier.iterdir():
            shutil.copy(f, own_tier / f.name)
        server = start_server(second_dir, models)
        c = client(server)
        for name in ("kv", "hybrid"):
            warm = ask(c, name, PROMPT + name)
            details = warm.usage.prompt_tokens_details
            assert details.cached_tokens == warm.usage.prompt_tokens - 1, name
            assert details.model_extra["disk_cached_tokens"] == details.cached_tokens, name
            assert warm.choices[0].message.content == cold[name].choices[0].message.content, name

        broken = ask(c, "corrupt", PROMPT + "corrupt")
        assert broken.usage.prompt_tokens_details.cached_tokens < 30
        assert broken.choices[0].message.content == cold["corrupt"].choices[0].message.content

        foreign = ask(c, "other", PROMPT + "kv")
        assert foreign.usage.prompt_tokens_details.cached_tokens < 30
        assert "disk_cached_tokens" not in (foreign.usage.prompt_tokens_details.model_extra or {})

        # each worker's counters reach /metrics with its own heartbeat: wait
        # for every one (one model's report says nothing of another's)
        expected = [
            'prefix_cache_disk_hits_total{model="kv"} 1.0',
            'prefix_cache_disk_hits_total{model="hybrid"} 1.0',
            'prefix_cache_disk_rejected_total{model="other"} 1.0',
            'prefix_cache_disk_hits_total{model="corrupt"} 0.0',
        ]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=10).text
            if all(line in text for line in expected):
                break
            time.sleep(0.3)
        assert [line for line in expected if line not in text] == []
        assert server.proc.poll() is None
        for name in sources:
            assert server.worker(name)["state"] == "ready"
    finally:
        server.stop()


def test_idle_unload_keeps_the_disk_entries(tmp_path):
    source = build_tiny_model(tmp_path / "model", family="gemma3_text")
    model = {
        "name": "lazy",
        "source": str(source),
        "preload": False,
        "ttl": "1500ms",
        "disk_cache_bytes": "16MiB",
        "disk_cache_dir": str(tmp_path / "disk"),
    }
    server = start_server(tmp_path, [model])
    try:
        c = client(server)
        cold = ask(c, "lazy", PROMPT)
        first_pid = server.worker("lazy")["pid"]
        deadline = time.monotonic() + 30
        while server.worker("lazy")["state"] != "unloaded" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert server.worker("lazy")["state"] == "unloaded"
        assert list((tmp_path / "disk").rglob("*.json")), "nothing was written before the unload"
        warm = ask(c, "lazy", PROMPT)
        assert server.worker("lazy")["pid"] != first_pid
        details = warm.usage.prompt_tokens_details
        assert details.cached_tokens == warm.usage.prompt_tokens - 1
        assert details.model_extra["disk_cached_tokens"] == details.cached_tokens
        assert warm.choices[0].message.content == cold.choices[0].message.content
    finally:
        server.stop()


def test_every_family_resumes_from_disk_after_restart(tmp_path):
    """For each cache family mlxd serves (plain KV, sliding window, linear
    attention and state-space hybrids, sinks, MLA): a long prompt asked
    before an mlxd restart is served from disk after it, with the cold
    answer."""
    from tests.tiny_model import FAMILIES

    models = [
        {
            "name": family,
            "source": str(build_tiny_model(tmp_path / "models" / family, family=family)),
            "disk_cache_bytes": "64MiB",
            "disk_cache_dir": str(tmp_path / "disk" / family),
        }
        for family in FAMILIES
    ]
    cold = {}
    for run in ("cold", "resumed"):
        run_dir = tmp_path / run
        run_dir.mkdir()
        server = start_server(run_dir, models)
        try:
            c = client(server)
            for family in FAMILIES:
                r = ask(c, family, PROMPT + family)
                details = r.usage.prompt_tokens_details
                if run == "cold":
                    assert details.cached_tokens < 30, family
                    cold[family] = r.choices[0].message.content
                    wait_for_disk(server, family)
                else:
                    assert details.cached_tokens > r.usage.prompt_tokens // 2, (family, r.usage)
                    assert details.model_extra["disk_cached_tokens"] == details.cached_tokens, family
                    assert r.choices[0].message.content == cold[family], family
        finally:
            server.stop()
