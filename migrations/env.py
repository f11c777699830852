"""Alembic environment: async engines (sqlite+aiosqlite, postgresql+asyncpg).

The URL comes from, in order: `config.attributes["url"]` (storage.migrate), `-x url=...`,
`sqlalchemy.url` in the ini file, the COORD_DATABASE_URL environment variable. Plain
`sqlite:///` and `postgresql://` URLs are accepted: the async driver is implied.

Concurrent upgrades (several nodes starting at once against one store) are serialized: SQLite
runs the whole upgrade in one BEGIN IMMEDIATE transaction, PostgreSQL takes a transaction-scoped
advisory lock before Alembic reads the current revision.
"""

from __future__ import annotations

import asyncio
import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from storage.sql.dialect import create_engine, dialect_for
from storage.sql.engine import async_url
from storage.sql.tables import metadata

config = context.config
target_metadata = metadata

if config.config_file_name is not None:  # the alembic CLI; programmatic runs leave logging alone
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    url = (
        config.attributes.get("url")
        or context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get("COORD_DATABASE_URL")
    )
    if not url:
        raise RuntimeError("no database URL: pass -x url=... or set COORD_DATABASE_URL")
    return str(url)


def run_migrations_offline() -> None:
    url = async_url(_url())
    context.configure(
        url=url.render_as_string(hide_password=False),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=dialect_for(url.get_backend_name()).batch_migrations,
    )
    with context.begin_transaction():
        context.run_migrations()


def do_run_migrations(connection: Connection) -> None:
    dialect = dialect_for(connection.dialect.name)
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=dialect.batch_migrations,
        transactional_ddl=True,  # SQLite too: our BEGIN hook makes its DDL transactional
    )
    with context.begin_transaction():
        dialect.lock_migrations(connection)
        context.run_migrations()


async def run_async_migrations() -> None:
    engine = create_engine(_url(), poolclass=NullPool)
    try:
        async with dialect_for(engine.dialect.name).write_engine(engine).connect() as connection:
            await connection.run_sync(do_run_migrations)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_async_migrations())
