"""Compaction: keep the newest record per key of a partition, archive what it removes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import BigInteger, ColumnElement, func, insert, literal, select

from storage.columns import HISTORY_COLUMNS, LOG_COLUMN_NAMES
from storage.ports import CompactionStats
from storage.sql.database import Database, wall_clock_ms
from storage.sql.leases import fence
from storage.sql.statements import run_async
from storage.sql.tables import log_history, log_records


class Compaction:
    """EventLog's compaction."""

    _db: Database

    async def compact(
        self,
        partition: int,
        node_id: int,
        epoch: int,
        *,
        tombstone_cutoff_ms: int,
        archive: bool = True,
        chunk_offsets: int = 5000,
        now_ms: int | None = None,
        history_cutoff_ms: int | None = None,
    ) -> CompactionStats:
        """Keep the newest record per key; drop tombstones appended before the cutoff.

        Fenced like an append (only the lease holder compacts), in short transactions of at
        most `chunk_offsets` offsets so appends are never blocked for long. Removed rows go to
        log_history when `archive`. Safe against a concurrent paged load: a superseded record
        is removed only when a newer one of its key exists further on, and a tombstone only once
        no older record of its key is left (an earlier round removed those) — a reader that saw
        the older value will still meet the tombstone. The partition's last row always stays,
        since the next offset is derived from it.

        With `history_cutoff_ms`, the partition's log_history rows archived before it are
        deleted too (COORD_HISTORY_RETENTION_MS), `chunk_offsets` rows per transaction.
        """
        db = self._db
        t = wall_clock_ms() if now_ms is None else now_ms
        R = log_records.c
        async with db.read() as conn:
            lo, hi = (
                await conn.execute(
                    select(func.min(R.offset), func.max(R.offset)).where(R.partition == partition)
                )
            ).one()
        stats = CompactionStats(partition)
        if history_cutoff_ms is not None:
            stats.history_removed = await self._expire_history(
                partition, node_id, epoch, history_cutoff_ms, chunk_offsets
            )
        if lo is None:
            return stats
        newer = log_records.alias("newer")
        N = newer.c

        def same_key(where: Callable[[Any, Any], ColumnElement[bool]]) -> ColumnElement[bool]:
            """Another record of the row's key and type exists, at an offset that satisfies
            where(its offset, the row's offset)."""
            return (
                select(N.offset)
                .where(N.partition == partition, N.key == R.key, where(N.offset, R.offset))
                .where(N.record_type == R.record_type)
                .exists()
            )

        superseded = same_key(lambda n, r: n > r)
        older = same_key(lambda n, r: n < r)
        expired_tombstone = (
            R.value.is_(None) & (R.append_time_ms < tombstone_cutoff_ms) & ~older & (R.offset != hi)
        )
        archived_columns = [R[name] for name in LOG_COLUMN_NAMES]
        start = int(lo)
        while start <= hi:
            end = min(start + chunk_offsets, int(hi) + 1)
            # Choose outside the write transaction, so the write lock is held only for the
            # archive and the delete: appends and lease renewals wait for no scan. What is
            # chosen stays true: a superseded record keeps a newer one (only superseded ones
            # are removed), and no record older than a tombstone ever comes back.
            where = (R.partition == partition) & (R.offset >= start) & (R.offset < end)
            async with db.read() as conn:
                doomed = [
                    o
                    for (o,) in await conn.execute(
                        select(R.offset).where(where & (superseded | expired_tombstone))
                    )
                ]
            async with db.write() as conn:
                await run_async(conn, fence(db.sql, [(partition, node_id, epoch)]))
                if doomed:
                    chosen = (R.partition == partition) & R.offset.in_(doomed)
                    if archive:
                        await conn.execute(
                            insert(log_history).from_select(
                                [c.name for c in HISTORY_COLUMNS],
                                select(*archived_columns, literal(t, BigInteger)).where(chosen),
                            )
                        )
                    await conn.execute(log_records.delete().where(chosen))
                    stats.removed += len(doomed)
                    stats.archived += len(doomed) if archive else 0
            stats.scanned += end - start
            start = end
        return stats

    async def _expire_history(
        self, partition: int, node_id: int, epoch: int, cutoff_ms: int, chunk: int
    ) -> int:
        db = self._db
        H = log_history.c
        removed = 0
        while True:
            async with db.write() as conn:
                await run_async(conn, fence(db.sql, [(partition, node_id, epoch)]))
                doomed = [
                    o
                    for (o,) in await conn.execute(
                        select(H.offset)
                        .where(H.partition == partition, H.compacted_at_ms < cutoff_ms)
                        .limit(chunk)
                    )
                ]
                if doomed:
                    await conn.execute(
                        log_history.delete().where(
                            (H.partition == partition) & H.offset.in_(doomed)
                        )
                    )
            removed += len(doomed)
            if len(doomed) < chunk:
                return removed
