"""What the server tells people about each sandbox beyond its status: which program it
runs (by name when one was given), when it was created, and how it faulted.

The engine's status of a sandbox says where it is now; the people watching the
dashboard also want to know what it is.  The server learns it from the engine's
own events as they are published (SANDBOX_CREATED names the program and carries
the time, SANDBOX_FAULTED the fault), and program names from uploads that give one
(``POST /v1/programs`` with ``name``).  Notes are kept for the sandboxes created
while the server runs, the oldest dropped beyond :data:`MAX_NOTES`.  A program's
name is the uploader's: a sandbox shows the name its owner gave the program (one
agent cannot rename what another agent's sandboxes run).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Final

from kforge.core import AgentId, EventKind, Hash256
from kforge.events import Event, EventBus

__all__ = ["MAX_NOTES", "MAX_PROGRAM_NAMES", "NOTE_SCHEMA", "SandboxNote", "SandboxNotes"]

MAX_NOTES: Final = 10_000
MAX_PROGRAM_NAMES: Final = 10_000
#: The largest program name kept (longer ones are cut).
MAX_NAME_LENGTH: Final = 200

_NULLABLE_ID = {"anyOf": [{"type": "string", "pattern": "^[0-9a-f]{64}$"}, {"type": "null"}]}
#: JSON Schema properties of :meth:`SandboxNotes.values`.
NOTE_SCHEMA: Final[dict[str, Any]] = {
    "program_id": _NULLABLE_ID,
    "program_name": {"type": ["string", "null"]},
    "created_at_ms": {"type": ["integer", "null"]},
    "fault": {"type": ["string", "null"]},
    "fault_detail": {"type": ["integer", "null"]},
}


@dataclass(frozen=True, slots=True)
class SandboxNote:
    program_id: Hash256
    owner: AgentId | None
    created_at_ms: int
    fault: str | None = None
    fault_detail: int | None = None


class SandboxNotes:
    """Notes on sandboxes, fed by an engine's event bus (see :meth:`listen_to`)."""

    def __init__(self) -> None:
        self._notes: OrderedDict[Hash256, SandboxNote] = OrderedDict()
        self._program_names: OrderedDict[tuple[AgentId, Hash256], str] = OrderedDict()

    def listen_to(self, bus: EventBus) -> None:
        """Take notes from every event ``bus`` publishes from now on."""
        bus.listeners.append(self.record)

    def record(self, event: Event) -> None:
        """Note what ``event`` says about its sandbox."""
        sandbox = event.sandbox_id
        if sandbox is None:
            return
        if event.kind == EventKind.SANDBOX_CREATED:
            self._notes[sandbox] = SandboxNote(
                event.payload["code"], event.owner, event.timestamp_ms
            )
            while len(self._notes) > MAX_NOTES:
                self._notes.popitem(last=False)
        elif event.kind == EventKind.SANDBOX_FAULTED and sandbox in self._notes:
            self._notes[sandbox] = replace(
                self._notes[sandbox],
                fault=event.payload["fault_name"],
                fault_detail=event.payload["fault_detail"],
            )

    def name_program(self, agent: AgentId, program_id: Hash256, name: str) -> None:
        """``agent`` calls ``program_id`` by ``name`` (its latest name given wins)."""
        key = (agent, program_id)
        self._program_names.pop(key, None)
        self._program_names[key] = name[:MAX_NAME_LENGTH]
        while len(self._program_names) > MAX_PROGRAM_NAMES:
            self._program_names.popitem(last=False)

    def values(self, sandbox_id: Hash256) -> dict[str, Any]:
        """``program_id``, ``program_name``, ``created_at_ms``, ``fault``, ``fault_detail``
        of a sandbox (each ``None`` when not known)."""
        note = self._notes.get(sandbox_id)
        if note is None:
            return dict.fromkeys(NOTE_SCHEMA)
        return {
            "program_id": note.program_id,
            "program_name": (
                self._program_names.get((note.owner, note.program_id))
                if note.owner is not None
                else None
            ),
            "created_at_ms": note.created_at_ms,
            "fault": note.fault,
            "fault_detail": note.fault_detail,
        }
