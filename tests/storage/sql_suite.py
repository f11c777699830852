"""The storage suite on a SQL database, and what only SQL has: tables to look into, a
connection pool, migrations. Each SQL backend module (test_sqlite.py, test_postgres.py) only says
how to get a migrated, empty database URL and one that cannot be reached.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable

import pytest
from sqlalchemy import insert, select, text

from storage.envelope import AppendBatch
from storage.errors import FencedError, IntegrityError
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.security import AclOperation
from storage.sql.tables import acls, log_records, metadata
from tests.storage.security_suite import DENY, DESCRIBE, PREFIXED, READ, TOPIC, acl
from tests.storage.suite import NODE1, NODE2, T0, TTL, OpenStore, StoreSuite, read_all, rec


class SqlStoreSuite(StoreSuite):
    # --- what a backend module provides ------------------------------------------------------

    @pytest.fixture
    def url(self) -> str:
        """A migrated, empty database."""
        raise NotImplementedError

    @pytest.fixture
    def unreachable_url(self) -> str:
        raise NotImplementedError

    # --- the suite's factories -----------------------------------------------------------------

    @pytest.fixture
    def open_store(self, url: str) -> OpenStore:
        def open_log(*, record_types: Iterable[int] = ()) -> Awaitable[EventLog]:
            return EventLog.open(url, record_types=record_types)

        return open_log

    @pytest.fixture
    def open_unreachable(self, unreachable_url: str) -> OpenStore:
        def open_log(*, record_types: Iterable[int] = ()) -> Awaitable[EventLog]:
            return EventLog.open(unreachable_url, record_types=record_types)

        return open_log

    # --- moved here from the suite: they look at the tables or the pool -------------------------

    async def test_many_concurrent_loads_leave_connections_for_appends(self, url: str) -> None:
        # Partitions loading at once (as at startup) on a 2-connection pool with a short checkout
        # timeout: a read holds a connection only while it fetches a batch, never while the
        # consumer replays it, so appends still get a connection.
        log = await EventLog.open(url, pool_size=2, max_overflow=0, pool_timeout=0.5)
        try:
            parts = list(range(12))
            epochs = await log.acquire_leases(parts, NODE1, TTL, T0)
            await log.append(
                [AppendBatch(p, epochs[p], NODE1, [rec(i) for i in range(20)]) for p in parts]
            )

            async def load(p: int) -> int:
                n = 0
                async for batch in log.read(p, batch_size=5):
                    n += len(batch)
                    await asyncio.sleep(0.03)  # replay work
                return n

            async def appends() -> None:
                for i in range(20):
                    await log.append([AppendBatch(0, epochs[0], NODE1, [rec(i)])])
                    await asyncio.sleep(0.03)

            counts, _ = await asyncio.gather(asyncio.gather(*(load(p) for p in parts)), appends())
            assert counts[1:] == [20] * 11 and counts[0] >= 20
            assert await log.end_offset(0) == 40
        finally:
            await log.close()

    async def test_offset_conflict_is_an_integrity_error_and_resets_the_cache(
        self, log: EventLog
    ) -> None:
        e = await self.lease(log, 0)
        await log.append([AppendBatch(0, e, NODE1, [rec(0)])])
        # a rogue row the writer's cache does not know about
        async with log.engine.begin() as conn:
            await conn.execute(
                insert(log_records).values(
                    partition=0,
                    offset=1,
                    record_type=2,
                    key=b"r",
                    value=None,
                    epoch=e,
                    node_id=NODE2,
                    append_time_ms=T0,
                )
            )
        with pytest.raises(IntegrityError):
            await log.append([AppendBatch(0, e, NODE1, [rec(1)])])
        assert await log.append([AppendBatch(0, e, NODE1, [rec(2)])]) == [2]

    async def test_migrations_are_idempotent_and_match_the_tables(self, url: str) -> None:
        from alembic.autogenerate import compare_metadata
        from alembic.migration import MigrationContext

        await upgrade_async(url)  # already at head (the fixture migrated): no-op
        await upgrade_async(url)
        log = await EventLog.open(url)
        try:
            async with log.engine.connect() as conn:
                version = await conn.execute(text("SELECT version_num FROM alembic_version"))
                assert version.scalars().all() == ["0003"]
                diff = await conn.run_sync(
                    lambda c: compare_metadata(MigrationContext.configure(c), metadata)
                )
            assert diff == []
        finally:
            await log.close()

    async def test_compaction_keeps_the_newest_record_per_key_and_archives_the_rest(
        self, log: EventLog
    ) -> None:
        e = await self.lease(log, 0)
        writes = [
            rec(1, b"a"),
            rec(2, b"a"),
            rec(1, b"b"),
            rec(2, None),
            rec(3, b"a"),
            rec(1, b"c"),
        ]
        for r in writes:
            await log.append([AppendBatch(0, e, NODE1, [r])], now_ms=T0)
        stats = await log.compact(0, NODE1, e, tombstone_cutoff_ms=T0 + 1)
        assert stats.removed == 3
        kept = await read_all(log, 0)
        assert [(s.offset, s.key, s.value) for s in kept] == [
            (3, b"k2", None),
            (4, b"k3", b"a3"),
            (5, b"k1", b"c1"),
        ]
        async with log.engine.connect() as conn:
            history = (
                await conn.execute(
                    text(
                        'SELECT "offset", value FROM log_history WHERE partition = 0 '
                        'ORDER BY "offset"'
                    )
                )
            ).all()
        assert [tuple(r) for r in history] == [(0, b"a1"), (1, b"a2"), (2, b"b1")]
        # a second round removes the tombstone, whose deleted value is gone now
        await log.compact(0, NODE1, e, tombstone_cutoff_ms=T0 + 1)
        assert [s.offset for s in await read_all(log, 0)] == [4, 5]
        # new appends continue after the last offset, never reusing one
        await log.append([AppendBatch(0, e, NODE1, [rec(9)])])
        assert (await read_all(log, 0))[-1].offset == 6

    async def test_history_older_than_its_retention_is_deleted_by_the_partition_owner(
        self, log: EventLog
    ) -> None:
        async def history(partition: int) -> list[int]:
            async with log.engine.connect() as conn:
                rows = await conn.execute(
                    text('SELECT "offset" FROM log_history WHERE partition = :p ORDER BY "offset"'),
                    {"p": partition},
                )
                return [r[0] for r in rows]

        e0, e1 = await self.lease(log, 0), await self.lease(log, 1)
        for p, e in ((0, e0), (1, e1)):
            await log.append([AppendBatch(p, e, NODE1, [rec(1), rec(1), rec(1)])], now_ms=T0)
            await log.compact(p, NODE1, e, tombstone_cutoff_ms=T0, now_ms=T0)
        await log.append([AppendBatch(0, e0, NODE1, [rec(1)])], now_ms=T0)
        await log.compact(0, NODE1, e0, tombstone_cutoff_ms=T0, now_ms=T0 + 1000)
        assert await history(0) == [0, 1, 2]
        stats = await log.compact(
            0, NODE1, e0, tombstone_cutoff_ms=T0, chunk_offsets=1, history_cutoff_ms=T0 + 1
        )
        assert stats.history_removed == 2
        assert await history(0) == [2]  # archived at T0 + 1000: younger than the cutoff
        assert await history(1) == [0, 1]  # another partition's history is its owner's
        await self.lease(log, 1, NODE2, now=T0 + TTL)  # partition 1 moved: fenced
        with pytest.raises(FencedError):
            await log.compact(1, NODE1, e1, tombstone_cutoff_ms=T0, history_cutoff_ms=T0 + 1)
        assert await history(1) == [0, 1]

    async def test_creating_acls_is_idempotent(self, log: EventLog, log2: EventLog) -> None:
        team = acl("team-", op=READ, pattern=PREFIXED)
        deny = acl("team-secret", principal="User:*", permission=DENY, host="10.0.0.9")
        topic = acl("orders", op=DESCRIBE, rtype=TOPIC)
        await log.create_acls([team, deny])
        await log2.create_acls([team, topic, topic])  # one already stored, one given twice
        await log.create_acls([])
        stored = await log.acl_bindings()
        assert sorted(stored, key=repr) == sorted([team, deny, topic], key=repr)
        assert len(stored) == 3
        # the enums come back as enums, stored as the wire's codes
        assert {type(b.operation) for b in stored} == {AclOperation}
        async with log.engine.connect() as conn:
            codes = (
                await conn.execute(
                    select(acls.c.resource_type, acls.c.pattern_type, acls.c.operation).where(
                        acls.c.resource_name == "team-"
                    )
                )
            ).all()
        assert [tuple(r) for r in codes] == [(3, 4, 3)]
