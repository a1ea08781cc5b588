"""Whisper's timestamp rules, owned here, and the batched window decode that uses them.

Whisper writes a window's transcript as ``<|t0|> text <|t1|><|t1|> text
<|t2|>...``: every segment opens and closes with a timestamp token. The
decoding rules of OpenAI's Whisper keep that shape while sampling
(:class:`TimestampRules`, applied to each step's logits after the other
filters):

1. ``<|notimestamps|>`` is never sampled (timestamps are on).
2. Timestamps come in pairs: after a closing pair (two timestamps, or a
   timestamp first in the window) the next token is text; after text and
   one timestamp the next is a timestamp or end of text.
3. Timestamps never decrease: a timestamp below the last one sampled is
   masked, and so is one equal to it unless it opens the segment right
   after the one that closed (so every segment has a nonzero length).
4. The first token is a timestamp, at most ``max_initial_timestamp``
   (1 s) into the window.
5. When the timestamps together are likelier than the likeliest text
   token (after 1-4), a timestamp is sampled.

and one rule of ours:

6. No timestamp past the window's audio: the last window of a file is
   padded to 30 s with silence, and a timestamp there would put a segment
   (and an SRT cue) after the file's end. Each row of a batch carries its
   own bound; end of text stays available, so a row is never fully masked.

Why here: mlx-audio 0.6.2's ``ApplyTimestampRules`` gets rule 3 wrong (it
collects the *positions* of the timestamps in the sequence instead of the
timestamp tokens, so the mask is a slice below ``timestamp_begin`` and
empty), and computes rule 5 on the logits before 1-4 were applied. Greedy
decoding of real speech rarely notices; sampled decoding (``temperature``
above 0, and the fallback temperatures) produces segments that end before
they start. docs/api/transcription.md has the minimal reproduction.

:func:`decode_windows` runs the library's ``DecodingTask`` (one encoder
pass and one lockstep loop for the batch) with :class:`TimestampRules` in
place of the library's filter, and with the encoder run in the model's own
dtype (the library accepts only float16 or float32 features, so a
bfloat16 Whisper failed there).

Scheduler thread only (MLX).
"""

from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np


class TimestampRules:
    """The rules of the module docstring as a logit filter of the library's
    decoding loop (its ``LogitFilter`` interface: ``apply(logits, tokens)``).

    ``tokenizer`` the library's Whisper tokenizer; ``sample_begin`` the
    length of the initial tokens (prompt and start sequence) in every row;
    ``max_initial_index`` the largest first timestamp (index, 0.02 s each;
    None: no bound); ``last_index`` the largest timestamp index of each
    row's window (its audio), or None for no bound.
    """

    def __init__(
        self,
        tokenizer: Any,
        sample_begin: int,
        max_initial_index: int | None,
        last_index: Sequence[int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.sample_begin = sample_begin
        self.max_initial_index = max_initial_index
        self.last_index = None if last_index is None else list(last_index)

    def apply(self, logits: Any, tokens: Any) -> Any:
        """``logits`` (rows x vocabulary) with the tokens the rules forbid
        after ``tokens`` (rows x sequence so far) set to minus infinity."""
        import mlx.core as mx

        begin = self.tokenizer.timestamp_begin
        eot = self.tokenizer.eot
        mask = np.zeros(logits.shape, np.float32)
        if self.tokenizer.no_timestamps is not None:
            mask[:, self.tokenizer.no_timestamps] = -np.inf
        rows = tokens.tolist()
        for k, row in enumerate(rows):
            seq = row[self.sample_begin :]
            last_was_stamp = len(seq) >= 1 and seq[-1] >= begin
            penultimate_was_stamp = len(seq) < 2 or seq[-2] >= begin
            if last_was_stamp:
                if penultimate_was_stamp:
                    mask[k, begin:] = -np.inf
                else:
                    mask[k, :eot] = -np.inf
            stamps = [token for token in seq if token >= begin]
            if stamps:
                lowest = stamps[-1] if last_was_stamp and not penultimate_was_stamp else stamps[-1] + 1
                mask[k, begin:lowest] = -np.inf
            if not seq:
                mask[k, :begin] = -np.inf
                if self.max_initial_index is not None:
                    mask[k, begin + self.max_initial_index + 1 :] = -np.inf
            if self.last_index is not None:
                mask[k, begin + self.last_index[k] + 1 :] = -np.inf
        masked = logits + mx.array(mask)
        logprobs = masked - mx.logsumexp(masked, axis=-1, keepdims=True)
        stamp_mass = mx.logsumexp(logprobs[:, begin:], axis=-1, keepdims=True)
        best_text = logprobs[:, :begin].max(axis=-1, keepdims=True)
        text = mx.where(stamp_mass > best_text, -mx.inf, masked[:, :begin])
        return mx.concatenate([text, masked[:, begin:]], axis=-1)


def decode_windows(model: Any, mel: Any, options: Any, last_index: Sequence[int] | None = None) -> list[Any]:
    """Decode a batch of windows (``mel``: windows x frames x mels, in the
    model's dtype) with the library's ``DecodingOptions`` ``options``; the
    library's ``DecodingResult`` per window. ``last_index``: each window's
    largest timestamp index (rule 6), None for no bound."""
    from mlx_audio.stt.models.whisper.decoding import ApplyTimestampRules

    task = _task_class()(model, options)
    task.logit_filters = [
        TimestampRules(f.tokenizer, f.sample_begin, f.max_initial_timestamp_index, last_index)
        if isinstance(f, ApplyTimestampRules)
        else f
        for f in task.logit_filters
    ]
    return task.run(mel)


@functools.cache
def _task_class() -> type:
    """The library's ``DecodingTask`` with the encoder run in the model's
    dtype (built on first use: mlx-audio imports MLX)."""
    from mlx_audio.stt.models.whisper.decoding import DecodingTask

    class Task(DecodingTask):
        """``DecodingTask`` whose audio features keep the model's dtype."""

        def _get_audio_features(self, mel: Any) -> Any:
            dims = self.model.dims
            if mel.shape[-2:] == (dims.n_audio_ctx, dims.n_audio_state):
                return mel
            return self.model.encoder(mel.astype(self.model.dtype))

    return Task
