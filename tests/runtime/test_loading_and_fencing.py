"""Loading rules (protocol.md §10) and epoch fencing as clients see them on a real node."""

from __future__ import annotations

import asyncio
import itertools
import logging
from pathlib import Path
from typing import Any

import pytest

from app.runtime.placement import partition_for
from storage.log import EventLog
from tests.api.helpers import eventually
from tests.runtime.node_fixture import running_node

GROUP = "g-load"
PROTOCOLS = [("range", b"meta")]


def gate_reads(gate: asyncio.Event) -> Any:
    """Hold every partition load until `gate` opens (the real read then runs)."""

    def prepare(event_log: EventLog) -> None:
        real_read_latest = event_log.read_latest

        async def gated(partition: int, *args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await real_read_latest(partition, *args, **kwargs)

        event_log.read_latest = gated  # type: ignore[method-assign]

    return prepare


async def test_requests_while_loading_get_the_loading_answers(tmp_path: Path) -> None:
    gate = asyncio.Event()
    async with running_node(tmp_path, wait_loaded=False, prepare=gate_reads(gate)) as n:
        assert not n.node.ready()
        c = await n.client()
        join = await c.join_group(GROUP, protocols=PROTOCOLS)
        assert join.error_code == 14  # COORDINATOR_LOAD_IN_PROGRESS
        assert (await c.sync_group(GROUP, 1, "m")).error_code == 27  # REBALANCE_IN_PROGRESS
        assert (await c.heartbeat(GROUP, 1, "m")).error_code == 0  # NONE while loading
        commit = await c.offset_commit(GROUP, {("t1", 0): 5})
        assert [p.error_code for t in commit.topics for p in t.partitions] == [14]
        fetch = await c.offset_fetch(GROUP, [("t1", 0)])
        assert fetch.groups[0].error_code == 14
        leave = await c.leave_group(GROUP, "m")
        assert leave.error_code == 14
        listed = await c.request(c.build_request(16, 4, states_filter=[]))
        assert listed.error_code == 14
        described = await c.request(c.build_request(15, 5, groups=[GROUP]))
        assert described.groups[0].error_code == 14

        gate.set()
        await n.node.wait_loaded()
        assert n.node.ready()
        join = await c.join_group(GROUP, protocols=PROTOCOLS)
        assert join.error_code == 79  # MEMBER_ID_REQUIRED: served normally now
        await c.close()


async def test_a_fenced_partition_refuses_the_write_and_stops_serving(tmp_path: Path) -> None:
    async with running_node(tmp_path) as n:
        c = await n.client()
        commit = await c.offset_commit(GROUP, {("t1", 0): 5})
        assert [p.error_code for t in commit.topics for p in t.partitions] == [0]

        # another node takes the partition over (its lease expired and was claimed)
        pid = partition_for(GROUP, n.node.log_partitions)
        other = await EventLog.open(n.settings.database_url)
        try:
            async with other.engine.begin() as conn:
                await conn.exec_driver_sql(
                    "UPDATE partition_leases SET expires_at_ms = 0 WHERE partition = ?", (pid,)
                )
            assert (await other.acquire_leases([pid], 2, 60_000, 1)).keys() == {pid}

            commit = await c.offset_commit(GROUP, {("t1", 0): 9})
            assert [p.error_code for t in commit.topics for p in t.partitions] == [16]
            # the zombie's write is not in the log and the node no longer serves the group
            fetch = await c.offset_fetch(GROUP, [("t1", 0)])
            assert fetch.groups[0].error_code == 16  # NOT_COORDINATOR
            offsets = [r for batch in [b async for b in other.read(pid)] for r in batch]
            assert len(offsets) == 1
        finally:
            await other.close()
        await c.close()


async def test_a_record_that_cannot_be_replayed_fails_its_partition_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The load names the record's offset in /cluster, retries with a backoff (no hot loop),
    and every other partition loads and serves."""
    import sqlite3

    async with running_node(tmp_path) as n:
        c = await n.client()
        for g in ("bad-group", "good-group"):
            commit = await c.offset_commit(g, {("t1", 0): 7})
            assert [p.error_code for t in commit.topics for p in t.partitions] == [0]
        await c.close()
        bad, good = (partition_for(g, n.node.log_partitions) for g in ("bad-group", "good-group"))
    assert bad != good
    db = sqlite3.connect(tmp_path / "coordinator.db")
    with db:
        (offset,) = db.execute(
            'SELECT max("offset") FROM log_records WHERE partition = ? AND record_type = 2',
            (bad,),
        ).fetchone()
        db.execute(
            "UPDATE log_records SET value = X'ff' WHERE partition = ? AND \"offset\" = ?",
            (bad, offset),
        )
    db.close()

    caplog.set_level(logging.WARNING, logger="app.runtime.leases")
    async with running_node(tmp_path, wait_loaded=False) as n:

        def failed_thrice() -> bool:
            error = n.node.load_error(bad)
            return error is not None and error["attempts"] >= 3 and good in n.node.partitions

        await eventually(failed_thrice, timeout=20, what="three failed loads")
        error = n.node.load_error(bad)
        assert error is not None and error["offset"] == offset
        # 1 s, then 2 s between the attempts: a backoff, not a retry every lease round (1.25 s)
        failed_at = [
            r.created
            for r in caplog.records
            if r.getMessage().startswith(f"partition {bad} failed to load")
        ]
        gaps = [b - a for a, b in itertools.pairwise(failed_at)]
        assert len(gaps) >= 2 and gaps[0] >= 0.95 and gaps[1] >= 1.95, gaps
        assert bad not in n.node.partitions or n.node.partitions[bad].core is None
        c = await n.client()
        fetch = await c.offset_fetch("good-group", [("t1", 0)])
        assert [p.committed_offset for t in fetch.groups[0].topics for p in t.partitions] == [7]
        fetch = await c.offset_fetch("bad-group", [("t1", 0)])
        assert fetch.groups[0].error_code != 0  # not served: its partition is not loaded
        await c.close()
        assert not n.node.ready()
