"""Lag: how far each group's committed positions are behind the upstream's log-end offsets.

Every COORD_UPSTREAM_LAG_REFRESH_MS one round collects the partitions the groups served here
commit to or are assigned (at most COORD_LAG_MAX_PARTITIONS), asks their leaders for the high
watermark (one ListOffsets per leader: what kafka-consumer-groups computes its lag from) and
keeps the answers. Nothing is asked per request. A group's lag per partition is
`max(0, log end - committed)`; a partition with no commit, or whose log end is not known yet,
has no lag (None), never a negative one. Each group's total is sampled into a one-hour series
(a point per LAG_SAMPLE_S) for the console's sparkline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

from app.group.consumer_protocol import assigned_partitions
from app.periodic import Periodic
from app.upstream.client import UpstreamAdmin, UpstreamUnavailable
from app.upstream.groups import GroupsService

if TYPE_CHECKING:
    from app.group.coordinator import GroupCoordinator
    from app.group.state import Group

log = logging.getLogger("app.upstream")
T = TypeVar("T")

LAG_SAMPLE_S: Final = 30.0
HISTORY_POINTS: Final = 120  # one hour of samples
HISTORY_GROUPS: Final = 10_000  # groups with a series; the rest show their current lag only


def group_partitions(group: Group) -> set[tuple[str, int]]:
    """The partitions a group commits to or its members are assigned."""
    assignments = (m.assignment for m in group.members.values())
    return set(group.offsets) | assigned_partitions(group.protocol_type, assignments)


def _collect(core: GroupCoordinator) -> list[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for group in core.groups.values():
        out |= group_partitions(group)
    return list(out)


def _committed(core: GroupCoordinator) -> list[tuple[str, dict[tuple[str, int], int]]]:
    return [
        (g, {tp: v.offset for tp, v in group.offsets.items()})
        for g, group in core.groups.items()
        if group.offsets
    ]


class LagTracker:
    def __init__(
        self, service: GroupsService, admin: UpstreamAdmin, refresh_ms: int, max_partitions: int
    ) -> None:
        self.service = service
        self.admin = admin
        self.refresh_s = refresh_ms / 1000
        self.max_partitions = max_partitions
        self.log_end: dict[tuple[str, int], int] = {}
        self.refreshed_ms: int | None = None
        self.problem: str | None = None
        self.dropped = 0  # partitions left out of the last round (over the bound)
        self.totals: dict[str, tuple[int, int]] = {}  # group -> (total lag, max lag)
        self.history: dict[str, deque[tuple[int, int]]] = {}  # group -> (ms, total lag)
        self._sampled_at = 0.0
        self.loop = Periodic("lag refresh", self.refresh_s, self.refresh, first=True)

    async def _over_cores(self, op: Callable[[GroupCoordinator], list[T]]) -> list[T]:
        """`op` over every loaded partition's core, yielding to the loop between cores: a
        node with many groups must not stall its requests for one round."""
        cores, _ = self.service.read_all(lambda core: [core])
        out: list[T] = []
        for core in cores:
            out.extend(op(core))
            await asyncio.sleep(0)
        return out

    async def refresh(self) -> None:
        partitions = await self._over_cores(_collect)
        wanted = sorted(set(partitions))
        self.dropped = max(0, len(wanted) - self.max_partitions)
        if self.dropped:
            wanted = wanted[: self.max_partitions]
        try:
            ends = await self.admin.log_end_offsets(wanted)
        except UpstreamUnavailable as e:
            self.problem = str(e)
            return
        self.problem = None
        self.log_end = ends
        now_ms = int(time.time() * 1000)
        self.refreshed_ms = now_ms
        committed = await self._over_cores(_committed)
        totals: dict[str, tuple[int, int]] = {}
        for i, (group_id, offsets) in enumerate(committed):
            if i % 1000 == 999:
                await asyncio.sleep(0)  # many groups: the loop serves requests meanwhile
            lags = [
                lag for lag in (self.lag(tp, o) for tp, o in offsets.items()) if lag is not None
            ]
            if lags:
                totals[group_id] = (sum(lags), max(lags))
        self.totals = totals
        due = time.monotonic() - self._sampled_at >= LAG_SAMPLE_S
        if due:
            self._sampled_at = time.monotonic()
        self._sample(now_ms, totals, due)

    def _sample(self, now_ms: int, totals: Mapping[str, tuple[int, int]], due: bool) -> None:
        """A point per group every LAG_SAMPLE_S; a group new to the series gets its first
        at once."""
        for group_id in list(self.history):
            if group_id not in totals:
                del self.history[group_id]
        for group_id, (total, _) in totals.items():
            series = self.history.get(group_id)
            if series is None:
                if len(self.history) >= HISTORY_GROUPS:
                    continue
                series = self.history[group_id] = deque(maxlen=HISTORY_POINTS)
            elif not due:
                continue
            series.append((now_ms, total))

    def lag(self, tp: tuple[str, int], committed: int | None) -> int | None:
        end = self.log_end.get(tp)
        if end is None or committed is None or committed < 0:
            return None
        return max(0, end - committed)

    def group_lag(
        self, group_id: str, offsets: Iterable[Any], assigned: Iterable[tuple[str, int]]
    ) -> dict[str, Any]:
        """GET /groups/{id}'s lag section: one row per committed or assigned partition."""
        now_ms = int(time.time() * 1000)
        committed = {(o.topic, o.partition): o for o in offsets}
        rows = []
        for tp in sorted(set(committed) | set(assigned)):
            o = committed.get(tp)
            offset = o.offset if o is not None else None
            rows.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "committed_offset": offset,
                    "log_end_offset": self.log_end.get(tp),
                    "lag": self.lag(tp, offset),
                    "since_commit_ms": now_ms - o.commit_timestamp_ms if o is not None else None,
                }
            )
        lags = [r["lag"] for r in rows if r["lag"] is not None]
        return {
            "known": self.refreshed_ms is not None,
            "refreshed_ms": self.refreshed_ms,
            "problem": self.problem,
            "total": sum(lags) if lags else None,
            "max": max(lags) if lags else None,
            "partitions": rows,
            "history": [{"at_ms": t, "lag": v} for t, v in self.history.get(group_id, ())],
        }
