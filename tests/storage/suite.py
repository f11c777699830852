"""The storage behaviour every backend must have (pyeventsourcing style: one abstract suite, each
backend module only says how to open its stores). It speaks the ports (storage/ports.py) and
nothing else, so a new backend gets all of it from one file: a Test class that subclasses
StoreSuite and provides the `open_store` and `open_unreachable` factories.

Not collected by itself (no Test prefix); the SQL backends run it with the tests that look
inside their tables (sql_suite.py, test_sqlite.py, test_postgres.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from typing import Protocol

import pytest
from hypothesis import example, given, settings

from app.group.records import OffsetValue, Record, RecordType, group_record, offset_record
from storage.envelope import AppendBatch, StoredRecord
from storage.errors import (
    ConfigMismatch,
    FencedError,
    OperationalError,
    RecordTooLarge,
    StorageError,
    WriterBusy,
    WriterStopped,
)
from storage.ports import LeaseRow, Store
from storage.writer import LogWriter
from tests.storage.compaction_cases import FOUND_FAILING, histories, replayed_state
from tests.storage.security_suite import SecuritySuite

NODE1, NODE2 = 1, 2
TTL = 10_000
T0 = 1_700_000_000_000


def rec(i: int, value: bytes | None = b"v", type_: RecordType = RecordType.OFFSET_COMMIT) -> Record:
    return Record(type_, f"k{i}".encode(), value if value is None else value + str(i).encode())


async def read_all(log: Store, partition: int, **kw: int) -> list[StoredRecord]:
    out: list[StoredRecord] = []
    async for batch in log.read(partition, **kw):
        out.extend(batch)
    return out


class CountingLog:
    """Wraps a store's append: records each transaction, can inject failures."""

    def __init__(self, log: Store) -> None:
        self.log = log
        self.calls: list[list[AppendBatch]] = []
        self.fail_next: list[BaseException] = []

    async def append(self, batches: Sequence[AppendBatch]) -> list[int]:
        self.calls.append(list(batches))
        if self.fail_next:
            raise self.fail_next.pop(0)
        return await self.log.append(batches)


class OpenStore(Protocol):
    """Opens a store on the test's database: each call an independent one, as another node or
    a restarted process would open it. `record_types`: what reads return for those numbers."""

    def __call__(self, *, record_types: Iterable[int] = ()) -> Awaitable[Store]: ...


