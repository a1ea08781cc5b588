"""Translation of a decoded (and checked) ``POST /v1/responses`` body: the
worker's :class:`~shared.protocol.GenerateRequest`
(:func:`to_generate_request`: the ``input`` items become chat messages),
and what the response echoes (:func:`response_settings`,
:func:`output_options`, :func:`dropped_tools`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from msgspec import UNSET

from gateway.core.errors import bad_request
from gateway.frontend.custom_tools import custom_arguments
from gateway.frontend.validation import is_given, not_supported
from gateway.images.parts import DETAILS, image_from_url, image_part, openai_audio_part
from gateway.responses.checks import THINKING_BY_EFFORT, allowed_tool_names, resolve_tool_name, tool_catalog
from gateway.responses.encrypted_reasoning import unseal
from gateway.responses.format import OutputOptions, ReasoningEcho, ResponseSettings, TextEcho, TextFormatEcho
from gateway.responses.input_checks import ROLES, item_type
from gateway.responses.schema import ContentPartParam, InputItemParam, ResponsesRequest, ToolChoiceParam
from gateway.responses.tools import ToolCatalog
from shared.protocol import (
    ChatMessage,
    GenerateRequest,
    ImagePart,
    ResponseFormat,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
)

# --- translation ---------------------------------------------------------------------------


MEDIA_PLACEHOLDER = "[{kind} not shown: this model reads text only]"
"""What the model sees instead of an image or file in a tool's output
(``{kind}`` is ``image`` or ``file``)."""


def _part_text(part: ContentPartParam) -> str:
    """The text a part carries (its ``text``, a refusal's ``refusal``, or
    the placeholder of an image or file)."""
    if part.type in ("input_image", "input_file"):
        return MEDIA_PLACEHOLDER.format(kind=part.type.removeprefix("input_"))
    value = part.refusal if part.type == "refusal" else part.text
    return "" if value is UNSET else value  # type: ignore[return-value]


def _flatten(content: object) -> str:
    """Text content, or the concatenated text of its parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(_part_text(part) for part in content)


def _message_content(content: object, path: str) -> tuple[str, list[ImagePart] | None]:
    """A message's text and its ``input_image`` and ``input_audio`` parts,
    each placed where it stood among the text (``path``: the content's,
    for errors).

    Raises:
        APIError: 400 naming a bad image part (a ``file_id``, or a bad
            ``image_url``: see :func:`gateway.images.parts.image_from_url`)
            or a bad audio part (:func:`gateway.images.parts.openai_audio_part`).
    """
    if not isinstance(content, list):
        return _flatten(content), None
    text, images = "", []
    for index, part in enumerate(content):
        where = f"{path}[{index}]"
        if part.type == "input_audio":
            value = msgspec.json.decode(bytes(part.input_audio))  # type: ignore[arg-type]
            clip = openai_audio_part(value, f"{where}.input_audio")
            images.append(image_part(clip, len(text), f"{where}.input_audio.data", "audio"))
            continue
        if part.type != "input_image":
            text += _part_text(part)
            continue
        if is_given(part.file_id):
            raise not_supported(f"{where}.file_id", "an image by 'file_id' (there is no Files API; send image_url)")
        detail = msgspec.json.decode(bytes(part.detail)) if is_given(part.detail) else None
        if detail is not None and detail not in DETAILS:
            raise bad_request(f"'detail' must be one of {', '.join(sorted(DETAILS))}", f"{where}.detail")
        if not is_given(part.image_url):
            raise bad_request(f"Missing required parameter: '{where}.image_url'", f"{where}.image_url")
        url = msgspec.json.decode(bytes(part.image_url))  # type: ignore[arg-type]
        images.append(image_part(image_from_url(url, f"{where}.image_url"), len(text), f"{where}.image_url"))
    return text, images or None


def _reasoning_text(item: InputItemParam) -> str:
    """A reasoning item's text: what its mlxd ``encrypted_content`` seals,
    else its content, else its summary."""
    if is_given(item.encrypted_content):
        sealed = unseal(item.encrypted_content)  # type: ignore[arg-type]
        if sealed is not None:
            return sealed
    text = _flatten(item.content)
    return text if text else "\n".join(_part_text(p) for p in item.summary or ())  # type: ignore[union-attr]


