"""The storage suite on PostgreSQL: a fresh database for this module on the test run's server
(tests/conftest.py), tables truncated between tests."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import event, make_url

from storage.errors import FencedError
from storage.log import AppendBatch, EventLog
from tests.storage.conftest import pg_truncate, pg_url
from tests.storage.sql_suite import SqlStoreSuite
from tests.storage.suite import NODE1, NODE2, T0, TTL, read_all, rec

pytestmark = pytest.mark.postgres


class TestPostgresEventLog(SqlStoreSuite):
    @pytest.fixture
    async def url(self, pg_database: str) -> str:
        await pg_truncate(pg_database)
        return pg_database

    @pytest.fixture
    def unreachable_url(self, pg_admin_dsn: str) -> str:
        url = make_url(pg_url(pg_admin_dsn, "nowhere")).set(port=1)
        return url.render_as_string(hide_password=False)


# --- the hot append path (storage/sql/pg_append.py) ---------------------------------------------


async def _warm(log: EventLog, partitions: list[int]) -> dict[int, int]:
    """Leases for `partitions` and one append each (it reads the last offsets, which are
    cached from then on), then one on the hot path (its connection is open)."""
    epochs = await log.acquire_leases(partitions, NODE1, TTL, T0)
    for _ in range(2):
        await log.append([AppendBatch(p, epochs[p], NODE1, [rec(p)]) for p in partitions])
    assert _driver(log) is not None
    return epochs


def _driver(log: EventLog) -> Any:
    appender = log._db.pg_appender
    assert appender is not None
    return appender._driver


async def test_a_hot_append_is_one_statement_on_its_own_connection(pg_database: str) -> None:
    await pg_truncate(pg_database)
    log = await EventLog.open(pg_database)
    try:
        epochs = await _warm(log, [0, 1, 2])
        checkouts = 0

        def on_checkout(*_: object) -> None:
            nonlocal checkouts
            checkouts += 1

        appender = log._db.pg_appender
        assert appender is not None
        statement, executions = appender._stmt, 0

        class Counting:  # the prepared statement, counting its executions
            async def fetchrow(self, *args: Any) -> Any:
                nonlocal executions
                executions += 1
                return await statement.fetchrow(*args)

        appender._stmt = Counting()
        event.listen(log.engine.sync_engine.pool, "checkout", on_checkout)
        for i in range(5):
            batches = [AppendBatch(p, epochs[p], NODE1, [rec(i), rec(i + 10)]) for p in (2, 0, 1)]
            assert await log.append(batches) == [2 * i + 3] * 3
        event.remove(log.engine.sync_engine.pool, "checkout", on_checkout)
        # one round trip per append: one statement, no pooled connection (no pre-ping, BEGIN
        # or COMMIT), and nothing else runs on the appender's connection
        assert checkouts == 0 and executions == 5
        assert [s.offset for s in await read_all(log, 1)] == list(range(12))
    finally:
        await log.close()


async def test_a_takeover_in_progress_holds_the_hot_append_then_fences_it(
    pg_database: str,
) -> None:
    """The lease rows are locked FOR SHARE in the append's statement: an append that meets an
    uncommitted takeover waits for it, then sees the new epoch and inserts nothing."""
    await pg_truncate(pg_database)
    log = await EventLog.open(pg_database)
    other = await asyncpg.connect(_dsn(pg_database))
    try:
        epochs = await _warm(log, [0, 1])
        tx = other.transaction()
        await tx.start()
        await other.execute(
            "UPDATE partition_leases SET owner_node_id = $1, epoch = epoch + 1 "
            'WHERE "partition" = 0',
            NODE2,
        )
        append = asyncio.create_task(
            log.append([AppendBatch(p, epochs[p], NODE1, [rec(5)]) for p in (0, 1)])
        )
        await asyncio.sleep(0.3)
        assert not append.done()  # waiting for the lease row
        await tx.commit()
        with pytest.raises(FencedError) as info:
            await append
        assert (info.value.owner_node_id, info.value.current_epoch) == (NODE2, epochs[0] + 1)
        assert await log.end_offset(0) == 2 and await log.end_offset(1) == 2
    finally:
        await other.close()
        await log.close()


async def test_the_append_connection_is_replaced_when_the_server_drops_it(
    pg_database: str,
) -> None:
    await pg_truncate(pg_database)
    log = await EventLog.open(pg_database)
    other = await asyncpg.connect(_dsn(pg_database))
    try:
        epochs = await _warm(log, [0])
        pid = _driver(log).get_server_pid()
        assert await other.fetchval("SELECT pg_terminate_backend($1)", pid)
        for _ in range(50):  # the client notices the closed socket
            if _driver(log).is_closed():
                break
            await asyncio.sleep(0.02)
        assert await log.append([AppendBatch(0, epochs[0], NODE1, [rec(2)])]) == [2]
        assert _driver(log).get_server_pid() != pid
        assert [s.offset for s in await read_all(log, 0)] == [0, 1, 2]
    finally:
        await other.close()
        await log.close()


def _dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def test_an_append_too_large_for_one_statement_takes_the_executemany_path(
    pg_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await pg_truncate(pg_database)
    log = await EventLog.open(pg_database)
    try:
        epochs = await _warm(log, [0, 1])
        monkeypatch.setattr("storage.sql.log.MAX_STATEMENT_BYTES", 1000)
        appender = log._db.pg_appender
        assert appender is not None
        await appender._drop()  # the hot statement must not run (it would reconnect)
        big = [rec(i, b"x" * 300) for i in range(5)]
        assert await log.append(
            [AppendBatch(0, epochs[0], NODE1, [rec(9)]), AppendBatch(1, epochs[1], NODE1, big)]
        ) == [2, 6]
        assert appender._driver is None
        monkeypatch.undo()
        assert await log.append([AppendBatch(1, epochs[1], NODE1, [rec(10)])]) == [7]
        assert appender._driver is not None
        stored = await read_all(log, 1)
        assert [s.offset for s in stored] == list(range(8)) and stored[3].value == b"x" * 300 + b"1"
    finally:
        await log.close()
