"""A dedicated thread with its own sqlite3 connection, for the SQLite hot paths."""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from storage import errors

T = TypeVar("T")


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
        return await loop.run_in_executor(self._executor, functools.partial(self._transaction, fn))

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        await asyncio.get_running_loop().run_in_executor(self._executor, shut)
        self._executor.shutdown(wait=True)
