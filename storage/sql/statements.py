"""The hot statements, spelled once, and transaction bodies that either driver runs.

On a SQLite file, appends and lease renewals run on a bare sqlite3 connection, a whole
transaction in one thread hop (storage/sql/sqlite_thread.py); everywhere else they go through
SQLAlchemy. So that each is written once, a transaction body is a generator: it yields each
statement (a Stmt) and receives its rows, and a runner executes it on one connection or the
other. The statements bypass SQLAlchemy's per-statement compilation and parameter processing
on both paths: they are hot, and their SQL is plain.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Generator, Sequence
from typing import Any, Final, NamedTuple, TypeVar

from sqlalchemy import insert
from sqlalchemy.engine import Dialect as Compiler
from sqlalchemy.ext.asyncio import AsyncConnection

from storage.columns import LOG_COLUMN_NAMES
from storage.sql.dialect import Dialect, Rows
from storage.sql.tables import log_records

T = TypeVar("T")

__all__ = ["Rows", "Statements", "Stmt", "Txn", "run_async", "run_sqlite3"]


class Stmt(NamedTuple):
    sql: str
    params: Sequence[Any]  # one row of parameters; with `many`, a sequence of rows
    many: bool = False


# A transaction body: yields statements, receives each one's rows, returns its result.
Txn = Generator[Stmt, Rows, T]


def run_sqlite3(conn: sqlite3.Connection, txn: Txn[T]) -> T:
    """Run `txn` on a sqlite3 connection (inside the transaction SqliteThread opened)."""
    try:
        stmt = next(txn)
        while True:
            if stmt.many:
                conn.executemany(stmt.sql, stmt.params)
                rows: Rows = []
            else:
                rows = conn.execute(stmt.sql, stmt.params).fetchall()
            stmt = txn.send(rows)
    except StopIteration as done:
        result: T = done.value
        return result


async def run_async(conn: AsyncConnection, txn: Txn[T]) -> T:
    """Run `txn` inside the SQLAlchemy transaction of `conn`."""
    try:
        stmt = next(txn)
        while True:
            params = list(stmt.params) if stmt.many else tuple(stmt.params)
            result = await conn.exec_driver_sql(stmt.sql, params)
            stmt = txn.send(result.all() if result.returns_rows else [])
    except StopIteration as done:
        value: T = done.value
        return value


# rows per multi-row INSERT: 64 x 8 columns = 512 parameters, under SQLite's oldest default
# bound on host parameters (999 before 3.32)
APPEND_CHUNK: Final = 64


class Statements:
    """The SQL of the hot operations for one dialect: '?' placeholders ('$n' on asyncpg)."""

    def __init__(self, dialect: Dialect, compiler: Compiler) -> None:
        self._dialect = dialect
        # Compiled once, executed with plain tuples: that skips SQLAlchemy's per-row parameter
        # processing (measured ~3x on aiosqlite, ~1.5x on asyncpg against
        # conn.execute(insert(...), [dicts])). Rows are tuples in LOG_COLUMNS order.
        compiled = insert(log_records).compile(dialect=compiler)
        if tuple(compiled.positiontup or ()) != LOG_COLUMN_NAMES:
            raise RuntimeError(f"unexpected INSERT parameter order {compiled.positiontup}")
        self.append_sql = str(compiled)
        self._insert_head = self.append_sql.partition(" VALUES ")[0]
        self._insert_row = f"({_marks(len(LOG_COLUMN_NAMES))})"
        # The newest-per-key scan of a load: four columns, keyset pages (a LIMIT of -1 is
        # no limit on SQLite).
        self.latest_page_sql = dialect.numbered(
            'SELECT "offset", record_type, key, value FROM log_records '
            'WHERE "partition" = ? AND "offset" >= ? ORDER BY "offset" LIMIT ?'
        )
        self._cache: dict[tuple[str, int], str] = {}

    def append_rows(self, rows: Sequence[tuple[Any, ...]]) -> list[Stmt]:
        """On SQLite, INSERTs of `rows` (LOG_COLUMNS order) carrying up to APPEND_CHUNK rows
        each, the rest in power-of-two statements (a handful of distinct SQL texts for the
        driver's cache).

        Not one executemany: sqlite3 releases the GIL around each row's step, and while the
        event loop is busy each row then waits for the GIL again (up to the switch interval).
        Under figure 3's commit load that made a 1,000-row group commit 2-5x slower than the
        same rows in 64-row statements (bench: durable commits/s). PostgreSQL keeps one
        executemany, which asyncpg sends as one pipelined batch on the event loop."""
        if self._dialect.executemany_appends:
            return [Stmt(self.append_sql, rows, many=True)] if rows else []
        out: list[Stmt] = []
        i, n = 0, len(rows)
        size = APPEND_CHUNK
        while i < n:
            while size > n - i:
                size //= 2
            chunk = rows[i : i + size]
            sql = self._sized("append", size, self._insert_sql)
            out.append(Stmt(sql, [v for r in chunk for v in r]))
            i += size
        return out

    def _insert_sql(self, rows: int) -> str:
        return f"{self._insert_head} VALUES " + ", ".join([self._insert_row] * rows)

    def lease_rows(self, partitions: Sequence[int], lock: str) -> Stmt:
        """(partition, owner, epoch) of these lease rows, in partition order. On PostgreSQL
        the rows are locked (`lock`: FOR SHARE or FOR UPDATE) until the transaction ends;
        SQLite transactions here hold the database write lock already (BEGIN IMMEDIATE)."""
        suffix = f" {lock}" if self._dialect.locks_rows else ""
        sql = self._sized(
            "lease_rows" + suffix,
            len(partitions),
            lambda n: (
                'SELECT "partition", owner_node_id, epoch FROM partition_leases '
                f'WHERE "partition" IN ({_marks(n)}) ORDER BY "partition"{suffix}'
            ),
        )
        return Stmt(sql, partitions)

    def extend_leases(self, partitions: Sequence[int], expires_at_ms: int) -> Stmt:
        sql = self._sized(
            "extend_leases",
            len(partitions),
            lambda n: (
                f'UPDATE partition_leases SET expires_at_ms = ? WHERE "partition" IN ({_marks(n)})'
            ),
        )
        return Stmt(sql, [expires_at_ms, *partitions])

    def heartbeat_node(self, node_id: int, now_ms: int) -> Stmt:
        """The node's row with its heartbeat moved to `now_ms`: one row if it is registered
        (RETURNING: SQLite 3.35+)."""
        sql = self._sized(
            "heartbeat_node",
            1,
            lambda n: "UPDATE nodes SET heartbeat_ms = ? WHERE node_id = ? RETURNING node_id",
        )
        return Stmt(sql, (now_ms, node_id))

    def max_offsets(self, partitions: Sequence[int]) -> Stmt:
        """One row: the highest offset of each partition (NULL when empty), in one round
        trip; each scalar subquery is a primary-key lookup."""
        sql = self._sized(
            "max_offsets",
            len(partitions),
            lambda n: (
                "SELECT "
                + ", ".join(['(SELECT max("offset") FROM log_records WHERE "partition" = ?)'] * n)
            ),
        )
        return Stmt(sql, partitions)

    def _sized(self, name: str, n: int, build: Callable[[int], str]) -> str:
        """The statement `build` makes for `n` values, built once per (name, n)."""
        sql = self._cache.get((name, n))
        if sql is None:
            sql = self._cache[(name, n)] = self._dialect.numbered(build(n))
        return sql


def _marks(n: int) -> str:
    return ", ".join("?" * n)
