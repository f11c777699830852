"""Partition leases: who may write each log partition, at which epoch, and the fence on it.

Lease writers lock the rows in partition order (FOR UPDATE on PostgreSQL), as the append's
fence does (FOR SHARE), so the two never deadlock; a takeover waits for an in-flight append.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from sqlalchemy import bindparam, select, update

from storage.ports import LeaseRow
from storage.sql.database import Database
from storage.sql.pg_append import Claim, fence_error
from storage.sql.statements import Rows, Statements, Txn
from storage.sql.tables import partition_leases


def fence(sql: Statements, claims: Sequence[Claim]) -> Txn[None]:
    """Raise FencedError unless each claim holds its lease. On PostgreSQL the lease rows stay
    locked until the transaction ends, so a takeover waits for it."""
    rows = yield sql.lease_rows(sorted({p for p, _, _ in claims}), "FOR SHARE")
    leases = {p: (owner, epoch) for p, owner, epoch in rows}
    for partition, node_id, claimed in claims:
        if leases.get(partition, (None, None)) != (node_id, claimed):
            raise fence_error(claims, leases)


class Leases:
    """EventLog's lease operations."""

    _db: Database

    async def acquire_lease(
        self, partition: int, node_id: int, ttl_ms: int, now_ms: int, *, bump_own: bool = False
    ) -> int | None:
        """Take `partition`'s lease if it is free, expired or already ours (then it is extended).

        Returns the epoch now held, or None when another node holds a live lease. The epoch is
        bumped whenever the lease was free or expired (even if it was ours: writes queued under
        the lapsed epoch are fenced), and kept when a live lease of ours is extended (unless
        `bump_own`, see acquire_leases).
        """
        got = await self.acquire_leases([partition], node_id, ttl_ms, now_ms, bump_own=bump_own)
        return got.get(partition)

    async def acquire_leases(
        self,
        partitions: Sequence[int],
        node_id: int,
        ttl_ms: int,
        now_ms: int,
        *,
        bump_own: bool = False,
    ) -> dict[int, int]:
        """acquire_lease for many partitions in one transaction: {partition: epoch} of those
        taken (or extended).

        `bump_own`: a live lease already held by `node_id` is taken at a new epoch instead of
        extended — a restarted process must fence whatever its previous incarnation queued."""
        if not partitions:
            return {}
        L = partition_leases.c
        parts = sorted(set(partitions))
        async with self._db.write() as conn:
            await conn.execute(
                self._db.insert(partition_leases).on_conflict_do_nothing(
                    index_elements=["partition"]
                ),
                [
                    {"partition": p, "owner_node_id": None, "epoch": 0, "expires_at_ms": 0}
                    for p in parts
                ],
            )
            rows = await conn.execute(
                select(L.partition, L.owner_node_id, L.epoch, L.expires_at_ms)
                .where(L.partition.in_(parts))
                .order_by(L.partition)
                .with_for_update()
            )
            taken: dict[int, int] = {}
            for p, owner, epoch, expires in cast(Rows, rows.all()):
                if owner == node_id and expires > now_ms:
                    taken[p] = epoch + 1 if bump_own else epoch
                elif owner is None or expires <= now_ms:
                    taken[p] = epoch + 1
            if taken:
                await conn.execute(
                    update(partition_leases)
                    .where(L.partition == bindparam("p"))
                    .values(
                        owner_node_id=node_id, epoch=bindparam("e"), expires_at_ms=now_ms + ttl_ms
                    ),
                    [{"p": p, "e": e} for p, e in taken.items()],
                )
        return taken

    async def renew_leases(
        self, node_id: int, partitions_with_epochs: dict[int, int], ttl_ms: int, now_ms: int
    ) -> set[int]:
        """Extend the leases still held by `node_id` at the given epochs (expired or not: the
        epoch, not the clock, is the fence). Returns the partitions renewed."""
        if not partitions_with_epochs:
            return set()
        # the lease round's hot write: on a SQLite file, one hop of the writer thread
        txn = _renew(self._db.sql, node_id, partitions_with_epochs, now_ms + ttl_ms)
        return set(await self._db.transact(txn))

    async def release_lease(
        self, partition: int, node_id: int, epoch: int, now_ms: int = 0
    ) -> bool:
        """Give the lease up (graceful shutdown/unload). False if it was not ours at `epoch`.
        The next acquirer bumps the epoch, so stragglers of ours are fenced. The row keeps the
        release time as its expiry, so placement can tell a fresh release from an orphan."""
        L = partition_leases.c
        async with self._db.write() as conn:
            res = await conn.execute(
                update(partition_leases)
                .where(L.partition == partition, L.owner_node_id == node_id, L.epoch == epoch)
                .values(owner_node_id=None, expires_at_ms=now_ms)
            )
        return bool(res.rowcount)

    async def leases(self) -> list[LeaseRow]:
        L = partition_leases.c
        async with self._db.read() as conn:
            rows = await conn.execute(
                select(L.partition, L.owner_node_id, L.epoch, L.expires_at_ms).order_by(L.partition)
            )
            return [LeaseRow(*r) for r in cast(Rows, rows.all())]


def _renew(sql: Statements, node_id: int, epochs: dict[int, int], until_ms: int) -> Txn[list[int]]:
    rows = yield sql.lease_rows(sorted(epochs), "FOR UPDATE")
    mine = sorted(p for p, owner, epoch in rows if owner == node_id and epoch == epochs[p])
    if mine:
        yield sql.extend_leases(mine, until_ms)
    return mine
