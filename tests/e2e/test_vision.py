"""Images on every protocol, end to end: a real gateway configured from a
TOML file serves the tiny random-weight VLM of ``tests/tiny_vlm.py`` (a real
mlx-vlm worker) next to the tiny text model, and is asked through the
openai and anthropic SDKs and plain HTTP, with real PNG/JPEG bytes made by
Pillow. Greedy decoding, so an answer depends only on the prompt and the
image; that the worker's answers equal mlx-vlm's own is checked in process
by ``tests/test_vision_engine.py``."""

from __future__ import annotations

import base64
import concurrent.futures as cf
import http.server
import io
import struct
import threading
import zlib

import anthropic
import httpx
import openai
import pytest

from tests.conftest import API_KEY, TINY, mean_batch, settled_stats, start_server
from tests.tiny_vlm import PIXELS, build_tiny_vlm

VLM = "tiny-vlm"
TOKENS = 6
IMAGE_TOKENS = PIXELS["max_pixels"] // (32 * 32)
"""The image tokens of one 64x64 image in the tiny VLM: 16-pixel patches
merged 2x2, so one token per 32x32 pixels (4)."""


def _image(color: tuple[int, int, int], fmt: str = "PNG", size: tuple[int, int] = (64, 64)) -> bytes:
    """Real image bytes made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format=fmt)
    return out.getvalue()


RED = _image((255, 0, 0))
BLUE = _image((0, 0, 255), "JPEG")


def _data_url(blob: bytes, media: str = "image/png") -> str:
    """``blob`` as a base64 data URL."""
    return f"data:{media};base64,{base64.b64encode(blob).decode()}"


def _bomb_png(side: int = 60_000) -> bytes:
    """A small PNG whose header claims ``side`` x ``side`` pixels (a
    decompression bomb: a few rows of data, billions of pixels claimed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (side + 1) * 4)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """A gateway serving the tiny VLM (kind detected from its config) and
    the tiny text model."""
    vlm = build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm") / "m")
    srv = start_server(
        tmp_path_factory.mktemp("vision-gw"),
        [
            {"name": VLM, "source": str(vlm), "max_batch_size": 8},
            {"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 4},
        ],
    )
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def client(server):
    """The openai SDK."""
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def claude(server):
    """The anthropic SDK."""
    return anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=300)


