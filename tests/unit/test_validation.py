"""The shared request validation (:mod:`gateway.frontend.validation`): one decoder and
one msgspec-error parser, worded per protocol."""

from __future__ import annotations

import msgspec
import pytest
from msgspec import Raw

from gateway.core.errors import APIError
from gateway.frontend.validation import (
    NULL,
    LogitBias,
    MaxTokens,
    decode_body,
    field_error,
    is_null,
    join_path,
    not_supported,
)


class Inner(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    n: MaxTokens


class Body(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    model: str
    items: list[Inner] = []
    bias: LogitBias | None = None
    extra: Raw = NULL


_decoder = msgspec.json.Decoder(Body)


def refused(body: bytes, wording="openai", base="") -> APIError:
    with pytest.raises(APIError) as info:
        decode_body(_decoder, body, wording, base)
    assert info.value.status == 400
    return info.value


@pytest.mark.parametrize(
    "body, wording, base, param, message",
    [
        (b'{"model": "m", "x": 1}', "openai", "", "x", "Unrecognized request argument supplied: x"),
        (b"{}", "openai", "", "model", "Missing required parameter: 'model'"),
        (
            b'{"model": "m", "items": [{"n": 0}]}',
            "openai",
            "",
            "items[0].n",
            "Invalid value for 'items[0].n': Expected `int` >= 1",
        ),
        (b'{"model": "m", "items": [{"m": 1}]}', "openai", "", "items[0].m", None),
        (b'{"model": "m", "x": 1}', "anthropic", "", "x", "x: Extra inputs are not permitted"),
        (b"{}", "anthropic", "", "model", "model: Field required"),
        (b'{"model": "m", "items": [{"n": 0}]}', "anthropic", "", "items[0].n", "items[0].n: Expected `int` >= 1"),
        (
            b'{"model": "m", "x": 1}',
            "anthropic",
            "tools[2]",
            "tools[2].x",
            "tools[2].x: Extra inputs are not permitted",
        ),
        (b'{"model": 1}', "anthropic", "tools[2]", "tools[2].model", "tools[2].model: Expected `str`, got `int`"),
        (b"[1]", "openai", "", None, "The request body must be a JSON object"),
        (b"[1]", "anthropic", "", None, "The request body must be a JSON object"),
        (b"  ", "openai", "", None, "The request body is empty; expected a JSON object"),
    ],
)
def test_wordings(body, wording, base, param, message):
    err = refused(body, wording, base)
    assert err.param == param
    if message is not None:
        assert err.message == message


def test_dict_key_errors_name_the_field():
    err = refused(b'{"model": "m", "bias": {"-1": 1}}')
    assert err.param == "bias" and err.message.startswith("Invalid value for 'bias': keys must be token ids")


def test_malformed_json():
    assert refused(b'{"model": ').message.startswith("The request body is not valid JSON (")
    assert "unpaired UTF-16 surrogate" in refused(b'{"model": "\\ud800"}').message


def test_not_supported_wordings():
    assert not_supported("a", "X").message == "X is not supported"
    assert not_supported("a", "X", yet=True).message == "X is not supported yet"
    err = not_supported("a.b", "X", "anthropic")
    assert (err.message, err.param) == ("a.b: X is not supported", "a.b")


def test_field_error_and_join_path():
    assert (field_error("", "bad").message, field_error("", "bad").param) == ("bad", None)
    assert join_path("", "a") == "a" and join_path("a", "b") == "a.b" and join_path("a", "[0]") == "a[0]"


def test_is_null():
    assert is_null(NULL) and is_null(Raw(b" null ")) and not is_null(Raw(b"0"))
    assert not is_null(_decoder.decode(b'{"model": "m", "extra": {}}').extra)
