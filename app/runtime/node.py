"""One coordinator node: owns log partitions, drives the pure core, writes then replies.

Every partition's core is called synchronously on the event loop, so calls are run to
completion one at a time: the loop is the serial executor of every partition and the core needs
no locks. What a request has to wait for (a parked join, a durable write) is a future keyed by
the request's handle, resolved when the core emits a reply for that handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from app.config import Settings
from app.group.config import CoreConfig
from app.group.coordinator import GroupCoordinator
from app.group.messages import (
    AdminResult,
    DeleteGroupResult,
    DescribedGroup,
    Error,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.group.records import (
    Record,
    RecordType,
    TopicValue,
    decode_topic_key,
    decode_topic_value,
    partition_for,
    topic_record,
)
from app.group.results import AppendFailure, Continuation, Reply, Result
from app.runtime import placement
from app.runtime.metrics import NodeMetrics
from app.service import Broker, ClusterView, CoordinatorLookup
from storage.errors import FencedError, StorageError
from storage.log import EventLog, LeaseRow
from storage.writer import LogWriter

log = logging.getLogger(__name__)

# A replay yields to the loop after this much CPU time: a load must not starve lease renewals
# (nor delay a PostgreSQL transaction of the lease round past its idle timeout).
REPLAY_SLICE_S = 0.005
_RECORD_TYPES = {t.value: t for t in RecordType}  # the log stores a record type as its number


class _GcPause:
    """Loads pause the cyclic garbage collector. A load allocates millions of long-lived
    objects and frees almost none; the collector would walk them over and over (replay of an
    all-live log measured 1.8x slower with it on), and once enabled again it would walk them
    all once more as they age through its generations (a third of a 100k-group load, in
    py-spy). So when the last load in progress ends, everything alive is frozen (gc.freeze:
    never walked again; reference counting still frees a group when it is deleted or its
    partition unloaded, as the core's state holds no reference cycles) and the collector is
    enabled again. Process-wide, like the collector."""

    holders = 0
    was_enabled = True

    def __enter__(self) -> None:
        if _GcPause.holders == 0:
            _GcPause.was_enabled = gc.isenabled()
            gc.disable()
        _GcPause.holders += 1

    def __exit__(self, *exc: object) -> None:
        _GcPause.holders -= 1
        if _GcPause.holders == 0 and _GcPause.was_enabled:
            gc.freeze()
            gc.enable()


METADATA_PARTITION = -1  # the topic registry's own log partition
T = TypeVar("T")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def append_failure(exc: BaseException) -> AppendFailure:
    if isinstance(exc, FencedError):
        return AppendFailure.NOT_OWNER
    if isinstance(exc, TimeoutError):
        return AppendFailure.TIMEOUT
    return AppendFailure.STORAGE


class NotCoordinatorError(RuntimeError):
    pass


class PartitionState(StrEnum):
    LOADING = "loading"
    ACTIVE = "active"
    UNLOADED = "unloaded"


@dataclass(eq=False)
class Partition:
    id: int
    epoch: int
    state: PartitionState = PartitionState.LOADING
    core: GroupCoordinator | None = None
    records_loaded: int = 0
    load_ms: float = 0.0
    timer: asyncio.TimerHandle | None = None
    armed_deadline: int | None = None
    load_task: asyncio.Task[None] | None = field(default=None, repr=False)
    valid_until: int = 0  # serve only while the lease is surely ours (zombie safety)
    appended_since_compaction: int = 1  # a freshly loaded partition gets one round
    compacted_at_ms: int = 0


class CoordinatorNode:
    """Implements `app.service.CoordinatorService` for one node."""

    def __init__(self, settings: Settings, event_log: EventLog, writer: LogWriter) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.log = event_log
        self.writer = writer
        host, port = settings.advertised_address
        self.broker = Broker(settings.node_id, host, port)
        self.core_config = CoreConfig(
            min_session_timeout_ms=settings.min_session_timeout_ms,
            max_session_timeout_ms=settings.max_session_timeout_ms,
            initial_rebalance_delay_ms=settings.initial_rebalance_delay_ms,
            group_max_size=settings.group_max_size,
            offsets_retention_ms=settings.offsets_retention_ms,
            offsets_retention_check_interval_ms=settings.offsets_retention_check_interval_ms,
        )
        self.log_partitions = settings.log_partitions
        self.partitions: dict[int, Partition] = {}
        self.topics: dict[str, int] = {}
        self.cluster_id = "coordinator"
        self._handles = itertools.count(1)
        # cached: on Python 3.11 each asyncio.get_running_loop() costs a getpid() syscall
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._request_counters: dict[tuple[str, int, int], Any] = {}
        self._lease_task: asyncio.Task[None] | None = None
        self._topics_next_offset = 0
        # stop serving a partition this long before its lease could be taken by another node
        self._safety_ms = max(settings.lease_ttl_ms // 5, 200)
        self.started_ms = 0
        self.live_brokers: dict[int, Broker] = {self.node_id: self.broker}
        self.admin_urls: dict[int, str] = {}
        self.leases: dict[int, LeaseRow] = {}
        self.plan: dict[int, int] = {}
        self.lease_changes = 0
        self._load_slots = asyncio.Semaphore(settings.concurrent_loads)
        self._compactor_task: asyncio.Task[None] | None = None
        self.compaction_runs = 0
        self.metrics = NodeMetrics()
        self.metrics.attach(self)
        writer.on_commit = self.metrics.observe_append
        self._retired_rebalances: dict[str, int] = {}  # counts of unloaded partitions

    # ==== lifecycle =============================================================================

    async def start(self) -> None:
        """Register, claim this node's share of the partitions and keep the leases alive."""
        self._loop = asyncio.get_running_loop()
        self.log_partitions = await self.log.ensure_log_partitions(self.settings.log_partitions)
        t = now_ms()
        host, port = self.settings.advertised_address
        admin_host, admin_port = self.settings.admin_address
        await self.log.register_node(
            self.node_id, host, port, f"http://{admin_host}:{admin_port}", t
        )
        self.started_ms = t
        await self.tick()
        # renewals run from now on, whatever the rest of start-up costs
        self._lease_task = asyncio.create_task(self._lease_loop(), name="leases")
        if self.owns_metadata():
            await self._ensure_topics(self.settings.topic_map)
        self._compactor_task = asyncio.create_task(self._compactor_loop(), name="compactor")

    async def wait_loaded(self) -> None:
        tasks = [p.load_task for p in self.partitions.values() if p.load_task is not None]
        if tasks:
            await asyncio.gather(*tasks)

    def ready(self) -> bool:
        """Every partition this node owns is loaded and surely still its own (a node owning
        nothing yet is not ready)."""
        t = now_ms()
        planned = [pid for pid, node in self.plan.items() if node == self.node_id]
        return (
            bool(self.partitions)
            and all(pid in self.partitions for pid in planned)  # e.g. a load failed: retrying
            and all(
                p.state is PartitionState.ACTIVE and t < p.valid_until
                for p in self.partitions.values()
            )
        )

    async def stop(self, release: bool = True) -> None:
        """Unload everything; with `release`, hand the leases back so others take over at once."""
        for task in (self._lease_task, self._compactor_task):
            if task is not None:
                await cancel_quietly(task)
        self._lease_task = self._compactor_task = None
        for p in list(self.partitions.values()):
            if release:
                await self._handover(p)
            else:
                self._drop(p, "node stopping")
        if release:
            with contextlib.suppress(StorageError):
                await self.log.deregister_node(self.node_id)

    async def _lease_loop(self) -> None:
        # rounds start every TTL/4 from the previous round's start, not from its end, so a
        # slow round (a slow database) does not stretch the renewal period
        interval = self.settings.lease_ttl_ms / 4000
        loop = asyncio.get_running_loop()
        next_round = loop.time() + interval
        while True:
            await asyncio.sleep(max(next_round - loop.time(), 0))
            next_round = loop.time() + interval
            try:
                await self.tick()
            except StorageError as e:
                log.warning("lease round failed: %s", e)
            except Exception:
                log.exception("lease round crashed")

    async def tick(self) -> None:
        """One lease round: heartbeat, renew, follow the placement plan, refresh topics."""
        # renew first: under load every statement waits for a turn of a busy event loop, and
        # the validity of what we hold counts from t0, taken just before the renewal
        t0 = now_ms()
        ttl = self.settings.lease_ttl_ms
        held = {pid: p.epoch for pid, p in self.partitions.items()}
        renewed = await self.log.renew_leases(self.node_id, held, ttl, t0)
        valid_until = t0 + ttl - self._safety_ms
        for pid in held:
            if pid in renewed:
                self.partitions[pid].valid_until = valid_until
            elif pid in self.partitions:
                self._drop(self.partitions[pid], "lease lost to another node")
        if not await self.log.heartbeat_node(self.node_id, t0):
            host, port = self.settings.advertised_address
            await self.log.register_node(self.node_id, host, port, None, t0)
        leases = {row.partition: row for row in await self.log.leases()}
        nodes = await self.log.live_nodes(t0, ttl)
        self.live_brokers = {
            n.node_id: Broker(n.node_id, n.kafka_host, n.kafka_port) for n in nodes
        }
        self.live_brokers[self.node_id] = self.broker
        self.admin_urls = {n.node_id: n.admin_url for n in nodes if n.admin_url}
        self.leases = leases
        current = {
            pid: row.owner_node_id
            for pid, row in leases.items()
            if row.owner_node_id in self.live_brokers and row.expires_at_ms > t0
        }
        everything = [METADATA_PARTITION, *range(self.log_partitions)]
        self.plan = placement.plan(everything, self.live_brokers, current)
        for pid, p in list(self.partitions.items()):
            if self.plan.get(pid) != self.node_id and p.state is not PartitionState.LOADING:
                log.info("partition %d moves to node %s", pid, self.plan.get(pid))
                await self._handover(p)
        wanted = []
        for pid in everything:
            if pid in self.partitions:
                continue
            row = leases.get(pid)
            free = row is None or row.owner_node_id is None or row.expires_at_ms <= t0
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
        await self._refresh_topics()

    async def _compactor_loop(self) -> None:
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
        cutoff = now_ms() - self.settings.tombstone_retention_ms
        for p in list(self.partitions.values()):
            if p.state is not PartitionState.ACTIVE:
                continue
            tombstones_due = now_ms() - p.compacted_at_ms >= self.settings.tombstone_retention_ms
            if p.appended_since_compaction == 0 and not tombstones_due:
                continue
            appended = p.appended_since_compaction
            try:
                stats = await self.log.compact(
                    p.id,
                    self.node_id,
                    p.epoch,
                    tombstone_cutoff_ms=cutoff,
                    archive=self.settings.archive_history,
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

    def _claim(self, pid: int, epoch: int, valid_until: int) -> None:
        log.info("node %d took partition %d at epoch %d", self.node_id, pid, epoch)
        p = Partition(pid, epoch, valid_until=valid_until)
        self.partitions[pid] = p
        self.lease_changes += 1
        if pid != METADATA_PARTITION:
            p.load_task = asyncio.create_task(self._load(p), name=f"load-{pid}")
        else:
            p.state = PartitionState.ACTIVE

    async def _load(self, p: Partition) -> None:
        try:
            await self._replay(p)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            # give the lease back: the next lease round claims the partition again and retries
            log.warning("partition %d failed to load, retrying: %s", p.id, e)
            if self.partitions.get(p.id) is p:
                self._drop(p, "load failed")
                with contextlib.suppress(StorageError):
                    await self.log.release_lease(p.id, self.node_id, p.epoch, now_ms())

    async def _replay(self, p: Partition) -> None:
        started = time.perf_counter()
        core = GroupCoordinator(self.core_config, _member_id)
        # one snapshot per load, so a compaction meanwhile cannot hide a tombstone from it;
        # each holds a connection, hence the bound on concurrent loads
        with _GcPause():
            async with self._load_slots:
                n, records = await self.log.read_latest(p.id)
            clock = time.perf_counter
            resume = clock() + REPLAY_SLICE_S
            for i, (t, key, value) in enumerate(records):
                core.replay(Record(_RECORD_TYPES[t], key, value))  # unknown type: load fails
                if i & 63 == 0 and clock() > resume:
                    await asyncio.sleep(0)  # let leases, requests and other loads progress
                    resume = clock() + REPLAY_SLICE_S
            if self.partitions.get(p.id) is not p:
                return  # lost while loading
            p.core = core
            p.records_loaded = n
            p.state = PartitionState.ACTIVE
            p.load_ms = (time.perf_counter() - started) * 1000
            self.metrics.load_seconds.observe(p.load_ms / 1000)
            log.info(
                "partition %d loaded: %d records, %d groups in %.0f ms",
                p.id,
                n,
                len(core.groups),
                p.load_ms,
            )
            self._apply(p, core.on_loaded(now_ms()))

    def _drop(self, p: Partition, why: str) -> None:
        """Stop serving `p` now: parked requests get NOT_COORDINATOR (spec §7 unloading)."""
        log.info("node %d unloads partition %d: %s", self.node_id, p.id, why)
        self.partitions.pop(p.id, None)
        task = p.load_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
        if p.timer is not None:
            p.timer.cancel()
            p.timer = None
        p.state = PartitionState.UNLOADED
        if p.core is not None:
            for reason, n in p.core.rebalances.items():
                self._retired_rebalances[reason] = self._retired_rebalances.get(reason, 0) + n
            self._deliver(p.core.unload(now_ms()).replies)
        p.core = None
        self.lease_changes += 1

    async def _handover(self, p: Partition) -> None:
        """Graceful move: unload, let queued writes land, then give the lease back."""
        self._drop(p, "handover")
        with contextlib.suppress(StorageError):
            await self.writer.submit(p.id, p.epoch, [])  # ordered after our earlier writes
        with contextlib.suppress(StorageError):
            await self.log.release_lease(p.id, self.node_id, p.epoch, now_ms())

    def observe_request(self, api: str, version: int, error: int) -> None:
        # the labelled child is looked up once per (api, version, error): prometheus-client's
        # labels() costs more than the rest of a Heartbeat's handling
        child = self._request_counters.get((api, version, error))
        if child is None:
            child = self.metrics.requests.labels(api, str(version), str(error))
            self._request_counters[(api, version, error)] = child
        child.inc()

    def rebalance_counts(self) -> dict[str, int]:
        counts = dict(self._retired_rebalances)
        for p in self.partitions.values():
            if p.core is not None:
                for reason, n in p.core.rebalances.items():
                    counts[reason] = counts.get(reason, 0) + n
        return counts

    def owns_metadata(self) -> bool:
        p = self.partitions.get(METADATA_PARTITION)
        return p is not None and p.state is PartitionState.ACTIVE

    # ==== topics (the metadata partition) ====================================================

    async def _refresh_topics(self) -> None:
        """Tail the topic registry; per-partition offsets commit in order (one fenced writer)."""
        async with contextlib.aclosing(
            self.log.read(METADATA_PARTITION, self._topics_next_offset)
        ) as batches:
            async for batch in batches:
                for stored in batch:
                    self._topics_next_offset = stored.offset + 1
                    if stored.type != RecordType.TOPIC:
                        continue
                    name = decode_topic_key(stored.key)
                    if stored.value is None:
                        self.topics.pop(name, None)
                    else:
                        self.topics[name] = decode_topic_value(stored.value).partitions

    async def _ensure_topics(self, wanted: dict[str, int]) -> None:
        """Create missing topics and grow smaller ones; never shrink (Kafka cannot either)."""
        changes = {name: n for name, n in wanted.items() if self.topics.get(name, 0) < n}
        if changes:
            await self.put_topics(changes)

    async def put_topics(self, topics: dict[str, int]) -> None:
        """Write topic registry records; only the metadata partition's owner may."""
        p = self.partitions.get(METADATA_PARTITION)
        if p is None:
            raise NotCoordinatorError(
                f"node {self.node_id} does not own the topic registry (partition -1)"
            )
        records = [topic_record(name, TopicValue(n)) for name, n in topics.items()]
        await self.writer.submit(METADATA_PARTITION, p.epoch, records)
        await self._refresh_topics()

    # ==== plumbing between the core and the loop ============================================

    def _partition(self, group_id: str) -> Partition | None:
        return self.partitions.get(partition_for(group_id, self.log_partitions))

    def _route(self, group_id: str, loading_error: Error) -> tuple[Partition | None, Error]:
        p = self._partition(group_id)
        if p is None or p.state is PartitionState.UNLOADED:
            return None, Error.NOT_COORDINATOR
        if now_ms() >= p.valid_until:
            # the lease could not be renewed in time: another node may own it by now
            return None, Error.NOT_COORDINATOR
        if p.state is PartitionState.LOADING:
            return None, loading_error
        return p, Error.NONE

    def _call(self, p: Partition, op: Callable[[int, int], Result]) -> Awaitable[Any]:
        loop = self._loop or asyncio.get_running_loop()
        handle = next(self._handles)
        fut: asyncio.Future[Any] = loop.create_future()
        self._waiting[handle] = fut
        self._apply(p, op(handle, now_ms()))
        return fut

    def _apply(self, p: Partition, result: Result) -> None:
        self._deliver(result.replies)
        for write in result.writes:
            p.appended_since_compaction += len(write.records)
            fut = self.writer.submit(p.id, p.epoch, write.records)
            fut.add_done_callback(functools.partial(self._written, p, p.core, write.continuation))
        self._arm(p)

    def _written(
        self,
        p: Partition,
        core: GroupCoordinator | None,
        cont: Continuation,
        fut: asyncio.Future[int],
    ) -> None:
        exc = fut.exception() if not fut.cancelled() else StorageError("write cancelled")
        failure = None if exc is None else append_failure(exc)
        if core is None:
            return
        if exc is not None:
            log.warning("partition %d: append failed: %s", p.id, exc)
        result = core.on_write_complete(cont, failure, now_ms())
        if p.core is not core:
            # unloaded meanwhile: answer the waiters (durable or not), change nothing else
            self._deliver(result.replies)
            return
        self._apply(p, result)
        if failure is AppendFailure.NOT_OWNER and self.partitions.get(p.id) is p:
            self._drop(p, "fenced by a newer lease epoch")

    def _deliver(self, replies: list[tuple[int, Reply]]) -> None:
        for handle, response in replies:
            fut = self._waiting.pop(handle, None)
            if fut is not None and not fut.done():
                fut.set_result(response)

    def _arm(self, p: Partition) -> None:
        if p.core is None:
            return
        deadline = p.core.next_deadline()
        if deadline is None or (p.armed_deadline is not None and p.armed_deadline <= deadline):
            return
        if p.timer is not None:
            p.timer.cancel()
        delay = max(deadline - now_ms(), 0) / 1000
        p.armed_deadline = deadline
        p.timer = (self._loop or asyncio.get_running_loop()).call_later(delay, self._on_timer, p)

    def _on_timer(self, p: Partition) -> None:
        p.timer = None
        p.armed_deadline = None
        if p.core is None:
            return
        if now_ms() >= p.valid_until:
            # not surely ours (e.g. just resumed from a pause): expire nobody until renewed
            p.timer = asyncio.get_running_loop().call_later(0.1, self._on_timer, p)
            return
        self._apply(p, p.core.poll_timers(now_ms()))

    # ==== CoordinatorService ================================================================

    def cluster(self) -> ClusterView:
        brokers = tuple(self.live_brokers[n] for n in sorted(self.live_brokers))
        controller = self.plan.get(METADATA_PARTITION, self.node_id)
        return ClusterView(self.cluster_id, controller, brokers, dict(self.topics))

    def owner_of(self, pid: int) -> int | None:
        """The node serving `pid`: this node if it has it, else the live lease holder."""
        if pid in self.partitions:
            return self.node_id
        row = self.leases.get(pid)
        if row is None or row.owner_node_id == self.node_id:
            return None  # stale view of our own lease: it moved on since the last round
        if row.owner_node_id not in self.live_brokers:
            return None
        return row.owner_node_id

    def find_coordinator(self, key: str, key_type: int) -> CoordinatorLookup:
        if key_type != 0:
            return CoordinatorLookup(
                Error.COORDINATOR_NOT_AVAILABLE,
                message="this node coordinates consumer groups only (no transactions)",
            )
        owner = self.owner_of(partition_for(key, self.log_partitions))
        if owner is None:
            return CoordinatorLookup(
                Error.COORDINATOR_NOT_AVAILABLE, message="the group's log partition has no owner"
            )
        return CoordinatorLookup(Error.NONE, self.live_brokers[owner])

    async def join_group(self, req: JoinGroupRequest) -> JoinGroupResponse:
        if not req.group_id:
            return JoinGroupResponse(Error.INVALID_GROUP_ID, member_id=req.member_id)
        p, error = self._route(req.group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
        if p is None or p.core is None:
            return JoinGroupResponse(error, member_id=req.member_id)
        core = p.core
        started = time.perf_counter()
        response: JoinGroupResponse = await self._call(
            p, lambda h, now: core.join_group(h, req, now)
        )
        self.metrics.join_seconds.observe(time.perf_counter() - started)
        return response

    async def sync_group(self, req: SyncGroupRequest) -> SyncGroupResponse:
        if not req.group_id:
            return SyncGroupResponse(Error.INVALID_GROUP_ID)
        # spec §3.1: a loading coordinator answers REBALANCE_IN_PROGRESS to SyncGroup
        p, error = self._route(req.group_id, Error.REBALANCE_IN_PROGRESS)
        if p is None or p.core is None:
            return SyncGroupResponse(error)
        core = p.core
        started = time.perf_counter()
        response: SyncGroupResponse = await self._call(
            p, lambda h, now: core.sync_group(h, req, now)
        )
        self.metrics.sync_seconds.observe(time.perf_counter() - started)
        return response

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse:
        if not req.group_id:
            return HeartbeatResponse(Error.INVALID_GROUP_ID)
        p, error = self._route(req.group_id, Error.NONE)  # spec §7: NONE while loading
        if p is None or p.core is None:
            return HeartbeatResponse(error)
        response = p.core.heartbeat(req, now_ms())
        self._arm(p)
        return response

    async def leave_group(self, req: LeaveGroupRequest) -> LeaveGroupResponse:
        if not req.group_id:
            return LeaveGroupResponse(Error.INVALID_GROUP_ID)
        p, error = self._route(req.group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
        if p is None or p.core is None:
            return LeaveGroupResponse(error)
        core = p.core
        response: LeaveGroupResponse = await self._call(
            p, lambda h, now: core.leave_group(h, req, now)
        )
        return response

    async def offset_commit(self, req: OffsetCommitRequest) -> OffsetCommitResponse:
        p, error = self._route(req.group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
        if p is None or p.core is None:
            return OffsetCommitResponse(
                tuple(PartitionResult(x.topic, x.partition, error) for x in req.partitions)
            )
        core = p.core
        response: OffsetCommitResponse = await self._call(
            p, lambda h, now: core.offset_commit(h, req, now)
        )
        return response

    async def offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        p, error = self._route(req.group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
        if p is None or p.core is None:
            return OffsetFetchResponse(req.group_id, error)
        return p.core.offset_fetch(req)

    async def describe_groups(self, group_ids: list[str]) -> list[DescribedGroup]:
        out = []
        for group_id in group_ids:
            p, error = self._route(group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
            if p is None or p.core is None:
                out.append(DescribedGroup(group_id, error))
            else:
                out.append(p.core.describe_group(group_id))
        return out

    async def list_groups(self, req: ListGroupsRequest) -> ListGroupsResponse:
        error = Error.NONE
        groups = []
        for p in self.partitions.values():
            if p.state is PartitionState.LOADING:
                error = Error.COORDINATOR_LOAD_IN_PROGRESS
            elif p.core is not None:
                groups.extend(p.core.list_groups(req.states_filter, req.types_filter))
        return ListGroupsResponse(error, tuple(groups))

    async def delete_groups(self, group_ids: list[str]) -> list[DeleteGroupResult]:
        async def one(group_id: str) -> DeleteGroupResult:
            p, error = self._route(group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
            if p is None or p.core is None:
                return DeleteGroupResult(group_id, error)
            core = p.core

            def op(handle: int, now: int) -> Result:
                return core.delete_group(handle, group_id, now)

            result: DeleteGroupResult = await self._call(p, op)
            return result

        return list(await asyncio.gather(*(one(g) for g in group_ids)))

    # ==== admin operations (api/ and the CLI, through app.admin) ==============================

    async def admin_call(
        self, group_id: str, op: Callable[[GroupCoordinator, int, int], Result]
    ) -> AdminResult:
        p, error = self._route(group_id, Error.COORDINATOR_LOAD_IN_PROGRESS)
        if p is None or p.core is None:
            return AdminResult(error, "this node does not serve the group right now")
        core = p.core

        def call(handle: int, now: int) -> Result:
            return op(core, handle, now)

        result: AdminResult = await self._call(p, call)
        return result


def _member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


async def cancel_quietly(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
