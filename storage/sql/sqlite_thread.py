"""Dedicated threads with their own sqlite3 connections: the SQLite hot paths, and the WAL's
checkpoints."""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from storage import errors
from storage.sql.engine import configure_sqlite

T = TypeVar("T")

log = logging.getLogger(__name__)

# how often the WalCheckpointer looks for frames to copy: the WAL a burst of writes leaves
# behind is copied within this, and the log restarts from its beginning at the next write
CHECKPOINT_INTERVAL_S = 0.25


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
            self._conn = _connect(self._path, self._busy_timeout_s)
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
        return await loop.run_in_executor(self._executor, functools.partial(self._transaction, fn))

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)


def _connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
    )
    configure_sqlite(conn, int(busy_timeout_s * 1000))
    return conn


class WalCheckpointer:
    """Copies the WAL's frames into the database file from a thread and connection of its own,
    every `interval_s` (PRAGMA wal_checkpoint(PASSIVE): it waits for no reader or writer), so
    that no commit waits for a checkpoint (storage/sql/engine.py WAL_AUTOCHECKPOINT_PAGES). The
    copy and its fsync run while the writer goes on appending to the log."""

    def __init__(
        self, path: Path, busy_timeout_ms: int, interval_s: float = CHECKPOINT_INTERVAL_S
    ) -> None:
        self._path = path
        self._busy_timeout_s = busy_timeout_ms / 1000
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpointer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread (a checkpoint in progress finishes first). Blocking: call it from a
        thread that may wait, e.g. via `asyncio.to_thread`."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        failing = False
        try:
            while not self._stop.wait(self._interval_s):
                try:
                    if conn is None:
                        conn = _connect(self._path, self._busy_timeout_s)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    failing = False
                except Exception as e:  # sqlite3.Error above all; the thread must not die
                    # the writers' own bound still holds; try again next round
                    if not failing:
                        log.warning("checkpointing %s failed: %s", self._path, e)
                    failing = True
                    if conn is not None:
                        conn.close()
                        conn = None
        finally:
            if conn is not None:
                conn.close()
