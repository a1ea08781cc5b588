"""Whisper's timestamp rules (:mod:`worker.transcription.decoding`) and the
times they give a transcript.

- the rules on hand-made logits over a ten-token toy vocabulary: each rule
  of the module docstring, and the mlx-audio ``ApplyTimestampRules``
  defect it replaces (a decreasing timestamp left open);
- eight sampled transcriptions (at once, so their windows share
  decodes) of a 64-second file by a tiny random Whisper:
  every segment and word starts at or after the previous one's end, ends
  at or after its own start, and lies inside the audio.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np
import pytest

from shared.protocol import RequestOutput
from tests.tiny_whisper import speak, tiny_whisper
from worker.messages import Stop
from worker.transcription.audio import SAMPLE_RATE, decode_audio
from worker.transcription.decoding import TimestampRules
from worker.transcription.model import load_whisper
from worker.transcription.scheduler import TranscribeJob, TranscriptionScheduler

TEXT = list(range(10))
EOT, NO_TIMESTAMPS, BEGIN = 10, 11, 12
VOCAB = 20
START = [9]  # the initial tokens (sample_begin = 1)


@dataclass
class Toy:
    """The attributes of the library's tokenizer the rules read."""

    eot: int = EOT
    no_timestamps: int = NO_TIMESTAMPS
    timestamp_begin: int = BEGIN


def stamp(index: int) -> int:
    return BEGIN + index


def allowed(rules, sampled: list[int], logits: list[float] | None = None) -> set[int]:
    """The tokens ``rules`` leave open after ``sampled`` (by default with
    text likelier than any timestamp, so rule 5 keeps out of the way)."""
    row = mx.array([logits or TEXT_LIKELIER])
    out = rules.apply(row, mx.array([START + sampled])).tolist()[0]
    return {token for token, value in enumerate(out) if value != float("-inf")}


def ours(last_index: int | None = None, max_initial: int | None = 3) -> TimestampRules:
    return TimestampRules(Toy(), len(START), max_initial, None if last_index is None else [last_index])


STAMPS = set(range(BEGIN, VOCAB))
TEXT_LIKELIER = [5.0] * BEGIN + [0.0] * (VOCAB - BEGIN)


def test_first_token_is_an_early_timestamp():
    assert allowed(ours(), []) == {stamp(i) for i in range(4)}
    assert allowed(ours(max_initial=None), []) == STAMPS


def test_timestamps_come_in_pairs():
    text_or_end = set(TEXT) | {EOT}
    # after a closed pair (or the first timestamp): text, end, or a later timestamp
    assert allowed(ours(), [stamp(2)]) == text_or_end
    assert allowed(ours(), [stamp(2), 4, stamp(5), stamp(5)]) == text_or_end
    # after text and one timestamp: a timestamp (the next segment's start) or end of text
    assert allowed(ours(), [stamp(2), 4, stamp(5)]) == {EOT} | {stamp(i) for i in range(5, 8)}


def test_timestamps_never_decrease_and_segments_are_not_empty():
    # inside a segment the closing timestamp is after the opening one
    assert allowed(ours(), [stamp(2), 4]) == set(TEXT) | {EOT} | {stamp(i) for i in range(3, 8)}
    assert allowed(ours(), [stamp(2), 4, stamp(5), stamp(5), 6]) == set(TEXT) | {EOT, stamp(6), stamp(7)}


def test_no_timestamp_past_the_windows_audio():
    assert allowed(ours(last_index=4), [stamp(1), 4]) == set(TEXT) | {EOT} | {stamp(i) for i in range(2, 5)}
    # when the audio is used up, end of text stays open
    assert allowed(ours(last_index=4), [stamp(1), 4, stamp(4)]) == {EOT, stamp(4)}
    assert allowed(ours(last_index=4), [stamp(1), 4, stamp(4), stamp(4), 5]) == set(TEXT) | {EOT}
    # each row its own bound
    rules = TimestampRules(Toy(), len(START), None, [2, 6])
    out = rules.apply(mx.array([TEXT_LIKELIER] * 2), mx.array([START + [stamp(0), 1]] * 2)).tolist()
    assert [{t for t in range(BEGIN, VOCAB) if row[t] != float("-inf")} for row in out] == [
        {stamp(1), stamp(2)},
        {stamp(i) for i in range(1, 7)},
    ]


