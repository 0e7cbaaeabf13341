"""``kforge serve``: the Forge engine over HTTP and WebSocket, a dashboard and a debugger.

    from kforge.server import create_app, serve

See ``docs/server.md`` for the endpoints, the authentication scheme and the dashboard.
"""

from kforge.server.app import create_app, open_engine, serve
from kforge.server.auth import AuthConfig, Authenticator, AuthError, Principal
from kforge.server.debug import DebugLimits
from kforge.server.signing import AgentKey
from kforge.server.state import ServerConfig, ServerState

__all__ = [
    "AgentKey",
    "AuthConfig",
    "AuthError",
    "Authenticator",
    "DebugLimits",
    "Principal",
    "ServerConfig",
    "ServerState",
    "create_app",
    "open_engine",
    "serve",
]
