"""Request validation shared by every protocol's body schemas.

What each ``*_schema`` module (OpenAI chat and completions, Responses,
Anthropic Messages, Ollama, embeddings) uses rather than repeating it:

* the bounds and bounded field types (``ModelName``, ``Text``,
  ``MaxTokens``, ``ToolName``, :data:`Metadata`, ...): bounds live in the
  types, so msgspec refuses an out-of-range value while decoding;
* :func:`decode_body`: one JSON body (or one piece of it) into a Struct,
  strictly (no coercion, unknown fields refused), with the one parser of
  msgspec's validation errors, :func:`validation_error`, in the wording of
  the protocol (``"openai"`` or ``"anthropic"``, see :data:`Wording`);
* the refusals every schema words the same way: :func:`not_supported`,
  :func:`field_error`, :func:`is_null`, :func:`is_given`, :func:`check_finite` and
  :func:`one_of`.

Every refusal is an :class:`~gateway.core.errors.APIError` 400 whose ``param``
is the offending field path (``messages[0].content``). Pure functions, no
I/O: called on the event loop while a body is decoded.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Collection, Literal, Union

import msgspec
from msgspec import UNSET, Meta, Raw

from gateway.core.errors import APIError, bad_request

MAX_MESSAGES = 2048
"""Most chat messages in one request."""
MAX_TEXT_CHARS = 8 * 1024 * 1024
"""Longest single text (message content, part text, prompt) in characters."""
MAX_CONTENT_PARTS = 1024
"""Most content parts in one message."""
MAX_NAME_CHARS = 256
"""Longest ``model``, ``user`` or message ``name``."""
MAX_STOP = 16
"""Most stop strings."""
MAX_STOP_CHARS = 512
"""Longest stop string."""
MAX_LOGIT_BIAS = 1024
"""Most ``logit_bias`` entries."""
MAX_PROMPT_TOKENS = 1_048_576
"""Most token ids in a completions ``prompt``."""
MAX_TOKEN_ID = 2**31 - 1
"""Largest token id accepted in ``prompt`` or ``logit_bias``."""
MAX_GENERATED_TOKENS = 1_000_000
"""Largest ``max_tokens`` / ``max_completion_tokens`` / ``min_tokens`` / ``top_k``."""
MAX_TOP_LOGPROBS = 20
"""Most log-probability alternatives per token (chat ``top_logprobs``,
completions ``logprobs``)."""
MAX_CHOICES = 2**31 - 1
"""Type bound of ``n``; the real limit is the model's ``max_n``."""
MAX_TOOLS = 128
"""Most ``tools`` in one request, and most ``tool_calls`` in one message
(chat and Responses)."""
MAX_TOOL_NAME_CHARS = 64
"""Longest tool (function) name and ``json_schema`` name (chat and
Responses)."""
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]+$"
"""What a tool name may consist of (chat and Responses)."""

NULL = Raw(b"null")
"""The default of a ``Raw`` field that is refused or ignored unless sent
(:func:`is_null` tells whether it was)."""

# --- field types (bounds live in the types) ---------------------------------

ModelName = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]
ShortText = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]
Text = Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]
MaxTokens = Annotated[int, Meta(ge=1, le=MAX_GENERATED_TOKENS)]
MinTokens = Annotated[int, Meta(ge=0, le=MAX_GENERATED_TOKENS)]
Choices = Annotated[int, Meta(ge=1, le=MAX_CHOICES)]
TopLogprobs = Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1, le=MAX_GENERATED_TOKENS)]
MinP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
RepetitionPenalty = Annotated[float, Meta(gt=0.0, le=10.0)]
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
TokenId = Annotated[int, Meta(ge=0, le=MAX_TOKEN_ID)]
StopString = Annotated[str, Meta(min_length=1, max_length=MAX_STOP_CHARS)]
Stop = Union[StopString, Annotated[list[StopString], Meta(max_length=MAX_STOP)], None]
LogitBias = Annotated[
    dict[TokenId, Annotated[float, Meta(ge=-100.0, le=100.0)]],
    Meta(max_length=MAX_LOGIT_BIAS),
]
TokenIds = Annotated[list[TokenId], Meta(max_length=MAX_PROMPT_TOKENS)]
PromptItem = Union[Text, TokenId, TokenIds]
Prompt = Union[Text, Annotated[list[PromptItem], Meta(max_length=MAX_PROMPT_TOKENS)]]
ToolName = Annotated[str, Meta(min_length=1, max_length=MAX_TOOL_NAME_CHARS, pattern=TOOL_NAME_PATTERN)]
SchemaName = Annotated[str, Meta(min_length=1, max_length=MAX_TOOL_NAME_CHARS)]
Identifier = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]
JSONObject = dict[str, Any]


