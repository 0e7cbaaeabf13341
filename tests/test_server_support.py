"""Shared helpers for the server tests: a real server on loopback, signed requests, programs.

``running_server`` starts uvicorn in a thread on a free loopback port with a
fresh in-memory engine and yields a :class:`LiveServer`; leaving it shuts the
server down (which closes the engine).
"""

from __future__ import annotations

import asyncio
import gc
import json
import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from kforge.engine import Engine, EngineLimits
from kforge.engine.offload import WorkLimits
from kforge.server import AgentKey, AuthConfig, ServerConfig, create_app
from kforge.server.state import ServerState
from kforge.storage import Vault

#: Loops ``n`` times (n = the first 8 bytes of stdin, little-endian), then writes "done".
COUNT_DOWN = """
.data
done:   .ascii "done"
.code
        LI   r2, 8
        RECV 2, r3, r253, r2
        LOADW r10, r253, 0
        LI   r7, 1
again:  JZ   r10, finish
        SUB  r10, r10, r7
        TICK
        JMP  again
finish: LI   r1, done
        LI   r2, 4
        SEND 0, r1, r2
        HALT
"""

ECHO = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""

#: Waits for stdin forever (BLOCKED until input arrives).
WAIT_INPUT = """
        LI   r2, 4096
        RECV 2, r3, r253, r2
        RECV 2, r3, r253, r2
        SEND 0, r253, r3
        HALT
"""

SPIN = """
loop:   TICK
        JMP loop
"""


@dataclass
class LiveServer:
    base_url: str
    state: ServerState
    engine: Engine

    @property
    def dev_token(self) -> str:
        return self.state.dev_token


@contextmanager
def running_server(
    config: ServerConfig | None = None,
    limits: EngineLimits | None = None,
    tier: str = "reference",
    work: WorkLimits | None = None,
) -> Iterator[LiveServer]:
    engine = Engine(Vault(":memory:"), tier=tier, limits=limits, work=work)
    app = create_app(engine, config)
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say they are TCP.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", ws="websockets-sansio", lifespan="on")
    )
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])),
        name="kforge-test-server",
        daemon=True,
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.01)
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", app.state.kforge, engine)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        engine.vault.close()
        # Connections the clients left open die with the server's loop: collect
        # them now, quietly, rather than in whichever test runs next.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


#: A server whose rate limits stay out of a test's way.
RELAXED_RATES = ServerConfig(auth=AuthConfig(rate_per_second=1000, rate_burst=1000))


class Agent:
    """An agent talking raw HTTP to the server: signs each request, or uses a token."""

    def __init__(
        self, base_url: str, key: AgentKey | None = None, token: str | None = None
    ) -> None:
        self.key = key or AgentKey.generate()
        self.http = httpx.Client(base_url=base_url, timeout=30)
        self.token = token

    @property
    def id_hex(self) -> str:
        return self.key.agent_id.hex

    def close(self) -> None:
        self.http.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
        sign: bool = True,
    ) -> httpx.Response:
        content = (
            raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        )
        sent: dict[str, str] = {}
        if content:
            sent["content-type"] = content_type
        if self.token is not None:
            sent["authorization"] = f"Bearer {self.token}"
        elif sign:
            sent.update(self.key.request_headers(method, path, content))
        sent.update(headers or {})
        return self.http.request(method, path, content=content, headers=sent)

    def ok(self, method: str, path: str, body: Any = None, status: int | None = None) -> Any:
        response = self.request(method, path, body)
        assert response.status_code < 300, (response.status_code, response.text)
        if status is not None:
            assert response.status_code == status, response.text
        return response.json()

    def put_program(self, source: str) -> str:
        return str(self.ok("POST", "/v1/programs", {"assembly": source}, 201)["program_id"])

    def create(
        self, source: str, *, input: bytes = b"", budget: int = 1_000_000, **extra: Any
    ) -> str:
        code = self.put_program(source)
        body = {
            "code": code,
            "memory_quota": 65536,
            "tick_budget": budget,
            "input_hex": input.hex(),
            **extra,
        }
        return str(self.ok("POST", "/v1/sandboxes", body, 201)["sandbox_id"])

    def run_to_end(self, sandbox: str) -> Any:
        self.ok("POST", f"/v1/sandboxes/{sandbox}/start", {}, 202)
        return self.ok("GET", f"/v1/sandboxes/{sandbox}/wait?timeout=10")


def u64(value: int) -> bytes:
    return value.to_bytes(8, "little")


def test_count_down_program_assembles() -> None:
    from kforge.asm import assemble

    for source in (COUNT_DOWN, ECHO, WAIT_INPUT, SPIN):
        assert assemble(source).code
