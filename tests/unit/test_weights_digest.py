"""worker.loading.weights_digest: a content identity of a model directory that
survives moves and restarts, memoized per file, robust to a bad memo."""

from __future__ import annotations

import hashlib
import shutil

from worker.loading import weights_digest as wd


def make_model(directory, weights: bytes = b"\x00\x01" * 64):
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"model_type": "llama"}')
    (directory / "model.safetensors").write_bytes(weights)
    (directory / "README.md").write_text("not part of the identity")
    return directory


def test_same_contents_elsewhere_same_digest_other_weights_another(tmp_path):
    memo = tmp_path / "memo.json"
    a = make_model(tmp_path / "a")
    moved = tmp_path / "elsewhere" / "a"
    shutil.copytree(a, moved)
    (moved / "README.md").write_text("edited readme")
    other = make_model(tmp_path / "b", weights=b"\x00\x02" * 64)
    digest = wd.weights_digest(a, memo)
    assert len(digest) == 64
    assert wd.weights_digest(moved, memo) == digest
    assert wd.weights_digest(other, memo) != digest
    (a / "model.safetensors").write_bytes(b"\x00\x03" * 64)  # same size, new bytes and mtime
    assert wd.weights_digest(a, memo) not in (digest, wd.weights_digest(other, memo))


def test_memo_spares_rereading_and_a_bad_memo_only_costs_a_rehash(tmp_path, monkeypatch):
    memo = tmp_path / "memo.json"
    model = make_model(tmp_path / "m")
    reads = []
    real = hashlib.file_digest

    def counting(handle, name):
        reads.append(handle.name)
        return real(handle, name)

    monkeypatch.setattr(wd.hashlib, "file_digest", counting)
    first = wd.weights_digest(model, memo)
    assert len(reads) == 2  # config.json and model.safetensors
    assert wd.weights_digest(model, memo) == first and len(reads) == 2
    memo.write_text("{ not json")
    assert wd.weights_digest(model, memo) == first and len(reads) == 4
    memo.write_text('["a list"]')
    assert wd.weights_digest(model, memo) == first and len(reads) == 6
    # an unwritable memo location is logged, not raised
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    assert wd.weights_digest(model, blocked / "memo.json") == first