MAX_METADATA = 16
"""Most ``metadata`` pairs (chat and Responses)."""
MAX_METADATA_KEY_CHARS = 64
"""Longest ``metadata`` key."""
MAX_METADATA_VALUE_CHARS = 512
"""Longest ``metadata`` value."""

Metadata = Annotated[
    dict[
        Annotated[str, Meta(max_length=MAX_METADATA_KEY_CHARS)],
        Annotated[str, Meta(max_length=MAX_METADATA_VALUE_CHARS)],
    ],
    Meta(max_length=MAX_METADATA),
]
"""``metadata``: up to 16 string pairs (chat and Responses)."""


# --- decoding ----------------------------------------------------------------

Wording = Literal["openai", "anthropic"]
"""How a protocol words a refused field. ``"openai"`` (chat, completions,
Responses, Ollama, embeddings): "Unrecognized request argument supplied:
<param>", "Missing required parameter: '<param>'", "Invalid value for
'<param>': <problem>". ``"anthropic"``: "<param>: Extra inputs are not
permitted", "<param>: Field required", "<param>: <problem>"."""

_AT = re.compile(r"^(?P<msg>.*?) - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`$", re.DOTALL)
_FIELD = re.compile(r"^Object (?P<what>contains unknown|missing required) field `(?P<name>[^`]*)`$")


def join_path(base: str, name: str) -> str:
    """Return ``base.name`` (``name`` when ``base`` is the root; ``base[i]``
    for an index ``name`` that starts with ``[``)."""
    if not base:
        return name
    return base + name if name.startswith("[") else f"{base}.{name}"


def field_error(param: str, problem: str) -> APIError:
    """A 400 about ``param`` whose message starts with the field path
    (``"<param>: <problem>"``; just ``problem`` when ``param`` is empty,
    then with no ``param``)."""
    return bad_request(f"{param}: {problem}" if param else problem, param or None)


def validation_error(exc: msgspec.ValidationError, wording: Wording = "openai", base: str = "") -> APIError:
    """Translate a msgspec validation error into a 400 naming its field.

    msgspec reports ``"<problem> - at `$.a[0].b`"``; the path becomes
    ``param`` (``a[0].b``), prefixed by ``base`` (the path of the piece
    being decoded, ``""`` for a whole body). Unknown and missing fields and
    other problems are worded as ``wording`` says (:data:`Wording`). In the
    OpenAI wording ``[...]`` dict-value markers are dropped from the path
    and a refused dict key is explained as a token id (``logit_bias``). A
    body that is not a JSON object is "The request body must be a JSON
    object" in both.
    """
    text = str(exc)
    match = _AT.match(text)
    problem, path = (match["msg"], match["path"]) if match else (text, "")
    if wording == "openai":
        path = join_path(base, path.replace("[...]", "").lstrip("."))
        if match and match["key"]:
            problem = f"keys must be token ids (non-negative integers, as strings); {problem}"
    else:
        path = join_path(base, path.lstrip(".")) if path else base
    field = _FIELD.match(problem)
    if field is not None:
        if wording == "openai":
            param = f"{path}.{field['name']}" if path else field["name"]
            if field["what"] == "contains unknown":
                return bad_request(f"Unrecognized request argument supplied: {param}", param)
            return bad_request(f"Missing required parameter: '{param}'", param)
        param = join_path(path, field["name"])
        if field["what"] == "contains unknown":
            return field_error(param, "Extra inputs are not permitted")
        return field_error(param, "Field required")
    if not path and problem.startswith("Expected `object`"):
        return bad_request("The request body must be a JSON object")
    if wording == "openai":
        return bad_request(f"Invalid value for '{path}': {problem}", path or None)
    return field_error(path, problem)


