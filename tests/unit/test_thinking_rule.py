"""Issue 34's thinking rule without workers:
:meth:`gateway.workers.pool.WorkerPool.thinks` answers from the worker's
report, the configured parser or the chat template, in that order, and
:func:`shared.model_kind.capabilities` lists ``thinking`` by it alone."""

from __future__ import annotations

import json

from gateway.workers.model_files import read_models_files
from gateway.workers.pool import WorkerPool
from shared.config import Config, ModelConfig
from shared.protocol import Loaded


def _model_dir(path, template: str):
    """A model directory whose tokenizer config holds ``template``."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    return path


def test_whether_a_model_thinks_is_one_rule(tmp_path):
    thinker = _model_dir(tmp_path / "thinker", "{{ messages }}<think>")
    plain = _model_dir(tmp_path / "plain", "{{ messages }}{% if enable_thinking %}{% endif %}")
    models = [
        ModelConfig(name="thinker", source=str(thinker)),
        ModelConfig(name="plain", source=str(plain)),
        ModelConfig(name="quiet", source=str(thinker), reasoning_parser="none"),
        ModelConfig(name="forced", source=str(plain), reasoning_parser="think"),
        ModelConfig(name="emb", source=str(plain), kind="embedding"),
    ]
    pool = WorkerPool(Config(models=models))
    pool._socket_dir = str(tmp_path)
    pool._apply_models(pool.config.models, read_models_files(pool.config.models))
    assert {n: pool.thinks(n) for n in pool.handles} == {
        "thinker": True,  # the template shows the markup
        "plain": None,  # only the worker can tell (it also reads the vocabulary)
        "quiet": False,
        "forced": True,
        "emb": False,
    }
    for reported, thinks in ((None, None), ("", False), ("think", True)):  # None: an older worker, silent
        pool.handles["plain"].status.loaded(
            Loaded(worker_id="w", context_length=8, load_seconds=0, model_path="/m", reasoning=reported)
        )
        assert pool.thinks("plain") is thinks
    assert {info.name: info.thinking for info in pool.models()} == {
        "thinker": True,
        "plain": True,
        "quiet": False,
        "forced": True,
        "emb": False,
    }
