"""``make agents``: one turn of the real Claude Code and Codex CLIs against
a real mlxd. Not part of ``make test`` (needs npm and a few minutes).

Installs the pinned CLI versions with npm into ``build/agents/``, starts a
gateway with the models of ``configs/agents.toml`` (by default their
``source`` is replaced by a tiny random-weight model with a 131072-token
context, since the agents' first prompts, ~21k tokens for Claude Code and
~10-15k for Codex, exceed the default model's 8192), then runs, each bounded
by ``--timeout`` and in an empty temporary HOME:

- ``claude -p "say hi"`` with default settings (its model names are aliases
  in the config) and with ``ANTHROPIC_MODEL`` set to the served name;
- ``codex exec "say hi"`` with a custom ``wire_api = "responses"`` provider,
  once with no ``model`` (Codex's default name, an alias) and once with the
  served name.

A run passes when the CLI exits 0 and prints no API error. Prints the CLI
versions, then one line per run with its duration (and the CLI's output
when it failed); exits 1 if any run failed.

Usage: ``.venv/bin/python -m tests.replay.run_agents [--config PATH]
[--keep-source] [--timeout SECONDS]`` (``--keep-source`` serves the
configured models as they are, e.g. a long-context model on a Mac).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.conftest import start_server  # noqa: E402

CLIS = {"@anthropic-ai/claude-code": "2.1.197", "@openai/codex": "0.171.0"}
"""The npm packages and the versions whose requests ``fixtures/`` holds."""

PREFIX = ROOT / "build" / "agents"
CONTEXT = 131072
API_ERROR_MARKERS = ("API Error", "ERROR:", "error sending request", "unexpected status")


@dataclass
class Run:
    """One CLI turn: its label, argv, extra environment and optional Codex config."""

    label: str
    argv: list[str]
    env: dict[str, str]
    codex_config: str | None = None


def install_clis(prefix: Path) -> Path:
    """``npm install`` the pinned CLIs into ``prefix`` unless already there;
    return its ``node_modules/.bin``. Raises ``RuntimeError`` if npm fails."""
    wanted = [f"{name}@{version}" for name, version in CLIS.items()]
    installed = all(
        (prefix / "node_modules" / name / "package.json").exists()
        and json.loads((prefix / "node_modules" / name / "package.json").read_text())["version"] == version
        for name, version in CLIS.items()
    )
    if not installed:
        if shutil.which("npm") is None:
            raise RuntimeError("npm is needed to install the coding-agent CLIs (install Node.js)")
        prefix.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", str(prefix), *wanted], capture_output=True, text=True, timeout=1800
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm install failed:\n{done.stderr[-3000:]}")
    return prefix / "node_modules" / ".bin"


def served_models(config: Path, keep_source: bool, work: Path) -> list[dict]:
    """The ``[[models]]`` of ``config``, with their source replaced by the
    long-context tiny model unless ``keep_source``."""
    models = tomllib.loads(config.read_text())["models"]
    if not keep_source:
        from tests.tiny_model import build_terse_model, build_tiny_model

        tiny = build_terse_model(work / "model", build_tiny_model(work / "tiny"), CONTEXT)
        models = [{**m, "source": str(tiny)} for m in models]
    return models


def codex_config(url: str, model: str | None) -> str:
    """A ``~/.codex/config.toml`` pointing Codex at mlxd (``model`` unset: Codex's default)."""
    lines = [f'model = "{model}"'] if model else []
    lines += [
        'model_provider = "mlxd"',
        "",
        "[model_providers.mlxd]",
        'name = "mlxd"',
        f'base_url = "{url}/v1"',
        'wire_api = "responses"',
        'env_key = "MLXD_API_KEY"',
    ]
    return "\n".join(lines) + "\n"


def runs(bin_dir: Path, url: str, served: str) -> list[Run]:
    """The four turns: each CLI with its default model name and with ``served``."""
    claude = [str(bin_dir / "claude"), "-p", "say hi"]
    codex = [str(bin_dir / "codex"), "exec", "--skip-git-repo-check", "say hi"]
    claude_env = {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "mlxd",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    return [
        Run("claude -p (default model name)", claude, claude_env),
        Run(f"claude -p (ANTHROPIC_MODEL={served})", claude, {**claude_env, "ANTHROPIC_MODEL": served}),
        Run("codex exec (no model set)", codex, {"MLXD_API_KEY": "mlxd"}, codex_config(url, None)),
        Run(f"codex exec (model = {served})", codex, {"MLXD_API_KEY": "mlxd"}, codex_config(url, served)),
    ]


def run_one(run: Run, timeout: float) -> tuple[bool, str]:
    """Run one turn in an empty HOME; return (passed, output): the answer's
    last line when it passed, exit status, stdout and stderr when not."""
    with tempfile.TemporaryDirectory(prefix="mlxd-agent-") as home:
        env = {"PATH": os.environ["PATH"], "HOME": home, "LANG": "C.UTF-8", "TERM": "dumb", **run.env}
        if run.codex_config is not None:
            (Path(home) / ".codex").mkdir()
            (Path(home) / ".codex" / "config.toml").write_text(run.codex_config)
            env["CODEX_HOME"] = str(Path(home) / ".codex")
        try:
            done = subprocess.run(
                run.argv, cwd=home, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired as e:
            return False, f"timed out after {timeout:.0f} s\n{e.stdout or ''}{e.stderr or ''}"
    output = done.stdout + done.stderr
    if done.returncode != 0 or any(marker in output for marker in API_ERROR_MARKERS):
        return False, f"exit {done.returncode}\n{output}"
    answer = done.stdout.strip().splitlines()
    return True, answer[-1][:80] if answer else "(empty answer)"


def main() -> int:
    """Install, serve, run each turn; 0 if all passed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "agents.toml")
    parser.add_argument("--keep-source", action="store_true", help="serve the configured model sources as they are")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per CLI turn")
    args = parser.parse_args()

    bin_dir = install_clis(PREFIX)
    print("CLIs: " + ", ".join(f"{name} {version}" for name, version in CLIS.items()), flush=True)
    work = PREFIX / "run"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    models = served_models(args.config, args.keep_source, PREFIX)
    server = start_server(work, models, api_key=None)
    failures = 0
    try:
        for run in runs(bin_dir, server.url, models[0]["name"]):
            started = time.monotonic()
            passed, output = run_one(run, args.timeout)
            took = f"{time.monotonic() - started:.1f} s"
            if passed:
                print(f"PASS  {run.label} ({took}): {output!r}", flush=True)
            else:
                failures += 1
                print(f"FAIL  {run.label} ({took})\n    " + output.strip()[-3000:].replace("\n", "\n    "), flush=True)
    finally:
        server.stop()
    if failures:
        print(f"{failures} of 4 agent turns failed; gateway log: {server.log_path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