@dataclass
class _AssistantTurn:
    """An assistant turn being gathered from consecutive items."""

    reasoning: list[str] = field(default_factory=list)
    content: str | None = None
    calls: list[ToolCall] = field(default_factory=list)

    @property
    def started(self) -> bool:
        """Whether the turn already has its text or a call."""
        return self.content is not None or bool(self.calls)

    def message(self) -> ChatMessage:
        """The turn as one assistant message."""
        return ChatMessage(
            role="assistant",
            content=self.content or "",
            tool_calls=self.calls or None,
            reasoning="\n".join(self.reasoning) if self.reasoning else None,
        )


class _History:
    """Turns input items into chat messages.

    Consecutive assistant-side items form one assistant turn in the order
    reasoning, message, function calls: a reasoning item after the turn
    has text or calls, or a second assistant message, starts a new turn.
    Any other item ends the turn. A ``function_call_output`` becomes a
    ``tool`` message; its ``name`` defaults to the earlier call's. Calls
    carry their model-facing names (``tools`` maps namespaced ones); a
    custom tool call's ``input`` becomes the arguments ``{"input": ...}``
    and its output a ``tool`` message like a function's.
    """

    def __init__(self, tools: ToolCatalog, vision: bool = False) -> None:
        self.messages: list[ChatMessage] = []
        self._tools = tools
        self._vision = vision
        self._turn: _AssistantTurn | None = None
        self._call_names: dict[str, str] = {}

    def add(self, item: InputItemParam, index: int) -> None:
        """Take the next input item (``index``: its place in ``input``)."""
        kind = item_type(item)
        if kind == "additional_tools":
            return  # its tools joined the request's tools
        if kind == "reasoning":
            self._reasoning(item)
        elif kind in ("function_call", "custom_tool_call"):
            self._function_call(item)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            self._tool_output(item, index)
        elif item.role == "assistant":
            self._current_turn(new_if_started=True).content = _flatten(item.content)
        else:
            self._flush()
            role = ROLES[item.role]  # type: ignore[index]
            text, images = _message_content(item.content, f"input[{index}].content")
            self.messages.append(ChatMessage(role=role, content=text, images=images))

    def finish(self) -> list[ChatMessage]:
        """All messages, the last assistant turn included."""
        self._flush()
        return self.messages

    def _reasoning(self, item: InputItemParam) -> None:
        """A reasoning item opens (or joins) an assistant turn."""
        self._current_turn(new_if_started=True).reasoning.append(_reasoning_text(item))

    def _function_call(self, item: InputItemParam) -> None:
        """A function or custom tool call joins the current assistant turn."""
        if item_type(item) == "custom_tool_call":
            arguments = custom_arguments(item.input)  # type: ignore[arg-type]
        else:
            arguments = item.arguments if isinstance(item.arguments, str) else ""
        namespace = item.namespace if isinstance(item.namespace, str) else None
        name = self._tools.model_name(item.name or "", namespace)  # type: ignore[arg-type]
        call = ToolCall(id=item.call_id or "", name=name, arguments=arguments)
        self._call_names[call.id] = call.name
        self._current_turn(new_if_started=False).calls.append(call)

    def _tool_output(self, item: InputItemParam, index: int) -> None:
        """A function call output becomes a ``tool`` message (ending any
        assistant turn); its images reach a vision model as images, other
        models see :data:`MEDIA_PLACEHOLDER`."""
        self._flush()
        call_id = item.call_id or ""
        namespace = item.namespace if isinstance(item.namespace, str) else None
        name = item.name if isinstance(item.name, str) else None
        if name is not None:
            name = self._tools.model_name(name, namespace)
        name = name or self._call_names.get(call_id)
        text, images = (
            _message_content(item.output, f"input[{index}].output") if self._vision else (_flatten(item.output), None)
        )
        self.messages.append(ChatMessage(role="tool", content=text, tool_call_id=call_id, name=name, images=images))

    def _current_turn(self, *, new_if_started: bool) -> _AssistantTurn:
        """The current assistant turn; a new one if there is none, or if
        ``new_if_started`` and the current one already has text or calls."""
        if self._turn is not None and new_if_started and self._turn.started:
            self._flush()
        if self._turn is None:
            self._turn = _AssistantTurn()
        return self._turn

    def _flush(self) -> None:
        """Emit the current assistant turn, if any."""
        if self._turn is not None:
            self.messages.append(self._turn.message())
            self._turn = None


