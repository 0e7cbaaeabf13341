"""Every name the cluster puts on NATS, in one place: subjects, streams, buckets, stores.

``docs/cluster.md`` lists them with what travels on each.  A partition is
named by its number (``0 .. partitions-1``); ids on subjects are 64 hex digits.
"""

from __future__ import annotations

import hashlib
from typing import Final

from kforge.core import AgentId, Hash256

__all__ = [
    "ACCOUNTS_BUCKET",
    "CLUSTER_BUCKET",
    "DEFAULT_PARTITIONS",
    "DIRECTORY_BUCKET",
    "EVENTS_STREAM",
    "JOURNAL_STREAM",
    "LEASES_BUCKET",
    "MAILBOX_STREAM",
    "PARTITION_HEADER",
    "PLACEMENTS_BUCKET",
    "PROGRAMS_STORE",
    "SNAPSHOTS_STORE",
    "WORKERS_BUCKET",
    "engine_subject",
    "event_subject",
    "events_filter",
    "forge_subject",
    "journal_subject",
    "lease_key",
    "mailbox_subject",
    "partition_of",
    "placement_key",
    "snapshot_name",
]

#: Partitions of a new cluster (fixed once the cluster exists: ``kforge_cluster.layout``).
DEFAULT_PARTITIONS: Final = 16

JOURNAL_STREAM: Final = "KFORGE_JOURNAL"
EVENTS_STREAM: Final = "KFORGE_EVENTS"
MAILBOX_STREAM: Final = "KFORGE_MAILBOX"
CLUSTER_BUCKET: Final = "kforge_cluster"
LEASES_BUCKET: Final = "kforge_leases"
WORKERS_BUCKET: Final = "kforge_workers"
DIRECTORY_BUCKET: Final = "kforge_directory"
ACCOUNTS_BUCKET: Final = "kforge_accounts"
PLACEMENTS_BUCKET: Final = "kforge_placements"
#: The header naming the partition an event (or envelope) comes from.
PARTITION_HEADER: Final = "Kforge-Partition"
PROGRAMS_STORE: Final = "kforge_programs"
SNAPSHOTS_STORE: Final = "kforge_snapshots"

_NONE: Final = "none"


def forge_subject(partition: int) -> str:
    """Forge envelopes (0x0500-0x0520) for the engine of ``partition``: request/reply."""
    return f"kforge.forge.{partition}"


def engine_subject(partition: int) -> str:
    """The engine's other operations (status, wait, output, grants, ...): request/reply."""
    return f"kforge.engine.{partition}"


def journal_subject(partition: int) -> str:
    """The journal of ``partition`` in the ``KFORGE_JOURNAL`` stream."""
    return f"kforge.journal.{partition}"


def event_subject(kind: int, owner: AgentId | None, sandbox: Hash256 | None) -> str:
    """``kforge.events.<kind>.<owner>.<sandbox>`` (``none`` where the event names none)."""
    return (
        f"kforge.events.{kind:04x}."
        f"{owner.hex if owner is not None else _NONE}."
        f"{sandbox.hex if sandbox is not None else _NONE}"
    )


def events_filter(
    kind: int | None = None, owner: AgentId | None = None, sandbox: Hash256 | None = None
) -> str:
    """The subject filter of the events of ``kind`` (any), ``owner`` (any), ``sandbox`` (any)."""
    return (
        f"kforge.events.{f'{kind:04x}' if kind is not None else '*'}."
        f"{owner.hex if owner is not None else '*'}."
        f"{sandbox.hex if sandbox is not None else '*'}"
    )


def mailbox_subject(agent: AgentId) -> str:
    """Envelopes the engines send ``agent`` later (EXEC_RESULT, PROOF_RESULT, SERVICE_RESULT)."""
    return f"kforge.mailbox.{agent.hex}"


def lease_key(partition: int) -> str:
    return f"partition.{partition}"


def snapshot_name(partition: int) -> str:
    return f"partition-{partition}"


def partition_of(request_id: Hash256, partitions: int) -> int:
    """Where a new sandbox (or a link) asked for by ``request_id`` goes.

    A function of the request id alone, so a request sent again with the same id
    reaches the same partition, which answers it once.
    """
    digest = hashlib.sha256(b"kforge/placement/v1\0" + request_id.raw).digest()
    return int.from_bytes(digest[:8], "big") % partitions


def placement_key(request_id: Hash256) -> str:
    """The key in ``kforge_placements`` naming where the creation ``request_id`` went."""
    return f"request.{request_id.hex}"


#: ``kforge_cluster`` keys naming the cluster's operators (``operator.<agent hex>``).
OPERATORS_KEYS: Final = "operator.*"


def operator_key(agent: AgentId) -> str:
    """``kforge_cluster``'s key saying ``agent`` is an operator (a gateway's dashboard agent)."""
    return f"operator.{agent.hex}"
