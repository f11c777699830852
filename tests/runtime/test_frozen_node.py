"""A node frozen in the middle of a PostgreSQL transaction must not stall the others: the
server ends its idle transaction and lock waits are bounded (found by the chaos suite)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import exc as sa_exc

from app.group.records import OffsetValue, offset_record
from storage.errors import FencedError, StorageError
from storage.log import AppendBatch, EventLog
from storage.migrate import upgrade_async


@pytest.fixture
async def pg_url(pg_admin_dsn: str) -> AsyncIterator[str]:
    name = f"frozen_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_admin_dsn, timeout=10)
    await admin.execute(f'CREATE DATABASE "{name}"')
    base = pg_admin_dsn.rsplit("/", 1)[0]
    url = f"{base}/{name}".replace("postgresql://", "postgresql+asyncpg://")
    await upgrade_async(url)
    try:
        yield url
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()


async def test_a_frozen_writer_does_not_block_the_takeover_of_its_partition(pg_url: str) -> None:
    frozen = await EventLog.open(pg_url, lock_wait_ms=300)
    survivor = await EventLog.open(pg_url, lock_wait_ms=300)
    try:
        epoch = await frozen.acquire_lease(0, 1, 1000, 0)
        assert epoch is not None
        # the frozen node: a transaction holding the lease row (as its append fence does)
        conn = await frozen.engine.connect()
        tx = await conn.begin()
        await conn.exec_driver_sql(
            "SELECT epoch FROM partition_leases WHERE partition = 0 FOR SHARE"
        )
        # ... and then it stops: the survivor takes the expired lease after a few lock waits
        # (counted in the server's own 300 ms lock timeouts, not in seconds of a loaded
        # machine: the server ends the frozen transaction after two of them)
        got = None
        lock_waits = 0
        while got is None:
            try:
                got = await survivor.acquire_leases([0], 2, 1000, 10_000)
            except StorageError as e:  # no type of its own (PostgreSQL's 55P03)
                assert "lock timeout" in str(e), e
                lock_waits += 1
                assert lock_waits < 5, "the frozen transaction still holds the lease"
                await asyncio.sleep(0.1)  # lock_timeout: the next lease round tries again
        assert got == {0: epoch + 1}
        # when the frozen node wakes up, its transaction is gone and its writes are fenced
        with pytest.raises(sa_exc.DBAPIError):  # the server closed the session
            await tx.commit()
        value = OffsetValue(1, -1, "", 0, -1)
        with pytest.raises(FencedError) as fenced:
            await frozen.append([AppendBatch(0, epoch, 1, [offset_record("g", "t", 0, value)])])
        assert (fenced.value.owner_node_id, fenced.value.current_epoch) == (2, epoch + 1)
        await conn.close()
    finally:
        await frozen.close()
        await survivor.close()
