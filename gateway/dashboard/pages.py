"""The dashboard's static files, shipped as package data in ``static/``.

Three files make the page: ``index.html`` (served at ``/dashboard``),
``dashboard.css`` and ``dashboard.js`` (beside it). They are read once,
when the routes are built (before the event loop serves anything), and
served from memory with a Content-Security-Policy that lets the page load
and fetch from its own origin only (:data:`CONTENT_SECURITY_POLICY`), so
it cannot reach another host even if a model name or error text tried to
inject markup. The paths are public (:data:`PAGE_PATHS`): the files hold
no data; the page reads everything from ``GET /v1/status`` with the key
the user types in.
"""

from __future__ import annotations

from importlib import resources

PAGE_FILES: dict[str, tuple[str, str]] = {
    "/dashboard": ("index.html", "text/html; charset=utf-8"),
    "/dashboard/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
    "/dashboard/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
}
"""URL path -> (file in ``static/``, content type)."""

PAGE_PATHS = frozenset(PAGE_FILES)
"""The page's paths: never need an API key (they hold no data)."""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The page may load scripts and styles from, and send requests to, its
own origin only; it may not be framed (no clickjacking of its buttons)."""

PAGE_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Headers of every page file."""


def read_pages() -> dict[str, tuple[bytes, str]]:
    """URL path -> (bytes, content type) of every page file, read from the
    installed package.

    Raises:
        FileNotFoundError: a file is missing from the installation (the
            package data was not installed).
    """
    static = resources.files("gateway.dashboard").joinpath("static")
    return {path: (static.joinpath(name).read_bytes(), kind) for path, (name, kind) in PAGE_FILES.items()}
