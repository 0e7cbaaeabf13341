"""The Forge engine: sandboxes, scheduling, host calls, accounting, events and messages.

The public surface::

    from kforge.engine import CreateSandbox, Engine

See ``docs/engine.md`` for the whole API, the message codes and the channel formats,
and ``docs/architecture.md`` for how the engine's modules fit together.
"""

from kforge.engine.engine import Engine, EngineStatus, ProgramGate
from kforge.engine.execution import SliceObserver
from kforge.engine.journal import Journal, JournalStore, MemoryJournalStore, SqliteJournalStore
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
from kforge.engine.presets import PRESETS, Preset
from kforge.engine.state import EngineState
from kforge.tiers import TIERS

__all__ = [
    "DEFAULT_SLICE_TICKS",
    "PRESETS",
    "TIERS",
    "Clock",
    "CreateSandbox",
    "Endpoint",
    "Engine",
    "EngineLimits",
    "EngineState",
    "EngineStatus",
    "ExecResult",
    "HostCall",
    "Journal",
    "JournalStore",
    "ManualClock",
    "MemoryJournalStore",
    "Operation",
    "Preset",
    "ProgramGate",
    "RandomSource",
    "SandboxInfo",
    "SandboxState",
    "Service",
    "ServiceCallFailed",
    "ServiceInfo",
    "ServiceResult",
    "ServiceState",
    "SliceObserver",
    "SqliteJournalStore",
    "SystemClock",
    "seeded_random",
    "system_random",
]
