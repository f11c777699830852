"""The connections every part of the event log shares, and its kinds of transaction."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.errors import translate_errors
from storage.migrate import upgrade_async
from storage.sql.dialect import Dialect, SqliteThreads, create_engine, dialect_for
from storage.sql.sqlite_thread import SqliteThread, WalCheckpointer
from storage.sql.statements import Statements, Txn, run_async, run_sqlite3

T = TypeVar("T")


def wall_clock_ms() -> int:
    """The time appends and compactions stamp on rows."""
    return time.time_ns() // 1_000_000


class Database:
    """The SQLAlchemy engine, its `dialect` (storage/sql/dialect.py), and the backend's fast
    paths: on a SQLite file the two sqlite3 threads of the hot paths (None on PostgreSQL and
    for in-memory databases, which a second connection would not see), `sqlite_writer` for
    appends and lease renewals, `sqlite_reader` for loads, and the `checkpointer` that keeps
    checkpoints out of their commits; on PostgreSQL, `pg_appender`, which runs appends in one
    round trip on a connection of its own."""

    def __init__(
        self,
        engine: AsyncEngine,
        dialect: Dialect,
        sqlite_threads: SqliteThreads | None,
        connect_args: dict[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        self.dialect = dialect
        self.sql = Statements(dialect, engine.dialect)
        self.sqlite_writer: SqliteThread | None = None
        self.sqlite_reader: SqliteThread | None = None
        self.checkpointer: WalCheckpointer | None = None
        if sqlite_threads is not None:
            self.sqlite_writer, self.sqlite_reader, self.checkpointer = sqlite_threads
            self.checkpointer.start()
        self._writes = dialect.write_engine(engine)
        self.pg_appender = dialect.appender(engine, connect_args or {})

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool,
        busy_timeout_ms: int,
        lock_wait_ms: int | None,
        **engine_kwargs: Any,
    ) -> Database:
        """See EventLog.open."""
        with translate_errors():  # a URL of no backend, or one that does not parse
            dialect = dialect_for(url)
        dialect.check_supported()
        if migrate:
            await upgrade_async(url)
        dialect.configure(lock_wait_ms, engine_kwargs)
        with translate_errors():  # e.g. the SQLite file's directory cannot be created
            engine = create_engine(url, busy_timeout_ms=busy_timeout_ms, **engine_kwargs)
        try:
            with translate_errors():
                async with engine.connect() as conn:
                    await conn.execute(select(1))
        except BaseException:
            await engine.dispose()
            raise
        threads = dialect.sqlite_threads(engine, busy_timeout_ms)
        return cls(engine, dialect, threads, engine_kwargs.get("connect_args"))

    async def close(self) -> None:
        if self.pg_appender is not None:
            await self.pg_appender.close()
        if self.checkpointer is not None:
            await asyncio.to_thread(self.checkpointer.stop)
        for thread in (self.sqlite_writer, self.sqlite_reader):
            if thread is not None:
                await thread.close()
        await self.engine.dispose()

    @asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction (BEGIN IMMEDIATE on SQLite), committed on clean exit."""
        with translate_errors():
            async with self._writes.begin() as conn:
                yield conn

    @asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncConnection]:
        with translate_errors():
            async with self.engine.connect() as conn:
                yield conn

    @asynccontextmanager
    async def snapshot(self) -> AsyncIterator[AsyncConnection]:
        """One read transaction whose statements all see the same committed state."""
        with translate_errors():
            async with self.engine.connect() as conn:
                await self.dialect.begin_snapshot(conn)
                async with conn.begin():
                    await self.dialect.in_snapshot(conn)
                    yield conn

    async def transact(self, txn: Txn[T]) -> T:
        """Run `txn` as one write transaction: on a SQLite file in one hop of the writer
        thread, otherwise through SQLAlchemy."""
        writer = self.sqlite_writer
        if writer is not None:
            return await writer.run(lambda conn: run_sqlite3(conn, txn))
        async with self.write() as conn:
            return await run_async(conn, txn)

    def insert(self, table: Table) -> Any:
        """A dialect INSERT that supports on_conflict_do_nothing/on_conflict_do_update."""
        return self.dialect.insert(table)
