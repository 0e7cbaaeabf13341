"""Accounting: per-agent tick allowances and Spark balances (seed §11), in SQLite.

Costs:

- create a sandbox: :data:`CREATE_TICKS` (5) ticks + 1 Spark per KiB of memory
  quota, rounded up (:func:`creation_spark`);
- execute: 1 agent tick per machine tick.  The engine reserves the whole tick
  budget when execution starts and, at the end, spends what was used and
  releases the rest;
- keep a persistent sandbox across a cycle: :data:`PERSISTENT_SPARK_PER_CYCLE` (10) Spark;
- link: 2 ticks per import; generate a proof: 2 ticks per tick of the proven run
  (:data:`PROOF_TICKS_PER_TICK`), both charged to the requester.

An agent's ticks come from its allowance for the current cycle:
``available = allowance - spent - reserved``.  :meth:`Ledger.begin_cycle` starts a
new cycle (spent goes back to 0, allowances may be replaced).  An agent the ledger
has never seen has no allowance and no Spark.  Every refusal is
:class:`InsufficientResources`, naming the agent, the resource, what was needed and
what was there; a refused charge changes nothing.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kforge.core import AgentId, ErrorCategory, ForgeError, KingdomError
from kforge.storage import MEMORY, SqliteStore, default_data_dir

__all__ = [
    "BYTES_PER_SPARK",
    "CREATE_TICKS",
    "OPEN_ACCOUNTS",
    "PERSISTENT_SPARK_PER_CYCLE",
    "PROOF_TICKS_PER_TICK",
    "Account",
    "CreationCharge",
    "InsufficientResources",
    "Ledger",
    "Opening",
    "creation_spark",
]

CREATE_TICKS: Final = 5
BYTES_PER_SPARK: Final = 1024
PERSISTENT_SPARK_PER_CYCLE: Final = 10
PROOF_TICKS_PER_TICK: Final = 2
#: SQLite integers are signed 64-bit; no balance or charge may exceed this.
_MAX_AMOUNT: Final = (1 << 63) - 1

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS accounts (
        agent          BLOB PRIMARY KEY,
        tick_allowance INTEGER NOT NULL DEFAULT 0,
        ticks_spent    INTEGER NOT NULL DEFAULT 0,
        ticks_reserved INTEGER NOT NULL DEFAULT 0,
        spark          INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE TABLE IF NOT EXISTS ledger_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
)


def creation_spark(memory_quota: int) -> int:
    """Spark charged for creating a sandbox with ``memory_quota`` bytes: 1 per KiB, rounded up."""
    return -(-memory_quota // BYTES_PER_SPARK)


class InsufficientResources(ForgeError):
    """An agent is short of ticks or Spark for what it asked."""

    category = ErrorCategory.QUOTA_EXCEEDED
    code = 0x0504
    http_status = 429

    def __init__(
        self, agent: AgentId, resource: str, needed: int, available: int, purpose: str
    ) -> None:
        super().__init__(
            f"insufficient {resource} for {purpose}: agent {agent} needs {needed}, has {available}"
        )
        self.agent = agent
        self.resource = resource
        self.needed = needed
        self.available = available
        self.purpose = purpose

    def to_kingdom_error(self, context: dict[bytes, bytes] | None = None) -> KingdomError:
        merged = {
            b"resource": self.resource.encode(),
            b"needed": str(self.needed).encode(),
            b"available": str(self.available).encode(),
        }
        merged.update(context or {})
        return super().to_kingdom_error(merged)


@dataclass(frozen=True, slots=True)
class Account:
    """One agent's standing in the current cycle."""

    agent: AgentId
    tick_allowance: int
    ticks_spent: int
    ticks_reserved: int
    spark: int

    @property
    def ticks_available(self) -> int:
        return max(0, self.tick_allowance - self.ticks_spent - self.ticks_reserved)


@dataclass(frozen=True, slots=True)
class Opening:
    """What an agent the ledger has never seen starts with: a tick allowance per cycle and Spark.

    ``Ledger()`` opens nobody an account (zeros); an engine with accounting on
    by default uses :data:`OPEN_ACCOUNTS` so that any agent can start working.
    """

    tick_allowance: int = 0
    spark: int = 0


#: The engine's default: 10^12 ticks a cycle (a hundred ``generous`` executions) and
#: 10^6 Spark (about 1 GiB of sandbox memory created).
OPEN_ACCOUNTS: Final = Opening(tick_allowance=10**12, spark=10**6)


@dataclass(frozen=True, slots=True)
class CreationCharge:
    """What creating one sandbox cost its owner (kept to refund a failed creation)."""

    agent: AgentId
    ticks: int
    spark: int


