"""The Forge engine: sandboxes, scheduling, host calls, accounting, events and messages.

The public surface::

    from kforge.engine import CreateSandbox, Engine

See ``docs/engine.md`` for the whole API, the message codes and the channel formats.
"""

from kforge.engine.dispatch import (
    Dispatcher,
    create_request_from_values,
    exec_result_from_values,
    exec_result_values,
    sandbox_info_values,
)
from kforge.engine.engine import Engine, EngineStatus, SliceObserver
from kforge.engine.models import (
    DEFAULT_SLICE_TICKS,
    Clock,
    CreateSandbox,
    Endpoint,
    EngineLimits,
    ExecResult,
    HostCall,
    ManualClock,
    Operation,
    RandomSource,
    SandboxInfo,
    SandboxState,
    Service,
    ServiceCallFailed,
    ServiceInfo,
    ServiceResult,
    ServiceState,
    SystemClock,
    seeded_random,
    system_random,
)
from kforge.tiers import TIERS

__all__ = [
    "DEFAULT_SLICE_TICKS",
    "TIERS",
    "Clock",
    "CreateSandbox",
    "Dispatcher",
    "Endpoint",
    "Engine",
    "EngineLimits",
    "EngineStatus",
    "ExecResult",
    "HostCall",
    "ManualClock",
    "Operation",
    "RandomSource",
    "SandboxInfo",
    "SandboxState",
    "Service",
    "ServiceCallFailed",
    "ServiceInfo",
    "ServiceResult",
    "ServiceState",
    "SliceObserver",
    "SystemClock",
    "create_request_from_values",
    "exec_result_from_values",
    "exec_result_values",
    "sandbox_info_values",
    "seeded_random",
    "system_random",
]
