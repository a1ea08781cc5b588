"""Every command and snippet of ``README.md`` runs as written, or is named
here with why a test cannot run it (issue #44).

The test reads ``README.md`` itself (nothing is copied into it) and finds:

- its fenced code blocks: each ``python`` block is run as written by
  ``sys.executable`` in a subprocess, and each ``sh`` block is split into
  its commands (backslash continuations and quoted newlines joined, ``#``
  comments dropped);
- the commands in its prose: inline code spans whose first word is a
  program (:data:`PROGRAMS`), such as ``mlxd pull --list``.

The python blocks and the curl command run against one real gateway
serving the shipped default config (``configs/mlxd.toml``, what ``make run``
serves) on a free port with a private disk-cache directory
(:func:`tests.e2e.test_default_config.default_config` and ``start``); the
only change made to them is the URL ``http://127.0.0.1:8000``, replaced by
that gateway's. ``mlxd`` commands that work offline (:data:`RUN`) run as
``sys.executable -m gateway`` (what the ``.venv/bin/mlxd`` console script
runs) with the Hub switched off.

Every README command is either run (its words start with a prefix in
:data:`RUN`) or listed word for word in :data:`NOT_RUN` with the reason
(needs the Hub, is ``make`` itself, needs the claude CLI, is interactive).
A command in neither fails :func:`test_every_readme_command_is_run_or_listed`,
so a new snippet is never silently unchecked; an entry of :data:`NOT_RUN`
the README no longer has fails it too. A fenced block in another language
fails :func:`test_every_fenced_block_is_in_a_checked_language`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT, STARTED, Server, free_port
from tests.e2e.test_default_config import default_config, start

README = ROOT / "README.md"
README_URL = "http://127.0.0.1:8000"
"""The server address the README's examples use; the test puts its own in its place."""

CHECKED_LANGUAGES = ("sh", "python")
"""The fenced-block languages this test checks."""

PROGRAMS = frozenset({"make", "mlxd", ".venv/bin/mlxd", "curl", "pip", "python", "claude", "codex"})
"""An inline code span whose first word is one of these is a command."""

MLXD = ("mlxd", ".venv/bin/mlxd")
"""How the README spells the ``mlxd`` command."""

CURL = "/usr/bin/curl"
"""The curl the curl example runs with (the test skips where it is missing)."""

SNIPPET_TIMEOUT = 300
"""Seconds a snippet may take before it counts as hung (a bound, not a wait)."""

RUN: dict[tuple[str, ...], str] = {
    ("curl",): "test_the_curl_example_answers, against the test gateway",
    **{
        (mlxd, *words): "test_the_offline_mlxd_commands_run, with the Hub switched off"
        for mlxd in MLXD
        for words in (("pull", "--list"), ("ls",))
    },
}
"""Word prefixes of the commands this module runs, and which test runs them
(every README command with that prefix, as written)."""

NEEDS_THE_HUB = "needs the Hub: downloads mlx-community/Qwen3-4B-4bit (2.3 GB)"
"""Why ``mlxd pull qwen3:4b`` is not run."""

PIP = "needs PyPI; make installs it (pyproject.toml), and the {} example, run here, imports it"
"""Why ``pip install PACKAGE`` is not run."""

NOT_RUN: dict[tuple[str, ...], str] = {
    ("make", "run"): "make itself: creates .venv, then serves configs/mlxd.toml on port 8000 until stopped "
    "(this module serves the same config on a free port)",
    ("make", "test"): "make itself: the whole test suite, this module included",
    ("make", "check"): "make itself: the fast test suite",
    ("make", "docs"): "make itself: builds the documentation site (tests/test_docs.py checks its inputs)",
    ("make", "agents"): "make itself: one turn of the real Claude Code and Codex CLIs (npm; needs Node.js)",
    ("make", "bench"): "make itself: every benchmark, far longer than a test",
    ("make", "run", "CONFIG=configs/agents.toml"): "make itself; needs the Hub (it serves qwen3:4b)",
    (".venv/bin/mlxd", "pull", "qwen3:4b"): NEEDS_THE_HUB,
    (".venv/bin/mlxd", "serve", "--model", "qwen3:4b"): "needs the Hub (the model pulled above); "
    "serves on port 8000 until stopped",
    (".venv/bin/mlxd", "top"): "interactive: a full-screen live view until Ctrl-C, with no one-shot form "
    "(tests/e2e/test_top.py drives it in a pseudo-terminal)",
    ("ANTHROPIC_BASE_URL=http://127.0.0.1:8000", "ANTHROPIC_API_KEY=unused", "claude"): "needs the claude CLI "
    "(Claude Code, not installed here) and a Qwen3-4B server; `make agents` runs it where Node.js is",
    ("pip", "install", "openai"): PIP.format("openai"),
    ("pip", "install", "anthropic"): PIP.format("anthropic"),
    ("pip", "install", "ollama"): PIP.format("ollama"),
}
"""README commands no test here runs, word for word, with the reason."""


