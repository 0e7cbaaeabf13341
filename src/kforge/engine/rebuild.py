"""Rebuilding an engine's state from its journal: the latest snapshot, then every record after it."""

from __future__ import annotations

from kforge.engine.apply import apply, settle
from kforge.engine.journal import Journal
from kforge.engine.projection import events_of
from kforge.engine.state import EngineState

__all__ = ["rebuild"]


def rebuild(state: EngineState, journal: Journal) -> int:
    """Bring the empty ``state`` to where the journal's records leave it; returns how many
    records were applied after the snapshot.

    Every row's chain link is checked first (the whole journal), so a rewritten row
    is reported (``StateCorrupted``) before anything is applied.
    """
    journal.verify()
    found = journal.latest_snapshot()
    after = 0
    if found is not None:
        after, snapshot = found
        state.restore(snapshot)
    applied = 0
    for record in journal.records(after):
        apply(state, record)
        state.events += len(events_of(record))
        applied += 1
    settle(state)
    return applied
