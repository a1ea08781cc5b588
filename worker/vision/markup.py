"""What a model's chat template writes for a media part (image, video, audio clip).

The prompt builder renders a chat with placeholders where the media
stand; these functions read, from the template itself, the text it
writes for one part (:func:`part_markup`) and, for the layouts that need
them, the ids around the part's token (:func:`media_markup`,
:func:`video_markup`). No MLX; input thread.
"""

from __future__ import annotations

from typing import Any

from worker.vision.video import VideoLayout


class UnsupportedProcessor(TypeError):
    """The model's processor is not one this module knows how to drive
    without MLX (see the module docstring)."""


def video_markup(tokenizer: Any, layout: VideoLayout) -> tuple[list[int], list[int]]:
    """The ids the chat template puts before a video's vision start token
    and after its vision end token (the marker of a video stands in place
    of those two and the video token between them, see
    :meth:`ImagePreparer.prepare`).

    Raises:
        UnsupportedProcessor: as :func:`media_markup`, or the template
            does not wrap the video token in the vision start and end
            tokens.
    """
    before, after = media_markup(tokenizer, "video", layout.video_token_id)
    if not before or before[-1] != layout.start_id or not after or after[0] != layout.end_id:
        raise UnsupportedProcessor("the chat template does not wrap a video's token in the vision start and end tokens")
    return before[:-1], after[1:]


def media_markup(tokenizer: Any, part_type: str, token_id: int) -> tuple[list[int], list[int]]:
    """The ids the chat template puts before and after the token of a
    ``part_type`` (``image`` or ``video``) content part, read by rendering
    a one-part user turn and a text-only one and tokenizing what differs.

    Raises:
        UnsupportedProcessor: the template does not render content-part
            lists, or does not place exactly one ``token_id`` for the part
            (the model could not be given it faithfully).
    """
    article = "an" if part_type[:1] in "aeiou" else "a"
    ids = list(tokenizer.encode(part_markup(tokenizer, part_type), add_special_tokens=False))
    if ids.count(token_id) != 1:
        raise UnsupportedProcessor(
            f"the chat template does not place one {part_type} token for {article} {part_type} part"
        )
    at = ids.index(token_id)
    return ids[:at], ids[at + 1 :]


def part_markup(tokenizer: Any, part_type: str) -> str:
    """The text the chat template writes for a ``part_type`` content part
    (``image``, ``video``, ``audio``), read by rendering a one-part user
    turn and a text-only one and keeping what differs.

    Raises:
        UnsupportedProcessor: the template does not render content-part
            lists, or renders the part as nothing.
    """
    article = "an" if part_type[:1] in "aeiou" else "a"
    try:
        with_part, without = (
            tokenizer.apply_chat_template(
                [{"role": "user", "content": content}], add_generation_prompt=False, tokenize=False
            )
            for content in ([{"type": part_type}, {"type": "text", "text": "."}], [{"type": "text", "text": "."}])
        )
    except Exception as exc:  # a template without content-part lists
        raise UnsupportedProcessor(f"the chat template cannot render {article} {part_type} part: {exc}") from None
    start = 0
    while start < min(len(with_part), len(without)) and with_part[start] == without[start]:
        start += 1
    end = 0
    while end < len(without) - start and with_part[len(with_part) - 1 - end] == without[len(without) - 1 - end]:
        end += 1
    markup = with_part[start : len(with_part) - end]
    if not markup:
        raise UnsupportedProcessor(f"the chat template writes nothing for {article} {part_type} part")
    return markup