@dataclass(frozen=True)
class Block:
    """A fenced code block: its language, its text, and the README line of its opening fence."""

    language: str
    text: str
    line: int


@dataclass(frozen=True)
class Command:
    """A shell command of the README: its words as the shell splits them, the
    line it starts on, and whether it is in a fenced block or the prose."""

    words: tuple[str, ...]
    line: int
    fenced: bool

    def __str__(self) -> str:
        """``README.md:LINE: the command`` (as the shell would quote it)."""
        return f"README.md:{self.line}: {shlex.join(self.words)}"


FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")


def fenced_blocks(markdown: str) -> tuple[list[Block], str]:
    """The fenced code blocks of ``markdown``, and its prose: the text with
    every block's lines (fences included) blanked, so line numbers hold.
    A block closes at a fence of the same character at least as long as its
    opening one; a block left open runs to the end."""
    blocks: list[Block] = []
    prose: list[str] = []
    opening: tuple[str, str, int] | None = None
    body: list[str] = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        match = FENCE.match(line)
        if opening is None:
            if match:
                opening = (match.group(1), match.group(2), number)
                body = []
                prose.append("")
            else:
                prose.append(line)
            continue
        prose.append("")
        fence, language, start = opening
        if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) and not match.group(2):
            blocks.append(Block(language, "\n".join(body) + "\n", start))
            opening = None
        else:
            body.append(line)
    if opening is not None:
        blocks.append(Block(opening[1], "\n".join(body) + "\n", opening[2]))
    return blocks, "\n".join(prose)


def shell_commands(block: Block) -> list[Command]:
    """The commands of an ``sh`` block: a command ends at a line end that is
    neither escaped by a backslash nor inside quotes; ``#`` comments are dropped.

    Raises:
        ValueError: the block ends inside quotes.
    """
    commands = []
    pending, first = "", 0
    for offset, line in enumerate(block.text.splitlines(), start=1):
        if not pending:
            first = block.line + offset
        pending += line + "\n"
        if pending.endswith("\\\n"):
            continue
        try:
            words = shlex.split(pending.replace("\\\n", " "), comments=True)
        except ValueError:  # a quote still open: the command goes on
            continue
        if words:
            commands.append(Command(tuple(words), first, fenced=True))
        pending = ""
    if pending.strip():
        raise ValueError(f"README.md:{first}: a command never ends: {pending!r}")
    return commands


def inline_commands(prose: str) -> list[Command]:
    """The commands in the prose: inline code spans (which may wrap lines)
    whose first word is in :data:`PROGRAMS`."""
    commands = []
    for match in re.finditer(r"`([^`]+)`", prose):
        try:
            words = tuple(shlex.split(" ".join(match.group(1).split())))
        except ValueError:
            continue
        if words and words[0] in PROGRAMS:
            commands.append(Command(words, prose.count("\n", 0, match.start()) + 1, fenced=False))
    return commands


def readme() -> tuple[list[Block], list[Command]]:
    """README's fenced blocks, and all its commands (fenced and inline), each
    command once, at its first line."""
    blocks, prose = fenced_blocks(README.read_text(encoding="utf-8"))
    found = [c for b in blocks if b.language == "sh" for c in shell_commands(b)] + inline_commands(prose)
    unique: dict[tuple[str, ...], Command] = {}
    for command in sorted(found, key=lambda c: c.line):
        unique.setdefault(command.words, command)
    return blocks, list(unique.values())


def run_prefix(command: Command) -> tuple[str, ...] | None:
    """The prefix of :data:`RUN` ``command`` starts with, if any."""
    return next((prefix for prefix in RUN if command.words[: len(prefix)] == prefix), None)


def commands_run_by(*prefixes: tuple[str, ...]) -> list[Command]:
    """README's commands that start with one of ``prefixes`` (all of :data:`RUN`)."""
    assert all(prefix in RUN for prefix in prefixes), prefixes
    return [c for c in readme()[1] if run_prefix(c) in prefixes]


def with_url(text: str, url: str) -> str:
    """``text`` with the README's server address replaced by ``url``."""
    return text.replace(README_URL, url)


def python_blocks() -> list[Block]:
    """README's ``python`` blocks."""
    return [b for b in readme()[0] if b.language == "python"]


def block_id(block: Block) -> str:
    """A test id for a python block: the first module it imports, and its line."""
    imported = re.search(r"^(?:from|import)\s+(\w+)", block.text, re.M)
    return f"{imported.group(1) if imported else 'python'}@README.md:{block.line}"


