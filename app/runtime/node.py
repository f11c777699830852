"""One coordinator node: the runtime, its leases, loader and topic registry put together, and
the `app.service.CoordinatorService` the edges call.

  runtime.py    partitions, schedule_write / schedule_read, write-then-reply, timers
  leases.py     the lease round, placement, handover, compaction
  loader.py     replay of a partition into a fresh core
  topics.py     the topic registry (metadata partition)
  placement.py  group -> log partition, log partition -> node
  metrics.py    Prometheus metrics, read through `NodeStatus`
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from app.config import Settings, advertised_admin_url, core_config
from app.group.messages import Error
from app.group.view import GroupSummary
from app.runtime.leases import LeaseManager
from app.runtime.loader import Loader
from app.runtime.metrics import NodeMetrics
from app.runtime.ownership import OwnershipCollector, OwnershipWatch
from app.runtime.placement import partition_for
from app.runtime.runtime import (
    METADATA_PARTITION,
    CoordinatorRuntime,
    Partition,
    PartitionState,
    monotonic_ms,
    now_ms,
)
from app.runtime.topics import TopicRegistry
from app.security.listeners import listeners_of
from app.service import Broker, ClusterView, CoordinatorLookup, UpstreamOffsets
from storage.errors import StorageError
from storage.ports import LeaseRow, Store
from storage.writer import LogWriter

T = TypeVar("T")


class CoordinatorNode:
    """Implements `app.service.CoordinatorService` for one node."""

    def __init__(self, settings: Settings, event_log: Store, writer: LogWriter) -> None:
        self.settings = settings
        self.node_id = settings.node_id
        self.log = event_log
        self.writer = writer
        self.cluster_id = ""  # the store's, read at start (Metadata, DescribeCluster)
        self.started_ms = 0
        # the first listener's address is the node's own; every listener's is registered
        endpoints = tuple(
            (li.name, li.advertised_host, li.advertised_port) for li in listeners_of(settings)
        )
        self.broker = Broker(settings.node_id, endpoints[0][1], endpoints[0][2], endpoints)
        self.metrics = NodeMetrics()
        self.runtime = CoordinatorRuntime(
            settings.node_id,
            settings.log_partitions,
            writer,
            op_seconds={
                "JoinGroup": self.metrics.join_seconds,
                "SyncGroup": self.metrics.sync_seconds,
            },
            max_groups=settings.max_groups,
            max_group_id_length=settings.max_group_id_length,
        )
        loader = Loader(
            self.runtime,
            event_log,
            core_config(settings),
            settings.concurrent_loads,
            self.metrics.load_seconds.observe,
        )
        self.registry = TopicRegistry(self.runtime, event_log)
        self.leasing = LeaseManager(
            settings, self.runtime, event_log, loader, self.broker, self.registry.refresh
        )
        self.metrics.attach(self)
        writer.on_commit = self.metrics.observe_append
        # the Kafka listener counts its requests here (app/kafka/server.py)
        self.request_counts = self.metrics.requests
        self._tasks: list[asyncio.Task[None]] = []
        # the service's group operations are the runtime's own
        self.schedule_write = self.runtime.schedule_write
        self.schedule_read = self.runtime.schedule_read
        self.heartbeat = self.runtime.heartbeat
        self.read_all = self.runtime.read_all
        # gateway mode: topics follow the upstream's Metadata (app/gateway), not COORD_TOPICS
        self.coordinator_id_base = settings.gateway_coordinator_id_base if settings.gateway else 0
        self.upstream_status: Callable[[], dict[str, Any]] | None = None
        # gateway mode's dealings with the upstream's groups (app/upstream), set by serve
        self.upstream: UpstreamOffsets | None = None
        self.ownership = OwnershipWatch(
            self.runtime.read_all,
            lambda: self.registry.topics,
            settings.ownership_check_interval_ms,
        )
        self.metrics.registry.register(
            OwnershipCollector(self.ownership, settings.group_metrics_max_groups)
        )

    # ==== what tests, the admin API and the metrics read ========================================

    @property
    def log_partitions(self) -> int:
        return self.runtime.log_partitions

    @property
    def partitions(self) -> dict[int, Partition]:
        return self.runtime.partitions

    @property
    def topics(self) -> dict[str, int]:
        return self.registry.topics

    @property
    def plan(self) -> dict[int, int]:
        return self.leasing.plan

    @property
    def leases(self) -> dict[int, LeaseRow]:
        return self.leasing.leases

    @property
    def live_brokers(self) -> dict[int, Broker]:
        return self.leasing.live_brokers

    @property
    def admin_urls(self) -> dict[int, str]:
        return self.leasing.admin_urls

    @property
    def node_heartbeats(self) -> dict[int, tuple[int, int]]:
        return self.leasing.node_heartbeats

    @property
    def lease_changes(self) -> int:
        return self.runtime.lease_changes

    @property
    def compaction_runs(self) -> int:
        return self.leasing.compaction_runs

    def owner_of(self, pid: int) -> int | None:
        return self.leasing.owner_of(pid)

    def owns_metadata(self) -> bool:
        p = self.partitions.get(METADATA_PARTITION)
        return p is not None and p.state is PartitionState.ACTIVE

    def rebalance_counts(self) -> dict[str, int]:
        return self.runtime.rebalance_counts()

    def partition_states(self) -> dict[str, int]:
        states: dict[str, int] = {}
        for p in self.partitions.values():
            states[p.state.value] = states.get(p.state.value, 0) + 1
        return states

    def group_summaries(self) -> list[tuple[int, GroupSummary]]:
        """(log partition, summary) of every group this node serves, Dead ones included."""
        return [
            (p.id, s)
            for p in list(self.partitions.values())
            if p.core is not None
            for s in p.core.groups_view()
        ]

    def lease_expires_in_ms(self, pid: int, t: int) -> int | None:
        """Time left on `pid`'s lease as this node knows it (`t`: wall-clock ms)."""
        mine = self.partitions.get(pid)
        if mine is not None:
            # our own lease: `leases` is the table as read at the start of the last round
            # (before this node took or renewed it); the renewal itself is exact
            return mine.valid_until + self.leasing.safety_ms - monotonic_ms()
        row = self.leases.get(pid)
        return (row.expires_at_ms - t) if row else None

    def storage_error(self) -> dict[str, Any] | None:
        """The database failing this node's lease rounds or its appends, if it does (readiness
        says why). A failed append counts for one lease TTL unless one commits meanwhile: with
        no traffic after it, nothing else would ever clear it."""
        e = self.leasing.round_error
        if e is not None:
            return {"error": e[0], "for_ms": monotonic_ms() - e[1]}
        a = self.writer.failing
        t = monotonic_ms()
        if a is not None and t - a[2] < self.settings.lease_ttl_ms:
            return {"error": a[0], "for_ms": t - a[1]}
        return None

    def load_error(self, pid: int) -> dict[str, Any] | None:
        """Why this node's last load of `pid` failed (None: it did not)."""
        e = self.leasing.load_errors.get(pid)
        if e is None:
            return None
        return {
            "reason": e.reason,
            "offset": e.offset,
            "attempts": e.attempts,
            "retry_in_ms": max(e.retry_at_ms - monotonic_ms(), 0),
        }

    def observe_loop_lag(self, lag: float) -> None:
        self.metrics.observe_loop_lag(lag)

    # ==== lifecycle =============================================================================

    async def start(self) -> None:
        """Register, claim this node's share of the partitions and keep the leases alive."""
        self.runtime.bind(asyncio.get_running_loop())
        self.runtime.log_partitions = await self.log.ensure_log_partitions(
            self.settings.log_partitions
        )
        self.cluster_id = await self.log.ensure_cluster_id()
        t = now_ms()
        host, port = self.broker.host, self.broker.port
        await self.log.register_node(
            self.node_id,
            host,
            port,
            advertised_admin_url(self.settings),  # never a wildcard such as 0.0.0.0
            t,
            listeners=self.listener_addresses,
        )
        self.started_ms = t
        await self.leasing.tick()
        # renewals run from now on, whatever the rest of start-up costs
        self._tasks.append(asyncio.create_task(self.leasing.run(), name="leases"))
        self._tasks.append(asyncio.create_task(self.leasing.run_lapse_watch(), name="lapses"))
        if self.owns_metadata() and not self.settings.gateway:
            await self.registry.ensure(self.settings.topic_map)
        self._tasks.append(asyncio.create_task(self.leasing.run_compactor(), name="compactor"))
        self.ownership.loop.start()

    @property
    def listener_addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> the address advertised on it (the nodes table's `listeners`)."""
        return {name: (host, port) for name, host, port in self.broker.endpoints}

    async def tick(self) -> None:
        await self.leasing.tick()

    async def compact(self) -> int:
        return await self.leasing.compact()

    async def wait_loaded(self) -> None:
        tasks = [p.load_task for p in self.partitions.values() if p.load_task is not None]
        if tasks:
            await asyncio.gather(*tasks)

    def ready(self) -> bool:
        """Every partition this node owns is loaded and surely still its own, and the database
        takes its writes (a node owning nothing yet is not ready); a gateway's upstream is
        reachable and every one of its brokers has a port."""
        t = monotonic_ms()
        if self.upstream_status is not None:
            upstream = self.upstream_status()
            if not upstream["reachable"] or upstream["unplaced_broker_ids"]:
                return False
        planned = [pid for pid, node in self.plan.items() if node == self.node_id]
        return (
            bool(self.partitions)
            and self.storage_error() is None  # serving, but commits and joins fail
            and all(pid in self.partitions for pid in planned)  # e.g. a load failed: retrying
            and all(
                p.state is PartitionState.ACTIVE and t < p.valid_until
                for p in self.partitions.values()
            )
        )

    async def stop(self, release: bool = True) -> None:
        """Unload everything; with `release`, hand the leases back so others take over at once."""
        for task in self._tasks:
            await cancel_quietly(task)
        self._tasks.clear()
        await self.ownership.loop.stop()
        for p in list(self.partitions.values()):
            if release:
                await self.leasing.handover(p)
            else:
                self.runtime.drop(p, "node stopping")
        if release:
            with contextlib.suppress(StorageError):
                await self.log.deregister_node(self.node_id)

    async def put_topics(self, topics: dict[str, int]) -> None:
        await self.registry.put(topics)

    def follow_topics(self, topics: Mapping[str, int]) -> None:
        """Gateway mode: the registry is the upstream's topics, as its Metadata last said."""
        self.registry.topics.clear()
        self.registry.topics.update(topics)

    # ==== CoordinatorService ====================================================================

    def cluster(self) -> ClusterView:
        brokers = tuple(self.live_brokers[n] for n in sorted(self.live_brokers))
        controller = self.plan.get(METADATA_PARTITION, self.node_id)
        return ClusterView(self.cluster_id, controller, brokers, dict(self.topics))

    def find_coordinator(self, key: str, key_type: int) -> CoordinatorLookup:
        if key_type != 0:
            return CoordinatorLookup(
                Error.COORDINATOR_NOT_AVAILABLE,
                message="this node coordinates consumer groups only (no transactions)",
            )
        if len(key) > self.runtime.max_group_id_length:
            return CoordinatorLookup(
                Error.INVALID_GROUP_ID,
                message=f"group id of {len(key)} characters (COORD_MAX_GROUP_ID_LENGTH)",
            )
        owner = self.leasing.coordinator_for(partition_for(key, self.log_partitions))
        if owner is None:
            return CoordinatorLookup(
                Error.COORDINATOR_NOT_AVAILABLE, message="the group's log partition has no owner"
            )
        broker = self.live_brokers[owner]
        if self.coordinator_id_base:  # a gateway: ids apart from the upstream brokers'
            broker = dataclasses.replace(broker, node_id=self.coordinator_id_base + owner)
        return CoordinatorLookup(Error.NONE, broker)


async def cancel_quietly(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
