"""The documentation gate (runs in ``make test``; fast, offline, no MLX).

1. Every public module, class, function and method of ``gateway/``,
   ``worker/`` and ``shared/`` has a docstring; the failure lists the missing
   ones as ``file:line``. Public: no part of the dotted name starts with
   ``_``, and not nested inside a function.
2. ``ruff check`` and ``ruff format --check`` pass (config in
   ``pyproject.toml``).
3. The API inventory builds without importing the project, and its counts
   match the source as counted here by an independent walk.
4. ``llms.txt`` links resolve, and every repository path the docs name exists.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import apimap

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("gateway", "worker", "shared")
LINT_PATHS = ("gateway", "worker", "shared", "tests", "tools", "bench")
NEVER_IMPORTED = ("gateway", "worker", "shared", "mlx", "mlx_lm")

KNOWN_GAPS: set[str] = set()
"""Public symbols allowed to lack a docstring for now (none). An entry that
is documented meanwhile fails the test too, so the list cannot go stale."""


# --- 1. docstrings ----------------------------------------------------------------------


def _gap_name(gap: str) -> str:
    """The dotted name at the end of a ``path:line: kind name`` gap."""
    return gap.rsplit(" ", 1)[-1]


def test_every_public_symbol_has_a_docstring():
    gaps = apimap.missing_docstrings(ROOT)
    new = [gap for gap in gaps if _gap_name(gap) not in KNOWN_GAPS]
    assert not new, "public symbols without a docstring:\n" + "\n".join(new)
    stale = KNOWN_GAPS - {_gap_name(gap) for gap in gaps}
    assert not stale, f"documented now, remove from KNOWN_GAPS in {Path(__file__).name}: {sorted(stale)}"


def test_the_docstring_gate_names_file_and_line(tmp_path):
    """Removing a docstring from a public function of a copy of the tree
    makes the check report exactly that function, at its line; private and
    function-nested definitions are not required to have one."""
    source = (ROOT / "gateway" / "core" / "errors.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    target = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "bad_request")
    docstring = target.body[0]
    lines = source.splitlines(keepends=True)
    stripped = "".join(lines[: docstring.lineno - 1] + lines[docstring.end_lineno :])
    stripped += textwrap.dedent(
        '''

        def _private_helper():
            pass


        class _Hidden:
            def method(self):
                pass


        def outer():
            """Documented."""

            def nested():
                pass

            return nested
        '''
    )
    (tmp_path / "gateway" / "core").mkdir(parents=True)
    (tmp_path / "gateway" / "__init__.py").write_text('"""Package."""\n')
    (tmp_path / "gateway" / "core" / "__init__.py").write_text('"""Package."""\n')
    (tmp_path / "gateway" / "core" / "errors.py").write_text(stripped, encoding="utf-8")

    gaps = apimap.missing_docstrings(tmp_path, ("gateway",))

    assert gaps == [f"gateway/core/errors.py:{target.lineno}: function gateway.core.errors.bad_request"]
    assert apimap.missing_docstrings(ROOT, ("gateway",)) != gaps  # the real tree is untouched


def test_a_module_without_a_docstring_is_reported(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "__init__.py").write_text('"""Package."""\n')
    (tmp_path / "shared" / "bare.py").write_text("X = 1\n")
    assert apimap.missing_docstrings(tmp_path, ("shared",)) == ["shared/bare.py:1: module shared.bare"]


# --- 2. ruff ------------------------------------------------------------------------------


def test_ruff_check_and_format():
    """ruff's lint and format check pass on all the project's Python."""
    failures = []
    for command in (["check"], ["format", "--check"]):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", *command, *LINT_PATHS],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            failures.append(f"$ ruff {' '.join(command)}\n{result.stdout}{result.stderr}")
    assert not failures, "\n".join(failures)


# --- 3. the inventory -------------------------------------------------------------------------


def _package_files() -> list[Path]:
    """Every .py file of the packages, found without tools.apimap."""
    return sorted(
        path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "__pycache__" not in path.parts
    )


def _independent_symbol_count(files: list[Path]) -> int:
    """Modules, plus every class/def that has no function or lambda among
    its ancestors (a parent-map walk, unlike the generator's scope walk)."""
    count = 0
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        count += 1
        for node in ast.walk(tree):
            if not isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            ancestor = parents.get(node)
            while ancestor is not None and not isinstance(
                ancestor, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
            ):
                ancestor = parents.get(ancestor)
            count += ancestor is None
    return count


SYMBOL_FIELDS = {
    "full_name",
    "qualname",
    "kind",
    "signature",
    "docstring",
    "summary",
    "public",
    "documented",
    "line",
    "end_line",
    "calls",
    "raises",
    "returns",
    "awaits",
    "yields",
    "decorators",
}


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    """The inventory as ``python -m tools.apimap --out`` writes it, built in
    a fresh interpreter that must not import the project or MLX."""
    out = tmp_path_factory.mktemp("site") / "api-inventory.json"
    check = (
        "import sys\n"
        "from tools import apimap\n"
        "code = apimap.main(['--out', sys.argv[1]])\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {NEVER_IMPORTED!r})\n"
        "sys.exit(f'the generator imported {bad}' if bad else code)\n"
    )
    result = subprocess.run([sys.executable, "-c", check, str(out)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(out.read_text(encoding="utf-8"))


def test_inventory_counts_match_the_source(inventory):
    files = _package_files()
    assert inventory["schema_version"] == apimap.SCHEMA_VERSION
    assert inventory["repository"] == "mlxd"
    assert inventory["module_count"] == len(files) == len(inventory["modules"])
    assert [m["path"] for m in inventory["modules"]] == [f.relative_to(ROOT).as_posix() for f in files]
    assert inventory["symbol_count"] == _independent_symbol_count(files)
    assert inventory["symbol_count"] == sum(len(m["symbols"]) for m in inventory["modules"])


def test_inventory_symbols_carry_every_field(inventory):
    for module in inventory["modules"]:
        assert module["symbols"][0]["kind"] == "module"
        for symbol in module["symbols"]:
            assert SYMBOL_FIELDS <= symbol.keys(), symbol["full_name"]
            assert symbol["full_name"].startswith(module["name"])
            assert 1 <= symbol["line"] <= symbol["end_line"]


def test_inventory_reads_body_facts(inventory):
    symbols = {s["full_name"]: s for m in inventory["modules"] for s in m["symbols"]}
    submit = symbols["gateway.workers.pool.WorkerPool.submit"]
    assert submit["kind"] == "async method"
    assert submit["public"] and submit["documented"]
    assert submit["signature"].startswith("(self, model: str, request: GenerateRequest | EmbedRequest")
    assert {"unavailable", "model_not_found"} <= set(submit["raises"])
    assert "self._acquire" in submit["awaits"]
    assert "handle.submit" in submit["calls"]
    assert submit["returns"] and not submit["yields"]
    events = symbols["gateway.frontend.request_flow._keepalive_then"]
    assert events["yields"] and not events["public"]


# --- 4. llms.txt and paths named in the docs ---------------------------------------------------


def test_llms_txt_links_resolve(tmp_path):
    from tools import llms

    llms.write(tmp_path)
    text = (tmp_path / "llms.txt").read_text(encoding="utf-8")
    assert text.startswith("# mlxd\n")
    assert "(agents.md)" in text
    for target in re.findall(r"\]\(([^)]+\.(?:md|txt))\)", text):
        assert (tmp_path / target).exists() or target == "llms-full.txt", target
    full = (tmp_path / "llms-full.txt").read_text(encoding="utf-8")
    assert "# Guide for coding agents" in full and "## gateway.workers.pool (`gateway/workers/pool.py`)" in full


REPO_PATH = re.compile(r"`((?:gateway|worker|shared|tests|tools|bench|deploy|configs|docs)/[^`\s]*)`")


def test_paths_named_in_the_docs_exist():
    missing = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for path in REPO_PATH.findall(page.read_text(encoding="utf-8")):
            pattern = path.rstrip("/")
            if not any(ROOT.glob(pattern)):
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)
