"""The record of every pull and removal of a model, with who asked.

Each action is one log line (logger ``mlxd.hub``: the server's log, or the
command's standard error) and one JSON line appended to
:func:`audit_file` (``model-actions.log`` in mlxd's state directory),
which keeps the actions of the command line and of every server run in
one place. A line holds the time, the action (``pull``/``remove``), the
model as asked, its repo and commit, who asked, the outcome and, for a
pull, the bytes fetched. API keys are never written: only a short
fingerprint (:func:`key_fingerprint`).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import threading
import time
from pathlib import Path

from shared.paths import state_dir

log = logging.getLogger("mlxd.hub")
_lock = threading.Lock()


def audit_file() -> Path:
    """Where actions are appended (``MLXD_AUDIT_FILE``, else
    ``model-actions.log`` in :func:`shared.paths.state_dir`)."""
    override = os.environ.get("MLXD_AUDIT_FILE")
    return Path(override).expanduser() if override else state_dir() / "model-actions.log"


def command_line_user() -> str:
    """Who runs this command: ``user <login> (pid <n>)``."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):
        name = f"uid {os.getuid()}"
    return f"user {name} (pid {os.getpid()})"


def key_fingerprint(key: str) -> str:
    """A short, non-reversible name for an API key (``sha256:`` + 12 hex)."""
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()[:12]


def record(action: str, model: str, who: str, outcome: str, **facts: object) -> None:
    """Log one action and append it to :func:`audit_file` (a failure to
    write the file is logged, never raised)."""
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "action": action, "model": model, "who": who}
    entry.update(facts)
    entry["outcome"] = outcome
    details = " ".join(f"{k}={v}" for k, v in facts.items())
    log.info("%s %s by %s: %s%s", action, model, who, outcome, f" ({details})" if details else "")
    path = audit_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _lock, open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
    except OSError as exc:
        log.warning("could not append to %s: %s", path, exc)
