"""What a definition reads and writes, which definitions a dotted name
reaches, and every definition with its lines (nested ones included), read
with :mod:`ast` for :mod:`tools.apimap`.

- State: :func:`state_of` lists the attributes of ``self`` (a method's
  first parameter; ``cls`` for a classmethod) and the module globals a
  function's body reads and writes, closures included. A global counts as
  read when the body loads a module-level name it does not bind locally,
  and as written when the body declares it ``global`` and assigns it; an
  augmented assignment (``x += 1``) both reads and writes.
- Addressability: :func:`final_bindings` gives, for one scope (a module or
  class body with its ``if``/``try``/``with`` blocks), the statement that
  binds each name last in source order; a definition is addressable (its
  dotted name reaches it after import) when it is that statement and its
  enclosing class is addressable too. Definitions nested in functions never
  are.
- Lines: :func:`definitions` lists every class and function of a module,
  nested ones too, with Python's qualified names (``outer.<locals>.inner``).

Pure; never imports the project.
"""

from __future__ import annotations

import ast
from typing import Iterator

_Def = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers", "cases")


def _scope_statements(statements: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of one scope in source order, descending into
    ``if``/``try``/``with``/loop/``match`` blocks but not into defs or classes."""
    for statement in statements:
        yield statement
        if isinstance(statement, (*_Def, ast.ClassDef)):
            continue
        for field in _BLOCK_FIELDS:
            block = getattr(statement, field, None)
            if isinstance(block, list):
                for item in block:
                    inner = item.body if isinstance(item, (ast.ExceptHandler, ast.match_case)) else [item]
                    yield from _scope_statements(inner)


def _bound_names(statement: ast.stmt) -> list[str]:
    """Names ``statement`` itself binds in its scope."""
    if isinstance(statement, (*_Def, ast.ClassDef)):
        return [statement.name]
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AnnAssign, ast.AugAssign)):
        targets = [statement.target]
    elif isinstance(statement, (ast.Import, ast.ImportFrom)):
        return [(alias.asname or alias.name).split(".")[0] for alias in statement.names]
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        targets = [statement.target]
    else:
        return []
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def final_bindings(statements: list[ast.stmt]) -> dict[str, ast.stmt]:
    """The statement binding each name of the scope last (see the module docstring)."""
    last: dict[str, ast.stmt] = {}
    for statement in _scope_statements(statements):
        for name in _bound_names(statement):
            last[name] = statement
    return last


def module_globals(tree: ast.Module) -> list[str]:
    """The names a module binds by assignment at its top level, in order
    (not its imports, functions or classes)."""
    names: list[str] = []
    for statement in _scope_statements(tree.body):
        if isinstance(statement, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for name in _bound_names(statement):
                if name not in names:
                    names.append(name)
    return names


def _add(bucket: list[str], name: str) -> None:
    if name not in bucket:
        bucket.append(name)


def _locals(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, declared_global: set[str]) -> set[str]:
    """Names ``node`` binds itself: parameters and assignment targets (not
    those declared global)."""
    a = node.args
    names = {arg.arg for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    names |= {arg.arg for arg in (a.vararg, a.kwarg) if arg is not None}
    body = node.body if isinstance(node.body, list) else [node.body]
    for child in body:
        for sub in ast.walk(child):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                names.add(sub.id)
            elif isinstance(sub, (*_Def, ast.ClassDef)):
                names.add(sub.name)
            elif isinstance(sub, (ast.Import, ast.ImportFrom)):
                names |= {(alias.asname or alias.name).split(".")[0] for alias in sub.names}
    return names - declared_global


def state_of(
    node: ast.FunctionDef | ast.AsyncFunctionDef, module_names: set[str], self_name: str | None
) -> tuple[list[str], list[str]]:
    """``(reads, writes)`` of a function: ``self.<attr>`` entries for the
    attributes of ``self_name`` (None: not a method) and bare names for
    module globals in ``module_names`` (see the module docstring)."""
    reads: list[str] = []
    writes: list[str] = []
    declared_global = {name for sub in ast.walk(node) if isinstance(sub, ast.Global) for name in sub.names}
    local = _locals(node, declared_global)
    augmented = {id(sub.target) for sub in ast.walk(node) if isinstance(sub, ast.AugAssign)}
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == self_name:
            name = f"self.{sub.attr}"
            if isinstance(sub.ctx, ast.Load) or id(sub) in augmented:
                _add(reads, name)
            if isinstance(sub.ctx, (ast.Store, ast.Del)):
                _add(writes, name)
        elif isinstance(sub, ast.Name) and sub.id in module_names:
            if isinstance(sub.ctx, ast.Load) and sub.id not in local:
                _add(reads, sub.id)
            elif isinstance(sub.ctx, (ast.Store, ast.Del)) and sub.id in declared_global:
                if id(sub) in augmented:
                    _add(reads, sub.id)
                _add(writes, sub.id)
    return reads, writes


def self_parameter(node: ast.FunctionDef | ast.AsyncFunctionDef, decorators: list[str]) -> str | None:
    """The name a method calls its instance (or class) by; None for a
    staticmethod or a method without parameters."""
    if "staticmethod" in decorators:
        return None
    positional = node.args.posonlyargs + node.args.args
    return positional[0].arg if positional else None


def definitions(tree: ast.Module) -> Iterator[tuple[str, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef, bool]]:
    """Every class and function of ``tree`` in source order as
    ``(qualified name, node, nested in a function)``."""

    def walk(node: ast.AST, prefix: str, in_function: bool) -> Iterator[tuple[str, ast.AST, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (*_Def, ast.ClassDef)):
                qualname = prefix + child.name
                yield qualname, child, in_function
                inner = qualname + (".<locals>." if isinstance(child, _Def) else ".")
                yield from walk(child, inner, in_function or isinstance(child, _Def))
            else:
                yield from walk(child, prefix, in_function)

    yield from walk(tree, "", False)  # type: ignore[misc]
