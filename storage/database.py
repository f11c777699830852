"""The connections every part of the event log shares, and its kinds of transaction."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from storage.engine import create_engine, sqlite_file, write_engine
from storage.errors import StorageError, translate_errors
from storage.migrate import upgrade_async
from storage.pg_append import PgAppender
from storage.sqlite_thread import SqliteThread, WalCheckpointer
from storage.statements import Statements, Txn, run_async, run_sqlite3

T = TypeVar("T")

# the oldest SQLite the statements run on (RETURNING: storage/statements.py)
MIN_SQLITE: Final = (3, 35, 0)


def wall_clock_ms() -> int:
    """The time appends and compactions stamp on rows."""
    return time.time_ns() // 1_000_000


class Database:
    """The SQLAlchemy engine, and on a SQLite file the two sqlite3 threads of the hot paths
    (None on PostgreSQL and for in-memory databases, which a second connection would not
    see): `sqlite_writer` for appends and lease renewals, `sqlite_reader` for loads, and the
    `checkpointer` that keeps checkpoints out of their commits. On
    PostgreSQL, `pg_appender` runs appends in one round trip on a connection of its own."""

    def __init__(
        self,
        engine: AsyncEngine,
        sqlite_threads: tuple[SqliteThread, SqliteThread, WalCheckpointer] | None,
        connect_args: dict[str, Any] | None = None,
    ) -> None:
        self.engine = engine
        self.pg = engine.dialect.name == "postgresql"
        self.sql = Statements(engine.dialect)
        self.sqlite_writer: SqliteThread | None = None
        self.sqlite_reader: SqliteThread | None = None
        self.checkpointer: WalCheckpointer | None = None
        if sqlite_threads is not None:
            self.sqlite_writer, self.sqlite_reader, self.checkpointer = sqlite_threads
            self.checkpointer.start()
        self._writes = write_engine(engine)
        self.pg_appender = PgAppender(engine, connect_args or {}) if self.pg else None

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
        if url.startswith("sqlite") and sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StorageError(
                f"SQLite {sqlite3.sqlite_version} is too old: the event log needs "
                f"{'.'.join(map(str, MIN_SQLITE))} or newer (UPDATE ... RETURNING)"
            )
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
        path = sqlite_file(engine.url) if engine.dialect.name == "sqlite" else None
        if path is None:
            return cls(engine, None, engine_kwargs.get("connect_args"))
        threads = (
            SqliteThread(path, busy_timeout_ms, write=True),
            SqliteThread(path, busy_timeout_ms, write=False),
            WalCheckpointer(path, busy_timeout_ms),
        )
        return cls(engine, threads)

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
                if self.pg:
                    await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    if self.pg:
                        # a read snapshot locks no lease row, and its reader (a load, an
                        # export) legitimately idles between pages: exempt it from the
                        # frozen-writer timeout of `lock_wait_ms`
                        await conn.exec_driver_sql(
                            "SET LOCAL idle_in_transaction_session_timeout = 0"
                        )
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
        return postgresql.insert(table) if self.pg else sqlite.insert(table)
