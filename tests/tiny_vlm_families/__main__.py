"""``python -m tests.tiny_vlm_families [family ...]``: build each family (all
of :data:`~tests.tiny_vlm_families.BUILDERS` by default) in a temporary
directory, print the token ids of :func:`~tests.tiny_vlm_families.check`'s
three generations, and exit non-zero if for some family the red and the blue
image give the same tokens."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from . import BUILDERS, check


def main(families: list[str]) -> int:
    """Build and check ``families`` (all of :data:`BUILDERS` when empty),
    printing the timings and token ids; return 0 if in every family the
    red and the blue image give different tokens, else raise SystemExit
    naming the families where they do not.
    Raises KeyError for a family not in :data:`BUILDERS`."""
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in families or list(BUILDERS):
            start = time.monotonic()
            path = BUILDERS[family](Path(tmp) / family)
            built = time.monotonic()
            results = check(path)
            done = time.monotonic()
            print(f"{family}: built {built - start:.2f}s, load + 3 generations {done - built:.2f}s")
            for name, ids in results.items():
                print(f"  {name:5} {ids}")
            if results["red"] == results["blue"]:
                failed.append(family)
    if failed:
        sys.exit(f"the image does not change the answer: {failed}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
