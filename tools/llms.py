"""``llms.txt`` and ``llms-full.txt`` for the built site (https://llmstxt.org).

- ``site/llms.txt``: a short map for language models: the agents' guide
  first, then every page in reading order (the site's navigation) with
  what it is for (its ``description`` front matter) and a link to its
  Markdown source, copied next to the HTML page.
- ``site/llms-full.txt``: the whole corpus in one file: every page's
  Markdown in reading order (the agents' guide first), then the API reference rendered as text from
  the inventory (:mod:`tools.apimap`): each public module's docstring and
  each public symbol's signature and docstring.

Reads ``mkdocs.yml``, ``docs/`` and the source with :mod:`ast` only; run it
after ``mkdocs build``::

    python -m tools.llms --site site
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from tools import apimap
from tools.mkdocs_hooks import MODULE_TABLE_MARKER, module_table, public_modules

ROOT = apimap.ROOT
FRONT_MATTER = re.compile(r"\A---\n(?P<meta>.*?)\n---\n", re.DOTALL)
AGENTS_PAGE = "agents.md"


def nav_pages(mkdocs_yml: Path) -> list[tuple[str, str, str]]:
    """``(section, title, path)`` of every Markdown page in the navigation,
    in order; generated reference pages are not in ``mkdocs.yml``."""

    def walk(items: list[Any], section: str) -> list[tuple[str, str, str]]:
        pages: list[tuple[str, str, str]] = []
        for item in items:
            if isinstance(item, str):
                pages.append((section, item, item))
                continue
            for title, value in item.items():
                if isinstance(value, list):
                    pages += walk(value, title)
                else:
                    pages.append((section, title, value))
        return pages

    config = yaml.safe_load(mkdocs_yml.read_text(encoding="utf-8"))
    return walk(config.get("nav", []), "")


def split_front_matter(text: str) -> tuple[dict[str, Any], str]:
    """``(metadata, body)`` of a Markdown page with optional YAML front matter."""
    match = FRONT_MATTER.match(text)
    if not match:
        return {}, text
    return yaml.safe_load(match["meta"]) or {}, text[match.end() :]


def page_body(docs: Path, path: str, inventory: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """A page's metadata and Markdown, with generated parts filled in."""
    meta, body = split_front_matter((docs / path).read_text(encoding="utf-8"))
    if MODULE_TABLE_MARKER in body:
        body = body.replace(MODULE_TABLE_MARKER, module_table(public_modules(inventory)))
    return meta, body


def _site_description(mkdocs_yml: Path) -> str:
    config = yaml.safe_load(mkdocs_yml.read_text(encoding="utf-8"))
    return str(config.get("site_description", ""))


def llms_txt(inventory: dict[str, Any], root: Path = ROOT) -> str:
    """The text of ``llms.txt`` (``inventory`` from :func:`tools.apimap.build_inventory`)."""
    docs, mkdocs_yml = root / "docs", root / "mkdocs.yml"
    pages = nav_pages(mkdocs_yml)
    lines = [
        "# mlxd",
        "",
        f"> {_site_description(mkdocs_yml)}",
        "",
        "Links point to the Markdown source of each page (the HTML page has the same name with .html).",
        "Everything in one file: [llms-full.txt](llms-full.txt). Every module, class and function with its",
        "signature, docstring, body facts (calls, raises, awaits), the state it reads and writes and a link to",
        "its lines: [api-inventory.json](api-inventory.json). The benchmarks, tools, deploy files and test",
        "helpers, with how to run each script and its arguments: [source-inventory.json](source-inventory.json).",
        "",
        "## Start here",
        "",
    ]
    meta, _ = page_body(docs, AGENTS_PAGE, inventory)
    lines.append(f"- [Guide for coding agents]({AGENTS_PAGE}): {meta.get('description', '')}")
    section = None
    for page_section, title, path in pages:
        if path == AGENTS_PAGE:
            continue
        heading = page_section or "Docs"
        if heading != section:
            lines += ["", f"## {heading}", ""]
            section = heading
        meta, _ = page_body(docs, path, inventory)
        lines.append(f"- [{title}]({path}): {meta.get('description', '')}".rstrip(": "))
    lines += ["", "## Optional", ""]
    for module in public_modules(inventory):
        summary = module["summary"].replace("``", "`")
        lines.append(f"- [{module['name']}](reference/{module['name']}.html): {summary}")
    return "\n".join(lines) + "\n"


def _reference_text(inventory: dict[str, Any]) -> str:
    """The API reference as plain Markdown, from the inventory."""
    out = ["# API reference (generated from the source)", ""]
    for module in public_modules(inventory):
        out += [f"## {module['name']} (`{module['path']}`)", "", module["docstring"] or "", ""]
        by_name = {symbol["qualname"]: symbol for symbol in module["symbols"]}
        for symbol in module["symbols"][1:]:
            if not symbol["public"]:
                continue
            signature = symbol["signature"]
            init = by_name.get(f"{symbol['qualname']}.__init__")
            if symbol["kind"] == "class" and init is not None:
                signature = re.sub(r"^\(self,? ?", "(", init["signature"]).removesuffix(" -> None")
            out += [f"### {symbol['kind']} `{symbol['qualname']}{signature}`", ""]
            if symbol["docstring"]:
                out += [symbol["docstring"], ""]
    return "\n".join(out)


def llms_full_txt(inventory: dict[str, Any], root: Path = ROOT) -> str:
    """The text of ``llms-full.txt``: every page, then the API reference."""
    docs, mkdocs_yml = root / "docs", root / "mkdocs.yml"
    out = [f"# mlxd: the complete documentation\n\n> {_site_description(mkdocs_yml)}\n"]
    pages = nav_pages(mkdocs_yml)
    pages.sort(key=lambda page: page[2] != AGENTS_PAGE)  # the agents' guide first, as in llms.txt
    for _, title, path in pages:
        _, body = page_body(docs, path, inventory)
        out.append(f"\n<!-- page: {path} ({title}) -->\n\n{body.strip()}\n")
    out.append(f"\n<!-- page: reference (every public module) -->\n\n{_reference_text(inventory).strip()}\n")
    return "".join(out)


def write(site: Path, root: Path = ROOT) -> list[Path]:
    """Write ``llms.txt``, ``llms-full.txt`` and the pages' Markdown into ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    inventory = apimap.build_inventory(root)
    written = []
    for _, _, path in nav_pages(root / "mkdocs.yml"):
        target = site / path
        target.parent.mkdir(parents=True, exist_ok=True)
        _, body = page_body(root / "docs", path, inventory)
        target.write_text(body, encoding="utf-8")
    for name, text in (("llms.txt", llms_txt(inventory, root)), ("llms-full.txt", llms_full_txt(inventory, root))):
        (site / name).write_text(text, encoding="utf-8")
        written.append(site / name)
    return written


def main(argv: list[str] | None = None) -> int:
    """Write the files into ``--site`` (default ``site``)."""
    parser = argparse.ArgumentParser(prog="python -m tools.llms", description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "site", help="the built site directory")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    for path in write(args.site, args.root):
        print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
