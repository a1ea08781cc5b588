"""The multipart form of ``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``.

Fields, as the official openai SDK sends them (arrays as ``name[]``, also
accepted without the brackets):

- ``file`` (required): the audio file, a form file part; at most the
  model's ``max_audio_bytes`` (over: 400 naming the limit). The worker
  decodes it (WAV, FLAC, MP3, OGG Vorbis, OGG Opus).
- ``model`` (required): a transcription model or alias.
- ``language`` (transcriptions): ISO-639-1 code (or English name) of the
  speech; absent: detected (English-only models: English).
- ``prompt``: text that prompts the first 30-second window.
- ``response_format``: ``json`` (default), ``text``, ``srt``, ``vtt`` or
  ``verbose_json``; ``diarized_json`` is refused.
- ``temperature``: 0 to 1; 0 (default) is greedy with OpenAI's fallback to
  higher temperatures where a window's decode looks failed.
- ``timestamp_granularities[]`` (transcriptions): ``segment`` and/or
  ``word``, only with ``verbose_json`` (as OpenAI requires).
- ``stream`` (transcriptions): ``true`` streams ``transcript.text.delta``
  events (one per decoded window) and ``transcript.text.done``; only with
  ``json`` or ``text``.
- ``include[]``: only an empty list (``logprobs`` is refused);
  ``chunking_strategy``, ``known_speaker_names[]``,
  ``known_speaker_references[]``, ``keywords[]`` and ``languages[]`` are
  refused (400 naming the field): Whisper has no such inputs.

Any other field is a 400 naming it. Every refusal is an
:class:`~gateway.core.errors.APIError` 400 in OpenAI's error shape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gateway.core.errors import APIError, bad_request
from gateway.frontend.validation import MAX_NAME_CHARS, not_supported

RESPONSE_FORMATS = ("json", "text", "srt", "verbose_json", "vtt")
"""The answer formats served."""

MAX_PROMPT_CHARS = 4096
"""The longest ``prompt`` (Whisper keeps at most the last 223 tokens of it)."""

REFUSED = {
    "chunking_strategy": "Whisper decodes fixed 30-second windows; voice-activity chunking",
    "known_speaker_names": "speaker diarization",
    "known_speaker_references": "speaker diarization",
    "keywords": "keyword lists",
    "languages": "language candidate lists",
}
"""Fields of OpenAI's form that Whisper models have no input for."""

_LANGUAGE = re.compile(r"^[A-Za-z][A-Za-z ]{0,31}$")


@dataclass
class AudioForm:
    """A checked speech-to-text form (see the module docstring)."""

    model: str
    audio: bytes
    task: str
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float = 0.0
    granularities: list[str] = field(default_factory=list)
    stream: bool = False


def fields_of(form: Any) -> dict[str, list[Any]]:
    """Every value of a Starlette ``FormData`` by field name (``name[]`` as ``name``)."""
    values: dict[str, list[Any]] = {}
    for key, value in form.multi_items():
        values.setdefault(key.removesuffix("[]"), []).append(value)
    return values


def model_of(values: dict[str, list[Any]]) -> str:
    """The ``model`` field.

    Raises:
        APIError: 400 when it is missing, repeated, a file or too long.
    """
    return _text(values, "model", required=True, limit=MAX_NAME_CHARS) or ""


