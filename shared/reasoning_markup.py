"""Which reasoning markup a text shows: the one rule that says whether a
model "can think".

The worker picks its reasoning parser by it (from the chat template, else
the vocabulary's marker tokens, see :mod:`worker.parsers.detect`) and
reports the result in :class:`shared.protocol.Loaded`; the gateway applies
it to the chat template it read itself, so it can tell clients before a
worker has loaded. Pure; imports nothing.
"""

from __future__ import annotations

REASONING_MARKERS: tuple[tuple[str, str], ...] = (
    ("<think>", "think"),
    ("</think>", "think"),
    ("[THINK]", "think_mistral"),
    ("<|channel|>", "harmony"),
)
"""Each marker and the reasoning format it shows, in the order they are
looked for."""


def reasoning_format_in(text: str) -> str | None:
    """The reasoning format of the first of :data:`REASONING_MARKERS` that
    occurs in ``text`` (None if none does)."""
    return next((fmt for marker, fmt in REASONING_MARKERS if marker in text), None)
