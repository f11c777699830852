"""The pure classic-group coordinator for one log partition (spec §1-§7).

No I/O, no clock: every entry point takes `now` (ms) and returns a `Result` — replies to
deliver (keyed by the caller's request handle), and writes (records plus a continuation the
runtime hands back to `on_write_complete` once the append is durable or has failed).
Timers live in `self.timers` (key -> deadline); the runtime wakes `poll_timers(now)` at
`next_deadline()`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from app.group.config import CoreConfig
from app.group.messages import (
    AdminResult,
    DeleteGroupResult,
    DescribedGroup,
    DescribedMember,
    Error,
    FetchedOffset,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.group.records import (
    OFFSET_SOURCE_MEMBER,
    OFFSET_SOURCE_RESET,
    OffsetValue,
    Record,
    group_record,
    offset_record,
)
from app.group.replay import drop_if_unused, replay
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
    Write,
    group_write_error,
    offset_write_error,
)
from app.group.state import DurableStatic, Group, GroupState, JoinPhase, Member
from app.group.timers import (
    RETENTION_KEY,
    TimerKey,
    TimerKind,
    TimerQueue,
    expansion_key,
    heartbeat_key,
    join_key,
    pending_key,
    sync_key,
)

log = logging.getLogger(__name__)


def _join_error(error: Error, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(error=error, member_id=member_id)


class GroupCoordinator:
    """All classic groups of one log partition."""

    def __init__(
        self,
        config: CoreConfig,
        new_member_id: Callable[[str], str],
    ) -> None:
        self.config = config
        self._new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        self.rebalances: dict[str, int] = {}  # reason -> rebalances started
        self._queue = TimerQueue()
        # the queue's own dict and heap (never rebound), for tests and benchmarks to inspect
        self.timers = self._queue.deadlines
        self._heap = self._queue.heap
        self._schedule = self._queue.schedule
        self._cancel = self._queue.cancel

    # ==== timers ===============================================================================

    def next_deadline(self) -> int | None:
        return self._queue.next_deadline()

    def poll_timers(self, now: int) -> Result:
        out = Result()
        for key in self._queue.pop_due(now):
            kind = TimerKind(key[0])
            if kind is TimerKind.RETENTION:
                self._schedule(RETENTION_KEY, now + self.config.offsets_retention_check_interval_ms)
                self._expire_offsets(now, out)
                continue
            group = self.groups.get(key[1])
            if group is not None:
                _ON_TIMER[kind](self, group, key, now, out)
        return out

    def _reschedule_session(self, group: Group, member: Member, now: int, timeout: int) -> None:
        self._schedule(heartbeat_key(group.group_id, member.member_id), now + timeout)

    # ==== JoinGroup (spec §2) ==================================================================

    def join_group(self, handle: int, req: JoinGroupRequest, now: int) -> Result:
        out = Result()
        if not req.group_id:
            out.reply(handle, _join_error(Error.INVALID_GROUP_ID, req.member_id))
            return out
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            out.reply(handle, _join_error(Error.INVALID_SESSION_TIMEOUT, req.member_id))
            return out
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                out.reply(handle, _join_error(Error.UNKNOWN_MEMBER_ID, req.member_id))
                return out
            group = Group(req.group_id, state_timestamp=now)
            self.groups[req.group_id] = group

        if not self._accept_joining_member(group, req.member_id):
            removed = group.members.get(req.member_id)
            if removed is not None:
                self._remove_member(group, removed, out)
            out.reply(handle, _join_error(Error.GROUP_MAX_SIZE_REACHED))
        elif not req.member_id:
            self._join_new_member(handle, group, req, now, out)
        else:
            self._join_existing_member(handle, group, req, now, out)

        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now, out)
        drop_if_unused(self.groups, group)
        return out

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        state = group.state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        member = group.members.get(member_id) if member_id else None
        if state is GroupState.PREPARING_REBALANCE:
            return (member is not None and member.awaiting_join is not None) or (
                group.awaiting_join_count < self.config.group_max_size
            )
        return member is not None or len(group.members) < self.config.group_max_size

    def _join_new_member(
        self, handle: int, group: Group, req: JoinGroupRequest, now: int, out: Result
    ) -> None:
        if group.is_(GroupState.DEAD):
            out.reply(handle, _join_error(Error.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            out.reply(handle, _join_error(Error.INCONSISTENT_GROUP_PROTOCOL))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        member_id = self._new_member_id(prefix)
        if req.group_instance_id is not None:
            self._join_new_static_member(handle, group, req, member_id, now, out)
        elif req.require_known_member_id:
            # spec §2.2 (KIP-394): hand out an id, change nothing else
            group.transient.pending_members.add(member_id)
            self._schedule(pending_key(group.group_id, member_id), now + req.session_timeout_ms)
            out.reply(handle, _join_error(Error.MEMBER_ID_REQUIRED, member_id))
        else:
            self._add_member_and_rebalance(handle, group, req, member_id, now, out)

    def _join_new_static_member(
        self,
        handle: int,
        group: Group,
        req: JoinGroupRequest,
        new_id: str,
        now: int,
        out: Result,
    ) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        old_id = group.static_members.get(instance_id)
        if old_id is None:
            if instance_id in group.registered:
                self._registered_member_arrived(group, instance_id, now, out)
            self._add_member_and_rebalance(handle, group, req, new_id, now, out)
            return
        # spec §2.3: replace the known static member, fencing the old id
        old = group.members[old_id]
        if old.awaiting_join is not None:
            out.reply(old.awaiting_join, _join_error(Error.FENCED_INSTANCE_ID, old_id))
            group.set_awaiting_join(old, None)
        if old.awaiting_sync is not None:
            out.reply(old.awaiting_sync, SyncGroupResponse(Error.FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        leader_before = group.leader_id
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        self._cancel(heartbeat_key(group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._reschedule_session(group, member, now, req.session_timeout_ms)
        self._update_member(group, member, req, handle, out)

        if group.is_(GroupState.STABLE):
            if group.select_protocol() == group.protocol_name:
                # no rebalance: persist the new member id, answer after the write
                durable = group.transient.static_in_flight.get(instance_id)
                if durable is None:  # no earlier replacement in flight: the old id is durable
                    durable = DurableStatic(old_id, *saved)
                    group.transient.static_in_flight[instance_id] = durable
                durable.in_flight += 1
                done = StaticReplaceDone(
                    group.group_id,
                    handle,
                    instance_id,
                    old_id,
                    new_id,
                    member.protocols,
                    member.rebalance_timeout_ms,
                    member.session_timeout_ms,
                    leader_before,
                    req.supports_skip_assignment,
                )
                # KIP-814: a returning leader on v9+ is answered SkipAssignment; say so in the
                # record, the audit cannot learn it otherwise (GroupMetadataValue v2)
                skip = req.supports_skip_assignment and group.is_leader(new_id)
                record = group.metadata_record(skip_assignment=skip)
                out.writes.append(Write([record], done))
            else:
                self._prepare_rebalance(group, now, out, "static member changed protocol")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # the leader may already hold the old id in its member list
            self._prepare_rebalance(group, now, out, "static member replaced during sync")
        # PreparingRebalance: stays parked; join completion is attempted by the caller

    def _join_existing_member(
        self, handle: int, group: Group, req: JoinGroupRequest, now: int, out: Result
    ) -> None:
        mid = req.member_id
        if group.is_(GroupState.DEAD):
            out.reply(handle, _join_error(Error.COORDINATOR_NOT_AVAILABLE, mid))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            out.reply(handle, _join_error(Error.INCONSISTENT_GROUP_PROTOCOL, mid))
            return
        if mid in group.transient.pending_members:
            if req.group_instance_id is not None:
                out.reply(handle, _join_error(Error.UNKNOWN_SERVER_ERROR, mid))
                return
            self._add_member_and_rebalance(handle, group, req, mid, now, out)
            return
        error = group.validate_member(mid, req.group_instance_id)
        if error is not Error.NONE:
            out.reply(handle, _join_error(error, mid))
            return
        member = group.members[mid]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member(group, member, req, handle, out)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                out.reply(handle, self._join_response(group, member, self._member_list(group)))
            else:
                self._update_member(group, member, req, handle, out)
                self._prepare_rebalance(group, now, out, "member metadata changed")
        elif state is GroupState.STABLE:
            if group.is_leader(mid) or not member.matches(req.protocols):
                self._update_member(group, member, req, handle, out)
                self._prepare_rebalance(group, now, out, "leader or metadata changed")
            else:
                out.reply(handle, self._join_response(group, member, ()))
        else:  # Empty
            out.reply(handle, _join_error(Error.UNKNOWN_MEMBER_ID, mid))

    def _join_response(
        self, group: Group, member: Member, members: tuple[JoinGroupMember, ...]
    ) -> JoinGroupResponse:
        """The current generation as `member` sees it; only the leader gets `members`."""
        return JoinGroupResponse(
            error=Error.NONE,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members if group.is_leader(member.member_id) else (),
        )

    def _member_list(self, group: Group) -> tuple[JoinGroupMember, ...]:
        # Static members first, then dynamic ones, each in join order. Kafka leaves the order
        # unspecified (hash-map iteration), but kafka-python 3.x's range assignor groups the
        # list with itertools.groupby on "is static" and silently drops every member of an
        # interleaved run; a contiguous order gives every client a correct assignment.
        proto = group.protocol_name
        ordered = sorted(group.members.values(), key=lambda m: m.group_instance_id is None)
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(proto)) for m in ordered
        )

    def _update_member(
        self, group: Group, member: Member, req: JoinGroupRequest, handle: int, out: Result
    ) -> None:
        group.update_protocols(member, req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        if member.awaiting_join is not None and member.awaiting_join != handle:
            # a second JoinGroup supersedes the parked one; answer it so the connection's
            # in-order response stream is never stuck behind a request nobody will answer
            out.reply(
                member.awaiting_join, _join_error(Error.REBALANCE_IN_PROGRESS, member.member_id)
            )
        group.set_awaiting_join(member, handle)

    def _add_member_and_rebalance(
        self,
        handle: int,
        group: Group,
        req: JoinGroupRequest,
        member_id: str,
        now: int,
        out: Result,
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=req.protocols,
            awaiting_join=handle,
            is_new=True,
        )
        # Java's rule: a member added during the initial rebalance extends its delay window
        if (
            group.is_(GroupState.PREPARING_REBALANCE)
            and group.transient.previous_state is GroupState.EMPTY
        ):
            group.transient.new_member_added = True
        group.add(member)
        group.transient.pending_members.discard(member_id)
        self._cancel(pending_key(group.group_id, member_id))
        self._reschedule_session(group, member, now, self.config.new_member_join_timeout_ms)
        if group.can_rebalance():
            self._prepare_rebalance(group, now, out, "member joined")

    # ==== rebalance machinery (spec §2.7, §2.8) ================================================

    def _prepare_rebalance(self, group: Group, now: int, out: Result, reason: str) -> None:
        # why and when, for the log (GroupMetadataValue v1) and the rebalance counters
        group.rebalance_reason = reason
        group.rebalance_started_ms = now
        # operator reasons are free text: count them under one label, log and record the text
        key = "admin" if reason.startswith("admin: ") else reason
        self.rebalances[key] = self.rebalances.get(key, 0) + 1
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, Error.REBALANCE_IN_PROGRESS, out)
        self._cancel(sync_key(group.group_id, group.generation))
        group.transient.pending_sync.clear()
        delay = self.config.initial_rebalance_delay_ms
        if group.is_(GroupState.EMPTY):
            group.transient.join_phase = JoinPhase.INITIAL
            group.transient.initial_window_ms = delay
            group.transient.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.transient.new_member_added = False
            self._schedule(join_key(group.group_id), now + delay)
        else:
            group.transient.join_phase = JoinPhase.REBALANCE
            self._schedule(join_key(group.group_id), now + group.rebalance_timeout_ms())
        group.transition(GroupState.PREPARING_REBALANCE, now)
        self._try_complete_join(group, now, out)

    def _try_complete_join(self, group: Group, now: int, out: Result) -> None:
        # the initial phase never completes early (spec §2.7); a registered scale-up holds it
        if (
            group.transient.join_phase is JoinPhase.REBALANCE
            and group.has_all_members_joined()
            and not group.expansion_holds_join(now)
        ):
            self._cancel(join_key(group.group_id))
            self._complete_join(group, now, out)

    def _on_join_timer(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        if not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if (
            group.transient.join_phase is JoinPhase.INITIAL
            and group.transient.new_member_added
            and group.transient.initial_remaining_ms != 0
        ):
            group.transient.new_member_added = False
            window = min(
                self.config.initial_rebalance_delay_ms, group.transient.initial_remaining_ms
            )
            remaining = group.transient.initial_remaining_ms - group.transient.initial_window_ms
            group.transient.initial_remaining_ms = max(remaining, 0)
            group.transient.initial_window_ms = window
            self._schedule(join_key(group.group_id), now + window)
            return
        reg = group.registration
        if reg is not None and reg.holds_join(now):
            # the rest of a registered scale-up is on its way: complete when it is in or late
            self._schedule(join_key(group.group_id), reg.expansion_started_ms + reg.timeout_ms)
            return
        self._complete_join(group, now, out)

    def _complete_join(self, group: Group, now: int, out: Result) -> None:
        group.transient.join_phase = None
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            if member.group_instance_id is None:
                self._remove_member(group, member, out, answer_join=False)
        if group.is_(GroupState.DEAD):
            return
        if not self._elect_joined_leader(group) and group.members:
            # only static members that have not rejoined: wait another rebalance timeout
            group.transient.join_phase = JoinPhase.REBALANCE
            self._schedule(join_key(group.group_id), now + group.rebalance_timeout_ms())
            return
        group.generation += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition(GroupState.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.transition(GroupState.EMPTY, now)
        group.transient.pending_sync.clear()
        if group.is_(GroupState.EMPTY):
            out.writes.append(Write([group.metadata_record()], LogOnly(f"{group.group_id} empty")))
            return
        members = self._member_list(group)
        for member in group.members.values():
            if member.awaiting_join is not None:
                out.reply(member.awaiting_join, self._join_response(group, member, members))
                group.set_awaiting_join(member, None)
            self._reschedule_session(group, member, now, member.session_timeout_ms)
            member.is_new = False
            group.transient.pending_sync.add(member.member_id)
        self._schedule(
            sync_key(group.group_id, group.generation), now + group.rebalance_timeout_ms()
        )

    def _elect_joined_leader(self, group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in group.members.values():  # deterministic: oldest parked member
            if m.awaiting_join is not None:
                group.leader_id = m.member_id
                return True
        return False

    def _on_pending_sync_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        if int(key[2]) != group.generation or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        if not group.transient.pending_sync:
            return
        for member_id in list(group.transient.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self._remove_member(group, member, out)
        self._prepare_rebalance(group, now, out, "members did not sync in time")

    def _reset_and_propagate_assignment_error(
        self, group: Group, error: Error, out: Result
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync is not None:
                out.reply(member.awaiting_sync, SyncGroupResponse(error))
                member.awaiting_sync = None

    def _remove_member(
        self, group: Group, member: Member, out: Result, answer_join: bool = True
    ) -> None:
        """Drop a member, answering whatever it has parked (spec §4.2, §4.3)."""
        self._cancel(heartbeat_key(group.group_id, member.member_id))
        if member.awaiting_join is not None and answer_join:
            out.reply(member.awaiting_join, _join_error(Error.UNKNOWN_MEMBER_ID))
        if member.awaiting_sync is not None:
            out.reply(member.awaiting_sync, SyncGroupResponse(Error.UNKNOWN_MEMBER_ID))
            member.awaiting_sync = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(
        self, group: Group, member: Member, now: int, out: Result
    ) -> None:
        self._remove_member(group, member, out)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now, out, "member removed")
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now, out)

    def _on_session_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        member_id = key[2]
        member = group.members.get(member_id)
        if member is None:
            return
        # members parked in a rebalance are alive by definition, unless new (5-min join timeout)
        if not member.is_new and (
            member.awaiting_join is not None or member.awaiting_sync is not None
        ):
            return
        log.info("group %s: member %s session expired", group.group_id, member_id)
        self._remove_member_and_update_group(group, member, now, out)

    def _on_pending_member_expired(
        self, group: Group, key: TimerKey, now: int, out: Result
    ) -> None:
        member_id = key[2]
        if member_id in group.transient.pending_members:
            group.transient.pending_members.discard(member_id)
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group, now, out)
            drop_if_unused(self.groups, group)

    # ==== SyncGroup (spec §3) ==================================================================

    def sync_group(self, handle: int, req: SyncGroupRequest, now: int) -> Result:
        out = Result()
        if not req.group_id:
            out.reply(handle, SyncGroupResponse(Error.INVALID_GROUP_ID))
            return out
        group = self.groups.get(req.group_id)
        if group is None or (not group.members and not group.is_(GroupState.DEAD)):
            out.reply(handle, SyncGroupResponse(Error.UNKNOWN_MEMBER_ID))
            return out
        error = self._sync_error(group, req)
        if error is not Error.NONE:
            out.reply(handle, SyncGroupResponse(error))
            return out
        member = group.members[req.member_id]
        if group.is_(GroupState.COMPLETING_REBALANCE):
            if member.awaiting_sync is not None:
                out.reply(member.awaiting_sync, SyncGroupResponse(Error.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = handle
            self._mark_synced(group, member.member_id)
            if (
                group.is_leader(member.member_id)
                and group.transient.assignment_write_generation != group.generation
            ):
                # A leader re-sending SyncGroup while its assignment is being written is only
                # parked: a second record could win on reload while the first wins live.
                group.transient.assignment_write_generation = group.generation
                assignments = dict(req.assignments)
                for mid in group.members:
                    assignments.setdefault(mid, b"")
                record = group.metadata_record(assignments)
                out.writes.append(
                    Write([record], SyncDone(group.group_id, group.generation, assignments))
                )
        else:  # Stable (spec §3.3): answer at once with the stored assignment
            self._mark_synced(group, member.member_id)
            self._reschedule_session(group, member, now, member.session_timeout_ms)
            out.reply(
                handle,
                SyncGroupResponse(
                    Error.NONE, group.protocol_type, group.protocol_name, member.assignment
                ),
            )
        return out

    def _sync_error(self, group: Group, req: SyncGroupRequest) -> Error:
        if group.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not Error.NONE:
            return error
        if req.generation_id != group.generation:
            return Error.ILLEGAL_GENERATION
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return Error.INCONSISTENT_GROUP_PROTOCOL
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return Error.INCONSISTENT_GROUP_PROTOCOL
        if group.is_(GroupState.EMPTY):
            return Error.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.PREPARING_REBALANCE):
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    def _mark_synced(self, group: Group, member_id: str) -> None:
        group.transient.pending_sync.discard(member_id)
        if not group.transient.pending_sync:
            self._cancel(sync_key(group.group_id, group.generation))

    # ==== Heartbeat (spec §4.1) ================================================================

    def heartbeat(self, req: HeartbeatRequest, now: int) -> HeartbeatResponse:
        if not req.group_id:
            return HeartbeatResponse(Error.INVALID_GROUP_ID)
        group = self.groups.get(req.group_id)
        if group is None:
            return HeartbeatResponse(Error.UNKNOWN_MEMBER_ID)
        if group.is_(GroupState.DEAD):
            return HeartbeatResponse(Error.COORDINATOR_NOT_AVAILABLE)
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not Error.NONE:
            return HeartbeatResponse(error)
        if req.generation_id != group.generation:
            return HeartbeatResponse(Error.ILLEGAL_GENERATION)
        if group.is_(GroupState.EMPTY):
            return HeartbeatResponse(Error.UNKNOWN_MEMBER_ID)
        member = group.members[req.member_id]
        self._reschedule_session(group, member, now, member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return HeartbeatResponse(Error.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse(Error.NONE)

    # ==== LeaveGroup (spec §4.3) ===============================================================

    def leave_group(self, handle: int, req: LeaveGroupRequest, now: int) -> Result:
        out = Result()
        if not req.group_id:
            out.reply(handle, LeaveGroupResponse(Error.INVALID_GROUP_ID))
            return out
        group = self.groups.get(req.group_id)
        if group is None:
            out.reply(
                handle,
                LeaveGroupResponse(
                    Error.NONE,
                    tuple(
                        LeaveMemberResponse(
                            m.member_id, m.group_instance_id, Error.UNKNOWN_MEMBER_ID
                        )
                        for m in req.members
                    ),
                ),
            )
            return out
        if group.is_(GroupState.DEAD):
            out.reply(handle, LeaveGroupResponse(Error.COORDINATOR_NOT_AVAILABLE))
            return out
        results = []
        for leaving in req.members:
            error = self._leave_one(group, leaving.member_id, leaving.group_instance_id, now, out)
            if error is Error.NONE:
                log.info(
                    "group %s: member %s/%s left (reason: %s)",
                    group.group_id,
                    leaving.member_id,
                    leaving.group_instance_id,
                    leaving.reason or "not provided",
                )
            results.append(LeaveMemberResponse(leaving.member_id, leaving.group_instance_id, error))
        out.reply(handle, LeaveGroupResponse(Error.NONE, tuple(results)))
        drop_if_unused(self.groups, group)
        return out

    def _leave_one(
        self, group: Group, member_id: str, instance_id: str | None, now: int, out: Result
    ) -> Error:
        if not member_id:
            known = group.static_members.get(instance_id) if instance_id is not None else None
            if known is None:
                return Error.UNKNOWN_MEMBER_ID
            self._remove_member_and_update_group(group, group.members[known], now, out)
            return Error.NONE
        if member_id in group.transient.pending_members:
            group.transient.pending_members.discard(member_id)
            self._cancel(pending_key(group.group_id, member_id))
            if group.is_(GroupState.PREPARING_REBALANCE):
                self._try_complete_join(group, now, out)
            return Error.NONE
        error = group.validate_member(member_id, instance_id)
        if error is not Error.NONE:
            return error
        self._remove_member_and_update_group(group, group.members[member_id], now, out)
        return Error.NONE

    # ==== OffsetCommit / OffsetFetch (spec §5) =================================================

    def offset_commit(self, handle: int, req: OffsetCommitRequest, now: int) -> Result:
        out = Result()

        def fail_all(error: Error) -> Result:
            out.reply(
                handle,
                OffsetCommitResponse(
                    tuple(PartitionResult(p.topic, p.partition, error) for p in req.partitions)
                ),
            )
            return out

        group = self.groups.get(req.group_id)
        if group is None:
            if req.generation_id >= 0:
                return fail_all(
                    Error.GROUP_ID_NOT_FOUND
                    if req.unknown_group_not_found
                    else Error.ILLEGAL_GENERATION
                )
            group = Group(req.group_id, state_timestamp=now)  # a "simple" group
            self.groups[req.group_id] = group
        error = self._commit_error(group, req)
        if error is not Error.NONE:
            return fail_all(error)
        member = group.members.get(req.member_id)
        if member is not None and group.state in (
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
        ):
            self._reschedule_session(group, member, now, member.session_timeout_ms)
        results: list[PartitionResult] = []
        records: list[Record] = []
        written: list[tuple[str, int]] = []
        expire = now + req.retention_time_ms if req.retention_time_ms != -1 else -1
        # no member, generation -1, Empty group: a reset, which the audit must tell apart
        # from members' commits (OffsetValue v1)
        source = (
            OFFSET_SOURCE_RESET
            if req.generation_id < 0 and member is None and group.is_(GroupState.EMPTY)
            else OFFSET_SOURCE_MEMBER
        )
        for p in req.partitions:
            metadata = p.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results.append(
                    PartitionResult(p.topic, p.partition, Error.OFFSET_METADATA_TOO_LARGE)
                )
                continue
            value = OffsetValue(p.offset, p.leader_epoch, metadata, now, expire, source)
            records.append(offset_record(group.group_id, p.topic, p.partition, value))
            written.append((p.topic, p.partition))
        if not records:
            out.reply(handle, OffsetCommitResponse(tuple(results)))
            drop_if_unused(self.groups, group)  # a simple group created for nothing
            return out
        for tp in written:
            group.transient.pending_offset_commits[tp] = (
                group.transient.pending_offset_commits.get(tp, 0) + 1
            )
        out.writes.append(
            Write(
                records,
                OffsetsDone(group.group_id, handle, tuple(results), tuple(written), tuple(records)),
            )
        )
        return out

    def _commit_error(self, group: Group, req: OffsetCommitRequest) -> Error:
        if group.is_(GroupState.DEAD):
            return Error.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and group.is_(GroupState.EMPTY):
            return Error.NONE  # admin/simple commit: no member validation
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is not Error.NONE:
                return error
            if req.generation_id != group.generation:
                return Error.ILLEGAL_GENERATION
        else:
            return Error.UNKNOWN_MEMBER_ID
        if group.is_(GroupState.COMPLETING_REBALANCE):
            return Error.REBALANCE_IN_PROGRESS
        return Error.NONE

    def offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse:
        group = self.groups.get(req.group_id)
        if group is None or group.is_(GroupState.DEAD):
            parts = tuple(FetchedOffset(t, p) for t, p in (req.partitions or ()))
            return OffsetFetchResponse(req.group_id, Error.NONE, parts)
        wanted = sorted(group.offsets) if req.partitions is None else list(req.partitions)
        out = []
        for tp in wanted:
            if req.require_stable and group.transient.pending_offset_commits.get(tp):
                out.append(FetchedOffset(tp[0], tp[1], error=Error.UNSTABLE_OFFSET_COMMIT))
                continue
            value = group.offsets.get(tp)
            if value is None:
                out.append(FetchedOffset(tp[0], tp[1]))
            else:
                out.append(
                    FetchedOffset(tp[0], tp[1], value.offset, value.leader_epoch, value.metadata)
                )
        return OffsetFetchResponse(req.group_id, Error.NONE, tuple(out))

    # ==== retention (spec §5.3) ================================================================

    def _expire_offsets(self, now: int, out: Result) -> None:
        for group in list(self.groups.values()):
            if group.is_(GroupState.DEAD):
                continue
            expired = self._expired_offsets(group, now)
            records = [offset_record(group.group_id, t, p, None) for t, p in expired]
            pending = group.transient
            kills = (
                group.is_(GroupState.EMPTY)
                and not group.members
                and not pending.pending_members
                and not pending.pending_offset_commits  # Kafka: hasOffsets counts pending ones
                and len(expired) == len(group.offsets)
            )
            before = group.state_timestamp
            if kills:
                records.append(group_record(group.group_id, None))
                group.transition(GroupState.DEAD, now)
            if records:
                done = TombstonesDone(group.group_id, None, tuple(records), kills, before)
                out.writes.append(Write(records, done))

    def _expired_offsets(self, group: Group, now: int) -> list[tuple[str, int]]:
        """spec §5.3: the group's state decides whether offsets may expire at all and from
        which base time; an explicit expire timestamp replaces only the age test."""
        retention = self.config.offsets_retention_ms
        use_state_time = False
        kept_topics: set[str] = set()
        if group.protocol_type and group.is_(GroupState.EMPTY):
            use_state_time = group.state_timestamp is not None
        elif (
            group.protocol_type == "consumer"
            and group.is_(GroupState.STABLE)
            and group.members
            and (subscribed := group.subscribed_topics()) is not None
        ):
            kept_topics = subscribed  # only offsets of topics nobody subscribes to
        elif group.protocol_type:
            return []  # rebalancing, or a non-consumer protocol with members
        expired: list[tuple[str, int]] = []
        for tp, value in group.offsets.items():
            if tp[0] in kept_topics or group.transient.pending_offset_commits.get(tp):
                continue
            if value.expire_timestamp != -1:
                if now >= value.expire_timestamp:
                    expired.append(tp)
                continue
            since = value.commit_timestamp
            if use_state_time and group.state_timestamp is not None:
                since = group.state_timestamp
            if now - since >= retention:
                expired.append(tp)
        return expired

    # ==== Describe / List / Delete (spec §6) ====================================================

    def describe_group(self, group_id: str) -> DescribedGroup:
        group = self.groups.get(group_id)
        if group is None:
            return DescribedGroup(group_id, Error.NONE, state=GroupState.DEAD.value)
        stable = group.is_(GroupState.STABLE)
        proto = group.protocol_name
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(proto) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return DescribedGroup(
            group_id,
            Error.NONE,
            state=group.state.value,
            protocol_type=group.protocol_type or "",
            protocol_data=(proto or "") if stable else "",
            members=members,
        )

    def list_groups(
        self, states_filter: Iterable[str] = (), types_filter: Iterable[str] = ()
    ) -> list[ListedGroup]:
        states = {s.lower() for s in states_filter}
        types = {t.lower() for t in types_filter}
        if types and "classic" not in types:
            return []
        return [
            ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not g.is_(GroupState.DEAD) and (not states or g.state.value.lower() in states)
        ]

    def delete_group(self, handle: int, group_id: str, now: int) -> Result:
        out = Result()
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            out.reply(handle, DeleteGroupResult(group_id, Error.GROUP_ID_NOT_FOUND))
            return out
        if not group.is_(GroupState.EMPTY):
            out.reply(handle, DeleteGroupResult(group_id, Error.NON_EMPTY_GROUP))
            return out
        # Offsets still being written are tombstoned too: their records precede these in the
        # log, so a reload must not resurrect them (spec §6: fetch returns -1 afterwards).
        partitions = list(group.offsets)
        partitions += [
            tp for tp in group.transient.pending_offset_commits if tp not in group.offsets
        ]
        records = [offset_record(group_id, t, p, None) for t, p in partitions]
        records.append(group_record(group_id, None))
        before = group.state_timestamp
        group.transition(GroupState.DEAD, now)
        done = TombstonesDone(group_id, handle, tuple(records), True, before)
        out.writes.append(Write(records, done))
        return out

    # ==== admin operations (the project's own, no Kafka API) ===================================

    def register_static_members(
        self, handle: int, group_id: str, instance_ids: list[str], timeout_ms: int, now: int
    ) -> Result:
        """addMembersToGroup: expect these static members, so their scale-up rebalances once.

        From the first JoinGroup of a registered instance, a join phase of the group does not
        complete until every registered instance has joined or `timeout_ms` has passed; the
        ones that never came are then dropped from the registration (a record says which).
        """
        out = Result()
        group = self.groups.get(group_id)
        problem = self._registration_problem(group, instance_ids, timeout_ms)
        if problem is not None:
            out.reply(handle, AdminResult(Error.INVALID_REQUEST, problem))
            return out
        if group is None:
            group = self.groups[group_id] = Group(group_id, state_timestamp=now)
        reg = group.open_registration()
        reg.registered.update(dict.fromkeys(instance_ids))
        reg.batch += tuple(instance_ids)
        reg.timeout_ms = timeout_ms
        reg.registered_ms = now
        out.writes.append(
            Write(
                [reg.record(group_id)],
                AdminDone(group_id, handle, "registered", added=tuple(instance_ids)),
            )
        )
        return out

    @staticmethod
    def _registration_problem(
        group: Group | None, instance_ids: list[str], timeout_ms: int
    ) -> str | None:
        if not instance_ids:
            return "group_instance_ids must not be empty"
        if any(not i for i in instance_ids):
            return "a group.instance.id must not be empty"
        dupes = sorted({i for i in instance_ids if instance_ids.count(i) > 1})
        if dupes:
            return f"duplicate group_instance_ids: {dupes}"
        if timeout_ms <= 0:
            return "expansion_timeout_ms must be positive"
        if group is not None:
            members = sorted(i for i in instance_ids if i in group.static_members)
            if members:
                return f"already members of group {group.group_id!r}: {members}"
            again = sorted(i for i in instance_ids if i in group.registered)
            if again:
                return f"already registered for group {group.group_id!r}: {again}"
            if group.is_(GroupState.DEAD):
                return f"group {group.group_id!r} is being deleted"
        return None

    def _registered_member_arrived(
        self, group: Group, instance_id: str, now: int, out: Result
    ) -> None:
        reg = group.registration
        assert reg is not None  # the instance is registered
        del reg.registered[instance_id]
        if reg.expansion_started_ms < 0:
            reg.expansion_started_ms = now
            self._schedule(expansion_key(group.group_id), now + reg.timeout_ms)
            record = reg.record(group.group_id)
            out.writes.append(Write([record], LogOnly(f"{group.group_id} expansion started")))
        if not reg.registered:
            self._cancel(expansion_key(group.group_id))  # closed once its generation syncs

    def _close_registration(self, group: Group, out: Result, dropped: tuple[str, ...]) -> None:
        self._cancel(expansion_key(group.group_id))
        reg = group.registration
        assert reg is not None  # there is a registration to close
        reg.registered = {}
        reg.batch = ()
        reg.expansion_started_ms = -1
        out.writes.append(
            Write(
                [reg.record(group.group_id, dropped)],
                LogOnly(f"{group.group_id} registration closed"),
            )
        )

    def _on_expansion_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        dropped = tuple(group.registered)
        if not dropped:
            return
        log.info("group %s: registered static members never joined: %s", group.group_id, dropped)
        self._close_registration(group, out, dropped)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now, out)

    def unregister_static_member(
        self, handle: int, group_id: str, instance_id: str, now: int
    ) -> Result:
        """Withdraw a registration that has not joined yet."""
        out = Result()
        group = self.groups.get(group_id)
        reg = None if group is None else group.registration
        if group is None or reg is None or instance_id not in reg.registered:
            out.reply(handle, AdminResult(Error.UNKNOWN_MEMBER_ID, "not registered"))
            return out
        del reg.registered[instance_id]
        dropped = (instance_id,)
        reg.batch = tuple(i for i in reg.batch if i != instance_id)
        if not reg.registered:
            self._cancel(expansion_key(group.group_id))
        out.writes.append(
            Write(
                [reg.record(group_id, dropped)],
                AdminDone(group_id, handle, "unregistered", removed=dropped),
            )
        )
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group, now, out)
        return out

    def force_rebalance(self, handle: int, group_id: str, reason: str, now: int) -> Result:
        """Admin-forced rebalance: members learn it from their next heartbeat and rejoin."""
        out = Result()
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            out.reply(handle, AdminResult(Error.GROUP_ID_NOT_FOUND, "no such group"))
        elif group.is_(GroupState.EMPTY):
            out.reply(handle, AdminResult(Error.NON_EMPTY_GROUP, "group has no members"))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            out.reply(handle, AdminResult(Error.NONE, "already rebalancing"))
        else:
            log.info("group %s: rebalance forced by admin (%s)", group_id, reason)
            self._prepare_rebalance(group, now, out, f"admin: {reason}")
            out.reply(handle, AdminResult(Error.NONE, "rebalance started"))
        return out

    # ==== write completion =====================================================================

    def on_write_complete(
        self, cont: Continuation, failure: AppendFailure | None, now: int
    ) -> Result:
        out = Result()
        _ON_WRITTEN[type(cont)](self, cont, failure, now, out)
        return out

    def _log_only_written(
        self, cont: LogOnly, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        if failure is not None:
            log.warning("write failed (%s): %s", failure.value, cont.what)

    def _admin_written(
        self, cont: AdminDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        if failure is None:
            out.reply(cont.handle, AdminResult(Error.NONE, cont.what))
            return
        group = self.groups.get(cont.group_id)
        if group is not None:
            reg = group.open_registration()
            for instance in cont.added:
                reg.registered.pop(instance, None)
            for instance in cont.removed:
                if instance not in group.static_members:
                    reg.registered[instance] = None
            reg.batch = tuple(i for i in reg.batch if i not in cont.added) + tuple(
                i for i in cont.removed if i not in reg.batch
            )
        error = group_write_error(failure)
        message = f"the registration was not written ({error.name})"
        out.reply(cont.handle, AdminResult(error, message))

    def _sync_written(
        self, cont: SyncDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is not None and group.transient.assignment_write_generation == cont.generation:
            group.transient.assignment_write_generation = None
        if (
            group is None
            or not group.is_(GroupState.COMPLETING_REBALANCE)
            or group.generation != cont.generation
        ):
            return
        if failure is not None:
            self._reset_and_propagate_assignment_error(group, group_write_error(failure), out)
            self._prepare_rebalance(group, now, out, "assignment write failed")
            return
        for member in group.members.values():
            member.assignment = cont.assignments.get(member.member_id, b"")
            if member.awaiting_sync is not None:
                out.reply(
                    member.awaiting_sync,
                    SyncGroupResponse(
                        Error.NONE, group.protocol_type, group.protocol_name, member.assignment
                    ),
                )
                member.awaiting_sync = None
                self._reschedule_session(group, member, now, member.session_timeout_ms)
        group.transition(GroupState.STABLE, now)
        reg = group.registration
        if reg is not None and reg.batch and not reg.registered:
            # every registered instance is now a durable member: the scale-up is done
            self._close_registration(group, out, ())

    def _offsets_written(
        self, cont: OffsetsDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is not None:
            for tp in cont.written:
                n = group.transient.pending_offset_commits.get(tp, 0) - 1
                if n > 0:
                    group.transient.pending_offset_commits[tp] = n
                else:
                    group.transient.pending_offset_commits.pop(tp, None)
        if failure is None:
            for record in cont.records:
                replay(self.groups, record)  # spec §5.1: visible only once durable
            error = Error.NONE
        else:
            error = offset_write_error(failure)
            if group is not None:
                drop_if_unused(self.groups, group)  # a simple group whose first commit failed
        if cont.handle is not None:
            results = cont.results + tuple(PartitionResult(t, p, error) for t, p in cont.written)
            out.reply(cont.handle, OffsetCommitResponse(results))

    def _static_replace_written(
        self, cont: StaticReplaceDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is None:
            return  # unloaded: the request was answered NOT_COORDINATOR
        durable = group.transient.static_in_flight.get(cont.instance_id)
        if durable is not None:
            if failure is None:  # the log now holds this write's identity
                durable.member_id = cont.new_member_id
                durable.protocols = cont.protocols
                durable.rebalance_timeout_ms = cont.rebalance_timeout_ms
                durable.session_timeout_ms = cont.session_timeout_ms
            durable.in_flight -= 1
            if durable.in_flight <= 0:
                del group.transient.static_in_flight[cont.instance_id]
        member = group.members.get(cont.new_member_id)
        if member is None or member.awaiting_join != cont.handle:
            # The request was already answered while the write was in flight: fenced by a
            # later replacement (whose own completion reverts, if needed), removed by
            # leave/expiry, or answered by a join completion. Nothing more to do.
            return
        group.set_awaiting_join(member, None)
        if failure is not None:
            # revert to the durable identity: the old id stays valid (spec §2.3)
            target = durable or DurableStatic(
                cont.old_member_id,
                member.protocols,
                member.rebalance_timeout_ms,
                member.session_timeout_ms,
            )
            group.update_protocols(member, target.protocols)
            member.rebalance_timeout_ms = target.rebalance_timeout_ms
            member.session_timeout_ms = target.session_timeout_ms
            self._cancel(heartbeat_key(group.group_id, cont.new_member_id))
            group.replace_static_member(cont.instance_id, cont.new_member_id, target.member_id)
            self._reschedule_session(group, member, now, member.session_timeout_ms)
            out.reply(
                cont.handle,
                JoinGroupResponse(
                    error=group_write_error(failure),
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=cont.leader_before or "",
                    member_id="",
                ),
            )
            return
        is_leader = group.is_leader(cont.new_member_id)
        if cont.supports_skip_assignment:
            # KIP-814: a returning static leader learns it leads and keeps the assignment
            response = JoinGroupResponse(
                error=Error.NONE,
                generation_id=group.generation,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader_id or "",
                skip_assignment=is_leader,
                member_id=cont.new_member_id,
                members=self._member_list(group) if is_leader else (),
            )
        else:
            # older clients see the old leader id, so a returning leader acts as a follower
            response = JoinGroupResponse(
                error=Error.NONE,
                generation_id=group.generation,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=cont.leader_before or "",
                member_id=cont.new_member_id,
            )
        out.reply(cont.handle, response)

    def _tombstones_written(
        self, cont: TombstonesDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if failure is not None:
            if cont.kills_group and group is not None and group.is_(GroupState.DEAD):
                # the group was never deleted: back to its last durable state
                group.state = GroupState.EMPTY
                group.state_timestamp = cont.state_timestamp_before
            if cont.handle is not None:
                out.reply(cont.handle, DeleteGroupResult(cont.group_id, group_write_error(failure)))
            return
        for record in cont.records:
            replay(self.groups, record)
        if cont.kills_group:
            self.groups.pop(cont.group_id, None)
        if cont.handle is not None:
            out.reply(cont.handle, DeleteGroupResult(cont.group_id, Error.NONE))

    # ==== replay and loading (spec §7) =========================================================

    def replay(self, record: Record) -> None:
        replay(self.groups, record)

    def on_loaded(self, now: int) -> Result:
        """After replay: fresh session timers, max-size enforcement, retention timer (§7)."""
        out = Result()
        self._queue.schedule_all(
            (heartbeat_key(group.group_id, member.member_id), now + member.session_timeout_ms)
            for group in self.groups.values()
            for member in group.members.values()
        )
        for group in self.groups.values():
            reg = group.registration
            if reg is not None:
                for instance in list(reg.registered):
                    if instance in group.static_members:  # its join is durable: it arrived
                        del reg.registered[instance]
                if reg.batch and not reg.registered:
                    self._close_registration(group, out, ())
                if reg.registered and reg.expansion_started_ms >= 0:
                    self._schedule(
                        expansion_key(group.group_id), reg.expansion_started_ms + reg.timeout_ms
                    )
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(group, now, out, "over group.max.size after load")
        self._schedule(RETENTION_KEY, now + self.config.offsets_retention_check_interval_ms)
        return out

    def unload(self, now: int) -> Result:
        """The partition moves away: every parked request gets NOT_COORDINATOR (spec §7)."""
        out = Result()
        for group in self.groups.values():
            for member in group.members.values():
                if member.awaiting_join is not None:
                    out.reply(member.awaiting_join, _join_error(Error.NOT_COORDINATOR))
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    out.reply(member.awaiting_sync, SyncGroupResponse(Error.NOT_COORDINATOR))
                    member.awaiting_sync = None
            group.state = GroupState.DEAD
        self.groups.clear()
        self._queue.clear()
        return out


# Dispatch tables of plain functions: bound methods held by the instance would make the
# coordinator a reference cycle, which the frozen loaded state must not have.
_ON_TIMER: dict[TimerKind, Callable[[GroupCoordinator, Group, TimerKey, int, Result], None]] = {
    TimerKind.HEARTBEAT: GroupCoordinator._on_session_expired,
    TimerKind.PENDING: GroupCoordinator._on_pending_member_expired,
    TimerKind.JOIN: GroupCoordinator._on_join_timer,
    TimerKind.EXPANSION: GroupCoordinator._on_expansion_expired,
    TimerKind.SYNC: GroupCoordinator._on_pending_sync_expired,
}
_ON_WRITTEN: dict[
    type, Callable[[GroupCoordinator, Any, AppendFailure | None, int, Result], None]
] = {
    SyncDone: GroupCoordinator._sync_written,
    OffsetsDone: GroupCoordinator._offsets_written,
    StaticReplaceDone: GroupCoordinator._static_replace_written,
    TombstonesDone: GroupCoordinator._tombstones_written,
    AdminDone: GroupCoordinator._admin_written,
    LogOnly: GroupCoordinator._log_only_written,
}
