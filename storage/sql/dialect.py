"""Where SQLite and PostgreSQL differ, decided once: `dialect_for(name)` picks one of these.

Every module of the adapter and the Alembic environment ask a dialect instead of testing the
backend's name: the engine and its write transactions, the placeholders and row locks of the
hot statements, how appends are batched, the upsert INSERT, the database clock, what a read
snapshot is, the connection settings, how migrations run, and the fast path each backend has
beside SQLAlchemy (sqlite3 threads on a SQLite file, a one-round-trip appender on PostgreSQL).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, ClassVar, Final

from sqlalchemy import URL, Select, Table, TextClause, make_url, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from storage.errors import StorageError
from storage.sql.engine import async_url, immediate, sqlite_engine, sqlite_file
from storage.sql.pg_append import PgAppender
from storage.sql.sqlite_thread import SqliteThread, WalCheckpointer

Rows = Sequence[Sequence[Any]]

# the oldest SQLite the statements run on (RETURNING: storage/sql/statements.py)
MIN_SQLITE: Final = (3, 35, 0)

# a SQLite file's threads: the writer (appends, lease renewals), the reader (loads), and the
# checkpointer that keeps checkpoints out of their commits
SqliteThreads = tuple[SqliteThread, SqliteThread, WalCheckpointer]


class Dialect:
    name: ClassVar[str]
    # row locks (FOR SHARE / FOR UPDATE) are taken; SQLite's write transactions hold the
    # whole database from BEGIN IMMEDIATE instead
    locks_rows: ClassVar[bool]
    # appends go as one executemany (asyncpg pipelines it) rather than multi-row INSERTs
    executemany_appends: ClassVar[bool]
    clock: ClassVar[TextClause]  # the database's time in ms since the epoch
    # migrations alter tables in Alembic's batch mode (copy and move), SQLite's only ALTER
    batch_migrations: ClassVar[bool]

    def create_engine(self, url: URL, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
        raise NotImplementedError

    def write_engine(self, engine: AsyncEngine) -> AsyncEngine:
        """The view of `engine` whose transactions write: they lock what the fence reads."""
        return engine

    def lock_migrations(self, conn: Connection) -> None:
        """Serialize concurrent upgrades (nodes starting together), inside the upgrade's
        transaction before Alembic reads the current revision."""

    def check_supported(self) -> None:
        """Raise StorageError when this server or library cannot run the statements."""

    def configure(self, lock_wait_ms: int | None, engine_kwargs: dict[str, Any]) -> None:
        """Add this backend's connection settings to create_async_engine's arguments."""

    def insert(self, table: Table) -> Any:
        """An INSERT that supports on_conflict_do_nothing / on_conflict_do_update."""
        raise NotImplementedError

    def numbered(self, sql: str) -> str:
        """`sql` with its '?' placeholders as the driver wants them."""
        return sql

    def for_lock(self, query: Select[Any]) -> Select[Any]:
        """`query` locking the rows it reads until the transaction ends, where rows are locked."""
        return query.with_for_update() if self.locks_rows else query

    async def begin_snapshot(self, conn: AsyncConnection) -> None:
        """Make `conn`'s next transaction a snapshot: all its reads see one commit point."""

    async def in_snapshot(self, conn: AsyncConnection) -> None:
        """Run first inside the snapshot's transaction."""

    async def fetch(self, driver: Any, sql: str, *params: Any) -> Rows:
        """The rows of `sql` through the bare driver connection (no Row objects)."""
        raise NotImplementedError

    def sqlite_threads(self, engine: AsyncEngine, busy_timeout_ms: int) -> SqliteThreads | None:
        return None

    def appender(self, engine: AsyncEngine, connect_args: dict[str, Any]) -> PgAppender | None:
        return None


