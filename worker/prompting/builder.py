"""Turning a ``GenerateRequest`` into an engine admission, on the worker's
input thread.

This is where a request becomes tokens (chat template, tools), where its
token budget is checked against the context, where grammars for structured
output and forced tool calls are compiled, and where the settings of its
output parsers are fixed. Nothing here touches MLX, so the scheduler thread
never waits on templating, tokenization or grammar compilation.

Around ~500 lines on purpose: one request's steps share the tokenizer, the
context budget and the model's formats, in order; rendering is
:mod:`worker.prompting.chat_render`, formats :mod:`worker.prompting.model_formats`,
images :mod:`worker.vision.inputs`, grammars :mod:`worker.sampling.constrained_decoding`.
"""

from __future__ import annotations

import re
import time
from functools import cached_property
from typing import Any

import msgspec

from shared.model_kind import no_vision_message
from shared.protocol import ChatMessage, ErrorKind, GenerateRequest, ImagePart, SamplingDefaults, Tool
from worker.messages import Admission, OutputSpec, ThinkingBudget, VisionPrompt
from worker.prompting.chat_render import render, template_supports_tools
from worker.prompting.model_formats import ModelFormats
from worker.sampling.constrained_decoding import GrammarCompiler, GrammarError
from worker.sampling.defaults import with_defaults
from worker.vision.images import ImageError
from worker.vision.inputs import ImagePreparer
from worker.vision.markup import UnsupportedProcessor, video_markup

_SENTINEL = re.compile("(\ue000mlxd[0-9a-z.]+\ue001)")
"""Placeholders for client-written contents and images while the template
renders (private-use code points a template does not produce)."""

_IMAGE_KEY = re.compile("\ue000mlxd([iva])(\\d+)\ue001")
"""The placeholder of media part ``k`` of a request, ``i`` for an image,
``v`` for a video, ``a`` for an audio clip (see :func:`protect_contents`)."""


_LETTERS = {"image": "i", "video": "v", "audio": "a"}
"""The placeholder letter of each media part kind (see :data:`_IMAGE_KEY`)."""


def protect_contents(messages: list[ChatMessage]) -> tuple[list[ChatMessage], dict[str, str]]:
    """Replace the content of every non-assistant message with a unique
    placeholder; return the messages and the placeholder -> content map.

    Client-written text must never become control tokens (a user typing
    ``<|im_end|>`` must not end their turn), so it is tokenized apart from
    the template around it. Assistant turns (the model's own earlier output)
    keep their text so templates can rework them. A message with
    ``images`` is protected whatever its role: its text pieces between
    images get placeholders of their own and image ``k`` of the request
    (counting in message order, then by offset) the placeholder
    ``\ue000mlxdi<k>\ue001`` (``v`` for a video, ``a`` for audio; mapped
    to ""), so each image keeps its place in the text; the images are
    then dropped from the message.
    """
    out, originals = [], {}
    image = 0
    for i, message in enumerate(messages):
        if message.images:
            pieces, start = [], 0
            for j, part in enumerate(sorted(message.images, key=lambda p: p.offset)):
                at = min(max(part.offset, start), len(message.content))
                if at > start:
                    key = f"\ue000mlxd{i}.{j}\ue001"
                    originals[key] = message.content[start:at]
                    pieces.append(key)
                key = f"\ue000mlxd{_LETTERS[part.kind]}{image}\ue001"
                originals[key] = ""
                pieces.append(key)
                image += 1
                start = at
            if start < len(message.content):
                key = f"\ue000mlxd{i}.end\ue001"
                originals[key] = message.content[start:]
                pieces.append(key)
            message = msgspec.structs.replace(message, content="".join(pieces), images=None)
        elif message.role != "assistant" and message.content:
            key = f"\ue000mlxd{i}\ue001"
            originals[key] = message.content
            message = msgspec.structs.replace(message, content=key)
        out.append(message)
    return out, originals


def request_images(request: GenerateRequest) -> list[ImagePart]:
    """Every image of ``request``'s messages, in the order
    :func:`protect_contents` numbers them."""
    found: list[ImagePart] = []
    for message in request.messages or []:
        found += sorted(message.images or [], key=lambda p: p.offset)
    return found


FIM_TOKENS = (
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>"),
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"),
)
"""Fill-in-the-middle tokens (prefix, suffix, middle) a vocabulary may
have: StarCoder's (also SantaCoder, StarCoder2) and Qwen2.5-Coder's (also
CodeGemma). The prompt is laid out prefix, suffix, middle (PSM), as
Ollama's templates for these models do."""

