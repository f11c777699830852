"""A node judges its leases on the monotonic clock: stepping the wall clock back does not let
it serve a partition past the time its last renewal bought."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from app.group.messages import Error
from app.runtime.node import cancel_quietly
from tests.protocol.groups import stable_group
from tests.runtime.node_fixture import running_node


async def test_a_wall_clock_step_back_does_not_extend_a_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a TTL with room for a slow first renewal: at 1 s a busy machine sometimes let the lease
    # lapse before the group formed (NOT_COORDINATOR on the first JoinGroup)
    async with running_node(tmp_path, lease_ttl_ms=3000) as n:
        c = await n.client()
        member, gen = await stable_group(c, "g")
        # renewals stop (the database is unreachable, say) ...
        leases = n.node._tasks[0]
        assert leases.get_name() == "leases"
        await cancel_quietly(leases)
        # ... and the wall clock steps back an hour
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() - 3_600_000_000_000)
        await asyncio.sleep(3.2)  # past what the last renewal bought
        hb = await c.heartbeat("g", gen, member)
        assert hb.error_code == Error.NOT_COORDINATOR  # another node may own it by now
        assert not n.node.ready()
        monkeypatch.undo()
        await c.close()


def epochs(node: Any) -> dict[int, int]:
    return {pid: p.epoch for pid, p in node.partitions.items()}


async def test_nodes_judge_leases_on_the_databases_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both nodes' clocks jump an hour ahead: with leases judged on their own clocks every
    lease would look expired and each node would take the other's partitions; on the
    database's clock nothing moves."""
    from tests.api.helpers import two_nodes
    from tests.api.test_auth_errors_redirect import settled

    async with two_nodes(tmp_path) as (a, b):
        await settled(a, b)
        before = {
            n.node.node_id: {pid: p.epoch for pid, p in n.node.partitions.items()} for n in (a, b)
        }
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() + 3_600_000_000_000)
        await asyncio.sleep(4)  # three lease rounds of TTL/4 = 1.25 s
        monkeypatch.undo()
        after = {
            n.node.node_id: {pid: p.epoch for pid, p in n.node.partitions.items()} for n in (a, b)
        }
        assert after == before
        assert a.node.ready() and b.node.ready()
