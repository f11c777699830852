"""The databases figures run their nodes on: fresh PostgreSQL databases on the run's server
(its admin DSN in BenchOptions.pg_dsn) and fresh SQLite files."""

from __future__ import annotations

import asyncio
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import asyncpg

# per run: a node orphaned by a killed run cannot join the next run's cluster
PG_DB = f"bench_failover_{os.getpid()}"


def pg_url(dsn: str, db: str, scheme: str | None = None) -> str:
    """`dsn` with database `db` (and the URL scheme `scheme`, e.g. SQLAlchemy's
    postgresql+asyncpg, when given)."""
    u = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(u._replace(path=f"/{db}", scheme=scheme or u.scheme))


async def pg_admin(dsn: str, sql: str) -> None:
    """One statement on its own connection (CREATE/DROP DATABASE run outside a transaction)."""
    con = await asyncpg.connect(dsn)
    try:
        await con.execute(sql)
    finally:
        await con.close()


async def pg_recreate(admin_dsn: str) -> None:
    """PG_DB dropped (with its sessions) and created empty."""
    await pg_admin(admin_dsn, f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    await pg_admin(admin_dsn, f"CREATE DATABASE {PG_DB}")


async def pg_drop(admin_dsn: str) -> None:
    await pg_admin(admin_dsn, f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")


@dataclass
class Backend:
    name: str  # "sqlite" | "postgresql"
    workdir: Path
    pg_admin_dsn: str = ""  # the PostgreSQL server's admin DSN (postgresql backend only)

    def fresh(self, tag: str) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        if self.name == "postgresql":
            asyncio.run(pg_recreate(self.pg_admin_dsn))
            return pg_url(self.pg_admin_dsn, PG_DB, "postgresql+asyncpg")
        path = self.workdir / f"{tag}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return f"sqlite+aiosqlite:///{path}"
