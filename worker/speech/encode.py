"""Encoding synthesised audio into the formats of OpenAI's ``response_format``.

One :class:`AudioEncoder` per request takes float samples (mono, the
model's rate) chunk by chunk and returns the next bytes of the encoded
stream; the bytes of every call, in order, make the file. Samples are
sanitised first (NaN to 0, infinities and anything beyond full scale
clipped to [-1, 1]): libsndfile's MP3 encoder aborts the whole process on
NaN, and a random or misbehaving model can produce them.

Formats and what encodes them:

- ``wav``: a 16-bit PCM RIFF header written here, then the samples. A
  streamed file's header gives the sizes as ``0xFFFFFFFF`` (unknown, as
  streaming servers send it; readers take the data to the end); otherwise
  they are exact.
- ``pcm``: raw 16-bit little-endian samples, no header (OpenAI's ``pcm``
  at the model's rate; Kokoro's is 24 kHz like OpenAI's).
- ``mp3`` (MPEG-2 layer III at 24 kHz, LAME inside libsndfile), ``opus``
  (Ogg Opus) and ``flac`` (16-bit) through soundfile's libsndfile, written
  incrementally. libsndfile rewrites a header when it closes a file (the
  MP3 Xing frame, FLAC's STREAMINFO): a streamed file keeps the header as
  first written, which says "unknown length" (FLAC: total samples, frame
  sizes and MD5 zero, as the format allows; MP3: an empty info frame,
  which decoders play as a silent frame); a whole file is sent as
  libsndfile finished it.
- ``aac`` (ADTS): the ``ffmpeg`` program's AAC encoder; libsndfile has
  none. Without ffmpeg on the PATH :func:`missing_encoder` names it and the
  request is refused. Streamed, each chunk is its own ADTS run (one ffmpeg
  call per chunk; AAC frames are self-contained, so the runs concatenate
  into one playable stream with the encoder's priming at each chunk).

Threads: the worker's output thread (see :class:`worker.messages.Deferred`);
no MLX. :func:`missing_encoder` may be called anywhere (input thread).
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
"""Every ``response_format`` (OpenAI's list)."""

_SOUNDFILE = {"mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS"), "flac": ("FLAC", "PCM_16")}

_UNKNOWN_SIZE = 0xFFFFFFFF

FFMPEG_TIMEOUT = 60.0
"""Most seconds one ffmpeg call may take (a chunk or a whole file)."""


def missing_encoder(fmt: str) -> str | None:
    """What the machine lacks to encode ``fmt`` (a sentence naming the
    missing program or library), or None when it can."""
    if fmt == "aac" and shutil.which("ffmpeg") is None:
        return "response_format 'aac' needs the ffmpeg program (libsndfile has no AAC encoder), which is not installed"
    if fmt in _SOUNDFILE:
        try:
            import soundfile
        except ImportError:
            return f"response_format '{fmt}' needs the soundfile package (make installs it; elsewhere pip install -e '.[speech]' in the mlxd clone)"
        kind, subtype = _SOUNDFILE[fmt]
        if subtype not in soundfile.available_subtypes(kind):
            return f"response_format '{fmt}' needs libsndfile with {kind} {subtype} support, which this one lacks"
    return None


