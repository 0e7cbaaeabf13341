"""Accounts shared by every partition: tick allowances and Spark in a JetStream key-value
bucket, changed only by revision-checked updates.

The engine charges its ledger synchronously, between two awaits; a bucket answers
over the network.  So each partition's engine charges a :class:`SharedLedger`: the
engine's own ledger (checks, costs and refusals stay in one place,
:mod:`kforge.accounting`) kept as a *mirror* of the bucket, and recording the
*change* each charge makes.  Those changes travel in the partition's journal,
in the same JetStream message as the records of the request or slice that made
them (:mod:`kforge.cluster.journal_store`), and only once that message is stored
are they added to the bucket (:class:`AccountsBucket`): read the account and its
revision, add, write back naming the revision read, and again from the read if
another writer came first.  So no update is ever lost when two workers race,
and a change is applied exactly once: each account remembers, per partition,
the last journal row whose changes it holds (``applied``), and a worker that takes
a partition over adds whatever its journal holds beyond that.

A check reads the mirror, which another partition's charge reaches a moment
later (the bucket is watched): two partitions charging one agent at the same
instant may together take a little more than it had.  Balances never go below
zero.  Cycles (which reset every account at once) are not run in a cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypeVar

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from kforge.accounting import Account, CreationCharge, Ledger, Opening
from kforge.core import AgentId, NotSupported
from kforge.storage import MEMORY
from kforge.wire import U16, U64, Schema, decode_msgpack, encode_msgpack

__all__ = ["AccountChange", "AccountsBucket", "SharedLedger", "StoredAccount"]

T = TypeVar("T")
_FIELDS: Final = 4  # allowance, spent, reserved, spark


class AccountChange(Schema, frozen=True):
    """What a partition's charges did to one agent's account (signed amounts)."""

    agent: AgentId
    allowance: int
    spent: int
    reserved: int
    spark: int

    def amounts(self) -> tuple[int, int, int, int]:
        return (self.allowance, self.spent, self.reserved, self.spark)


class StoredAccount(Schema, frozen=True):
    """One agent's account in ``kforge_accounts`` (key: the agent, 64 hex digits).

    ``applied`` holds, per partition, the last journal row whose changes the
    account includes.
    """

    allowance: U64
    spent: U64
    reserved: U64
    spark: U64
    applied: tuple[tuple[U16, U64], ...] = ()

    def applied_by(self, partition: int) -> int:
        return dict(self.applied).get(partition, 0)

    def plus(self, amounts: Iterable[int], partition: int, row: int) -> StoredAccount:
        values = [
            max(0, value + change)
            for value, change in zip(
                (self.allowance, self.spent, self.reserved, self.spark), amounts, strict=True
            )
        ]
        applied = dict(self.applied)
        applied[partition] = row
        allowance, spent, reserved, spark = values
        return StoredAccount(allowance, spent, reserved, spark, tuple(sorted(applied.items())))


def opening_account(opening: Opening) -> StoredAccount:
    return StoredAccount(opening.tick_allowance, 0, 0, opening.spark)


def _sum(changes: Iterable[Iterable[int]]) -> list[int]:
    total = [0] * _FIELDS
    for amounts in changes:
        for index, amount in enumerate(amounts):
            total[index] += amount
    return total


class SharedLedger(Ledger):
    """The engine's ledger for one partition: a mirror of the shared accounts that
    remembers the changes its charges make.

    Every charge is the :class:`~kforge.accounting.Ledger`'s own (same checks, same
    refusals) on the mirror; :meth:`take_changes` hands the changes made since it
    was last called to the journal.  The partition's state does not hold the
    accounts (they are the cluster's): nothing about them is journaled as a whole
    (``changes`` never moves), snapshots hold none, and a rebuild does not roll
    them back.
    """

    def __init__(self, partition: int, opening: Opening) -> None:
        super().__init__(MEMORY, opening=opening)
        self.partition = partition
        #: Changes not yet handed to the journal.
        self._pending: dict[AgentId, list[int]] = {}
        #: Changes journaled (by their batch's last row) and not yet seen in the bucket.
        self._journaled: list[tuple[int, dict[AgentId, tuple[int, int, int, int]]]] = []
        self._stored: dict[AgentId, tuple[StoredAccount, int]] = {}

    # ------------------------------------------------------------------ the bucket's view

    def absorb(self, agent: AgentId, stored: StoredAccount, revision: int) -> None:
        """The bucket holds ``stored`` for ``agent`` at ``revision``: the mirror follows, with
        this partition's changes that the bucket does not hold yet on top.  An older
        revision than one already seen (a watcher lagging behind) changes nothing."""
        known = self._stored.get(agent)
        if known is not None and known[1] > revision:
            return
        self._stored[agent] = (stored, revision)
        self._refresh(agent)

    def _refresh(self, agent: AgentId) -> None:
        known = self._stored.get(agent)
        stored = known[0] if known is not None else opening_account(self.opening)
        seen = stored.applied_by(self.partition)
        own = [
            amounts
            for row, changes in self._journaled
            if row > seen
            for who, amounts in changes.items()
            if who == agent
        ]
        if agent in self._pending:
            own.append(tuple(self._pending[agent]))  # type: ignore[arg-type]
        mirror = stored.plus(_sum(own), self.partition, seen)
        self.connection.execute(
            "INSERT OR REPLACE INTO accounts VALUES (?, ?, ?, ?, ?)",
            (agent.raw, mirror.allowance, mirror.spent, mirror.reserved, mirror.spark),
        )

    def take_changes(self, row: int) -> tuple[AccountChange, ...]:
        """The changes made since the last call, for the journal batch ending at ``row``
        (the batch is being sealed; until the bucket holds them they stay in the mirror)."""
        taken = tuple(
            AccountChange(agent, *amounts)
            for agent, amounts in sorted(self._pending.items(), key=lambda item: item[0].raw)
            if any(amounts)
        )
        self._pending.clear()
        if taken:
            self._journaled.append((row, {change.agent: change.amounts() for change in taken}))
        return taken

    def applied(self, row: int) -> None:
        """The bucket holds every change up to the batch ending at ``row``."""
        self._journaled = [(at, changes) for at, changes in self._journaled if at > row]

    # ------------------------------------------------------------------ charging, tracked

    def _tracked(self, agents: Iterable[AgentId], charge: Callable[[], T]) -> T:
        agents = list(dict.fromkeys(agents))
        before = {agent: self.account(agent) for agent in agents}
        result = charge()
        for agent in agents:
            after = self.account(agent)
            was = before[agent]
            change = (
                after.tick_allowance - was.tick_allowance,
                after.ticks_spent - was.ticks_spent,
                after.ticks_reserved - was.ticks_reserved,
                after.spark - was.spark,
            )
            if any(change):
                total = self._pending.setdefault(agent, [0] * _FIELDS)
                for index, amount in enumerate(change):
                    total[index] += amount
        return result

    def set_allowance(self, agent: AgentId, ticks_per_cycle: int) -> None:
        self._tracked(
            [agent], lambda: super(SharedLedger, self).set_allowance(agent, ticks_per_cycle)
        )

    def credit_spark(self, agent: AgentId, amount: int) -> int:
        return self._tracked([agent], lambda: super(SharedLedger, self).credit_spark(agent, amount))

    def begin_cycle(self, allowances: Mapping[AgentId, int] | None = None) -> int:
        raise NotSupported("cycles in a cluster (every partition would have to begin one at once)")

    def charge_creation(self, agent: AgentId, memory_quota: int) -> CreationCharge:
        return self._tracked(
            [agent], lambda: super(SharedLedger, self).charge_creation(agent, memory_quota)
        )

    def refund_creation(self, charge: CreationCharge) -> None:
        self._tracked([charge.agent], lambda: super(SharedLedger, self).refund_creation(charge))

    def reserve_ticks(self, agent: AgentId, amount: int, purpose: str = "execution") -> None:
        self._tracked(
            [agent], lambda: super(SharedLedger, self).reserve_ticks(agent, amount, purpose)
        )

    def settle_ticks(self, agent: AgentId, reserved: int, used: int) -> None:
        self._tracked(
            [agent], lambda: super(SharedLedger, self).settle_ticks(agent, reserved, used)
        )

    def charge_ticks(self, agent: AgentId, amount: int, purpose: str) -> None:
        self._tracked(
            [agent], lambda: super(SharedLedger, self).charge_ticks(agent, amount, purpose)
        )

    def refund_ticks(self, agent: AgentId, amount: int) -> None:
        self._tracked([agent], lambda: super(SharedLedger, self).refund_ticks(agent, amount))

    def charge_spark(self, agent: AgentId, amount: int, purpose: str) -> int:
        return self._tracked(
            [agent], lambda: super(SharedLedger, self).charge_spark(agent, amount, purpose)
        )

    def transfer(self, payer: AgentId, payee: AgentId, amount: int) -> int:
        return self._tracked(
            [payer, payee], lambda: super(SharedLedger, self).transfer(payer, payee, amount)
        )

    # ------------------------------------------------------------------ not the partition's

    @property
    def changes(self) -> int:
        """Never moves: the accounts are journaled as changes, not whole (see the class)."""
        return 0

    def dump(self) -> tuple[int, list[Account]]:
        """The cycle and no accounts: a partition's snapshot does not hold the cluster's."""
        return self.cycle, []

    def load(self, cycle: int, accounts: list[Account]) -> None:
        """Nothing to restore: the accounts are not rolled back with a partition."""


class AccountsBucket:
    """``kforge_accounts``: reading accounts, and adding journaled changes exactly once."""

    def __init__(self, kv: KeyValue, opening: Opening) -> None:
        self.kv = kv
        self.opening = opening
        #: The tasks following watches (kept, so they live as long as their watch).
        self._following: list[asyncio.Task[None]] = []

    async def read(self, agent: AgentId) -> tuple[StoredAccount, int]:
        """The agent's account and its revision (0: none stored yet, the opening grant)."""
        try:
            entry = await self.kv.get(agent.hex)
        except KeyNotFoundError:
            return opening_account(self.opening), 0
        return decode_msgpack(entry.value or b"", StoredAccount, "account"), entry.revision or 0

    async def add(
        self, partition: int, row: int, agent: AgentId, amounts: Iterable[int]
    ) -> tuple[StoredAccount, int]:
        """Add ``amounts`` to the account unless it already holds the partition's row ``row``;
        the account and its revision after."""
        amounts = list(amounts)
        while True:
            stored, revision = await self.read(agent)
            if stored.applied_by(partition) >= row:
                return stored, revision
            updated = stored.plus(amounts, partition, row)
            try:
                if revision == 0:
                    written = await self.kv.create(agent.hex, encode_msgpack(updated))
                else:
                    written = await self.kv.update(
                        agent.hex, encode_msgpack(updated), last=revision
                    )
            except KeyWrongLastSequenceError:
                continue  # another writer came first: read again
            return updated, written

    async def catch_up(
        self, partition: int, batches: Iterable[tuple[int, Iterable[AccountChange]]]
    ) -> None:
        """Add whatever of the journal's ``(row, changes)`` the bucket does not hold yet
        (when a worker takes a partition over)."""
        by_agent: dict[AgentId, list[tuple[int, tuple[int, int, int, int]]]] = {}
        for row, changes in batches:
            for change in changes:
                by_agent.setdefault(change.agent, []).append((row, change.amounts()))
        for agent, rows in by_agent.items():
            stored, _ = await self.read(agent)
            seen = stored.applied_by(partition)
            missing = [amounts for row, amounts in rows if row > seen]
            if missing:
                await self.add(partition, max(row for row, _ in rows), agent, _sum(missing))

    async def watch(self, absorb: Callable[[AgentId, StoredAccount, int], None]) -> Any:
        """Call ``absorb`` with every stored account now, then with each update as it
        comes; returns the watcher (``stop()`` it) once the current values are in."""
        watcher = await self.kv.watchall()
        async for entry in _until_current(watcher):
            with contextlib.suppress(ValueError):
                absorb(AgentId.from_hex(entry.key), _decoded(entry.value), entry.revision or 0)
        self._following.append(asyncio.get_running_loop().create_task(_follow(watcher, absorb)))
        return watcher


def _decoded(value: bytes | None) -> StoredAccount:
    return decode_msgpack(value or b"", StoredAccount, "account")


async def _until_current(watcher: Any) -> Any:
    while True:
        entry = await watcher.updates(timeout=10)
        if entry is None:  # the end of the values stored when the watch began
            return
        if entry.value:
            yield entry


async def _follow(watcher: Any, absorb: Callable[[AgentId, StoredAccount, int], None]) -> None:
    with contextlib.suppress(asyncio.CancelledError, Exception):
        async for entry in watcher:
            if entry is not None and entry.value:
                with contextlib.suppress(ValueError):
                    absorb(AgentId.from_hex(entry.key), _decoded(entry.value), entry.revision or 0)
