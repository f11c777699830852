"""LeaveGroup (protocol.md §7.3)."""

from __future__ import annotations

from app.group.messages import Error, LeaveMember, LeaveMemberResponse
from app.group.state import GroupState
from tests.unit.context import GROUP, Context


def test_leave_with_empty_group_id_is_invalid_group_id() -> None:
    ctx = Context()
    r = ctx.leave_reply(ctx.leave("m", group_id=""))
    assert r.error is Error.INVALID_GROUP_ID
    assert r.members == ()


def test_leave_for_unknown_group_is_none_with_unknown_member_per_member() -> None:
    ctx = Context()
    r = ctx.leave_reply(ctx.leave(LeaveMember("a"), LeaveMember("", "i1")))
    assert r.error is Error.NONE
    assert r.members == (
        LeaveMemberResponse("a", None, Error.UNKNOWN_MEMBER_ID),
        LeaveMemberResponse("", "i1", Error.UNKNOWN_MEMBER_ID),
    )
    assert not ctx.has_group()


def test_leave_for_dead_group_is_coordinator_not_available() -> None:
    ctx = Context()
    ctx.commit()
    ctx.complete_writes()
    ctx.delete()
    r = ctx.leave_reply(ctx.leave("a"))
    assert r.error is Error.COORDINATOR_NOT_AVAILABLE
    assert r.members == ()


def test_v0_style_leave_of_follower_in_stable_rebalances() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    r = ctx.leave_reply(ctx.leave(sg.followers[1]))
    assert r.error is Error.NONE
    assert r.members == (LeaveMemberResponse(sg.followers[1], None, Error.NONE),)
    group = ctx.group()
    assert sg.followers[1] not in group.members
    assert ("hb", GROUP, sg.followers[1]) not in ctx.coordinator.timers
    assert group.state is GroupState.PREPARING_REBALANCE


def test_leave_of_unknown_member_is_unknown_member_id_and_changes_nothing() -> None:
    ctx = Context()
    ctx.stable_group(2)
    r = ctx.leave_reply(ctx.leave("ghost"))
    assert r.error is Error.NONE  # core answers per member; v0-v2 fold it at the edge
    assert r.members[0].error is Error.UNKNOWN_MEMBER_ID
    assert ctx.state() is GroupState.STABLE


def test_last_member_leaving_completes_immediately_into_empty() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.generation == sg.generation + 1
    assert ctx.last_group_record() is not None


def test_leave_answers_the_leaving_members_parked_join_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    h = ctx.join(member_id=sg.followers[0], protocols=[("range", b"changed")])
    ctx.leave(sg.followers[0])
    r = ctx.join_reply(h)
    assert (r.error, r.member_id) == (Error.UNKNOWN_MEMBER_ID, "")


def test_leave_in_preparing_rebalance_completes_the_join_when_rest_are_parked() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    h0 = ctx.join(member_id=sg.leader)
    h1 = ctx.join(member_id=sg.followers[0])
    assert not ctx.answered(h0)
    ctx.leave(sg.followers[1])
    assert ctx.join_reply(h0).error is Error.NONE
    assert ctx.join_reply(h1).generation_id == sg.generation + 1


def test_leave_in_completing_rebalance_rebalances_and_answers_parked_syncs() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic()
    b, hb = ctx.join_dynamic()
    c, hc = ctx.join_dynamic()
    ctx.complete_initial_rebalance([ha, hb, hc])
    hs = ctx.sync(b, 1)
    ctx.leave(c)
    assert ctx.sync_reply(hs).error is Error.REBALANCE_IN_PROGRESS
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert a in ctx.group().members


def test_leave_of_a_pending_member_id_drops_it() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    pending = ctx.join_reply(ctx.join()).member_id
    r = ctx.leave_reply(ctx.leave(pending))
    assert r.members[0].error is Error.NONE
    assert ctx.group().pending_members == set()
    assert ("pending", GROUP, pending) not in ctx.coordinator.timers
    assert ctx.state() is GroupState.STABLE
    assert sg.leader in ctx.group().members


def test_leave_of_pending_member_in_preparing_rebalance_completes_join() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    pending = ctx.join_reply(ctx.join()).member_id
    h = ctx.join(member_id=sg.leader)
    assert not ctx.answered(h)
    ctx.leave(pending)
    assert ctx.join_reply(h).error is Error.NONE


def test_batch_leave_by_instance_id_with_empty_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1", "i2"])
    r = ctx.leave_reply(ctx.leave(LeaveMember("", "i1", reason="admin"), LeaveMember("", "i2")))
    assert r.error is Error.NONE
    assert r.members == (
        LeaveMemberResponse("", "i1", Error.NONE),
        LeaveMemberResponse("", "i2", Error.NONE),
    )
    group = ctx.group()
    assert list(group.members) == [sg.member_ids[0]]
    assert group.static_members == {"i0": sg.member_ids[0]}
    assert group.state is GroupState.PREPARING_REBALANCE


def test_batch_leave_mixes_unknown_pending_fenced_and_valid_members() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1", None])
    pending = ctx.join_reply(ctx.join()).member_id
    dyn = sg.member_ids[2]
    r = ctx.leave_reply(
        ctx.leave(
            LeaveMember("", "nobody"),  # unknown instance
            LeaveMember(""),  # neither id
            LeaveMember(pending),  # pending id
            LeaveMember(sg.member_ids[0], "i1"),  # instance mapped to another id: fenced
            LeaveMember("ghost"),  # unknown member
            LeaveMember("ghost", "i0"),  # fenced (instance known, id differs)
            LeaveMember(dyn),  # dynamic member by id
            LeaveMember(sg.member_ids[1], "i1"),  # static member by id + instance
        )
    )
    assert [m.error for m in r.members] == [
        Error.UNKNOWN_MEMBER_ID,
        Error.UNKNOWN_MEMBER_ID,
        Error.NONE,
        Error.FENCED_INSTANCE_ID,
        Error.UNKNOWN_MEMBER_ID,
        Error.FENCED_INSTANCE_ID,
        Error.NONE,
        Error.NONE,
    ]
    assert list(ctx.group().members) == [sg.member_ids[0]]


def test_batch_leave_of_every_member_ends_empty_with_one_generation_bump() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    ctx.leave(LeaveMember("", "i0"), LeaveMember("", "i1"))
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.generation == sg.generation + 1
    assert group.static_members == {}


def test_leave_of_the_leader_during_rebalance_moves_leadership_to_parked_member() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    h = ctx.join(member_id=sg.followers[1], protocols=[("range", b"x")])
    ctx.leave(sg.leader)
    h2 = ctx.join(member_id=sg.followers[0])
    r = ctx.join_reply(h)
    assert r.leader == sg.followers[0]  # oldest parked member
    assert ctx.join_reply(h2).members != ()


def test_pending_member_leaving_empty_group_forgets_the_group() -> None:
    ctx = Context()
    pending = ctx.join_reply(ctx.join()).member_id
    ctx.leave(pending)
    assert not ctx.has_group()
