"""Prompt-end and message-boundary checkpoints for caches that cannot be trimmed.

For a model whose cache cannot be trimmed (state-space layers, sliding
windows; see :mod:`worker.caches.profile`) a finished sequence's state only
helps a prompt that continues exactly where it ended. So the scheduler
inserts such a prompt in segments (mlx-lm's ``insert_segments``) ending at
the last message boundary and at the prompt's last-but-one token, and
:class:`PromptCheckpoints` copies the state at each segment end into the
prefix cache. An exact repeat, a retry and the next turn of a chat then
continue from one of them.

Threads: used by the scheduler thread only (it reads engine caches).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Container

from worker.messages import Admission

if TYPE_CHECKING:  # engine and cache types only; both load MLX
    from worker.caches.prefix import PrefixCache
    from worker.engine.batch_engine import BatchEngine


class PromptCheckpoints:
    """The checkpoint marks of the sequences being prefilled.

    ``enabled``: keep checkpoints at all (False: :meth:`marks_for` is
    always empty and nothing is tracked).
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._marks: dict[int, tuple[list[int], int, set[int]]] = {}

    def __bool__(self) -> bool:
        """True while some sequence still has a mark ahead of it."""
        return bool(self._marks)

    def marks_for(self, adm: Admission, done: int) -> set[int]:
        """Prompt positions (beyond the reused ``done`` tokens) whose state
        becomes a checkpoint: the message boundaries and the prompt's
        last-but-one token (empty when checkpoints are off)."""
        if not self.enabled:
            return set()
        end = len(adm.prompt) - 1
        return {b for b in (*adm.boundaries, end) if done < b <= end}

    @staticmethod
    def segments(remaining: list[int], done: int, marks: set[int]) -> list[list[int]]:
        """``remaining`` (the prompt from position ``done``) cut at every
        mark, so the engine stops at each one (mlx-lm then splits off the
        last token as a segment of its own)."""
        segments, start = [], 0
        for mark in sorted(marks):
            cut = mark - done
            if start < cut < len(remaining):
                segments.append(remaining[start:cut])
                start = cut
        segments.append(remaining[start:])
        return segments

    def track(self, uid: int, prompt: list[int], done: int, marks: set[int]) -> None:
        """Watch sequence ``uid`` (``prompt``, reused up to ``done``) for
        ``marks`` (nothing when ``marks`` is empty)."""
        if marks:
            self._marks[uid] = (prompt, done, marks)

    def forget(self, uid: int) -> None:
        """Stop watching ``uid`` (it finished or left the engine)."""
        self._marks.pop(uid, None)

    def take(self, progress: list[Any], live: Container[int], engine: BatchEngine, cache: PrefixCache) -> None:
        """Copy into ``cache`` the state of every sequence whose prefill
        reached one of its marks in the step that returned ``progress``
        (sequences not in ``live`` any more are dropped)."""
        for r in progress:
            entry = self._marks.get(r.uid)
            if entry is None:
                continue
            if r.end_of_prompt or r.uid not in live:
                del self._marks[r.uid]
                continue
            prompt, done, marks = entry
            position = done + r.progress[0]
            if not r.end_of_segment or position not in marks:
                continue
            found = engine.extract_cache([r.uid]).get(r.uid)
            if found is not None:
                cache.insert(prompt[:position], found[0])
