"""Corrections to mlx-lm model code that the engine's batching relies on.

The engine runs sequences of different lengths in one forward pass by
right-padding them and telling every cache each row's real length
(``cache.prepare(lengths=...)``): mlx-lm's own batched prefill of prompts of
different lengths does this, and so does the speculative replay of the
tokens each row kept (:mod:`worker.draft_rollback`). A recurrent layer must
then end each row's state at that row's last real token.

mlx-lm 0.32's ``nemotron_h`` Mamba-2 mixer masks the padded positions but
does not pass the rows' lengths on to its state-space scan
(``mlx_lm.models.ssm.ssm_update``), unlike its ``mamba2``, ``falcon_h1``,
``granitemoehybrid`` and ``plamo2`` mixers. The scan then reads every row's
final state at the padded end of the pass, where the mask has already
removed what the row's real tokens added: a padded row continues from a
wrong state, and its greedy answer can differ from the same request alone.
:func:`apply` makes that mixer hand its cache's lengths to the scan.

Each correction first checks that the code it corrects still has the shape
it expects; when mlx-lm has changed, it is skipped with a warning (the
tests that compare batched, speculative and solo answers then say whether
it is still needed).

Threads: :func:`apply` may be called from any thread, any number of times
(once effective); the corrected code runs wherever the model runs (the
worker's scheduler thread).
"""

from __future__ import annotations

import inspect
import logging
import threading
from typing import Any

log = logging.getLogger("mlxd.worker.mlx_lm_fixes")

_lock = threading.Lock()
_applied = False
_scan_lengths = threading.local()


def apply() -> None:
    """Apply every correction of this module (see the module docstring)."""
    global _applied
    with _lock:
        if _applied:
            return
        _applied = True
        _pass_lengths_to_nemotron_h_scan()


def _pass_lengths_to_nemotron_h_scan() -> None:
    """Make ``nemotron_h``'s Mamba-2 mixer call its scan with the rows'
    lengths from its cache (see the module docstring)."""
    try:
        from mlx_lm.models import nemotron_h
    except ImportError:  # an mlx-lm without the family: nothing to correct
        return
    mixer = getattr(nemotron_h, "NemotronHMamba2Mixer", None)
    scan = getattr(nemotron_h, "ssm_update", None)
    ssm = getattr(mixer, "_ssm", None)
    if mixer is None or scan is None or ssm is None or "lengths" not in inspect.signature(scan).parameters:
        log.warning("mlx-lm's nemotron_h mixer has changed; its padded-rows correction is not applied")
        return
    if "lengths" in inspect.getsource(ssm):
        return  # this mlx-lm passes the lengths itself

    def ssm_with_lengths(self: Any, hidden_states: Any, B: Any, C: Any, dt: Any, cache: Any, mask: Any) -> Any:
        """The mixer's scan step, with its cache's row lengths in reach of
        the scan (None when the pass is not padded)."""
        _scan_lengths.value = getattr(cache, "lengths", None) if cache else None
        try:
            return ssm(self, hidden_states, B, C, dt, cache, mask)
        finally:
            _scan_lengths.value = None

    def scan_with_lengths(*args: Any, **kwargs: Any) -> Any:
        """``ssm_update`` given the lengths of the pass's rows, unless the
        caller passed some."""
        if len(args) <= 10 and "lengths" not in kwargs:
            kwargs["lengths"] = getattr(_scan_lengths, "value", None)
        return scan(*args, **kwargs)

    mixer._ssm = ssm_with_lengths
    nemotron_h.ssm_update = scan_with_lengths
