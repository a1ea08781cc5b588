"""Splitting a streamed body into its events, as the official clients read it.

Two framings: server-sent events (OpenAI, Responses, Anthropic) and
newline-delimited JSON (Ollama). Both parsers are strict about what a client
would choke on and lenient only where the format itself is (SSE comments).
"""

from __future__ import annotations


def sse_events(text: str, complete: bool = True) -> list[tuple[str | None, str]]:
    """``(event, data)`` of each SSE frame in ``text``: comment lines
    (keep-alives) are skipped, multi-line ``data:`` joined with newlines.

    With ``complete`` False (a stream the client left early) a last frame
    without its closing blank line is dropped rather than judged.

    Raises ``AssertionError`` for a line that is neither a field nor a
    comment, or a frame with no ``data:`` line.
    """
    text = text.replace("\r\n", "\n")
    frames = text.split("\n\n")
    if not complete or not text.endswith("\n\n"):
        assert not complete or not frames[-1].strip(), f"stream ends inside a frame: {frames[-1][:200]!r}"
        frames = frames[:-1]
    events: list[tuple[str | None, str]] = []
    for frame in frames:
        event, data = None, []
        for line in frame.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            assert field in ("event", "data", "id", "retry"), f"not an SSE line: {line!r}"
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
        if event is not None or data:
            assert data, f"SSE frame without data: {frame!r}"
            events.append((event, "\n".join(data)))
    return events


def ndjson_lines(text: str, complete: bool = True) -> list[str]:
    """The JSON text of each line of an NDJSON body. Every line must be a
    value (the Ollama clients parse each line, so an empty line would break
    them); the body ends with a newline. With ``complete`` False a last,
    unterminated line is dropped."""
    lines = text.split("\n")
    last = lines.pop()
    assert not complete or last == "", f"NDJSON body does not end with a newline: {last[:200]!r}"
    for number, line in enumerate(lines):
        assert line.strip(), f"empty NDJSON line {number}"
    return lines
