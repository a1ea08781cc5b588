"""A machine-readable map of the code around the packages: ``bench/``,
``tools/``, ``deploy/`` and ``tests/``, read with :mod:`ast` only.

:func:`build_source_inventory` lists each file: for Python files the same
module entry as the API inventory (:func:`tools.apimap.scan_module`: every
symbol with its signature, body facts, state, lines and link), plus how to
run it: ``runnable`` (a ``__main__`` guard, or a pytest file), the command
(``run``) and its command-line ``arguments`` as its ``argparse``
``add_argument`` calls declare them. Other files of ``bench/``, ``tools/``
and ``deploy/`` (templates, notes) are listed with their kind and link;
``bench/results/`` (measured data) and non-Python files under ``tests/``
(fixtures) are counted, not listed.

Command line::

    python -m tools.sourcemap --out site/source-inventory.json

Never imports the scanned code.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

from tools.apimap import ROOT, module_name, scan_module, summary
from tools.sourcelinks import SourceLinks, source_links

DIRECTORIES = ("bench", "tools", "deploy", "tests")
"""The directories the source inventory covers."""

SCHEMA_VERSION = 1
"""Version of the source inventory's JSON layout."""

UNLISTED = ("bench/results/",)
"""Data directories whose files are counted, not listed."""

CONVENTIONS = {
    "files": "every .py file of the directories and every other file of bench/, tools/ and deploy/ "
    "(not bench/results/), sorted by path",
    "kind": "'python', or the file's suffix ('md', 'in', ...)",
    "runnable": "a Python file with an 'if __name__ == \"__main__\"' block at top level, or a pytest file "
    "(tests/**/test_*.py)",
    "run": "the command that runs it from the repository root (null when not runnable)",
    "arguments": "one entry per argparse add_argument call in the file: flags (the option strings or the "
    "positional name) and each keyword given (help, default, type, action, choices, required, nargs, dest, "
    "metavar) as its literal value, or its source text when not a literal",
    "module": "for a Python file, the API inventory's module entry (see api-inventory.json's conventions)",
    "url": "link to the file at the documented commit (null when unknown)",
    "unlisted": "files counted but not listed, per data directory",
}
"""What each field means, written into the inventory."""


def _files(root: Path) -> tuple[list[Path], dict[str, int]]:
    """The files to list (relative to ``root``) and the counts of the unlisted ones."""
    listed: list[Path] = []
    unlisted: dict[str, int] = {}
    for directory in DIRECTORIES:
        for path in sorted((root / directory).rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or "__pycache__" in rel.parts:
                continue
            posix = rel.as_posix()
            skipped = next((prefix for prefix in UNLISTED if posix.startswith(prefix)), None)
            if skipped is None and directory == "tests" and path.suffix != ".py":
                skipped = "tests/ (not .py)"
            if skipped is not None:
                unlisted[skipped] = unlisted.get(skipped, 0) + 1
                continue
            listed.append(rel)
    return sorted(listed, key=lambda p: p.as_posix()), unlisted


def _literal(node: ast.expr) -> Any:
    """A keyword's value: the literal, or its source text."""
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.unparse(node)


def command_line_arguments(tree: ast.Module) -> list[dict[str, Any]]:
    """Every ``add_argument`` call of ``tree``, in source order."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        flags = [arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)]
        entry: dict[str, Any] = {"flags": flags, "line": node.lineno}
        for keyword in node.keywords:
            if keyword.arg is not None:
                entry[keyword.arg] = _literal(keyword.value)
        found.append(entry)
    return sorted(found, key=lambda e: e["line"])


def _has_main_block(tree: ast.Module) -> bool:
    for statement in tree.body:
        if isinstance(statement, ast.If) and "__name__" in ast.unparse(statement.test):
            return "__main__" in ast.unparse(statement.test)
    return False


def scan_file(root: Path, path: Path, links: SourceLinks) -> dict[str, Any]:
    """The entry of one file (see ``CONVENTIONS``)."""
    posix = path.as_posix()
    entry: dict[str, Any] = {"path": posix, "url": links.url(posix)}
    if path.suffix != ".py":
        text = (root / path).read_text(encoding="utf-8", errors="replace")
        first = next((line.strip("#<>!- ") for line in text.splitlines() if line.strip()), "")
        return {**entry, "kind": path.suffix.lstrip(".") or "file", "summary": first, "runnable": False, "run": None}
    tree = ast.parse((root / path).read_text(encoding="utf-8"), filename=posix)
    pytest_file = path.parts[0] == "tests" and path.name.startswith("test_")
    runnable = _has_main_block(tree) or pytest_file
    if pytest_file:
        run = f"python -m pytest -q {posix}"
    elif runnable:
        run = f"python -m {module_name(path)}"
    else:
        run = None
    return {
        **entry,
        "kind": "python",
        "summary": summary(ast.get_docstring(tree)),
        "runnable": runnable,
        "run": run,
        "arguments": command_line_arguments(tree),
        "module": scan_module(root, path, links),
    }


def build_source_inventory(root: Path = ROOT, links: SourceLinks | None = None) -> dict[str, Any]:
    """The whole source inventory under ``root`` (JSON-ready)."""
    links = links if links is not None else source_links(root)
    listed, unlisted = _files(root)
    files = [scan_file(root, path, links) for path in listed]
    return {
        "schema_version": SCHEMA_VERSION,
        "directories": list(DIRECTORIES),
        "source": {"repository_url": links.repository, "commit": links.commit},
        "conventions": CONVENTIONS,
        "file_count": len(files),
        "unlisted": unlisted,
        "files": files,
    }


def main(argv: list[str] | None = None) -> int:
    """Write the source inventory to ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m tools.sourcemap", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    parser.add_argument("--out", type=Path, required=True, help="write the source inventory JSON here")
    args = parser.parse_args(argv)
    inventory = build_source_inventory(args.root)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(inventory, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    runnable = sum(f["runnable"] for f in inventory["files"])
    print(f"{args.out}: {inventory['file_count']} files, {runnable} runnable")
    return 0


if __name__ == "__main__":
    sys.exit(main())
