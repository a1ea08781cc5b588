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

:class:`Expander` reads, from one processor call for all the items of a
prompt, what each item (image, video, audio clip) becomes: the ids the
model reads, and the same with the item's media tokens replaced by cache
keys derived from its content.

Input thread only, after construction.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

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

    def __call__(self, text: str, **media: Any) -> dict[str, Any]:
        """The processor's output for the prompt ``text`` with ``media``
        (``images``: Pillow images, ``videos``: frame arrays, in the order
        their placeholders stand): every array as NumPy, lists of numbers
        as NumPy arrays, anything else as given.

        Raises:
            ProcessorOutputError: an output is an MLX array.
            Exception: whatever the processor raises for these inputs.
        """
        _state.numpy = True
        try:
            output = self._processor(text=[text], return_tensors="np", **media)
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


TEXT_OUTPUTS = ("input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids")
"""Processor outputs about the text, not the media (the text an
:class:`Expander` gives the processor is only the media's markup)."""


@dataclass(frozen=True)
class Expander:
    """Reads how the processor expands one kind of media: each item's
    markup (the text the chat template writes for it) becomes the ids the
    model reads, with the item's ``token_id`` positions (its image or
    video tokens) replaced by cache keys in the key ids.

    ``call`` runs the processor; ``argument`` is its keyword for the media
    (``images``, ``videos``, ``audio``); ``separator`` a special token (and
    its id) the expansions never hold, put between the items so each item's
    ids can be told apart in one processor call; ``options`` further
    keywords of every call (as mlx-vlm's own generation passes them).
    """

    call: ProcessorCall
    argument: str
    markup: str
    token_id: int
    separator: str
    separator_id: int
    options: dict[str, Any] = field(default_factory=dict)

    def expand(
        self, items: list[Any], keys: Callable[[int, int], list[int]]
    ) -> tuple[list[tuple[list[int], list[int]]], dict[str, Any]]:
        """Run the processor once on every item of a prompt; return each
        item's (model ids, key ids), ``keys(i, n)`` giving item ``i``'s
        ``n`` key ids, and the processor's media inputs (NumPy, by its own
        names; its text outputs left out).

        Raises:
            ExpansionError: the ids do not split into one expansion per
                item, each holding the media's tokens.
            ProcessorOutputError: as :meth:`ProcessorCall.__call__`.
        """
        text = self.separator + self.separator.join([self.markup] * len(items)) + self.separator
        output = self.call(text, **{self.argument: items}, **self.options)
        ids = [int(t) for t in np.asarray(output["input_ids"]).reshape(-1)]
        inputs = {name: value for name, value in output.items() if name not in TEXT_OUTPUTS}
        at = [i for i, t in enumerate(ids) if t == self.separator_id]
        pieces = [ids[a + 1 : b] for a, b in zip(at, at[1:])]
        if len(pieces) != len(items) or any(self.token_id not in piece for piece in pieces):
            raise ExpansionError(f"its ids do not hold one run of tokens per item of {self.argument}")
        expansions = []
        for i, piece in enumerate(pieces):
            key = iter(keys(i, piece.count(self.token_id)))
            expansions.append((piece, [next(key) if t == self.token_id else t for t in piece]))
        return expansions, inputs


class ExpansionError(ValueError):
    """The processor's ids for a prompt's media could not be read apart."""


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
