"""``mlxd pull``, ``ls`` and ``rm`` through the real huggingface-hub client
against the loopback hub stand-in (:mod:`tests.hub_standin`).

Each test runs the ``mlxd`` command line in a child process whose
``HF_ENDPOINT`` points at the stand-in and whose Hugging Face cache is the
test's own (:class:`tests.hub_support.HubWorld`); whether a snapshot may be
served is asked of the worker's own resolution
(:func:`worker.loading.loader.resolve_source`) in a child process with the same
environment.
"""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.hub_standin import HubStandin
from tests.hub_support import EXTRA_FILES, ROOT, HubWorld

_RESOLVE = """
import sys
from worker.loading.loader import ModelLoadError, resolve_source
try:
    print(resolve_source(sys.argv[1]))
except ModelLoadError as exc:
    print(f"REFUSED {exc}")
    sys.exit(3)
"""


@pytest.fixture(scope="module")
def hub():
    """One hub stand-in for the module (each test serves its own repos)."""
    standin = HubStandin()
    yield standin
    standin.close()


@pytest.fixture
def world(tmp_path: Path, hub: HubStandin) -> HubWorld:
    """This test's cache, catalog, config and environment."""
    return HubWorld(tmp_path, hub)


def resolve_in_worker(world: HubWorld, source: str) -> subprocess.CompletedProcess:
    """What the worker's source resolution says about ``source`` in this world."""
    return subprocess.run(
        [sys.executable, "-c", _RESOLVE, source],
        cwd=ROOT,
        env=world.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def requests_for(hub: HubStandin, repo_id: str, method: str | None = None) -> list:
    """The stand-in's file requests (resolve and CDN) for ``repo_id``."""
    return [r for r in hub.seen(method) if f"/{repo_id}/" in r.path and "/api/" not in r.path]


def tiny_files(tiny_model_dir: Path) -> set[str]:
    """The tiny model's files (all of which MLX needs)."""
    return {p.name for p in tiny_model_dir.iterdir() if p.is_file()}


def test_pull_by_catalog_name_fetches_only_what_mlx_needs(world, hub, tiny_model_dir):
    commit = world.serve_tiny("test-org/tiny-a", tiny_model_dir, "tiny:a")
    world.write_config()
    result = world.mlxd("pull", "tiny:a")
    assert result.returncode == 0, result.stderr
    snapshot = world.snapshot("test-org/tiny-a", commit)
    assert {p.name for p in snapshot.iterdir()} == tiny_files(tiny_model_dir)
    fetched = {r.path.rsplit("/", 1)[-1] for r in requests_for(hub, "test-org/tiny-a") if r.listener == "hub"}
    assert fetched and not fetched & set(EXTRA_FILES), fetched
    # plain progress lines off a terminal, then where it went and how to serve it
    assert "pull tiny:a: reading the file list" in result.stderr
    assert "pull tiny:a: complete" in result.stderr
    assert "%" in result.stderr and "/s" in result.stderr
    assert f"pulled tiny:a (test-org/tiny-a@{commit[:12]}" in result.stdout
    assert "mlxd serve --model tiny:a" in result.stdout
    listing = world.mlxd("ls")
    row = next(line for line in listing.stdout.splitlines() if "test-org/tiny-a" in line)
    assert "tiny:a" in row and "complete" in row and "generate" in row and "(main)" in row
    (entry,) = [e for e in world.audit_lines() if e["action"] == "pull"]
    assert entry["model"] == "tiny:a" and entry["outcome"] == "complete" and entry["commit"] == commit
    assert entry["who"].startswith("user ")
    served = resolve_in_worker(world, "test-org/tiny-a")
    assert served.returncode == 0 and served.stdout.strip() == str(snapshot), served.stdout + served.stderr
    before = len(requests_for(hub, "test-org/tiny-a"))
    again = world.mlxd("pull", "tiny:a")
    assert again.returncode == 0 and "16.4 MB, already complete)" in again.stdout
    assert len(requests_for(hub, "test-org/tiny-a")) == before  # nothing fetched again


def test_pull_draws_a_progress_bar_on_a_terminal(world, hub, tiny_model_dir):
    world.serve_tiny("test-org/tiny-tty", tiny_model_dir)
    world.write_config()
    main, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "pull", "test-org/tiny-tty", "--config", str(world.config)],
        cwd=ROOT,
        env=world.env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=secondary,
    )
    os.close(secondary)
    seen = b""
    try:
        deadline = time.monotonic() + 180
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(
                    f"the pull did not finish within 180 s; its terminal so far:\n{seen.decode(errors='replace')}"
                )
            ready, _, _ = select.select([main], [], [], min(left, 1.0))
            if not ready:  # a silent terminal: done once the pull has exited, else look again
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main, 4096)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=120) == 0, seen.decode(errors="replace")
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.stdout.close()
    text = seen.decode(errors="replace")
    # the bar is one line redrawn in place: frames follow a carriage return, not a new line
    frames = [frame for frame in text.split("\r") if frame.startswith("test-org/tiny-tty [")]
    assert len(frames) >= 2, text
    assert "  0%" in frames[0] and "-" * 28 in frames[0], frames
    assert "#" * 28 in frames[-1] and "100%" in frames[-1] and "/s ETA" in frames[-1] and "MB/" in frames[-1]


