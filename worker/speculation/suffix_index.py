"""An n-gram index over token sequences, for drafting from what was seen.

:class:`TokenIndex` holds token sequences (each under an integer id) and,
for each of its ``orders`` (n-gram lengths, longest first), where every
n-gram of them ends. :meth:`TokenIndex.match` finds the places whose
preceding tokens agree longest with a context's end (a suffix match, as a
suffix tree finds it, looked up through the n-gram and then extended
backwards) and returns the tokens that followed there: the draft.

Sequences grow at their end (:meth:`TokenIndex.extend`), so a running
row's own history is indexed a few tokens per step; a finished row's
sequence stays as an earlier request's (:meth:`TokenIndex.settle`, which
also drops earlier sequences it repeats from its start: the previous turn
of a conversation that the next turn's prompt re-sends). With a
``budget`` the index keeps at most about that many tokens: growing past
it drops the oldest settled sequences first (running rows' sequences are
never dropped). Sequences carry a ``scope`` (an API key's name, or
``""``) and a match only looks at sequences of the context's own scope,
so drafts never carry one tenant's text into another's output.

Memory: an n-gram's places are keyed by a hash of (scope, n, tokens) and
stored as packed ints, about 150 bytes per token and order; a place is
checked against the context's tokens before it is used, so a hash
collision costs a look, never a wrong draft (a wrong draft would only be
rejected anyway).

Pure Python; used on the scheduler thread only.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict

CANDIDATES = 8
"""Most recent places of one n-gram compared per match (older ones of a
very common n-gram are not looked at)."""

EXTEND = 32
"""Most tokens a candidate's agreement is extended backwards past its
n-gram when candidates are ranked."""

_SHIFT = 32
_LOW = (1 << _SHIFT) - 1


class _Sequence:
    __slots__ = ("live", "scope", "tokens")

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.tokens = array("l")
        self.live = True


class TokenIndex:
    """Sequences of tokens by id (non-negative ints below 2**31), indexed by
    their n-grams of each length in ``orders``; at most about ``budget``
    tokens of settled sequences held (0: no bound)."""

    def __init__(self, orders: tuple[int, ...] = (4, 2), budget: int = 0) -> None:
        self.orders = tuple(sorted(set(orders), reverse=True))
        self.budget = budget
        self.tokens = 0
        self._seqs: OrderedDict[int, _Sequence] = OrderedDict()
        self._places: dict[int, list[int]] = {}

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def __len__(self) -> int:
        return len(self._seqs)

    def sequence(self, seq_id: int) -> array:
        """The tokens held under ``seq_id`` (KeyError when none)."""
        return self._seqs[seq_id].tokens

    def extend(self, seq_id: int, tokens: list[int] | array, scope: str = "") -> None:
        """Append ``tokens`` to the running sequence ``seq_id`` (created, in
        ``scope``, when new; an existing sequence keeps its scope) and index
        the n-grams that now end in them."""
        seq = self._seqs.get(seq_id)
        if seq is None:
            seq = self._seqs[seq_id] = _Sequence(scope)
        held = seq.tokens
        start = len(held)
        held.extend(tokens)
        self.tokens += len(held) - start
        places = self._places
        tag = seq_id << _SHIFT
        for n in self.orders:
            for end in range(max(start, n - 1) + 1, len(held) + 1):
                key = hash((seq.scope, n, *held[end - n : end]))
                found = places.get(key)
                if found is None:
                    places[key] = [tag | end]
                else:
                    found.append(tag | end)
                    if len(found) > 4 * CANDIDATES:
                        del found[: len(found) - CANDIDATES]
        self._shrink()

    def settle(self, seq_id: int) -> None:
        """Sequence ``seq_id`` stops growing (its row finished): it stays as
        an earlier sequence of its scope, may be dropped to keep within the
        budget, and every other settled sequence of its scope that it
        starts with is dropped now."""
        seq = self._seqs.get(seq_id)
        if seq is None:
            return
        seq.live = False
        held = seq.tokens
        repeated = [
            other_id
            for other_id, other in self._seqs.items()
            if other_id != seq_id
            and not other.live
            and other.scope == seq.scope
            and len(other.tokens) <= len(held)
            and held[: len(other.tokens)] == other.tokens
        ]
        for other_id in repeated:
            self.drop(other_id)
        self._shrink()

    def drop(self, seq_id: int) -> None:
        """Forget sequence ``seq_id`` and its n-grams (nothing when unknown)."""
        seq = self._seqs.pop(seq_id, None)
        if seq is None:
            return
        held = seq.tokens
        self.tokens -= len(held)
        places = self._places
        for n in self.orders:
            for end in range(n, len(held) + 1):
                key = hash((seq.scope, n, *held[end - n : end]))
                found = places.get(key)
                if found is None:
                    continue
                kept = [p for p in found if p >> _SHIFT != seq_id]
                if kept:
                    places[key] = kept
                else:
                    del places[key]

    def _shrink(self) -> None:
        """Drop the oldest settled sequences while over the budget."""
        if not self.budget or self.tokens <= self.budget:
            return
        for seq_id in [i for i, s in self._seqs.items() if not s.live]:
            if self.tokens <= self.budget:
                break
            self.drop(seq_id)

    def match(self, context: list[int], limit: int, scope: str = "") -> tuple[int, list[int]]:
        """The best draft for ``context`` from sequences of ``scope``: for
        the longest order whose n-gram (``context``'s last n tokens) occurs
        with at least one token after it, the place whose preceding tokens
        agree with ``context`` longest (up to n + :data:`EXTEND`; a tie goes
        to the place with more tokens after it, then to the more recent).
        Returns how many tokens agreed and up to ``limit`` tokens that
        followed; ``(0, [])`` when nothing matches or ``limit`` < 1."""
        if limit < 1:
            return 0, []
        for n in self.orders:
            if len(context) < n:
                continue
            tail = context[-n:]
            found = self._places.get(hash((scope, n, *tail)))
            if not found:
                continue
            best: tuple[int, int, int] | None = None
            best_place: tuple[array, int] | None = None
            for rank, place in enumerate(reversed(found[-CANDIDATES:])):
                seq = self._seqs.get(place >> _SHIFT)
                end = place & _LOW
                if seq is None or seq.scope != scope:
                    continue
                held = seq.tokens
                follow = min(limit, len(held) - end)
                if follow < 1 or list(held[end - n : end]) != tail:
                    continue
                agree = n + _agreement(held, end - n, context, len(context) - n, EXTEND)
                score = (agree, follow, -rank)
                if best is None or score > best:
                    best, best_place = score, (held, end)
            if best is not None and best_place is not None:
                held, end = best_place
                return best[0], list(held[end : end + limit])
        return 0, []


def _agreement(held: array, at: int, context: list[int], ctx_at: int, most: int) -> int:
    """How many tokens before ``held[at]`` equal those before
    ``context[ctx_at]``, reading backwards, at most ``most``."""
    count = 0
    while count < most and at - count > 0 and ctx_at - count > 0:
        if held[at - count - 1] != context[ctx_at - count - 1]:
            break
        count += 1
    return count
