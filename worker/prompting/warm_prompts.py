"""A model's ``warm_prompts`` file: the prompts its worker prefills into the
prefix cache right after loading (see ``ModelConfig.warm_prompts``).

The file is JSON: a list whose items are either a list of chat messages
(``{"role", "content"}``, content a string) or an object ``{"messages":
[...], "tools": [...]}`` whose tools are OpenAI function tools
(``{"type": "function", "function": {"name", "description",
"parameters"}}``), e.g. an agent's system prompt and tool list. Each item
becomes the :class:`~shared.protocol.GenerateRequest` a client would send
with those messages and tools, so the worker renders it exactly as it
renders such a request (same template, same tool rendering) and the first
real request that starts the same way finds its prefix cached.

Pure reading and decoding (no MLX); called once at load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Union

import msgspec

from shared.protocol import ChatMessage, GenerateRequest, SamplingParams, Tool

MAX_WARM_PROMPTS = 64
"""Most prompts one file may hold (each is a prefill at load)."""


class WarmPromptsError(ValueError):
    """The file is missing, unreadable or not in the format above; the
    message is one line naming the file."""


class _Message(msgspec.Struct, forbid_unknown_fields=True):
    role: Literal["system", "developer", "user", "assistant"]
    content: str


class _Function(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class _Tool(msgspec.Struct, forbid_unknown_fields=True):
    type: Literal["function"]
    function: _Function


class _Entry(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[_Message]
    tools: list[_Tool] = []


_DECODER = msgspec.json.Decoder(list[Union[list[_Message], _Entry]])


def read_warm_prompts(path: str) -> list[GenerateRequest]:
    """The requests the file at ``path`` describes, in file order (ids
    ``warm-0``, ``warm-1``, ...; one token to generate, never run).

    Raises:
        WarmPromptsError: see the class.
    """
    try:
        items = _DECODER.decode(Path(path).expanduser().read_bytes())
    except OSError as exc:
        raise WarmPromptsError(f"warm_prompts {path}: {exc.strerror or exc}") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise WarmPromptsError(f"warm_prompts {path}: {exc}") from None
    if len(items) > MAX_WARM_PROMPTS:
        raise WarmPromptsError(f"warm_prompts {path}: {len(items)} prompts; at most {MAX_WARM_PROMPTS}")
    requests = []
    for i, item in enumerate(items):
        entry = item if isinstance(item, _Entry) else _Entry(messages=item)
        if not entry.messages:
            raise WarmPromptsError(f"warm_prompts {path}: prompt {i} has no messages")
        messages = [
            ChatMessage(role="system" if m.role == "developer" else m.role, content=m.content) for m in entry.messages
        ]
        tools = [
            Tool(name=t.function.name, description=t.function.description, parameters=t.function.parameters)
            for t in entry.tools
        ]
        requests.append(
            GenerateRequest(
                request_id=f"warm-{i}",
                sampling=SamplingParams(max_tokens=1, temperature=0.0),
                messages=messages,
                tools=tools or None,
            )
        )
    return requests