def clean(samples: np.ndarray) -> np.ndarray:
    """``samples`` as float32 in [-1, 1] with NaN as 0 (see the module docstring)."""
    flat = np.asarray(samples, dtype=np.float32).reshape(-1)
    return np.clip(np.nan_to_num(flat, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)


def pcm16(samples: np.ndarray) -> bytes:
    """Clean ``samples`` as 16-bit little-endian integers."""
    return (np.round(clean(samples) * 32767.0)).astype("<i2").tobytes()


def wav_header(sample_rate: int, data_bytes: int | None) -> bytes:
    """A 44-byte mono 16-bit PCM RIFF header for ``data_bytes`` of samples
    (None: unknown, streamed)."""
    data = _UNKNOWN_SIZE if data_bytes is None else data_bytes
    riff = _UNKNOWN_SIZE if data_bytes is None else 36 + data_bytes
    fmt = struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", riff) + b"WAVE" + b"fmt " + fmt + b"data" + struct.pack("<I", data)


class AudioEncoder:
    """Encodes one request's audio; see the module docstring.

    ``fmt`` one of :data:`FORMATS`, ``sample_rate`` the samples' rate,
    ``stream``: each :meth:`add` returns the bytes ready so far (else
    everything comes from :meth:`finish`). One owner thread.
    """

    def __init__(self, fmt: str, sample_rate: int, stream: bool) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown response_format {fmt!r}")
        self.fmt = fmt
        self.sample_rate = sample_rate
        self.stream = stream
        self._held: list[np.ndarray] = []
        self._sink: _Sink | None = None
        self._file = None
        self._started = False

    def add(self, samples: np.ndarray) -> bytes:
        """Take the next ``samples``; return the next bytes of the stream
        (b"" when nothing is ready, always when not streaming)."""
        samples = clean(samples)
        if not self.stream:
            self._held.append(samples)
            return b""
        if self.fmt == "pcm":
            return pcm16(samples)
        if self.fmt == "wav":
            head = b"" if self._started else wav_header(self.sample_rate, None)
            self._started = True
            return head + pcm16(samples)
        if self.fmt == "aac":
            return _ffmpeg_aac(samples, self.sample_rate) if samples.size else b""
        self._open().write(self._for_soundfile(samples))
        return self._take()

    def finish(self) -> bytes:
        """End the stream: the last bytes (streamed), or the whole file."""
        if self.stream:
            if self.fmt in _SOUNDFILE:
                self._open().close()
                return self._take()
            if self.fmt == "wav" and not self._started:
                self._started = True
                return wav_header(self.sample_rate, None)
            return b""
        samples = np.concatenate(self._held) if self._held else np.zeros(0, np.float32)
        self._held = []
        if self.fmt == "pcm":
            return pcm16(samples)
        if self.fmt == "wav":
            body = pcm16(samples)
            return wav_header(self.sample_rate, len(body)) + body
        if self.fmt == "aac":
            return _ffmpeg_aac(samples, self.sample_rate)
        handle = self._open()
        handle.write(self._for_soundfile(samples))
        handle.close()
        assert self._sink is not None
        return bytes(self._sink.data)

    def close(self) -> None:
        """Release the encoder without finishing (the request ended early)."""
        if self._file is not None:
            try:
                self._file.close()
            except Exception:  # noqa: BLE001 - a half-written file is dropped either way
                pass
        self._held = []

    def _for_soundfile(self, samples: np.ndarray) -> np.ndarray:
        """What libsndfile gets: 16-bit integers for flac (quantised as wav
        and pcm are, so every lossless format holds the same samples), the
        float samples for the lossy encoders."""
        return np.frombuffer(pcm16(samples), dtype="<i2") if self.fmt == "flac" else samples

    def _open(self):  # noqa: ANN202 - a soundfile.SoundFile
        if self._file is None:
            import soundfile

            kind, subtype = _SOUNDFILE[self.fmt]
            self._sink = _Sink()
            self._file = soundfile.SoundFile(
                self._sink, "w", samplerate=self.sample_rate, channels=1, format=kind, subtype=subtype
            )
        return self._file

    def _take(self) -> bytes:
        assert self._sink is not None
        return self._sink.take()


def _ffmpeg_aac(samples: np.ndarray, sample_rate: int) -> bytes:
    """``samples`` as AAC in ADTS frames, by the ffmpeg program."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise RuntimeError("ffmpeg is not installed")
    done = subprocess.run(
        [ffmpeg, "-nostdin", "-loglevel", "error", "-f", "f32le", "-ar", str(sample_rate), "-ac", "1", "-i", "pipe:0"]
        + ["-c:a", "aac", "-f", "adts", "pipe:1"],
        input=clean(samples).astype("<f4").tobytes(),
        capture_output=True,
        check=True,
        timeout=FFMPEG_TIMEOUT,
    )
    return done.stdout


class _Sink(io.RawIOBase):
    """A seekable in-memory file libsndfile writes into; :meth:`take`
    returns what was appended since the last call (rewrites of bytes
    already taken stay in :attr:`data` only)."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self._pos = 0
        self._taken = 0

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b) -> int:  # noqa: ANN001 - a bytes-like object
        chunk = bytes(b)
        end = self._pos + len(chunk)
        if end > len(self.data):
            self.data.extend(bytes(end - len(self.data)))
        self.data[self._pos : end] = chunk
        self._pos = end
        return len(chunk)

    def read(self, size: int = -1) -> bytes:
        end = len(self.data) if size is None or size < 0 else self._pos + size
        chunk = bytes(self.data[self._pos : end])
        self._pos += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: len(self.data)}[whence]
        self._pos = base + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def take(self) -> bytes:
        """The bytes appended since the last call."""
        chunk = bytes(self.data[self._taken :])
        self._taken = len(self.data)
        return chunk