def _chat(client, image: bytes, *, model: str = VLM, stream: bool = False, media: str = "image/png"):
    """A greedy chat completion for "Hi" and one image: (text, usage)."""
    content = [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": _data_url(image, media)}}]
    kwargs = dict(model=model, messages=[{"role": "user", "content": content}], max_tokens=TOKENS, temperature=0)
    if not stream:
        answer = client.chat.completions.create(**kwargs)
        return answer.choices[0].message.content, answer.usage
    text, usage = "", None
    for chunk in client.chat.completions.create(**kwargs, stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    return text, usage


def tower_runs(server, act) -> tuple[object, int, int]:
    """Run ``act()`` and return its result with how many prompts the VLM's
    vision tower ran on meanwhile and how many image tokens they held
    (the worker's own counters, before and after)."""
    before = settled_stats(server, VLM)
    result = act()
    after = settled_stats(server, VLM)
    return (
        result,
        after["vision_prefills"] - before["vision_prefills"],
        after["vision_image_tokens"] - before["vision_image_tokens"],
    )


def test_models_say_which_take_images(server, client):
    """/v1/models and Ollama's show name the vision model."""
    models = httpx.get(f"{server.url}/v1/models", headers=server.headers, timeout=60).json()["data"]
    cards = {card["id"]: card for card in models}
    assert cards[VLM]["vision"] is True and cards[TINY]["vision"] is False
    show = httpx.post(f"{server.url}/api/show", json={"model": VLM}, headers=server.headers, timeout=60).json()
    assert "vision" in show["capabilities"]


def test_openai_chat_streamed_and_not(server, client):
    """The image decides the answer; streamed equals not streamed; a
    repeated image is a prefix-cache hit with the same answer as cold: the
    vision tower does not run again and the cached tokens cover the
    image's."""
    (red, red_usage), runs, image_tokens = tower_runs(server, lambda: _chat(client, RED))
    assert (runs, image_tokens) == (1, IMAGE_TOKENS)  # the image went through the vision tower
    blue, _ = _chat(client, BLUE, media="image/jpeg")
    assert red and blue and red != blue
    (streamed, usage), runs, _ = tower_runs(server, lambda: _chat(client, RED, stream=True))
    assert streamed == red
    assert runs == 0  # the image came from the cache, not from the vision tower
    # everything but the last prompt token (after the image) was reused
    assert usage.prompt_tokens == red_usage.prompt_tokens
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens - 1
    content = [
        {"type": "text", "text": "Hi"},
        {"type": "image_url", "image_url": {"url": _data_url(BLUE, "image/jpeg")}},
    ]
    two = client.chat.completions.create(
        model=VLM, messages=[{"role": "user", "content": content}], max_tokens=TOKENS, temperature=0, n=2
    )
    assert [choice.message.content for choice in two.choices] == [blue, blue]


def test_responses_input_image(client):
    """Responses ``input_image``, streamed and not, answers as chat does."""
    want, _ = _chat(client, RED)
    content = [
        {"type": "input_text", "text": "Hi"},
        {"type": "input_image", "image_url": _data_url(RED), "detail": "auto"},
    ]
    kwargs = dict(model=VLM, input=[{"role": "user", "content": content}], max_output_tokens=TOKENS, temperature=0)
    assert client.responses.create(**kwargs).output_text == want
    text = ""
    for event in client.responses.create(**kwargs, stream=True):
        if event.type == "response.output_text.delta":
            text += event.delta
    assert text == want


def test_responses_tool_output_images_reach_a_vision_model(server, client):
    """An ``input_image`` in a function call's output (Codex's view_image)
    is an image for the vision model: the vision tower runs on it and each
    image adds its own image tokens (not a text placeholder)."""

    def prompt_tokens(images: list[bytes]) -> int:
        output = [{"type": "input_image", "image_url": _data_url(i)} for i in images]
        items = [
            {"role": "user", "content": "Look"},
            {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": output},
        ]
        tools = [{"type": "function", "name": "view_image", "parameters": {"type": "object", "properties": {}}}]
        answer = client.responses.create(model=VLM, input=items, tools=tools, max_output_tokens=1, temperature=0)
        return answer.usage.input_tokens

    one, runs, image_tokens = tower_runs(server, lambda: prompt_tokens([RED]))
    assert (runs, image_tokens) == (1, IMAGE_TOKENS)
    two, runs, image_tokens = tower_runs(server, lambda: prompt_tokens([RED, RED]))
    assert (runs, image_tokens) == (1, 2 * IMAGE_TOKENS)
    assert two - one >= IMAGE_TOKENS


def _image_block(blob: bytes, media: str = "image/png") -> dict:
    """An Anthropic base64 image block."""
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": base64.b64encode(blob).decode()}}


def test_anthropic_image_blocks_and_tool_results(server, claude):
    """Anthropic image blocks, streamed and not; images inside a
    tool_result reach a vision model (the vision tower runs on each, and
    counting tokens agrees with the prompt that ran)."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "Hi"}, _image_block(RED)]}]
    answer = claude.messages.create(model=VLM, max_tokens=TOKENS, messages=messages, extra_body={"temperature": 0})
    text = "".join(block.text for block in answer.content if block.type == "text")
    assert text and answer.usage.input_tokens > 10
    with claude.messages.stream(
        model=VLM, max_tokens=TOKENS, messages=messages, extra_body={"temperature": 0}
    ) as stream:
        assert stream.get_final_text() == text

    def tool_turns(images: list[bytes]) -> list[dict]:
        result = {"type": "tool_result", "tool_use_id": "t1", "content": [_image_block(i) for i in images]}
        return [
            {"role": "user", "content": "Look"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "look", "input": {}}]},
            {"role": "user", "content": [result]},
        ]

    tools = [{"name": "look", "description": "d", "input_schema": {"type": "object"}}]
    one = claude.messages.count_tokens(model=VLM, messages=tool_turns([RED]), tools=tools).input_tokens
    two = claude.messages.count_tokens(model=VLM, messages=tool_turns([RED, BLUE]), tools=tools).input_tokens
    assert two - one >= IMAGE_TOKENS
    for images in ([RED], [RED, BLUE]):
        reply, runs, image_tokens = tower_runs(
            server,
            lambda i=images: claude.messages.create(model=VLM, max_tokens=TOKENS, messages=tool_turns(i), tools=tools),
        )
        assert reply.stop_reason in ("end_turn", "max_tokens", "tool_use")
        assert (runs, image_tokens) == (1, len(images) * IMAGE_TOKENS)  # the images, not a placeholder line
        whole = reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0)
        assert whole == (one if len(images) == 1 else two)
    # a text model keeps the placeholder for tool_result images
    text_model = claude.messages.create(model=TINY, max_tokens=2, messages=tool_turns([RED]), tools=tools)
    assert text_model.usage.input_tokens > 0


LONG = 600
"""Tokens per answer in the batching test: long enough that requests that
reach the worker a little apart still decode side by side."""

BURSTS = 3
"""Bursts the batching test sends at most (see its docstring)."""


def test_image_and_text_requests_batch(server, client):
    """Four image requests and two text requests sent together all answer
    as they do alone, and decode in shared steps: in a burst's own window,
    a step held more rows than the four image requests could fill, so image
    rows and text rows were decoded together.

    The worker's row high-water mark (``max_batch_seen``, rows, not tokens:
    a speculative step counts a row once) rising past 4 during the burst is
    the event. How many requests meet in the engine depends on when each
    reaches the worker: on a loaded machine a burst may reach it in parts
    that never overlap (no step can then hold both kinds), so the burst is
    sent again, up to :data:`BURSTS` times; an engine that never puts image
    and text rows in one step fails every burst."""

    def image_answer(image: bytes, media: str) -> str:
        content = [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": _data_url(image, media)}}]
        return _long(client, [{"role": "user", "content": content}])

    def text_answer() -> str:
        return _long(client, [{"role": "user", "content": "Hello there"}])

    pairs = [(RED, "image/png"), (BLUE, "image/jpeg")]
    alone = [image_answer(*pair) for pair in pairs]
    alone_text = text_answer()
    together = threading.Barrier(6)  # every client thread of a burst is up before any of them sends

    def at_once(ask, *args) -> str:
        together.wait(timeout=120)
        return ask(*args)

    seen = []
    for _ in range(BURSTS):
        before = settled_stats(server, VLM)
        with cf.ThreadPoolExecutor(6) as pool:
            images = [pool.submit(at_once, image_answer, *pair) for pair in pairs * 2]
            texts = [pool.submit(at_once, text_answer) for _ in range(2)]
            got = [f.result(timeout=600) for f in images]
            got_text = [f.result(timeout=600) for f in texts]
        assert got == alone * 2 and got_text == [alone_text] * 2
        after = settled_stats(server, VLM)
        assert after["requests_finished"] - before["requests_finished"] == 6
        assert after["generated_tokens"] - before["generated_tokens"] == 6 * LONG
        rows = (before["max_batch_seen"], after["max_batch_seen"])
        seen.append({"most rows a step, before and after": rows, "tokens a step": round(mean_batch(before, after), 2)})
        # image rows alone are at most 4 a step (text rows alone at most 2): more is both kinds at once
        if after["max_batch_seen"] > max(before["max_batch_seen"], 4):
            break
    else:
        pytest.fail(f"no step held image and text rows together in {BURSTS} bursts: {seen}")


def _long(client, messages: list[dict]) -> str:
    """A greedy answer of exactly :data:`LONG` tokens."""
    answer = client.chat.completions.create(
        model=VLM, messages=messages, max_tokens=LONG, temperature=0, extra_body={"ignore_eos": True}
    )
    assert answer.usage.completion_tokens == LONG
    return answer.choices[0].message.content


def _post(server, path: str, body: dict) -> httpx.Response:
    """A raw POST with the test key."""
    headers = {**server.headers, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=120)


def _openai_body(model: str, url: str, count: int = 1) -> dict:
    """A chat body with ``count`` copies of the image at ``url``."""
    parts = [{"type": "image_url", "image_url": {"url": url}}] * count
    return {
        "model": model,
        "messages": [{"role": "user", "content": [*parts, {"type": "text", "text": "Hi"}]}],
        "max_tokens": 2,
    }


@pytest.mark.parametrize(
    ("url", "words"),
    [
        (_data_url(RED[: len(RED) // 2]), "image 0 is truncated or corrupt"),
        (_data_url(b"GIF89a not really an image at all"), "image 0 is not a PNG, JPEG, GIF or WebP"),
        (_data_url(b"plain text, not an image"), "image 0 is not a PNG, JPEG, GIF or WebP"),
        (_data_url(_bomb_png()), "a decompression bomb"),
        (_data_url(_bomb_png(7000)), "image 0 is 7000x7000 pixels"),
        (_data_url(_image((1, 2, 3), size=(9000, 1))), "image 0 is 9000x1 pixels"),
    ],
)
def test_bad_images_are_400s_and_the_worker_keeps_serving(server, client, url, words):
    """Each bad image is a 400 in the protocol's shape saying which image;
    the next request is answered."""
    response = _post(server, "/v1/chat/completions", _openai_body(VLM, url))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and words in error["message"]
    assert error["param"] == "messages[0].content[0].image_url.url"
    assert _chat(client, RED)[0]


def test_too_many_images_and_anthropic_shape(server):
    """Nine images are refused (at most eight); a corrupt image through the
    Anthropic route is a 400 in Anthropic's shape."""
    response = _post(server, "/v1/chat/completions", _openai_body(VLM, _data_url(RED), count=9))
    assert response.status_code == 400 and "too many images" in response.json()["error"]["message"]
    body = {"model": VLM, "max_tokens": 2, "messages": [{"role": "user", "content": [_image_block(RED[:40])]}]}
    response = _post(server, "/v1/messages", body)
    assert response.status_code == 400
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "invalid_request_error"
    assert response.json()["error"]["message"].startswith("messages[0].content[0].source: image 0")


def _image_bodies(model: str, url: str, greedy: bool = False) -> list[tuple[str, dict, str]]:
    """The same image on each protocol: (path, body, param the 400 names).
    ``greedy``: text before the image, :data:`TOKENS` greedy tokens (an
    answer that depends on the image and where it stands)."""
    responses_content = [{"type": "input_image", "image_url": url}, {"type": "input_text", "text": "Hi"}]
    source = (
        {"type": "url", "url": url}
        if url.startswith("http")
        else {"type": "base64", "media_type": "image/png", "data": url.split(",", 1)[1]}
    )
    anthropic_content = [{"type": "image", "source": source}, {"type": "text", "text": "Hi"}]
    bodies = [
        ("/v1/chat/completions", _openai_body(model, url), "messages[0].content[0].image_url.url"),
        (
            "/v1/responses",
            {"model": model, "input": [{"role": "user", "content": responses_content}], "max_output_tokens": 2},
            "input[0].content[0].image_url",
        ),
        (
            "/v1/messages",
            {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": anthropic_content}]},
            "messages[0].content[0].source.url",
        ),
    ]
    if greedy:
        for _, body, _ in bodies:
            turn = (body.get("messages") or body.get("input"))[0]
            turn["content"] = turn["content"][::-1]  # "Hi", then the image
            body["temperature"] = 0
            body["max_tokens" if "max_tokens" in body else "max_output_tokens"] = TOKENS
    return bodies


def _answer(path: str, body: dict) -> str:
    """The answer text of a non-streamed response on ``path``'s protocol."""
    if path == "/v1/chat/completions":
        return body["choices"][0]["message"]["content"]
    if path == "/v1/responses":
        return "".join(c["text"] for item in body["output"] if item["type"] == "message" for c in item["content"])
    return "".join(block["text"] for block in body["content"] if block["type"] == "text")


def _prompt_tokens(path: str, body: dict) -> int:
    """The whole prompt's token count of a non-streamed response on
    ``path``'s protocol (Anthropic's counts computed and cache-read tokens
    apart)."""
    usage = body["usage"]
    if path == "/v1/messages":
        return usage["input_tokens"] + usage["cache_read_input_tokens"]
    return usage.get("prompt_tokens", usage.get("input_tokens"))


def test_text_model_refuses_images_on_every_protocol(server):
    """An image sent to the text model is a 400 saying it has no vision."""
    for path, body, _ in _image_bodies(TINY, _data_url(RED)):
        response = _post(server, path, body)
        assert response.status_code == 400, (path, response.text)
        assert "has no vision support" in response.json()["error"]["message"], path


def test_remote_urls_are_refused_by_default(server):
    """With the default [images] config an http(s) image URL is a 400 on
    every protocol, naming the part, and nothing is fetched."""
    for path, body, param in _image_bodies(VLM, "http://127.0.0.1:9/cat.png"):
        response = _post(server, path, body)
        assert response.status_code == 400, (path, response.text)
        error = response.json()["error"]
        assert "remote_fetch is off" in error["message"], path
        if path != "/v1/messages":
            assert error["param"] == param, path


def test_ollama_images(server):
    """Ollama's ``messages[].images`` and generate's ``images`` (bare
    base64) reach a vision model: the image's tokens are in the prompt
    count; with ``raw`` they are refused."""

    def chat(images: list[str]) -> dict:
        message = {"role": "user", "content": "Hi", "images": images}
        body = {"model": VLM, "messages": [message], "stream": False, "options": {"num_predict": 2, "temperature": 0}}
        response = httpx.post(f"{server.url}/api/chat", json=body, headers=server.headers, timeout=120)
        assert response.status_code == 200, response.text
        return response.json()

    with_image = chat([base64.b64encode(RED).decode()])
    assert with_image["prompt_eval_count"] >= chat([])["prompt_eval_count"] + 4

    def generate(images: list[str], **extra) -> httpx.Response:
        body = {"model": VLM, "prompt": "Hi", "images": images, "stream": False, "options": {"num_predict": 2}}
        return httpx.post(f"{server.url}/api/generate", json={**body, **extra}, headers=server.headers, timeout=120)

    image = base64.b64encode(RED).decode()
    assert generate([image]).json()["prompt_eval_count"] >= generate([]).json()["prompt_eval_count"] + 4
    raw = generate([image], raw=True)
    assert raw.status_code == 400 and "raw" in raw.json()["error"]


class _ImageHandler(http.server.BaseHTTPRequestHandler):
    """Serves :data:`RED` as a PNG at any path."""

    def do_GET(self) -> None:  # noqa: N802 (the http.server name)
        """Answer with the red PNG."""
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(RED)))
        self.end_headers()
        self.wfile.write(RED)

    def log_message(self, *args) -> None:
        """Quiet."""


def test_remote_images_fetched_when_the_config_allows(tiny_model_dir, tmp_path_factory):
    """With [images] remote_fetch on and the loopback image server allowed,
    an http image URL answers as the same image sent inline, on each
    protocol's URL form; a host outside the allow-list is still a 400."""
    images = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ImageHandler)
    threading.Thread(target=images.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{images.server_address[1]}/red.png"
    vlm = build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm-remote") / "m")
    extra = '[images]\nremote_fetch = true\nallowed_hosts = ["127.0.0.1"]\nallowed_networks = ["127.0.0.0/8"]\n'
    srv = start_server(tmp_path_factory.mktemp("vision-remote"), [{"name": VLM, "source": str(vlm)}], extra=extra)
    try:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
        inline, _ = _chat(client, RED)
        for (path, remote_body, _), (_, inline_body, _) in zip(
            _image_bodies(VLM, url, greedy=True), _image_bodies(VLM, _data_url(RED), greedy=True)
        ):
            response = _post(srv, path, remote_body)
            assert response.status_code == 200, (path, response.text)
            want = _post(srv, path, inline_body)
            assert want.status_code == 200, (path, want.text)
            # the fetched image is the image, in its place: the same greedy answer and prompt
            assert _answer(path, response.json()) == _answer(path, want.json()), path
            assert _prompt_tokens(path, response.json()) == _prompt_tokens(path, want.json()), path
        content = [{"type": "text", "text": "Hi"}, {"type": "image_url", "image_url": {"url": url}}]
        remote = client.chat.completions.create(
            model=VLM, messages=[{"role": "user", "content": content}], max_tokens=TOKENS, temperature=0
        )
        assert remote.choices[0].message.content == inline
        refused = _post(srv, "/v1/chat/completions", _openai_body(VLM, url.replace("127.0.0.1", "localhost")))
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "messages[0].content[0].image_url.url"
    finally:
        srv.stop()
        images.shutdown()
