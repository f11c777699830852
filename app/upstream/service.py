"""Gateway mode's group-side dealings with the upstream, put together: moving groups in and
out (app/upstream/groups.py), the mirror (mirror.py), lag (lag.py), and their metrics.

Per-group series are bounded: `/metrics` carries the COORD_GROUP_METRICS_MAX_GROUPS worst
groups of each (by lag, by unowned partitions, ...), plus node-wide totals.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.config import Settings
from app.gateway.cluster import UpstreamCluster
from app.group.messages import Error
from app.periodic import Periodic
from app.upstream.client import UpstreamAdmin
from app.upstream.groups import GroupMover, GroupsService
from app.upstream.lag import LagTracker
from app.upstream.mirror import Mirror


class GroupsUpstream:
    """Implements app.service's UpstreamOffsets (the OffsetFetch hook) for the node."""

    def __init__(
        self,
        settings: Settings,
        service: GroupsService,
        cluster: UpstreamCluster,
        lease_changes: Callable[[], int],
    ) -> None:
        self.mode = settings.upstream_offsets
        self.admin = UpstreamAdmin(cluster)
        self.cluster = cluster
        self.mover = GroupMover(
            service,
            self.admin,
            self.mode,
            settings.upstream_check_interval_ms,
            lambda: cluster.cluster_id,
        )
        self.lag = LagTracker(
            service, self.admin, settings.upstream_lag_refresh_ms, settings.lag_max_partitions
        )
        self.mirror = (
            Mirror(service, self.admin, settings.upstream_mirror_interval_ms, lease_changes)
            if self.mode == "mirror"
            else None
        )
        self.max_series = settings.group_metrics_max_groups

    async def before_offset_fetch(self, group_id: str) -> Error | None:
        return await self.mover.before_offset_fetch(group_id)

    def _loops(self) -> list[Periodic]:
        loops = [self.mover.loop, self.lag.loop]
        return loops + ([self.mirror.loop] if self.mirror is not None else [])

    def start(self) -> None:
        for loop in self._loops():
            loop.start()

    async def stop(self) -> None:
        for loop in self._loops():
            await loop.stop()
        await self.admin.close()

    def committed(self, group_id: str) -> None:
        if self.mirror is not None:
            self.mirror.committed(group_id)

    def status(self) -> dict[str, Any]:
        """GET /cluster's `upstream.groups`."""
        counts = self.mover.counts
        return {
            "offsets": self.mode,
            "imports": dict(counts.imports),
            "imported_offsets": counts.imported_offsets,
            "exports": counts.exports,
            "groups_with_upstream_members": sorted(self.mover.upstream_members),
            "last_member_check_ms": self.mover.last_check_ms,
            "lag": {
                "refreshed_ms": self.lag.refreshed_ms,
                "partitions": len(self.lag.log_end),
                "left_out": self.lag.dropped,
                "problem": self.lag.problem,
            },
            "mirror": self.mirror.status() if self.mirror is not None else None,
        }

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(_Collector(self))


def worst(values: dict[str, int], n: int) -> list[tuple[str, int]]:
    """The `n` groups with the largest values (ties by group id): bounded series."""
    return heapq.nsmallest(n, values.items(), key=lambda kv: (-kv[1], kv[0]))


class _Collector(Collector):
    def __init__(self, up: GroupsUpstream) -> None:
        self.up = up

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        up, n = self.up, self.up.max_series
        totals = up.lag.totals
        total = GaugeMetricFamily(
            "coordinator_group_lag",
            "a group's lag summed over its committed partitions (upstream log end - "
            f"committed), for the {n} most lagging groups",
            labels=["group"],
        )
        biggest = GaugeMetricFamily(
            "coordinator_group_lag_max",
            f"a group's largest partition lag, for the {n} most lagging groups",
            labels=["group"],
        )
        for g, v in worst({g: t for g, (t, _) in totals.items()}, n):
            total.add_metric([g], v)
            biggest.add_metric([g], totals[g][1])
        yield total
        yield biggest
        members = GaugeMetricFamily(
            "coordinator_group_upstream_members",
            "live members a group coordinated here also has on the upstream's own coordinator "
            "(both halves consume every partition)",
            labels=["group"],
        )
        split = {g: len(u.members) for g, u in up.mover.upstream_members.items()}
        for g, v in worst(split, n):
            members.add_metric([g], v)
        yield members
        yield GaugeMetricFamily(
            "coordinator_groups_with_upstream_members",
            "groups coordinated here that also have live members upstream",
            value=len(split),
        )
        imports = CounterMetricFamily(
            "coordinator_upstream_imports",
            "groups that moved in, by outcome",
            labels=["outcome"],
        )
        for outcome, v in sorted(up.mover.counts.imports.items()):
            imports.add_metric([outcome], v)
        yield imports
        yield CounterMetricFamily(
            "coordinator_upstream_imported_offsets",
            "positions taken from the upstream's committed offsets",
            value=up.mover.counts.imported_offsets,
        )
        mirror = up.mirror
        if mirror is not None:
            yield GaugeMetricFamily(
                "coordinator_upstream_mirror_lag_seconds",
                "age of the oldest commit not yet written to the upstream",
                value=mirror.lag_seconds,
            )
            yield GaugeMetricFamily(
                "coordinator_upstream_mirror_pending_groups",
                "groups with commits not yet written to the upstream",
                value=len(mirror.dirty),
            )
            yield CounterMetricFamily(
                "coordinator_upstream_mirror_offsets",
                "offsets written to the upstream's __consumer_offsets",
                value=mirror.commits,
            )
            yield CounterMetricFamily(
                "coordinator_upstream_mirror_errors",
                "failed mirror writes (retried)",
                value=mirror.errors,
            )