def _messages(req: ResponsesRequest, vision: bool) -> list[ChatMessage]:
    """``instructions`` and ``input`` as chat messages (``vision``: the
    model takes images, also those of tool outputs)."""
    if isinstance(req.input, str):
        messages = [ChatMessage(role="user", content=req.input)]
    else:
        history = _History(tool_catalog(req), vision)
        for index, item in enumerate(req.input):
            history.add(item, index)
        messages = history.finish()
    if req.instructions is None:
        return messages
    if messages and messages[0].role == "system":
        merged = f"{req.instructions}\n\n{messages[0].content}"
        return [ChatMessage(role="system", content=merged), *messages[1:]]
    return [ChatMessage(role="system", content=req.instructions), *messages]


def _tools(req: ResponsesRequest, tools: ToolCatalog) -> list[Tool] | None:
    """The tools for the worker (None when there are none): all of them,
    or those an ``allowed_tools`` choice keeps."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.type == "allowed_tools":
        return tools.restricted(allowed_tool_names(choice, tools)) or None
    return tools.tools or None


def _tool_choice(req: ResponsesRequest, tools: ToolCatalog) -> tuple[ToolChoice, str | None]:
    """``(tool_choice, tool_choice_name)`` for the worker (the name is the
    forced tool's model-facing name)."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam):
        if choice.type == "allowed_tools":
            mode = msgspec.json.decode(bytes(choice.mode))  # type: ignore[arg-type]
            return (mode if tools.restricted(allowed_tool_names(choice, tools)) else "none"), None
        return "function", resolve_tool_name(choice.name, choice.type, tools)  # type: ignore[arg-type]
    if choice is None or (choice != "none" and not tools.tools):
        return ("auto" if tools.tools else "none"), None
    return choice, None  # type: ignore[return-value]


def _response_format(req: ResponsesRequest) -> ResponseFormat | None:
    """``text.format`` for the worker (None for plain text)."""
    fmt = req.text.format if req.text is not None else None
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    return ResponseFormat(type="json_schema", schema=fmt.schema, strict=bool(fmt.strict))  # type: ignore[arg-type]


def _logprobs(req: ResponsesRequest) -> bool:
    """Whether output text carries log-probabilities: ``include`` asks for
    ``message.output_text.logprobs`` (``top_logprobs`` only says how many
    alternatives each token then lists, as on OpenAI)."""
    return "message.output_text.logprobs" in (req.include or ())


def _thinking(req: ResponsesRequest) -> bool | None:
    """Whether to turn the reasoning mode on (None: the template default)."""
    effort = req.reasoning.effort if req.reasoning is not None else None
    return None if effort is None else THINKING_BY_EFFORT[effort]


def to_generate_request(req: ResponsesRequest, request_id: str, vision: bool = False) -> GenerateRequest:
    """Translate a validated request into the worker's ``GenerateRequest``
    (one choice; ``max_tokens`` None when ``max_output_tokens`` is unset;
    ``timeout`` left for the backend). ``vision``: the model takes images,
    so those of tool outputs go to it as images (else placeholders).

    Raises:
        APIError: 400 naming a bad ``input_image``.
    """
    tools = tool_catalog(req)
    choice, choice_name = _tool_choice(req, tools)
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(
            max_tokens=req.max_output_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            logprobs=_logprobs(req),
            top_logprobs=(req.top_logprobs or 0) if _logprobs(req) else 0,
        ),
        messages=_messages(req, vision),
        n=1,
        tools=_tools(req, tools),
        tool_choice=choice,
        tool_choice_name=choice_name,
        parallel_tool_calls=req.parallel_tool_calls is not False,
        response_format=_response_format(req),
        thinking=_thinking(req),
        max_tool_calls=req.max_tool_calls,
    )


