"""The rules of model downloads without a network: names, the catalog, which
files are fetched, progress lines, and when a downloaded snapshot may be
served (:mod:`shared.hub_snapshots`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.hub.catalog import CatalogError, load_catalog, resolve
from gateway.hub.names import InvalidName, hostile_file_name, parse_repo_ref, plain_file_name
from gateway.hub.progress import FileProgress, LineReport, PullStatus, summary
from gateway.hub.selection import RemoteFile, select_files, wanted
from shared.hub_snapshots import PullRecord, SnapshotUnavailable, local_snapshot, repo_folder, write_record

COMMIT = "a" * 40


def test_repo_refs_take_an_optional_revision():
    assert str(parse_repo_ref("org/name")) == "org/name"
    ref = parse_repo_ref("mlx-community/Qwen3-4B-4bit@refs/pr/3")
    assert (ref.repo_id, ref.revision) == ("mlx-community/Qwen3-4B-4bit", "refs/pr/3")
    for bad in ("org", "org/name/extra", "/org/name", "org/..", "org/.hidden", "org/name.git", "a--b/c", "org/name@"):
        with pytest.raises(InvalidName):
            parse_repo_ref(bad)


@pytest.mark.parametrize("name", ["../x.json", "/etc/x", "a//b", "a/./b", "a\\b", "C:x", "a\x00b", "", "x" * 1025])
def test_hostile_file_names(name):
    assert hostile_file_name(name) and not plain_file_name(name)


@pytest.mark.parametrize(
    ("name", "fetched"),
    [
        ("model.safetensors", True),
        ("model-00001-of-00002.safetensors", True),
        ("model.safetensors.index.json", True),
        ("tokenizer.json", True),
        ("tokenizer.model", True),
        ("chat_template.jinja", True),
        ("qwen.tiktoken", True),
        ("merges.txt", True),
        ("1_Pooling/config.json", True),
        ("weights.npz", True),
        ("pytorch_model.bin", False),
        ("model.pt", False),
        ("model.pth", False),
        ("data.pkl", False),
        ("modeling_custom.py", False),
        ("model.gguf", False),
        ("README.md", False),
        (".gitattributes", False),
        ("my config.json", False),
        ("[x].json", False),
        ("résumé.json", False),
    ],
)
def test_only_files_mlx_needs_are_fetched(name, fetched):
    assert wanted(name) is fetched


def remote(path: str, size: int = 10) -> RemoteFile:
    return RemoteFile(path, size, None, "b" * 40)


def test_a_selection_needs_weights_and_refuses_hostile_listings():
    chosen = select_files([remote("config.json"), remote("model.safetensors"), remote("x.bin")], "org/m")
    assert [f.path for f in chosen] == ["config.json", "model.safetensors"]
    with pytest.raises(InvalidName, match=r"no MLX weights .*\.bin, \.json"):
        select_files([remote("config.json"), remote("pytorch_model.bin")], "org/m")
    with pytest.raises(InvalidName, match="unsafe file names"):
        select_files([remote("model.safetensors"), remote("../../x.json")], "org/m")


def test_the_shipped_catalog_resolves_and_a_user_file_adds_and_replaces(tmp_path):
    shipped = load_catalog(str(_write(tmp_path / "empty.toml", "")))
    target = resolve("qwen3:4b", shipped)
    assert (target.ref.repo_id, target.label, target.entry.kind) == (
        "mlx-community/Qwen3-4B-4bit",
        "qwen3:4b",
        "generate",
    )
    user = _write(
        tmp_path / "user.toml",
        '[models."qwen3:4b"]\nrepo = "me/qwen3-4b-8bit"\n[models."mine:1b"]\nrepo = "me/mine"\nrevision = "v2"\n',
    )
    merged = load_catalog(str(user))
    assert resolve("qwen3:4b", merged).ref.repo_id == "me/qwen3-4b-8bit"
    assert str(resolve("mine:1b", merged).ref) == "me/mine@v2"
    with pytest.raises(InvalidName, match=r"known: qwen3:0\.6b, qwen3:4b, qwen3:8b"):
        resolve("qwen3:99b", merged)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[models."Bad Name"]\nrepo = "a/b"\n', "is not a short name"),
        ('[models."x:1"]\nrepo = "../b"\n', "is not a Hugging Face repo id"),
        ('[models."x:1"]\nrepo = "a/b"\nrevision = "../main"\n', "is not a revision"),
        ('[models."x:1"]\nrepo = "a/b"\nsize = 3\n', "unknown field `size`"),
        ('[models."x:1"]\nrepo = "a/b"\nkind = "video"\n', "Invalid enum value 'video'"),
    ],
)
def test_a_bad_catalog_file_is_one_clear_error(tmp_path, text, message):
    with pytest.raises(CatalogError, match=message):
        load_catalog(str(_write(tmp_path / "bad.toml", text)))


def test_a_named_catalog_file_must_exist(tmp_path):
    with pytest.raises(CatalogError, match="does not exist"):
        load_catalog(str(tmp_path / "missing.toml"))


def test_progress_lines_name_bytes_rate_and_time_left():
    status = PullStatus(
        "qwen3:4b", "downloading", (FileProgress("m", "sha256:x", 2_000_000_000, 500_000_000),), 25e6, 60.0
    )
    assert summary(status) == "pull qwen3:4b: 25% (500.0 MB of 2.0 GB) at 25.0 MB/s, 1:00 left"
    lines: list[str] = []
    report = LineReport(lines.append, every=3600)
    report(status)
    report(status)  # same phase within the interval: not repeated
    report(PullStatus("qwen3:4b", "failed", error="boom"))
    assert lines == [summary(status), "pull qwen3:4b: failed: boom"]


def _snapshot(cache: Path, repo: str, files: dict[str, bytes]) -> Path:
    """A cache folder holding ``files`` as blobs linked from a snapshot."""
    folder = repo_folder(repo, cache)
    snapshot = folder / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (folder / "blobs").mkdir()
    for name, data in files.items():
        blob = folder / "blobs" / f"blob-{name}"
        blob.write_bytes(data)
        os.symlink(os.path.relpath(blob, snapshot), snapshot / name)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text(COMMIT)
    return snapshot


def _record(repo: str, state: str, files: dict[str, bytes]) -> PullRecord:
    return PullRecord(
        repo_id=repo,
        revision="main",
        commit=COMMIT,
        state=state,
        files={n: (len(d), "sha256:0") for n, d in files.items()},
    )


def test_a_pull_that_has_not_completed_is_never_served(tmp_path):
    files = {"config.json": b"{}", "model.safetensors": b"weights"}
    snapshot = _snapshot(tmp_path, "org/m", files)
    folder = repo_folder("org/m", tmp_path)
    write_record(folder, _record("org/m", "downloading", files))
    with pytest.raises(SnapshotUnavailable, match="still downloading or its pull was interrupted"):
        local_snapshot("org/m", cache_dir=tmp_path)
    write_record(folder, _record("org/m", "complete", files))
    assert local_snapshot("org/m", cache_dir=tmp_path) == snapshot
    (snapshot / "model.safetensors").unlink()
    with pytest.raises(SnapshotUnavailable, match="model.safetensors is missing"):
        local_snapshot("org/m", cache_dir=tmp_path)


def test_a_snapshot_link_out_of_the_cache_is_never_served(tmp_path):
    files = {"config.json": b"{}"}
    snapshot = _snapshot(tmp_path / "cache", "org/m", files)
    secret = _write(tmp_path / "secret.json", "{}")
    os.symlink(secret, snapshot / "tokenizer.json")
    with pytest.raises(SnapshotUnavailable, match="tokenizer.json resolve outside the Hugging Face cache"):
        local_snapshot("org/m", cache_dir=tmp_path / "cache")
    write_record(repo_folder("org/m", tmp_path / "cache"), _record("org/m", "complete", files))
    with pytest.raises(SnapshotUnavailable, match="tokenizer.json resolve outside"):
        local_snapshot("org/m", cache_dir=tmp_path / "cache")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