class StoreSuite(SecuritySuite):
    # --- what a backend module provides ------------------------------------------------------

    @pytest.fixture
    def open_store(self) -> OpenStore:
        """Stores on one empty database (its schema made), fresh for each test."""
        raise NotImplementedError

    @pytest.fixture
    def open_unreachable(self) -> OpenStore:
        """Stores on a database that cannot be reached: opening one fails."""
        raise NotImplementedError

    # --- shared fixtures -----------------------------------------------------------------------

    @pytest.fixture
    async def log(self, open_store: OpenStore) -> AsyncIterator[Store]:
        log = await open_store(record_types=RecordType)
        yield log
        await log.close()

    @pytest.fixture
    async def log2(self, open_store: OpenStore) -> AsyncIterator[Store]:
        """A second, independent store on the same database (another node)."""
        log = await open_store(record_types=RecordType)
        yield log
        await log.close()

    @staticmethod
    async def lease(log: Store, partition: int, node: int = NODE1, now: int = T0) -> int:
        epoch = await log.acquire_lease(partition, node, TTL, now)
        assert epoch is not None
        return epoch

    # --- append and read -----------------------------------------------------------------------

    async def test_append_then_read_round_trips_order_bytes_and_tombstones(
        self, log: Store
    ) -> None:
        e0 = await self.lease(log, 0)
        e1 = await self.lease(log, 1)
        first = [
            Record(RecordType.GROUP_METADATA, b"g", bytes(range(256))),
            Record(RecordType.OFFSET_COMMIT, b"", b""),  # empty key and empty value
            Record(RecordType.OFFSET_COMMIT, b"\x00\xff", None),  # tombstone
        ]
        second = [
            Record(RecordType.TOPIC, b"t" * 300, b"\x00" * 1_000_000),
            Record(RecordType.GROUP_METADATA, b"g", None),
        ]
        other = [Record(RecordType.TOPIC, b"x", b"y")]
        last = await log.append(
            [
                AppendBatch(0, e0, NODE1, first),
                AppendBatch(1, e1, NODE1, other),
                AppendBatch(0, e0, NODE1, second),
            ],
            now_ms=T0 + 5,
        )
        assert last == [2, 0, 4]

        stored = await read_all(log, 0)
        assert [s.record() for s in stored] == first + second
        assert [s.offset for s in stored] == [0, 1, 2, 3, 4]
        assert {(s.partition, s.epoch, s.node_id, s.append_time_ms) for s in stored} == {
            (0, e0, NODE1, T0 + 5)
        }
        assert stored[2].value is None and stored[1].value == b""
        assert all(type(s.key) is bytes and isinstance(s.type, RecordType) for s in stored)
        assert [s.record() for s in await read_all(log, 1)] == other
        assert await log.end_offset(0) == 5
        assert await log.end_offset(1) == 1

    async def test_a_large_append_lands_whole_in_order_across_its_statements(
        self, log: Store
    ) -> None:
        """203 records in one transaction (the first append of each partition, so the general
        path writes them, in several multi-row INSERTs), tombstones at the chunk edges."""
        e0 = await self.lease(log, 0)
        e1 = await self.lease(log, 1)

        def recs(n: int, tag: str) -> list[Record]:
            return [
                Record(
                    RecordType.OFFSET_COMMIT, f"{tag}{i}".encode(), None if i % 63 == 0 else b"v"
                )
                for i in range(n)
            ]

        a, b, c = recs(130, "a"), recs(70, "b"), recs(3, "c")
        last = await log.append(
            [
                AppendBatch(0, e0, NODE1, a),
                AppendBatch(1, e1, NODE1, b),
                AppendBatch(0, e0, NODE1, c),
            ]
        )
        assert last == [129, 69, 132]
        stored = await read_all(log, 0)
        assert [s.record() for s in stored] == a + c
        assert [s.offset for s in stored] == list(range(133))
        assert [s.record() for s in await read_all(log, 1)] == b

    async def test_empty_partition_reads_nothing_and_ends_at_zero(self, log: Store) -> None:
        assert await read_all(log, 7) == []
        assert await log.end_offset(7) == 0
        assert await log.append([]) == []

    async def test_read_from_and_until_offset(self, log: Store) -> None:
        e = await self.lease(log, 0)
        await log.append([AppendBatch(0, e, NODE1, [rec(i) for i in range(10)])])
        assert [s.offset for s in await read_all(log, 0, from_offset=7)] == [7, 8, 9]
        window = await read_all(log, 0, from_offset=2, until_offset=5)
        assert [s.offset for s in window] == [2, 3, 4]
        assert await read_all(log, 0, from_offset=10) == []

    async def test_offsets_continue_after_reopen(self, open_store: OpenStore) -> None:
        log = await open_store()
        e = await self.lease(log, 3)
        assert await log.append([AppendBatch(3, e, NODE1, [rec(i) for i in range(3)])]) == [2]
        await log.close()

        log = await open_store()
        try:
            assert await log.end_offset(3) == 3
            assert await log.append([AppendBatch(3, e, NODE1, [rec(3), rec(4)])]) == [4]
            assert [s.offset for s in await read_all(log, 3)] == [0, 1, 2, 3, 4]
        finally:
            await log.close()

    async def test_offsets_stay_dense_when_ownership_moves_back_and_forth(
        self, log: Store, log2: Store
    ) -> None:
        # node 1's offset cache is per epoch: after node 2 wrote in between, it must re-read.
        e1 = await self.lease(log, 0)
        await log.append([AppendBatch(0, e1, NODE1, [rec(0), rec(1)])])
        e2 = await self.lease(log2, 0, NODE2, now=T0 + TTL)  # node 1's lease expired
        assert e2 == e1 + 1
        await log2.append([AppendBatch(0, e2, NODE2, [rec(2)])])
        e3 = await self.lease(log, 0, NODE1, now=T0 + 2 * TTL)
        assert e3 == e2 + 1
        assert await log.append([AppendBatch(0, e3, NODE1, [rec(3)])]) == [3]
        stored = await read_all(log, 0)
        assert [(s.offset, s.node_id, s.epoch) for s in stored] == [
            (0, NODE1, e1),
            (1, NODE1, e1),
            (2, NODE2, e2),
            (3, NODE1, e3),
        ]

    async def test_read_streams_large_partitions_in_batches(self, log: Store) -> None:
        e = await self.lease(log, 0)
        n = 50_000
        for start in range(0, n, 5000):
            records = [rec(i, b"x" * 50) for i in range(start, start + 5000)]
            await log.append([AppendBatch(0, e, NODE1, records)])
        sizes: list[int] = []
        expected = 0
        async for batch in log.read(0, batch_size=7000):
            sizes.append(len(batch))
            for s in batch:
                assert s.offset == expected and s.key == f"k{expected}".encode()
                expected += 1
        assert expected == n
        assert sizes == [7000] * 7 + [1000]

    async def test_stopping_a_read_early_releases_its_connection(self, log: Store) -> None:
        e = await self.lease(log, 0)
        await log.append([AppendBatch(0, e, NODE1, [rec(i) for i in range(100)])])
        for _ in range(20):  # more than the pool holds if connections leaked
            async with contextlib.aclosing(log.read(0, batch_size=10)) as it:
                async for batch in it:
                    assert len(batch) == 10
                    break
        assert await log.end_offset(0) == 100

    # --- fencing -------------------------------------------------------------------------------

    async def test_stale_epoch_is_fenced_and_nothing_is_written(self, log: Store) -> None:
        e0 = await self.lease(log, 0)
        e1 = await self.lease(log, 1)
        with pytest.raises(FencedError) as info:
            await log.append(
                [AppendBatch(1, e1, NODE1, [rec(0)]), AppendBatch(0, e0 - 1, NODE1, [rec(1)])]
            )
        assert info.value.partition == 0
        assert info.value.epoch == e0 - 1
        assert info.value.current_epoch == e0
        assert isinstance(info.value, StorageError)
        # the whole transaction was rejected, including the healthy partition's batch
        assert await read_all(log, 0) == [] and await read_all(log, 1) == []
        assert await log.append([AppendBatch(1, e1, NODE1, [rec(0)])]) == [0]

    async def test_another_nodes_lease_is_fenced(self, log: Store, log2: Store) -> None:
        e = await self.lease(log2, 0, NODE2)
        with pytest.raises(FencedError) as info:
            await log.append([AppendBatch(0, e, NODE1, [rec(0)])])
        assert info.value.owner_node_id == NODE2
        with pytest.raises(FencedError):  # no lease row at all
            await log.append([AppendBatch(5, 1, NODE1, [rec(0)])])
        assert await log.end_offset(0) == 0 and await log.end_offset(5) == 0

    async def test_released_lease_fences_its_former_owner(self, log: Store) -> None:
        e = await self.lease(log, 0)
        assert await log.release_lease(0, NODE1, e)
        with pytest.raises(FencedError):
            await log.append([AppendBatch(0, e, NODE1, [rec(0)])])
        assert not await log.release_lease(0, NODE1, e)  # already released

    # The tests above fence the first append of an epoch, which also reads the partitions' last
    # offsets. Once those are cached, an append is the hot path (on PostgreSQL one statement
    # that checks the leases and inserts): these fence it there.

    async def test_a_fenced_batch_on_the_hot_path_appends_nothing(
        self, log: Store, log2: Store
    ) -> None:
        epochs = await log.acquire_leases([0, 1], NODE1, TTL, T0)
        await log.append([AppendBatch(p, epochs[p], NODE1, [rec(p)]) for p in (0, 1)])
        e2 = await log2.acquire_lease(0, NODE2, TTL, T0 + TTL)  # node 1's lease lapsed
        assert e2 == epochs[0] + 1
        with pytest.raises(FencedError) as info:
            await log.append(
                [
                    AppendBatch(1, epochs[1], NODE1, [rec(10), rec(11)]),
                    AppendBatch(0, epochs[0], NODE1, [rec(12)]),
                ]
            )
        assert (info.value.partition, info.value.epoch) == (0, epochs[0])
        assert (info.value.owner_node_id, info.value.current_epoch) == (NODE2, e2)
        # nothing of the transaction was written, not even the healthy partition's rows
        assert [s.offset for s in await read_all(log, 1)] == [0]
        assert [s.offset for s in await read_all(log, 0)] == [0]
        # the healthy partition goes on densely; the new owner writes after node 1's rows
        assert await log.append([AppendBatch(1, epochs[1], NODE1, [rec(13)])]) == [1]
        assert await log2.append([AppendBatch(0, e2, NODE2, [rec(14)])]) == [1]

    async def test_a_stale_epoch_beside_the_current_one_fences_the_whole_append(
        self, log: Store
    ) -> None:
        e = await self.lease(log, 0)
        await log.append([AppendBatch(0, e, NODE1, [rec(0)])])
        e_new = await log.acquire_lease(0, NODE1, TTL, T0 + TTL)  # ours again, a new epoch
        assert e_new == e + 1
        assert await log.append([AppendBatch(0, e_new, NODE1, [rec(1)])]) == [1]
        with pytest.raises(FencedError) as info:
            await log.append(
                [AppendBatch(0, e_new, NODE1, [rec(1)]), AppendBatch(0, e, NODE1, [rec(2)])]
            )
        assert (info.value.epoch, info.value.current_epoch) == (e, e_new)
        assert await log.end_offset(0) == 2
        assert await log.append([AppendBatch(0, e_new, NODE1, [rec(3)])]) == [2]

    async def test_an_empty_batch_is_fenced_on_the_hot_path_too(self, log: Store) -> None:
        e = await self.lease(log, 0)
        assert await log.append([AppendBatch(0, e, NODE1, [rec(0), rec(1)])]) == [1]
        assert await log.append([AppendBatch(0, e, NODE1, [])]) == [1]  # the last offset
        assert await log.release_lease(0, NODE1, e)
        with pytest.raises(FencedError):
            await log.append([AppendBatch(0, e, NODE1, [])])
        with pytest.raises(FencedError) as info:  # a partition with no lease row at all
            await log.append([AppendBatch(0, e, NODE1, [rec(2)]), AppendBatch(9, 1, NODE1, [])])
        assert info.value.partition == 0  # the first fenced partition in partition order
        assert await log.end_offset(0) == 2

    async def test_zombie_cannot_write_after_takeover(self, log: Store, log2: Store) -> None:
        """Node 1 keeps appending while node 2 takes the partition over: every node-1 record
        precedes every node-2 record, offsets stay dense, and node 1 ends up fenced."""
        e1 = await self.lease(log, 0)
        writer = LogWriter(log, NODE1)
        writer.start()
        fenced = asyncio.Event()

        async def zombie(task: int) -> None:
            for i in range(10_000):
                try:
                    await writer.submit(0, e1, [rec(task * 100_000 + i)])
                except FencedError:
                    fenced.set()
                    return

        zombies = [asyncio.create_task(zombie(t)) for t in range(5)]
        while writer.records_written < 200:
            await asyncio.sleep(0.005)
        e2 = await self.lease(log2, 0, NODE2, now=T0 + TTL)
        await log2.append([AppendBatch(0, e2, NODE2, [rec(-1)])])
        await asyncio.wait_for(fenced.wait(), 10)
        await asyncio.gather(*zombies)
        await writer.stop()

        stored = await read_all(log, 0)
        assert [s.offset for s in stored] == list(range(len(stored)))
        owners = [s.node_id for s in stored]
        first2 = owners.index(NODE2)
        assert set(owners[:first2]) == {NODE1} and set(owners[first2:]) == {NODE2}
        assert stored[first2].epoch == e2

    async def test_a_record_over_the_limit_fails_alone_and_nothing_is_written(
        self, log: Store
    ) -> None:
        epoch = await self.lease(log, 0)
        writer = LogWriter(log, NODE1, max_record_bytes=64)
        writer.start()
        big = writer.submit(0, epoch, [rec(1, b"x" * 100)])
        small = writer.submit(0, epoch, [rec(2, b"x" * 10)])
        with pytest.raises(RecordTooLarge):
            await big
        assert await small == 0
        await writer.stop()
        assert [s.key for s in await read_all(log, 0)] == [b"k2"]

    async def test_a_full_writer_queue_refuses_more_until_it_drains(self, log: Store) -> None:
        epoch = await self.lease(log, 0)
        writer = LogWriter(log, NODE1, max_queued_records=100)
        queued = [writer.submit(0, epoch, [rec(i)]) for i in range(100)]  # not started: queued
        refused = writer.submit(0, epoch, [rec(100)])
        with pytest.raises(WriterBusy):
            await refused
        writer.start()
        await asyncio.gather(*queued)
        assert await writer.submit(0, epoch, [rec(101)]) == 100  # drained: accepted again
        await writer.stop()

    async def test_the_database_clock_is_milliseconds_since_the_epoch(self, log: Store) -> None:
        import time

        first = await log.clock_ms()
        assert abs(first - time.time_ns() // 1_000_000) < 5_000  # this machine's server
        await asyncio.sleep(0.05)
        assert await log.clock_ms() >= first + 40

    # --- leases --------------------------------------------------------------------------------

    async def test_lease_acquire_extend_expire_and_takeover(self, log: Store, log2: Store) -> None:
        assert await log.acquire_lease(0, NODE1, TTL, T0) == 1
        assert await log.acquire_lease(0, NODE1, TTL, T0 + 1) == 1  # ours and live: same epoch
        assert await log.leases() == [LeaseRow(0, NODE1, 1, T0 + 1 + TTL)]
        assert await log2.acquire_lease(0, NODE2, TTL, T0 + 2) is None  # live elsewhere
        assert await log2.acquire_lease(0, NODE2, TTL, T0 + 1 + TTL) == 2  # expired: bump
        assert await log.leases() == [LeaseRow(0, NODE2, 2, T0 + 1 + 2 * TTL)]
        # the old owner can neither renew nor release what it lost
        assert await log.renew_leases(NODE1, {0: 1}, TTL, T0 + 2 * TTL) == set()
        assert not await log.release_lease(0, NODE1, 1)
        assert await log2.renew_leases(NODE2, {0: 2}, TTL, T0 + 2 * TTL) == {0}
        assert await log.leases() == [LeaseRow(0, NODE2, 2, T0 + 3 * TTL)]

    async def test_reacquiring_an_expired_lease_of_ours_bumps_the_epoch(self, log: Store) -> None:
        e = await self.lease(log, 0)
        assert await log.acquire_lease(0, NODE1, TTL, T0 + TTL) == e + 1
        with pytest.raises(FencedError):  # writes queued under the lapsed epoch are fenced
            await log.append([AppendBatch(0, e, NODE1, [rec(0)])])

    async def test_a_restarted_node_takes_its_own_live_lease_at_a_new_epoch(
        self, log: Store
    ) -> None:
        e = await self.lease(log, 0)
        assert await log.acquire_leases([0], NODE1, TTL, T0 + 1, bump_own=True) == {0: e + 1}
        with pytest.raises(FencedError):  # the previous incarnation's writes are fenced
            await log.append([AppendBatch(0, e, NODE1, [rec(0)])])

    async def test_release_then_acquire_bumps_the_epoch(self, log: Store, log2: Store) -> None:
        e = await self.lease(log, 0)
        assert await log.release_lease(0, NODE1, e)
        assert await log.leases() == [LeaseRow(0, None, e, 0)]
        assert await log2.acquire_lease(0, NODE2, TTL, T0 + 1) == e + 1

    async def test_renew_only_where_owner_and_epoch_match(self, log: Store) -> None:
        leases = await log.acquire_leases([0, 1, 2], NODE1, TTL, T0)
        assert leases == {0: 1, 1: 1, 2: 1}
        renewed = await log.renew_leases(NODE1, {0: 1, 1: 7, 9: 1}, TTL, T0 + 100)
        assert renewed == {0}
        expiry = {row.partition: row.expires_at_ms for row in await log.leases()}
        assert expiry == {0: T0 + 100 + TTL, 1: T0 + TTL, 2: T0 + TTL}
        # the epoch, not the clock, is the fence: an untaken expired lease can still be renewed
        assert await log.renew_leases(NODE1, {2: 1}, TTL, T0 + 5 * TTL) == {2}
        assert await log.renew_leases(NODE1, {}, TTL, T0) == set()

    async def test_acquire_many_takes_only_what_is_free(self, log: Store, log2: Store) -> None:
        assert await log2.acquire_leases([1, 3], NODE2, TTL, T0) == {1: 1, 3: 1}
        assert await log.acquire_leases([3, 0, 1, 2, -1], NODE1, TTL, T0) == {-1: 1, 0: 1, 2: 1}
        assert [(r.partition, r.owner_node_id) for r in await log.leases()] == [
            (-1, NODE1),
            (0, NODE1),
            (1, NODE2),
            (2, NODE1),
            (3, NODE2),
        ]
        assert await log.acquire_leases([], NODE1, TTL, T0) == {}

    async def test_lease_traffic_racing_appends_never_deadlocks(
        self, log: Store, log2: Store
    ) -> None:
        parts = [0, 1, 2, 3]
        epochs = await log.acquire_leases(parts, NODE1, TTL, T0)

        async def appends() -> None:
            for i in range(40):
                await log.append([AppendBatch(p, epochs[p], NODE1, [rec(i)]) for p in parts[::-1]])

        async def renewals() -> None:
            for i in range(40):
                assert await log.renew_leases(NODE1, epochs, TTL, T0 + i) == set(parts)

        async def poachers() -> None:
            for i in range(40):
                assert await log2.acquire_leases(parts[::-1], NODE2, TTL, T0 + i) == {}

        await asyncio.gather(appends(), renewals(), poachers())
        assert [await log.end_offset(p) for p in parts] == [40] * 4

    # --- nodes and cluster meta ----------------------------------------------------------------

    async def test_nodes_register_heartbeat_and_liveness(self, log: Store) -> None:
        await log.register_node(NODE1, "10.0.0.1", 9092, "http://10.0.0.1:8080", T0)
        await log.register_node(NODE2, "10.0.0.2", 9093, None, T0)
        assert await log.heartbeat_node(NODE1, T0 + 5000)
        assert not await log.heartbeat_node(99, T0)
        live = await log.live_nodes(T0 + 6000, ttl_ms=3000)
        assert [(n.node_id, n.kafka_host, n.kafka_port, n.admin_url) for n in live] == [
            (NODE1, "10.0.0.1", 9092, "http://10.0.0.1:8080")
        ]
        assert live[0].heartbeat_ms == T0 + 5000 and live[0].started_ms == T0
        assert [n.node_id for n in await log.live_nodes(T0 + 1, ttl_ms=3000)] == [NODE1, NODE2]
        # a restarted node re-registers with new coordinates
        await log.register_node(NODE2, "10.0.0.3", 9094, None, T0 + 7000)
        again = await log.live_nodes(T0 + 7000, ttl_ms=3000)
        assert [(n.node_id, n.kafka_host, n.started_ms) for n in again] == [
            (NODE1, "10.0.0.1", T0),
            (NODE2, "10.0.0.3", T0 + 7000),
        ]
        await log.deregister_node(NODE2)
        assert [n.node_id for n in await log.live_nodes(T0 + 7000, ttl_ms=3000)] == [NODE1]

    async def test_log_partitions_are_fixed_at_first_use(self, log: Store, log2: Store) -> None:
        assert await log.log_partitions() is None
        assert await log.ensure_log_partitions(8) == 8
        assert await log2.ensure_log_partitions(8) == 8
        with pytest.raises(ConfigMismatch):
            await log2.ensure_log_partitions(16)
        assert await log.log_partitions() == 8

    async def test_cluster_id_is_made_once_and_shared(self, log: Store, log2: Store) -> None:
        first = await log.ensure_cluster_id()
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", first)  # Kafka's shape: 16 bytes, base64url
        assert await log2.ensure_cluster_id() == first == await log.ensure_cluster_id()

    # --- errors --------------------------------------------------------------------------------

    async def test_unreachable_database_raises_a_storage_error(
        self, open_unreachable: OpenStore
    ) -> None:
        with pytest.raises(OperationalError):
            await open_unreachable()

    # --- the group-commit writer ---------------------------------------------------------------

    async def test_writer_group_commits_concurrent_submissions(self, log: Store) -> None:
        parts = [0, 1, 2, 3]
        epochs = await log.acquire_leases(parts, NODE1, TTL, T0)
        counting = CountingLog(log)
        writer = LogWriter(counting, NODE1)
        writer.start()
        results: dict[int, list[tuple[int, int]]] = {p: [] for p in parts}

        async def client(c: int) -> None:
            p = parts[c % len(parts)]
            for i in range(10):
                offset = await writer.submit(p, epochs[p], [rec(c * 1000 + i)])
                results[p].append((offset, c * 1000 + i))

        await asyncio.gather(*(client(c) for c in range(100)))
        await writer.stop()

        submissions = 100 * 10
        assert sum(len(call) for call in counting.calls) == submissions
        assert len(counting.calls) <= submissions // 10, len(counting.calls)
        assert writer.transactions == len(counting.calls)
        assert writer.records_written == submissions
        for p in parts:
            stored = await read_all(log, p)
            assert (
                sorted(o for o, _ in results[p])
                == list(range(len(stored)))
                == [s.offset for s in stored]
            )
            # each future got the offset its own record landed at
            by_offset = {s.offset: s.key for s in stored}
            assert all(by_offset[o] == f"k{i}".encode() for o, i in results[p])

    async def test_writer_offsets_follow_submission_order(self, log: Store) -> None:
        e = await self.lease(log, 0)
        writer = LogWriter(log, NODE1)
        futures = [writer.submit(0, e, [rec(i), rec(i)]) for i in range(50)]
        writer.start()
        assert await asyncio.gather(*futures) == [2 * i + 1 for i in range(50)]
        await writer.stop()

    async def test_writer_caps_records_per_transaction(self, log: Store) -> None:
        e = await self.lease(log, 0)
        counting = CountingLog(log)
        writer = LogWriter(counting, NODE1, max_records_per_txn=100)
        futures = [writer.submit(0, e, [rec(i) for _ in range(30)]) for i in range(10)]
        futures.append(writer.submit(0, e, [rec(i) for i in range(250)]))  # alone, over the cap
        writer.start()
        await asyncio.gather(*futures)
        await writer.stop()
        sizes = [sum(len(b.records) for b in call) for call in counting.calls]
        assert sizes == [90, 90, 90, 30, 250]
        assert await log.end_offset(0) == 550

    async def test_writer_fenced_partition_does_not_fail_the_others(
        self, log: Store, log2: Store
    ) -> None:
        epochs = await log.acquire_leases([0, 1], NODE1, TTL, T0)
        assert await log2.acquire_lease(1, NODE2, TTL, T0 + TTL) == epochs[1] + 1  # stolen
        counting = CountingLog(log)
        writer = LogWriter(counting, NODE1)
        futures = {(p, i): writer.submit(p, epochs[p], [rec(i)]) for i in range(5) for p in (0, 1)}
        writer.start()
        await asyncio.wait(futures.values())
        await writer.stop()
        for (p, i), fut in futures.items():
            if p == 0:
                assert fut.result() == i
            else:
                assert isinstance(fut.exception(), FencedError)
        assert len(counting.calls) == 2  # rejected once, retried without partition 1
        assert writer.failing is None  # a fenced partition is not the store failing
        assert await log.end_offset(1) == 0 and await log.end_offset(0) == 5

    async def test_writer_storage_error_fails_the_transaction_only(self, log: Store) -> None:
        e = await self.lease(log, 0)
        counting = CountingLog(log)
        counting.fail_next.append(OperationalError("disk on fire"))
        writer = LogWriter(counting, NODE1)
        doomed = [writer.submit(0, e, [rec(i)]) for i in range(3)]
        writer.start()
        await asyncio.wait(doomed)
        assert all(isinstance(f.exception(), OperationalError) for f in doomed)
        assert writer.failing is not None and "disk on fire" in writer.failing[0]  # /readyz
        assert await writer.submit(0, e, [rec(9)]) == 0
        assert writer.failing is None  # the store takes writes again
        await writer.stop()

    async def test_writer_stop_flushes_then_refuses(self, log: Store) -> None:
        e = await self.lease(log, 0)
        writer = LogWriter(log, NODE1)
        writer.start()
        pending = [writer.submit(0, e, [rec(i)]) for i in range(20)]
        await writer.stop()
        assert [f.result() for f in pending] == list(range(20))
        late = writer.submit(0, e, [rec(0)])
        with pytest.raises(WriterStopped):
            await late

    async def test_two_nodes_write_their_own_partitions_concurrently(
        self, log: Store, log2: Store
    ) -> None:
        e1 = await self.lease(log, 0, NODE1)
        e2 = await self.lease(log2, 1, NODE2)
        w1, w2 = LogWriter(log, NODE1), LogWriter(log2, NODE2)
        w1.start()
        w2.start()

        async def client(w: LogWriter, p: int, e: int, c: int) -> list[int]:
            return [await w.submit(p, e, [rec(c * 100 + i)]) for i in range(20)]

        out = await asyncio.gather(
            *(client(w1, 0, e1, c) for c in range(10)),
            *(client(w2, 1, e2, c) for c in range(10)),
        )
        await w1.stop()
        await w2.stop()
        assert sorted(o for offsets in out[:10] for o in offsets) == list(range(200))
        assert sorted(o for offsets in out[10:] for o in offsets) == list(range(200))
        for p, node in ((0, NODE1), (1, NODE2)):
            stored = await read_all(log, p)
            assert [s.offset for s in stored] == list(range(200))
            assert {s.node_id for s in stored} == {node}

    # --- compaction --------------------------------------------------------------------------

    async def compact_fully(self, log: Store, partition: int, epoch: int) -> None:
        # two rounds: a tombstone goes only once the values it deleted are gone
        for _ in range(2):
            await log.compact(partition, NODE1, epoch, tombstone_cutoff_ms=T0 * 2, chunk_offsets=7)

    async def test_young_tombstones_and_the_last_row_are_kept(self, log: Store) -> None:
        e = await self.lease(log, 0)
        await log.append([AppendBatch(0, e, NODE1, [rec(1, None), rec(2, None)])], now_ms=T0)
        await log.compact(0, NODE1, e, tombstone_cutoff_ms=T0)  # not older than the cutoff
        assert len(await read_all(log, 0)) == 2
        await log.compact(0, NODE1, e, tombstone_cutoff_ms=T0 + 1)
        assert [s.offset for s in await read_all(log, 0)] == [1]  # the last row stays

    async def test_compaction_is_fenced_like_an_append(self, log: Store, log2: Store) -> None:
        e = await self.lease(log, 0)
        await log.append([AppendBatch(0, e, NODE1, [rec(1), rec(1)])])
        assert await log.release_lease(0, NODE1, e)
        await self.lease(log2, 0, NODE2)
        with pytest.raises(FencedError):
            await log.compact(0, NODE1, e, tombstone_cutoff_ms=T0)
        assert len(await read_all(log, 0)) == 2

    async def test_compaction_during_a_paged_load_loses_nothing(self, log: Store) -> None:
        e = await self.lease(log, 0)
        records = []
        for i in range(200):
            value = None if i % 11 == 0 else OffsetValue(i, -1, "", T0, -1)
            records.append(offset_record("g", "t", i % 7, value))
        await log.append([AppendBatch(0, e, NODE1, records)], now_ms=T0)
        seen: list[StoredRecord] = []
        async with contextlib.aclosing(log.read(0, batch_size=10, snapshot=True)) as pages:
            async for page in pages:
                seen.extend(page)
                if len(seen) == 10:  # compact twice between two pages of the load
                    await self.compact_fully(log, 0, e)
        assert replayed_state([s.record() for s in seen]) == replayed_state(records)

    async def test_read_latest_keeps_the_newest_record_per_key_in_offset_order(
        self, log: Store
    ) -> None:
        e = await self.lease(log, 0)
        records = []
        for i in range(120):
            value = None if i % 11 == 0 else OffsetValue(i, -1, "", T0, -1)
            records.append(offset_record("g", "t", i % 7, value))
            if i % 40 == 0:
                records.append(group_record("g", None))
        await log.append([AppendBatch(0, e, NODE1, records)], now_ms=T0)
        await log.append([AppendBatch(1, await self.lease(log, 1), NODE1, records[:3])])
        latest = await log.read_latest(0, page_size=9)  # many pages
        assert latest.scanned == len(records)
        expected = {}  # key -> (position, record): the last one wins
        for i, r in enumerate(records):
            expected[(r.type, r.key)] = (i, r)
        assert latest.records == [r for _, r in sorted(expected.values(), key=lambda x: x[0])]
        assert any(r.value is None for r in latest.records), "tombstones are kept"
        assert replayed_state(latest.records) == replayed_state(records)
        assert (await log.read_latest(2)) == (0, [])

    def test_replaying_the_compacted_log_equals_replaying_the_full_log(
        self, open_store: OpenStore
    ) -> None:
        partitions = iter(range(10_000))

        @settings(max_examples=40, deadline=None)
        @given(history=histories)
        @example(history=FOUND_FAILING)
        def check(history: list[Record]) -> None:
            async def run() -> None:
                log = await open_store(record_types=RecordType)
                try:
                    p = next(partitions)
                    e = await self.lease(log, p)
                    for i in range(0, len(history), 5):  # several transactions
                        await log.append([AppendBatch(p, e, NODE1, history[i : i + 5])], now_ms=T0)
                    latest = await log.read_latest(p, page_size=4)
                    await self.compact_fully(log, p, e)
                    compacted = [s.record() for s in await read_all(log, p)]
                finally:
                    await log.close()
                assert replayed_state(compacted) == replayed_state(history)
                assert replayed_state(latest.records) == replayed_state(history)
                keys = [(r.type, r.key) for r in compacted[:-1]]
                assert len(keys) == len(set(keys)), "one record per key (but the last row)"
                assert all(r.value is not None for r in compacted[:-1]), "tombstones dropped"

            asyncio.run(run())

        check()
