"""Heartbeat and session expiry (protocol.md §7.1, §7.2)."""

from __future__ import annotations

from app.group.messages import Error
from app.group.state import GroupState
from tests.unit.context import GROUP, REBALANCE_MS, SESSION_MS, Context

# ---- protocol.md §7.1 heartbeat in every state -------------------------------------------------


def test_heartbeat_with_empty_group_id_is_invalid_group_id() -> None:
    assert Context().heartbeat("m", 1, group_id="") is Error.INVALID_GROUP_ID


def test_heartbeat_for_unknown_group_is_unknown_member_id() -> None:
    ctx = Context()
    assert ctx.heartbeat("m", 1) is Error.UNKNOWN_MEMBER_ID
    assert not ctx.has_group()


def test_heartbeat_for_dead_group_is_coordinator_not_available() -> None:
    ctx = Context()
    ctx.commit()
    ctx.complete_writes()
    ctx.delete()
    assert ctx.heartbeat("m", 0) is Error.COORDINATOR_NOT_AVAILABLE


def test_heartbeat_in_empty_group_is_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    assert ctx.heartbeat(sg.leader, sg.generation + 1) is Error.UNKNOWN_MEMBER_ID


def test_heartbeat_in_stable_is_none_and_refreshes_session() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.advance(5_000)
    assert ctx.heartbeat(sg.leader, sg.generation) is Error.NONE
    assert ctx.coordinator.timers[("hb", GROUP, sg.leader)] == ctx.now + SESSION_MS


def test_heartbeat_with_unknown_member_is_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    assert ctx.heartbeat("ghost", sg.generation) is Error.UNKNOWN_MEMBER_ID


def test_heartbeat_with_fenced_or_unknown_instance() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    assert ctx.heartbeat(sg.member_ids[0], sg.generation, instance_id="i1") is (
        Error.FENCED_INSTANCE_ID
    )
    assert ctx.heartbeat(sg.member_ids[0], sg.generation, instance_id="zz") is (
        Error.UNKNOWN_MEMBER_ID
    )
    assert ctx.heartbeat(sg.member_ids[0], sg.generation, instance_id="i0") is Error.NONE


def test_identity_is_checked_before_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    assert ctx.heartbeat(sg.member_ids[0], 99, instance_id="i1") is Error.FENCED_INSTANCE_ID
    assert ctx.heartbeat("ghost", 99) is Error.UNKNOWN_MEMBER_ID


def test_heartbeat_with_wrong_generation_is_illegal_generation_and_does_not_refresh() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    deadline = ctx.coordinator.timers[("hb", GROUP, sg.leader)]
    ctx.advance(5_000)
    assert ctx.heartbeat(sg.leader, sg.generation + 1) is Error.ILLEGAL_GENERATION
    assert ctx.heartbeat(sg.leader, sg.generation - 1) is Error.ILLEGAL_GENERATION
    assert ctx.coordinator.timers[("hb", GROUP, sg.leader)] == deadline
    ctx.advance_to(deadline)
    assert sg.leader not in ctx.group().members


def test_heartbeat_in_preparing_rebalance_is_rebalance_in_progress_and_refreshes() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader)
    ctx.advance(5_000)
    assert ctx.heartbeat(sg.followers[0], sg.generation) is Error.REBALANCE_IN_PROGRESS
    assert ctx.coordinator.timers[("hb", GROUP, sg.followers[0])] == ctx.now + SESSION_MS


def test_heartbeat_in_completing_rebalance_is_none_and_refreshes() -> None:
    ctx = Context()
    _a, ha = ctx.join_dynamic()
    b, hb = ctx.join_dynamic()
    ctx.complete_initial_rebalance([ha, hb])
    gen = ctx.join_reply(ha).generation_id
    ctx.advance(2_000)
    assert ctx.heartbeat(b, gen) is Error.NONE
    assert ctx.coordinator.timers[("hb", GROUP, b)] == ctx.now + SESSION_MS
    assert ctx.heartbeat(b, gen - 1) is Error.ILLEGAL_GENERATION


def test_member_left_out_of_a_rebalance_learns_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(2, session_ms=2 * REBALANCE_MS)
    ctx.join(member_id=sg.leader)
    ctx.advance(REBALANCE_MS)
    assert ctx.heartbeat(sg.followers[0], sg.generation) is Error.UNKNOWN_MEMBER_ID


# ---- protocol.md §7.2 session expiry -----------------------------------------------------------