async def check_form(values: dict[str, list[Any]], task: str, model: str, max_audio_bytes: int) -> AudioForm:
    """The checked form of a transcription (``task`` ``transcribe``) or
    translation (``translate``) for canonical ``model``, with the file's
    bytes read (at most ``max_audio_bytes``).

    Raises:
        APIError: 400 naming the field for every refusal of the module docstring.
    """
    allowed = {"file", "model", "prompt", "response_format", "temperature"}
    if task == "transcribe":
        allowed |= {"language", "timestamp_granularities", "stream", "include"}
    for name in values:
        if name in REFUSED and task == "transcribe":
            raise not_supported(name, REFUSED[name])
        if name not in allowed:
            raise bad_request(f"Unrecognized request argument supplied: {name}", param=name)
    response_format = _text(values, "response_format") or "json"
    if response_format not in RESPONSE_FORMATS:
        if response_format == "diarized_json":
            raise not_supported("response_format", "diarized_json (speaker diarization)")
        raise bad_request(
            f"response_format must be one of {', '.join(RESPONSE_FORMATS)}; got {response_format!r}",
            param="response_format",
        )
    temperature = _temperature(_text(values, "temperature"))
    language = _text(values, "language", limit=32)
    if language is not None and not _LANGUAGE.match(language):
        raise bad_request(f"language must be an ISO-639-1 code such as 'en'; got {language!r}", param="language")
    prompt = _text(values, "prompt", limit=MAX_PROMPT_CHARS)
    granularities = [str(v) for v in values.get("timestamp_granularities", [])]
    for value in granularities:
        if value not in ("word", "segment"):
            raise bad_request(
                f"timestamp_granularities[] takes 'word' and 'segment'; got {value!r}", param="timestamp_granularities"
            )
    if granularities and response_format != "verbose_json":
        raise bad_request(
            "timestamp_granularities[] needs response_format 'verbose_json'", param="timestamp_granularities"
        )
    include = [str(v) for v in values.get("include", []) if str(v)]
    if include:
        raise not_supported("include", f"{', '.join(include)} (Whisper models return no token log probabilities)")
    stream = _flag(_text(values, "stream"), "stream")
    if stream and response_format not in ("json", "text"):
        raise bad_request(
            f"stream is served with response_format 'json' or 'text', not {response_format!r}", param="stream"
        )
    return AudioForm(
        model=model,
        audio=await _audio(values, max_audio_bytes),
        task=task,
        language=language,
        prompt=prompt or None,
        response_format=response_format,
        temperature=temperature,
        granularities=granularities,
        stream=stream,
    )


def _text(values: dict[str, list[Any]], name: str, *, required: bool = False, limit: int = 64) -> str | None:
    """A single text field (None when absent)."""
    found = values.get(name)
    if not found:
        if required:
            raise bad_request(f"Missing required parameter: '{name}'", param=name)
        return None
    if len(found) > 1:
        raise bad_request(f"'{name}' is given more than once", param=name)
    value = found[0]
    if not isinstance(value, str):
        raise bad_request(f"'{name}' must be a text field, not a file", param=name)
    if len(value) > limit:
        raise bad_request(f"'{name}' is longer than {limit} characters", param=name)
    return value


def _temperature(raw: str | None) -> float:
    """``temperature`` as a number in [0, 1] (0 when absent)."""
    if raw is None:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise bad_request(f"temperature must be a number; got {raw!r}", param="temperature") from None
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise bad_request(f"temperature must be between 0 and 1; got {raw}", param="temperature")
    return value


def _flag(raw: str | None, name: str) -> bool:
    """A boolean form field (``true``/``false``; absent: false)."""
    if raw is None or raw.lower() == "false":
        return False
    if raw.lower() == "true":
        return True
    raise bad_request(f"'{name}' must be true or false; got {raw!r}", param=name)


async def _audio(values: dict[str, list[Any]], max_audio_bytes: int) -> bytes:
    """The ``file`` part's bytes.

    Raises:
        APIError: 400 when it is missing, repeated, not a file, or larger
            than ``max_audio_bytes``.
    """
    found = values.get("file")
    if not found:
        raise bad_request("Missing required parameter: 'file'", param="file")
    if len(found) > 1:
        raise bad_request("'file' is given more than once", param="file")
    upload = found[0]
    if isinstance(upload, str) or not hasattr(upload, "read"):
        raise bad_request("'file' must be a file upload (multipart/form-data), not a text field", param="file")
    size = upload.size if upload.size is not None else None
    if size is not None and size > max_audio_bytes:
        raise APIError(
            400, f"the audio file is {size} bytes; this model takes at most {max_audio_bytes} bytes", param="file"
        )
    data = await upload.read(max_audio_bytes + 1)
    if len(data) > max_audio_bytes:
        raise APIError(
            400, f"the audio file is larger than this model's limit of {max_audio_bytes} bytes", param="file"
        )
    return data
