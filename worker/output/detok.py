"""Incremental detokenization and stop-string matching, per request.

This module never touches MLX; it runs on the worker's output thread so the
scheduler thread only samples tokens. A :class:`TokenDecoder` is built once
per model (it holds the vocabulary's byte table) and hands out one
:class:`TextStream` per request; the stream's state belongs to that request
alone.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

_SPM_SPACE = "\u2581"


def _gpt2_byte_decoder() -> dict[str, int]:
    """The inverse of the GPT-2 byte-to-unicode table used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes)}


def _decoder_kind(model_path: Path | None) -> str:
    """Return ``bpe``, ``spm`` or ``other`` from the tokenizer.json decoder."""
    if model_path is None:
        return "other"
    try:
        spec = json.loads((model_path / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "other"
    text = json.dumps(spec.get("decoder"))
    if '"ByteLevel"' in text:
        return "bpe"
    if '"ByteFallback"' in text or _SPM_SPACE in text or '"Metaspace"' in text:
        return "spm"
    return "other"


class TokenDecoder:
    """Maps token ids to the bytes they stand for, for one tokenizer.

    ``tokenizer`` is a Hugging Face (or mlx-lm wrapped) tokenizer and
    ``model_path`` the directory its ``tokenizer.json`` came from, used to
    tell byte-level BPE from SentencePiece vocabularies. For other kinds,
    each token is decoded on its own with ``tokenizer.decode``.
    Thread-safe after construction (read-only).
    """

    def __init__(self, tokenizer: Any, model_path: Path | None = None) -> None:
        kind = _decoder_kind(model_path)
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        special = set(getattr(tokenizer, "all_special_tokens", []) or [])
        if kind == "bpe":
            table = _gpt2_byte_decoder()
            self.table = [
                p.encode() if p in special or any(ch not in table for ch in p) else bytes(table[ch] for ch in p)
                for p in (x or "" for x in pieces)
            ]
        elif kind == "spm":
            self.table = [_spm_bytes(p or "") for p in pieces]
        else:
            self.table = [tokenizer.decode([i]).encode() for i in range(len(pieces))]

    def raw(self, token: int) -> bytes:
        """The bytes ``token`` stands for (empty for an unknown id)."""
        return self.table[token] if 0 <= token < len(self.table) else b""

    def stream(self, stop: list[str]) -> TextStream:
        """Return a fresh per-request stream that holds back ``stop`` strings."""
        return TextStream(self.table, stop)


def _spm_bytes(piece: str) -> bytes:
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace(_SPM_SPACE, " ").encode()


class TextStream:
    """Turns one request's tokens into text, holding back partial matches.

    :meth:`add` returns the text that is safe to send now: complete UTF-8
    characters that cannot be the start of a stop string. When a stop string
    appears, :attr:`stopped` becomes True and the text before it is the last
    text returned; later tokens are ignored. Not thread-safe: one thread
    owns each stream.
    """

    def __init__(self, table: list[bytes], stop: list[str]) -> None:
        self._table = table
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = [s for s in stop if s]
        self._held = ""
        self.stopped = False
        self.matched: str | None = None

    def add(self, token: int) -> str:
        """Feed one token id; return newly releasable text (maybe empty)."""
        if self.stopped:
            return ""
        piece = self._table[token] if 0 <= token < len(self._table) else b""
        return self._release(self._utf8.decode(piece))

    def finish(self) -> str:
        """Flush everything held back (the request ended); return it."""
        if self.stopped:
            return ""
        text = self._held + self._utf8.decode(b"", final=True)
        self._held = ""
        return text

    def _release(self, text: str) -> str:
        if not self._stop:
            return text
        pending = self._held + text
        cut = -1
        for s in self._stop:
            i = pending.find(s)
            if i != -1 and (cut == -1 or i < cut):
                cut, self.matched = i, s
        if cut != -1:
            self.stopped = True
            self._held = ""
            return pending[:cut]
        keep = self._longest_stop_prefix_suffix(pending)
        self._held = pending[len(pending) - keep :] if keep else ""
        return pending[: len(pending) - keep]

    def _longest_stop_prefix_suffix(self, text: str) -> int:
        """Length of the longest suffix of ``text`` that begins a stop string."""
        best = 0
        for s in self._stop:
            for n in range(min(len(s) - 1, len(text)), best, -1):
                if s.startswith(text[-n:]):
                    best = n
                    break
        return best
