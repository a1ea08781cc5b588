"""Incremental detokenization and stop-string hold-back (no MLX needed)."""

from worker.output.detok import TextStream

TABLE = [b"Hel", b"lo", b" wor", b"ld", b"\xe2\x82", b"\xac", b"!", b" STOP", b"S", b"TOP"]


def feed(stop, tokens):
    stream = TextStream(TABLE, stop)
    parts = [stream.add(t) for t in tokens]
    return parts, stream


def test_plain_text_streams_through():
    parts, stream = feed([], [0, 1, 2, 3])
    assert parts == ["Hel", "lo", " wor", "ld"]
    assert stream.finish() == ""


def test_multibyte_character_is_held_until_complete():
    parts, stream = feed([], [4, 5, 6])
    assert parts == ["", "\u20ac", "!"]


def test_stop_string_cuts_and_stops():
    parts, stream = feed(["STOP"], [0, 1, 7, 0])
    assert "".join(parts) == "Hello "
    assert stream.stopped and stream.matched == "STOP"
    assert stream.add(0) == ""


def test_stop_string_split_across_tokens_is_held_back():
    parts, stream = feed(["STOP"], [0, 8, 9])
    assert parts == ["Hel", "", ""]
    assert stream.stopped
    assert "".join(parts) == "Hel"


def test_partial_match_is_released_at_finish():
    parts, stream = feed(["STOP"], [0, 8])
    assert "".join(parts) == "Hel"
    assert stream.finish() == "S"


def test_earliest_of_several_stops_wins():
    parts, stream = feed(["ld", "wor"], [0, 1, 2, 3])
    assert "".join(parts) == "Hello "
    assert stream.matched == "wor"
