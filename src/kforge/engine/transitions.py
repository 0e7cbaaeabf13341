"""The one way the live engine changes its state: record, apply, journal, announce.

:meth:`Transitions.record` applies a record to the state
(:func:`kforge.engine.apply.apply`), queues it in the journal (a durable
engine's), and publishes the events it announces
(:func:`kforge.engine.projection.events_of`).  :meth:`Transitions.commit`
makes what was recorded durable, with the ledger's accounts whenever they
changed, before a request is acknowledged.
"""

from __future__ import annotations

from collections.abc import Callable

from kforge.engine.apply import apply
from kforge.engine.journal import Journal
from kforge.engine.projection import events_of
from kforge.engine.records import AccountsSet, Record
from kforge.engine.state import EngineState, account_row
from kforge.events import EventBus

__all__ = ["Transitions"]


class Transitions:
    """Records go through here: ``state`` changes, ``journal`` keeps, ``bus`` tells."""

    def __init__(
        self,
        state: EngineState,
        bus: EventBus,
        journal: Journal | None,
        time_ms: Callable[[], int],
    ) -> None:
        self.state = state
        self.bus = bus
        self.journal = journal
        self._time_ms = time_ms
        self._ledger_changes = state.ledger.changes

    def record(self, record: Record) -> None:
        """Apply ``record`` (raising, with nothing changed, when it cannot be), keep it, announce it."""
        apply(self.state, record)
        journal = self.journal
        if journal is not None:
            journal.append(record, self._time_ms())
        for spec in events_of(record):
            self.bus.publish(spec.kind, spec.payload, sandbox_id=spec.sandbox_id, owner=spec.owner)
            self.state.events += 1

    def commit(self, *, lazy: bool = False) -> None:
        """Make the recorded changes durable (no-op without a journal).

        The ledger's accounts are recorded whole whenever the ledger was written.
        With ``lazy``, nothing is written unless a record with news is waiting.
        """
        journal = self.journal
        if journal is None:
            return
        ledger = self.state.ledger
        if ledger.changes != self._ledger_changes:
            cycle, accounts = ledger.dump()
            self.record(AccountsSet(cycle, tuple(account_row(a) for a in accounts)))
            self._ledger_changes = ledger.changes
        if lazy and not journal.has_news:
            return
        journal.commit()

    def resume(self) -> None:
        """Take the ledger as it is now as recorded (after a rebuild)."""
        self._ledger_changes = self.state.ledger.changes
