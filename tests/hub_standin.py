"""A loopback stand-in for the part of the Hugging Face Hub's HTTP API that
huggingface-hub's downloads use, so tests drive the real client (through
``HF_ENDPOINT``) without a network.

What it answers, as the Hub does (read from huggingface_hub 2.4's
``hf_api.py``, ``file_download.py`` and ``utils/_http.py``):

- ``GET /api/models/{repo}[/revision/{rev}]``: the repo info, with ``sha``
  (the commit the revision names) and ``siblings``.
- ``GET /api/models/{repo}/tree/{rev}?recursive=...``: every file with its
  git ``oid``, ``size`` and, for LFS files, ``lfs`` (``oid`` = the content's
  sha256, ``size``, ``pointerSize``), and the directories.
- ``HEAD``/``GET /{repo}/resolve/{rev}/{path}``: a small (non-LFS) file is
  answered here with ``X-Repo-Commit``, ``ETag`` (its git oid) and its
  bytes; an LFS file is a 302 to a second listener (the "CDN", another
  origin, so the client neither follows it on ``HEAD`` nor sends its token
  there) carrying ``X-Linked-Etag`` (the sha256) and ``X-Linked-Size``.
  ``Range: bytes=N-`` is honoured (206 with ``Content-Range``) on both.
- Errors with the Hub's ``X-Error-Code``: ``RepoNotFound`` (401, also for a
  missing or wrong token when the repo requires one), ``RevisionNotFound``
  and ``EntryNotFound`` (404).

Faults a test can inject, each on one file of one repo: :meth:`HubStandin.cut`
(the next download closes the connection after some bytes; the client's
resume is a ``Range`` request), :meth:`HubStandin.corrupt` (the bytes served
differ from the hashes advertised), :meth:`HubStandin.advertise` (the tree
and headers claim another size) :meth:`HubStandin.hold` (the download stops after some bytes until the test
releases it, to interrupt a pull from outside) and
:meth:`HubStandin.add_listing` (a tree
entry whose name is hostile, e.g. ``../x`` or ``/etc/x``, with no file
behind it). Every request is recorded in :attr:`HubStandin.requests`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".pth", ".npz", ".model")
"""Files stored in LFS (served through the CDN redirect), as repos do."""


def git_blob_oid(data: bytes) -> str:
    """The git object id of a file's content (what the Hub lists as ``oid``
    and sends as ``ETag`` for a non-LFS file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs pointer file git stores instead of an LFS file's bytes."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass
class StoredFile:
    """One file of a repo as the stand-in advertises and serves it."""

    path: str
    data: bytes
    lfs: bool
    advertised_size: int | None = None
    corrupt: bool = False
    cuts: list[int] = field(default_factory=list)
    hold_after: int | None = None

    @property
    def sha256(self) -> str:
        """The sha256 of the true content (advertised for LFS files)."""
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        """The size advertised in the tree and headers."""
        return self.advertised_size if self.advertised_size is not None else len(self.data)

    @property
    def oid(self) -> str:
        """The git oid listed in the tree: of the pointer for LFS files."""
        if self.lfs:
            return git_blob_oid(lfs_pointer(self.sha256, self.size))
        return git_blob_oid(self.data)

    @property
    def etag(self) -> str:
        """What the Hub sends as the file's etag: sha256 for LFS, git oid otherwise."""
        return self.sha256 if self.lfs else self.oid

    def served(self) -> bytes:
        """The bytes actually served (one byte flipped when corrupt)."""
        if not self.corrupt or not self.data:
            return self.data
        middle = len(self.data) // 2
        return self.data[:middle] + bytes([self.data[middle] ^ 0xFF]) + self.data[middle + 1 :]


@dataclass
class StoredRepo:
    """A repo: its commit, branch names, files and extra (fileless) tree entries."""

    repo_id: str
    commit: str
    refs: dict[str, str]
    files: dict[str, StoredFile]
    listings: list[dict] = field(default_factory=list)
    token: str | None = None


