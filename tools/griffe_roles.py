"""A griffe extension that makes the project's reST-flavoured docstrings
read well as Markdown in the reference pages.

The docstrings use Sphinx roles (``:class:`~gateway.core.errors.APIError```,
``:func:`make_parser```, ...), reST literal-block markers (``Output
format::``) and reST simple tables. This extension rewrites, in memory and
only for the docs build:

- each role into an *optional* cross-reference to the object it names,
  resolved from the docstring's own scope (module members, imports, class
  members) the way Sphinx would; ``~`` shows only the last name part. A
  target that is not part of the rendered API (``subprocess.run``) stays
  plain code and never makes the strict build fail;
- ``text::`` at the end of a paragraph into ``text:`` (the indented block
  after it is a Markdown code block already);
- reST simple tables (``====  ====`` borders) into fenced code blocks;
- continuation lines of a ``Raises:`` entry written at the entry's own
  indent into the hanging indent Google style expects (otherwise griffe
  warns and drops them).

Static only: it works on the objects griffe loaded from source and imports
nothing of the project.
"""

from __future__ import annotations

import html
import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|mod|data|attr|exc|obj|const):`(?P<target>[^`]+)`")
"""A Sphinx cross-reference role."""

PROJECT_PACKAGES = ("gateway", "worker", "shared")
"""Top-level names that are taken as absolute paths into the project."""

_RAISES_ITEM = re.compile(r"^(?P<indent>\s*)[A-Za-z_][\w.]*(\[[^\]]*\])?:(\s|$)")
_BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")
_LITERAL = re.compile(r"(\S)::$")


def _resolve(target: str, obj: griffe.Object) -> str | None:
    """The full path ``target`` names when written in ``obj``'s docstring,
    or None when it is outside the project (or unknown)."""
    target = target.lstrip(".")
    first, _, rest = target.partition(".")
    scope: Any = obj
    while scope is not None:
        members = getattr(scope, "members", {})
        if first in members:
            member = members[first]
            base = member.target_path if member.is_alias else member.path
            path = f"{base}.{rest}" if rest else base
            return path if path.split(".")[0] in PROJECT_PACKAGES else None
        scope = scope.parent
    return target if first in PROJECT_PACKAGES else None


def _role(match: re.Match[str], obj: griffe.Object) -> str:
    """The Markdown for one role."""
    target = match["target"].strip()
    explicit = re.fullmatch(r"(?P<title>.+?)\s*<(?P<target>[^>]+)>", target)
    if explicit:
        title, target = explicit["title"], explicit["target"]
    elif target.startswith("~"):
        target = target[1:]
        title = target.rsplit(".", 1)[-1]
    else:
        title = target
    code = f"<code>{html.escape(title)}</code>"
    path = _resolve(target, obj)
    if path is None:
        return code
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def _tables_to_code(text: str) -> str:
    """Wrap each reST simple table (three ``=`` border lines) in a fence."""
    out: list[str] = []
    borders = 0
    for line in text.split("\n"):
        if _BORDER.match(line):
            if borders == 0:
                out.append("```text")
            borders += 1
            out.append(line)
            if borders == 3:
                out.append("```")
                borders = 0
            continue
        out.append(line)
    if borders:  # not a complete table: leave it as it was
        return text
    return "\n".join(out)


def _hang_raises(text: str) -> str:
    """Indent the continuation lines of ``Raises:`` entries under their entry."""
    out: list[str] = []
    section: int | None = None  # indent of the current Raises: header
    item: int | None = None  # indent of its entries
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip())
        if line.strip() == "Raises:":
            section, item = indent, None
        elif section is not None and line.strip():
            if indent <= section:
                section = item = None
            elif item is None or indent == item:
                if _RAISES_ITEM.match(line) and (item is None or indent == item):
                    item = indent
                elif item is not None:
                    line = " " * 4 + line
        elif section is not None and not line.strip():
            section = item = None
        out.append(line)
    return "\n".join(out)


def convert(text: str, obj: griffe.Object) -> str:
    """``text`` (a docstring of ``obj``) with roles, literal markers and
    tables turned into Markdown."""
    text = _hang_raises(text)
    text = ROLE.sub(lambda m: _role(m, obj), text)
    text = "\n".join(_LITERAL.sub(r"\1:", line) for line in text.split("\n"))
    return _tables_to_code(text)


def _objects(obj: griffe.Object) -> Any:
    """``obj`` and every object defined under it (aliases skipped)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)


class SphinxRoles(griffe.Extension):
    """Rewrite the docstrings of every loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Convert every docstring of ``pkg`` once it is fully loaded."""
        for obj in _objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, obj)
