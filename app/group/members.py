"""The member-facing requests: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, and the
completions of the writes they start."""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.group.config import CoreConfig
from app.group.messages import (
    NO_ERROR,
    Error,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.group.rebalance import (
    Rebalancer,
    generation_response,
    join_error,
    join_response,
    member_list,
)
from app.group.registrations import Registrations
from app.group.replay import drop_if_unused
from app.group.results import (
    AppendFailure,
    Result,
    StaticReplaceDone,
    SyncDone,
    Write,
    group_write_error,
)
from app.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    DurableStatic,
    Group,
    Member,
)
from app.group.timers import TimerQueue, heartbeat_key, pending_key

log = logging.getLogger(__name__)

MEMBER_ID_PREFIX_MAX = 64


# replies are immutable: one per error code, not one per heartbeat
_HEARTBEAT_RESPONSES = {e: HeartbeatResponse(e) for e in Error}


class Membership:
    def __init__(
        self,
        config: CoreConfig,
        groups: dict[str, Group],
        queue: TimerQueue,
        new_member_id: Callable[[str], str],
        rebalancer: Rebalancer,
        registrations: Registrations,
    ) -> None:
        self.config = config
        self.groups = groups
        self.queue = queue
        self._new_member_id = new_member_id
        self.rebalancer = rebalancer
        self.registrations = registrations

    # ==== JoinGroup (protocol.md §4) ============================================================

    def join_group(self, handle: int, req: JoinGroupRequest, now: int) -> Result:
        out = Result()
        if not req.group_id:
            out.reply(handle, join_error(Error.INVALID_GROUP_ID, req.member_id))
            return out
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            out.reply(handle, join_error(Error.INVALID_SESSION_TIMEOUT, req.member_id))
            return out
        group = self.groups.get(req.group_id)
        if group is None:
            if req.member_id:
                out.reply(handle, join_error(Error.UNKNOWN_MEMBER_ID, req.member_id))
                return out
            group = Group(req.group_id, state_timestamp=now)
            self.groups[req.group_id] = group

        if not self._accept_joining_member(group, req.member_id):
            removed = group.members.get(req.member_id)
            if removed is not None:
                self.rebalancer.remove_member(group, removed, out)
            out.reply(handle, join_error(Error.GROUP_MAX_SIZE_REACHED))
        elif not req.member_id:
            self._join_new_member(handle, group, req, now, out)
        else:
            self._join_existing_member(handle, group, req, now, out)

        state = group.state
        if state is PREPARING_REBALANCE:
            self.rebalancer.try_complete_join(group, now, out)
        elif state is EMPTY:  # only an Empty group can be unused
            drop_if_unused(self.groups, group)
        return out

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        state = group.state
        if state in (EMPTY, DEAD):
            return True
        member = group.members.get(member_id) if member_id else None
        if state is PREPARING_REBALANCE:
            return (member is not None and member.awaiting_join is not None) or (
                group.awaiting_join_count < self.config.group_max_size
            )
        return member is not None or len(group.members) < self.config.group_max_size

    def _join_new_member(
        self, handle: int, group: Group, req: JoinGroupRequest, now: int, out: Result
    ) -> None:
        if group.is_(DEAD):
            out.reply(handle, join_error(Error.COORDINATOR_NOT_AVAILABLE))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            out.reply(handle, join_error(Error.INCONSISTENT_GROUP_PROTOCOL))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        # Kafka's member id is "<client or instance id>-<uuid>"; the prefix is cut short here, so
        # that a member id handed out (and kept while it is pending) costs a bounded few bytes
        # whatever the client sent (protocol.md §2.2)
        member_id = self._new_member_id(prefix[:MEMBER_ID_PREFIX_MAX])
        if req.group_instance_id is not None:
            self._join_new_static_member(handle, group, req, member_id, now, out)
        elif req.require_known_member_id:
            # protocol.md §4.4 (KIP-394): hand out an id, change nothing else; the ids handed
            # out and not yet used are bounded, or a flood of first joins would grow the
            # group without bound (protocol.md §4.2)
            if len(group.transient.pending_members) >= self.config.max_pending_members:
                out.reply(handle, join_error(Error.GROUP_MAX_SIZE_REACHED))
                return
            group.transient.pending_members.add(member_id)
            self.queue.schedule(
                pending_key(group.group_id, member_id), now + req.session_timeout_ms
            )
            out.reply(handle, join_error(Error.MEMBER_ID_REQUIRED, member_id))
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
                self.registrations.member_arrived(group, instance_id, now, out)
            self._add_member_and_rebalance(handle, group, req, new_id, now, out)
            return
        # protocol.md §4.5: replace the known static member, fencing the old id
        old = group.members[old_id]
        if old.awaiting_join is not None:
            out.reply(old.awaiting_join, join_error(Error.FENCED_INSTANCE_ID, old_id))
            group.set_awaiting_join(old, None)
        if old.awaiting_sync is not None:
            out.reply(old.awaiting_sync, SyncGroupResponse(Error.FENCED_INSTANCE_ID))
            old.awaiting_sync = None
        leader_before = group.leader_id
        saved = (old.protocols, old.rebalance_timeout_ms, old.session_timeout_ms)
        self.queue.cancel(heartbeat_key(group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.rebalancer.reschedule_session(group, member, now, req.session_timeout_ms)
        self._update_member(group, member, req, handle, out)

        if group.is_(STABLE):
            if group.select_protocol() == group.protocol_name:
                # no rebalance: persist the new member id, answer after the write
                in_flight = group.transient.static_in_flight
                durable = in_flight.get(instance_id)
                if durable is None:  # no earlier replacement in flight: the old id is durable
                    durable = in_flight[instance_id] = DurableStatic(old_id, *saved)
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
                self.rebalancer.prepare_rebalance(group, now, out, "static member changed protocol")
        elif group.is_(COMPLETING_REBALANCE):
            # the leader may already hold the old id in its member list
            self.rebalancer.prepare_rebalance(group, now, out, "static member replaced during sync")
        # PreparingRebalance: stays parked; join completion is attempted by the caller

    def _join_existing_member(
        self, handle: int, group: Group, req: JoinGroupRequest, now: int, out: Result
    ) -> None:
        mid = req.member_id
        state = group.state
        if state is DEAD:
            out.reply(handle, join_error(Error.COORDINATOR_NOT_AVAILABLE, mid))
            return
        if not group.supports_protocols(req.protocol_type, [n for n, _ in req.protocols]):
            out.reply(handle, join_error(Error.INCONSISTENT_GROUP_PROTOCOL, mid))
            return
        if mid in group.transient.pending_members:
            if req.group_instance_id is not None:
                out.reply(handle, join_error(Error.UNKNOWN_SERVER_ERROR, mid))
                return
            self._add_member_and_rebalance(handle, group, req, mid, now, out)
            return
        error = group.validate_member(mid, req.group_instance_id)
        if error is not NO_ERROR:
            out.reply(handle, join_error(error, mid))
            return
        member = group.members[mid]
        if state is PREPARING_REBALANCE:
            self._update_member(group, member, req, handle, out)
        elif state is COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                out.reply(handle, join_response(group, member, member_list(group)))
            else:
                self._update_member(group, member, req, handle, out)
                self.rebalancer.prepare_rebalance(group, now, out, "member metadata changed")
        elif state is STABLE:
            if group.is_leader(mid) or not member.matches(req.protocols):
                self._update_member(group, member, req, handle, out)
                self.rebalancer.prepare_rebalance(group, now, out, "leader or metadata changed")
            else:
                out.reply(handle, join_response(group, member, ()))
        else:  # Empty
            out.reply(handle, join_error(Error.UNKNOWN_MEMBER_ID, mid))

    @staticmethod
    def _update_member(
        group: Group, member: Member, req: JoinGroupRequest, handle: int, out: Result
    ) -> None:
        group.update_protocols(member, req.protocols)
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        if member.awaiting_join is not None and member.awaiting_join != handle:
            # a second JoinGroup supersedes the parked one; answer it so the connection's
            # in-order response stream is never stuck behind a request nobody will answer
            out.reply(
                member.awaiting_join, join_error(Error.REBALANCE_IN_PROGRESS, member.member_id)
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
        t = group.transient
        if group.is_(PREPARING_REBALANCE) and t.previous_state is EMPTY:
            t.new_member_added = True
        group.add(member)
        t.pending_members.discard(member_id)
        self.queue.cancel(pending_key(group.group_id, member_id))
        timeout = self.config.new_member_join_timeout_ms
        self.rebalancer.reschedule_session(group, member, now, timeout)
        if group.can_rebalance():
            self.rebalancer.prepare_rebalance(group, now, out, "member joined")

    def static_replace_written(
        self, cont: StaticReplaceDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is None:
            return  # unloaded: the request was answered NOT_COORDINATOR
        in_flight = group.transient.static_in_flight
        durable = in_flight.get(cont.instance_id)
        if durable is not None:
            if failure is None:  # the log now holds this write's identity
                durable.member_id = cont.new_member_id
                durable.protocols = cont.protocols
                durable.rebalance_timeout_ms = cont.rebalance_timeout_ms
                durable.session_timeout_ms = cont.session_timeout_ms
            durable.in_flight -= 1
            if durable.in_flight <= 0:
                del in_flight[cont.instance_id]
        member = group.members.get(cont.new_member_id)
        if member is None or member.awaiting_join != cont.handle:
            # The request was already answered while the write was in flight: fenced by a
            # later replacement (whose own completion reverts, if needed), removed by
            # leave/expiry, or answered by a join completion. Nothing more to do.
            return
        group.set_awaiting_join(member, None)
        if failure is not None:
            # revert to the durable identity: the old id stays valid (protocol.md §4.5)
            target = durable or DurableStatic(
                cont.old_member_id,
                member.protocols,
                member.rebalance_timeout_ms,
                member.session_timeout_ms,
            )
            group.update_protocols(member, target.protocols)
            member.rebalance_timeout_ms = target.rebalance_timeout_ms
            member.session_timeout_ms = target.session_timeout_ms
            self.queue.cancel(heartbeat_key(group.group_id, cont.new_member_id))
            group.replace_static_member(cont.instance_id, cont.new_member_id, target.member_id)
            self.rebalancer.reschedule_session(group, member, now, member.session_timeout_ms)
            error = group_write_error(failure)
            out.reply(cont.handle, generation_response(group, "", cont.leader_before, error=error))
            return
        if cont.supports_skip_assignment:
            # KIP-814: a returning static leader learns it leads and keeps the assignment
            is_leader = group.is_leader(cont.new_member_id)
            members = member_list(group) if is_leader else ()
            response = generation_response(
                group, cont.new_member_id, group.leader_id, members, skip_assignment=is_leader
            )
        else:
            # older clients see the old leader id, so a returning leader acts as a follower
            response = generation_response(group, cont.new_member_id, cont.leader_before)
        out.reply(cont.handle, response)

    # ==== SyncGroup (protocol.md §6) ============================================================

    def sync_group(self, handle: int, req: SyncGroupRequest, now: int) -> Result:
        out = Result()
        if not req.group_id:
            out.reply(handle, SyncGroupResponse(Error.INVALID_GROUP_ID))
            return out
        group = self.groups.get(req.group_id)
        if group is None or (not group.members and group.state is not DEAD):
            out.reply(handle, SyncGroupResponse(Error.UNKNOWN_MEMBER_ID))
            return out
        error = _sync_error(group, req)
        if error is not NO_ERROR:
            out.reply(handle, SyncGroupResponse(error))
            return out
        member = group.members[req.member_id]
        if group.state is COMPLETING_REBALANCE:
            if member.awaiting_sync is not None:
                out.reply(member.awaiting_sync, SyncGroupResponse(Error.REBALANCE_IN_PROGRESS))
            member.awaiting_sync = handle
            self.rebalancer.mark_synced(group, member.member_id)
            t = group.transient
            if (
                group.is_leader(member.member_id)
                and t.assignment_write_generation != group.generation
            ):
                # A leader re-sending SyncGroup while its assignment is being written is only
                # parked: a second record could win on reload while the first wins live.
                t.assignment_write_generation = group.generation
                assignments = dict(req.assignments)
                for mid in group.members:
                    assignments.setdefault(mid, b"")
                record = group.metadata_record(assignments)
                out.writes.append(
                    Write([record], SyncDone(group.group_id, group.generation, assignments))
                )
        else:  # Stable (protocol.md §6.3): answer at once with the stored assignment
            self.rebalancer.mark_synced(group, member.member_id)
            self.rebalancer.reschedule_session(group, member, now, member.session_timeout_ms)
            out.reply(
                handle,
                SyncGroupResponse(
                    NO_ERROR, group.protocol_type, group.protocol_name, member.assignment
                ),
            )
        return out

    def sync_written(
        self, cont: SyncDone, failure: AppendFailure | None, now: int, out: Result
    ) -> None:
        group = self.groups.get(cont.group_id)
        if group is not None and group.transient.assignment_write_generation == cont.generation:
            group.transient.assignment_write_generation = None
        if (
            group is None
            or not group.is_(COMPLETING_REBALANCE)
            or group.generation != cont.generation
        ):
            return
        if failure is not None:
            self.rebalancer.reset_and_propagate_assignment_error(
                group, group_write_error(failure), out
            )
            self.rebalancer.prepare_rebalance(group, now, out, "assignment write failed")
            return
        # every member's reply in one loop, its invariants hoisted (the sync phase's
        # per-member cost)
        assignments, replies = cont.assignments, out.replies
        group_id, protocol_type, protocol_name = (
            group.group_id,
            group.protocol_type,
            group.protocol_name,
        )
        schedule_session = self.queue.schedule_session
        for member in group.members.values():
            member.assignment = assignment = assignments.get(member.member_id, b"")
            if member.awaiting_sync is not None:
                replies.append(
                    (
                        member.awaiting_sync,
                        SyncGroupResponse(NO_ERROR, protocol_type, protocol_name, assignment),
                    )
                )
                member.awaiting_sync = None
                # Rebalancer.reschedule_session, inline
                schedule_session(group_id, member.member_id, now + member.session_timeout_ms)
        group.transition(STABLE, now)
        self.registrations.close_if_complete(group, out)

    # ==== Heartbeat (protocol.md §7.1) ==========================================================

    def heartbeat(self, req: HeartbeatRequest, now: int) -> HeartbeatResponse:
        return _HEARTBEAT_RESPONSES[
            self.heartbeat_error(
                req.group_id, req.generation_id, req.member_id, req.group_instance_id, now
            )
        ]

    def heartbeat_error(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        now: int,
    ) -> Error:
        """The hottest path of the core (a Stable fleet's whole traffic): kept flat, with
        `Group.validate_member` and `TimerQueue.schedule_session` written out in place (each
        call was a tenth of a heartbeat's cost); tests/unit hold them to the same answers."""
        if not group_id:
            return Error.INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            return Error.UNKNOWN_MEMBER_ID
        state = group.state
        if state is DEAD:
            return Error.COORDINATOR_NOT_AVAILABLE
        if group_instance_id is not None:
            known = group.static_members.get(group_instance_id)
            if known is None:
                return Error.UNKNOWN_MEMBER_ID
            if known != member_id:
                return Error.FENCED_INSTANCE_ID
        member = group.members.get(member_id)
        if member is None:
            return Error.UNKNOWN_MEMBER_ID
        if generation_id != group.generation:
            return Error.ILLEGAL_GENERATION
        if state is EMPTY:
            return Error.UNKNOWN_MEMBER_ID
        # the session timer moves later; it holds the group's and member's own strings, not
        # the request's
        group_id = group.group_id
        deadline = now + member.session_timeout_ms
        queue = self.queue
        sessions = queue.sessions.get(group_id)
        if sessions is None:
            queue.schedule_session(group_id, member.member_id, deadline)
        else:
            sessions[member.member_id] = deadline
            bound = queue.bounds.get(group_id)
            if bound is None or deadline < bound:
                queue.schedule_session(group_id, member.member_id, deadline)
        if state is PREPARING_REBALANCE:
            return Error.REBALANCE_IN_PROGRESS
        return NO_ERROR

    # ==== LeaveGroup (protocol.md §7.3) =========================================================

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
                    NO_ERROR,
                    tuple(
                        LeaveMemberResponse(
                            m.member_id, m.group_instance_id, Error.UNKNOWN_MEMBER_ID
                        )
                        for m in req.members
                    ),
                ),
            )
            return out
        if group.is_(DEAD):
            out.reply(handle, LeaveGroupResponse(Error.COORDINATOR_NOT_AVAILABLE))
            return out
        results = []
        for leaving in req.members:
            error = self._leave_one(group, leaving.member_id, leaving.group_instance_id, now, out)
            if error is NO_ERROR:
                log.info(
                    "group %s: member %s/%s left (reason: %s)",
                    group.group_id,
                    leaving.member_id,
                    leaving.group_instance_id,
                    leaving.reason or "not provided",
                )
            results.append(LeaveMemberResponse(leaving.member_id, leaving.group_instance_id, error))
        out.reply(handle, LeaveGroupResponse(NO_ERROR, tuple(results)))
        drop_if_unused(self.groups, group)
        return out

    def _leave_one(
        self, group: Group, member_id: str, instance_id: str | None, now: int, out: Result
    ) -> Error:
        if not member_id:
            known = group.static_members.get(instance_id) if instance_id is not None else None
            if known is None:
                return Error.UNKNOWN_MEMBER_ID
            self.rebalancer.remove_member_and_update_group(group, group.members[known], now, out)
            return NO_ERROR
        if member_id in group.transient.pending_members:
            group.transient.pending_members.discard(member_id)
            self.queue.cancel(pending_key(group.group_id, member_id))
            if group.is_(PREPARING_REBALANCE):
                self.rebalancer.try_complete_join(group, now, out)
            return NO_ERROR
        error = group.validate_member(member_id, instance_id)
        if error is not NO_ERROR:
            return error
        self.rebalancer.remove_member_and_update_group(group, group.members[member_id], now, out)
        return NO_ERROR

    # ==== unloading =============================================================================

    def answer_parked(self, error: Error, out: Result) -> None:
        """Answer every parked JoinGroup and SyncGroup with `error`."""
        for group in self.groups.values():
            for member in group.members.values():
                if member.awaiting_join is not None:
                    out.reply(member.awaiting_join, join_error(error))
                    member.awaiting_join = None
                if member.awaiting_sync is not None:
                    out.reply(member.awaiting_sync, SyncGroupResponse(error))
                    member.awaiting_sync = None


def _sync_error(group: Group, req: SyncGroupRequest) -> Error:
    state = group.state
    if state is DEAD:
        return Error.COORDINATOR_NOT_AVAILABLE
    error = group.validate_member(req.member_id, req.group_instance_id)
    if error is not NO_ERROR:
        return error
    if req.generation_id != group.generation:
        return Error.ILLEGAL_GENERATION
    if req.protocol_type is not None and req.protocol_type != group.protocol_type:
        return Error.INCONSISTENT_GROUP_PROTOCOL
    if req.protocol_name is not None and req.protocol_name != group.protocol_name:
        return Error.INCONSISTENT_GROUP_PROTOCOL
    if state is EMPTY:
        return Error.UNKNOWN_MEMBER_ID
    if state is PREPARING_REBALANCE:
        return Error.REBALANCE_IN_PROGRESS
    return NO_ERROR
