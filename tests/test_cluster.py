"""The cluster end to end: a real nats-server, ``kforge worker`` and ``kforge serve --nats``
processes, clients over HTTP, and the same requests on the embedded engine to compare.

The quick test runs a small workload on one worker; the slow ones kill a worker with
SIGKILL mid-run (1,000 sandboxes from twenty agents, two workers), kill a gateway in
the middle of requests, and restart the NATS server under load.  Each checks that
every sandbox ends with the result, ticks and events of the embedded engine, that
every acknowledged request is there exactly once, and that the shared accounts are
what the embedded engine's ledger says.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from cluster_support import (
    LocalCluster,
    agent_keys,
    assert_same,
    create_twice,
    run_embedded,
    run_on_cluster,
    workload,
)


def test_a_small_workload_on_a_cluster_is_the_embedded_engines(tmp_path: Path) -> None:
    keys = agent_keys(3)
    plan = workload(18, len(keys))
    expected = asyncio.run(run_embedded(plan, keys))
    with LocalCluster(tmp_path, partitions=4) as cluster:
        cluster.start_worker("worker-1")
        gateway = cluster.start_gateway("gateway-1")
        cluster.wait_balanced(1)
        run = asyncio.run(run_on_cluster(cluster, [gateway], plan, keys))
        assert_same(expected, run, plan, cluster.logs())


@pytest.mark.slow
def test_a_worker_killed_mid_run_loses_nothing(tmp_path: Path) -> None:
    keys = agent_keys(20)
    plan = workload(1000, len(keys), scale=10)
    expected = asyncio.run(run_embedded(plan, keys))
    with LocalCluster(tmp_path, partitions=8, lease=2.0) as cluster:
        cluster.start_worker("worker-1")
        cluster.start_worker("worker-2")
        gateway = cluster.start_gateway("gateway-1")
        before = cluster.wait_balanced(2)
        killed_at: list[float] = []

        async def kill_one(finished: int) -> None:
            if finished == 250 and not killed_at:
                killed_at.append(time.monotonic())
                cluster.kill("worker-1")

        run = asyncio.run(run_on_cluster(cluster, [gateway], plan, keys, meanwhile=kill_one))
        assert killed_at, "the worker was never killed"
        assert_same(expected, run, plan, cluster.logs())
        survivor = cluster.log("worker-2")
        taken = [p for p in before["worker-1"] if f"took partition {p} " in survivor]
        assert taken == before["worker-1"], f"worker-2 did not take over:\n{survivor}"


@pytest.mark.slow
def test_a_gateway_killed_mid_request_gives_one_result_per_request(tmp_path: Path) -> None:
    keys = agent_keys(20)
    plan = workload(1000, len(keys))
    expected = asyncio.run(run_embedded(plan, keys))
    with LocalCluster(tmp_path, partitions=8) as cluster:
        cluster.start_worker("worker-1")
        cluster.start_worker("worker-2")
        first = cluster.start_gateway("gateway-1")
        second = cluster.start_gateway("gateway-2")
        cluster.wait_balanced(2)
        killed: list[bool] = []

        async def kill_gateway(finished: int) -> None:
            if finished == 100 and not killed:
                killed.append(True)
                cluster.kill("gateway-1")

        run = asyncio.run(
            run_on_cluster(cluster, [first, second], plan, keys, meanwhile=kill_gateway)
        )
        assert killed
        assert_same(expected, run, plan, cluster.logs())
        third = cluster.start_gateway("gateway-3")
        created = create_twice(
            [second, third], keys[0], plan[0].request(keys[0].agent_id, run.code("spin"))
        )
        assert created[0] == created[1], "one request id, sent to two gateways, made two sandboxes"


@pytest.mark.slow
def test_a_nats_server_restart_under_load_loses_nothing(tmp_path: Path) -> None:
    keys = agent_keys(20)
    plan = workload(1000, len(keys), scale=3)
    expected = asyncio.run(run_embedded(plan, keys))
    with LocalCluster(tmp_path, partitions=8, lease=2.0) as cluster:
        cluster.start_worker("worker-1")
        cluster.start_worker("worker-2")
        gateway = cluster.start_gateway("gateway-1")
        cluster.wait_balanced(2)
        restarted: list[bool] = []

        async def restart(finished: int) -> None:
            if finished == 250 and not restarted:
                restarted.append(True)
                cluster.nats.stop(signal.SIGKILL)
                await asyncio.sleep(1.0)
                cluster.nats.start()

        run = asyncio.run(run_on_cluster(cluster, [gateway], plan, keys, meanwhile=restart))
        assert restarted
        assert_same(expected, run, plan, cluster.logs())