def test_a_dropped_connection_resumes_with_a_range_request(world, hub, tiny_model_dir):
    commit = world.serve_tiny("test-org/tiny-cut", tiny_model_dir)
    hub.cut("test-org/tiny-cut", "model.safetensors", after=11_000_000)
    world.write_config()
    result = world.mlxd("pull", "test-org/tiny-cut")
    assert result.returncode == 0, result.stderr
    downloads = [r for r in requests_for(hub, "test-org/tiny-cut", "GET") if r.listener == "cdn"]
    assert [r.range for r in downloads] == [None, "bytes=10485760-"]
    assert all(r.authorization is None for r in downloads)
    data = (world.snapshot("test-org/tiny-cut", commit) / "model.safetensors").read_bytes()
    assert data == (tiny_model_dir / "model.safetensors").read_bytes()


def test_an_interrupted_pull_is_never_served_and_a_second_pull_completes_it(world, hub, tiny_model_dir):
    repo = "test-org/tiny-kill"
    commit = world.serve_tiny(repo, tiny_model_dir)
    hub.hold(repo, "model.safetensors", after=11_000_000)
    hub.held.clear()
    hub.release.clear()
    world.write_config()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "pull", repo, "--config", str(world.config)],
        cwd=ROOT,
        env=world.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert hub.held.wait(120), "the download never reached the held file"
        small = [hub.file(repo, n) for n in tiny_files(tiny_model_dir) if n != "model.safetensors"]
        blobs = world.folder(repo) / "blobs"
        deadline = time.monotonic() + 60
        while not all((blobs / f.etag).exists() for f in small):
            assert time.monotonic() < deadline, "the small files never finished"
            time.sleep(0.1)
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:  # an assertion above failed: the pull must not outlive the test
            proc.kill()
            proc.wait(timeout=30)
        hub.file(repo, "model.safetensors").hold_after = None
        hub.release.set()
    assert list(blobs.glob("*.incomplete")), "the killed run should have left a partial file"
    listing = world.mlxd("ls")
    assert "downloading" in next(line for line in listing.stdout.splitlines() if repo in line)
    refused = resolve_in_worker(world, repo)
    assert refused.returncode == 3 and "still downloading or its pull was interrupted" in refused.stdout
    small_gets = len([r for r in requests_for(hub, repo, "GET") if r.listener == "hub"])
    result = world.mlxd("pull", repo)
    assert result.returncode == 0, result.stderr
    after = [r for r in requests_for(hub, repo, "GET") if r.listener == "hub"]
    assert len(after) == small_gets, "finished files were fetched again"
    assert not list(blobs.glob("*.incomplete"))
    served = resolve_in_worker(world, repo)
    assert served.returncode == 0 and served.stdout.strip() == str(world.snapshot(repo, commit))


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer_config.json"])
def test_a_corrupt_file_is_detected_deleted_and_never_served(world, hub, tiny_model_dir, name):
    repo = f"test-org/tiny-corrupt-{name.split('.')[0].replace('_', '-')}"
    commit = world.serve_tiny(repo, tiny_model_dir)
    hub.corrupt(repo, name)
    world.write_config()
    result = world.mlxd("pull", repo)
    assert result.returncode == 1
    algorithm = "sha256" if name.endswith(".safetensors") else "git-sha1"
    assert f"{name}: content hash {algorithm}:" in result.stderr and "does not match" in result.stderr
    assert not (world.snapshot(repo, commit) / name).exists()
    assert not (world.folder(repo) / "blobs" / hub.file(repo, name).etag).exists()
    refused = resolve_in_worker(world, repo)
    assert refused.returncode == 3, refused.stdout
    (entry,) = [e for e in world.audit_lines() if e["action"] == "pull"]
    assert entry["outcome"].startswith("failed:") and "does not match" in entry["outcome"]
    hub.file(repo, name).corrupt = False
    again = world.mlxd("pull", repo)
    assert again.returncode == 0, again.stderr
    assert resolve_in_worker(world, repo).returncode == 0


