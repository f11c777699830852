"""The rebalance state machine (protocol.md §5): starting a rebalance, completing the join
phase into a new generation, removing members, and the timers that drive them. The request
handlers (members.py) and the registrations call into it; it calls into neither.
"""

from __future__ import annotations

import logging

from app.group.config import CoreConfig
from app.group.messages import (
    NO_ERROR,
    AdminOutcome,
    AdminResult,
    Error,
    JoinGroupMember,
    JoinGroupResponse,
    SyncGroupResponse,
)
from app.group.replay import drop_if_unused
from app.group.results import LogOnly, Result, Write
from app.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    Group,
    JoinPhase,
    Member,
)
from app.group.timers import TimerKey, TimerQueue, heartbeat_key, join_key, sync_key

log = logging.getLogger(__name__)


def join_error(error: Error, member_id: str = "") -> JoinGroupResponse:
    # positional: a frozen dataclass's keyword call costs twice as much, once per request
    return JoinGroupResponse(error, -1, None, None, "", False, member_id)


def generation_response(
    group: Group,
    member_id: str,
    leader: str | None,
    members: tuple[JoinGroupMember, ...] = (),
    error: Error = NO_ERROR,
    skip_assignment: bool = False,
) -> JoinGroupResponse:
    """A JoinGroup answer that names the group's current generation."""
    return JoinGroupResponse(  # positional: see join_error
        error,
        group.generation,
        group.protocol_type,
        group.protocol_name,
        leader or "",
        skip_assignment,
        member_id,
        members,
    )


def join_response(
    group: Group, member: Member, members: tuple[JoinGroupMember, ...]
) -> JoinGroupResponse:
    """The current generation as `member` sees it; only the leader gets `members`."""
    if not group.is_leader(member.member_id):
        members = ()
    return generation_response(group, member.member_id, group.leader_id, members)


def member_list(group: Group) -> tuple[JoinGroupMember, ...]:
    # Static members first, then dynamic ones, each in join order. Kafka leaves the order
    # unspecified (hash-map iteration), but kafka-python 3.x's range assignor groups the
    # list with itertools.groupby on "is static" and silently drops every member of an
    # interleaved run; a contiguous order gives every client a correct assignment.
    proto = group.protocol_name
    ordered = sorted(group.members.values(), key=lambda m: m.group_instance_id is None)
    return tuple(
        JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(proto)) for m in ordered
    )


