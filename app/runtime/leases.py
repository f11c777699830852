"""Leases: which log partitions this node holds, renewed every TTL/4, taken and given back as
the placement plan says (design.md §6.2, §7); and compaction of what it holds (design.md §8.4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from app.config import Settings
from app.runtime import placement
from app.runtime.loader import Loader, LoadFailure
from app.runtime.runtime import (
    METADATA_PARTITION,
    CoordinatorRuntime,
    Partition,
    PartitionState,
    monotonic_ms,
    now_ms,
)
from app.service import Broker
from storage.errors import FencedError, StorageError
from storage.ports import Compactor, LeaseRow, LeaseTable, NodeRegistry

log = logging.getLogger(__name__)


@dataclass(slots=True)
class LoadError:
    """Why a partition's last load failed, and when this node tries again."""

    reason: str
    offset: int | None  # the record that could not be replayed, when one could not
    attempts: int
    retry_at_ms: int  # monotonic


LOAD_RETRY_MIN_MS = 1_000
EXPIRY_MARGIN_MS = 5  # a round at a lease's expiry starts this much after it
LOAD_RETRY_MAX_MS = 60_000


class LeaseStore(LeaseTable, NodeRegistry, Compactor, Protocol):
    """What a lease round uses of the store: the leases, the nodes, and compaction of what this
    node holds."""


