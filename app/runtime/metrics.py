"""Prometheus metrics of one node (served at /metrics on the admin port)."""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Iterator, Sequence
from itertools import accumulate
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from app.group.view import GroupSummary

LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600)


class NodeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.join_seconds = LoopHistogram(
            "coordinator_join_group_seconds",
            "JoinGroup time until answered (incl. parking)",
            LATENCY_BUCKETS,
            r,
        )
        self.sync_seconds = LoopHistogram(
            "coordinator_sync_group_seconds", "SyncGroup time until answered", LATENCY_BUCKETS, r
        )
        # Kafka requests by (api, version, error): a plain dict bumped per request and read at
        # scrape time; a prometheus-client child's inc() takes a lock, which was a tenth of a
        # Heartbeat's cost
        self.requests: dict[tuple[str, int, int], int] = {}
        r.register(_RequestCollector(self.requests))
        self.append_records = Histogram(
            "coordinator_append_batch_records",
            "records per group-commit transaction",
            registry=r,
            buckets=(1, 2, 5, 10, 50, 100, 500, 1000, 5000),
        )
        self.append_seconds = Histogram(
            "coordinator_append_seconds",
            "group-commit transaction latency",
            registry=r,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
        )
        self.load_seconds = Histogram(
            "coordinator_partition_load_seconds",
            "replay time of a log partition",
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60),
        )

        self.loop_lag = Histogram(
            "coordinator_event_loop_lag_seconds",
            "how late a timer of the event loop fires (a request that stalls the loop shows here)",
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.loop_lag_max = Gauge(
            "coordinator_event_loop_lag_max_seconds",
            "the largest event-loop lag seen in the last 10 s",
            registry=r,
        )
        self._recent_lags: deque[float] = deque(maxlen=200)  # 10 s of 50 ms readings

    def observe_loop_lag(self, lag: float) -> None:
        """One reading of how late the event loop was (the Kafka listener checks it every
        50 ms to shed load, and reports each reading here)."""
        self.loop_lag.observe(lag)
        self._recent_lags.append(lag)
        self.loop_lag_max.set(max(self._recent_lags))

    def observe_append(self, records: int, seconds: float) -> None:
        self.append_records.observe(records)
        self.append_seconds.observe(seconds)

    def attach(self, node: NodeStatus) -> None:
        self.registry.register(_StateCollector(node))


class NodeStatus(Protocol):
    """What the gauges read from a node at scrape time (read-only snapshots)."""

    @property
    def lease_changes(self) -> int: ...

    def group_summaries(self) -> list[tuple[int, GroupSummary]]: ...

    def rebalance_counts(self) -> dict[str, int]: ...

    def partition_states(self) -> dict[str, int]: ...


class _StateCollector(Collector):
    """Gauges read from the node's state at scrape time."""

    def __init__(self, node: NodeStatus) -> None:
        self.node = node

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        node = self.node
        groups = GaugeMetricFamily("coordinator_groups", "groups by state", labels=["state"])
        members = GaugeMetricFamily("coordinator_members", "members of all groups")
        by_state: dict[str, int] = {}
        n_members = 0
        for _, g in node.group_summaries():
            by_state[g.state.value] = by_state.get(g.state.value, 0) + 1
            n_members += g.members
        for state, n in sorted(by_state.items()):
            groups.add_metric([state], n)
        members.add_metric([], n_members)
        yield groups
        yield members
        rebalances = CounterMetricFamily(
            "coordinator_rebalances", "rebalances started, by reason", labels=["reason"]
        )
        for reason, n in sorted(node.rebalance_counts().items()):
            rebalances.add_metric([reason], n)
        yield rebalances
        owned = GaugeMetricFamily(
            "coordinator_partitions", "log partitions owned by this node", labels=["state"]
        )
        for state, n in sorted(node.partition_states().items()):
            owned.add_metric([state], n)
        yield owned
        leases = CounterMetricFamily("coordinator_lease_changes", "partitions taken or given up")
        leases.add_metric([], node.lease_changes)
        yield leases


class LoopHistogram(Collector):
    """A histogram observed from the event loop's thread only, exposed as prometheus-client's
    Histogram is (cumulative `le` buckets, `_sum`, `_count`). Its counts are a plain list: the
    library's observe() takes a lock per bucket and for the sum, 0.75 us, twice per member of
    a rebalance."""

    def __init__(
        self, name: str, documentation: str, buckets: Sequence[float], registry: CollectorRegistry
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.bounds = [float(b) for b in buckets]  # +Inf is the last count
        # the library's own `le` spelling (untyped there)
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        registry.register(self)

    def observe(self, amount: float) -> None:
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bucket with amount <= le
        self.sum += amount

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation)
        buckets = list(zip(self._les, accumulate(self.counts), strict=True))
        family.add_metric([], buckets, self.sum)
        yield family


class _RequestCollector(Collector):
    """coordinator_requests_total{api, version, error} from the node's request counts."""

    def __init__(self, counts: dict[tuple[str, int, int], int]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "coordinator_requests",
            "Kafka requests by api, version and error code",
            labels=["api", "version", "error"],
        )
        for (api, version, error), n in sorted(self.counts.items()):
            family.add_metric([api, str(version), str(error)], n)
        yield family
