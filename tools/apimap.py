"""A machine-readable map of the source, read with :mod:`ast` only.

:func:`build_inventory` walks every ``.py`` file of the packages
(``gateway``, ``worker``, ``shared``) and describes each module and each
class, function and method that is not nested inside a function: its name,
kind, signature, docstring, location, and facts read from its body (what it
calls, raises, awaits, whether it returns a value or yields, the state it
reads and writes: :mod:`tools.state_facts`), whether its dotted name
reaches it (``addressable``) and a link to its exact lines
(:mod:`tools.sourcelinks`); each module also lists every definition,
nested ones included, with its lines (``definitions``). Nothing is
imported, so the map can be built where MLX (or any dependency) is missing.

:func:`missing_docstrings` is the docstring gate of ``tests/test_docs.py``:
every public module, class, function and method must have a docstring.
"Public" means that no part of the dotted name starts with ``_`` (so
``__init__``, ``_helper`` and the members of ``_Private`` are not public)
and that the definition is not nested inside a function.

Command line::

    python -m tools.apimap --out site/api-inventory.json   # write the map
    python -m tools.apimap --check                         # list docstring gaps, exit 1 if any
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

from tools.sourcelinks import SourceLinks, source_links
from tools.state_facts import definitions, final_bindings, module_globals, self_parameter, state_of

ROOT = Path(__file__).resolve().parent.parent
"""The repository root (the directory holding ``pyproject.toml``)."""

PACKAGES = ("gateway", "worker", "shared")
"""The packages the inventory and the docstring gate cover."""

SCHEMA_VERSION = 1
"""Version of the inventory's JSON layout; bumped on incompatible changes."""

CONVENTIONS = {
    "public": "no part of the dotted name starts with '_' and the definition is not nested in a function",
    "documented": "the symbol has a non-empty docstring",
    "symbols": "the module itself, then every class, function and method not nested inside a function, in source order",
    "calls": "dotted names of everything called in the body, first occurrence first; includes calls in "
    "nested functions and lambdas, excludes the bodies of member classes and methods",
    "raises": "the exception named by each raise statement (the callable for 'raise f(...)'); "
    "'<re-raise>' for a bare raise",
    "awaits": "dotted names of the awaited expressions (the callable for 'await f(...)')",
    "returns": "true when the body has 'return <value>' (not nested functions) or a return annotation other "
    "than None/NoReturn/Never",
    "yields": "true when the body itself contains yield or yield from",
    "line": "1-based line of the def/class statement (decorators are above it); end_line is its last line",
    "reads": "attributes of self ('self.<name>'; a method's first parameter, cls for a classmethod) and module "
    "globals (bare names: names the module binds by assignment) the body loads, closures included; a module "
    "reads nothing",
    "writes": "attributes of self the body assigns or deletes, and module globals it declares 'global' and "
    "assigns; a module writes the globals it binds",
    "addressable": "the dotted full_name reaches this definition after import: it is the last binding of its "
    "name in its scope and its class (if any) is addressable",
    "url": "link to the exact lines (#Lline-Lend_line) at the documented commit, built from the repository's "
    "configured URL; null when no URL or commit is known",
    "definitions": "per module, every class and function in source order, nested ones too (qualname as "
    "Python's __qualname__, e.g. 'f.<locals>.g'), with kind, line, end_line, public, addressable and url",
}
"""What each field of a symbol means, written into the inventory."""

_NO_VALUE_ANNOTATIONS = {"None", "NoReturn", "Never", "typing.NoReturn", "typing.Never"}
_PROPERTY_DECORATORS = {"property", "functools.cached_property", "cached_property"}
_Def = (ast.FunctionDef, ast.AsyncFunctionDef)


# --- files and names -------------------------------------------------------------------