class Ledger(SqliteStore):
    """Tick allowances and Spark balances, persisted in SQLite.

    ``Ledger()`` keeps everything in memory; :meth:`open_default` uses
    ``ledger.sqlite3`` under the data directory.  Every method is one
    transaction.  A context manager; :meth:`close` is idempotent.
    """

    what = "ledger"

    def __init__(self, path: str | Path = MEMORY, *, opening: Opening | None = None) -> None:
        super().__init__(path)
        self.opening = opening or Opening()
        for statement in _SCHEMA:
            self.connection.execute(statement)
        self.connection.execute("INSERT OR IGNORE INTO ledger_state VALUES ('cycle', 0)")

    @classmethod
    def open_default(cls, data_dir: str | os.PathLike[str] | None = None) -> Ledger:
        folder = Path(data_dir) if data_dir is not None else default_data_dir()
        return cls(folder / "ledger.sqlite3")

    # ------------------------------------------------------------------ reading

    def account(self, agent: AgentId) -> Account:
        """The agent's account (the opening grant for an agent never seen)."""
        row = self.connection.execute(
            "SELECT tick_allowance, ticks_spent, ticks_reserved, spark FROM accounts WHERE agent = ?",
            (agent.raw,),
        ).fetchone()
        if row is None:
            return Account(agent, self.opening.tick_allowance, 0, 0, self.opening.spark)
        return Account(agent, *row)

    @property
    def cycle(self) -> int:
        row = self.connection.execute(
            "SELECT value FROM ledger_state WHERE key = 'cycle'"
        ).fetchone()
        return int(row[0])

    # ------------------------------------------------------------------ granting

    def set_allowance(self, agent: AgentId, ticks_per_cycle: int) -> None:
        """Give ``agent`` ``ticks_per_cycle`` ticks for this cycle and the next ones."""
        _check_amount(ticks_per_cycle, "ticks_per_cycle")
        with self.transaction() as connection:
            self._ensure(connection, agent)
            connection.execute(
                "UPDATE accounts SET tick_allowance = ? WHERE agent = ?",
                (ticks_per_cycle, agent.raw),
            )

    def credit_spark(self, agent: AgentId, amount: int) -> int:
        """Add ``amount`` Spark to ``agent``; returns the new balance."""
        _check_amount(amount, "amount")
        with self.transaction() as connection:
            balance = self._spark(connection, agent)
            if balance + amount > _MAX_AMOUNT:
                raise ValueError("balance would overflow")
            connection.execute(
                "UPDATE accounts SET spark = spark + ? WHERE agent = ?", (amount, agent.raw)
            )
            return balance + amount

    def begin_cycle(self, allowances: Mapping[AgentId, int] | None = None) -> int:
        """Start the next cycle: every agent's spent ticks go back to 0.

        ``allowances``, when given, replaces those agents' allowances.  Ticks
        reserved by executions still running stay reserved.  Returns the new
        cycle number.
        """
        for amount in (allowances or {}).values():
            _check_amount(amount, "allowance")
        with self.transaction() as connection:
            connection.execute("UPDATE accounts SET ticks_spent = 0")
            for agent, amount in (allowances or {}).items():
                self._ensure(connection, agent)
                connection.execute(
                    "UPDATE accounts SET tick_allowance = ? WHERE agent = ?", (amount, agent.raw)
                )
            connection.execute("UPDATE ledger_state SET value = value + 1 WHERE key = 'cycle'")
            row = connection.execute(
                "SELECT value FROM ledger_state WHERE key = 'cycle'"
            ).fetchone()
            return int(row[0])

    # ------------------------------------------------------------------ charging

    def charge_creation(self, agent: AgentId, memory_quota: int) -> CreationCharge:
        """Charge ``agent`` for creating a sandbox: 5 ticks + 1 Spark per KiB (rounded up).

        Both are checked before either is taken; raises :class:`InsufficientResources`.
        """
        spark = creation_spark(memory_quota)
        with self.transaction() as connection:
            account = self._account(connection, agent)
            if account.ticks_available < CREATE_TICKS:
                raise InsufficientResources(
                    agent, "ticks", CREATE_TICKS, account.ticks_available, "sandbox creation"
                )
            if account.spark < spark:
                raise InsufficientResources(
                    agent, "Spark", spark, account.spark, f"a {memory_quota}-byte memory quota"
                )
            connection.execute(
                "UPDATE accounts SET ticks_spent = ticks_spent + ?, spark = spark - ? WHERE agent = ?",
                (CREATE_TICKS, spark, agent.raw),
            )
        return CreationCharge(agent, CREATE_TICKS, spark)

    def refund_creation(self, charge: CreationCharge) -> None:
        """Give back a creation charge (the creation failed after charging)."""
        with self.transaction() as connection:
            connection.execute(
                "UPDATE accounts SET ticks_spent = MAX(0, ticks_spent - ?), spark = spark + ? "
                "WHERE agent = ?",
                (charge.ticks, charge.spark, charge.agent.raw),
            )

    def reserve_ticks(self, agent: AgentId, amount: int, purpose: str = "execution") -> None:
        """Set aside ``amount`` ticks of the allowance; raises :class:`InsufficientResources`."""
        with self.transaction() as connection:
            self._require_ticks(connection, agent, amount, purpose)
            connection.execute(
                "UPDATE accounts SET ticks_reserved = ticks_reserved + ? WHERE agent = ?",
                (amount, agent.raw),
            )

    def settle_ticks(self, agent: AgentId, reserved: int, used: int) -> None:
        """End a reservation of ``reserved`` ticks of which ``used`` were spent; the rest is freed."""
        used = min(used, reserved)
        with self.transaction() as connection:
            self._ensure(connection, agent)
            connection.execute(
                "UPDATE accounts SET ticks_reserved = MAX(0, ticks_reserved - ?), "
                "ticks_spent = ticks_spent + ? WHERE agent = ?",
                (reserved, used, agent.raw),
            )

    def charge_ticks(self, agent: AgentId, amount: int, purpose: str) -> None:
        """Spend ``amount`` ticks of the allowance at once (linking, proofs)."""
        with self.transaction() as connection:
            self._require_ticks(connection, agent, amount, purpose)
            connection.execute(
                "UPDATE accounts SET ticks_spent = ticks_spent + ? WHERE agent = ?",
                (amount, agent.raw),
            )

    def refund_ticks(self, agent: AgentId, amount: int) -> None:
        """Give back ticks a failed operation was charged."""
        with self.transaction() as connection:
            connection.execute(
                "UPDATE accounts SET ticks_spent = MAX(0, ticks_spent - ?) WHERE agent = ?",
                (amount, agent.raw),
            )

    def charge_spark(self, agent: AgentId, amount: int, purpose: str) -> int:
        """Take ``amount`` Spark from ``agent``; returns the new balance."""
        _check_amount(amount, "amount")
        with self.transaction() as connection:
            balance = self._spark(connection, agent)
            if balance < amount:
                raise InsufficientResources(agent, "Spark", amount, balance, purpose)
            connection.execute(
                "UPDATE accounts SET spark = spark - ? WHERE agent = ?", (amount, agent.raw)
            )
            return balance - amount

    def transfer(self, payer: AgentId, payee: AgentId, amount: int) -> int:
        """Move ``amount`` Spark from ``payer`` to ``payee``; returns the payer's new balance."""
        _check_amount(amount, "amount")
        with self.transaction() as connection:
            balance = self._spark(connection, payer)
            if balance < amount:
                raise InsufficientResources(payer, "Spark", amount, balance, "a transfer")
            payee_balance = self._spark(connection, payee)
            if payer != payee and payee_balance + amount > _MAX_AMOUNT:
                raise ValueError("payee balance would overflow")
            connection.execute(
                "UPDATE accounts SET spark = spark - ? WHERE agent = ?", (amount, payer.raw)
            )
            connection.execute(
                "UPDATE accounts SET spark = spark + ? WHERE agent = ?", (amount, payee.raw)
            )
            return balance - amount if payer != payee else balance

    # ------------------------------------------------------------------ copying

    @property
    def changes(self) -> int:
        """A counter that moves whenever the ledger was written (for change detection)."""
        changes: int = self.connection.total_changes
        return changes

    def dump(self) -> tuple[int, list[Account]]:
        """The cycle number and every account, in agent order (what :meth:`load` takes)."""
        rows = self.connection.execute(
            "SELECT agent, tick_allowance, ticks_spent, ticks_reserved, spark FROM accounts "
            "ORDER BY agent"
        ).fetchall()
        return self.cycle, [Account(AgentId(row[0]), *row[1:]) for row in rows]

    def load(self, cycle: int, accounts: list[Account]) -> None:
        """Replace every account and the cycle number with ``accounts`` and ``cycle``."""
        with self.transaction() as connection:
            connection.execute("DELETE FROM accounts")
            connection.executemany(
                "INSERT INTO accounts VALUES (?, ?, ?, ?, ?)",
                [
                    (a.agent.raw, a.tick_allowance, a.ticks_spent, a.ticks_reserved, a.spark)
                    for a in accounts
                ],
            )
            connection.execute("UPDATE ledger_state SET value = ? WHERE key = 'cycle'", (cycle,))

    def _ensure(self, connection: sqlite3.Connection, agent: AgentId) -> None:
        connection.execute(
            "INSERT OR IGNORE INTO accounts (agent, tick_allowance, spark) VALUES (?, ?, ?)",
            (agent.raw, self.opening.tick_allowance, self.opening.spark),
        )

    def _require_ticks(
        self, connection: sqlite3.Connection, agent: AgentId, amount: int, purpose: str
    ) -> None:
        """Raise :class:`InsufficientResources` unless ``agent`` has ``amount`` ticks available."""
        available = self._account(connection, agent).ticks_available
        if amount > available:
            raise InsufficientResources(agent, "ticks", amount, available, purpose)

    def _account(self, connection: sqlite3.Connection, agent: AgentId) -> Account:
        self._ensure(connection, agent)
        row = connection.execute(
            "SELECT tick_allowance, ticks_spent, ticks_reserved, spark FROM accounts WHERE agent = ?",
            (agent.raw,),
        ).fetchone()
        return Account(agent, *row)

    def _spark(self, connection: sqlite3.Connection, agent: AgentId) -> int:
        return self._account(connection, agent).spark


def _check_amount(amount: int, name: str) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 <= amount <= _MAX_AMOUNT:
        raise ValueError(f"{name} must be an integer in 0..2^63-1, got {amount!r}")
