"""Turning a ``GenerateRequest`` into token ids, on the worker's input thread.

Chat templates are rendered by the tokenizer (transformers renders them in a
sandboxed Jinja environment); nothing here touches MLX, so the scheduler
thread never waits on templating or tokenization.
"""

from __future__ import annotations

import time
from typing import Any

from shared.protocol import ErrorKind, GenerateRequest
from worker.scheduler import Admission


class PromptError(Exception):
    """The request cannot be admitted; ``kind`` classifies it for the client."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message


class PromptBuilder:
    """Tokenizes requests for one model.

    ``context_length`` caps prompt plus completion tokens;
    ``default_max_tokens`` caps completions that set no ``max_tokens``.
    ``vocab_size`` bounds token ids in prompts and logit biases.
    Safe to use from one thread at a time (the input thread).
    """

    def __init__(
        self, tokenizer: Any, *, context_length: int, default_max_tokens: int, vocab_size: int
    ) -> None:
        self._tokenizer = tokenizer
        self.context_length = context_length
        self.default_max_tokens = default_max_tokens
        self.vocab_size = vocab_size

    def build(self, request: GenerateRequest) -> Admission:
        """Return the admission for ``request``.

        Raises:
            PromptError: ``invalid_request`` for a prompt that renders to no
                tokens, an out-of-vocabulary token id, or a template failure;
                ``context_length_exceeded`` when the prompt plus
                ``max_tokens`` does not fit the context.
        """
        ids = self._tokens(request)
        if not ids:
            raise PromptError("invalid_request", "the prompt is empty after tokenization")
        self._check_ids(ids, "prompt token")
        self._check_ids(list(request.sampling.logit_bias), "logit_bias token")
        if request.n < 1:
            raise PromptError("invalid_request", "n must be at least 1")
        if request.sampling.top_logprobs < 0:
            raise PromptError("invalid_request", "top_logprobs must not be negative")
        return Admission(
            request_id=request.request_id,
            prompt=ids,
            max_tokens=self._max_tokens(len(ids), request.sampling.max_tokens),
            params=request.sampling,
            n=request.n,
            deadline=time.monotonic() + request.timeout if request.timeout else None,
        )

    def _tokens(self, request: GenerateRequest) -> list[int]:
        if request.prompt_token_ids is not None:
            return list(request.prompt_token_ids)
        if request.prompt is not None:
            return list(self._tokenizer.encode(request.prompt))
        messages = [
            {"role": m.role, "content": m.content, **({"name": m.name} if m.name else {})}
            for m in request.messages or []
        ]
        try:
            text = self._tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # template errors are the request's fault
            raise PromptError("invalid_request", f"chat template failed: {exc}") from exc
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def _check_ids(self, ids: list[int], what: str) -> None:
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise PromptError(
                "invalid_request", f"{what} id {bad} is outside the vocabulary (0..{self.vocab_size - 1})"
            )

    def _max_tokens(self, prompt_len: int, requested: int | None) -> int:
        room = self.context_length - prompt_len
        if requested is None:
            if room < 1:
                raise PromptError(
                    "context_length_exceeded",
                    f"This model's maximum context length is {self.context_length} tokens; "
                    f"the prompt has {prompt_len} tokens, leaving no room for a completion.",
                )
            return min(self.default_max_tokens, room)
        if requested > room:
            raise PromptError(
                "context_length_exceeded",
                f"This model's maximum context length is {self.context_length} tokens. "
                f"However, you requested {prompt_len + requested} tokens "
                f"({prompt_len} in the prompt, {requested} for the completion).",
            )
        return requested
