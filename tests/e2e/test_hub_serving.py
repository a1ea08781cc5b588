"""Serving hub models by name through real gateways and workers, with the
real huggingface-hub client against the loopback hub stand-in and the
official ``ollama`` client:

- ``mlxd pull NAME`` then ``mlxd serve --model NAME`` (no config) serves it;
  ``mlxd ps`` shows it; ``serve --model --pull`` fetches it first;
- ``server.auto_pull``: the model reports ``downloading`` with progress in
  ``/health``, ``/api/ps`` and the log, requests wait (up to
  ``worker_start_timeout``) then get 503 with ``Retry-After`` meanwhile,
  then it serves; without ``auto_pull`` a missing
  model fails with a message saying how to pull it;
- ``server.allow_model_management``: ``client.pull(..., stream=True)``
  streams Ollama's progress objects, the model appears in ``/api/tags``
  and answers, ``client.delete`` removes it, the config's own models
  cannot be deleted, and keys are required when set; an untagged catalog
  name is pulled, listed, used and deleted as ``NAME:latest`` (issue 34),
  another tag of it is refused.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import ollama
import openai
import pytest

from tests.conftest import API_KEY, ROOT, Server, free_port, start_server
from tests.hub_standin import HubStandin
from tests.hub_support import HubWorld


@pytest.fixture(scope="module")
def hub():
    """One hub stand-in for the module."""
    standin = HubStandin()
    yield standin
    standin.close()


@pytest.fixture
def world(tmp_path: Path, hub: HubStandin) -> HubWorld:
    """This test's cache, catalog (also as the user's default catalog file),
    config and environment."""
    return HubWorld(tmp_path, hub)


def user_env(world: HubWorld) -> dict[str, str]:
    """The world's environment with ``HOME`` in it, its catalog as the
    user's own catalog file (``serve --model`` reads no config)."""
    home = world.root / "home"
    catalog = home / ".config" / "mlxd" / "catalog.toml"
    catalog.parent.mkdir(parents=True, exist_ok=True)
    catalog.write_text("".join(f'[models."{n}"]\nrepo = "{r}"\n' for n, r in world.catalog.items()))
    return world.env(HOME=str(home))


def serve_models(world: HubWorld, *args: str) -> Server:
    """``mlxd serve --port P ARGS`` in the world's environment, listening."""
    port = free_port()
    log_path = world.root / "serve.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--port", str(port), *args],
        cwd=ROOT,
        env=user_env(world),
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", proc, None, log_path)
    server.wait_listening(timeout=120)
    return server


def chat(server: Server, model: str) -> openai.types.chat.ChatCompletion:
    """A short greedy chat turn."""
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.api_key or "unused", max_retries=0, timeout=120)
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Hi"}], max_tokens=4, temperature=0
    )