def decode_body(decoder: msgspec.json.Decoder, body: bytes, wording: Wording = "openai", base: str = "") -> Any:
    """Decode a JSON request body (or one piece of it, whose path is
    ``base``) with ``decoder``.

    Raises:
        APIError: 400 "The request body is empty; expected a JSON object"
        for an empty or blank ``body``, 400 "The request body is not valid
        JSON (...)" for malformed JSON, and the 400 of
        :func:`validation_error` (in ``wording``) for a value of the wrong
        type or out of bounds, an unknown or missing field, or a body that
        is not an object.
    """
    if not body.strip():
        raise bad_request("The request body is empty; expected a JSON object")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise validation_error(exc, wording, base) from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"The request body is not valid JSON ({_decode_cause(body, exc)})") from None


def peek_object(body: bytes, marker: bytes) -> dict[str, Any] | None:
    """The JSON object in ``body`` when its bytes contain ``marker`` (a
    cheap test that skips the parse for most bodies); None when they do not,
    when it is not valid JSON or not an object. Never raises: a body that
    fails here is refused later by its protocol's own decoder."""
    if marker not in body:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _decode_cause(body: bytes, exc: msgspec.DecodeError) -> str:
    """Why ``body`` is not JSON, in words: msgspec's message, except where
    it misleads (an unpaired UTF-16 surrogate escape such as ``\\ud800``,
    which Python's lenient parser accepts, is reported as "truncated")."""
    if "truncated" in str(exc):
        try:
            json.loads(body)
        except ValueError:
            pass
        else:
            return "a string holds an unpaired UTF-16 surrogate escape"
    return str(exc)


# --- checks beyond what the types express -------------------------------------


def not_supported(param: str, what: str, wording: Wording = "openai", yet: bool = False) -> APIError:
    """A 400 about ``param`` saying ``what`` "is not supported" (``yet``:
    "is not supported yet", the chat completions wording); in the Anthropic
    wording the message starts with ``param`` (:func:`field_error`)."""
    message = f"{what} is not supported yet" if yet else f"{what} is not supported"
    return field_error(param, message) if wording == "anthropic" else bad_request(message, param)


def is_null(raw: Raw) -> bool:
    """Whether ``raw`` is the JSON ``null`` (a ``Raw`` field left at
    :data:`NULL` or sent as null)."""
    return bytes(raw).strip() == b"null"


def is_given(value: object) -> bool:
    """Whether an optional field was sent with a value (null counts as not)."""
    if value is UNSET or value is None:
        return False
    return not (isinstance(value, Raw) and is_null(value))


def check_finite(req: object, names: Collection[str]) -> None:
    """Refuse a non-finite value (NaN or infinite) in any of the float
    fields ``names`` of ``req`` (an unset field, None, is fine).

    Raises:
        APIError: 400 "'<name>' must be a finite number", param ``<name>``,
        for the first such field in the order of ``names``.
    """
    for name in names:
        value = getattr(req, name)
        if value is not None and not math.isfinite(value):
            raise bad_request(f"'{name}' must be a finite number", name)


def one_of(value: str | None, allowed: Collection[str], param: str) -> None:
    """Refuse ``value`` unless it is None or one of ``allowed``.

    Raises:
        APIError: 400 "Invalid value for '<param>' ..." naming ``param``.
    """
    if value is not None and value not in allowed:
        raise bad_request(f"Invalid value for '{param}': '{value}'; expected one of {', '.join(allowed)}", param)
