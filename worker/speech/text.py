"""Text to phonemes for Kokoro, split into the chunks the scheduler synthesises.

G2P (grapheme to phoneme) is espeak-ng through misaki's ``EspeakG2P``, with
the library and its data from the ``espeakng-loader`` wheel: offline, no
spaCy, no torch, no model download. (mlx-audio's ``KokoroPipeline`` uses
misaki's English dictionaries with spaCy for ``a``/``b`` voices, which pull
torch and download a spaCy model; its other languages use espeak as here.)

The language follows Kokoro's voice naming: a voice's first letter picks it
(``a`` American English, ``b`` British English, ``e`` Spanish, ``f``
French, ``h`` Hindi, ``i`` Italian, ``p`` Brazilian Portuguese); other
names read as American English. Japanese (``j``) and Mandarin (``z``)
voices need misaki's own G2P for those languages, which mlxd does not
install: such a voice is refused.

Chunks: the text is cut at line breaks and after sentence punctuation; each
piece is phonemized, and a piece whose phonemes exceed the model's limit is
cut again at word (space) boundaries. Each chunk is synthesised on its own
(Kokoro is one sequence at a time), which is what lets a stream send audio
as it is made and lets the scheduler interleave requests.

Threads: the worker's input thread (no MLX).
"""

from __future__ import annotations

import re
import threading

ESPEAK_LANGUAGES = {"a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}
"""espeak-ng language per Kokoro voice prefix."""

UNSUPPORTED_LANGUAGES = {"j": "Japanese", "z": "Mandarin Chinese"}
"""Voice prefixes whose G2P is not espeak (refused)."""

_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？])\s+|\n+")


class SpeechTextError(ValueError):
    """The text or voice cannot be turned into phonemes; ``field`` is the
    request field at fault."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def language_of(voice: str) -> str:
    """The espeak-ng language for ``voice`` (its first letter, see the module
    docstring; a blend ``a,b`` uses its first voice).

    Raises:
        SpeechTextError: a Japanese or Mandarin voice.
    """
    prefix = voice.split(",")[0][:1].lower()
    if prefix in UNSUPPORTED_LANGUAGES:
        raise SpeechTextError(
            f"voice '{voice}' speaks {UNSUPPORTED_LANGUAGES[prefix]}, whose phonemizer mlxd does not include "
            "(it phonemizes with espeak-ng: English, Spanish, French, Hindi, Italian and Portuguese voices)",
            "voice",
        )
    return ESPEAK_LANGUAGES.get(prefix, "en-us")


class Phonemizer:
    """Turns text into phoneme chunks of at most ``max_phonemes`` symbols
    each, for the voice's language. Thread-safe (one lock around espeak,
    which is not reentrant)."""

    def __init__(self, max_phonemes: int) -> None:
        self.max_phonemes = max_phonemes
        self._g2p: dict[str, object] = {}
        self._lock = threading.Lock()

    def chunks(self, text: str, voice: str) -> list[str]:
        """The phoneme chunks of ``text`` for ``voice``, in order.

        Raises:
            SpeechTextError: the voice's language is not available, or the
                text has nothing to speak (no phonemes at all).
        """
        language = language_of(voice)
        out: list[str] = []
        with self._lock:
            g2p = self._g2p.get(language)
            if g2p is None:
                from misaki.espeak import EspeakG2P

                g2p = self._g2p[language] = EspeakG2P(language=language)
            for piece in _SENTENCE_END.split(text):
                piece = piece.strip()
                if not piece:
                    continue
                phonemes, _ = g2p(piece)  # type: ignore[operator]
                out.extend(split_phonemes(phonemes.strip(), self.max_phonemes))
        if not out:
            raise SpeechTextError("the input has nothing to speak (no words the phonemizer can read)", "input")
        return out


def split_phonemes(phonemes: str, limit: int) -> list[str]:
    """``phonemes`` cut into pieces of at most ``limit`` symbols, at spaces
    where possible (mid-word only for a single word over the limit)."""
    if not phonemes:
        return []
    if len(phonemes) <= limit:
        return [phonemes]
    pieces: list[str] = []
    current = ""
    for word in phonemes.split(" "):
        while len(word) > limit:
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:limit])
            word = word[limit:]
        candidate = f"{current} {word}" if current else word
        if len(candidate) > limit:
            pieces.append(current)
            candidate = word
        current = candidate
    if current:
        pieces.append(current)
    return [p for p in pieces if p.strip()]
