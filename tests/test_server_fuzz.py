"""Fuzzing the API from its own OpenAPI document: no input makes the server answer 5xx.

Schemathesis generates requests for every operation (valid and invalid
bodies, paths and queries) and checks ``not_a_server_error``; a plain
hypothesis test throws arbitrary bytes at the msgpack and JSON decoders.
Skipped when schemathesis is not installed.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kforge.server import AuthConfig, ServerConfig
from kforge.server.app import ALL_OPERATIONS
from kforge.server.openapi import openapi_document
from test_server_support import COUNT_DOWN, Agent, LiveServer, running_server

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is not installed")
from schemathesis.checks import not_a_server_error  # noqa: E402


def json_only(document: dict[str, Any]) -> dict[str, Any]:
    """The document with only the JSON media type (schemathesis has no msgpack serializer)."""
    trimmed = copy.deepcopy(document)
    for item in trimmed["paths"].values():
        for operation in item.values():
            body = operation.get("requestBody")
            if body is not None:
                body["content"].pop("application/msgpack", None)
    return trimmed


#: Examples per operation; ``KFORGE_FUZZ_EXAMPLES=200`` for a long hunt.
EXAMPLES = int(os.environ.get("KFORGE_FUZZ_EXAMPLES", "15"))

schema = schemathesis.openapi.from_dict(json_only(openapi_document(ALL_OPERATIONS, "fuzz")))


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    config = ServerConfig(
        auth=AuthConfig(rate_per_second=100_000, rate_burst=100_000), max_wait_seconds=1
    )
    with running_server(config) as server:
        yield server


@pytest.fixture(scope="module")
def token(live: LiveServer) -> str:
    agent = Agent(live.base_url)
    agent.create(COUNT_DOWN)  # something to find
    issued = str(agent.ok("POST", "/v1/session", None, 201)["token"])
    agent.close()
    return issued


@pytest.fixture(scope="module")
def session() -> Iterator[Any]:
    import requests

    with requests.Session() as opened:
        yield opened


@schema.parametrize()  # type: ignore[untyped-decorator]
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_makes_a_server_error(
    case: Any, live: LiveServer, token: str, session: Any
) -> None:
    response = case.call(
        base_url=live.base_url,
        session=session,
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    case.validate_response(response, checks=[not_a_server_error])


@pytest.mark.parametrize("content_type", ["application/msgpack", "application/json"])
@given(body=st.binary(max_size=256))
@settings(max_examples=4 * EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_arbitrary_bodies_are_never_a_server_error(
    live: LiveServer, token: str, content_type: str, body: bytes
) -> None:
    for path in ("/v1/sandboxes", "/v1/messages", "/v1/debug", "/v1/programs", "/v1/link"):
        response = httpx.post(
            live.base_url + path,
            content=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
        )
        assert response.status_code < 500, (path, body, response.text)