def output_of(result: subprocess.CompletedProcess) -> str:
    """A finished command's exit status and output, for a failure message."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    """One gateway on the shipped default config for the whole module, its
    chat model ready (a failed test shows its log through ``STARTED``)."""
    tmp = tmp_path_factory.mktemp("readme")
    port = free_port()
    srv = start(tmp, default_config(tmp, port), port, "gateway.log")
    STARTED.append(srv)
    try:
        yield srv
    finally:
        srv.stop()


# --- what the README holds, and what this module does with it ------------------------------


def test_every_fenced_block_is_in_a_checked_language():
    """Each fenced block is ``sh`` or ``python``: a block in any other
    language would be checked by nothing here."""
    blocks, _ = readme()
    others = [f"README.md:{b.line}: ```{b.language}" for b in blocks if b.language not in CHECKED_LANGUAGES]
    assert not others, f"fenced blocks this test does not check (add them to {Path(__file__).name}):\n" + "\n".join(
        others
    )
    assert python_blocks(), "README has no python example"


def test_every_readme_command_is_run_or_listed():
    """Each README command is run by this module (:data:`RUN`) or listed
    word for word in :data:`NOT_RUN`; each :data:`NOT_RUN` entry is still
    in the README."""
    _, commands = readme()
    unchecked = [str(c) for c in commands if run_prefix(c) is None and c.words not in NOT_RUN]
    assert not unchecked, (
        f"README commands neither run nor listed in NOT_RUN of {Path(__file__).name} "
        "(run them there, or list them with why they cannot run offline):\n" + "\n".join(unchecked)
    )
    stale = [shlex.join(words) for words in NOT_RUN if words not in {c.words for c in commands}]
    assert not stale, f"NOT_RUN entries the README no longer has (remove them): {stale}"


def test_the_commands_not_run_name_real_targets_configs_and_models(tmp_path):
    """What the commands that are not run name exists: each ``make``
    target is in the Makefile, each ``CONFIG=`` file loads, and each model
    given to ``mlxd pull`` or ``mlxd serve --model`` is in the catalog
    ``mlxd pull --list`` prints."""
    from shared.config_loader import load_config

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    catalog = run_mlxd(["pull", "--list"], tmp_path)
    assert catalog.returncode == 0, output_of(catalog)
    listed = {line.split()[0] for line in catalog.stdout.splitlines() if line.strip()}
    checked = 0
    for command in (c for c in readme()[1] if c.words in NOT_RUN):
        words = command.words
        if words[0] == "make":
            for word in words[1:]:
                if "=" in word:
                    name, value = word.split("=", 1)
                    assert name == "CONFIG" and load_config(str(ROOT / value)), command
                else:
                    assert re.search(rf"^{re.escape(word)}:", makefile, re.M), f"{command}: no such make target"
                checked += 1
        elif words[0] in MLXD and words[1] in ("pull", "serve"):
            models = [w for i, w in enumerate(words[2:], 2) if words[1] == "pull" or words[i - 1] == "--model"]
            assert models and set(models) <= listed, f"{command}: not in `mlxd pull --list`:\n{catalog.stdout}"
            checked += 1
    assert checked


# --- the commands that run offline -----------------------------------------------------------


def run_mlxd(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    """``mlxd ARGS`` as ``sys.executable -m gateway ARGS`` from the repository
    root, with the Hub switched off and an empty Hugging Face cache in ``tmp``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp / "hf-home")}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=SNIPPET_TIMEOUT,
    )


def test_the_offline_mlxd_commands_run(tmp_path):
    """Every README ``mlxd pull --list`` and ``mlxd ls`` exits 0 and prints something."""
    commands = commands_run_by(*(prefix for prefix in RUN if prefix[0] in MLXD))
    assert commands, "README has no offline mlxd command any more: remove them from RUN"
    for command in commands:
        result = run_mlxd(list(command.words[1:]), tmp_path)
        if result.returncode != 0 or not result.stdout.strip():
            pytest.fail(f"{command}\n{output_of(result)}", pytrace=False)


# --- the examples, against the default config ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("block", python_blocks(), ids=block_id)
def test_the_python_example_runs(block: Block, server: Server, tmp_path):
    """A python block, with only its server address changed, exits 0 and
    prints an answer."""
    assert README_URL in block.text, f"README.md:{block.line}: the example never names {README_URL}"
    script = tmp_path / "example.py"
    script.write_text(with_url(block.text, server.url), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=SNIPPET_TIMEOUT
    )
    if result.returncode != 0 or not result.stdout.strip():
        pytest.fail(f"the example at README.md:{block.line}\n{output_of(result)}", pytrace=False)


@pytest.mark.slow
def test_the_curl_example_answers(server: Server):
    """Every README curl command, with only its server address changed, gets
    a chat completion whose first choice has content."""
    if not Path(CURL).exists():
        pytest.skip(f"{CURL} is not installed")
    commands = commands_run_by(("curl",))
    assert commands, "README has no curl example any more: remove it from RUN"
    for command in commands:
        assert any(README_URL in word for word in command.words), f"{command}: never names {README_URL}"
        args = [with_url(word, server.url) for word in command.words[1:]]
        result = subprocess.run([CURL, *args], capture_output=True, text=True, timeout=SNIPPET_TIMEOUT)
        if result.returncode != 0:
            pytest.fail(f"{command}\n{output_of(result)}", pytrace=False)
        try:
            content = json.loads(result.stdout)["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError):
            content = None
        if not isinstance(content, str) or not content.strip():
            pytest.fail(f"{command}\nno choices[0].message.content in the answer:\n{result.stdout}", pytrace=False)
