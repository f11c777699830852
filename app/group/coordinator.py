"""The pure classic-group coordinator for one log partition (protocol.md §2-§10): a thin façade over
the managers, as Kafka's GroupCoordinatorShard is over GroupMetadataManager and
OffsetMetadataManager.

No I/O, no clock: every entry point takes `now` (ms) and returns a `Result` — replies to
deliver (keyed by the caller's request handle), and writes (records plus a continuation the
runtime hands back to `on_write_complete` once the append is durable or has failed).
Timers live in `self.timers` (key -> deadline); the runtime wakes `poll_timers(now)` at
`next_deadline()`.

  members.py        JoinGroup, SyncGroup, Heartbeat, LeaveGroup
  rebalance.py      the join and sync phases, removing members, their timers
  registrations.py  static members registered ahead of a scale-up (admin API)
  offsets.py        OffsetCommit, OffsetFetch, OffsetDelete, retention, DeleteGroups
  view.py           DescribeGroups, ListGroups, snapshots for metrics and the admin API
  replay.py         replay(record), the one way durable state changes
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from app.group import view
from app.group.config import CoreConfig
from app.group.members import Membership
from app.group.messages import (
    DescribedGroup,
    Error,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListedGroup,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
)
from app.group.offsets import Offsets
from app.group.rebalance import Rebalancer
from app.group.records import Record
from app.group.registrations import Registrations
from app.group.replay import replay
from app.group.results import (
    AdminDone,
    AppendFailure,
    Continuation,
    LogOnly,
    OffsetsDone,
    Result,
    StaticReplaceDone,
    SyncDone,
    TombstonesDone,
)
from app.group.state import DEAD, Group
from app.group.timers import RETENTION_KEY, TimerKey, TimerKind, TimerQueue, heartbeat_key
from app.group.view import GroupSummary, GroupView

log = logging.getLogger(__name__)

GroupTimer = Callable[[Group, TimerKey, int, Result], None]
Completion = Callable[[Any, AppendFailure | None, int, Result], None]


class GroupCoordinator:
    """All classic groups of one log partition."""

    def __init__(self, config: CoreConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self.groups: dict[str, Group] = {}
        queue = self._queue = TimerQueue()
        rebalancer = Rebalancer(config, self.groups, queue)
        registrations = Registrations(self.groups, queue, rebalancer, config.group_max_size)
        membership = Membership(
            config, self.groups, queue, new_member_id, rebalancer, registrations
        )
        offsets = Offsets(config, self.groups, queue)
        self._rebalancer = rebalancer
        self._registrations = registrations
        self._membership = membership
        self._offsets = offsets
        # the managers' own containers, never rebound: for the runtime, tests and benchmarks
        self.rebalances = rebalancer.rebalances  # reason -> rebalances started
        # `heartbeat` without the request and reply objects (the wire's hot path): the
        # membership's own method, not a delegating one (a call fewer per heartbeat)
        self.heartbeat_error: Callable[[str, int, str, str | None, int], Error] = (
            self._membership.heartbeat_error
        )
        self.timers = queue.deadlines
        # the timers' lazy heap: its top is a lower bound of `next_deadline()` at the cost of
        # one look, so the heartbeat path sees without a call when nothing needs re-arming
        self.heap = queue.heap
        # Dispatch tables. They hold the managers' bound methods, never this object's: the
        # managers do not refer back to it, so the core stays free of reference cycles
        # (the runtime freezes loaded state out of the cyclic collector's sight).
        self._on_timer: dict[TimerKind, GroupTimer] = {
            TimerKind.HEARTBEAT: rebalancer.on_session_expired,
            TimerKind.PENDING: rebalancer.on_pending_member_expired,
            TimerKind.JOIN: rebalancer.on_join_timer,
            TimerKind.SYNC: rebalancer.on_pending_sync_expired,
            TimerKind.EXPANSION: registrations.on_expansion_expired,
        }
        self._on_written: dict[type, Completion] = {
            SyncDone: membership.sync_written,
            StaticReplaceDone: membership.static_replace_written,
            OffsetsDone: offsets.offsets_written,
            TombstonesDone: offsets.tombstones_written,
            AdminDone: registrations.registration_written,
            LogOnly: _log_written,
        }

    # ==== requests ==============================================================================

    def join_group(self, handle: int, req: JoinGroupRequest, now: int) -> Result:
        return self._membership.join_group(handle, req, now)

    def sync_group(self, handle: int, req: SyncGroupRequest, now: int) -> Result:
        return self._membership.sync_group(handle, req, now)

    def heartbeat(self, req: HeartbeatRequest, now: int) -> HeartbeatResponse:
        return self._membership.heartbeat(req, now)

    def leave_group(self, handle: int, req: LeaveGroupRequest, now: int) -> Result:
        return self._membership.leave_group(handle, req, now)

    def offset_commit(self, handle: int, req: OffsetCommitRequest, now: int) -> Result:
        return self._offsets.offset_commit(handle, req, now)

    def offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        return self._offsets.offset_fetch(req)

    def delete_group(self, handle: int, group_id: str, now: int) -> Result:
        return self._offsets.delete_group(handle, group_id, now)

    def delete_offsets(self, handle: int, req: OffsetDeleteRequest, now: int) -> Result:
        return self._offsets.delete_offsets(handle, req, now)

    def describe_group(self, group_id: str) -> DescribedGroup:
        return view.describe_group(self.groups, group_id)

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> list[ListedGroup]:
        return view.list_groups(self.groups, states_filter, types_filter)

    # ==== admin operations (the project's own, no Kafka API) ====================================

    def register_static_members(
        self, handle: int, group_id: str, instance_ids: list[str], timeout_ms: int, now: int
    ) -> Result:
        return self._registrations.register_static_members(
            handle, group_id, instance_ids, timeout_ms, now
        )

    def unregister_static_member(
        self, handle: int, group_id: str, instance_id: str, now: int
    ) -> Result:
        return self._registrations.unregister_static_member(handle, group_id, instance_id, now)

    def force_rebalance(self, handle: int, group_id: str, reason: str, now: int) -> Result:
        return self._rebalancer.force_rebalance(handle, group_id, reason, now)

    def import_offsets(
        self,
        handle: int,
        group_id: str,
        origin: str,
        partitions: tuple[OffsetCommitPartition, ...],
        now: int,
    ) -> Result:
        return self._offsets.import_offsets(handle, group_id, origin, partitions, now)

    # ==== read-only views (metrics, admin API) ==================================================

    def groups_view(self) -> tuple[GroupSummary, ...]:
        """Every group of the partition, Dead ones (being deleted) included."""
        return view.summaries(self.groups)

    def describe(self, group_id: str) -> GroupView | None:
        """One group in full; None if it does not exist or is being deleted."""
        return view.snapshot(self.groups, group_id)

    # ==== timers and write completions ==========================================================

    def next_deadline(self) -> int | None:
        return self._queue.next_deadline()

    def poll_timers(self, now: int) -> Result:
        out = Result()
        for key in self._queue.pop_due(now):
            kind = TimerKind(key[0])
            if kind is TimerKind.RETENTION:
                self._offsets.on_retention_timer(now, out)
                continue
            group = self.groups.get(key[1])
            if group is not None:
                self._on_timer[kind](group, key, now, out)
        return out

    def on_write_complete(
        self, cont: Continuation, failure: AppendFailure | None, now: int
    ) -> Result:
        out = Result()
        self._on_written[type(cont)](cont, failure, now, out)
        return out

    # ==== replay and loading (protocol.md §10) ==================================================

    def replay(self, record: Record) -> None:
        replay(self.groups, record)

    def on_loaded(self, now: int) -> Result:
        """After replay: fresh session timers, max-size enforcement, retention timer
        (protocol.md §10.3)."""
        out = Result()
        self._queue.schedule_all(
            (heartbeat_key(group.group_id, member.member_id), now + member.session_timeout_ms)
            for group in self.groups.values()
            for member in group.members.values()
        )
        for group in self.groups.values():
            self._registrations.on_loaded(group, out)
            if len(group.members) > self.config.group_max_size:
                self._rebalancer.prepare_rebalance(
                    group, now, out, "over group.max.size after load"
                )
        self._queue.schedule(RETENTION_KEY, now + self.config.offsets_retention_check_interval_ms)
        return out

    def unload(self, now: int) -> Result:
        """The partition moves away: every parked request gets NOT_COORDINATOR
        (protocol.md §10.5)."""
        out = Result()
        self._membership.answer_parked(Error.NOT_COORDINATOR, out)
        for group in self.groups.values():
            group.state = DEAD
        self.groups.clear()
        self._queue.clear()
        return out


def _log_written(cont: LogOnly, failure: AppendFailure | None, now: int, out: Result) -> None:
    if failure is not None:
        log.warning("write failed (%s): %s", failure.value, cont.what)