NO_FIM = (
    "suffix is not supported: this model's template has no fill-in-the-middle support "
    "(its vocabulary has no <fim_prefix>/<fim_suffix>/<fim_middle> tokens)"
)
"""The refusal of a ``suffix`` for a model without :data:`FIM_TOKENS`."""


def fim_token_ids(tokenizer: Any) -> tuple[int, int, int] | None:
    """The ids of the first :data:`FIM_TOKENS` triple the tokenizer's
    vocabulary has entirely (None: no fill-in-the-middle support)."""
    vocab = getattr(tokenizer, "get_vocab", dict)()
    for names in FIM_TOKENS:
        ids = [vocab.get(name) for name in names]
        if None not in ids:
            return ids[0], ids[1], ids[2]
    return None


class PromptError(Exception):
    """The request cannot be admitted; ``kind`` classifies it for the client
    and ``field`` names the request field at fault, in the worker's terms
    (``prompt``, ``n``, ``logit_bias``, ``response_format``, ``tools``,
    ``tool_choice``, ``thinking``, ``suffix``; None: not one field)."""

    def __init__(self, kind: ErrorKind, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.message = message
        self.field = field


class PromptBuilder:
    """Builds admissions for one model.

    ``context_length`` caps prompt plus completion tokens;
    ``default_max_tokens`` caps completions that set no ``max_tokens``;
    ``vocab_size`` bounds token ids in prompts and logit biases;
    ``grammars`` compiles constraints; ``max_tool_calls_per_turn`` caps the
    calls of a forced turn whose request sets no ``max_tool_calls``;
    ``sampling_defaults`` fill the sampling settings a request leaves unset.
    ``message_boundaries``: find where a chat's last message starts (the
    admission's ``boundaries``; costs one more template render and
    tokenization, worth it for caches that cannot be trimmed).
    ``images``: the model's image preparer (None: a text model, which
    refuses requests with images).
    Used by one thread (the input thread).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        context_length: int,
        default_max_tokens: int,
        vocab_size: int,
        formats: ModelFormats,
        grammars: GrammarCompiler,
        max_tool_calls_per_turn: int = 4,
        sampling_defaults: SamplingDefaults | None = None,
        message_boundaries: bool = False,
        images: ImagePreparer | None = None,
    ) -> None:
        self._tokenizer = tokenizer
        self.images = images
        self._video_ids: tuple[list[int], list[int]] | str = ([], [])
        if images is not None and images.video_layout is not None:
            try:
                self._video_ids = video_markup(tokenizer, images.video_layout)
            except UnsupportedProcessor as exc:
                self._video_ids = str(exc)
        self.message_boundaries = message_boundaries
        self.context_length = context_length
        self.default_max_tokens = default_max_tokens
        self.vocab_size = vocab_size
        self.formats = formats
        self.grammars = grammars
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.sampling_defaults = sampling_defaults or SamplingDefaults()
        self._marker_ids = self._reasoning_marker_ids()

    def _reasoning_marker_ids(self) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The token ids of the reasoning block's open and close markers
        (None when the model's format has no pair of them)."""
        opening, closing = self.formats.reasoning_open_marker, self.formats.reasoning_close_marker
        if not (self.formats.reasoning_format and opening and closing):
            return None
        encode = self._tokenizer.encode
        return tuple(encode(opening, add_special_tokens=False)), tuple(encode(closing, add_special_tokens=False))

    def count(self, request: GenerateRequest) -> int:
        """The number of prompt tokens ``request`` renders to.

        Raises:
            PromptError: as :meth:`build` does for the prompt itself.
        """
        return len(self._tokens(request)[0])

    def build(self, request: GenerateRequest) -> Admission:
        """Return the admission for ``request``.

        Raises:
            PromptError: ``invalid_request`` for a prompt that renders to no
                tokens, an out-of-vocabulary token id, a template failure, an
                invalid schema or tool grammar, a ``suffix`` for a model with
                no fill-in-the-middle tokens; ``context_length_exceeded``
                when the prompt plus ``max_tokens`` does not fit.
        """
        ids, text, vision = self._tokens(request)
        if request.n < 1:
            raise PromptError("invalid_request", "n must be at least 1", "n")
        self._check_ids(list(request.sampling.logit_bias), "logit_bias token", "logit_bias")
        matchers = self._matchers(request)
        output = self._output_spec(request, text)
        return Admission(
            request_id=request.request_id,
            prompt=ids,
            max_tokens=self._max_tokens(len(ids), request.sampling.max_tokens, request.max_tokens_ceiling),
            params=with_defaults(request.sampling, self.sampling_defaults),
            n=request.n,
            deadline=time.monotonic() + request.timeout if request.timeout else None,
            matchers=matchers,
            output=output,
            received=time.monotonic(),
            thinking_budget=self._thinking_budget(request, output.thinking_open),
            reasoning_close=self._reasoning_close(output.thinking_open) if matchers is not None else None,
            boundaries=self._boundaries(request, ids) if vision is None else (),
            vision=vision,
            key_name=request.key_name,
        )

    def _boundaries(self, request: GenerateRequest, ids: list[int]) -> tuple[int, ...]:
        """Where the last message of a chat starts in ``ids``: the length
        of the tokens that rendering every earlier message gives and
        ``ids`` shares (empty when not wanted, not a chat of two or more
        messages, or nothing is shared)."""
        messages = request.messages or []
        if not self.message_boundaries or len(messages) < 2 or request.continue_final:
            return ()
        earlier, originals = protect_contents(list(messages[:-1]))
        try:
            text = render(
                self._tokenizer,
                earlier,
                tools=self._offered_tools(request),
                thinking=request.thinking,
                generation_prompt=False,
            )
        except Exception:  # some templates insist on ending with a user turn
            return ()
        head = self._encode_protected(text, originals)
        shared = 0
        for a, b in zip(head, ids):
            if a != b:
                break
            shared += 1
        return (shared,) if 0 < shared < len(ids) - 1 else ()

    def _reasoning_close(self, thinking_open: bool) -> tuple[int, ...] | None:
        """The token ids that close the reasoning block the prompt opened
        (None when it opened none, or the format has no closing marker)."""
        if not thinking_open or self._marker_ids is None:
            return None
        return self._marker_ids[1]

    def _thinking_budget(self, request: GenerateRequest, thinking_open: bool) -> ThinkingBudget | None:
        """The request's reasoning cap as token ids, or None when it sets no
        budget or the model has no reasoning block to cap.

        Raises:
            PromptError: ``invalid_request`` when the model's reasoning format
                has no single closing marker (e.g. Harmony channels), unless
                the budget is best effort (then there is no cap).
        """
        budget, formats = request.thinking_budget, self.formats
        if budget is None or request.messages is None or formats.reasoning_format is None:
            return None
        if self._marker_ids is None:
            if request.thinking_budget_best_effort:
                return None
            raise PromptError(
                "invalid_request",
                f"a thinking budget is not supported for this model's reasoning format ({formats.reasoning_format})",
                "thinking",
            )
        open_ids, close_ids = self._marker_ids
        return ThinkingBudget(budget=budget, open_ids=open_ids, close_ids=close_ids, open_at_start=thinking_open)

    # -- prompt -----------------------------------------------------------

    def _tokens(self, request: GenerateRequest) -> tuple[list[int], str, VisionPrompt | None]:
        """The prompt's ids, its text, and its images' inputs (None without
        images; the ids are then the cache-key ids, see
        :mod:`worker.vision.inputs`).

        Raises:
            PromptError: as :meth:`build`; also for images sent to a text
                model or images that cannot be used (naming the image).
        """
        if request.suffix is not None:
            ids, text = self._fim_prompt(request), ""
        elif request.prompt_token_ids is not None:
            ids, text = list(request.prompt_token_ids), ""
        elif request.prompt is not None:
            ids, text = list(self._tokenizer.encode(request.prompt)), request.prompt
        else:
            messages, originals = protect_contents(list(request.messages or []))
            prefill = self._prefill(request, messages, originals)
            try:
                text = render(
                    self._tokenizer,
                    messages,
                    tools=self._offered_tools(request),
                    thinking=request.thinking,
                )
            except Exception as exc:  # template errors are the request's fault
                raise PromptError("invalid_request", f"chat template failed: {exc}", "prompt") from exc
            text += prefill
            ids = self._encode_protected(text, originals)
            text = _SENTINEL.sub(lambda m: originals.get(m.group(0), m.group(0)), text)
        if not ids:
            raise PromptError("invalid_request", "the prompt is empty after tokenization", "prompt")
        self._check_ids([t for t in ids if t >= 0], "prompt token", "prompt")
        images = request_images(request)
        if not images:
            return ids, text, None
        if self.images is None:
            raise PromptError("invalid_request", no_vision_message(None), "messages")
        try:
            keys, vision = self.images.prepare(
                ids, [(part.data, part.sha256) for part in images], [part.kind for part in images]
            )
        except ImageError as exc:
            at = images[exc.index].param if exc.index is not None else ""
            message = f"{at}: {exc}" if at else str(exc)
            raise PromptError("invalid_request", message, at or "messages") from None
        except ValueError as exc:
            raise PromptError("invalid_request", str(exc), "messages") from None
        return keys, text, vision

    @cached_property
    def _fim_ids(self) -> tuple[int, int, int] | None:
        return fim_token_ids(self._tokenizer)

    @cached_property
    def _leading_ids(self) -> list[int]:
        """The ids the tokenizer puts before any text it encodes with its
        special tokens (a BOS, for tokenizers that add one), as a raw
        prompt gets them."""
        full = list(self._tokenizer.encode("a"))
        bare = list(self._tokenizer.encode("a", add_special_tokens=False))
        cut = len(full) - len(bare)
        return full[:cut] if cut > 0 and full[cut:] == bare else []

    def _fim_prompt(self, request: GenerateRequest) -> list[int]:
        """The fill-in-the-middle prompt of ``request.prompt`` (before the
        gap) and ``request.suffix`` (after it): the tokenizer's leading
        special tokens, then prefix token, prompt, suffix token, suffix,
        middle token. The two texts are tokenized as plain text (a special
        token's spelling in them stays ordinary text).

        Raises:
            PromptError: ``invalid_request`` when the model has no
                fill-in-the-middle tokens, or the request has no text prompt.
        """
        if request.prompt is None:
            raise PromptError("invalid_request", "suffix needs a text prompt (the text before the gap)", "suffix")
        if self._fim_ids is None:
            raise PromptError("invalid_request", NO_FIM, "suffix")
        prefix, suffix, middle = self._fim_ids

        def plain(text: str) -> list[int]:
            return (
                list(self._tokenizer.encode(text, add_special_tokens=False, split_special_tokens=True)) if text else []
            )

        return [*self._leading_ids, prefix, *plain(request.prompt), suffix, *plain(request.suffix or ""), middle]

    @staticmethod
    def _prefill(request: GenerateRequest, messages: list[ChatMessage], originals: dict[str, str]) -> str:
        """For ``continue_final``: take the final assistant turn off
        ``messages`` and return a placeholder for its text (registered in
        ``originals``, so the client's text is tokenized as plain text) to
        append after the rendered generation prompt; otherwise "".

        Raises:
            PromptError: ``invalid_request`` when the last message is not an
                assistant turn, or it carries tool calls.
        """
        if not request.continue_final:
            return ""
        if not messages or messages[-1].role != "assistant" or messages[-1].tool_calls:
            raise PromptError("invalid_request", "continue_final needs a final assistant turn with text only", "prompt")
        final = messages.pop()
        if not final.content:
            return ""
        key = f"\ue000mlxd{len(messages)}\ue001"
        originals[key] = final.content
        return key

    def _encode_protected(self, text: str, originals: dict[str, str]) -> list[int]:
        """Tokenize rendered chat text: template text normally (its control
        tokens are real), each protected content as plain text (any
        special-token spelling in it stays ordinary text), image ``k``'s
        placeholder as a ``-(k + 1)`` marker (an image's or audio clip's
        marker stands for the template's whole markup of it, a video's sits
        inside its own; :meth:`ImagePreparer.prepare` expands it)."""
        ids: list[int] = []
        for piece in _SENTINEL.split(text):
            if not piece:
                continue
            image = _IMAGE_KEY.fullmatch(piece)
            if image is not None:
                letter = image.group(1)
                before, after = self._video_markup() if letter == "v" else ([], [])
                ids += [*before, -int(image.group(2)) - 1, *after]
            elif piece in originals:
                ids += self._tokenizer.encode(originals[piece], add_special_tokens=False, split_special_tokens=True)
            else:
                ids += self._tokenizer.encode(piece, add_special_tokens=False)
        return ids

    def _video_markup(self) -> tuple[list[int], list[int]]:
        """The template's ids around a video's marker (none for a model
        that takes no videos: :meth:`ImagePreparer.prepare` refuses them).

        Raises:
            PromptError: the model takes videos but its chat template cannot
                place one.
        """
        if isinstance(self._video_ids, str):
            raise PromptError("invalid_request", f"this model cannot take videos: {self._video_ids}", "messages")
        return self._video_ids

    @staticmethod
    def _offered_tools(request: GenerateRequest) -> list[Tool] | None:
        if not request.tools or request.tool_choice == "none":
            return None
        if request.tool_choice == "function":
            return [t for t in request.tools if t.name == request.tool_choice_name] or None
        return list(request.tools)

    def _check_ids(self, ids: list[int], what: str, field: str) -> None:
        bad = next((t for t in ids if not 0 <= t < self.vocab_size), None)
        if bad is not None:
            raise PromptError(
                "invalid_request", f"{what} id {bad} is outside the vocabulary (0..{self.vocab_size - 1})", field
            )

    def _max_tokens(self, prompt_len: int, requested: int | None, ceiling: bool = False) -> int:
        """The completion's token cap: ``requested`` (None: what is left of
        the context, at most ``default_max_tokens``); with ``ceiling`` a
        request over the room left is cut to it (see
        ``GenerateRequest.max_tokens_ceiling``). Raises PromptError
        (``context_length_exceeded``) when nothing fits."""
        room = self.context_length - prompt_len
        if ceiling and requested is not None and room >= 1:
            requested = min(requested, room)
        if requested is None:
            if room < 1:
                raise PromptError(
                    "context_length_exceeded",
                    f"This model's maximum context length is {self.context_length} tokens; "
                    f"the prompt has {prompt_len} tokens, leaving no room for a completion.",
                    "prompt",
                )
            return min(self.default_max_tokens, room)
        if requested > room:
            raise PromptError(
                "context_length_exceeded",
                f"This model's maximum context length is {self.context_length} tokens. "
                f"However, you requested {prompt_len + requested} tokens "
                f"({prompt_len} in the prompt, {requested} for the completion).",
                "prompt",
            )
        return requested

    # -- output shaping -----------------------------------------------------

    def _matchers(self, request: GenerateRequest) -> list[Any] | None:
        """One grammar matcher per choice, or None when unconstrained."""
        forced = request.tools and request.tool_choice in ("required", "function")
        if forced and request.response_format is not None:
            raise PromptError(
                "invalid_request", "response_format cannot be combined with a required tool call", "response_format"
            )
        field = "response_format" if request.response_format is not None else "tools"
        try:
            if request.response_format is not None:
                fmt = request.response_format
                grammar = self.grammars.json_schema(fmt.schema if fmt.type == "json_schema" else None)
            elif forced:
                grammar = self._tool_grammar(request)
            else:
                return None
            return [self.grammars.matcher(grammar) for _ in range(request.n)]
        except GrammarError as exc:
            raise PromptError("invalid_request", str(exc), field) from exc

    def _tool_grammar(self, request: GenerateRequest) -> str:
        from worker.parsers import special_token_ids, tool_call_grammar
        from worker.sampling.constrained_decoding import check_schema_size

        tools = self._offered_tools(request) or []
        for tool in tools:
            check_schema_size(tool.parameters)
        fmt = self._tool_format()
        try:
            source = tool_call_grammar(
                fmt,
                tools,
                choice=request.tool_choice,
                name=request.tool_choice_name,
                max_calls=self.max_tool_calls(request) or 1,
                special_tokens=special_token_ids(fmt, self._tokenizer),
            )
        except NotImplementedError as exc:
            raise PromptError(
                "invalid_request", f"forced tool calls are not supported for this model: {exc}", "tool_choice"
            ) from exc
        except ValueError as exc:
            raise PromptError("invalid_request", f"invalid tool definition: {exc}", "tools") from exc
        return self.grammars.lark(source)

    def _tool_format(self) -> str:
        from worker.parsers import GENERIC_TOOL_FORMAT

        template = getattr(self._tokenizer, "chat_template", None)
        if template_supports_tools(template):
            return self.formats.tool_format
        return GENERIC_TOOL_FORMAT

    def _output_spec(self, request: GenerateRequest, prompt_text: str) -> OutputSpec:
        offered = self._offered_tools(request) if request.messages is not None else None
        marker = self.formats.reasoning_open_marker
        thinking_open = bool(
            self.formats.reasoning_format
            and marker
            and request.messages is not None
            and prompt_text.rstrip().endswith(marker)
        )
        return OutputSpec(
            tool_format=self._tool_format() if offered else None,
            reasoning_format=self.formats.reasoning_format if request.messages is not None else None,
            tools=offered,
            thinking_open=thinking_open,
            max_tool_calls=self.max_tool_calls(request),
            end_on_repeat=request.tool_choice == "required",
        )

    def max_tool_calls(self, request: GenerateRequest) -> int | None:
        """The most tool calls ``request``'s turn may carry: one for a named
        ``tool_choice`` or with parallel calls off; else the request's
        ``max_tool_calls``; else, for a forced choice (``required``), the
        model's ``max_tool_calls_per_turn`` (the grammar then ends the turn
        after that many calls); else (``auto``) no limit (None)."""
        if request.tool_choice == "function" or not request.parallel_tool_calls:
            return 1
        if request.max_tool_calls is not None:
            return request.max_tool_calls
        return self.max_tool_calls_per_turn if request.tool_choice == "required" else None
