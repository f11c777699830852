"""The storage suite on SQLite (a file per test), plus what only SQLite has: pragmas, directory
creation, several processes sharing one file."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text

from app.group.records import Record, RecordType
from storage.errors import StorageError
from storage.log import AppendBatch, EventLog
from storage.migrate import upgrade
from storage.sql import sqlite_thread
from storage.sql.engine import WAL_AUTOCHECKPOINT_PAGES
from storage.sql.sqlite_thread import SqliteThread, WalCheckpointer
from tests.api.helpers import eventually
from tests.storage.conftest import sqlite_url
from tests.storage.sql_suite import SqlStoreSuite
from tests.storage.suite import read_all


class TestSQLiteEventLog(SqlStoreSuite):
    @pytest.fixture
    def url(self, sqlite_db: str) -> str:
        return sqlite_db

    @pytest.fixture
    def unreachable_url(self, tmp_path: Path) -> str:
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("")
        return sqlite_url(blocker / "log.db")  # cannot create a file under a file


async def test_sqlite_connections_use_wal_full_sync_a_busy_timeout_and_leave_checkpoints(
    sqlite_db: str,
) -> None:
    log = await EventLog.open(sqlite_db, busy_timeout_ms=1234)
    try:
        async with log.engine.connect() as conn:
            pragmas = [
                (await conn.execute(text(f"PRAGMA {p}"))).scalar()
                for p in ("journal_mode", "synchronous", "busy_timeout", "wal_autocheckpoint")
            ]
        assert pragmas == ["wal", 2, 1234, WAL_AUTOCHECKPOINT_PAGES]  # synchronous 2 = FULL
    finally:
        await log.close()


async def test_open_creates_the_parent_directory(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "a" / "b" / "log.db")
    log = await EventLog.open(url, migrate=True)
    try:
        assert await log.end_offset(0) == 0
    finally:
        await log.close()
    assert (tmp_path / "a" / "b" / "log.db").is_file()


async def test_an_sqlite_too_old_for_the_statements_is_refused_at_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lease round's heartbeat uses UPDATE ... RETURNING (SQLite 3.35): an older library
    is named at start-up, not found out by a failing lease round."""
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(StorageError, match=r"SQLite 3\.34\.1 is too old.*3\.35\.0 or newer"):
        await EventLog.open(sqlite_url(tmp_path / "log.db"), migrate=True)
    assert not (tmp_path / "log.db").exists()


def test_plain_sqlite_urls_get_the_async_driver(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade(url)

    async def check() -> int:
        log = await EventLog.open(url)
        try:
            return await log.end_offset(0)
        finally:
            await log.close()

    assert asyncio.run(check()) == 0


# 30 commits of 200 KiB: ~1,500 pages of WAL, past SQLite's default checkpoint (1,000 pages)
_BIG = os.urandom(200 * 1024)
_COMMITS = 30
_WRITTEN = _COMMITS * len(_BIG)


async def test_a_commit_does_not_wait_for_a_checkpoint(tmp_path: Path) -> None:
    """The committing connection leaves the WAL's frames where they are (the checkpoint that
    once ran inside one commit in ~20 of a large group's made it 25-35 ms instead of ~1)."""
    path = tmp_path / "log.db"
    writer = SqliteThread(path, 5000, write=True)
    try:
        await writer.run(lambda conn: conn.execute("CREATE TABLE blobs (value BLOB)"))
        for _ in range(_COMMITS):
            await writer.run(lambda conn: conn.execute("INSERT INTO blobs VALUES (?)", (_BIG,)))
        # nothing copied into the database file: every page is still in the log
        assert path.stat().st_size < len(_BIG)
        assert Path(f"{path}-wal").stat().st_size > _WRITTEN
    finally:
        await writer.close()


async def test_the_checkpointer_copies_the_log_into_the_database_in_the_background(
    tmp_path: Path,
) -> None:
    url = sqlite_url(tmp_path / "log.db")
    log = await EventLog.open(url, migrate=True)
    try:
        epoch = await log.acquire_lease(0, 1, 60_000, 0)
        assert epoch is not None
        for i in range(_COMMITS):
            batch = AppendBatch(0, epoch, 1, [Record(RecordType.OFFSET_COMMIT, b"k%d" % i, _BIG)])
            await log.append([batch])
        deadline = time.monotonic() + 10
        while (tmp_path / "log.db").stat().st_size < _WRITTEN:
            assert time.monotonic() < deadline, "the WAL was not checkpointed within 10 s"
            await asyncio.sleep(0.05)
        assert [s.value for s in await read_all(log, 0)] == [_BIG] * _COMMITS
    finally:
        await log.close()
    assert not [t for t in threading.enumerate() if t.name == "sqlite-checkpointer"]


async def test_a_failing_checkpointer_warns_once_and_stops_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds: list[Path] = []  # a failed round closes its connection: each opens one

    def connect(path: Path, busy_timeout_s: float) -> sqlite3.Connection:
        rounds.append(path)
        return real_connect(path, busy_timeout_s)

    real_connect = sqlite_thread._connect
    monkeypatch.setattr(sqlite_thread, "_connect", connect)
    checkpointer = WalCheckpointer(tmp_path / "missing" / "log.db", 100, interval_s=0.01)
    with caplog.at_level(logging.WARNING, logger="storage.sql.sqlite_thread"):
        checkpointer.start()
        await eventually(lambda: len(rounds) >= 20, what="20 failed rounds")
        await asyncio.to_thread(checkpointer.stop)
    warnings = [r for r in caplog.records if "checkpointing" in r.getMessage()]
    assert len(warnings) == 1
    assert "unable to open database file" in warnings[0].getMessage()


_CHILD = """
import asyncio, sys
from app.group.records import Record, RecordType
from storage.log import AppendBatch, EventLog

async def main(url, node, partition):
    log = await EventLog.open(url)
    epoch = await log.acquire_lease(partition, node, 60_000, 0)
    for i in range(100):
        recs = [Record(RecordType.OFFSET_COMMIT, b"k%d" % i, b"v") for _ in range(10)]
        await log.append([AppendBatch(partition, epoch, node, recs)])
    await log.close()

asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
"""


async def test_concurrent_processes_migrate_and_append(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "shared.db")
    migrate = "import sys; from storage.migrate import upgrade; upgrade(sys.argv[1])"
    migrators = [subprocess.Popen([sys.executable, "-c", migrate, url]) for _ in range(3)]
    assert [await asyncio.to_thread(p.wait) for p in migrators] == [0, 0, 0]
    children = [
        subprocess.Popen([sys.executable, "-c", _CHILD, url, str(node), str(node)])
        for node in (1, 2, 3)
    ]
    assert [await asyncio.to_thread(c.wait) for c in children] == [0, 0, 0]
    log = await EventLog.open(url)
    try:
        for p in (1, 2, 3):
            stored = await read_all(log, p)
            assert [s.offset for s in stored] == list(range(1000))
            assert {s.node_id for s in stored} == {p}
    finally:
        await log.close()
