"""The API key's name reaches every generate request (gateway/workers/pool.py
``with_key_name``): the name of the key the request came with (the key
grant's, see gateway/core/grants.py), nothing without a key, and a name
already set is kept."""

from __future__ import annotations

import contextvars

from gateway.core.grants import KeyGrant, current_grant
from gateway.workers.pool import with_key_name
from shared.protocol import GenerateRequest, SamplingParams


def request(**kw) -> GenerateRequest:
    return GenerateRequest(request_id="r", sampling=SamplingParams(), prompt="hi", **kw)


def named(grant: KeyGrant | None, req: GenerateRequest) -> str:
    def run() -> str:
        if grant is not None:
            current_grant.set(grant)
        return with_key_name(req).key_name

    return contextvars.copy_context().run(run)


def test_the_grant_names_the_request():
    assert named(KeyGrant("team-a"), request()) == "team-a"
    assert named(KeyGrant("team-b"), request()) == "team-b"


def test_no_key_no_name_and_a_set_name_stays():
    assert named(None, request()) == ""
    assert named(KeyGrant("team-a"), request(key_name="given")) == "given"
