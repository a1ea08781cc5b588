"""The package map's import rules, read from the source with ``ast`` (nothing
is imported, so the test needs neither MLX nor the SDKs).

The rules are those the packages' ``__init__.py`` docstrings state (and
``docs/concepts/architecture.md`` draws): each package of ``gateway/`` and
``worker/`` may import only the packages listed for it in :data:`GATEWAY`
and :data:`WORKER`; the protocol front-ends never import each other (the
Responses front-end builds on OpenAI's chat pieces); the shared toolkit
never imports a front-end; nothing in a package imports the entry points
and the composition at the top; the worker's input and output threads'
packages never import MLX, directly or through a module they load; the
gateway never imports MLX or the worker, the worker never the gateway,
``shared/`` neither. Every import counts: at module level, deferred inside
a function, or for type checking only. There are no import cycles between
modules, and no module imports another's ``_private`` name.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROJECT = ("gateway", "worker", "shared")
MLX = ("mlx", "mlx_lm", "mlx_vlm", "mlx_embeddings", "mlx_metal", "mlx_audio")

_FRONT_END = {"core", "frontend", "images", "mcp"}

GATEWAY: dict[str, set[str]] = {
    "core": set(),
    "frontend": {"core"},
    "images": {"core"},
    "mcp": {"core", "frontend"},
    "hub": set(),
    "workers": {"core", "images", "hub"},
    "metrics": {"core", "workers"},
    "dashboard": {"core"},
    "control": {"core"},
    "openapi": {"core", "frontend", "workers", "dashboard", "control"},
    "openai": _FRONT_END,
    "responses": _FRONT_END | {"openai"},
    "anthropic": _FRONT_END,
    "ollama": _FRONT_END,
    "embeddings": {"core", "frontend"},
    "rerank": {"core", "frontend"},
    "speech": {"core", "frontend"},
    "transcription": {"core", "frontend"},
    "http": {"core", "frontend"},
    "limits": {"core", "frontend"},
    "service": set(),
}
"""Each gateway package and the gateway packages it may import."""

GATEWAY_TOP = {"__init__", "__main__", "app", "cli", "server", "node_main", "openapi_document"}
"""The gateway's entry points and composition: they may import any package;
no package imports them."""

FRONT_ENDS = {"openai", "responses", "anthropic", "ollama", "embeddings", "rerank", "transcription"}
"""The protocol front-ends."""

WORKER: dict[str, set[str]] = {
    "parsers": set(),
    "sampling": set(),
    "speculation": {"sampling"},
    "caches": set(),
    "loading": set(),
    "vision": {"loading"},
    "batch_loop": set(),
    "embeddings": {"loading", "batch_loop"},
    "rerank": {"embeddings", "loading"},
    "speech": {"loading", "batch_loop"},
    "transcription": {"loading", "batch_loop"},
    "prompting": {"parsers", "sampling", "vision"},
    "output": {"parsers"},
    "engine": {"sampling", "speculation", "caches"},
    "tensor_parallel": {"engine"},
}
"""Each worker package and the worker packages it may import (besides the
worker's contracts, :data:`WORKER_CONTRACTS`)."""

WORKER_CONTRACTS = {"messages", "faults", "parent_watch"}
"""Top-level worker modules every worker package may import; they import
nothing of the worker but each other."""

WORKER_TOP = {"__init__", "__main__", "main", "model_setup", "kind_requests"}
"""The worker process's entry point and composition: no package imports them."""

MLX_FREE = {"prompting", "output", "parsers"}
"""Worker packages of the input and output threads: never MLX."""


@dataclass
class Module:
    """One module of the tree as the test reads it."""

    name: str
    path: Path
    imports: list[tuple[str, int, bool]] = field(default_factory=list)
    """(imported module, line, at load time) of every import."""
    private: list[tuple[str, str, int]] = field(default_factory=list)
    """(module, private name, line) of every ``from M import _name``."""

    @property
    def top(self) -> str:
        return self.name.split(".")[0]

    @property
    def package(self) -> str | None:
        """The package under the top (``openai`` of ``gateway.openai.routes``),
        None for a top-level module."""
        parts = self.name.split(".")
        if len(parts) >= 3:
            return parts[1]
        if self.path.name == "__init__.py" and len(parts) == 2:
            return parts[1]
        return None

    @property
    def leaf(self) -> str:
        return "__init__" if self.path.name == "__init__.py" else self.name.split(".")[-1]


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def read_tree(root: Path = ROOT) -> dict[str, Module]:
    """Every module of the project packages under ``root`` with its imports."""
    files = [p for top in PROJECT for p in sorted((root / top).rglob("*.py")) if "__pycache__" not in p.parts]
    modules = {_module_name(p, root): Module(_module_name(p, root), p) for p in files}
    for module in modules.values():
        _read_imports(module, set(modules))
    return modules


def _read_imports(module: Module, names: set[str]) -> None:
    """Fill ``module``'s imports (``names``: every module of the tree)."""
    package = module.name if module.path.name == "__init__.py" else module.name.rpartition(".")[0]

    def resolve(base: str, name: str | None) -> str:
        """``from base import name``: the module it names."""
        return f"{base}.{name}" if name and f"{base}.{name}" in names else base

    def visit(node: ast.AST, at_load: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            at_load = False
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, False)
            for child in node.orelse:
                visit(child, at_load)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                module.imports.append((alias.name, node.lineno, at_load))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                target = resolve(base, alias.name)
                module.imports.append((target, node.lineno, at_load))
                if alias.name.startswith("_") and target == base and base.split(".")[0] in PROJECT:
                    module.private.append((base, alias.name, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, at_load)

    visit(ast.parse(module.path.read_text(encoding="utf-8")), True)


def _where(path: Path) -> Path:
    """``path`` from the repository's root when it lies inside it."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def layering_faults(modules: dict[str, Module]) -> list[str]:
    """Every import that breaks a rule of the module docstring, as
    ``path:line: why``."""
    faults = []
    for module in modules.values():
        where = _where(module.path)
        for target, line, _ in module.imports:
            top = target.split(".")[0]
            here = f"{where}:{line}: {module.name} imports {target}"
            if top in MLX and module.top in ("gateway", "shared"):
                faults.append(f"{here}: the {module.top} never imports MLX")
            if top not in PROJECT or target not in modules:
                continue
            other = modules[target]
            if module.top != other.top:
                if module.top == "shared" or other.top != "shared":
                    faults.append(f"{here}: {module.top}/ may import only shared/ of the other trees")
                continue
            if module.top == "gateway":
                faults += _gateway_fault(module, other, here)
            elif module.top == "worker":
                faults += _worker_fault(module, other, here)
        for base, name, line in module.private:
            faults.append(f"{where}:{line}: {module.name} imports {base}.{name}, a private name of another module")
    return faults


def _gateway_fault(module: Module, other: Module, here: str) -> list[str]:
    mine, theirs = module.package, other.package
    if theirs is None:  # the top: entry points and composition
        if mine is not None:
            return [f"{here}: nothing in a package imports the gateway's entry points and composition"]
        if other.leaf == "__main__" or (other.leaf == "cli" and module.leaf != "__main__"):
            return [f"{here}: only `python -m gateway` starts the command line"]
        return []
    if mine is None or mine == theirs:
        return []
    if mine not in GATEWAY:
        return [f"{here}: gateway.{mine} is not in the package map (tests/test_layering.py)"]
    if theirs in GATEWAY[mine]:
        return []
    if mine in FRONT_ENDS and theirs in FRONT_ENDS:
        return [f"{here}: protocol front-ends never import each other"]
    if mine == "frontend":
        return [f"{here}: the front-ends' toolkit never imports a front-end or what is above it"]
    return [f"{here}: gateway.{mine} may import only {sorted(GATEWAY[mine]) or 'nothing of the gateway'}"]


def _worker_fault(module: Module, other: Module, here: str) -> list[str]:
    mine, theirs = module.package, other.package
    if theirs is None:
        if other.leaf in WORKER_CONTRACTS:
            return []
        if mine is not None or module.leaf in WORKER_CONTRACTS:
            return [f"{here}: nothing in a package imports the worker's entry point and composition"]
        if other.leaf == "__main__" or (other.leaf == "main" and module.leaf != "__main__"):
            return [f"{here}: only `python -m worker` starts the worker process"]
        return []
    if module.leaf in WORKER_CONTRACTS and mine is None:
        return [f"{here}: the worker's contracts import nothing of the worker's packages"]
    if mine is None or mine == theirs:
        return []
    if mine not in WORKER:
        return [f"{here}: worker.{mine} is not in the package map (tests/test_layering.py)"]
    if theirs in WORKER[mine]:
        return []
    return [
        f"{here}: worker.{mine} may import only {sorted(WORKER[mine]) or 'nothing of the worker'} (and its contracts)"
    ]


def mlx_faults(modules: dict[str, Module]) -> list[str]:
    """Modules of :data:`MLX_FREE` that import MLX, or load a module that does."""
    loads_mlx: dict[str, str | None] = {}

    def reason(name: str, seen: frozenset[str]) -> str | None:
        """Why loading ``name`` loads MLX (None: it does not)."""
        if name in loads_mlx:
            return loads_mlx[name]
        found = None
        for target, _, at_load in modules[name].imports:
            if not at_load:
                continue
            if target.split(".")[0] in MLX:
                found = f"{name} imports {target}"
            elif target in modules and target not in seen:
                deeper = reason(target, seen | {target})
                if deeper:
                    found = f"{name} -> {deeper}"
            if found:
                break
        loads_mlx[name] = found
        return found

    faults = []
    for module in modules.values():
        if module.top != "worker" or module.package not in MLX_FREE:
            continue
        for target, line, _ in module.imports:
            if target.split(".")[0] in MLX:
                faults.append(f"{_where(module.path)}:{line}: {module.name} imports {target}")
        why = reason(module.name, frozenset({module.name}))
        if why and not any(f.endswith(f"imports {why.split(' imports ')[-1]}") for f in faults):
            faults.append(f"{_where(module.path)}: loading it loads MLX: {why}")
    return faults


def import_cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The import cycles between modules (strongly connected components of
    more than one module, or a module importing itself)."""
    graph = {
        name: sorted({t for t, _, _ in m.imports if t in modules and t != name and not name.startswith(t + ".")})
        for name, m in modules.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def connect(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            connect(name)
    return cycles


@pytest.fixture(scope="module")
def tree() -> dict[str, Module]:
    return read_tree()


def test_every_module_lives_in_a_package_with_a_rule(tree):
    """Every module is in a mapped package or is one of the listed top-level
    modules, and every package's ``__init__.py`` docstring states its rule
    (what belongs, what it may import, where it runs)."""
    strays = []
    for module in tree.values():
        if module.top == "shared":
            continue
        mapped = GATEWAY if module.top == "gateway" else WORKER
        top = GATEWAY_TOP if module.top == "gateway" else WORKER_TOP | WORKER_CONTRACTS
        if module.package is None and module.leaf not in top:
            strays.append(f"{module.name}: a top-level module not in the map")
        elif module.package is not None and module.package not in mapped:
            strays.append(f"{module.name}: package {module.package} not in the map")
    assert not strays, "\n".join(strays)
    for top, mapped in (("gateway", GATEWAY), ("worker", WORKER)):
        for package in mapped:
            init = ROOT / top / package / "__init__.py"
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            assert "Imports:" in doc or package == "parsers", f"{init.relative_to(ROOT)} states no import rule"


def test_imports_follow_the_package_map(tree):
    faults = layering_faults(tree)
    assert not faults, "imports that break the package map:\n" + "\n".join(faults)


def test_the_input_and_output_threads_never_load_mlx(tree):
    faults = mlx_faults(tree)
    assert not faults, "\n".join(faults)


def test_no_import_cycles(tree):
    """Deferred and type-only imports count: a cycle through them is still a cycle."""
    cycles = import_cycles(tree)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _tree_with(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return read_tree(tmp_path)


def test_the_rules_catch_what_they_forbid(tmp_path):
    """A small tree with one of each forbidden import: each is reported."""
    files = {
        "gateway/__init__.py": "",
        "gateway/cli.py": "",
        "gateway/openai/__init__.py": "",
        "gateway/openai/format.py": "",
        "gateway/anthropic/__init__.py": "",
        "gateway/anthropic/routes.py": "def f():\n    from gateway.openai import format\n",
        "gateway/frontend/__init__.py": "",
        "gateway/frontend/sse.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway.anthropic.routes import f\n",
        "gateway/core/__init__.py": "",
        "gateway/core/errors.py": "from gateway.cli import main\nfrom gateway.openai.format import _x\n",
        "worker/__init__.py": "",
        "worker/messages.py": "",
        "worker/output/__init__.py": "",
        "worker/output/detok.py": "from worker.engine.scheduler import Scheduler\n",
        "worker/engine/__init__.py": "",
        "worker/engine/scheduler.py": "import mlx.core as mx\nfrom worker.output import detok\n",
        "shared/__init__.py": "",
        "shared/protocol.py": "",
    }
    tree = _tree_with(tmp_path, files)
    faults = "\n".join(layering_faults(tree))
    assert (
        "gateway.anthropic.routes imports gateway.openai.format: protocol front-ends never import each other" in faults
    )
    assert "gateway.frontend.sse imports gateway.anthropic.routes: the front-ends' toolkit never imports" in faults
    assert "gateway.core.errors imports gateway.cli: nothing in a package imports the gateway's entry points" in faults
    assert "gateway.core.errors imports gateway.openai.format._x, a private name" in faults
    assert "worker.output.detok imports worker.engine.scheduler: worker.output may import only ['parsers']" in faults
    assert any(
        "loading it loads MLX: worker.output.detok -> worker.engine.scheduler imports mlx.core" in f
        for f in mlx_faults(tree)
    )
    assert ["worker.engine.scheduler", "worker.output.detok"] in import_cycles(tree)
