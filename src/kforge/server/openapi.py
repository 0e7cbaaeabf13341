"""The OpenAPI 3.1 document, built from the same operation table that routes requests."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kforge.server.codec import JSON, MSGPACK, object_schema
from kforge.server.endpoint import Operation

__all__ = ["openapi_document"]

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "status": {"type": "integer"},
                "code": {"type": "integer"},
                "category": {"type": "string"},
                "message": {"type": "string"},
                "context": {"type": "object", "additionalProperties": {"type": "string"}},
            },
            "required": ["status", "code", "category", "message", "context"],
        }
    },
    "required": ["error"],
}
_REASONS = {
    400: "the request or a field does not fit its schema",
    401: "unsigned, wrongly signed, stale, replayed, or a bad token",
    403: "the caller may not do this (not the owner, no grant)",
    404: "no such sandbox, program or session (for this caller)",
    408: "still running when the timeout passed",
    409: "the sandbox's state does not allow this",
    413: "the body is too large",
    415: "the body is neither JSON nor msgpack",
    422: "the memory quota is over a limit",
    429: "a rate or concurrency limit of the caller was hit",
    501: "the engine does not support this yet",
    503: "the engine is not open",
}
_PATH_IDS = {
    "sandbox_id": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
    "program_id": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
    "agent": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
    "service_id": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
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
    responses: dict[str, Any] = {
        str(operation.status): {"description": "done", "content": _content(operation.response)},
    }
    statuses = (
        set(operation.errors) | {413, 415}
        if (operation.fields or operation.raw_body)
        else set(operation.errors)
    )
    if operation.authenticated:
        statuses |= {401, 429}
    for status in sorted(statuses):
        responses[str(status)] = {
            "description": _REASONS.get(status, "refused"),
            "content": _content(_ERROR),
        }
    document: dict[str, Any] = {
        "summary": operation.summary,
        "operationId": f"{operation.handler.__module__.rsplit('.', 1)[-1]}_{operation.handler.__name__}",
        "tags": [operation.tag],
        "parameters": parameters,
        "responses": responses,
    }
    if operation.fields is not None:
        document["requestBody"] = {
            "required": False,
            "content": _content(object_schema(operation.fields)),
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
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(operation)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "kforge",
            "version": version,
            "description": (
                "The Forge engine over HTTP. Bodies are JSON (binaries as hex) or msgpack "
                "(Content-Type: application/msgpack). Events stream on the WebSocket /v1/events. "
                "See docs/server.md."
            ),
        },
        "paths": paths,
        "components": {
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
