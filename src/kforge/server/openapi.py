"""The OpenAPI 3.1 document, built from the same operation table that routes requests.

Bodies are described by the same schemas that read and write them
(:func:`kforge.wire.json_schemas`): each schema ``X`` appears as ``X`` (answers)
and ``XInput`` (requests, with every bytes field's three encodings).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kforge.server.codec import JSON, MSGPACK
from kforge.server.endpoint import Operation
from kforge.server.schemas import ErrorBody
from kforge.wire import HEX_ID, Schema, json_schemas, schema_ref

__all__ = ["openapi_document"]

_REASONS = {
    400: "the request, a path id or a query parameter does not fit",
    401: "unsigned, wrongly signed, stale, replayed, or a bad token",
    403: "the caller may not do this (not the owner, no grant)",
    404: "no such sandbox, program or session (for this caller)",
    408: "still running when the timeout passed",
    409: "the sandbox's state does not allow this",
    413: "the body is too large",
    415: "the body is neither JSON nor msgpack",
    422: "a bytes field given in two encodings or unreadable in the one its name says; a memory quota over a limit",
    429: "a rate or concurrency limit of the caller was hit",
    501: "the engine does not support this yet",
    503: "the engine is not open",
}
_PATH_IDS = {
    "sandbox_id": HEX_ID,
    "program_id": HEX_ID,
    "agent": HEX_ID,
    "service_id": HEX_ID,
    "session_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
}


def _content(schema: dict[str, Any]) -> dict[str, Any]:
    return {JSON: {"schema": schema}, MSGPACK: {"schema": {}}}


def _operation(operation: Operation) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": _PATH_IDS[name]}
        for name in re.findall(r"{(\w+)}", operation.path)
    ]
    parameters += [
        {
            "name": q.name,
            "in": "query",
            "required": False,
            "schema": q.schema,
            "description": q.description,
        }
        for q in operation.query
    ]
    response = operation.response
    answer = response if isinstance(response, dict) else schema_ref(response)
    responses: dict[str, Any] = {
        str(operation.status): {"description": "done", "content": _content(answer)},
    }
    statuses = (
        set(operation.errors) | {413, 415, 422}
        if (operation.body or operation.raw_body)
        else set(operation.errors)
    )
    if operation.authenticated:
        statuses |= {401, 429}
    for status in sorted(statuses):
        responses[str(status)] = {
            "description": _REASONS.get(status, "refused"),
            "content": _content(schema_ref(ErrorBody)),
        }
    document: dict[str, Any] = {
        "summary": operation.summary,
        "operationId": f"{operation.handler.__module__.rsplit('.', 1)[-1]}_{operation.handler.__name__}",
        "tags": [operation.tag],
        "parameters": parameters,
        "responses": responses,
    }
    if operation.body is not None:
        document["requestBody"] = {
            "required": False,
            "content": _content(schema_ref(operation.body, request=True)),
        }
    elif operation.body_schema is not None:
        document["requestBody"] = {"required": True, "content": _content(operation.body_schema)}
    if operation.authenticated:
        document["security"] = (
            [{"bearer": []}, {"signature": []}]
            if not operation.signature_only
            else [{"signature": []}]
        )
    else:
        document["security"] = []
    return document


def openapi_document(operations: Iterable[Operation], version: str) -> dict[str, Any]:
    operations = tuple(operations)
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(operation)
    kinds: set[type[Schema]] = {ErrorBody}
    for operation in operations:
        if operation.body is not None:
            kinds.add(operation.body)
        if not isinstance(operation.response, dict):
            kinds.add(operation.response)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "kforge",
            "version": version,
            "description": (
                "The Forge engine over HTTP. Bodies are JSON or msgpack "
                "(Content-Type: application/msgpack). In JSON, ids are 64 hex digits and a bytes "
                "field `name` is given as exactly one of `name` (UTF-8 text), `name_hex` or "
                "`name_b64`; answers carry `name_hex`. Events stream on the WebSocket "
                "/v1/events. See docs/server.md."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": json_schemas(sorted(kinds, key=lambda kind: kind.__name__)),
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "a token from POST /v1/session",
                },
                "signature": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "X-Kforge-Signature",
                    "description": "ed25519 over the request, with X-Kforge-Agent, -Timestamp and -Nonce",
                },
            },
        },
    }