def test_pull_then_serve_by_name_without_a_config(world, hub, tiny_model_dir):
    world.serve_tiny("test-org/tiny-serve", tiny_model_dir, "tiny:serve")
    pulled = subprocess.run(
        [sys.executable, "-m", "gateway", "pull", "tiny:serve"],
        cwd=ROOT,
        env=user_env(world),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert pulled.returncode == 0, pulled.stderr
    assert "mlxd serve --model tiny:serve" in pulled.stdout
    server = serve_models(world, "--model", "tiny:serve")
    try:
        server.wait_ready("tiny:serve")
        answer = chat(server, "tiny:serve")
        assert answer.model == "tiny:serve" and answer.usage.completion_tokens >= 1
        tags = httpx.get(f"{server.url}/api/tags", timeout=10).json()["models"]
        assert [m["name"] for m in tags] == ["tiny:serve"]
        ps = subprocess.run(
            [sys.executable, "-m", "gateway", "ps", "--url", server.url],
            cwd=ROOT,
            env=user_env(world),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ps.returncode == 0, ps.stderr
        lines = [re.sub(r"[│┃|]", " ", line).split() for line in ps.stdout.splitlines()]
        header = next(cells for cells in lines if "MODEL" in cells)
        assert ["MODEL", "KIND", "STATE", "CTX"] == header[:4] and header[-1] == "UNTIL"
        row = next(cells for cells in lines if cells[:1] == ["tiny:serve"])
        assert row[2:4] == ["ready", "2048"] and row[-1] == "never"
    finally:
        server.stop()


def test_serve_model_with_pull_fetches_it_first(world, hub, tiny_model_dir):
    world.serve_tiny("test-org/tiny-serve-pull", tiny_model_dir)
    server = serve_models(world, "--model", "test-org/tiny-serve-pull", "--pull")
    try:
        server.wait_ready("test-org/tiny-serve-pull")
        assert chat(server, "test-org/tiny-serve-pull").usage.completion_tokens >= 1
        assert "pull test-org/tiny-serve-pull: complete" in server.log_path.read_text()
    finally:
        server.stop()


def test_auto_pull_reports_downloading_then_serves(world, hub, tiny_model_dir):
    repo = "test-org/tiny-auto"
    world.serve_tiny(repo, tiny_model_dir, "tiny:auto")
    hub.hold(repo, "model.safetensors", after=11_000_000)
    hub.held.clear()
    hub.release.clear()
    world.write_config()  # writes the catalog file
    catalog = str(world.root / "catalog.toml")
    try:
        server = start_server(
            world.root,
            [{"name": "auto", "source": "tiny:auto"}],
            env=world.env(HF_HUB_DOWNLOAD_TIMEOUT="120"),
            wait=False,
            auto_pull=True,
            catalog_file=catalog,
            worker_start_timeout=30.0,
        )
        try:
            assert hub.held.wait(120)
            deadline = time.monotonic() + 60
            while (status := server.worker("auto"))["download"] is None or status["download"]["completed"] == 0:
                assert time.monotonic() < deadline, status
                time.sleep(0.2)
            assert status["state"] == "downloading"
            assert status["download"]["phase"] == "downloading" and status["download"]["total"] > 16_000_000
            ps = httpx.get(f"{server.url}/api/ps", headers=server.headers, timeout=10).json()["models"]
            assert [(m["name"], m["download"]["phase"]) for m in ps] == [("auto:latest", "downloading")]
            waited = httpx.post(
                f"{server.url}/v1/chat/completions",
                headers=server.headers,
                json={"model": "auto", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
                timeout=90,
            )
            assert waited.status_code == 503 and waited.headers["retry-after"] == "5"
            assert "is still downloading" in waited.json()["error"]["message"]
        finally:
            hub.file(repo, "model.safetensors").hold_after = None
            hub.release.set()
        server.wait_ready("auto")
        assert chat(server, "auto").usage.completion_tokens >= 1
        log = server.log_path.read_text()
        assert "pull test-org/tiny-auto: 0% (0 B of 16.4 MB)" in log
        assert "pull test-org/tiny-auto by server (auto_pull for model auto): complete" in log
        entry = next(e for e in world.audit_lines() if e["action"] == "pull" and e["outcome"] == "complete")
        assert entry["who"] == "server (auto_pull for model auto)"
    finally:
        server.stop()


def test_a_missing_model_without_auto_pull_says_how_to_get_it(world, hub, tiny_model_dir):
    world.serve_tiny("test-org/tiny-missing", tiny_model_dir)
    server = start_server(
        world.root, [{"name": "missing", "source": "test-org/tiny-missing"}], env=world.env(), wait=False
    )
    try:
        deadline = time.monotonic() + 120
        while server.worker("missing")["state"] != "failed":
            assert time.monotonic() < deadline, server.worker("missing")
            time.sleep(0.2)
        assert "`mlxd pull test-org/tiny-missing`" in server.worker("missing")["last_error"]
        assert world.hub.seen(contains="tiny-missing") == []
    finally:
        server.stop()


def test_ollama_pull_streams_progress_then_serves_and_delete_removes(world, hub, tiny_model_dir):
    world.serve_tiny("test-org/tiny-ollama", tiny_model_dir, "tiny:ollama")
    world.serve_tiny("test-org/tiny-plain", tiny_model_dir, "tinyplain")  # an untagged catalog name
    world.write_config()
    server = start_server(
        world.root,
        [{"name": "local", "source": str(tiny_model_dir)}],
        env=world.env(),
        allow_model_management=True,
        catalog_file=str(world.root / "catalog.toml"),
    )
    try:
        anonymous = ollama.Client(host=server.url, timeout=120)
        with pytest.raises(ollama.ResponseError) as refused:
            list(anonymous.pull("tiny:ollama", stream=True))
        assert refused.value.status_code == 401
        client = ollama.Client(host=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)
        progress = list(client.pull("tiny:ollama", stream=True))
        statuses = [p.status for p in progress]
        assert statuses[0] == "pulling manifest" and statuses[-3:] == [
            "verifying sha256 digest",
            "writing manifest",
            "success",
        ]
        weights = [p for p in progress if p.status == "pulling model.safetensors"]
        size = (tiny_model_dir / "model.safetensors").stat().st_size
        assert weights and all(p.total == size for p in weights) and weights[-1].completed == size
        assert weights[-1].digest == "sha256:" + hub.file("test-org/tiny-ollama", "model.safetensors").sha256
        assert [p.completed for p in weights] == sorted(p.completed for p in weights)
        assert "tiny:ollama" in {m.model for m in client.list().models}
        answer = client.chat(
            model="tiny:ollama", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 2}
        )
        assert answer.done
        (entry,) = [e for e in world.audit_lines() if e["action"] == "pull"]
        assert entry["who"].startswith("api key sha256:") and entry["who"].endswith("from 127.0.0.1")
        assert API_KEY not in json.dumps(world.audit_lines())

        with pytest.raises(ollama.ResponseError) as kept:
            client.delete(str(tiny_model_dir))
        assert kept.value.status_code in (400, 404)
        assert client.delete("tiny:ollama").status == "success"
        assert "tiny:ollama" not in {m.model for m in client.list().models}
        assert not world.folder("test-org/tiny-ollama").exists()
        with pytest.raises(ollama.ResponseError) as gone:
            client.chat(model="tiny:ollama", messages=[{"role": "user", "content": "Hi"}])
        assert gone.value.status_code == 404
        plain = "tinyplain:latest"  # as Ollama spells it: the untagged catalog name's :latest
        assert client.pull(plain).status == "success"
        assert plain in {m.model for m in client.list().models}  # served as tinyplain, listed with its tag
        assert client.chat(model=plain, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 1}).done
        assert client.delete(plain).status == "success"
        assert plain not in {m.model for m in client.list().models}
        with pytest.raises(ollama.ResponseError) as other_tag:
            client.pull("tinyplain:4b")
        assert other_tag.value.status_code == 400 and "tinyplain:4b" in other_tag.value.error
        with pytest.raises(ollama.ResponseError) as failed:
            list(client.pull("test-org/no-such-repo", stream=True))
        assert "no repo test-org/no-such-repo" in str(failed.value)
    finally:
        server.stop()


def test_config_models_cannot_be_deleted_and_management_is_off_by_default(world, hub, tiny_model_dir):
    world.serve_tiny("test-org/tiny-kept", tiny_model_dir, "tiny:kept")
    world.write_config()
    assert world.mlxd("pull", "tiny:kept").returncode == 0
    server = start_server(
        world.root,
        [{"name": "kept", "source": "tiny:kept"}],
        env=world.env(),
        catalog_file=str(world.root / "catalog.toml"),
    )
    try:
        client = ollama.Client(host=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
        with pytest.raises(ollama.ResponseError) as off:
            list(client.pull("tiny:kept", stream=True))
        assert off.value.status_code == 403 and "allow_model_management" in str(off.value)
        assert chat(Server(server.url, server.proc, API_KEY, server.log_path), "kept").usage.completion_tokens >= 1
    finally:
        server.stop()
    server = start_server(
        world.root,
        [{"name": "kept", "source": "tiny:kept"}],
        env=world.env(),
        allow_model_management=True,
        catalog_file=str(world.root / "catalog.toml"),
    )
    try:
        client = ollama.Client(host=server.url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60)
        with pytest.raises(ollama.ResponseError) as used:
            client.delete("tiny:kept")
        assert used.value.status_code == 400 and "used by config entries kept" in str(used.value)
        assert world.folder("test-org/tiny-kept").is_dir()
    finally:
        server.stop()
