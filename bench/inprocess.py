"""The in-process mlx-lm engine: the limit a server on top of it can reach.

Runs as a subprocess of bench/compare.py (so its MLX state is its own, with
OpenBLAS preloaded exactly as mlxd preloads it for its workers)::

    python bench/inprocess.py MODEL_DIR

It loads the model, warms up, prints ``{"ready": true}`` and then answers
one JSON command per standard-input line with one JSON line::

    {"prompts": [[message, ...], ...], "tokens": N, "prefill_batch_size": P}

Each prompt is a chat (a list of messages) rendered with the model's chat
template. One prompt runs ``stream_generate``; more run ``batch_generate``
(``completion_batch_size`` 32). End-of-sequence tokens are ignored (the
tokenizer's ``eos_token_ids`` is emptied), so every stream makes exactly
``tokens`` tokens, as mlxd's ``ignore_eos`` does. The answer holds the wall
seconds, the tokens made, the time to the first token (one stream only)
and ``foreign_cpu``: cores other processes kept busy meanwhile. Staying up
between commands lets the bench interleave this contender with the servers.
"""

from __future__ import annotations

import json
import os
import sys
import time

from harness import CpuWatch


def measure_single(model, tokenizer, prompt: list[int], tokens: int) -> dict:
    """One ``stream_generate`` stream: wall seconds, seconds to the first
    token, and tokens made."""
    from mlx_lm.generate import stream_generate

    started = time.perf_counter()
    first = None
    made = 0
    for _ in stream_generate(model, tokenizer, prompt, max_tokens=tokens):
        made += 1
        if first is None:
            first = time.perf_counter() - started
    wall = time.perf_counter() - started
    return {"streams": 1, "wall": wall, "ttft": first or wall, "tokens": made}


def measure_batch(model, tokenizer, prompts: list[list[int]], tokens: int, prefill_batch_size: int) -> dict:
    """``batch_generate`` over ``prompts``: wall seconds and tokens made."""
    from mlx_lm.generate import batch_generate

    started = time.perf_counter()
    response = batch_generate(
        model,
        tokenizer,
        prompts,
        max_tokens=tokens,
        return_token_ids=True,
        completion_batch_size=32,
        prefill_batch_size=prefill_batch_size,
    )
    wall = time.perf_counter() - started
    made = sum(len(ids) for ids in response.token_ids or [])
    return {"streams": len(prompts), "wall": wall, "tokens": made}


def main(model_dir: str) -> None:
    """Load the model, warm up, then answer commands until end of input."""
    from mlx_lm.utils import load

    model, tokenizer = load(model_dir)
    tokenizer.eos_token_ids = []  # ignore end-of-sequence, like mlxd's ignore_eos

    def render(chats: list[list[dict]]) -> list[list[int]]:
        return [tokenizer.apply_chat_template(m, add_generation_prompt=True) for m in chats]

    warm = render([[{"role": "user", "content": "Hello there."}]] * 2)
    measure_batch(model, tokenizer, warm, 4, 8)  # kernels, buffers
    measure_single(model, tokenizer, warm[0], 4)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        prompts = render(command["prompts"])
        tokens = command["tokens"]
        with CpuWatch([os.getpid()]) as watch:
            if len(prompts) == 1:
                result = measure_single(model, tokenizer, prompts[0], tokens)
            else:
                result = measure_batch(model, tokenizer, prompts, tokens, command.get("prefill_batch_size", 8))
        result["prompt_tokens"] = sum(len(p) for p in prompts) / len(prompts)
        result["foreign_cpu"] = watch.foreign
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python bench/inprocess.py MODEL_DIR")
    main(sys.argv[1])
