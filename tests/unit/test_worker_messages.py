"""The worker's inter-thread contract (:mod:`worker.messages`) and the
modules of its input and output threads must not load MLX: those threads
never touch it, and importing MLX (or mlx-lm) there would tie them to the
scheduler's module."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_messages_prompt_and_output_do_not_import_mlx():
    code = (
        "import sys\n"
        "import worker.messages, worker.prompting.builder, worker.output.loop\n"
        "loaded = sorted(m for m in sys.modules if m == 'mlx' or m.startswith(('mlx.', 'mlx_lm')))\n"
        "print(','.join(loaded))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == ""


def test_the_scheduler_uses_the_messages_module():
    """The scheduler's commands and reports are the messages module's own
    classes (one definition of the contract)."""
    from worker import messages
    from worker.engine import scheduler

    assert scheduler.Admission is messages.Admission
    assert scheduler.TokenStep is messages.TokenStep
