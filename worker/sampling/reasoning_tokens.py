"""Following one choice's generated tokens in and out of reasoning blocks.

A reasoning block is opened by one token sequence (``<think>``) and closed
by another (``</think>``); either may be several tokens. The thinking
budget (:func:`worker.sampling.samplers.thinking_budget_processor`) and grammars that
wait for reasoning to end (:func:`worker.sampling.constrained_decoding.after_marker`) both need to
know, token by token, whether a block is open, how long it has run and
where it closed: :class:`ReasoningBlock` is that one piece of state. No MLX;
used on the scheduler thread, one instance per choice.
"""

from __future__ import annotations


def ends_with(tokens: list[int], suffix: tuple[int, ...]) -> bool:
    """Whether ``tokens`` ends with the non-empty ``suffix``."""
    return bool(suffix) and len(tokens) >= len(suffix) and tuple(tokens[-len(suffix) :]) == suffix


class ReasoningBlock:
    """Whether a reasoning block is open, fed one generated token at a time.

    ``open_ids`` (empty: blocks never (re)open) and ``close_ids`` are the
    markers' token ids; ``open_at_start``: the prompt already opened one.
    ``used`` counts the tokens generated inside the open block (the closing
    marker's included).
    """

    def __init__(self, open_ids: tuple[int, ...], close_ids: tuple[int, ...], open_at_start: bool) -> None:
        self.open_ids = open_ids
        self.close_ids = close_ids
        self.inside = open_at_start
        self.used = 0
        self._recent: list[int] = []
        self._keep = max(len(open_ids), len(close_ids), 1)

    def feed(self, token: int) -> bool:
        """Take the next generated token; True when it completed the closing
        marker of the open block."""
        self._recent = (self._recent + [token])[-self._keep :]
        if self.inside:
            self.used += 1
            if ends_with(self._recent, self.close_ids):
                self.inside = False
                return True
        elif ends_with(self._recent, self.open_ids):
            self.inside, self.used = True, 0
        return False

    def next_close_token(self) -> int:
        """The closing marker's next token, given how much of it the latest
        tokens already wrote."""
        close = self.close_ids
        done = next((k for k in range(len(close) - 1, 0, -1) if ends_with(self._recent, close[:k])), 0)
        return close[done]
