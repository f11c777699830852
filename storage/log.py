"""The SQL event log: fenced group-commit appends, streaming reads, leases, nodes, cluster meta.

Design notes (DESIGN.md §4 "one writer per log partition, fenced by epoch"):

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
import functools
import sqlite3
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import BigInteger, bindparam, func, insert, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage import errors
from storage.columns import LOG_COLUMN_NAMES
from storage.engine import create_engine, sqlite_file, write_engine
from storage.envelope import (
    AppendBatch,
    Envelope,
    LatestRecords,
    StoredRecord,
    TypeNames,
    type_names,
)
from storage.errors import translate_errors
from storage.migrate import upgrade_async
from storage.tables import cluster_meta, log_history, log_records, nodes, partition_leases

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

LOG_PARTITIONS = "log_partitions"

_Rows = Sequence[tuple[Any, ...]]  # result rows as plain tuples (typing only; Row is a tuple)


def _stored(partition: int, rows: _Rows, types: TypeNames) -> list[StoredRecord]:
    new = tuple.__new__
    name = types.get
    # Both drivers return bytes for BLOB/bytea: no copies.
    return [
        new(StoredRecord, (partition, o, name(t, t), k, v, e, a, n))
        for o, t, k, v, e, a, n in rows
    ]


@dataclass(slots=True)
class CompactionStats:
    partition: int
    scanned: int = 0  # offsets covered
    removed: int = 0
    archived: int = 0


@dataclass(frozen=True, slots=True)
class LeaseRow:
    partition: int
    owner_node_id: int | None  # None = released
    epoch: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class NodeRow:
    node_id: int
    kafka_host: str
    kafka_port: int
    admin_url: str | None
    heartbeat_ms: int
    started_ms: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


T = TypeVar("T")


def _sqlite_leases(
    conn: sqlite3.Connection, partitions: Iterable[int]
) -> dict[int, tuple[int | None, int]]:
    """partition -> (owner, epoch) of the lease rows, inside a SqliteThread transaction."""
    parts = sorted(partitions)
    rows = conn.execute(
        'SELECT "partition", owner_node_id, epoch FROM partition_leases '
        f'WHERE "partition" IN ({",".join("?" * len(parts))})',
        parts,
    )
    return {p: (owner, epoch) for p, owner, epoch in rows}


class SqliteThread:
    """Short SQLite transactions in one thread hop each, on a dedicated thread with its own
    sqlite3 connection (WAL, synchronous=FULL, like the engine's).

    Through aiosqlite every statement of a transaction is its own hop to the driver thread and
    back (an append took ~11), and the database write lock stays held across those event-loop
    turns: on a busy node a lease renewal then waited behind a stream of appends. Here a whole
    transaction runs in one hop, holding the lock only for the statements themselves. One
    instance writes (appends, lease renewals: BEGIN IMMEDIATE); another reads partitions for
    loads (a read transaction: one WAL snapshot), so a load never delays an append. Everything
    else keeps going through SQLAlchemy.
    """

    def __init__(self, path: Path, busy_timeout_ms: int, *, write: bool) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_ms / 1000
        self._begin = "BEGIN IMMEDIATE" if write else "BEGIN"
        self._executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="sqlite-writer" if write else "sqlite-reader"
        )
        self._conn: sqlite3.Connection | None = None

    def _connection(self) -> sqlite3.Connection:  # on this instance's thread only
        if self._conn is None:
            conn = sqlite3.connect(
                self._path, timeout=self._busy_timeout_s, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            self._conn = conn
        return self._conn

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            conn = self._connection()
            conn.execute(self._begin)
            try:
                result = fn(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError as e:
            raise errors.IntegrityError(f"{type(e).__name__}: {e}") from e
        except sqlite3.OperationalError as e:
            raise errors.OperationalError(f"{type(e).__name__}: {e}") from e
        except sqlite3.Error as e:
            raise errors.StorageError(f"{type(e).__name__}: {e}") from e
        return result

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(conn)` inside one transaction, committed if it returns. If the caller
        is cancelled, the transaction still runs to its end (its outcome is then unknown to
        the caller, as with any interrupted commit)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(self._transaction, fn)
        )

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)


class EventLog:
    """Create with `await EventLog.open(url)`; the schema must exist (storage.migrate)."""

    def __init__(
        self,
        engine: AsyncEngine,
        sqlite_threads: tuple[SqliteThread, SqliteThread] | None = None,
        record_types: Iterable[int] = (),
    ) -> None:
        self._engine = engine
        self._types = type_names(record_types)
        # SQLite files only (None on PostgreSQL and for in-memory databases)
        self._sqlite_writer: SqliteThread | None = None
        self._sqlite_reader: SqliteThread | None = None
        if sqlite_threads is not None:
            self._sqlite_writer, self._sqlite_reader = sqlite_threads
        self._writes = write_engine(engine)
        self._pg = engine.dialect.name == "postgresql"
        self._append_lock = asyncio.Lock()
        # The append INSERT, precompiled for the driver: executemany of plain tuples through
        # exec_driver_sql skips SQLAlchemy's per-row parameter processing (measured ~3x on
        # aiosqlite, ~1.5x on asyncpg against conn.execute(insert(...), [dicts])).
        compiled = insert(log_records).compile(dialect=engine.dialect)
        if tuple(compiled.positiontup or ()) != LOG_COLUMN_NAMES:
            raise RuntimeError(f"unexpected INSERT parameter order {compiled.positiontup}")
        self._append_sql = str(compiled)
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
        if migrate:
            await upgrade_async(url)
        if lock_wait_ms is not None and not url.startswith("sqlite"):
            settings = engine_kwargs.setdefault("connect_args", {}).setdefault(
                "server_settings", {}
            )
            settings.setdefault("lock_timeout", str(lock_wait_ms))
            settings.setdefault("idle_in_transaction_session_timeout", str(2 * lock_wait_ms))
        with translate_errors():  # e.g. the SQLite file's directory cannot be created
            engine = create_engine(url, busy_timeout_ms=busy_timeout_ms, **engine_kwargs)
        try:
            with translate_errors():
                async with engine.connect() as conn:
                    await conn.execute(select(1))
        except BaseException:
            await engine.dispose()
            raise
        # a file (not an in-memory database, which a second connection would not see)
        path = sqlite_file(engine.url) if engine.dialect.name == "sqlite" else None
        if path is None:
            return cls(engine, record_types=record_types)
        return cls(
            engine,
            (
                SqliteThread(path, busy_timeout_ms, write=True),
                SqliteThread(path, busy_timeout_ms, write=False),
            ),
            record_types,
        )

    async def close(self) -> None:
        for thread in (self._sqlite_writer, self._sqlite_reader):
            if thread is not None:
                await thread.close()
        await self._engine.dispose()

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @asynccontextmanager
    async def _write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction (BEGIN IMMEDIATE on SQLite), committed on clean exit."""
        with translate_errors():
            async with self._writes.begin() as conn:
                yield conn

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[AsyncConnection]:
        with translate_errors():
            async with self._engine.connect() as conn:
                yield conn

    def _insert(self, table: Any) -> Any:
        """A dialect INSERT that supports on_conflict_do_nothing/on_conflict_do_update."""
        return postgresql.insert(table) if self._pg else sqlite.insert(table)

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
        t = _now_ms() if now_ms is None else now_ms
        async with self._append_lock:
            try:
                return await self._append(batches, t)
            except BaseException:
                self._next_offsets.clear()
                raise

    @staticmethod
    def _check_fence(
        claims: Sequence[tuple[int, int, int]], leases: dict[int, tuple[int | None, int]]
    ) -> None:
        for partition, node_id, claimed in claims:
            owner, epoch = leases.get(partition, (None, None))
            if owner != node_id or epoch != claimed:
                raise errors.FencedError(partition, claimed, owner, epoch)

    async def _fence(
        self, conn: AsyncConnection, claims: Sequence[tuple[int, int, int]]
    ) -> None:
        """Raise FencedError unless each (partition, node_id, epoch) holds its lease. The lease
        rows stay locked until the transaction ends, so a takeover waits for us."""
        L = partition_leases.c
        parts = sorted({p for p, _, _ in claims})
        fence = select(L.partition, L.owner_node_id, L.epoch).where(L.partition.in_(parts))
        if self._pg:  # SQLite already holds the database write lock (BEGIN IMMEDIATE)
            fence = fence.order_by(L.partition).with_for_update(read=True)
        leases = {r.partition: (r.owner_node_id, r.epoch) for r in await conn.execute(fence)}
        self._check_fence(claims, leases)

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
        """The rows to insert (advancing `nxt`) and the last offset of each batch."""
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

    async def _append(self, batches: Sequence[AppendBatch], now_ms: int) -> list[int]:
        claims = [(b.partition, b.node_id, b.epoch) for b in batches]
        nxt, missing = self._cached_next(batches)
        if self._sqlite_writer is not None:

            def transaction(conn: sqlite3.Connection) -> list[int]:
                self._check_fence(claims, _sqlite_leases(conn, {p for p, _, _ in claims}))
                for p in missing:  # a primary-key lookup each
                    (m,) = conn.execute(
                        'SELECT max("offset") FROM log_records WHERE "partition" = ?', (p,)
                    ).fetchone()
                    nxt[p] = 0 if m is None else int(m) + 1
                rows, last = self._rows(batches, nxt, now_ms)
                if rows:
                    conn.executemany(self._append_sql, rows)
                return last

            last = await self._sqlite_writer.run(transaction)
        else:
            async with self._write() as conn:
                await self._fence(conn, claims)
                if missing:
                    # One round trip; each scalar subquery is a PK index lookup.
                    R = log_records.c
                    probe = select(
                        *(
                            select(func.max(R.offset)).where(R.partition == p).scalar_subquery()
                            for p in missing
                        )
                    )
                    maxes: tuple[Any, ...] = tuple((await conn.execute(probe)).one())
                    for p, m in zip(missing, maxes, strict=True):
                        nxt[p] = 0 if m is None else int(m) + 1
                rows, last = self._rows(batches, nxt, now_ms)
                if rows:
                    await conn.exec_driver_sql(self._append_sql, rows)  # one executemany
        epochs = {b.partition: b.epoch for b in batches}
        for p in epochs:  # committed: the cache may advance
            self._next_offsets[p] = (epochs[p], nxt[p])
        return last

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
        if snapshot:
            async with self.snapshot() as conn:
                while True:
                    with translate_errors():
                        rows = cast(_Rows, (await conn.execute(base.where(R.offset >= nxt))).all())
                    if not rows:
                        return
                    batch = _stored(partition, rows, self._types)
                    nxt = batch[-1].offset + 1
                    yield batch
                    if len(batch) < batch_size:
                        return
        while True:
            async with self._read() as conn:
                rows = cast(_Rows, (await conn.execute(base.where(R.offset >= nxt))).all())
            if not rows:
                return
            batch = _stored(partition, rows, self._types)
            nxt = batch[-1].offset + 1
            yield batch
            if len(batch) < batch_size:
                return

    async def read_latest(self, partition: int, page_size: int = 20_000) -> LatestRecords:
        """The newest record of every key of `partition` (tombstones included), in offset order,
        as of one read snapshot: what a load replays.

        Replaying only these equals replaying the whole partition (the same equivalence that
        lets compaction drop superseded records; proven by the compaction tests), and a log
        that is mostly superseded commits then costs a dictionary store per row instead of a
        decode. Rows come through the bare driver cursor, four columns, no Row objects: the
        scan, not SQLAlchemy, sets the pace. Memory is bounded by the live keys.
        """
        if self._pg:
            sql = (
                'SELECT "offset", record_type, key, value FROM log_records '
                'WHERE "partition" = $1 AND "offset" >= $2 ORDER BY "offset" LIMIT $3'
            )
        else:
            sql = (
                'SELECT "offset", record_type, key, value FROM log_records '
                'WHERE "partition" = ? AND "offset" >= ? ORDER BY "offset" LIMIT ?'
            )
        # offset and group keys are disjoint byte strings (see records.py), but a type-less
        # key would alias across types: one dict per record type
        latest: dict[int, dict[bytes, tuple[Any, ...]]] = {}

        def keep(rows: Sequence[Any]) -> None:
            for row in rows:
                by_key = latest.get(row[1])
                if by_key is None:
                    by_key = latest[row[1]] = {}
                by_key[row[2]] = row

        if self._sqlite_reader is not None:
            # the whole scan in one hop on the reader thread: one statement, one snapshot

            def scan(conn: sqlite3.Connection) -> int:
                cur = conn.execute(
                    'SELECT "offset", record_type, key, value FROM log_records '
                    'WHERE "partition" = ? ORDER BY "offset"',
                    (partition,),
                )
                n = 0
                while rows := cur.fetchmany(page_size):
                    keep(rows)
                    n += len(rows)
                return n

            scanned = await self._sqlite_reader.run(scan)
            return LatestRecords(scanned, self._survivors(latest))
        scanned = 0
        nxt = 0
        async with self.snapshot() as conn:
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None  # a checked-out pool connection always has one
            while True:
                with translate_errors():
                    if self._pg:
                        rows = await driver.fetch(sql, partition, nxt, page_size)
                    else:
                        async with driver.execute(sql, (partition, nxt, page_size)) as cur:
                            rows = await cur.fetchall()
                if not rows:
                    break
                keep(rows)
                scanned += len(rows)
                nxt = rows[-1][0] + 1
                if len(rows) < page_size:
                    break
        return LatestRecords(scanned, self._survivors(latest))

    def _survivors(self, latest: dict[int, dict[bytes, tuple[Any, ...]]]) -> list[Envelope]:
        rows = sorted((r for by_key in latest.values() for r in by_key.values()),
                      key=lambda r: r[0])  # fmt: skip
        name = self._types.get
        return [Envelope(name(t, t), k, v) for _, t, k, v in rows]

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """One read transaction whose statements all see the same committed state."""
        with translate_errors():
            async with self._engine.connect() as conn:
                if self._pg:
                    await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    if self._pg:
                        # a read snapshot locks no lease row, and its reader (a load, an
                        # export) legitimately idles between pages: exempt it from the
                        # frozen-writer timeout of `lock_wait_ms`
                        await conn.exec_driver_sql(
                            "SET LOCAL idle_in_transaction_session_timeout = 0"
                        )
                    yield conn

    async def end_offset(self, partition: int) -> int:
        """The next offset to be written to `partition` (0 when empty)."""
        R = log_records.c
        async with self._read() as conn:
            m = (
                await conn.execute(select(func.max(R.offset)).where(R.partition == partition))
            ).scalar()
        return 0 if m is None else int(m) + 1

    # --- compaction --------------------------------------------------------------------------

    async def compact(
        self,
        partition: int,
        node_id: int,
        epoch: int,
        *,
        tombstone_cutoff_ms: int,
        archive: bool = True,
        chunk_offsets: int = 5000,
        now_ms: int | None = None,
    ) -> CompactionStats:
        """Keep the newest record per key; drop tombstones appended before the cutoff.

        Fenced like an append (only the lease holder compacts), in short transactions of at
        most `chunk_offsets` offsets so appends are never blocked for long. Removed rows go to
        log_history when `archive`. Safe against a concurrent paged load: a superseded record
        is removed only when a newer one of its key exists further on, and a tombstone only once
        no older record of its key is left (an earlier round removed those) — a reader that saw
        the older value will still meet the tombstone. The partition's last row always stays,
        since the next offset is derived from it.
        """
        t = _now_ms() if now_ms is None else now_ms
        R = log_records.c
        async with self._read() as conn:
            lo, hi = (
                await conn.execute(
                    select(func.min(R.offset), func.max(R.offset)).where(
                        R.partition == partition
                    )
                )
            ).one()
        stats = CompactionStats(partition)
        if lo is None:
            return stats
        newer = log_records.alias("newer")
        N = newer.c
        superseded = (
            select(N.offset)
            .where(N.partition == partition, N.key == R.key, N.offset > R.offset)
            .where(N.record_type == R.record_type)
            .exists()
        )
        older = (
            select(N.offset)
            .where(N.partition == partition, N.key == R.key, N.offset < R.offset)
            .where(N.record_type == R.record_type)
            .exists()
        )
        expired_tombstone = (
            R.value.is_(None)
            & (R.append_time_ms < tombstone_cutoff_ms)
            & ~older
            & (R.offset != hi)
        )
        start = int(lo)
        while start <= hi:
            end = min(start + chunk_offsets, int(hi) + 1)
            async with self._write() as conn:
                await self._fence(conn, [(partition, node_id, epoch)])
                where = (R.partition == partition) & (R.offset >= start) & (R.offset < end)
                doomed = [
                    (o, v is None)
                    for o, v in await conn.execute(
                        select(R.offset, R.value.is_(None)).where(
                            where & (superseded | expired_tombstone)
                        )
                    )
                ]
                if doomed:
                    offsets = [o for o, _ in doomed]
                    chosen = (R.partition == partition) & R.offset.in_(offsets)
                    if archive:
                        cols = [R.partition, R.offset, R.record_type, R.key, R.value, R.epoch,
                                R.node_id, R.append_time_ms]
                        await conn.execute(
                            insert(log_history).from_select(
                                [c.name for c in cols] + ["compacted_at_ms"],
                                select(*cols, literal(t, BigInteger)).where(chosen),
                            )
                        )
                    await conn.execute(log_records.delete().where(chosen))
                    stats.removed += len(offsets)
                    stats.archived += len(offsets) if archive else 0
            stats.scanned += end - start
            start = end
        return stats

    # --- leases ----------------------------------------------------------------------------

    async def acquire_lease(
        self, partition: int, node_id: int, ttl_ms: int, now_ms: int, *, bump_own: bool = False
    ) -> int | None:
        """Take `partition`'s lease if it is free, expired or already ours (then it is extended).

        Returns the epoch now held, or None when another node holds a live lease. The epoch is
        bumped whenever the lease was free or expired (even if it was ours: writes queued under
        the lapsed epoch are fenced), and kept when a live lease of ours is extended (unless
        `bump_own`, see acquire_leases).
        """
        got = await self.acquire_leases([partition], node_id, ttl_ms, now_ms, bump_own=bump_own)
        return got.get(partition)

    async def acquire_leases(
        self,
        partitions: Sequence[int],
        node_id: int,
        ttl_ms: int,
        now_ms: int,
        *,
        bump_own: bool = False,
    ) -> dict[int, int]:
        """acquire_lease for many partitions in one transaction: {partition: epoch} of those
        taken (or extended).

        `bump_own`: a live lease already held by `node_id` is taken at a new epoch instead of
        extended — a restarted process must fence whatever its previous incarnation queued."""
        if not partitions:
            return {}
        L = partition_leases.c
        parts = sorted(set(partitions))
        async with self._write() as conn:
            await conn.execute(
                self._insert(partition_leases).on_conflict_do_nothing(index_elements=["partition"]),
                [
                    {"partition": p, "owner_node_id": None, "epoch": 0, "expires_at_ms": 0}
                    for p in parts
                ],
            )
            rows = await conn.execute(
                select(L.partition, L.owner_node_id, L.epoch, L.expires_at_ms)
                .where(L.partition.in_(parts))
                .order_by(L.partition)
                .with_for_update()
            )
            taken: dict[int, int] = {}
            for p, owner, epoch, expires in cast(_Rows, rows.all()):
                if owner == node_id and expires > now_ms:
                    taken[p] = epoch + 1 if bump_own else epoch
                elif owner is None or expires <= now_ms:
                    taken[p] = epoch + 1
            if taken:
                await conn.execute(
                    update(partition_leases)
                    .where(L.partition == bindparam("p"))
                    .values(
                        owner_node_id=node_id, epoch=bindparam("e"), expires_at_ms=now_ms + ttl_ms
                    ),
                    [{"p": p, "e": e} for p, e in taken.items()],
                )
        return taken

    async def renew_leases(
        self, node_id: int, partitions_with_epochs: dict[int, int], ttl_ms: int, now_ms: int
    ) -> set[int]:
        """Extend the leases still held by `node_id` at the given epochs (expired or not: the
        epoch, not the clock, is the fence). Returns the partitions renewed."""
        if not partitions_with_epochs:
            return set()
        if self._sqlite_writer is not None:  # the lease round's hot write: one hop

            def transaction(conn: sqlite3.Connection) -> list[int]:
                leases = _sqlite_leases(conn, partitions_with_epochs)
                mine = sorted(
                    p for p, (owner, epoch) in leases.items()
                    if owner == node_id and epoch == partitions_with_epochs[p]
                )  # fmt: skip
                if mine:
                    conn.execute(
                        'UPDATE partition_leases SET expires_at_ms = ? WHERE "partition" IN '
                        f'({",".join("?" * len(mine))})',
                        [now_ms + ttl_ms, *mine],
                    )
                return mine

            return set(await self._sqlite_writer.run(transaction))
        L = partition_leases.c
        async with self._write() as conn:
            rows = await conn.execute(
                select(L.partition, L.owner_node_id, L.epoch)
                .where(L.partition.in_(sorted(partitions_with_epochs)))
                .order_by(L.partition)
                .with_for_update()
            )
            ours: list[int] = sorted(
                p
                for p, owner, epoch in cast(_Rows, rows.all())
                if owner == node_id and epoch == partitions_with_epochs[p]
            )
            if ours:
                await conn.execute(
                    update(partition_leases)
                    .where(L.partition.in_(ours))
                    .values(expires_at_ms=now_ms + ttl_ms)
                )
        return set(ours)

    async def release_lease(
        self, partition: int, node_id: int, epoch: int, now_ms: int = 0
    ) -> bool:
        """Give the lease up (graceful shutdown/unload). False if it was not ours at `epoch`.
        The next acquirer bumps the epoch, so stragglers of ours are fenced. The row keeps the
        release time as its expiry, so placement can tell a fresh release from an orphan."""
        L = partition_leases.c
        async with self._write() as conn:
            res = await conn.execute(
                update(partition_leases)
                .where(L.partition == partition, L.owner_node_id == node_id, L.epoch == epoch)
                .values(owner_node_id=None, expires_at_ms=now_ms)
            )
        return bool(res.rowcount)

    async def leases(self) -> list[LeaseRow]:
        L = partition_leases.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(L.partition, L.owner_node_id, L.epoch, L.expires_at_ms).order_by(L.partition)
            )
            return [LeaseRow(*r) for r in cast(_Rows, rows.all())]

    # --- nodes -----------------------------------------------------------------------------

    async def register_node(
        self,
        node_id: int,
        kafka_host: str,
        kafka_port: int,
        admin_url: str | None,
        now_ms: int,
    ) -> None:
        """Insert or replace this node's row (started_ms = heartbeat_ms = now_ms)."""
        values = {
            "kafka_host": kafka_host,
            "kafka_port": kafka_port,
            "admin_url": admin_url,
            "heartbeat_ms": now_ms,
            "started_ms": now_ms,
        }
        stmt = self._insert(nodes).values(node_id=node_id, **values)
        async with self._write() as conn:
            await conn.execute(stmt.on_conflict_do_update(index_elements=["node_id"], set_=values))

    async def heartbeat_node(self, node_id: int, now_ms: int) -> bool:
        """Refresh the node's heartbeat; False if the node is not registered."""
        async with self._write() as conn:
            res = await conn.execute(
                update(nodes).where(nodes.c.node_id == node_id).values(heartbeat_ms=now_ms)
            )
        return bool(res.rowcount)

    async def deregister_node(self, node_id: int) -> None:
        async with self._write() as conn:
            await conn.execute(nodes.delete().where(nodes.c.node_id == node_id))

    async def live_nodes(self, now_ms: int, ttl_ms: int) -> list[NodeRow]:
        """Nodes whose last heartbeat is younger than ttl_ms, by node_id."""
        N = nodes.c
        async with self._read() as conn:
            rows = await conn.execute(
                select(
                    N.node_id, N.kafka_host, N.kafka_port, N.admin_url, N.heartbeat_ms, N.started_ms
                )
                .where(N.heartbeat_ms > now_ms - ttl_ms)
                .order_by(N.node_id)
            )
            return [NodeRow(*r) for r in cast(_Rows, rows.all())]

    # --- cluster meta ----------------------------------------------------------------------

    async def ensure_log_partitions(self, n: int) -> int:
        """Record the number of log partitions on first use; later calls must agree with it.

        Raises ConfigMismatch when `n` differs from the stored value (changing it would move
        groups between partitions, spec §6)."""
        if n <= 0:
            raise ValueError("log partitions must be positive")
        async with self._write() as conn:
            await conn.execute(
                self._insert(cluster_meta)
                .values(name=LOG_PARTITIONS, value=str(n))
                .on_conflict_do_nothing(index_elements=["name"])
            )
            stored: str = (
                await conn.execute(
                    select(cluster_meta.c.value).where(cluster_meta.c.name == LOG_PARTITIONS)
                )
            ).scalar_one()
        if int(stored) != n:
            raise errors.ConfigMismatch(
                f"{LOG_PARTITIONS}: the store was created with {stored}, configured {n}"
            )
        return int(stored)

    async def log_partitions(self) -> int | None:
        """The stored number of log partitions, or None before ensure_log_partitions()."""
        async with self._read() as conn:
            v = (
                await conn.execute(
                    select(cluster_meta.c.value).where(cluster_meta.c.name == LOG_PARTITIONS)
                )
            ).scalar()
        return None if v is None else int(v)
