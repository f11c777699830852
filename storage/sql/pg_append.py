"""PostgreSQL appends in one round trip: the lease fence and the insert as one statement.

Through SQLAlchemy's pool an append took seven round trips: the pool's pre-ping on checkout
(BEGIN, ";", ROLLBACK on asyncpg), BEGIN, the lease rows FOR SHARE, the INSERT (an executemany),
COMMIT. Here one statement, prepared once on a connection of its own, does all of it as a single
implicit transaction: a data-modifying CTE locks the lease rows FOR SHARE (in partition order,
like every lease writer), inserts the rows (columns passed as arrays and unnested) only if every
claim holds its lease, and reports the verdict. The reply comes back after the commit is durable
(synchronous_commit as the server has it), so "fenced check and insert in one transaction"
holds exactly as before: a takeover's UPDATE of a lease row waits for this statement's commit,
and a statement that sees a lease it does not hold inserts nothing at all.

The connection is opened lazily with the engine's own settings (connect_args: lock_timeout and
the idle-in-transaction timeout of EventLog.open), outside the pool, and dropped on any error,
so the next append connects afresh (a database restart costs the append that finds out).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from sqlalchemy import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from storage import errors
from storage.errors import FencedError

# (partition, node_id, epoch): a writer's claim on a partition's lease
Claim = tuple[int, int, int]

# $1-$3: the claims (partition, node_id, epoch) as parallel arrays; $4-$10 the row columns in
# LOG_COLUMNS order except append_time_ms, which is $11 for every row.
APPEND_SQL = """\
WITH lease AS MATERIALIZED (
    SELECT "partition", owner_node_id, epoch FROM partition_leases
    WHERE "partition" = ANY($1::integer[]) ORDER BY "partition" FOR SHARE
), fenced AS MATERIALIZED (
    SELECT c.p FROM unnest($1::integer[], $2::integer[], $3::integer[]) AS c(p, node_id, epoch)
    LEFT JOIN lease l ON l."partition" = c.p
    WHERE l.owner_node_id IS DISTINCT FROM c.node_id OR l.epoch IS DISTINCT FROM c.epoch
), ins AS (
    INSERT INTO log_records
        ("partition", "offset", record_type, key, value, epoch, node_id, append_time_ms)
    SELECT r.*, $11::bigint FROM unnest($4::integer[], $5::bigint[], $6::smallint[],
        $7::bytea[], $8::bytea[], $9::integer[], $10::integer[]) AS r
    WHERE NOT EXISTS (SELECT FROM fenced)
    RETURNING 1
)
SELECT NOT EXISTS (SELECT FROM fenced), (SELECT count(*) FROM ins),
    (SELECT array_agg("partition") FROM lease), (SELECT array_agg(owner_node_id) FROM lease),
    (SELECT array_agg(epoch) FROM lease)"""


# Keys and values one statement carries at most: its arrays travel in one Bind message, which
# PostgreSQL caps at 1 GB. A larger append (records may be 16 MiB each) takes the executemany
# transaction, one Bind per row.
MAX_STATEMENT_BYTES = 64 << 20


class Columns:
    """The rows of one append, column by column (what the statement unnests); the next offset
    of each partition after them and the last offset of each batch."""

    __slots__ = (
        "epochs", "keys", "last", "next_offsets", "nodes", "offsets", "partitions", "types",
        "values",
    )  # fmt: skip

    def __init__(self, next_offsets: dict[int, int]) -> None:
        self.next_offsets = dict(next_offsets)
        self.last: list[int] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.types: list[int] = []
        self.keys: list[bytes] = []
        self.values: list[bytes | None] = []
        self.epochs: list[int] = []
        self.nodes: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)


def fence_error(claims: Sequence[Claim], leases: dict[int, tuple[int | None, int]]) -> FencedError:
    """The FencedError of the first claim (in partition order) that `leases` does not hold."""
    for partition, node_id, claimed in sorted(claims):
        owner, epoch = leases.get(partition, (None, None))
        if owner != node_id or epoch != claimed:
            return FencedError(partition, claimed, owner, epoch)
    # the statement's verdict is the authority; this only names the partition
    return FencedError(min(p for p, _, _ in claims), None)


class PgAppender:
    """APPEND_SQL on one dedicated asyncpg connection (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, connect_args: dict[str, Any]) -> None:
        url: URL = engine.url
        # NullPool: the connection is held here, never pooled, and never pre-pinged
        self._engine = create_async_engine(url, poolclass=NullPool, connect_args=connect_args)
        self._conn: AsyncConnection | None = None
        self._driver: Any = None  # asyncpg.Connection
        self._stmt: Any = None  # asyncpg.PreparedStatement of APPEND_SQL

    async def append(self, claims: Sequence[Claim], cols: Columns, now_ms: int) -> list[int]:
        """Insert `cols` if every claim holds its lease (then return the last offset of each
        batch), else raise FencedError and insert nothing. Storage errors come out as
        storage.errors types."""
        parts = [c[0] for c in claims]
        nodes = [c[1] for c in claims]
        epochs = [c[2] for c in claims]
        args = (
            parts, nodes, epochs, cols.partitions, cols.offsets, cols.types, cols.keys,
            cols.values, cols.epochs, cols.nodes, now_ms,
        )  # fmt: skip
        try:
            row = await self._run(args)
        except BaseException as e:
            if not _not_executed(e):
                raise
            row = await self._run(args)  # e.g. a plan invalidated by DDL: nothing ran
        ok, inserted, lp, lo, le = row
        if not ok:
            leases = dict(zip(lp or (), zip(lo or (), le or (), strict=True), strict=True))
            raise fence_error(claims, leases)
        if inserted != len(cols):
            raise errors.StorageError(f"append inserted {inserted} of {len(cols)} rows")
        return cols.last

    async def _run(self, args: Sequence[Any]) -> Any:
        try:
            with _translated():
                stmt = await self._statement()
                return await stmt.fetchrow(*args)
        except BaseException:
            await self._drop()  # unknown state (or outcome): never reuse this connection
            raise

    async def _statement(self) -> Any:
        if self._driver is not None and self._driver.is_closed():
            await self._drop()  # the server went away while we were idle
        if self._stmt is None:
            self._conn = await self._engine.connect()
            raw = await self._conn.get_raw_connection()
            self._driver = raw.driver_connection
            self._stmt = await self._driver.prepare(APPEND_SQL)
        return self._stmt

    async def _drop(self) -> None:
        conn, self._conn, self._driver, self._stmt = self._conn, None, None, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.invalidate()
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop()
        await self._engine.dispose()


def _not_executed(e: BaseException) -> bool:
    """Errors raised before the statement could change anything."""
    import asyncpg

    cause = e.__cause__ if isinstance(e, errors.StorageError) else e
    return isinstance(cause, asyncpg.InvalidCachedStatementError) or (
        isinstance(cause, asyncpg.FeatureNotSupportedError) and "cached plan" in str(cause)
    )


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """asyncpg's exceptions as storage.errors, mapped as SQLAlchemy's asyncpg dialect would
    before storage.errors.translate_errors (so both paths fail alike)."""
    import asyncpg

    with errors.translate_errors():
        try:
            yield
        except asyncpg.IntegrityConstraintViolationError as e:
            raise errors.IntegrityError(f"{type(e).__name__}: {e}") from e
        except (asyncpg.InterfaceError, asyncpg.PostgresConnectionError) as e:
            raise errors.OperationalError(f"{type(e).__name__}: {e}") from e
        except asyncpg.PostgresError as e:
            raise errors.StorageError(f"{type(e).__name__}: {e}") from e