def test_a_pull_larger_than_the_free_disk_is_refused_before_downloading(world, hub, tiny_model_dir):
    repo = "test-org/tiny-huge"
    world.serve_tiny(repo, tiny_model_dir)
    hub.advertise(repo, "model.safetensors", 10**15)
    world.write_config(max_pull_bytes=0)
    result = world.mlxd("pull", repo)
    assert result.returncode == 1
    assert "needs 1000.0 TB more on disk but" in result.stderr and "free" in result.stderr
    assert requests_for(hub, repo) == []
    assert not world.folder(repo).exists()
    assert world.audit_lines()[-1]["outcome"].startswith("failed:")


def test_a_pull_over_the_configured_cap_is_refused(world, hub, tiny_model_dir):
    repo = "test-org/tiny-capped"
    world.serve_tiny(repo, tiny_model_dir)
    world.write_config(max_pull_bytes="1MiB")
    result = world.mlxd("pull", repo)
    assert result.returncode == 1
    assert "over the pull size limit of 1.0 MB (server.max_pull_bytes)" in result.stderr
    assert requests_for(hub, repo) == []


@pytest.mark.parametrize("hostile", ["../../escape.json", "/tmp/absolute.json", "sub/../../up.json", "a\\b.json"])
def test_a_listing_with_a_hostile_file_name_is_refused(world, hub, tiny_model_dir, hostile):
    repo = "test-org/tiny-hostile"
    world.serve_tiny(repo, tiny_model_dir)
    hub.add_listing(repo, hostile)
    world.write_config()
    result = world.mlxd("pull", repo)
    assert result.returncode == 1
    assert "lists unsafe file names" in result.stderr and repr(hostile) in result.stderr
    assert requests_for(hub, repo) == []
    assert not list(world.root.rglob("escape.json")) and not list(world.root.rglob("up.json"))


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("../../etc", "is not a Hugging Face repo id"),
        ("..", "is not in the model catalog"),
        ("../etc/passwd", "is not a Hugging Face repo id"),
        ("org/na me", "is not a Hugging Face repo id"),
        ("org--x/name", "is not a Hugging Face repo id"),
        ("test-org/tiny@../../main", "is not a revision"),
        ("test-org/tiny@/abs", "is not a revision"),
        ("nope:1b", "is not in the model catalog"),
    ],
)
def test_bad_model_names_are_refused_without_asking_the_hub(world, hub, model, message):
    world.write_config()
    before = len(hub.requests)
    result = world.mlxd("pull", model)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(hub.requests) == before


