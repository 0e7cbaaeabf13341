"""``kforge cluster status``: the workers (from their heartbeats), their partitions and
load, and the partitions nobody runs."""

from __future__ import annotations

import time
from typing import Any

from kforge.cluster.connection import connect, open_layout
from kforge.cluster.leases import lease_holders, live_workers

__all__ = ["cluster_status", "format_status"]


async def cluster_status(url: str) -> dict[str, Any]:
    """The cluster as plain data (what ``--json`` prints)."""
    nc = await connect(url, name="kforge-status", who="kforge cluster status", give_up_after=5)
    try:
        layout = await open_layout(nc, partitions=None)
        workers = await live_workers(layout)
        now = time.time_ns() // 1_000_000
        holders = await lease_holders(layout)
        return {
            "nats": url,
            "partitions": layout.partitions,
            "workers": [
                {
                    "worker": record.worker,
                    "host": record.host,
                    "pid": record.pid,
                    "heartbeat_age_ms": now - record.heartbeat_ms,
                    "draining": record.draining,
                    "partitions": [load.partition for load in record.partitions],
                    "live_sandboxes": sum(load.live for load in record.partitions),
                    "sandboxes": sum(load.sandboxes for load in record.partitions),
                    "slices": sum(load.slices for load in record.partitions),
                    "ticks_per_second": record.ticks_per_second,
                }
                for record in sorted(workers.values(), key=lambda r: r.worker)
            ],
            "unserved": [p for p, holder in holders.items() if holder is None],
        }
    finally:
        await nc.close()


def format_status(status: dict[str, Any]) -> str:
    lines = [f"cluster at {status['nats']}: {status['partitions']} partitions"]
    if not status["workers"]:
        lines.append("  no live workers")
    for worker in status["workers"]:
        state = " (draining)" if worker["draining"] else ""
        parts = ",".join(str(p) for p in worker["partitions"]) or "-"
        lines.append(
            f"  {worker['worker']}{state}  {worker['host']} pid {worker['pid']}  "
            f"partitions {parts}  sandboxes {worker['live_sandboxes']} live of "
            f"{worker['sandboxes']}  load {worker['ticks_per_second']:,} ticks/s  "
            f"slices {worker['slices']}  heartbeat {worker['heartbeat_age_ms']} ms ago"
        )
    if status["unserved"]:
        lines.append("  partitions with no worker: " + ",".join(str(p) for p in status["unserved"]))
    return "\n".join(lines) + "\n"