def module_files(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """Every ``.py`` file of ``packages`` under ``root``, sorted, relative to ``root``."""
    files: list[Path] = []
    for package in packages:
        base = root / package
        files += [p.relative_to(root) for p in base.rglob("*.py") if "__pycache__" not in p.parts]
    return sorted(files, key=lambda p: p.as_posix())


def module_name(path: Path) -> str:
    """The dotted module name of a relative path (``pkg/__init__.py`` is ``pkg``)."""
    parts = list(path.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_public_name(dotted: str) -> bool:
    """Whether no part of ``dotted`` starts with an underscore."""
    return not any(part.startswith("_") for part in dotted.split("."))


def dotted(expr: ast.expr) -> str:
    """A readable name for a called or raised expression: ``a.b.c`` for
    attribute chains, ``f().g`` through calls, ``x[].y`` through subscripts,
    else the source text (at most 80 characters)."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return f"{dotted(expr.value)}.{expr.attr}"
    if isinstance(expr, ast.Call):
        return f"{dotted(expr.func)}()"
    if isinstance(expr, ast.Subscript):
        return f"{dotted(expr.value)}[]"
    text = ast.unparse(expr)
    return text if len(text) <= 80 else text[:77] + "..."


# --- signatures ---------------------------------------------------------------------------


def _arg(arg: ast.arg, default: ast.expr | None = None) -> str:
    """One parameter as written: ``name: annotation = default``."""
    text = arg.arg
    if arg.annotation is not None:
        text += f": {ast.unparse(arg.annotation)}"
        if default is not None:
            text += f" = {ast.unparse(default)}"
    elif default is not None:
        text += f"={ast.unparse(default)}"
    return text


def function_signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    """``(params) -> annotation`` of a function, rebuilt from its AST."""
    a = node.args
    positional = a.posonlyargs + a.args
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    params = [_arg(arg, default) for arg, default in zip(positional, defaults)]
    if a.posonlyargs:
        params.insert(len(a.posonlyargs), "/")
    if a.vararg is not None:
        params.append("*" + _arg(a.vararg))
    elif a.kwonlyargs:
        params.append("*")
    params += [_arg(arg, default) for arg, default in zip(a.kwonlyargs, a.kw_defaults)]
    if a.kwarg is not None:
        params.append("**" + _arg(a.kwarg))
    text = f"({', '.join(params)})"
    if node.returns is not None:
        text += f" -> {ast.unparse(node.returns)}"
    return text


def class_signature(node: ast.ClassDef) -> str:
    """``(bases, keywords)`` of a class statement (empty without bases)."""
    items = [ast.unparse(b) for b in node.bases] + [ast.unparse(k) for k in node.keywords]
    return f"({', '.join(items)})" if items else ""


# --- body facts ---------------------------------------------------------------------------


class _Facts:
    """Collects calls, raises, awaits, return values and yields of one body."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.raises: list[str] = []
        self.awaits: list[str] = []
        self.returns_value = False
        self.yields = False

    @staticmethod
    def _add(bucket: list[str], name: str) -> None:
        if name not in bucket:
            bucket.append(name)

    def scan(self, statements: list[ast.stmt], *, members_are_symbols: bool) -> None:
        """Scan ``statements``; with ``members_are_symbols`` (module and class
        bodies) defs and classes are skipped: they are symbols of their own."""
        for statement in statements:
            self._visit(statement, nested=False, members_are_symbols=members_are_symbols)

    def _visit(self, node: ast.AST, *, nested: bool, members_are_symbols: bool) -> None:
        if isinstance(node, (*_Def, ast.ClassDef)):
            if members_are_symbols:
                return
            nested = True
        elif isinstance(node, ast.Lambda):
            nested = True
        elif isinstance(node, ast.Call):
            self._add(self.calls, dotted(node.func))
        elif isinstance(node, ast.Raise):
            if node.exc is None:
                self._add(self.raises, "<re-raise>")
            else:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                self._add(self.raises, dotted(exc))
        elif isinstance(node, ast.Await):
            value = node.value.func if isinstance(node.value, ast.Call) else node.value
            self._add(self.awaits, dotted(value))
        elif isinstance(node, ast.Return) and not nested:
            if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
                self.returns_value = True
        elif isinstance(node, (ast.Yield, ast.YieldFrom)) and not nested:
            self.yields = True
        for child in ast.iter_child_nodes(node):
            self._visit(child, nested=nested, members_are_symbols=members_are_symbols and not nested)


# --- symbols ------------------------------------------------------------------------------


def summary(docstring: str | None) -> str:
    """The first paragraph of ``docstring`` on one line ('' when there is none)."""
    if not docstring:
        return ""
    return " ".join(docstring.strip().split("\n\n")[0].split())


def _decorator_names(node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    return [ast.unparse(d) for d in node.decorator_list]


def _function_kind(node: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool, decorators: list[str]) -> str:
    prefix = "async " if isinstance(node, ast.AsyncFunctionDef) else ""
    if not in_class:
        return prefix + "function"
    if any(d in _PROPERTY_DECORATORS or d.endswith((".setter", ".deleter")) for d in decorators):
        return "property"
    if "staticmethod" in decorators:
        return prefix + "staticmethod"
    if "classmethod" in decorators:
        return prefix + "classmethod"
    return prefix + "method"


def _needs_docstring(decorators: list[str]) -> bool:
    """Overload stubs and property setters/deleters share the docstring of
    their main definition."""
    return not any(d in ("overload", "typing.overload") or d.endswith((".setter", ".deleter")) for d in decorators)


def _symbol(
    module: str,
    qualname: str,
    kind: str,
    node: ast.AST,
    *,
    signature: str,
    decorators: list[str],
    statements: list[ast.stmt],
    members_are_symbols: bool,
    return_annotation: str | None,
    needs_docstring: bool = True,
    state: tuple[list[str], list[str]] = ([], []),
    addressable: bool = True,
    links: SourceLinks | None = None,
    path: str = "",
) -> dict[str, Any]:
    docstring = ast.get_docstring(node, clean=True)  # type: ignore[arg-type]
    facts = _Facts()
    facts.scan(statements, members_are_symbols=members_are_symbols)
    returns = facts.returns_value or (return_annotation is not None and return_annotation not in _NO_VALUE_ANNOTATIONS)
    full_name = f"{module}.{qualname}" if qualname else module
    return {
        "full_name": full_name,
        "qualname": qualname,
        "kind": kind,
        "signature": signature,
        "docstring": docstring,
        "summary": summary(docstring),
        "public": _is_public_name(full_name),
        "documented": bool(docstring and docstring.strip()),
        "needs_docstring": needs_docstring,
        "line": getattr(node, "lineno", 1),
        "end_line": getattr(node, "end_lineno", None),
        "decorators": decorators,
        "calls": facts.calls,
        "raises": facts.raises,
        "awaits": facts.awaits,
        "returns": returns,
        "return_annotation": return_annotation,
        "yields": facts.yields,
        "reads": state[0],
        "writes": state[1],
        "addressable": addressable,
        "url": links.url(path, getattr(node, "lineno", 1), getattr(node, "end_lineno", None)) if links else None,
    }


class _Scan:
    """What every symbol of one module needs: its name and path, its module
    globals and the source links."""

    def __init__(self, module: str, path: str, globals_: list[str], links: SourceLinks | None) -> None:
        self.module = module
        self.path = path
        self.globals = set(globals_)
        self.links = links


def _members(
    scan: _Scan,
    statements: list[ast.stmt],
    prefix: str,
    in_class: bool,
    addressable: bool = True,
    final: dict[str, ast.stmt] | None = None,
) -> list[dict[str, Any]]:
    """Symbols defined by ``statements`` (a module or class body), including
    those inside ``if``/``try``/``with``/loop blocks; never inside functions.
    ``addressable``: the enclosing class (if any) is reachable by its name;
    ``final``: the scope's last binding of each name (None: ``statements``
    is a whole scope)."""
    found: list[dict[str, Any]] = []
    final = final_bindings(statements) if final is None else final
    module = scan.module
    for statement in statements:
        if isinstance(statement, ast.ClassDef):
            qualname = prefix + statement.name
            reachable = addressable and final.get(statement.name) is statement
            found.append(
                _symbol(
                    module,
                    qualname,
                    "class",
                    statement,
                    signature=class_signature(statement),
                    decorators=_decorator_names(statement),
                    statements=statement.body,
                    members_are_symbols=True,
                    return_annotation=None,
                    addressable=reachable,
                    links=scan.links,
                    path=scan.path,
                )
            )
            found += _members(scan, statement.body, qualname + ".", in_class=True, addressable=reachable)
        elif isinstance(statement, _Def):
            decorators = _decorator_names(statement)
            self_name = self_parameter(statement, decorators) if in_class else None
            found.append(
                _symbol(
                    module,
                    prefix + statement.name,
                    _function_kind(statement, in_class, decorators),
                    statement,
                    signature=function_signature(statement),
                    decorators=decorators,
                    statements=statement.body,
                    members_are_symbols=False,
                    return_annotation=ast.unparse(statement.returns) if statement.returns is not None else None,
                    needs_docstring=_needs_docstring(decorators),
                    state=state_of(statement, scan.globals, self_name),
                    addressable=addressable and final.get(statement.name) is statement,
                    links=scan.links,
                    path=scan.path,
                )
            )
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                block = getattr(statement, field, None)
                if isinstance(block, list):
                    for item in block:
                        inner = item.body if isinstance(item, (ast.ExceptHandler, ast.match_case)) else [item]
                        found += _members(scan, inner, prefix, in_class, addressable, final)
    return found


def _definition_map(tree: ast.Module, name: str, symbols: list[dict[str, Any]], scan: _Scan) -> list[dict[str, Any]]:
    """The module's line map: every definition (see ``CONVENTIONS``)."""
    reachable = {(s["qualname"], s["line"]) for s in symbols if s["addressable"]}
    out = []
    for qualname, node, nested in definitions(tree):
        if isinstance(node, ast.ClassDef):
            kind = "class"
        else:
            kind = ("async " if isinstance(node, ast.AsyncFunctionDef) else "") + "function"
        out.append(
            {
                "qualname": qualname,
                "kind": kind,
                "line": node.lineno,
                "end_line": node.end_lineno,
                "nested": nested,
                "public": not nested and _is_public_name(f"{name}.{qualname}"),
                "addressable": not nested and (qualname, node.lineno) in reachable,
                "url": scan.links.url(scan.path, node.lineno, node.end_lineno) if scan.links else None,
            }
        )
    return out


def scan_module(root: Path, path: Path, links: SourceLinks | None = None) -> dict[str, Any]:
    """The inventory entry of the module at ``root / path`` (``links``:
    where its lines are published; None: no links)."""
    source = (root / path).read_text(encoding="utf-8")
    tree = ast.parse(source, filename=path.as_posix())
    name = module_name(path)
    globals_ = module_globals(tree)
    scan = _Scan(name, path.as_posix(), globals_, links)
    module_symbol = _symbol(
        name,
        "",
        "module",
        tree,
        signature="",
        decorators=[],
        statements=tree.body,
        members_are_symbols=True,
        return_annotation=None,
        state=([], globals_),
        links=links,
        path=path.as_posix(),
    )
    module_symbol["end_line"] = len(source.splitlines())
    module_symbol["url"] = links.url(path.as_posix()) if links else None
    symbols = [module_symbol, *_members(scan, tree.body, "", in_class=False)]
    return {
        "name": name,
        "path": path.as_posix(),
        "docstring": module_symbol["docstring"],
        "summary": module_symbol["summary"],
        "public": module_symbol["public"],
        "symbols": symbols,
        "definitions": _definition_map(tree, name, symbols, scan),
    }


def _project(root: Path) -> dict[str, str]:
    """``name`` and ``version`` from ``pyproject.toml`` (empty when absent)."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except OSError:
        project = {}
    return {"name": str(project.get("name", root.name)), "version": str(project.get("version", ""))}


def build_inventory(
    root: Path = ROOT, packages: tuple[str, ...] = PACKAGES, links: SourceLinks | None = None
) -> dict[str, Any]:
    """The whole API inventory of ``packages`` under ``root`` (JSON-ready);
    ``links`` default to the checkout's (:func:`tools.sourcelinks.source_links`)."""
    links = links if links is not None else source_links(root)
    modules = [scan_module(root, path, links) for path in module_files(root, packages)]
    project = _project(root)
    return {
        "schema_version": SCHEMA_VERSION,
        "repository": project["name"],
        "version": project["version"],
        "source": {"repository_url": links.repository, "commit": links.commit},
        "packages": list(packages),
        "module_count": len(modules),
        "symbol_count": sum(len(m["symbols"]) for m in modules),
        "conventions": CONVENTIONS,
        "modules": modules,
    }


def missing_docstrings(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """``path:line: kind name`` for every public symbol without a docstring."""
    gaps = []
    for module in build_inventory(root, packages, SourceLinks(None, None))["modules"]:
        for symbol in module["symbols"]:
            if symbol["public"] and symbol["needs_docstring"] and not symbol["documented"]:
                gaps.append(f"{module['path']}:{symbol['line']}: {symbol['kind']} {symbol['full_name']}")
    return gaps


def main(argv: list[str] | None = None) -> int:
    """Write the inventory (``--out``) and/or check docstrings (``--check``)."""
    parser = argparse.ArgumentParser(prog="python -m tools.apimap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("--out", type=Path, help="write the inventory JSON here")
    parser.add_argument("--check", action="store_true", help="list public symbols without a docstring")
    args = parser.parse_args(argv)
    if args.out is None and not args.check:
        parser.error("nothing to do: give --out and/or --check")
    if args.out is not None:
        inventory = build_inventory(args.root)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(inventory, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"{args.out}: {inventory['module_count']} modules, {inventory['symbol_count']} symbols")
    if args.check:
        gaps = missing_docstrings(args.root)
        for gap in gaps:
            print(gap)
        if gaps:
            sys.stdout.flush()
            print(f"{len(gaps)} public symbol(s) without a docstring", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
