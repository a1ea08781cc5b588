"""The shipped default config (``configs/mlxd.toml``) as a person or an agent
meets it, with the real SmolLM2 model (``@pytest.mark.slow``):

- an agent-sized prompt (~2,400 tokens) asked again after an mlxd restart is
  served from the prefix cache's disk tier: the restarted worker loads the
  cached prefix from disk and prefills only the prompt's last token (its own
  counters say so; the times to first token are printed, not compared, as
  a loaded machine can make any wall-clock ratio miss);
- a request that sets no sampling field and no ``max_tokens`` ("Reply
  briefly with OK.") ends by itself, because the model gets the sampling
  its authors show (temperature 0.2, top_p 0.9) instead of temperature 1.

Only the port and the disk tier's directory differ from the shipped file.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import openai
import pytest

from shared.config import DEFAULT_CONFIG_PATH
from tests.conftest import ROOT, Server, free_port, settled_stats

pytestmark = pytest.mark.slow

CHAT = "smollm2-135m-instruct"


def default_config(tmp: Path, port: int) -> Path:
    """The shipped config with ``port`` and a private disk-tier directory."""
    lines = []
    for line in DEFAULT_CONFIG_PATH.read_text().splitlines():
        if line.startswith("port = "):
            line = f"port = {port}"
        lines.append(line)
        if line.startswith("disk_cache_bytes = "):
            lines.append(f"disk_cache_dir = {json.dumps(str(tmp / 'prefix-cache'))}")
    path = tmp / "mlxd.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def start(tmp: Path, config: Path, port: int, log_name: str) -> Server:
    """``mlxd serve --config`` on the shipped config, ready."""
    import os
    import subprocess
    import sys

    log_path = tmp / log_name
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        cwd=ROOT,
        stdout=open(log_path, "w"),
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    server = Server(f"http://127.0.0.1:{port}", proc, None, log_path)
    try:
        server.wait_listening(timeout=120)
        server.wait_ready(CHAT, timeout=600)
    except BaseException:
        server.stop()
        raise
    return server


def agent_prompt() -> list[dict[str, str]]:
    """A system prompt and tool output of about 2,400 tokens, as agents send."""
    listing = "\n".join(
        f"src/module_{i:03d}.py: def handler_{i}(request): return process(request, {i})" for i in range(84)
    )
    return [
        {"role": "system", "content": "You are a coding agent. Read the repository listing, then answer briefly."},
        {"role": "user", "content": f"Repository listing:\n{listing}\n\nWhich file defines handler_42?"},
    ]


def first_token(client: openai.OpenAI) -> tuple[float, openai.types.CompletionUsage]:
    """Seconds to the first streamed token, and the usage of the answer."""
    started = time.monotonic()
    ttft = None
    usage = None
    stream = client.chat.completions.create(
        model=CHAT,
        messages=agent_prompt(),
        max_tokens=4,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if ttft is None and chunk.choices and chunk.choices[0].delta.content:
            ttft = time.monotonic() - started
        if chunk.usage is not None:
            usage = chunk.usage
    assert ttft is not None and usage is not None
    return ttft, usage


def test_an_agent_prompt_is_cached_across_a_restart_and_a_bare_request_ends(tmp_path):
    port = free_port()
    config = default_config(tmp_path, port)
    server = start(tmp_path, config, port, "first.log")
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=600, max_retries=0)
        cold, cold_usage = first_token(client)
        assert 2000 < cold_usage.prompt_tokens < 2800, cold_usage
        deadline = time.monotonic() + 60
        while server.worker(CHAT)["stats"]["disk_cache_entries"] < 1:
            assert time.monotonic() < deadline, "the prompt never reached the disk tier"
            time.sleep(0.3)
        bare = client.chat.completions.create(
            model=CHAT, messages=[{"role": "user", "content": "Reply briefly with OK."}], seed=7
        )
        assert bare.choices[0].finish_reason == "stop", bare
        assert bare.usage.completion_tokens < 512, bare.usage
    finally:
        server.stop()
    server = start(tmp_path, config, port, "second.log")
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=600, max_retries=0)
        before = settled_stats(server, CHAT)
        warm, warm_usage = first_token(client)
        after = settled_stats(server, CHAT, until=lambda s: s["requests_finished"] > before["requests_finished"])
        details = warm_usage.prompt_tokens_details
        assert details.cached_tokens >= cold_usage.prompt_tokens - 1, warm_usage
        assert details.model_extra["disk_cached_tokens"] == details.cached_tokens
        print(f"time to first token: cold {cold:.2f}s, after a restart {warm:.2f}s ({warm / cold:.2f}x)")
        # what a faster first token stands for, in the restarted worker's own counters: the
        # prefix came from the disk tier and only the rest of the prompt (one token) was prefilled
        delta = {key: after[key] - before[key] for key in ("disk_cache_hits", "disk_cached_tokens", "prompt_tokens")}
        assert delta["disk_cache_hits"] == 1, (before, after)
        assert delta["disk_cached_tokens"] == details.cached_tokens, (before, after)
        assert delta["prompt_tokens"] == warm_usage.prompt_tokens - details.cached_tokens <= 1, (before, after)
    finally:
        server.stop()
