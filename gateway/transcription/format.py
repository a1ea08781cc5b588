"""The answers of the speech-to-text endpoints, from a worker's :class:`~shared.protocol.Transcript`.

- ``json``: ``{"text", "usage": {"type": "duration", "seconds"}}``
  (OpenAI's ``Transcription``; translations: ``{"text"}``);
- ``text``: the text alone, ``text/plain``;
- ``srt`` / ``vtt``: one cue per non-empty segment, SubRip
  (``00:00:01,000``) and WebVTT (``00:00:01.000``) times;
- ``verbose_json``: ``task``, ``language`` (English name, lower case;
  ``english`` for translations), ``duration``, ``text``, ``segments``
  (unless only ``word`` granularity was asked) and, with ``word``,
  ``words``; transcriptions add ``usage``;
- stream events: ``transcript.text.delta`` (``delta``) per decoded window
  and one ``transcript.text.done`` (``text``).

Pure functions; no I/O.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared.protocol import Transcript

_encoder = msgspec.json.Encoder()


def render(transcript: Transcript, response_format: str, task: str, granularities: list[str]) -> tuple[bytes, str]:
    """The body and media type of an answer in ``response_format``."""
    if response_format == "text":
        return transcript.text.encode(), "text/plain; charset=utf-8"
    if response_format == "srt":
        return _cues(transcript, srt=True).encode(), "application/x-subrip; charset=utf-8"
    if response_format == "vtt":
        return _cues(transcript, srt=False).encode(), "text/vtt; charset=utf-8"
    usage = {"type": "duration", "seconds": transcript.duration}
    if response_format == "json":
        body: dict[str, Any] = {"text": transcript.text}
        if task == "transcribe":
            body["usage"] = usage
        return _encoder.encode(body), "application/json"
    body = {"task": task, "language": transcript.language, "duration": transcript.duration, "text": transcript.text}
    if granularities != ["word"]:
        body["segments"] = [segment_json(s) for s in transcript.segments]
    if "word" in granularities:
        body["words"] = [
            {"word": w.word.strip(), "start": w.start, "end": w.end} for s in transcript.segments for w in s.words
        ]
    if task == "transcribe":
        body["usage"] = usage
    return _encoder.encode(body), "application/json"


def segment_json(segment: Any) -> dict[str, Any]:
    """One segment as OpenAI's ``TranscriptionSegment``."""
    return {
        "id": segment.id,
        "seek": segment.seek,
        "start": segment.start,
        "end": segment.end,
        "text": segment.text,
        "tokens": segment.tokens,
        "temperature": segment.temperature,
        "avg_logprob": segment.avg_logprob,
        "compression_ratio": segment.compression_ratio,
        "no_speech_prob": segment.no_speech_prob,
    }


def delta_event(text: str) -> dict[str, Any]:
    """A ``transcript.text.delta`` event."""
    return {"type": "transcript.text.delta", "delta": text}


def done_event(text: str) -> dict[str, Any]:
    """The ``transcript.text.done`` event."""
    return {"type": "transcript.text.done", "text": text}


def timestamp(seconds: float, srt: bool) -> str:
    """``HH:MM:SS,mmm`` (SubRip) or ``HH:MM:SS.mmm`` (WebVTT)."""
    millis = max(0, round(seconds * 1000))
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{',' if srt else '.'}{millis:03d}"


def _cues(transcript: Transcript, srt: bool) -> str:
    """SubRip or WebVTT text of the non-empty segments."""
    lines = [] if srt else ["WEBVTT", ""]
    number = 0
    for segment in transcript.segments:
        text = segment.text.strip()
        if not text:
            continue
        number += 1
        if srt:
            lines.append(str(number))
        lines.append(f"{timestamp(segment.start, srt)} --> {timestamp(segment.end, srt)}")
        lines.extend([text, ""])
    return "\n".join(lines) + ("\n" if lines and lines[-1] != "" else "")
