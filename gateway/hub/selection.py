"""Which files of a repo MLX needs, and nothing else.

A pull fetches a file only when its name is plain
(:func:`gateway.hub.names.plain_file_name`), matches
:data:`ALLOW_PATTERNS` (weights as safetensors, JSON configs and indexes,
tokenizer files, chat templates) and matches none of
:data:`DENY_PATTERNS` (pickled weights and Python code are never fetched,
whatever their name says). A listed name that is hostile makes the whole
listing refused. A selection with no weights is refused too: there would
be nothing to serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from gateway.hub.names import InvalidName, hostile_file_name, plain_file_name

ALLOW_PATTERNS = (
    "*.safetensors",
    "*.json",
    "*.jinja",
    "*.tiktoken",
    "*.model",
    "merges.txt",
    "vocab.txt",
    "*/merges.txt",
    "*/vocab.txt",
    "weights.npz",
)
"""What MLX models need: weights (``*.safetensors``; ``weights.npz``, the
MLX whisper layout, which MLX reads with its own array reader and never
unpickles), configs and indexes (``*.json``), tokenizers (``tokenizer.json``,
SentencePiece ``*.model``, ``*.tiktoken``, BPE ``merges.txt``/``vocab.txt``)
and chat templates (``*.jinja``)."""

DENY_PATTERNS = (
    "*.bin",
    "*.pt",
    "*.pth",
    "*.pkl",
    "*.pickle",
    "*.ckpt",
    "*.h5",
    "*.msgpack",
    "*.onnx",
    "*.py",
    "*.pyc",
    "*.so",
    "*.dylib",
)
"""Never fetched: pickled or framework weights and code (remote code is
never run, so it is never downloaded either)."""

WEIGHT_PATTERNS = ("*.safetensors", "weights.npz")
"""The files that count as weights (a selection needs at least one)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repo's tree listing: its path, size and the hash the
    hub gives for it (``sha256`` of LFS files, else the git blob id)."""

    path: str
    size: int
    sha256: str | None
    git_oid: str

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` for LFS files, else ``git-sha1:<hex>``."""
        return f"sha256:{self.sha256}" if self.sha256 else f"git-sha1:{self.git_oid}"

    @property
    def blob_name(self) -> str:
        """The name huggingface-hub gives this file's blob in its cache (its etag)."""
        return self.sha256 or self.git_oid


def wanted(path: str) -> bool:
    """Whether a (plain) file name is one MLX needs by the patterns above."""
    return (
        plain_file_name(path)
        and any(fnmatchcase(path, p) for p in ALLOW_PATTERNS)
        and not any(fnmatchcase(path, p) for p in DENY_PATTERNS)
    )


def select_files(listing: list[RemoteFile], repo: str) -> list[RemoteFile]:
    """The files of ``listing`` to fetch, by path.

    Raises:
        InvalidName: a listed name is hostile, or nothing listed is weights
            MLX can load (the message names what the repo has instead).
    """
    hostile = [f.path for f in listing if hostile_file_name(f.path)]
    if hostile:
        raise InvalidName(f"{repo} lists unsafe file names ({', '.join(repr(p) for p in hostile[:3])}); refusing it")
    chosen = sorted((f for f in listing if wanted(f.path)), key=lambda f: f.path)
    if not any(any(fnmatchcase(f.path, p) for p in WEIGHT_PATTERNS) for f in chosen):
        others = sorted({f.path.rsplit(".", 1)[-1] for f in listing if "." in f.path})
        raise InvalidName(
            f"{repo} has no MLX weights (*.safetensors); it has {', '.join('.' + o for o in others) or 'no files'}"
            " (a GGUF file can be served by its path; `mlxd convert` makes MLX weights from a checkpoint)"
        )
    return chosen