def test_likelier_timestamps_win_over_text_counting_only_open_ones():
    """Rule 5 weighs the timestamps still open: after ``<|0.20|> 4`` the
    likely ``<|0.00|>`` and ``<|0.02|>`` are masked, so the text stays."""
    logits = list(TEXT_LIKELIER)
    logits[BEGIN] = logits[BEGIN + 1] = 9.0
    assert allowed(ours(), [stamp(2), 4], logits) == set(TEXT) | {EOT} | {stamp(i) for i in range(3, 8)}
    logits[stamp(6)] = 9.0
    assert allowed(ours(), [stamp(2), 4], logits) == {stamp(i) for i in range(3, 8)}


def test_the_library_rule_it_replaces_lets_timestamps_decrease():
    """The reproduction of docs/api/transcription.md: mlx-audio's
    ``ApplyTimestampRules`` leaves ``<|0.00|>`` open after ``<|0.10|> 4``."""
    from mlx_audio.stt.models.whisper.decoding import ApplyTimestampRules

    library = ApplyTimestampRules(Toy(), len(START), 3)
    assert stamp(0) in allowed(library, [stamp(5), 4])
    assert stamp(0) not in allowed(ours(), [stamp(5), 4])


# --- sampled transcripts of a random model -------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):
    return load_whisper(str(tiny_whisper(tmp_path_factory.mktemp("tiny") / "whisper")))


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    """About 64 s of speech and silence: three windows, the last partial."""
    root = tmp_path_factory.mktemp("clips")
    parts = [decode_audio(speak(text, root / f"{i}.wav").read_bytes(), 0) for i, text in enumerate(SENTENCES)]
    gap = np.zeros(SAMPLE_RATE * 3, np.float32)
    clip = np.concatenate([piece for part in parts for piece in (part, gap)] * 4)
    assert 55 * SAMPLE_RATE < len(clip) < 75 * SAMPLE_RATE
    return clip


SENTENCES = ("Good morning. How are you today?", "The weather is nice.", "Please send me the report.")


def transcribe(model, jobs: list[TranscribeJob]) -> dict[str, RequestOutput]:
    """Run ``jobs`` together on a scheduler on this thread; each terminal."""
    ends: dict[str, RequestOutput] = {}

    def emit(message) -> None:
        for output in message.outputs:
            if output.finish_reason is not None:
                ends[output.request_id] = output
        if len(ends) == len(jobs):
            scheduler.submit(Stop())

    scheduler = TranscriptionScheduler(model, emit, max_batch_size=8)
    for job in jobs:
        scheduler.submit(job)
    scheduler.run()
    return ends


def in_order(spans: list[tuple[float, float]], duration: float) -> list[str]:
    """What is wrong with ``spans`` (start, end) as consecutive times in
    ``duration`` seconds of audio (empty: nothing)."""
    faults = []
    for i, (start, end) in enumerate(spans):
        if not 0.0 <= start <= end <= duration + 1e-6:
            faults.append(f"#{i} ({start}, {end}) outside 0 <= start <= end <= {duration}")
        if i and start < spans[i - 1][1] - 1e-6:
            faults.append(f"#{i} starts at {start}, before #{i - 1} ends ({spans[i - 1][1]})")
    return faults


def test_sampled_transcripts_keep_time_order(tiny, long_clip):
    """Eight sampled transcriptions at once (half with words, a quarter
    translations) of a 64 s file: segments and words in order and inside
    the audio. The random model's logits are far more peaked than a
    trained one's, so it samples at temperature 4 to spread its choices
    the way a real Whisper does at 1 (at 4, mlx-audio's own rules give
    about two faults a request here)."""
    mx.random.seed(7)
    jobs = [
        TranscribeJob(
            f"r{i}",
            long_clip,
            task="translate" if i % 4 == 3 else "transcribe",
            language="de" if i % 4 == 3 else "en",
            temperature=4.0,
            words=i % 2 == 1,
        )
        for i in range(8)
    ]
    faults = []
    segments = 0
    for request_id, end in transcribe(tiny, jobs).items():
        transcript = end.transcript
        assert transcript is not None, end.error
        duration = transcript.duration
        spans = [(s.start, s.end) for s in transcript.segments]
        words = [(w.start, w.end) for s in transcript.segments for w in s.words]
        segments += len(spans)
        faults += [f"{request_id} segment {f}" for f in in_order(spans, duration)]
        faults += [f"{request_id} word {f}" for f in in_order(words, duration)]
        assert not transcript.text.startswith(" ")
    assert segments >= 16
    assert faults == [], "\n".join(faults)
