"""A vision model's own processor, run on the worker's input thread without touching MLX.

mlx-vlm's processors (one per family: how many tokens an image becomes,
tiles, rows, begin and end tokens, the pixel layout the vision tower
takes) compute everything with NumPy and Pillow and convert their output
to MLX arrays in a last step, the ``to_mlx`` of the processor's module.
The input thread must not touch MLX (the scheduler thread owns it), so
:class:`ProcessorCall` runs the processor with that last step left out
on its own thread: at construction (on the thread that loads the model,
before any request) it wraps the processor module's ``to_mlx`` in a
function that returns the NumPy output on a thread that is inside a
:class:`ProcessorCall` and converts as before on any other (mlx-vlm's
own ``generate`` keeps working). Processors of transformers (no
``to_mlx``) are asked for NumPy (``return_tensors="np"``). This is the
one place mlxd reaches into a processor's module.

Input thread only, after construction.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

_state = threading.local()
"""``numpy``: True while this thread is inside a :class:`ProcessorCall`."""


class ProcessorOutputError(TypeError):
    """The processor returned something this module cannot hand over
    without MLX (an MLX array it made some other way)."""


class ProcessorCall:
    """Calls ``processor`` (text and images of one prompt) and returns its
    outputs as NumPy arrays (see the module docstring)."""

    def __init__(self, processor: Any) -> None:
        self._processor = processor
        module = sys.modules.get(type(processor).__module__)
        convert = getattr(module, "to_mlx", None)
        if convert is not None and not getattr(convert, "numpy_on_input_thread", False):
            module.to_mlx = _numpy_where_asked(convert)  # type: ignore[union-attr]

    def __call__(self, text: str, images: list[Any]) -> dict[str, Any]:
        """The processor's output for the prompt ``text`` with ``images``
        (Pillow images, in the order their placeholders stand): every array
        as NumPy, lists of numbers as NumPy arrays, anything else as given.

        Raises:
            ProcessorOutputError: an output is an MLX array.
            Exception: whatever the processor raises for these inputs.
        """
        _state.numpy = True
        try:
            output = self._processor(text=[text], images=images, return_tensors="np")
        finally:
            _state.numpy = False
        result: dict[str, Any] = {}
        for name, value in dict(output).items():
            if type(value).__module__.startswith("mlx"):
                raise ProcessorOutputError(f"the processor returned {name} as an MLX array")
            if isinstance(value, list):
                try:
                    value = np.asarray(value)
                except ValueError:  # ragged: keep the list
                    pass
            result[name] = value
        return result


def _numpy_where_asked(convert: Any) -> Any:
    """``convert`` (a processor module's ``to_mlx``) that returns its input
    unchanged on a thread inside a :class:`ProcessorCall`."""

    def to_mlx(data: dict) -> dict:
        """The processor's MLX conversion, skipped inside a :class:`ProcessorCall`."""
        if getattr(_state, "numpy", False):
            return dict(data)
        return convert(data)

    to_mlx.numpy_on_input_thread = True  # type: ignore[attr-defined]
    return to_mlx
