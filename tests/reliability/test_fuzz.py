"""Schema-driven fuzzing of a live gateway with schemathesis.

One real gateway with a real worker serving the tiny model (small context,
short default answers, ``max_n`` 2, an API key) is fuzzed through every
operation of its OpenAPI document (:mod:`gateway.openapi_document`). schemathesis
makes one test per operation when the module is collected, before any
server runs, so the document is built in-process with the same function
the app serves it with; ``test_served_document`` checks that the server's
``GET /openapi.json`` (when the app mounts it) is that same document.

Per operation schemathesis runs its three phases: the documented examples
(including a streamed request per generation route), boundary "coverage"
cases (limits, wrong types, missing fields, unexpected methods) and
property-based fuzzing (positive and negative data), bounded by
:data:`MAX_EXAMPLES` and deterministic (no seed, no example database), so a
CI run sees the same cases every time. Every case is sent with the API key
and its answer must pass these checks:

- no 5xx;
- the status and the content type are documented for the operation, and
  the body (JSON, or every event of an SSE stream) matches the documented
  schema, as do the documented headers (``request-id``, ``Retry-After``);
- a body the schema forbids is refused with a 4xx (413 included: some
  generated bodies exceed the body cap);
- the same request without a key is refused with 401 where the document
  requires one;
- (``test_undeclared_methods``) an undeclared method gets 405 with an
  ``Allow`` header.

Whether a schema-valid body is *accepted* is not checked: the document
describes what the decoder accepts, while the semantic checks after it
(roles, tool references, ``max_n``) legitimately refuse more with a
documented 400.

Needs the test-only packages ``schemathesis`` and ``openapi-spec-validator``
(skipped without them). Runs in about a minute and a half.
"""

from __future__ import annotations

import httpx
import pytest

from gateway.openapi_document import API_KEY_SCHEME, BEARER_SCHEME, openapi_document
from tests.conftest import API_KEY, TINY, start_server

schemathesis = pytest.importorskip("schemathesis")
openapi_spec_validator = pytest.importorskip("openapi_spec_validator")

from schemathesis.config import SchemathesisConfig  # noqa: E402

MAX_EXAMPLES = 25
"""Fuzzed cases per operation and generation mode (the coverage phase adds
its boundary cases on top)."""

REQUEST_TIMEOUT = 60.0
"""Seconds one fuzzed request may take before it counts as hung."""

MODEL = {
    "name": TINY,
    "context_length": 256,
    "default_max_tokens": 16,
    "max_n": 2,
}
"""The served model's settings (``source`` is added by the fixture)."""


@pytest.fixture(scope="module")
def fuzz_server(tiny_model_dir, tmp_path_factory):
    """A gateway serving the tiny model with :data:`MODEL`'s limits and
    :data:`~tests.conftest.API_KEY` required; stopped after the module."""
    srv = start_server(tmp_path_factory.mktemp("fuzz-gw"), [{**MODEL, "source": str(tiny_model_dir)}])
    yield srv
    srv.stop()


def fuzz_config() -> SchemathesisConfig:
    """The schemathesis configuration described in the module docstring
    (the base URL is given per call: the server's port is only known once
    it runs)."""
    return SchemathesisConfig.from_dict(
        {
            # by security scheme, so that the ignored_auth check knows what to leave out
            "auth": {"openapi": {BEARER_SCHEME: {"bearer": API_KEY}, API_KEY_SCHEME: {"api_key": API_KEY}}},
            "request-timeout": REQUEST_TIMEOUT,
            "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "no-shrink": True},
            # undeclared methods are covered by test_undeclared_methods
            "phases": {"stateful": {"enabled": False}, "coverage": {"unexpected-methods": []}},
            "checks": {
                "positive_data_acceptance": {"enabled": False},
                "negative_data_rejection": {
                    "expected-statuses": [400, 401, 404, 405, 413, 415, 422],
                },
            },
        }
    )


DOCUMENT = openapi_document([TINY], include_openapi_route=False)
"""The fuzzed document: what ``GET /openapi.json`` serves for this config,
built in-process because schemathesis parametrizes tests at collection,
before the server runs (``test_served_document`` checks the two agree),
without the ``/openapi.json`` route itself."""

STATEFUL = r"^/v1/(admin/|cache$|requests/)"
"""Operations that change what the server serves (unload, load, reload,
clearing caches, cancelling requests): fuzzing them would unload the model
the other operations are fuzzed against. Their own tests check their
refusals (``tests/e2e/test_status.py``, ``tests/e2e/test_cache_control.py``)."""

schema = schemathesis.openapi.from_dict(DOCUMENT, config=fuzz_config()).exclude(path_regex=STATEFUL)


def test_document_is_valid_openapi():
    """The document is valid OpenAPI 3.1."""
    assert DOCUMENT["openapi"].startswith("3.1")
    openapi_spec_validator.validate(openapi_document([TINY]))


def test_served_document(fuzz_server):
    """``GET /openapi.json`` is public (no key needed) and serves the
    fuzzed document, plus its own route."""
    url = f"{fuzz_server.url}/openapi.json"
    if httpx.get(url, headers=fuzz_server.headers, timeout=30).status_code == 404:
        pytest.skip("the app does not mount GET /openapi.json yet")
    response = httpx.get(url, timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    served = response.json()
    assert "/openapi.json" in served["paths"]
    del served["paths"]["/openapi.json"]
    assert served == DOCUMENT


@schema.parametrize()
def test_fuzz(case, fuzz_server):
    """Every generated case is answered as documented (see the module
    docstring for the checks)."""
    case.call_and_validate(base_url=fuzz_server.url)


UNDECLARED_METHODS = ("PUT", "DELETE", "PATCH", "TRACE")
"""Methods no route declares."""


@pytest.mark.parametrize("path", sorted(DOCUMENT["paths"]))
def test_undeclared_methods(fuzz_server, path):
    """A method a route does not declare gets 405 in the route's error
    shape with an ``Allow`` header naming the declared ones (RFC 9110)."""
    declared = {method.upper() for method in DOCUMENT["paths"][path]}
    concrete = path.replace("{model}", TINY)
    for method in UNDECLARED_METHODS:
        if method.lower() in DOCUMENT["paths"][path]:
            continue  # Ollama's DELETE /api/delete (and its siblings) are declared
        response = httpx.request(method, f"{fuzz_server.url}{concrete}", headers=fuzz_server.headers, timeout=30)
        assert response.status_code == 405, (method, response.text)
        error = response.json()["error"]
        if concrete == "/" or concrete.startswith("/api/"):
            assert isinstance(error, str) and method in error  # Ollama's shape
        else:
            assert error["type"] == "invalid_request_error"
        allowed = {m.strip().upper() for m in response.headers.get("allow", "").split(",") if m.strip()}
        assert declared <= allowed, (method, path, response.headers.get("allow"))


def test_still_serves_after_fuzzing(fuzz_server):
    """After the fuzzing the worker still answers an ordinary request (a
    bad request must not poison the engine for everyone after it)."""
    response = httpx.post(
        f"{fuzz_server.url}/v1/completions",
        json={"model": TINY, "prompt": "Once upon a time", "max_tokens": 4},
        headers=fuzz_server.headers,
        timeout=REQUEST_TIMEOUT,
    )
    assert response.status_code == 200, response.text
    assert fuzz_server.worker(TINY)["restarts"] == 0
