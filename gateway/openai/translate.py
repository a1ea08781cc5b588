"""Translation of a decoded (and checked) chat or completions request into
the worker's :class:`~shared.protocol.GenerateRequest`
(:func:`to_generate_request`), and :func:`include_usage`.
"""

from __future__ import annotations

import msgspec

from gateway.frontend.custom_tools import custom_arguments, custom_tool
from gateway.images.parts import image_part, openai_audio_part, openai_image_part, openai_video_part
from gateway.openai.checks import ROLES, THINKING_BY_EFFORT, candidates, chat_max_tokens, prompt_input
from gateway.openai.schema import (
    ChatCompletionRequest,
    ChatMessageParam,
    ChosenFunction,
    CompletionRequest,
    ContentPart,
    ToolChoiceParam,
    ToolParam,
)
from gateway.openai.tool_checks import legacy_functions
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


def _stop_list(stop: str | list[str] | None) -> list[str]:
    """Normalise ``stop`` to a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _logprobs(req: ChatCompletionRequest | CompletionRequest) -> tuple[bool, int]:
    """``(on, alternatives)`` for the worker: chat ``logprobs`` and
    ``top_logprobs``, or the legacy completions ``logprobs`` count."""
    if isinstance(req, ChatCompletionRequest):
        return bool(req.logprobs), req.top_logprobs or 0
    ranked = candidates(req) > (req.n or 1)  # ranking the candidates needs their log-probabilities
    return req.logprobs is not None or ranked, req.logprobs or 0


def _sampling(req: ChatCompletionRequest | CompletionRequest, max_tokens: int | None) -> SamplingParams:
    """Build the worker's sampling settings. Unset ``temperature``,
    ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` stay None
    (the worker applies the model's defaults); ``top_k`` -1 means off (0);
    other unset fields take OpenAI's defaults (no penalties, no
    log-probabilities)."""
    logprobs, top_logprobs = _logprobs(req)
    top_k = None if req.top_k is None else max(req.top_k, 0)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=top_k,
        min_p=req.min_p,
        seed=req.seed,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty,
        logit_bias=dict(req.logit_bias or {}),
        stop=_stop_list(req.stop),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        ignore_eos=bool(req.ignore_eos),
        min_tokens=req.min_tokens or 0,
        speculative=req.speculative is not False,
    )


def _flatten(content: str | list[ContentPart] | None, path: str) -> tuple[str, list[ImagePart] | None]:
    """Return message content as one string (text and refusal parts
    concatenated) and its images, each placed where it stood among the
    text (``path``: the message's, for errors).

    Raises:
        APIError: 400 naming a bad ``image_url``, ``video_url`` or
            ``input_audio`` part (see :mod:`gateway.images.parts`).
    """
    if content is None:
        return "", None
    if isinstance(content, str):
        return content, None
    text, images = "", []
    for index, part in enumerate(content):
        if part.type == "image_url":
            value = msgspec.json.decode(bytes(part.image_url))
            where = f"{path}.content[{index}].image_url"
            images.append(image_part(openai_image_part(value, where), len(text), f"{where}.url"))
        elif part.type == "video_url":
            value = msgspec.json.decode(bytes(part.video_url))
            where = f"{path}.content[{index}].video_url"
            images.append(image_part(openai_video_part(value, where), len(text), f"{where}.url", "video"))
        elif part.type == "input_audio":
            value = msgspec.json.decode(bytes(part.input_audio))
            where = f"{path}.content[{index}].input_audio"
            images.append(image_part(openai_audio_part(value, where), len(text), f"{where}.data", "audio"))
        else:
            text += part.text or part.refusal or ""
    return text, images or None


def _tool_calls(message: ChatMessageParam, index: int) -> list[ToolCall] | None:
    """An assistant message's tool calls for the worker (None when none);
    a legacy ``function_call`` becomes one call with id
    ``call_function_<index>`` (``index``: the message's position)."""
    if message.function_call is not None:
        called = message.function_call
        return [ToolCall(id=f"call_function_{index}", name=called.name, arguments=called.arguments)]
    if not message.tool_calls:
        return None
    return [
        ToolCall(id=call.id, name=call.custom.name, arguments=custom_arguments(call.custom.input))
        if call.custom is not None
        else ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)  # type: ignore[union-attr]
        for call in message.tool_calls
    ]


def _chat_messages(req: ChatCompletionRequest) -> list[ChatMessage]:
    """The request's messages for the worker: roles normalised, content
    flattened, tool calls and reasoning carried over, and a tool message's
    missing ``name`` filled in from the earlier call it answers."""
    call_names: dict[str, str] = {}
    unanswered: dict[str, str] = {}  # legacy function name -> id of its latest call
    messages = []
    for index, m in enumerate(req.messages):
        calls = _tool_calls(m, index)
        call_names.update((call.id, call.name) for call in calls or ())
        if m.function_call is not None and calls:
            unanswered[calls[0].name] = calls[0].id
        name, call_id = m.name, m.tool_call_id
        if m.role == "tool" and name is None:
            name = call_names.get(m.tool_call_id or "")
        if m.role == "function":
            call_id = unanswered.pop(m.name or "", f"call_function_{index}")
        content, images = _flatten(m.content, f"messages[{index}]")
        messages.append(
            ChatMessage(
                role=ROLES[m.role],
                content=content,
                images=images,
                name=name,
                tool_calls=calls,
                tool_call_id=call_id,
                reasoning=m.reasoning_content if m.reasoning_content is not None else m.reasoning,
            )
        )
    return messages


def _tools(req: ChatCompletionRequest) -> list[Tool] | None:
    """The request's tools for the worker (None when it has none): all of
    them, or those an ``allowed_tools`` choice keeps; the legacy
    ``functions``."""
    if req.functions:
        return [
            Tool(name=f.name, description=f.description or "", parameters=f.parameters or {}) for f in req.functions
        ]
    if not req.tools:
        return None
    keep: set[str] | None = None
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.allowed_tools is not None:
        keep = {(ref.custom or ref.function).name for ref in choice.allowed_tools.tools}  # type: ignore[union-attr]
    tools = [_worker_tool(tool) for tool in req.tools]
    return [tool for tool in tools if keep is None or tool.name in keep] or None


def _worker_tool(tool: ToolParam) -> Tool:
    """One checked tool as the worker sees it (a custom tool in its
    function form)."""
    if tool.custom is not None and tool.type == "custom":
        grammar = tool.custom.format.grammar if tool.custom.format is not None else None
        syntax = None if grammar is None else grammar.syntax
        definition = None if grammar is None else grammar.definition
        return custom_tool(tool.custom.name, tool.custom.description, syntax, definition)
    function = tool.function
    return Tool(name=function.name, description=function.description or "", parameters=function.parameters or {})  # type: ignore[union-attr]


def _tool_choice(req: ChatCompletionRequest) -> tuple[ToolChoice, str | None]:
    """``(tool_choice, tool_choice_name)`` for the worker. Unset:
    ``"auto"`` with tools, ``"none"`` without."""
    if legacy_functions(req):
        legacy = req.function_call
        if isinstance(legacy, ChosenFunction):
            return "function", legacy.name
        return (legacy or ("auto" if req.functions else "none")), None  # type: ignore[return-value]
    choice = req.tool_choice
    if choice is None:
        return ("auto" if req.tools else "none"), None
    if isinstance(choice, ToolChoiceParam):
        if choice.allowed_tools is not None:
            mode = choice.allowed_tools.mode if choice.allowed_tools.tools else "none"
            return mode, None  # type: ignore[return-value]
        return "function", (choice.custom or choice.function).name  # type: ignore[union-attr]
    return choice, None  # type: ignore[return-value]


def _response_format(req: ChatCompletionRequest) -> ResponseFormat | None:
    """The worker's output constraint (None for none or ``text``)."""
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    schema = fmt.json_schema
    return ResponseFormat(type="json_schema", schema=schema.schema, strict=bool(schema.strict))  # type: ignore[union-attr]


def _thinking(req: ChatCompletionRequest) -> bool | None:
    """Whether the model's reasoning mode is on (None: template default);
    the checks guarantee both sources agree when both are set."""
    if req.chat_template_kwargs is not None and req.chat_template_kwargs.enable_thinking is not None:
        return req.chat_template_kwargs.enable_thinking
    if req.reasoning_effort is not None:
        return THINKING_BY_EFFORT[req.reasoning_effort]
    return None


def _chat_generate_request(req: ChatCompletionRequest, request_id: str) -> GenerateRequest:
    """:func:`to_generate_request` for a chat request."""
    tool_choice, tool_choice_name = _tool_choice(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req, chat_max_tokens(req)),
        messages=_chat_messages(req),
        n=req.n or 1,
        tools=_tools(req),
        tool_choice=tool_choice,
        tool_choice_name=tool_choice_name,
        parallel_tool_calls=req.parallel_tool_calls is not False and not legacy_functions(req),
        response_format=_response_format(req),
        thinking=_thinking(req),
        continue_final=bool(req.continue_final_message),
    )


def to_generate_request(req: ChatCompletionRequest | CompletionRequest, request_id: str) -> GenerateRequest:
    """Translate a validated request into the worker's ``GenerateRequest``.

    Chat requests carry ``messages`` plus tools, tool choice, response
    format and thinking (see the module docstring); completions carry
    ``prompt`` or ``prompt_token_ids``. ``max_tokens`` stays None when the
    client set no limit (the worker applies its default). ``n`` defaults to
    1; ``timeout`` is left None for the backend to fill in.
    """
    if isinstance(req, ChatCompletionRequest):
        return _chat_generate_request(req, request_id)
    text, token_ids = prompt_input(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req, req.max_tokens),
        prompt=text,
        prompt_token_ids=token_ids,
        n=candidates(req),
    )


def include_usage(req: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether a streamed response must end with a usage chunk."""
    return bool(req.stream and req.stream_options is not None and req.stream_options.include_usage)