class SqliteDialect(Dialect):
    name = "sqlite"
    locks_rows = False
    # sqlite3 releases the GIL around each row's step of an executemany: multi-row INSERTs
    # instead (storage/sql/statements.py, Statements.append_rows)
    executemany_appends = False
    clock = text("SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)")
    batch_migrations = True

    def create_engine(self, url: URL, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
        return sqlite_engine(url, busy_timeout_ms, **kwargs)

    def write_engine(self, engine: AsyncEngine) -> AsyncEngine:
        # BEGIN IMMEDIATE: the database is write-locked before the fence reads the leases, and
        # the whole upgrade of a migration holds it
        return immediate(engine)

    def check_supported(self) -> None:
        if sqlite3.sqlite_version_info < MIN_SQLITE:
            raise StorageError(
                f"SQLite {sqlite3.sqlite_version} is too old: the event log needs "
                f"{'.'.join(map(str, MIN_SQLITE))} or newer (UPDATE ... RETURNING)"
            )

    def insert(self, table: Table) -> Any:
        return sqlite.insert(table)

    async def fetch(self, driver: Any, sql: str, *params: Any) -> Rows:
        async with driver.execute(sql, params) as cur:
            rows: Rows = await cur.fetchall()
        return rows

    def sqlite_threads(self, engine: AsyncEngine, busy_timeout_ms: int) -> SqliteThreads | None:
        """None for in-memory databases, which a second connection would not see."""
        path = sqlite_file(engine.url)
        if path is None:
            return None
        return (
            SqliteThread(path, busy_timeout_ms, write=True),
            SqliteThread(path, busy_timeout_ms, write=False),
            WalCheckpointer(path, busy_timeout_ms),
        )


class PostgresDialect(Dialect):
    name = "postgresql"
    locks_rows = True
    executemany_appends = True
    clock = text("SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint")
    batch_migrations = False
    _MIGRATION_LOCK: Final = 0x636F6F7264  # "coord"

    def create_engine(self, url: URL, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
        kwargs.setdefault("pool_pre_ping", True)
        return create_async_engine(url, **kwargs)

    def lock_migrations(self, conn: Connection) -> None:
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({self._MIGRATION_LOCK})")

    def configure(self, lock_wait_ms: int | None, engine_kwargs: dict[str, Any]) -> None:
        if lock_wait_ms is None:
            return
        settings = engine_kwargs.setdefault("connect_args", {}).setdefault("server_settings", {})
        settings.setdefault("lock_timeout", str(lock_wait_ms))
        settings.setdefault("idle_in_transaction_session_timeout", str(2 * lock_wait_ms))

    def insert(self, table: Table) -> Any:
        return postgresql.insert(table)

    def numbered(self, sql: str) -> str:
        parts = sql.split("?")
        return "".join(f"{p}${i}" for i, p in enumerate(parts[:-1], 1)) + parts[-1]

    async def begin_snapshot(self, conn: AsyncConnection) -> None:
        await conn.execution_options(isolation_level="REPEATABLE READ")

    async def in_snapshot(self, conn: AsyncConnection) -> None:
        # a read snapshot locks no lease row, and its reader (a load, an export) legitimately
        # idles between pages: exempt it from the frozen-writer timeout of `lock_wait_ms`
        await conn.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = 0")

    async def fetch(self, driver: Any, sql: str, *params: Any) -> Rows:
        rows: Rows = await driver.fetch(sql, *params)
        return rows

    def appender(self, engine: AsyncEngine, connect_args: dict[str, Any]) -> PgAppender | None:
        return PgAppender(engine, connect_args)


_DIALECTS: Final[dict[str, type[Dialect]]] = {d.name: d for d in (SqliteDialect, PostgresDialect)}


def create_engine(url: str | URL, *, busy_timeout_ms: int = 5000, **kwargs: Any) -> AsyncEngine:
    """The async engine of `url`, its default or sync driver swapped for the async one."""
    u = async_url(url)
    return dialect_for(u.get_backend_name()).create_engine(u, busy_timeout_ms, **kwargs)


def dialect_for(url_or_name: str) -> Dialect:
    """The dialect of a database URL (sqlite:///..., postgresql+asyncpg://...) or backend name."""
    name = url_or_name if url_or_name in _DIALECTS else make_url(url_or_name).get_backend_name()
    try:
        return _DIALECTS[name]()
    except KeyError:
        raise StorageError(f"no event log backend for {name!r}: sqlite or postgresql") from None
