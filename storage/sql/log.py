"""The SQL event log: fenced group-commit appends, streaming reads, leases, nodes, cluster meta.

EventLog is the one object callers use. It appends and reads here; its lease operations
(storage/sql/leases.py), compaction (storage/sql/compaction.py), and nodes and cluster meta
(storage/sql/cluster.py) are the classes it is made of, all on the connections of
storage/sql/database.py.

Design notes (design.md §6 "one writer per log partition, fenced by epoch"):

* The fence is checked in the same transaction as the insert. SQLite: the transaction starts
  with BEGIN IMMEDIATE, so the whole database is write-locked before the lease rows are read.
  PostgreSQL: the lease rows are read FOR SHARE, in partition order; a takeover must UPDATE the
  row and therefore waits until the append commits (and the append that comes after it sees the
  new epoch). Lease writers lock rows in partition order too, so the two never deadlock.
* Offsets are dense per partition: next = max(offset) + 1, cached per (partition, epoch) after
  the first read. An epoch is held by a single node and every append is fenced on it, so nobody
  else can have written to the partition at that epoch: the cache stays exact. Any failure
  clears the cache (the outcome of a failed commit is unknown).
* Within one process, appends are serialized by a lock, and a takeover waits for the old
  owner's in-flight append (above), so per partition transactions commit in offset order: a
  reader tailing the log cannot see offset n+1 before offset n (the gap pyeventsourcing warns
  about with sequence-assigned ids cannot happen). That is what lets read() page by keyset.
* Offsets are never reused only as long as the highest offset of a partition stays in the
  table: compaction must keep each partition's last row (Kafka never cleans the active segment).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, cast

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.envelope import (
    AppendBatch,
    Envelope,
    LatestRecords,
    StoredRecord,
    TypeNames,
    type_names,
)
from storage.errors import translate_errors
from storage.ports import CompactionStats, LeaseRow, NodeRow
from storage.sql.cluster import Cluster
from storage.sql.compaction import Compaction
from storage.sql.database import Database, wall_clock_ms
from storage.sql.leases import Leases, fence
from storage.sql.pg_append import MAX_STATEMENT_BYTES, Claim, Columns
from storage.sql.security import Security
from storage.sql.statements import Rows, Txn
from storage.sql.tables import log_history, log_records

__all__ = [
    "AppendBatch",
    "CompactionStats",
    "Envelope",
    "EventLog",
    "LatestRecords",
    "LeaseRow",
    "NodeRow",
    "StoredRecord",
]


def _stored(partition: int, rows: Rows, types: TypeNames) -> list[StoredRecord]:
    new = tuple.__new__
    name = types.get
    # Both drivers return bytes for BLOB/bytea: no copies.
    return [
        new(StoredRecord, (partition, o, name(t, t), k, v, e, a, n)) for o, t, k, v, e, a, n in rows
    ]


class _Newest:
    """The newest row of each (record type, key) seen, for read_latest."""

    def __init__(self) -> None:
        # a key is unique only within its record type: one dict per type
        self._by_type: dict[int, dict[bytes, Sequence[Any]]] = {}
        self.scanned = 0

    def keep(self, rows: Rows) -> None:
        """Rows of (offset, record_type, key, value), in offset order."""
        latest = self._by_type
        for row in rows:
            by_key = latest.get(row[1])
            if by_key is None:
                by_key = latest[row[1]] = {}
            by_key[row[2]] = row
        self.scanned += len(rows)

    def records(self, types: TypeNames) -> list[Envelope]:
        rows = sorted((r for by_key in self._by_type.values() for r in by_key.values()),
                      key=lambda r: r[0])  # fmt: skip
        name = types.get
        return [Envelope(name(t, t), k, v) for _, t, k, v in rows]


class EventLog(Leases, Cluster, Compaction, Security):
    """Create with `await EventLog.open(url)`; the schema must exist (storage.migrate)."""

    def __init__(self, db: Database, record_types: Iterable[int] = ()) -> None:
        self._db = db
        self._types = type_names(record_types)
        self._append_lock = asyncio.Lock()
        # partition -> (epoch the cache was filled under, next offset)
        self._next_offsets: dict[int, tuple[int, int]] = {}

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool = False,
        busy_timeout_ms: int = 5000,
        lock_wait_ms: int | None = None,
        record_types: Iterable[int] = (),
        **engine_kwargs: Any,
    ) -> EventLog:
        """Open the log at `url` (sqlite:///path or postgresql://...; async drivers are implied).

        `migrate=True` runs `alembic upgrade head` first. Fails fast with OperationalError if the
        database cannot be reached. `engine_kwargs` go to create_async_engine (pool_size, ...).

        `lock_wait_ms` (PostgreSQL): no statement waits longer than this for a lock, and a
        transaction left idle this long is ended by the server (idle_in_transaction_session_
        timeout, twice as long). A node frozen mid-transaction (SIGSTOP, a long stall) would
        otherwise hold lease-row locks and stall every other node's lease round, and with it
        the whole cluster, for as long as it is frozen.

        `record_types` (e.g. an IntEnum class): reads return these members for their numbers
        instead of plain ints.
        """
        db = await Database.open(
            url,
            migrate=migrate,
            busy_timeout_ms=busy_timeout_ms,
            lock_wait_ms=lock_wait_ms,
            **engine_kwargs,
        )
        return cls(db, record_types)

    async def close(self) -> None:
        await self._db.close()

    @property
    def engine(self) -> AsyncEngine:
        return self._db.engine

    def snapshot(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """One read transaction whose statements all see the same committed state."""
        return self._db.snapshot()

    # --- log -------------------------------------------------------------------------------

    async def append(
        self, batches: Sequence[AppendBatch], *, now_ms: int | None = None
    ) -> list[int]:
        """Append all batches in one transaction; return the last offset written per batch.

        Raises FencedError(partition) if any batch's writer does not hold that partition's lease
        at its epoch; then nothing at all is written. An empty batch is fenced like any other
        and returns the partition's current last offset (-1 if empty).
        """
        if not batches:
            return []
        t = wall_clock_ms() if now_ms is None else now_ms
        async with self._append_lock:
            try:
                return await self._append(batches, t)
            except BaseException:
                self._next_offsets.clear()
                raise

    async def _append(self, batches: Sequence[AppendBatch], now_ms: int) -> list[int]:
        claims = [(b.partition, b.node_id, b.epoch) for b in batches]
        nxt, missing = self._cached_next(batches)
        pg = self._db.pg_appender
        cols = None if pg is None or missing else self._columns(batches, nxt)
        if pg is not None and cols is not None:
            # the usual case on PostgreSQL: fence and insert in one statement, one round trip
            last = await pg.append(sorted(set(claims)), cols, now_ms)
            nxt = cols.next_offsets
        else:
            txn = self._append_txn(batches, claims, nxt, missing, now_ms)
            last = await self._db.transact(txn)
        epochs = {b.partition: b.epoch for b in batches}
        for p in epochs:  # committed: the cache may advance
            self._next_offsets[p] = (epochs[p], nxt[p])
        return last

    def _append_txn(
        self,
        batches: Sequence[AppendBatch],
        claims: Sequence[Claim],
        nxt: dict[int, int],
        missing: list[int],
        now_ms: int,
    ) -> Txn[list[int]]:
        """Fence, fill `nxt` for the partitions the cache does not know, insert (multi-row
        INSERTs); advances `nxt` past what it wrote."""
        sql = self._db.sql
        yield from fence(sql, claims)
        if missing:
            (maxes,) = yield sql.max_offsets(missing)
            for p, m in zip(missing, maxes, strict=True):
                nxt[p] = 0 if m is None else int(m) + 1
        rows, last = self._rows(batches, nxt, now_ms)
        for stmt in sql.append_rows(rows):  # noqa: UP028 - the runner sends each one's rows back
            yield stmt
        return last

    def _cached_next(self, batches: Sequence[AppendBatch]) -> tuple[dict[int, int], list[int]]:
        """Next offsets known from the cache, and the partitions whose next offset is not."""
        nxt: dict[int, int] = {}
        missing: list[int] = []
        for b in batches:
            if b.partition in nxt or b.partition in missing:
                continue
            cached = self._next_offsets.get(b.partition)
            if cached is not None and cached[0] == b.epoch:
                nxt[b.partition] = cached[1]
            else:
                missing.append(b.partition)
        return nxt, missing

    @staticmethod
    def _rows(
        batches: Sequence[AppendBatch], nxt: dict[int, int], now_ms: int
    ) -> tuple[list[tuple[Any, ...]], list[int]]:
        """The rows to insert, in LOG_COLUMNS order (advancing `nxt`), and the last offset of
        each batch."""
        rows: list[tuple[Any, ...]] = []
        last: list[int] = []
        for b in batches:
            p, o, e, n = b.partition, nxt[b.partition], b.epoch, b.node_id
            rows.extend(
                (p, o + i, int(r.type), r.key, r.value, e, n, now_ms)
                for i, r in enumerate(b.records)
            )
            o += len(b.records)
            nxt[p] = o
            last.append(o - 1)
        return rows, last

    @staticmethod
    def _columns(batches: Sequence[AppendBatch], nxt: dict[int, int]) -> Columns | None:
        """_rows for PgAppender: the same rows, column by column (the append time is one
        parameter), with the next offsets after them and each batch's last offset; None when
        the keys and values add up to more than one statement should carry."""
        cols = Columns(nxt)
        nxt = cols.next_offsets
        size = 0
        for b in batches:
            p, o, n = b.partition, nxt[b.partition], len(b.records)
            cols.partitions += [p] * n
            cols.offsets += range(o, o + n)
            cols.epochs += [b.epoch] * n
            cols.nodes += [b.node_id] * n
            for r in b.records:
                value = r.value
                cols.types.append(int(r.type))
                cols.keys.append(r.key)
                cols.values.append(value)
                size += len(r.key) + (0 if value is None else len(value))
            if size > MAX_STATEMENT_BYTES:
                return None
            o += n
            nxt[p] = o
            cols.last.append(o - 1)
        return cols

    async def read(
        self,
        partition: int,
        from_offset: int = 0,
        batch_size: int = 10000,
        *,
        until_offset: int | None = None,
        snapshot: bool = False,
    ) -> AsyncGenerator[list[StoredRecord], None]:
        """Stream [from_offset, until_offset) of `partition` in offset order, in lists of at most
        `batch_size` records; memory stays bounded by one batch whatever the partition size.

        Each batch is one keyset query (offset >= next, LIMIT batch_size). Keyset pages never
        skip a row: per partition, offsets commit in increasing order (single fenced writer,
        serialized appends), so a tailing reader that resumes from its last offset + 1 sees
        every row even on PostgreSQL, where transactions may commit out of order globally.

        Without `snapshot`, the connection goes back to the pool before each batch is yielded,
        so a slow consumer holds no connection and no transaction. With `snapshot`, all pages
        come from one read transaction (REPEATABLE READ on PostgreSQL, a WAL read snapshot on
        SQLite): the result is the partition as of one commit point, whatever compaction does
        meanwhile. Loading uses it (a tombstone removed mid-load must not resurrect its key);
        callers bound how many such reads run at once, since each holds a connection.
        """
        R = log_records.c
        base = (
            select(R.offset, R.record_type, R.key, R.value, R.epoch, R.append_time_ms, R.node_id)
            .where(R.partition == partition)
            .order_by(R.offset)
            .limit(batch_size)
        )
        if until_offset is not None:
            base = base.where(R.offset < until_offset)
        nxt = from_offset
        async with self._pages(snapshot) as fetch:
            while True:
                rows = await fetch(base.where(R.offset >= nxt))
                if not rows:
                    return
                batch = _stored(partition, rows, self._types)
                nxt = batch[-1].offset + 1
                yield batch
                if len(batch) < batch_size:
                    return

    @asynccontextmanager
    async def _pages(
        self, snapshot: bool
    ) -> AsyncIterator[Callable[[Select[Any]], Awaitable[Rows]]]:
        """How read() fetches a page: all in one snapshot, or each on a connection it gives
        back before the page is yielded."""
        if snapshot:
            async with self._db.snapshot() as conn:

                async def in_snapshot(stmt: Select[Any]) -> Rows:
                    with translate_errors():
                        return cast(Rows, (await conn.execute(stmt)).all())

                yield in_snapshot
        else:

            async def on_its_own(stmt: Select[Any]) -> Rows:
                async with self._db.read() as conn:
                    return cast(Rows, (await conn.execute(stmt)).all())

            yield on_its_own

    async def newest_offset_of(self, partition: int, record_type: int, key: bytes) -> int | None:
        """The offset of the newest record of a key (to name a record a load could not use)."""
        R = log_records.c
        async with self._db.read() as conn:
            found = await conn.execute(
                select(func.max(R.offset)).where(
                    R.partition == partition, R.record_type == record_type, R.key == key
                )
            )
            offset = found.scalar_one_or_none()
            return None if offset is None else int(offset)

    async def key_history(
        self, partition: int, record_type: int, key: bytes, limit: int = 2_000
    ) -> list[tuple[int, int, bytes | None]]:
        """(offset, append time ms, value) of the newest `limit` records of one key, in offset
        order: those compaction archived (log_history) and those still in the log."""
        R, H = log_records.c, log_history.c
        live = select(R.offset, R.append_time_ms, R.value).where(
            R.partition == partition, R.record_type == record_type, R.key == key
        )
        archived = select(H.offset, H.append_time_ms, H.value).where(
            H.partition == partition, H.record_type == record_type, H.key == key
        )
        both = live.union_all(archived).subquery()
        stmt = select(both).order_by(both.c.offset.desc()).limit(limit)
        async with self._db.read() as conn:
            rows = (await conn.execute(stmt)).all()
        # a record archived and not yet deleted from the log appears twice: keep one
        seen = {int(r[0]): (int(r[0]), int(r[1]), r[2]) for r in rows}
        return [seen[o] for o in sorted(seen)]

    async def read_latest(self, partition: int, page_size: int = 20_000) -> LatestRecords:
        """The newest record of every key of `partition` (tombstones included), in offset order,
        as of one read snapshot: what a load replays.

        Replaying only these equals replaying the whole partition (the same equivalence that
        lets compaction drop superseded records; proven by the compaction tests), and a log
        that is mostly superseded commits then costs a dictionary store per row instead of a
        decode. Rows come through the bare driver cursor, four columns, no Row objects: the
        scan, not SQLAlchemy, sets the pace. Memory is bounded by the live keys.
        """
        db = self._db
        sql = db.sql.latest_page_sql
        newest = _Newest()
        if db.sqlite_reader is not None:
            # the whole scan in one hop on the reader thread: one statement, one snapshot

            def scan(conn: sqlite3.Connection) -> None:
                cur = conn.execute(sql, (partition, 0, -1))
                while rows := cur.fetchmany(page_size):
                    newest.keep(rows)

            await db.sqlite_reader.run(scan)
            return LatestRecords(newest.scanned, newest.records(self._types))
        nxt = 0
        async with db.snapshot() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None  # a checked-out pool connection always has one
            while True:
                with translate_errors():
                    rows = await db.dialect.fetch(driver, sql, partition, nxt, page_size)
                if not rows:
                    break
                newest.keep(rows)
                nxt = rows[-1][0] + 1
                if len(rows) < page_size:
                    break
        return LatestRecords(newest.scanned, newest.records(self._types))

    async def end_offset(self, partition: int) -> int:
        """The next offset to be written to `partition` (0 when empty)."""
        R = log_records.c
        async with self._db.read() as conn:
            m = (
                await conn.execute(select(func.max(R.offset)).where(R.partition == partition))
            ).scalar()
        return 0 if m is None else int(m) + 1
