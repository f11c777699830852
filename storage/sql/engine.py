"""The SQLite engine the event log and the Alembic environment share (SqliteDialect).

SQLite gets: WAL (readers never block the writer), synchronous=FULL (the only setting durable
against power loss, design.md §12.1), a busy timeout, checkpoints off the commit path
(WAL_AUTOCHECKPOINT_PAGES), and SQLAlchemy-controlled BEGIN so
that write transactions can start with BEGIN IMMEDIATE: the write lock is taken before the
fence check, making check+insert atomic across processes sharing the file.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, Final

from sqlalchemy import URL, event, make_url
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# Execution option read by the SQLite "begin" hook: "IMMEDIATE" takes the write lock up front.
SQLITE_BEGIN = "sqlite_begin"

_ASYNC_DRIVERS = {"sqlite": "sqlite+aiosqlite", "postgresql": "postgresql+asyncpg"}


def async_url(url: str | URL) -> URL:
    """Parse `url`, swapping a default or sync driver for the async one (sqlite:// works too)."""
    u = make_url(url)
    backend = u.get_backend_name()
    if backend in _ASYNC_DRIVERS and u.get_driver_name() not in ("aiosqlite", "asyncpg"):
        u = u.set(drivername=_ASYNC_DRIVERS[backend])
    return u


def sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL; None for in-memory and URI-style databases."""
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:") or url.query.get("uri"):
        return None
    return Path(db)


def create_private(path: Path) -> None:
    """Create the database file, readable by its owner only (it holds the SCRAM salts and
    keys), unless it exists. SQLite gives its -wal and -shm files the database file's mode;
    an empty file is an empty database to it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


def _set_wal(cur: Any, busy_timeout_ms: int) -> None:
    """Switch to WAL, waiting out other processes that hold the file.

    Changing the journal mode of a fresh file needs its exclusive lock, and SQLite answers
    "database is locked" at once there rather than through the busy handler, so nodes started
    together on a new file raced (seen in the suite): retry until the busy timeout."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    delay = 0.005
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


# SQLite checkpoints its WAL in the connection whose commit takes the log past
# wal_autocheckpoint pages, before that commit returns: with the default (1000 pages, 4 MiB) one
# commit in ~20 of a 1000-member group's records (207 KiB each) took 25-35 ms instead of ~1 ms,
# copying 4 MiB into the database and syncing it. WalCheckpointer (storage/sql/sqlite_thread.py)
# checkpoints from a thread of its own instead; a committing connection does it only past this
# bound. The log restarts from its beginning only after a checkpoint that left nothing behind, so
# under a steady stream of writes this bound is what ends its growth.
WAL_AUTOCHECKPOINT_PAGES: Final = 16_384  # 64 MiB of 4 KiB pages


def configure_sqlite(dbapi_conn: Any, busy_timeout_ms: int) -> None:
    """The settings every connection to the file gets: a busy timeout, WAL, synchronous=FULL,
    and checkpoints left to the WalCheckpointer."""
    cur = dbapi_conn.cursor()
    try:
        cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        _set_wal(cur, busy_timeout_ms)
        cur.execute("PRAGMA synchronous = FULL")
        cur.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
    finally:
        cur.close()


def sqlite_engine(u: URL, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
    path = sqlite_file(u)
    if path is not None:
        create_private(path)
    engine = create_async_engine(u, **kwargs)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # the driver must not emit BEGIN; the hook below does
        configure_sqlite(dbapi_conn, busy_timeout_ms)

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(conn: Connection) -> None:
        mode = conn.get_execution_options().get(SQLITE_BEGIN, "DEFERRED")
        conn.exec_driver_sql(f"BEGIN {mode}")

    return engine


def immediate(engine: AsyncEngine) -> AsyncEngine:
    """A view of `engine` (same pool) whose transactions start with BEGIN IMMEDIATE."""
    return engine.execution_options(**{SQLITE_BEGIN: "IMMEDIATE"})
