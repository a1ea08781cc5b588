"""The in-process mlx-lm engine: the limit a server on top of it can reach.

Runs as a subprocess of bench/compare.py (so its MLX state is its own, with
OpenBLAS preloaded exactly as mlxd preloads it for its workers)::

    python bench/inprocess.py MODEL_DIR

It loads the model, warms up, prints ``{"ready": true}`` and then answers
one JSON command per standard-input line with one JSON line::

    {"prompts": [[message, ...], ...], "tokens": N, "prefill_batch_size": P}

Each prompt is a chat (a list of messages) rendered with the model's chat
template. One prompt runs ``stream_generate``; more run ``batch_generate``
(mlx-lm's ``BatchGenerator`` driven as ``batch_generate`` drives it,
``completion_batch_size`` 32). End-of-sequence tokens are ignored (the
tokenizer's ``eos_token_ids`` is emptied), so every stream makes exactly
``tokens`` tokens, as mlxd's ``ignore_eos`` does. The answer holds the wall
seconds, the tokens made, the time to the first token (``ttft``, one
stream; ``ttfts``, one per prompt, for more) and ``foreign_cpu``: cores
other processes kept busy meanwhile. Staying up between commands lets the
bench interleave this contender with the servers.
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
    """All ``prompts`` at once through mlx-lm's ``BatchGenerator``, driven
    exactly as ``batch_generate`` drives it (insert everything, then
    ``next_generated`` until done; ``completion_batch_size`` 32): wall
    seconds, tokens made, and every prompt's seconds to its first token
    (``ttfts``, in no particular order)."""
    from mlx_lm.generate import BatchGenerator

    started = time.perf_counter()
    gen = BatchGenerator(
        model,
        stop_tokens=[[t] for t in tokenizer.eos_token_ids],
        completion_batch_size=32,
        prefill_batch_size=prefill_batch_size,
    )
    uids = gen.insert(prompts, [tokens] * len(prompts))
    first: dict[int, float] = {}
    made = 0
    while responses := gen.next_generated():
        now = time.perf_counter() - started
        for r in responses:
            if r.finish_reason != "stop":
                made += 1
                first.setdefault(r.uid, now)
    gen.close()
    wall = time.perf_counter() - started
    return {"streams": len(prompts), "wall": wall, "tokens": made, "ttfts": [first.get(u, wall) for u in uids]}


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