def test_heartbeating_member_stays_and_silent_member_expires_in_stable() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    for _ in range(3):
        ctx.advance(SESSION_MS // 2)
        ctx.heartbeat(sg.leader, sg.generation)
        ctx.heartbeat(sg.followers[0], sg.generation)
    group = ctx.group()
    assert sg.followers[1] not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE


def test_session_expiry_exactly_at_the_deadline() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    deadline = ctx.coordinator.timers[("hb", GROUP, sg.followers[0])]
    ctx.advance_to(deadline - 1)
    assert sg.followers[0] in ctx.group().members
    ctx.advance(1)
    assert sg.followers[0] not in ctx.group().members


def test_last_member_expiring_makes_group_empty_with_new_generation_and_record() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.advance(SESSION_MS)
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.generation == sg.generation + 1
    rec = ctx.last_group_record()
    assert rec is not None and rec.members == () and rec.generation == sg.generation + 1


def test_member_parked_in_join_survives_session_expiry() -> None:
    ctx = Context()
    sg = ctx.stable_group(2, session_ms=SESSION_MS)
    h = ctx.join(member_id=sg.leader)  # parked for up to the rebalance timeout (30 s)
    for _ in range(5):
        ctx.advance(SESSION_MS // 2)
        ctx.heartbeat(sg.followers[0], sg.generation)
    assert sg.leader in ctx.group().members
    assert not ctx.answered(h)
    ctx.join(member_id=sg.followers[0])
    assert ctx.join_reply(h).error is Error.NONE


def test_member_parked_in_sync_survives_session_expiry() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic(rebalance_ms=60_000)
    b, hb = ctx.join_dynamic(rebalance_ms=60_000)
    ctx.complete_initial_rebalance([ha, hb])
    gen = ctx.join_reply(ha).generation_id
    h = ctx.sync(b, gen)
    for _ in range(4):
        ctx.advance(SESSION_MS // 2)
        ctx.heartbeat(a, gen)
    assert b in ctx.group().members
    ctx.sync(a, gen, assignments=[(b, b"B")])
    ctx.complete_writes()
    assert ctx.sync_reply(h).assignment == b"B"


def test_expired_member_not_parked_during_rebalance_is_removed_and_join_completes() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.advance(SESSION_MS // 2)
    ctx.heartbeat(sg.leader, sg.generation)
    h = ctx.join(member_id=sg.leader)  # follower stays silent
    ctx.advance(SESSION_MS // 2)  # follower's session ends
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert [m.member_id for m in r.members] == [sg.leader]


def test_session_timers_are_reset_at_join_completion() -> None:
    ctx = Context()
    mid, h = ctx.join_dynamic(session_ms=7_000)
    assert ctx.coordinator.timers[("hb", GROUP, mid)] == 300_000  # new-member join timeout
    ctx.complete_initial_rebalance([h])
    assert ctx.coordinator.timers[("hb", GROUP, mid)] == ctx.now + 7_000


def test_commit_in_stable_refreshes_session() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.advance(9_000)
    ctx.commit(member_id=sg.leader, generation=sg.generation)
    assert ctx.coordinator.timers[("hb", GROUP, sg.leader)] == ctx.now + SESSION_MS
    ctx.complete_writes()
    ctx.advance(9_000)
    assert sg.leader in ctx.group().members


def test_commit_in_preparing_rebalance_refreshes_session() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader)
    ctx.advance(9_000)
    h = ctx.commit(member_id=sg.followers[0], generation=sg.generation)
    ctx.complete_writes()
    assert set(ctx.commit_errors(h).values()) == {Error.NONE}
    assert ctx.coordinator.timers[("hb", GROUP, sg.followers[0])] == ctx.now + SESSION_MS


def test_expired_parked_new_member_gets_unknown_member_id_with_empty_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, session_ms=400_000)
    newcomer, h = ctx.join_dynamic(rebalance_ms=600_000, session_ms=400_000)
    ctx.advance(300_000)
    r = ctx.join_reply(h)
    assert (r.error, r.member_id) == (Error.UNKNOWN_MEMBER_ID, "")
    assert newcomer not in ctx.group().members
    assert ctx.group().members.keys() == {sg.leader}


def test_join_completion_resets_session_of_static_members_that_did_not_rejoin() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"], session_ms=45_000)
    h = ctx.join(member_id=sg.leader, instance_id="i0", session_ms=45_000)
    ctx.advance(REBALANCE_MS)
    assert ctx.join_reply(h).error is Error.NONE
    assert ctx.coordinator.timers[("hb", GROUP, sg.member_ids[1])] == ctx.now + 45_000


def test_heartbeats_do_not_grow_the_timer_heap_and_sessions_still_expire() -> None:
    # one heap entry per timer, not one per heartbeat: memory per member stays flat
    ctx = Context()
    sg = ctx.stable_group(3)
    base = len(ctx.coordinator.heap)
    for _ in range(200):
        ctx.advance(SESSION_MS // 10)
        for m in sg.member_ids:
            assert ctx.heartbeat(m, sg.generation) is Error.NONE
    assert len(ctx.coordinator.heap) <= base
    # the member that stops heartbeating still expires one session timeout after its last one
    quiet = sg.member_ids[2]
    for _ in range(9):
        ctx.advance(SESSION_MS // 10)
        for m in sg.member_ids[:2]:
            ctx.heartbeat(m, sg.generation)
    ctx.advance(SESSION_MS - 9 * (SESSION_MS // 10) - 1)
    assert quiet in ctx.group().members
    ctx.advance(1)
    assert quiet not in ctx.group().members


def test_heartbeat_checks_identity_exactly_as_validate_member() -> None:
    """heartbeat_error writes Group.validate_member out in place (the hot path): every pairing
    of a member id and an instance id, known, foreign or unknown, gets the same answer."""
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    dynamic = ctx.stable_group(1, group_id="dyn")
    group = ctx.coordinator.groups[GROUP]
    for member_id in [*sg.member_ids, dynamic.leader, "ghost", ""]:
        for instance_id in ["i0", "i1", "zz", None]:
            expected = group.validate_member(member_id, instance_id)
            got = ctx.heartbeat(member_id, sg.generation, instance_id=instance_id)
            assert got is expected, (member_id, instance_id)
