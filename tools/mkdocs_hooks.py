"""MkDocs hooks of the documentation site (``hooks:`` in ``mkdocs.yml``).

- :func:`on_config` refuses, for the rest of the build, any import of the
  project's packages or of MLX (:class:`ImportGuard`): the reference pages
  are read from source by griffe, statically, so the site builds on any
  machine; an accidental import fails the build instead of passing
  silently on a Mac. It also adds a "Reference" navigation entry per public
  module, grouped by package as the tree is (``gateway``,
  ``gateway.openai``, ``worker.engine``, ...).
- :func:`on_files` adds one generated page per public module
  (``reference/<module>.md``, a mkdocstrings ``:::`` block).
- :func:`on_page_markdown` fills the module table of ``reference/index.md``.
"""

from __future__ import annotations

import importlib.abc
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # MkDocs loads this file by path, not as part of a package
    sys.path.insert(0, str(ROOT))

from tools import apimap  # noqa: E402

BLOCKED_IMPORTS = ("gateway", "worker", "shared", "mlx", "mlx_lm", "mlx_metal")
"""Top-level modules the docs build must never import."""

MODULE_TABLE_MARKER = "<!-- module-table -->"
"""Where :func:`on_page_markdown` puts the table of modules in ``reference/index.md``."""


class ImportGuard(importlib.abc.MetaPathFinder):
    """A meta-path finder that makes importing :data:`BLOCKED_IMPORTS` fail."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        """Raise ImportError for a blocked module; defer to the next finder otherwise."""
        if fullname.split(".")[0] in BLOCKED_IMPORTS:
            raise ImportError(
                f"the docs build must not import {fullname!r}: read the source statically "
                "(mkdocstrings option allow_inspection: false, tools/ use ast)"
            )
        return None


_modules: list[dict[str, Any]] = []
"""The public modules of the current build (read once, in :func:`on_config`)."""


def public_modules(inventory: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The inventory entries of the public modules, in path order (of
    ``inventory``, or of the source as it is now)."""
    return [m for m in (inventory or apimap.build_inventory())["modules"] if m["public"]]


def package_of(module: dict[str, Any]) -> str:
    """The package a module's reference page is listed under: its
    subpackage (``gateway.openai`` for ``gateway.openai.routes`` and for
    ``gateway.openai`` itself), else its top-level package (``gateway`` for
    ``gateway.app``)."""
    parts = module["name"].split(".")
    if len(parts) >= 3 or (len(parts) == 2 and module["path"].endswith("__init__.py")):
        return ".".join(parts[:2])
    return parts[0]


def page_path(module: str) -> str:
    """The docs path of ``module``'s reference page."""
    return f"reference/{module}.md"


def page_source(module: dict[str, Any]) -> str:
    """The Markdown of one module's reference page (its title is the
    module's root heading, so cross-references to the module resolve)."""
    return f"::: {module['name']}\n    options:\n      show_root_heading: true\n      heading_level: 1\n"


def on_config(config: Any, **kwargs: Any) -> Any:
    """Install the import guard and add the per-module reference navigation."""
    if not any(isinstance(finder, ImportGuard) for finder in sys.meta_path):
        loaded = [name for name in sys.modules if name.split(".")[0] in BLOCKED_IMPORTS]
        if loaded:
            raise ImportError(f"the docs build imported {', '.join(sorted(loaded))} before its hooks ran")
        sys.meta_path.insert(0, ImportGuard())
    _modules[:] = public_modules()
    nav = config.get("nav")
    if nav is None:
        return config
    by_package: dict[str, list[dict[str, str]]] = {}
    for module in _modules:
        by_package.setdefault(package_of(module), []).append({module["name"]: page_path(module["name"])})
    for entry in nav:
        if isinstance(entry, dict) and "Reference" in entry:
            section = entry["Reference"]
            section += [{package: pages} for package, pages in by_package.items()]
            break
    else:
        nav.append({"Reference": [{package: pages} for package, pages in by_package.items()]})
    return config


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    """Add the generated reference page of every public module."""
    from mkdocs.structure.files import File

    for module in _modules:
        files.append(File.generated(config, page_path(module["name"]), content=page_source(module)))
    return files


def module_table(modules: list[dict[str, Any]]) -> str:
    """A Markdown table of ``modules`` (inventory entries) and their one-line summaries."""
    from tools.griffe_roles import ROLE

    def plain(match: Any) -> str:
        target = match["target"]
        return f"``{target[1:].rsplit('.', 1)[-1]}``" if target.startswith("~") else f"``{target}``"

    rows = ["| module | what it is |", "| --- | --- |"]
    for module in modules:
        text = ROLE.sub(plain, apimap.summary(module["docstring"])).replace("``", "`").replace("|", "\\|")
        rows.append(f"| [`{module['name']}`]({module['name']}.md) | {text} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    """Put the module table into ``reference/index.md``."""
    if page.file.src_uri == "reference/index.md":
        return markdown.replace(MODULE_TABLE_MARKER, module_table(_modules))
    return markdown
