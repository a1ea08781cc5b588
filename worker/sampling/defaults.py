"""The sampling settings a model uses where a request sets none.

Most clients leave some sampling settings out (the current anthropic SDK
does not even offer ``temperature``), and models ship recommendations for
them. :func:`model_sampling_defaults` (called once at load, on the
scheduler thread; plain file reading, no MLX) decides, field by field, the
first of:

1. the config's ``[models.sampling_defaults]`` (an operator's override);
2. the model's ``generation_config.json``: ``temperature``, ``top_p``,
   ``top_k``, ``min_p``, ``repetition_penalty`` (a value of the wrong type
   or outside the range a request may use is skipped with a warning;
   ``do_sample`` is not read, as vLLM does not: a model that ships a
   temperature recommends sampling with it);
3. mlxd's fallback, :class:`~shared.protocol.SamplingDefaults`' own
   defaults: temperature 1, no top-p / top-k / min-p filter, no repetition
   penalty (what mlxd did before it read model defaults).

:func:`with_defaults` (input thread) fills a request's unset (None) fields
from them, so the engine only ever sees complete settings.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import msgspec

from shared.config import SamplingDefaultsConfig
from shared.protocol import SamplingDefaults, SamplingParams

log = logging.getLogger("mlxd.worker.sampling")

GENERATION_CONFIG = "generation_config.json"
"""The file in a model directory holding its recommended generation settings."""

FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
"""The sampling settings that have model defaults."""


def _valid(name: str, value: Any) -> bool:
    """Whether ``value`` is a usable ``name`` setting (the bounds a request
    may use; top_k any non-negative integer)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if name == "top_k":
        return isinstance(value, int) and value >= 0
    if name == "temperature":
        return 0.0 <= value <= 2.0
    if name == "top_p":
        return 0.0 < value <= 1.0
    if name == "min_p":
        return 0.0 <= value <= 1.0
    return 0.0 < value <= 10.0  # repetition_penalty


def generation_config_defaults(model_dir: Path) -> dict[str, float | int]:
    """The sampling settings ``model_dir``'s ``generation_config.json``
    recommends (only the :data:`FIELDS` it sets with usable values; empty
    when the file is missing or unreadable)."""
    path = Path(model_dir) / GENERATION_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}
    if not isinstance(data, dict):
        return {}
    out: dict[str, float | int] = {}
    for name in FIELDS:
        if name not in data or data[name] is None:
            continue
        value = data[name]
        if _valid(name, value):
            out[name] = int(value) if name == "top_k" else float(value)
        else:
            log.warning("ignoring %s of %s: %r is not a usable value", name, path, value)
    return out


def model_sampling_defaults(model_dir: Path, overrides: SamplingDefaultsConfig) -> SamplingDefaults:
    """The model's effective sampling defaults: per field, ``overrides``
    (the config), else its ``generation_config.json``, else mlxd's
    fallback (see the module docstring)."""
    merged: dict[str, Any] = dict(generation_config_defaults(model_dir))
    for name in FIELDS:
        value = getattr(overrides, name)
        if value is not None:
            merged[name] = value
    return SamplingDefaults(**merged)


def with_defaults(params: SamplingParams, defaults: SamplingDefaults) -> SamplingParams:
    """``params`` with every unset (None) field of :data:`FIELDS` taken
    from ``defaults``; fields the request set are kept."""
    missing = {name: getattr(defaults, name) for name in FIELDS if getattr(params, name) is None}
    return msgspec.structs.replace(params, **missing) if missing else params
