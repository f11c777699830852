"""COORD_UPSTREAM_OFFSETS=mirror: every committed offset is written to the upstream too.

A commit is answered once it is durable here, as always; the mirror only notes its group as
dirty. Every COORD_UPSTREAM_MIRROR_INTERVAL_MS one round writes, per dirty group, the offsets
that changed since it last wrote them, as one admin commit (generation -1) at the group's
upstream coordinator. So upstream-side lag monitors (kafka-consumer-groups, Burrow,
kafka-lag-exporter) keep reading the group's positions; they see it Empty, its members being
here. An upstream outage only delays the mirror: the dirty set (at most one entry per group)
waits, and `lag_seconds` (the age of the oldest commit not yet mirrored) grows until it
catches up. A node that takes over log partitions mirrors all their groups once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

from app.group.view import GroupView
from app.periodic import Periodic
from app.service import CoordinatorError
from app.upstream.client import UpstreamAdmin, UpstreamOffset, UpstreamUnavailable
from app.upstream.groups import GroupsService

log = logging.getLogger("app.upstream")

# groups written concurrently in one round
CONCURRENCY: Final = 16


class Mirror:
    def __init__(
        self,
        service: GroupsService,
        admin: UpstreamAdmin,
        interval_ms: int,
        lease_changes: Callable[[], int],
    ) -> None:
        self.service = service
        self.admin = admin
        self.interval_s = interval_ms / 1000
        self._lease_changes = lease_changes
        self._seen_leases = -1
        # group -> when its oldest unmirrored commit became durable (monotonic seconds)
        self.dirty: dict[str, float] = {}
        self._touched: dict[str, float] = {}  # group -> its latest commit noted (monotonic)
        self._mirrored: dict[str, dict[tuple[str, int], int]] = {}
        self.commits = 0  # offsets written upstream
        self.errors = 0  # failed group writes
        self.last_error: str | None = None
        self.loop = Periodic("upstream mirror", self.interval_s, self.round, first=False)

    def committed(self, group_id: str) -> None:
        """A commit of `group_id` is durable here (the runtime's hook: no I/O, no await)."""
        now = time.monotonic()
        self._touched[group_id] = now
        if group_id not in self.dirty:
            self.dirty[group_id] = now

    @property
    def lag_seconds(self) -> float:
        """The age of the oldest commit not yet written upstream (0: all mirrored)."""
        if not self.dirty:
            return 0.0
        return time.monotonic() - min(self.dirty.values())

    async def round(self) -> None:
        changes = self._lease_changes()
        if changes != self._seen_leases:
            # partitions came or went: whatever their last owner had not mirrored is
            # written once from here (again next round while some still load)
            groups, loading = self.service.read_all(
                lambda core: [g for g, grp in core.groups.items() if grp.offsets]
            )
            if not loading:
                self._seen_leases = changes
            self._mirrored.clear()  # what another owner wrote meanwhile is not known here
            now = time.monotonic()
            for g in groups:
                self.dirty.setdefault(g, now)
        if not self.dirty:
            return
        todo = list(self.dirty)
        for start in range(0, len(todo), CONCURRENCY):
            await asyncio.gather(*(self._mirror(g) for g in todo[start : start + CONCURRENCY]))

    async def _mirror(self, group_id: str) -> None:
        read_at = time.monotonic()
        try:
            view: GroupView | None = self.service.schedule_read(
                group_id, lambda core, now: core.describe(group_id)
            )
        except CoordinatorError:
            self._forget(group_id)  # not ours any more: its new owner mirrors it
            return
        if view is None:
            self._forget(group_id)
            return
        done = self._mirrored.get(group_id, {})
        changed = [
            UpstreamOffset(o.topic, o.partition, o.offset, o.leader_epoch, o.metadata)
            for o in view.offsets
            if done.get((o.topic, o.partition)) != o.offset
        ]
        if not changed:
            self._clean(group_id, read_at)
            return
        try:
            errors = await self.admin.commit_offsets(group_id, changed)
        except UpstreamUnavailable as e:
            self._failed(group_id, str(e))
            return
        refused = {tp: e for tp, e in errors.items() if e}
        written = self._mirrored.setdefault(group_id, {})
        for o in changed:
            if (o.topic, o.partition) not in refused:
                written[(o.topic, o.partition)] = o.offset
        self.commits += len(changed) - len(refused)
        if refused:
            self._failed(
                group_id,
                f"the upstream refused {len(refused)} offset(s) (error codes "
                f"{sorted(set(refused.values()))}; 25: the group has members upstream)",
            )
            return
        self._clean(group_id, read_at)

    def _clean(self, group_id: str, read_at: float) -> None:
        """Mirrored as of `read_at`: a commit noted since stays dirty, from its own time."""
        touched = self._touched.get(group_id, 0.0)
        if touched <= read_at:
            self.dirty.pop(group_id, None)
            self._touched.pop(group_id, None)
        else:
            self.dirty[group_id] = touched

    def _forget(self, group_id: str) -> None:
        self.dirty.pop(group_id, None)
        self._touched.pop(group_id, None)
        self._mirrored.pop(group_id, None)

    def _failed(self, group_id: str, reason: str) -> None:
        self.errors += 1
        if reason != self.last_error:
            log.warning("mirroring group %r upstream: %s (retried)", group_id, reason)
        self.last_error = reason

    def status(self) -> dict[str, object]:
        return {
            "dirty_groups": len(self.dirty),
            "lag_seconds": round(self.lag_seconds, 3),
            "offsets_written": self.commits,
            "errors": self.errors,
            "last_error": self.last_error,
        }
