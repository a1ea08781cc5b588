"""Every common vision family end to end: one real gateway serves a tiny
random-weight model of each family mlxd serves
(:mod:`tests.tiny_vlm_families`, real mlx-vlm workers), asked about an
image through the openai SDK (chat), the Responses route and the anthropic
SDK. Greedy decoding: each answer equals mlx-vlm's own ``generate`` text
for the same turn and image (computed here, on this thread, from a second
load of the same directory), and two images give two answers."""

from __future__ import annotations

import base64
import io

import anthropic
import openai
import pytest

from tests.conftest import API_KEY, start_server
from tests.test_vision_families import SERVED
from tests.tiny_vlm_families import BUILDERS

TOKENS = 6


def png(color: tuple[int, int, int]) -> bytes:
    """A 64x64 one-color PNG made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 64), color).save(out, format="PNG")
    return out.getvalue()


RED, BLUE = png((255, 0, 0)), png((0, 0, 255))


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, str]:
    """Each served family's model directory."""
    return {family: str(BUILDERS[family](tmp_path_factory.mktemp(family) / "m")) for family in SERVED}


@pytest.fixture(scope="module")
def server(paths, tmp_path_factory):
    """A gateway serving one model per family, named after its family."""
    srv = start_server(
        tmp_path_factory.mktemp("families-gw"),
        [{"name": family, "source": path, "max_batch_size": 4} for family, path in paths.items()],
    )
    try:
        yield srv
    finally:
        srv.stop()


def library_text(path: str, text: str, image: bytes) -> str:
    """mlx-vlm's own greedy text for ``text`` then ``image`` (the
    processor's chat template, or its tokenizer's where the processor has
    none), without replacement characters (see :func:`readable`)."""
    from mlx_vlm import generate, load
    from PIL import Image

    model, processor = load(path)
    templater = processor if getattr(processor, "chat_template", None) else processor.tokenizer
    prompt = templater.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": text}, {"type": "image"}]}],
        add_generation_prompt=True,
        tokenize=False,
    )
    picture = Image.open(io.BytesIO(image)).convert("RGB")
    return readable(generate(model, processor, prompt, image=[picture], max_tokens=TOKENS, temperature=0.0).text)


def readable(text: str) -> str:
    """``text`` without U+FFFD: a random model's tokens often cut a UTF-8
    character, which mlxd's streaming detokenizer shows as a replacement
    character and mlx-vlm's leaves out (the tokens themselves are compared
    exactly in tests/test_vision_families.py)."""
    return text.replace("\ufffd", "")


def data_url(blob: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(blob).decode()


@pytest.mark.parametrize("family", SERVED)
def test_each_family_answers_an_image_on_every_protocol(server, paths, family):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=300)
    answers = {}
    for name, image in (("red", RED), ("blue", BLUE)):
        want = library_text(paths[family], "Hi", image)
        # the Messages route puts each image block on a line of its own
        want_messages = library_text(paths[family], "Hi\n", image)
        chat = client.chat.completions.create(
            model=family,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi"},
                        {"type": "image_url", "image_url": {"url": data_url(image)}},
                    ],
                }
            ],
            max_tokens=TOKENS,
            temperature=0,
        )
        responses = client.responses.create(
            model=family,
            input=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "Hi"},
                        {"type": "input_image", "image_url": data_url(image), "detail": "auto"},
                    ],
                }
            ],
            max_output_tokens=TOKENS,
            temperature=0,
        )
        message = claude.messages.create(
            model=family,
            max_tokens=TOKENS,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Hi"},
                        {
                            "type": "image",
                            "source": {
                                "type": "base64",
                                "media_type": "image/png",
                                "data": base64.b64encode(image).decode(),
                            },
                        },
                    ],
                }
            ],
            extra_body={"temperature": 0},
        )
        got = {
            "chat": readable(chat.choices[0].message.content),
            "responses": readable(responses.output_text),
            "messages": readable("".join(block.text for block in message.content if block.type == "text")),
        }
        assert got == {"chat": want, "responses": want, "messages": want_messages}, (family, name)
        answers[name] = want
    assert answers["red"] != answers["blue"]
