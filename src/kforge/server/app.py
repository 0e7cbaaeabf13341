"""The ASGI application and ``serve``: the engine, its API, the event socket and the dashboard."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO, TypeVar

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from kforge.core import AgentId
from kforge.engine import Engine, EngineStatus
from kforge.server.api import OPERATIONS
from kforge.server.auth import Authenticator
from kforge.server.debug import DebugManager
from kforge.server.debug_api import DEBUG_OPERATIONS
from kforge.server.endpoint import Operation, asgi_endpoint
from kforge.server.events_ws import events_socket
from kforge.server.openapi import openapi_document
from kforge.server.signing import AgentKey
from kforge.server.state import ServedEngine, ServerConfig, ServerState
from kforge.storage import Vault
from kforge.terminal import wants_colour

__all__ = [
    "ALL_OPERATIONS",
    "STATIC_DIR",
    "SWAGGER_UI_DIR",
    "CannotListen",
    "create_app",
    "listen",
    "open_engine",
    "serve",
]

T = TypeVar("T")

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: Swagger UI's files, installed with kforge (the API page loads nothing from elsewhere).
SWAGGER_UI_DIR = Path(str(swagger_ui_path))
_DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>kforge API</title>
  <link rel="stylesheet" href="/docs/static/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/static/swagger-ui-bundle.js"></script>
  <script src="/docs/static/swagger-ui-standalone-preset.js"></script>
  <script>
    window.ui = SwaggerUIBundle({
      url: "/openapi.json",
      dom_id: "#swagger-ui",
      deepLinking: true,
      validatorUrl: null,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
      layout: "StandaloneLayout",
    });
  </script>
</body>
</html>
"""
ALL_OPERATIONS: tuple[Operation, ...] = (*OPERATIONS, *DEBUG_OPERATIONS)
_VERSION = "0.1.0"