# --- echo -----------------------------------------------------------------------------------


def _text_echo(req: ResponsesRequest) -> TextEcho:
    """The response's ``text`` (``verbosity`` ``medium`` when unset)."""
    fmt = req.text.format if req.text is not None else None
    verbosity = (req.text.verbosity if req.text is not None else None) or "medium"
    if fmt is None:
        return TextEcho(format=TextFormatEcho(type="text"), verbosity=verbosity)
    return TextEcho(
        format=TextFormatEcho(
            type=fmt.type,
            name=None if fmt.name is UNSET else fmt.name,
            schema=None if fmt.schema is UNSET else fmt.schema,
            description=None if fmt.description is UNSET else fmt.description,
            strict=None if fmt.strict is UNSET else fmt.strict,
        ),
        verbosity=verbosity,
    )


def _summary(req: ResponsesRequest) -> str | None:
    """The requested reasoning summary (``summary`` or its deprecated
    alias ``generate_summary``), or None."""
    if req.reasoning is None:
        return None
    return req.reasoning.summary or req.reasoning.generate_summary


def _choice_echo(req: ResponsesRequest, tools: ToolCatalog) -> str | dict[str, Any]:
    """The response's ``tool_choice``: the request's object choice as sent,
    else the string choice in effect."""
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam):
        if choice.type == "allowed_tools":
            return {
                "type": "allowed_tools",
                "mode": msgspec.json.decode(bytes(choice.mode)),  # type: ignore[arg-type]
                "tools": msgspec.json.decode(bytes(choice.tools)),  # type: ignore[arg-type]
            }
        return {"type": choice.type, "name": choice.name}
    return _tool_choice(req, tools)[0]


def output_options(req: ResponsesRequest) -> OutputOptions:
    """How the response renders its output items for ``req``: tool calls
    mapped back to custom and namespaced tools, reasoning as a summary when
    one was asked for, and sealed reasoning when ``include`` asks for
    ``reasoning.encrypted_content``."""
    return OutputOptions(
        tools=tool_catalog(req).refs,
        summary=_summary(req) is not None,
        encrypted_reasoning="reasoning.encrypted_content" in (req.include or ()),
        logprobs=_logprobs(req),
    )


def dropped_tools(req: ResponsesRequest) -> list[str]:
    """The types of the request's tools that were dropped."""
    return tool_catalog(req).dropped


def response_settings(req: ResponsesRequest, sampling_defaults: dict[str, float] | None = None) -> ResponseSettings:
    """The settings the response object echoes for ``req`` (defaults where
    the request left them unset; ``temperature`` and ``top_p`` from the
    model's ``sampling_defaults`` when known, else 1)."""
    defaults = sampling_defaults or {}
    tools = tool_catalog(req)
    reasoning = req.reasoning
    return ResponseSettings(
        instructions=req.instructions,
        max_output_tokens=req.max_output_tokens,
        max_tool_calls=req.max_tool_calls,
        metadata=dict(req.metadata or {}),
        parallel_tool_calls=req.parallel_tool_calls is not False,
        reasoning=ReasoningEcho(
            effort=reasoning.effort if reasoning is not None else None,
            summary=_summary(req),
        ),
        temperature=defaults.get("temperature", 1.0) if req.temperature is None else req.temperature,
        text=_text_echo(req),
        tool_choice=_choice_echo(req, tools),
        tools=tools.echo,
        top_p=defaults.get("top_p", 1.0) if req.top_p is None else req.top_p,
        user=req.user,
        safety_identifier=req.safety_identifier,
        prompt_cache_key=req.prompt_cache_key,
        prompt_cache_retention=req.prompt_cache_retention,
        truncation=req.truncation or "disabled",
        top_logprobs=req.top_logprobs or 0,
    )
