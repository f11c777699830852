"""Backends for the storage suite: a migrated SQLite file per test, a fresh PostgreSQL database
per test module (tables truncated between tests)."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.migrate import upgrade


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated database file, copied for each test (migrating costs ~0.1 s)."""
    path = tmp_path_factory.mktemp("template") / "log.db"
    upgrade(sqlite_url(path))
    return path


@pytest.fixture
def sqlite_db(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "db" / "log.db"
    path.parent.mkdir()
    shutil.copyfile(sqlite_template, path)
    return sqlite_url(path)


async def _pg_admin(admin_dsn: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin_dsn, timeout=10)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def pg_url(admin_dsn: str, database: str) -> str:
    from sqlalchemy import make_url

    return (
        make_url(admin_dsn)
        .set(drivername="postgresql+asyncpg", database=database)
        .render_as_string(hide_password=False)
    )


@pytest.fixture(scope="module")
def pg_database(pg_admin_dsn: str) -> Iterator[str]:
    """A fresh, migrated database for this module; dropped afterwards."""
    name = f"storage_test_{uuid.uuid4().hex[:12]}"
    asyncio.run(_pg_admin(pg_admin_dsn, f'CREATE DATABASE "{name}"'))
    try:
        url = pg_url(pg_admin_dsn, name)
        upgrade(url)
        yield url
    finally:
        asyncio.run(_pg_admin(pg_admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


async def pg_truncate(url: str) -> None:
    import asyncpg
    from sqlalchemy import make_url

    u = make_url(url)
    conn = await asyncpg.connect(
        host=u.host, port=u.port, user=u.username, password=u.password, database=u.database
    )
    try:
        await conn.execute(
            "TRUNCATE log_records, log_history, partition_leases, nodes, cluster_meta, "
            "scram_credentials, acls"
        )
    finally:
        await conn.close()