def test_an_unknown_repo_is_a_clear_error(world):
    world.write_config()
    result = world.mlxd("pull", "test-org/does-not-exist")
    assert result.returncode == 1
    assert "no repo test-org/does-not-exist on http://127.0.0.1" in result.stderr and "HF_TOKEN" in result.stderr


def test_hf_token_goes_to_the_hub_and_never_to_the_cdn(world, hub, tiny_model_dir):
    repo = "test-org/tiny-private"
    world.serve_tiny(repo, tiny_model_dir, token="hf_secret_token")
    world.write_config()
    refused = world.mlxd("pull", repo)
    assert refused.returncode == 1 and "HF_TOKEN" in refused.stderr
    result = world.mlxd("pull", repo, HF_TOKEN="hf_secret_token")
    assert result.returncode == 0, result.stderr
    hub_side = [r for r in hub.seen(listener="hub") if repo in r.path]
    authorized = [r for r in hub_side if r.authorization == "Bearer hf_secret_token"]
    assert authorized and any("/resolve/" in r.path for r in authorized)
    cdn_side = [r for r in hub.seen(listener="cdn") if repo in r.path]
    assert cdn_side and all(r.authorization is None for r in cdn_side)
    assert "hf_secret_token" not in world.audit.read_text()


def test_rm_is_refused_while_a_config_entry_uses_the_model_unless_forced(world, hub, tiny_model_dir):
    repo = "test-org/tiny-rm"
    world.serve_tiny(repo, tiny_model_dir, "tiny:rm")
    world.write_config(models=[{"name": "chat", "source": "tiny:rm"}])
    assert world.mlxd("pull", "tiny:rm").returncode == 0
    row = next(line for line in world.mlxd("ls").stdout.splitlines() if repo in line)
    assert row.rstrip().endswith("chat")
    refused = world.mlxd("rm", "tiny:rm")
    assert refused.returncode == 1 and "used by config entries chat" in refused.stderr
    assert world.folder(repo).is_dir()
    removed = world.mlxd("rm", "tiny:rm", "--force")
    assert removed.returncode == 0, removed.stderr
    assert "removed tiny:rm (test-org/tiny-rm, 16.4 MB)" in removed.stdout
    assert not world.folder(repo).exists()
    assert repo not in world.mlxd("ls").stdout
    actions = [(e["action"], e["outcome"].split(":")[0]) for e in world.audit_lines()]
    assert actions == [("pull", "complete"), ("remove", "refused"), ("remove", "removed")]
    assert all(e["who"].startswith("user ") for e in world.audit_lines())
    gone = world.mlxd("rm", "tiny:rm")
    assert gone.returncode == 1 and "is not in the local store" in gone.stderr


def test_ctrl_c_ends_a_pull_at_once_and_records_it(world, hub, tiny_model_dir):
    repo = "test-org/tiny-sigint"
    world.serve_tiny(repo, tiny_model_dir)
    hub.hold(repo, "model.safetensors", after=11_000_000)
    hub.held.clear()
    hub.release.clear()
    world.write_config()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "pull", repo, "--config", str(world.config)],
        cwd=ROOT,
        env=world.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert hub.held.wait(120)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=40)  # well before the held download ends (after a minute)
    finally:
        if proc.poll() is None:  # an assertion above failed: the pull must not outlive the test
            proc.kill()
            proc.communicate(timeout=30)
        hub.file(repo, "model.safetensors").hold_after = None
        hub.release.set()
    assert proc.returncode == 130
    assert f"pull of {repo} interrupted; run `mlxd pull {repo}` again to finish it" in err
    assert world.audit_lines()[-1]["outcome"] == "interrupted by signal SIGINT"
    assert "downloading" in next(line for line in world.mlxd("ls").stdout.splitlines() if repo in line)