class Rebalancer:
    def __init__(self, config: CoreConfig, groups: dict[str, Group], queue: TimerQueue) -> None:
        self.config = config
        self.groups = groups
        self.queue = queue
        self.rebalances: dict[str, int] = {}  # reason -> rebalances started

    def reschedule_session(self, group: Group, member: Member, now: int, timeout: int) -> None:
        self.queue.schedule_session(group.group_id, member.member_id, now + timeout)

    # ==== the join phase ========================================================================

    def prepare_rebalance(self, group: Group, now: int, out: Result, reason: str) -> None:
        # why and when, for the log (GroupMetadataValue v1) and the rebalance counters
        group.rebalance_reason = reason
        group.rebalance_started_ms = now
        # operator reasons are free text: count them under one label, log and record the text
        key = "admin" if reason.startswith("admin: ") else reason
        self.rebalances[key] = self.rebalances.get(key, 0) + 1
        if group.is_(COMPLETING_REBALANCE):
            self.reset_and_propagate_assignment_error(group, Error.REBALANCE_IN_PROGRESS, out)
        self.queue.cancel(sync_key(group.group_id, group.generation))
        t = group.transient
        t.pending_sync.clear()
        delay = self.config.initial_rebalance_delay_ms
        if group.is_(EMPTY):
            t.join_phase = JoinPhase.INITIAL
            t.initial_window_ms = delay
            t.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            t.new_member_added = False
            self.queue.schedule(join_key(group.group_id), now + delay)
        else:
            t.join_phase = JoinPhase.REBALANCE
            self.queue.schedule(join_key(group.group_id), now + group.rebalance_timeout_ms())
        group.transition(PREPARING_REBALANCE, now)
        self.try_complete_join(group, now, out)

    def try_complete_join(self, group: Group, now: int, out: Result) -> None:
        # the initial phase never completes early (protocol.md §5.3); a registered scale-up holds it
        if (
            group.transient.join_phase is JoinPhase.REBALANCE
            and group.has_all_members_joined()
            and not group.expansion_holds_join(now)
        ):
            self.queue.cancel(join_key(group.group_id))
            self._complete_join(group, now, out)

    def on_join_timer(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        if not group.is_(PREPARING_REBALANCE):
            return
        t = group.transient
        if t.join_phase is JoinPhase.INITIAL and t.new_member_added and t.initial_remaining_ms != 0:
            t.new_member_added = False
            window = min(self.config.initial_rebalance_delay_ms, t.initial_remaining_ms)
            t.initial_remaining_ms = max(t.initial_remaining_ms - t.initial_window_ms, 0)
            t.initial_window_ms = window
            self.queue.schedule(join_key(group.group_id), now + window)
            return
        reg = group.registration
        if reg is not None and reg.holds_join(now):
            # the rest of a registered scale-up is on its way: complete when it is in or late
            self.queue.schedule(join_key(group.group_id), reg.expansion_started_ms + reg.timeout_ms)
            return
        self._complete_join(group, now, out)

    def _complete_join(self, group: Group, now: int, out: Result) -> None:
        group.transient.join_phase = None
        for member in [m for m in group.members.values() if m.awaiting_join is None]:
            if member.group_instance_id is None:
                self.remove_member(group, member, out, answer_join=False)
        if group.is_(DEAD):
            return
        if not self._elect_joined_leader(group) and group.members:
            # only static members that have not rejoined: wait another rebalance timeout
            group.transient.join_phase = JoinPhase.REBALANCE
            self.queue.schedule(join_key(group.group_id), now + group.rebalance_timeout_ms())
            return
        group.generation += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.transition(COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.transition(EMPTY, now)
        pending_sync = group.transient.pending_sync
        pending_sync.clear()
        if group.is_(EMPTY):
            out.writes.append(Write([group.metadata_record()], LogOnly(f"{group.group_id} empty")))
            return
        members = member_list(group)
        # join_response for every member, its invariants hoisted out of the loop (N replies
        # in one call: the join phase's per-member cost)
        group_id, leader_id = group.group_id, group.leader_id
        generation, protocol_type, protocol_name = (
            group.generation,
            group.protocol_type,
            group.protocol_name,
        )
        replies, schedule_session = out.replies, self.queue.schedule_session
        # the leader's reply first: it goes out first, and the leader assigns while the others'
        # replies are made (each connection still answers in its own request order)
        first = len(replies)
        for member in group.members.values():
            member_id = member.member_id
            if member.awaiting_join is not None:
                answer = (
                    member.awaiting_join,
                    JoinGroupResponse(
                        NO_ERROR,
                        generation,
                        protocol_type,
                        protocol_name,
                        leader_id or "",
                        False,
                        member_id,
                        members if member_id == leader_id else (),
                    ),
                )
                if member_id == leader_id:
                    replies.insert(first, answer)
                else:
                    replies.append(answer)
                group.set_awaiting_join(member, None)
            schedule_session(group_id, member_id, now + member.session_timeout_ms)
            member.is_new = False
            pending_sync.add(member_id)
        self.queue.schedule(
            sync_key(group.group_id, group.generation), now + group.rebalance_timeout_ms()
        )

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        leader = group.members.get(group.leader_id or "")
        if leader is not None and leader.awaiting_join is not None:
            return True
        for m in group.members.values():  # deterministic: oldest parked member
            if m.awaiting_join is not None:
                group.leader_id = m.member_id
                return True
        return False

    def force_rebalance(self, handle: int, group_id: str, reason: str, now: int) -> Result:
        """Admin-forced rebalance: members learn it from their next heartbeat and rejoin."""
        out = Result()
        group = self.groups.get(group_id)
        if group is None or group.is_(DEAD):
            out.reply(
                handle,
                AdminResult(Error.GROUP_ID_NOT_FOUND, "no such group", AdminOutcome.NO_SUCH_GROUP),
            )
        elif group.is_(EMPTY):
            out.reply(
                handle,
                AdminResult(
                    Error.NON_EMPTY_GROUP, "group has no members", AdminOutcome.GROUP_EMPTY
                ),
            )
        elif group.is_(PREPARING_REBALANCE):
            out.reply(handle, AdminResult(NO_ERROR, "already rebalancing"))
        else:
            log.info("group %s: rebalance forced by admin (%s)", group_id, reason)
            self.prepare_rebalance(group, now, out, f"admin: {reason}")
            out.reply(handle, AdminResult(NO_ERROR, "rebalance started"))
        return out

    # ==== the sync phase ========================================================================

    def mark_synced(self, group: Group, member_id: str) -> None:
        pending_sync = group.transient.pending_sync
        pending_sync.discard(member_id)
        if not pending_sync:
            self.queue.cancel(sync_key(group.group_id, group.generation))

    def on_pending_sync_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        if int(key[2]) != group.generation or group.state not in (
            COMPLETING_REBALANCE,
            STABLE,
        ):
            return
        if not group.transient.pending_sync:
            return
        for member_id in list(group.transient.pending_sync):
            member = group.members.get(member_id)
            if member is not None:
                self.remove_member(group, member, out)
        self.prepare_rebalance(group, now, out, "members did not sync in time")

    @staticmethod
    def reset_and_propagate_assignment_error(group: Group, error: Error, out: Result) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync is not None:
                out.reply(member.awaiting_sync, SyncGroupResponse(error))
                member.awaiting_sync = None

    # ==== members leaving =======================================================================

    def remove_member(
        self, group: Group, member: Member, out: Result, answer_join: bool = True
    ) -> None:
        """Drop a member, answering whatever it has parked (protocol.md §7.4)."""
        self.queue.cancel(heartbeat_key(group.group_id, member.member_id))
        if member.awaiting_join is not None and answer_join:
            out.reply(member.awaiting_join, join_error(Error.UNKNOWN_MEMBER_ID))
        if member.awaiting_sync is not None:
            out.reply(member.awaiting_sync, SyncGroupResponse(Error.UNKNOWN_MEMBER_ID))
            member.awaiting_sync = None
        group.remove(member.member_id)

    def remove_member_and_update_group(
        self, group: Group, member: Member, now: int, out: Result
    ) -> None:
        self.remove_member(group, member, out)
        if group.state in (STABLE, COMPLETING_REBALANCE):
            self.prepare_rebalance(group, now, out, "member removed")
        elif group.is_(PREPARING_REBALANCE):
            self.try_complete_join(group, now, out)

    def on_session_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
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
        self.remove_member_and_update_group(group, member, now, out)

    def on_pending_member_expired(self, group: Group, key: TimerKey, now: int, out: Result) -> None:
        member_id = key[2]
        if member_id in group.transient.pending_members:
            group.transient.pending_members.discard(member_id)
            if group.is_(PREPARING_REBALANCE):
                self.try_complete_join(group, now, out)
            drop_if_unused(self.groups, group)