@dataclass
class SeenRequest:
    """One request the stand-in answered."""

    method: str
    path: str
    range: str | None
    authorization: str | None
    listener: str


class HubStandin:
    """The hub (``endpoint``) and its CDN, two threaded HTTP/1.1 servers on
    127.0.0.1; :meth:`close` stops both."""

    def __init__(self) -> None:
        self.repos: dict[str, StoredRepo] = {}
        self.requests: list[SeenRequest] = []
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self._hub = self._listen("hub")
        self._cdn = self._listen("cdn")
        self.endpoint = f"http://127.0.0.1:{self._hub.server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._cdn.server_address[1]}"

    # ---- content -------------------------------------------------------

    def add_repo(
        self,
        repo_id: str,
        files: dict[str, bytes | Path],
        *,
        branch: str = "main",
        token: str | None = None,
    ) -> str:
        """Serve ``files`` (repo path -> bytes or a local file) as
        ``repo_id`` at a commit that ``branch`` names; ``token``: the
        bearer token the repo requires (a private repo). Returns the
        commit id (40 hex digits)."""
        stored = {
            path: StoredFile(
                path, data if isinstance(data, bytes) else Path(data).read_bytes(), path.endswith(LFS_SUFFIXES)
            )
            for path, data in files.items()
        }
        digest = hashlib.sha1(repo_id.encode())
        for path in sorted(stored):
            digest.update(path.encode() + b"\0" + stored[path].sha256.encode())
        commit = digest.hexdigest()
        self.repos[repo_id] = StoredRepo(repo_id, commit, {branch: commit}, stored, token=token)
        return commit

    def add_directory(self, repo_id: str, directory: Path, *, extra: dict[str, bytes] | None = None, **kwargs) -> str:
        """Serve every file under ``directory`` (plus ``extra``) as ``repo_id``."""
        files: dict[str, bytes | Path] = {
            p.relative_to(directory).as_posix(): p for p in sorted(directory.rglob("*")) if p.is_file()
        }
        files.update(extra or {})
        return self.add_repo(repo_id, files, **kwargs)

    def file(self, repo_id: str, path: str) -> StoredFile:
        """The stored file ``path`` of ``repo_id``."""
        return self.repos[repo_id].files[path]

    # ---- faults --------------------------------------------------------

    def cut(self, repo_id: str, path: str, after: int, times: int = 1) -> None:
        """The next ``times`` downloads of ``path`` send their full
        ``Content-Length`` but close the connection after ``after`` bytes."""
        self.file(repo_id, path).cuts.extend([after] * times)

    def hold(self, repo_id: str, path: str, after: int) -> None:
        """Downloads of ``path`` send the file up to byte ``after`` (also when
        resumed with ``Range``), set :attr:`held`, then wait (up to a
        minute) for :attr:`release` and close the connection."""
        self.file(repo_id, path).hold_after = after

    def corrupt(self, repo_id: str, path: str) -> None:
        """Serve ``path`` with one byte changed; hashes stay the true ones."""
        self.file(repo_id, path).corrupt = True

    def advertise(self, repo_id: str, path: str, size: int) -> None:
        """Claim ``size`` bytes for ``path`` in the tree and the headers."""
        self.file(repo_id, path).advertised_size = size

    def add_listing(self, repo_id: str, path: str, size: int = 10, lfs: bool = False) -> None:
        """List a file entry named ``path`` in the tree (no bytes behind it)."""
        entry = {"type": "file", "oid": "0" * 40, "size": size, "path": path}
        if lfs:
            entry["lfs"] = {"oid": "0" * 64, "size": size, "pointerSize": 134}
        self.repos[repo_id].listings.append(entry)

    # ---- records -------------------------------------------------------

    def seen(self, method: str | None = None, contains: str = "", listener: str | None = None) -> list[SeenRequest]:
        """The recorded requests with this method, path fragment and listener."""
        with self._lock:
            return [
                r
                for r in self.requests
                if (method is None or r.method == method)
                and contains in r.path
                and (listener is None or r.listener == listener)
            ]

    def close(self) -> None:
        """Stop both listeners."""
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()

    # ---- HTTP ----------------------------------------------------------

    def _listen(self, name: str) -> ThreadingHTTPServer:
        """Start one listener thread whose handler dispatches to this stand-in."""
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                standin._dispatch(self, name)

            def do_HEAD(self) -> None:  # noqa: N802
                standin._dispatch(self, name)

            def log_message(self, *_args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.handle_error = lambda *_args: None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def _dispatch(self, handler: BaseHTTPRequestHandler, listener: str) -> None:
        """Record the request, then answer it."""
        with self._lock:
            self.requests.append(
                SeenRequest(
                    handler.command,
                    handler.path,
                    handler.headers.get("Range"),
                    handler.headers.get("Authorization"),
                    listener,
                )
            )
        url = urlsplit(handler.path)
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        if listener == "cdn":
            self._cdn_file(handler, parts)
        elif parts[:2] == ["api", "models"] and len(parts) >= 4:
            self._api(handler, parts[2:], parse_qs(url.query))
        elif len(parts) >= 5 and parts[2] == "resolve":
            self._resolve(handler, f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
        else:
            _error(handler, 404, "EntryNotFound")

    def _repo(self, handler: BaseHTTPRequestHandler, repo_id: str) -> StoredRepo | None:
        """The repo, or None after answering 401 RepoNotFound (unknown repo
        or missing/wrong token)."""
        repo = self.repos.get(repo_id)
        if repo is None or (repo.token and handler.headers.get("Authorization") != f"Bearer {repo.token}"):
            _error(handler, 401, "RepoNotFound")
            return None
        return repo

    def _commit(self, handler: BaseHTTPRequestHandler, repo: StoredRepo, revision: str) -> str | None:
        """The commit ``revision`` names, or None after answering 404."""
        if revision in repo.refs:
            return repo.refs[revision]
        if revision == repo.commit:
            return revision
        _error(handler, 404, "RevisionNotFound")
        return None

    def _api(self, handler: BaseHTTPRequestHandler, parts: list[str], query: dict[str, list[str]]) -> None:
        """``/api/models/{repo}``, ``.../revision/{rev}``, ``.../tree/{rev}``."""
        repo = self._repo(handler, f"{parts[0]}/{parts[1]}")
        if repo is None:
            return
        rest = parts[2:]
        revision = "/".join(rest[1:]) if len(rest) >= 2 else "main"
        commit = self._commit(handler, repo, revision)
        if commit is None:
            return
        if rest and rest[0] == "tree":
            body = self._tree(repo, recursive=query.get("recursive", ["false"])[0].lower() == "true")
        elif not rest or rest[0] == "revision":
            body = {
                "_id": repo.commit[:24],
                "id": repo.repo_id,
                "modelId": repo.repo_id,
                "sha": commit,
                "private": bool(repo.token),
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": ["mlx"],
                "library_name": "mlx",
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": p} for p in sorted(repo.files)]
                + [{"rfilename": e["path"]} for e in repo.listings],
            }
        else:
            _error(handler, 404, "EntryNotFound")
            return
        _json(handler, body)

    def _tree(self, repo: StoredRepo, recursive: bool) -> list[dict]:
        """The tree listing of a repo (directories first, as the Hub does)."""
        directories = sorted({"/".join(p.split("/")[:i]) for p in repo.files for i in range(1, p.count("/") + 1)})
        entries: list[dict] = [{"type": "directory", "oid": "1" * 40, "size": 0, "path": d} for d in directories]
        for path in sorted(repo.files):
            if not recursive and "/" in path:
                continue
            stored = repo.files[path]
            entry: dict = {"type": "file", "oid": stored.oid, "size": stored.size, "path": path}
            if stored.lfs:
                entry["lfs"] = {"oid": stored.sha256, "size": stored.size, "pointerSize": 134}
            entries.append(entry)
        return entries + list(repo.listings)

    def _resolve(self, handler: BaseHTTPRequestHandler, repo_id: str, revision: str, path: str) -> None:
        """``HEAD``/``GET /{repo}/resolve/{rev}/{path}``."""
        repo = self._repo(handler, repo_id)
        if repo is None:
            return
        commit = self._commit(handler, repo, revision)
        if commit is None:
            return
        stored = repo.files.get(path)
        if stored is None:
            _error(handler, 404, "EntryNotFound", {"X-Repo-Commit": commit})
            return
        common = {"X-Repo-Commit": commit, "ETag": f'"{stored.oid}"', "Accept-Ranges": "bytes"}
        if stored.lfs:
            location = f"{self.cdn_url}/lfs/{repo_id}/{stored.sha256}?signature=standin"
            headers = {
                **common,
                "Location": location,
                "X-Linked-Etag": f'"{stored.sha256}"',
                "X-Linked-Size": str(stored.size),
                "Content-Length": "0",
            }
            handler.send_response(302)
            for key, value in headers.items():
                handler.send_header(key, value)
            handler.end_headers()
            return
        _send_file(self, handler, stored, common)

    def _cdn_file(self, handler: BaseHTTPRequestHandler, parts: list[str]) -> None:
        """``GET /lfs/{repo}/{sha256}`` on the CDN listener."""
        if len(parts) != 4 or parts[0] != "lfs":
            _error(handler, 404, "EntryNotFound")
            return
        repo = self.repos.get(f"{parts[1]}/{parts[2]}")
        stored = next((f for f in (repo.files.values() if repo else ()) if f.lfs and f.sha256 == parts[3]), None)
        if stored is None:
            _error(handler, 404, "EntryNotFound")
            return
        _send_file(self, handler, stored, {"ETag": f'"{stored.sha256}"', "Accept-Ranges": "bytes"})


def _send_file(
    standin: HubStandin, handler: BaseHTTPRequestHandler, stored: StoredFile, headers: dict[str, str]
) -> None:
    """Answer with the file's bytes (a ``Range: bytes=N-`` gets 206), or
    with its headers alone for ``HEAD``; a pending cut closes the
    connection early, and a hold waits for the test to release it."""
    data = stored.served()
    size = stored.size
    start = 0
    requested = handler.headers.get("Range")
    if requested and requested.startswith("bytes=") and requested.endswith("-"):
        start = int(requested[len("bytes=") : -1])
    body = data[start:]
    handler.send_response(206 if start else 200)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Content-Length", str(max(size - start, 0)))
    if start:
        handler.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
    handler.end_headers()
    if handler.command == "HEAD":
        return
    if stored.hold_after is not None:
        handler.wfile.write(body[: max(stored.hold_after - start, 0)])
        handler.wfile.flush()
        standin.held.set()
        standin.release.wait(60)
        handler.close_connection = True
        return
    cut = stored.cuts.pop(0) if stored.cuts else None
    if cut is not None:
        handler.wfile.write(body[:cut])
        handler.wfile.flush()
        handler.close_connection = True
        return
    handler.wfile.write(body)


def _json(handler: BaseHTTPRequestHandler, body: object) -> None:
    """Answer 200 with a JSON body."""
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)


def _error(handler: BaseHTTPRequestHandler, status: int, code: str, headers: dict[str, str] | None = None) -> None:
    """Answer an error the way the Hub does: ``X-Error-Code`` and a JSON ``error``."""
    data = json.dumps({"error": code}).encode()
    handler.send_response(status)
    handler.send_header("X-Error-Code", code)
    handler.send_header("X-Error-Message", code)
    for key, value in (headers or {}).items():
        handler.send_header(key, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)