def create_app(
    engine: ServedEngine,
    config: ServerConfig | None = None,
    *,
    authenticator: Authenticator | None = None,
    operator: AgentId | None = None,
) -> Starlette:
    """The kforge server for ``engine``.

    The app opens the engine when it starts (if it is not open yet) and closes
    it on shutdown if it opened it.  ``app.state.kforge`` is the
    :class:`ServerState`; its ``dev_token`` is the operator's bearer token
    (the dashboard's), for ``operator`` (default: a fresh agent per run), which
    becomes one of the engine's operators.
    """
    config = config or ServerConfig()
    authenticator = authenticator or Authenticator(config.auth)
    operator_agent = operator or AgentKey.generate().agent_id
    engine.policy.add_operator(operator_agent)
    dev_token, _ = authenticator.issue_token(
        operator_agent, operator=True, lifetime_ms=config.dev_token_lifetime_ms
    )
    state = ServerState(
        engine=engine,
        config=config,
        authenticator=authenticator,
        debug=DebugManager(engine.policy, config.debug),
        operator_agent=operator_agent,
        dev_token=dev_token,
    )
    state.notes.listen_to(engine.bus)
    document = openapi_document(ALL_OPERATIONS, _VERSION)

    async def openapi(request: Request) -> Response:
        return JSONResponse(document)

    async def root(request: Request) -> Response:
        return RedirectResponse("/dashboard/", 307)

    async def docs(request: Request) -> Response:
        return HTMLResponse(_DOCS_PAGE)

    routes: list[BaseRoute] = [
        Route(op.path, asgi_endpoint(op), methods=[op.method]) for op in ALL_OPERATIONS
    ]
    routes += [
        Route("/openapi.json", openapi, methods=["GET"]),
        Route("/", root, methods=["GET"]),
        Route("/docs", docs, methods=["GET"]),
        Mount("/docs/static", StaticFiles(directory=SWAGGER_UI_DIR), name="docs-static"),
        WebSocketRoute("/v1/events", events_socket),
        Mount("/dashboard", StaticFiles(directory=STATIC_DIR, html=True), name="dashboard"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        opened_here = engine.status is EngineStatus.UNOPENED
        if opened_here:
            await engine.open()
        shared = getattr(engine, "token_secret", None)
        if shared is not None:  # a cluster's gateways all take each other's tokens
            authenticator.secret = shared
            state.dev_token, _ = authenticator.issue_token(
                operator_agent, operator=True, lifetime_ms=config.dev_token_lifetime_ms
            )
        try:
            yield
        finally:
            if opened_here:
                await engine.close()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.kforge = state
    return app


def open_engine(data_dir: str | os.PathLike[str] | None, **options: Any) -> Engine:
    """An engine on the SQLite vault under ``data_dir`` (the default data directory if ``None``).

    The caller closes ``engine.vault`` after the engine (the engine did not open it).
    """
    return Engine(Vault.open_default(data_dir), **options)


class CannotListen(Exception):
    """The server cannot listen on ``host``:``port`` (busy, not allowed, no such address)."""

    def __init__(self, host: str, port: int, reason: str, *, in_use: bool = False) -> None:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(f"cannot listen on {where}: {reason}")
        self.host = host
        self.port = port
        self.reason = reason
        self.in_use = in_use


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port``, ready for :func:`serve`; raises ``CannotListen``.

    Bound here rather than by uvicorn, so that a busy port is one clear error
    and not a server that logs a traceback and exits.
    """
    if not 0 <= port <= 0xFFFF:
        raise CannotListen(host, port, "a port is a number in 0..65535")
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise CannotListen(host, port, f"unknown address ({error.strerror})") from None
    listener = socket.socket(family, kind, protocol)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
    except OSError as error:
        listener.close()
        in_use = error.errno == errno.EADDRINUSE
        reason = "the port is in use (by another kforge serve?)" if in_use else error.strerror
        raise CannotListen(host, port, reason or str(error), in_use=in_use) from None
    return listener


def serve(
    host: str = "127.0.0.1",
    port: int = 8470,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    config: ServerConfig | None = None,
    engine_options: dict[str, Any] | None = None,
    out: TextIO | None = None,
    sock: socket.socket | None = None,
    ready: Callable[[str], None] | None = None,
    engine: ServedEngine | None = None,
    about: str = "",
) -> None:
    """Run the server until interrupted; prints the dashboard URL with the dev token.

    ``sock`` serves an already bound socket (tests pass one bound to port 0),
    else one is bound by :func:`listen` (``CannotListen`` when that fails);
    ``ready`` is called with the base URL once the server listens.  ``engine``
    serves that engine instead of one on the vault under ``data_dir`` (a cluster's
    gateway engine, ``docs/cluster.md``): it is opened before the server listens,
    however long that takes (SIGTERM or Ctrl-C meanwhile stop quietly), and closed
    after; ``about`` is said of it when the server listens.
    """
    import uvicorn

    sock = sock if sock is not None else listen(host, port)
    vault: Vault | None = None
    served: ServedEngine
    try:
        if engine is None:
            local = open_engine(data_dir, **(engine_options or {}))
            served, vault = local, local.vault
        else:
            served = engine
    except BaseException:
        sock.close()
        raise
    app = create_app(served, config)
    state: ServerState = app.state.kforge
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            ws="websockets-sansio",
            lifespan="on",
            use_colors=wants_colour(sys.stderr),
            limit_concurrency=state.config.max_connections,
            timeout_graceful_shutdown=5,
        )
    )
    stream = out or sys.stdout
    bound_host, bound_port = sock.getsockname()[:2]
    base = (
        f"http://[{bound_host}]:{bound_port}"
        if ":" in bound_host
        else f"http://{bound_host}:{bound_port}"
    )

    async def main() -> None:
        if engine is not None and await _unless_signalled(engine.open()) is None:
            stream.write("kforge serve: stopped before the engine opened\n")
            return
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            stream.write(
                f"kforge serve: listening on {base}{f' ({about})' if about else ''}\n"
                f"  dashboard: {base}/dashboard/#token={state.dev_token}\n"
                f"  dev token (operator, this run only): {state.dev_token}\n"
            )
            stream.flush()
            if ready is not None:
                ready(base)
        try:
            await serving
        finally:
            if engine is not None:
                await engine.close()

    try:
        asyncio.run(main())
    finally:
        sock.close()
        if vault is not None:
            vault.close()


async def _unless_signalled(work: Coroutine[Any, Any, T]) -> T | None:
    """``work``'s result, or ``None`` when SIGTERM or Ctrl-C came first (``work`` is
    cancelled): a server still waiting for its engine stops at once."""
    loop = asyncio.get_running_loop()
    task = loop.create_task(work)
    signals = (signal.SIGTERM, signal.SIGINT)
    for number in signals:
        loop.add_signal_handler(number, task.cancel)
    try:
        return await task
    except asyncio.CancelledError:
        running = asyncio.current_task()
        if running is not None and running.cancelling():
            raise  # cancelled from outside, not by a signal
        return None
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
