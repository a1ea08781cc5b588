"""Grammar-constrained decoding with llguidance, on any MLX backend.

:class:`GrammarCompiler` (input thread) turns a JSON schema or a Lark
grammar into a validated grammar string, cached by source, and makes one
``LLMatcher`` per choice; the expensive tokenizer conversion happens once per
model. :func:`grammar_processor` (called on the scheduler thread) wraps a
matcher as an mlx-lm logits processor: before every sampling step it feeds
the matcher the token sampled last, asks it for the allowed-token bitmask and
masks the logits with portable MLX ops (bit unpacking and ``mx.where``), so
it runs on Metal and on the CPU backend alike. Each matcher belongs to one
choice of one request.

Pathological inputs are bounded twice: :func:`check_schema_size` refuses
huge or deeply nested schemas before compiling, and llguidance's own
default parser limits (lexer fuel, Earley items per step, lexer states)
turn an explosive grammar or regex into an error instead of a stall.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

GRAMMAR_CACHE_SIZE = 256
"""Compiled grammars kept, least recently used evicted."""


JSON_OPTIONS = {"whitespace_flexible": True, "whitespace_pattern": r"[\x20\x0A\x0D\x09]{0,16}"}
"""JSON layout the grammar allows: pretty-printing as models like to write
it, but at most 16 whitespace characters in a row, so a weak model cannot
spend its whole budget on blank space."""


MAX_SCHEMA_BYTES = 64 * 1024
"""Largest JSON schema accepted, as compact JSON."""

MAX_SCHEMA_DEPTH = 32
"""Deepest nesting of objects and arrays accepted in a JSON schema."""


def check_schema_size(schema: Any) -> None:
    """Refuse schemas too large or too deeply nested to compile quickly.

    Raises:
        GrammarError: naming the limit that was passed.
    """
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise GrammarError(f"the JSON schema is larger than {MAX_SCHEMA_BYTES} bytes")
    stack = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_SCHEMA_DEPTH:
            raise GrammarError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)


class GrammarError(ValueError):
    """The schema or grammar is invalid or unsupported; the message says why."""


class GrammarCompiler:
    """Compiles grammars for one model's tokenizer.

    ``hf_tokenizer`` is a Hugging Face fast tokenizer; ``eos_token_id`` the
    token that ends a constrained output; ``vocab_size`` the width of the
    model's logits. Thread-safe: the tokenizer is built once under a lock.
    """

    def __init__(self, hf_tokenizer: Any, eos_token_id: int, vocab_size: int) -> None:
        self._hf = hf_tokenizer
        self._eos = eos_token_id
        self.vocab_size = vocab_size
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._cache: OrderedDict[str, str] = OrderedDict()

    def _lltokenizer(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                import llguidance.hf

                self._tokenizer = llguidance.hf.from_tokenizer(self._hf, eos_token=self._eos)
            return self._tokenizer

    def warm(self) -> None:
        """Build the llguidance tokenizer now (about a second) so the first
        constrained request does not wait for it; safe from any thread."""
        self._lltokenizer()

    def json_schema(self, schema: dict[str, Any] | None) -> str:
        """A validated grammar for JSON text matching ``schema`` (None: any
        JSON object).

        Raises:
            GrammarError: the schema is malformed or uses unsupported features.
        """
        schema = {"type": "object"} if schema is None else schema
        check_schema_size(schema)
        key = "json:" + json.dumps(schema, sort_keys=True)

        def build() -> str:
            import llguidance

            try:
                return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_OPTIONS)
            except (ValueError, TypeError) as exc:
                raise GrammarError(f"invalid JSON schema: {exc}") from exc

        return self._compiled(key, build)

    def lark(self, grammar: str) -> str:
        """A validated grammar from Lark source (llguidance dialect).

        Raises:
            GrammarError: the grammar does not compile.
        """

        def build() -> str:
            import llguidance

            return llguidance.LLMatcher.grammar_from_lark(grammar)

        return self._compiled("lark:" + grammar, build)

    def _compiled(self, key: str, build: Callable[[], str]) -> str:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        grammar = build()
        import llguidance

        error = llguidance.LLMatcher.validate_grammar(grammar, self._lltokenizer())
        if error:
            raise GrammarError(_first_line(error))
        with self._lock:
            self._cache[key] = grammar
            while len(self._cache) > GRAMMAR_CACHE_SIZE:
                self._cache.popitem(last=False)
        return grammar

    def matcher(self, grammar: str) -> Any:
        """A fresh ``LLMatcher`` for a grammar from :meth:`json_schema` or
        :meth:`lark`.

        Raises:
            GrammarError: the matcher could not be built.
        """
        import llguidance

        matcher = llguidance.LLMatcher(self._lltokenizer(), grammar, log_level=0)
        if matcher.is_error():
            raise GrammarError(_first_line(matcher.get_error()))
        return matcher


_SOURCE_LISTING = re.compile(r"^\s*\d+\s*\|")
_GRAMMAR_POSITION = re.compile(r"^at \d+\(\d+\): ")


def _first_line(message: str) -> str:
    """llguidance's (often multi-line) error as one line of at most 500
    characters: its lines up to the listing of our internal grammar source,
    whitespace collapsed, without a position in that source (neither means
    anything to the client), so a cause on a later line (regex errors) is
    kept."""
    lines = []
    for line in message.strip().splitlines():
        if _SOURCE_LISTING.match(line):
            break
        lines.append(line)
    text = _GRAMMAR_POSITION.sub("", " ".join(" ".join(lines).split()))
    return text[:500] or "invalid grammar"


class _BitUnpacker:
    """Turns llguidance's int32 bitmask words into a boolean vocab mask with
    MLX ops (scheduler thread)."""

    def __init__(self, vocab_size: int) -> None:
        import mlx.core as mx

        ids = mx.arange(vocab_size, dtype=mx.int32)
        self.word = ids // 32
        self.bit = (ids % 32).astype(mx.int32)

    def allowed(self, words: np.ndarray) -> Any:
        import mlx.core as mx

        packed = mx.array(words.reshape(-1).view(np.int32))
        return ((packed[self.word] >> self.bit) & 1).astype(mx.bool_)


_UNPACKERS: dict[int, _BitUnpacker] = {}


def grammar_processor(matcher: Any, prompt_len: int) -> Callable[[Any, Any], Any]:
    """An mlx-lm logits processor enforcing ``matcher`` on one sequence.

    ``prompt_len`` is the number of prompt tokens in the context the engine
    passes in; every later token is fed to the matcher before the next mask
    is computed. If the matcher errs (it cannot, given its own masks, unless
    the engine forces a token) the mask falls back to allowing everything.
    Scheduler thread only.
    """
    import llguidance.numpy as lln
    import mlx.core as mx

    state = {"fed": prompt_len, "words": None}

    def apply(tokens: Any, logits: Any) -> Any:
        vocab = logits.shape[-1]
        total = tokens.shape[0]
        if total > state["fed"]:
            new = tokens[state["fed"] :].tolist()
            matcher.consume_tokens([int(t) for t in new])
            state["fed"] = total
        if matcher.is_error():
            return logits
        if state["words"] is None:
            state["words"] = lln.allocate_token_bitmask(1, vocab)
        lln.fill_next_token_bitmask(matcher, state["words"])
        unpacker = _UNPACKERS.get(vocab)
        if unpacker is None:
            unpacker = _UNPACKERS[vocab] = _BitUnpacker(vocab)
        allowed = unpacker.allowed(state["words"])
        return mx.where(allowed, logits, mx.array(-float("inf"), dtype=logits.dtype))

    return apply


def after_marker(
    make: Callable[[int], Callable[[Any, Any], Any]], prompt_len: int, marker: tuple[int, ...]
) -> Callable[[Any, Any], Any]:
    """A logits processor that leaves the logits alone until the generated
    tokens close the reasoning block the prompt opened (``marker``: the
    closing tokens), then hands every step to ``make(start)``, a processor
    built for a context whose constrained part starts at ``start`` (the
    first token after the marker). ``prompt_len``: tokens of the prompt in
    the engine's context. Stateful: one per choice; scheduler thread only.
    """
    from worker.sampling.reasoning_tokens import ReasoningBlock

    block = ReasoningBlock((), marker, open_at_start=True)
    state: dict[str, Any] = {"seen": prompt_len, "inner": None}

    def apply(tokens: Any, logits: Any) -> Any:
        if state["inner"] is None:
            total = tokens.shape[0]
            for token in tokens[state["seen"] :].tolist() if total > state["seen"] else []:
                state["seen"] += 1
                if block.feed(int(token)):
                    state["inner"] = make(state["seen"])
                    break
            if state["inner"] is None:
                return logits
        return state["inner"](tokens, logits)

    return apply
