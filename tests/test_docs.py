"""The documentation gate (runs in ``make test``; fast, offline, no MLX).

1. Every public module, class, function and method of ``gateway/``,
   ``worker/`` and ``shared/`` has a docstring; the failure lists the missing
   ones as ``file:line``. Public: no part of the dotted name starts with
   ``_``, and not nested inside a function.
2. ``ruff check`` and ``ruff format --check`` pass (config in
   ``pyproject.toml``).
3. The API inventory builds without importing the project, and its counts
   match the source as counted here by an independent walk; its state,
   addressability, line map and links match the source (the addressable
   symbols of ``gateway/`` and ``shared/`` are imported and found at their
   lines); the source inventory covers ``bench/``, ``tools/``, ``deploy/``
   and ``tests/`` with each script's command and arguments.
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
            timeout=300,
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
    result = subprocess.run(
        [sys.executable, "-c", check, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
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


SAMPLE = textwrap.dedent(
    """\
    \"\"\"A sample module.\"\"\"

    import os

    LIMIT = 3
    _count = 0


    def bump(n):
        \"\"\"Count.\"\"\"
        global _count
        _count += n
        return LIMIT + len(os.sep)


    def shadowed():
        \"\"\"Hidden by the assignment below.\"\"\"


    shadowed = None


    class Box:
        \"\"\"A box.\"\"\"

        size = 1

        def fill(self, LIMIT):
            \"\"\"Fill.\"\"\"
            self.items = [self.size] * LIMIT
            del self.old

            def helper():
                return self.extra + _count

            return helper

        @classmethod
        def make(cls):
            \"\"\"Make.\"\"\"
            cls.made = True
            return cls()

        def fill(self):
            \"\"\"The fill the name reaches.\"\"\"
    """
)


def test_inventory_state_addressability_and_links(tmp_path):
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "__init__.py").write_text('"""Pkg."""\n')
    (tmp_path / "shared" / "sample.py").write_text(SAMPLE)
    links = apimap.SourceLinks("https://git.example/o/mlxd", "abc123")
    inventory = apimap.build_inventory(tmp_path, ("shared",), links)
    assert inventory["source"] == {"repository_url": "https://git.example/o/mlxd", "commit": "abc123"}
    (module,) = [m for m in inventory["modules"] if m["name"] == "shared.sample"]
    symbols = {(s["qualname"], s["line"]): s for s in module["symbols"]}
    by_name = {s["qualname"]: s for s in module["symbols"]}
    assert by_name[""]["writes"] == ["LIMIT", "_count", "shadowed"]
    bump = by_name["bump"]
    assert (bump["reads"], bump["writes"]) == (["_count", "LIMIT"], ["_count"])
    assert bump["url"] == f"https://git.example/o/mlxd/blob/abc123/shared/sample.py#L{bump['line']}-L{bump['end_line']}"
    first_fill, last_fill = sorted(
        (s for s in module["symbols"] if s["qualname"] == "Box.fill"), key=lambda s: s["line"]
    )
    assert first_fill["reads"] == ["self.size", "self.extra", "_count"]  # LIMIT is its parameter here
    assert first_fill["writes"] == ["self.items", "self.old"]
    assert not first_fill["addressable"] and last_fill["addressable"]
    assert by_name["Box.make"]["writes"] == ["self.made"]  # cls is the instance parameter of a classmethod
    shadowed = next(s for (q, _), s in symbols.items() if q == "shadowed")
    assert not shadowed["addressable"] and by_name["Box"]["addressable"]
    nested = [d for d in module["definitions"] if d["nested"]]
    assert [(d["qualname"], d["public"], d["addressable"]) for d in nested] == [
        ("Box.fill.<locals>.helper", False, False)
    ]
    assert nested[0]["url"].endswith(f"#L{nested[0]['line']}-L{nested[0]['end_line']}")
    assert len(module["definitions"]) == len(module["symbols"]) - 1 + len(nested)


def test_inventory_links_need_a_configured_repository(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[project.urls]\nRepository = "git@github.com:o/x.git"\n'
    )
    assert apimap.source_links(tmp_path).repository == "https://github.com/o/x"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert apimap.source_links(tmp_path) == apimap.SourceLinks(None, apimap.source_links(tmp_path).commit)
    assert apimap.SourceLinks(None, "abc").url("a.py", 1, 2) is None  # never guessed


def test_inventory_state_of_the_real_source(inventory):
    symbols = {s["full_name"]: s for m in inventory["modules"] for s in m["symbols"]}
    assert "_pulled" in symbols["gateway.hub.served.with_pulled_models"]["writes"]
    cancel = symbols["gateway.workers.handle.WorkerHandle.cancel"]
    assert set(cancel["reads"]) == {"self._requests", "self._incarnation"} and cancel["writes"] == []
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=60
    ).stdout.strip()
    assert inventory["source"]["commit"] == head
    definitions = {(m["name"], d["qualname"]) for m in inventory["modules"] for d in m["definitions"]}
    assert ("gateway.app", "build_app.<locals>.lifespan") in definitions


def test_addressable_symbols_import_at_their_lines(inventory):
    """Every addressable function of gateway/ and shared/ is what its
    dotted name reaches after import, defined at the inventory's lines."""
    import importlib
    import inspect

    checked = 0
    for module in inventory["modules"]:
        if module["name"].split(".")[0] not in ("gateway", "shared") or module["name"].endswith("__main__"):
            continue  # (a __main__ module runs its program when imported)
        imported = importlib.import_module(module["name"])
        for symbol in module["symbols"][1:]:
            if not symbol["addressable"] or "function" not in symbol["kind"] and "method" not in symbol["kind"]:
                continue
            target = imported
            for part in symbol["qualname"].split("."):
                target = inspect.getattr_static(target, part)
            target = inspect.unwrap(getattr(target, "__func__", target))
            first = symbol["line"] - len(symbol["decorators"]) - 20  # decorators may span lines
            assert first <= target.__code__.co_firstlineno <= symbol["line"], symbol["full_name"]
            checked += 1
    assert checked > 1000


def test_source_inventory_covers_scripts_and_helpers():
    from tools import sourcemap

    inventory = sourcemap.build_source_inventory(ROOT, apimap.SourceLinks(None, None))
    files = {f["path"]: f for f in inventory["files"]}
    expected = {
        p.relative_to(ROOT).as_posix()
        for d in ("bench", "tools", "deploy", "tests")
        for p in (ROOT / d).rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not p.relative_to(ROOT).as_posix().startswith("bench/results/")
        and (p.suffix == ".py" or d != "tests")
    }
    assert set(files) == expected
    bench = files["bench/prefix_throughput.py"]
    assert bench["runnable"] and bench["run"] == "python -m bench.prefix_throughput"
    assert {"flags": ["--tokens"], "type": "int", "default": 64} == {
        k: v for k, v in next(a for a in bench["arguments"] if a["flags"] == ["--tokens"]).items() if k != "line"
    }
    assert files["tests/test_docs.py"]["run"] == "python -m pytest -q tests/test_docs.py"
    helper = files["tests/tiny_model.py"]["module"]
    assert any(s["qualname"] == "build_tiny_model" for s in helper["symbols"])
    assert not files["tests/tiny_model.py"]["runnable"]
    assert files["deploy/com.mlxd.server.plist.in"]["kind"] == "in"
    assert inventory["unlisted"]["bench/results/"] >= 1


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
