"""A node judges its leases on the monotonic clock: stepping the wall clock back does not let
it serve a partition past the time its last renewal bought."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from app.group.messages import Error
from app.runtime.node import cancel_quietly
from tests.protocol.groups import stable_group
from tests.runtime.node_fixture import running_node


async def test_a_wall_clock_step_back_does_not_extend_a_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_node(tmp_path, lease_ttl_ms=1000) as n:
        c = await n.client()
        member, gen = await stable_group(c, "g")
        # renewals stop (the database is unreachable, say) ...
        leases = n.node._tasks[0]
        assert leases.get_name() == "leases"
        await cancel_quietly(leases)
        # ... and the wall clock steps back an hour
        real = time.time_ns
        monkeypatch.setattr(time, "time_ns", lambda: real() - 3_600_000_000_000)
        await asyncio.sleep(1.2)  # past what the last renewal bought
        hb = await c.heartbeat("g", gen, member)
        assert hb.error_code == Error.NOT_COORDINATOR  # another node may own it by now
        assert not n.node.ready()
        monkeypatch.undo()
        await c.close()