class LeaseManager:
    """One lease round at a time: renew, heartbeat the node row, plan, hand over, claim."""

    def __init__(
        self,
        settings: Settings,
        runtime: CoordinatorRuntime,
        event_log: LeaseStore,
        loader: Loader,
        broker: Broker,
        after_round: Callable[[], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.runtime = runtime
        self.log = event_log
        self.loader = loader
        self.broker = broker
        self._after_round = after_round  # the topic registry's refresh
        # stop serving a partition this long before its lease could be taken by another node
        self.safety_ms = max(settings.lease_ttl_ms // 5, 200)
        self.live_brokers: dict[int, Broker] = {self.node_id: broker}
        self.admin_urls: dict[int, str] = {}
        # node id -> (last heartbeat, start) in the store's clock, as the last lease round read it
        self.node_heartbeats: dict[int, tuple[int, int]] = {}
        self.leases: dict[int, LeaseRow] = {}
        self.plan: dict[int, int] = {}
        self.compaction_runs = 0
        self.load_errors: dict[int, LoadError] = {}  # partition -> its last failed load
        # the database failing the lease rounds: (what it said, since when, monotonic ms)
        self.round_error: tuple[str, int] | None = None
        # (database time, this node's monotonic time) when it was last read
        self._db_clock: tuple[int, int] | None = None
        # the plan without this node, as its peers make it once it is gone (`coordinator_for`)
        self._successors: dict[int, int] | None = None
        self.lapsed: set[int] = set()  # partitions dropped unrenewed since the last good round
        # loop time of the earliest other node's lease expiry the last round read (`run`)
        self.expiry_round: float | None = None

    @property
    def partitions(self) -> dict[int, Partition]:
        return self.runtime.partitions

    # ==== the lease round =======================================================================

    async def run(self) -> None:
        # Rounds start every TTL/4 from the previous round's start, not from its end, so a
        # slow round (a slow database) does not stretch the renewal period. A lease of another
        # node expiring before the next round (its node stopped renewing) gets a round of its
        # own at that moment: a takeover waits for the lease, not for the lease plus up to
        # TTL/4. Live nodes renew every TTL/4, so theirs never come due.
        interval = self.settings.lease_ttl_ms / 4000
        loop = asyncio.get_running_loop()
        next_round = loop.time() + interval
        while True:
            due = next_round if self.expiry_round is None else min(next_round, self.expiry_round)
            await asyncio.sleep(max(due - loop.time(), 0))
            self.expiry_round = None
            if due >= next_round:
                next_round = loop.time() + interval
            try:
                await self.tick()
                if self.round_error is not None:
                    log.info("lease rounds succeed again after: %s", self.round_error[0])
                self.round_error = None
            except StorageError as e:
                log.warning("lease round failed: %s", e)
                first = self.round_error[1] if self.round_error is not None else monotonic_ms()
                self.round_error = (f"{type(e).__name__}: {e}", first)
            except Exception:
                log.exception("lease round crashed")

    async def tick(self) -> None:
        """One lease round: heartbeat, renew, follow the placement plan, refresh topics."""
        # Renew first: under load every statement waits for a turn of a busy event loop, and
        # the validity of what we hold counts from mono0, taken just before the renewal, on
        # this node's monotonic clock. Lease and node expiry are on the database's clock,
        # shared by every node (design.md §6.4): t0 is the database time as last read, moved
        # on by the monotonic time since, so the renewal waits for no extra round trip.
        mono0 = monotonic_ms()
        if self._db_clock is None:
            self._db_clock = (await self.log.clock_ms(), monotonic_ms())
        t0 = self._db_clock[0] + (mono0 - self._db_clock[1])
        ttl = self.settings.lease_ttl_ms
        held = dict(self.partitions)
        renewed = await self.log.renew_leases(
            self.node_id, {pid: p.epoch for pid, p in held.items()}, ttl, t0
        )
        valid_until = mono0 + ttl - self.safety_ms
        for pid, p in held.items():
            if pid in renewed:
                # (dropped meanwhile as lapsed: the lease is still ours, claimed again below)
                p.valid_until = valid_until
            else:
                self.runtime.drop(p, "lease lost to another node")
        if not await self.log.heartbeat_node(self.node_id, t0):
            b = self.broker
            await self.log.register_node(
                self.node_id,
                b.host,
                b.port,
                None,
                t0,
                listeners={name: (host, port) for name, host, port in b.endpoints},
            )
        leases = {row.partition: row for row in await self.log.leases()}
        nodes = await self.log.live_nodes(t0, ttl)
        self.live_brokers = {
            n.node_id: Broker(
                n.node_id,
                n.kafka_host,
                n.kafka_port,
                tuple((name, h, p) for name, (h, p) in n.listeners.items()),
            )
            for n in nodes
        }
        self.live_brokers[self.node_id] = self.broker
        self.admin_urls = {n.node_id: n.admin_url for n in nodes if n.admin_url}
        self.node_heartbeats = {n.node_id: (n.heartbeat_ms, n.started_ms) for n in nodes}
        self.leases = leases
        self._successors = None
        foreign = [
            row.expires_at_ms
            for row in leases.values()
            if row.owner_node_id not in (None, self.node_id) and row.expires_at_ms > t0
        ]
        if foreign:  # mono0 is t0 on this node's clock
            due_in_ms = mono0 + min(foreign) - t0 + EXPIRY_MARGIN_MS - monotonic_ms()
            self.expiry_round = asyncio.get_running_loop().time() + max(due_in_ms, 0) / 1000
        current = {
            pid: row.owner_node_id
            for pid, row in leases.items()
            if row.owner_node_id in self.live_brokers and row.expires_at_ms > t0
        }
        everything = [METADATA_PARTITION, *range(self.runtime.log_partitions)]
        self.plan = placement.plan(everything, self.live_brokers, current)
        for pid, p in list(self.partitions.items()):
            if p.state is PartitionState.UNLOADED:
                continue  # dropped while this round waited for the store
            if self.plan.get(pid) != self.node_id and p.state is not PartitionState.LOADING:
                log.info("partition %d moves to node %s", pid, self.plan.get(pid))
                await self.handover(p)
        wanted = []
        for pid in everything:
            if pid in self.partitions:
                continue
            row = leases.get(pid)
            free = row is None or row.owner_node_id is None or row.expires_at_ms <= t0
            failed = self.load_errors.get(pid)
            if failed is not None and failed.retry_at_ms > monotonic_ms():
                continue  # backing off: a record it cannot replay does not make a hot loop
            if self.plan.get(pid) == self.node_id:
                if free or (row is not None and row.owner_node_id == self.node_id):
                    wanted.append(pid)
            elif row is not None and free and row.expires_at_ms + ttl <= t0:
                # an orphan its planned owner did not claim within a TTL of its release or
                # expiry (a fresh handover is left to the planned owner)
                wanted.append(pid)
        if wanted:
            got = await self.log.acquire_leases(wanted, self.node_id, ttl, t0, bump_own=True)
            for pid, epoch in sorted(got.items()):
                self._claim(pid, epoch, valid_until)
        await self._after_round()
        self._db_clock = (await self.log.clock_ms(), monotonic_ms())  # for the next round
        self.lapsed.clear()

    def _claim(self, pid: int, epoch: int, valid_until: int) -> None:
        p = self.runtime.add(pid, epoch, valid_until)
        if pid != METADATA_PARTITION:
            p.load_task = asyncio.create_task(self._load(p), name=f"load-{pid}")
        else:
            p.state = PartitionState.ACTIVE

    async def _load(self, p: Partition) -> None:
        try:
            await self.loader.load(p)
            self.load_errors.pop(p.id, None)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # give the lease back and try again later, backing off: other partitions go on
            previous = self.load_errors.get(p.id)
            attempts = 1 if previous is None else previous.attempts + 1
            delay = min(LOAD_RETRY_MIN_MS * 2 ** (attempts - 1), LOAD_RETRY_MAX_MS)
            offset = e.offset if isinstance(e, LoadFailure) else None
            reason = e.reason if isinstance(e, LoadFailure) else f"{type(e).__name__}: {e}"
            self.load_errors[p.id] = LoadError(reason, offset, attempts, monotonic_ms() + delay)
            log.warning(
                "partition %d failed to load (attempt %d, record offset %s): %s; retrying in %d ms",
                p.id,
                attempts,
                offset,
                reason,
                delay,
            )
            if self.partitions.get(p.id) is p:
                self.runtime.drop(p, "load failed")
                with contextlib.suppress(StorageError):
                    await self.log.release_lease(
                        p.id, self.node_id, p.epoch, await self.log.clock_ms()
                    )

    async def handover(self, p: Partition) -> None:
        """Graceful move: unload, let queued writes land, then give the lease back."""
        self.runtime.drop(p, "handover")
        with contextlib.suppress(StorageError):
            await self.runtime.writer.submit(p.id, p.epoch, [])  # after our earlier writes
        with contextlib.suppress(StorageError):
            await self.log.release_lease(p.id, self.node_id, p.epoch, await self.log.clock_ms())

    async def run_lapse_watch(self) -> None:
        """Drop a partition once its lease may be another node's (TTL after the renewal it
        counts from) while no round renewed it: a round waiting on a store that does not answer
        must not keep requests waiting with it, and timers are stopped while it lapses."""
        interval = self.safety_ms / 2000
        while True:
            await asyncio.sleep(interval)
            now = monotonic_ms()
            for p in list(self.partitions.values()):
                if now >= p.valid_until + self.safety_ms:
                    self.lapsed.add(p.id)
                    self.runtime.drop(p, "lease lapsed unrenewed", unheard=True)

    def coordinator_for(self, pid: int) -> int | None:
        """Where a client should look for `pid`'s coordinator: its owner; when nobody surely
        serves it, the node that will. Handed over: the plan's choice. Cut off from the store
        (our own lease lapsed): the plan this node's peers make once it is gone from the node
        table. A client only ever asks the node it fetches through, so "ask another node"
        (COORDINATOR_NOT_AVAILABLE) would keep it here until the store answers again; a wrong
        guess costs a NOT_COORDINATOR and another lookup."""
        owner = self.owner_of(pid)
        if owner is not None:
            return owner
        planned = self.plan.get(pid)
        if planned is not None and planned != self.node_id and planned in self.live_brokers:
            return planned
        if pid not in self.lapsed and pid not in self.partitions:
            return None  # e.g. an orphan not yet claimed: its planned owner will
        if self._successors is None:
            others = [n for n in self.live_brokers if n != self.node_id]
            current = {
                q: n
                for q, r in self.leases.items()
                if (n := r.owner_node_id) is not None and n in others
            }
            everything = [METADATA_PARTITION, *range(self.runtime.log_partitions)]
            self._successors = placement.plan(everything, others, current)
        return self._successors.get(pid)

    def owner_of(self, pid: int) -> int | None:
        """The node serving `pid`: this node if it has it, else the live lease holder; None
        when nobody surely does, our own lease lapsed unrenewed included (cut off from the
        store, we must not send clients back to ourselves: they ask another node instead)."""
        if (mine := self.partitions.get(pid)) is not None:
            return self.node_id if monotonic_ms() < mine.valid_until else None
        row = self.leases.get(pid)
        if row is None or row.owner_node_id == self.node_id:
            return None  # stale view of our own lease: it moved on since the last round
        if row.owner_node_id not in self.live_brokers:
            return None
        return row.owner_node_id

    # ==== compaction ============================================================================

    async def run_compactor(self) -> None:
        while True:
            await asyncio.sleep(self.settings.compaction_interval_ms / 1000)
            try:
                await self.compact()
            except Exception:
                log.exception("compaction round crashed")

    async def compact(self) -> int:
        """Compact every loaded partition this node owns; returns records removed.

        Only the lease holder compacts (storage fences it like an append); partitions still
        loading here are skipped, and loads elsewhere read one snapshot.
        """
        removed = 0
        retention = self.settings.tombstone_retention_ms
        cutoff = now_ms() - retention
        keep = self.settings.history_retention_ms
        history_cutoff = None if keep < 0 else now_ms() - keep
        for p in list(self.partitions.values()):
            if p.state is not PartitionState.ACTIVE:
                continue
            # an idle partition is visited again once tombstones or history may have expired
            revisit = retention if keep < 0 else min(retention, keep)
            due = now_ms() - p.compacted_at_ms >= revisit
            if p.appended_since_compaction == 0 and not due:
                continue
            appended = p.appended_since_compaction
            try:
                stats = await self.log.compact(
                    p.id,
                    self.node_id,
                    p.epoch,
                    tombstone_cutoff_ms=cutoff,
                    archive=self.settings.archive_history,
                    history_cutoff_ms=history_cutoff,
                )
            except FencedError:
                continue  # the lease round will notice and unload
            except StorageError as e:
                log.warning("compaction of partition %d failed: %s", p.id, e)
                continue
            p.appended_since_compaction -= appended
            p.compacted_at_ms = now_ms()
            if stats.removed:
                p.appended_since_compaction += 1  # a removed value may free its tombstone
            removed += stats.removed
        self.compaction_runs += 1
        return removed
