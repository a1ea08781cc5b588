"""The API key's name reaches every generate request (gateway/core/key_scope.py,
the API-key middleware and the worker pool): the name is stable, is not
the key, differs per key, and is what the route running for a request
reads; with no keys configured it is empty."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from gateway.core.key_scope import current_key_name, key_name
from gateway.http.middleware import APIKeyMiddleware


def app_with_keys(keys: list[str]):
    async def whoami(request: Request) -> PlainTextResponse:
        await asyncio.sleep(0)  # the name survives awaiting
        return PlainTextResponse(current_key_name())

    inner = Starlette(routes=[Route("/v1/whoami", whoami)])
    server = SimpleNamespace(api_keys=keys, metrics_require_key=True)
    return APIKeyMiddleware(inner, lambda: server)


def ask(app, key: str | None) -> httpx.Response:
    async def go() -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
            return await client.get("/v1/whoami", headers=headers)

    return asyncio.run(go())


def test_each_key_has_its_own_stable_name_that_is_not_the_key():
    assert key_name("secret-one") == key_name("secret-one") != key_name("secret-two")
    assert "secret" not in key_name("secret-one") and key_name("secret-one").startswith("key-")


def test_the_route_reads_the_name_of_the_key_presented():
    app = app_with_keys(["secret-one", "secret-two"])
    assert ask(app, "secret-one").text == key_name("secret-one")
    assert ask(app, "secret-two").text == key_name("secret-two")
    assert ask(app, "wrong").status_code == 401


def test_no_keys_no_name():
    assert ask(app_with_keys([]), None).text == ""
