"""Corrections to mlx-lm model classes whose batched forward pass is wrong.

mlx-lm's batch engine prefills prompts of different lengths together by
padding the shorter ones on the right and telling each cache the real
lengths (``prepare(lengths=...)``); every layer must then ignore the
padded positions. A layer that does not gives the padded prompt a wrong
state, so its answer differs from the same prompt served alone: a wrong
answer, not a slow one. :func:`apply_model_fixes` repairs, on a loaded
model, each layer class known to get this wrong, before the model serves.

Each fix names the mlx-lm version it was found in and what goes wrong;
``tests/test_model_fixes.py`` shows batched answers equal solo ones with
the fix and differ without it, and the concurrency fuzzer
(``tests/test_cache_fuzz.py``) runs every test family batched against a
solo twin. A fix looks for the exact method it replaces and leaves a
class alone (with a log line) once its signature has changed, so a newer
mlx-lm that fixed the layer differently is never patched blindly.

Runs where the model is loaded (the scheduler thread); changes only the
given model's layer instances, never the library's classes.
"""

from __future__ import annotations

import inspect
import logging
import types
from typing import Any

log = logging.getLogger("mlxd.worker.model_fixes")

_NEMOTRON_H_SSM_PARAMETERS = ("hidden_states", "B", "C", "dt", "cache", "mask")
"""The parameters of mlx-lm 0.32's ``NemotronHMamba2Mixer._ssm`` (the
method :func:`_nemotron_h_ssm` replaces)."""


def _nemotron_h_ssm(self: Any, hidden_states: Any, B: Any, C: Any, dt: Any, cache: Any, mask: Any) -> Any:
    """The state-space scan of a Nemotron-H Mamba-2 layer, passing the
    cache's per-row ``lengths`` to mlx-lm's ``ssm_update`` as its other
    Mamba-2 layers do (mlx-lm 0.32.2 passes only the mask: in a batched
    prefill, a right-padded row's final state then takes its decay from
    the last, padded, position and loses the chunk it just read)."""
    from mlx_lm.models.ssm import ssm_update

    batch, length, _ = hidden_states.shape
    heads = hidden_states.reshape(batch, length, self.num_heads, self.head_dim)
    B = B.reshape(batch, length, self.n_groups, self.ssm_state_size)
    C = C.reshape(batch, length, self.n_groups, self.ssm_state_size)
    state = cache[1] if cache else None
    lengths = cache.lengths if cache else None
    y, state = ssm_update(
        heads,
        self.A_log,
        B,
        C,
        self.D.astype(heads.dtype),
        dt,
        self.dt_bias,
        state,
        self.time_step_limit,
        mask,
        lengths,
    )
    if cache:
        cache[1] = state
    return y.reshape(batch, length, self.intermediate_size)


def _fix_nemotron_h(layer: Any) -> bool:
    """Give one ``NemotronHMamba2Mixer`` the length-aware scan; False when
    its ``_ssm`` is not the method the fix was written for."""
    current = getattr(type(layer), "_ssm", None)
    if current is None or tuple(inspect.signature(current).parameters)[1:] != _NEMOTRON_H_SSM_PARAMETERS:
        return False
    layer._ssm = types.MethodType(_nemotron_h_ssm, layer)
    return True


_FIXES = {"NemotronHMamba2Mixer": _fix_nemotron_h}
"""Layer class name -> the fix applied to each instance."""


def apply_model_fixes(model: Any) -> list[str]:
    """Apply every known fix to the layers of ``model`` (an mlx-lm model);
    return the names of the layer classes fixed (each logged once)."""
    fixed: dict[str, int] = {}
    skipped: set[str] = set()
    for _, module in model.named_modules():
        name = type(module).__name__
        fix = _FIXES.get(name)
        if fix is None:
            continue
        if fix(module):
            fixed[name] = fixed.get(name, 0) + 1
        else:
            skipped.add(name)
    for name, count in fixed.items():
        log.info("model fix: %d %s layers scan right-padded batched prompts by their real lengths", count, name)
    for name in skipped:
        log.warning("model fix for %s not applied: the installed mlx-lm changed that layer", name)
    return sorted(fixed)
