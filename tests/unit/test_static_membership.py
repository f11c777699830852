"""Static membership (protocol.md §4.5, KIP-345) and KIP-814 SkipAssignment."""

from __future__ import annotations

import pytest

from app.group.messages import Error, JoinGroupMember, LeaveMember
from app.group.results import AppendFailure
from app.group.state import GroupState
from tests.unit.context import GROUP, REBALANCE_MS, Context, StableGroup, subscription


def _static_stable(ctx: Context, n: int = 3) -> StableGroup:
    return ctx.stable_group([f"i{k}" for k in range(n)], session_ms=2 * REBALANCE_MS)


# ---- joining -----------------------------------------------------------------------------------


def test_static_member_join_never_gets_member_id_required() -> None:
    ctx = Context()
    h = ctx.join(instance_id="inst", require_known_member_id=True)
    assert not ctx.answered(h)
    group = ctx.group()
    assert group.static_members == {"inst": "inst-1"}  # id prefixed by the instance id
    assert group.pending_members == set()


def test_static_member_unknown_instance_with_member_id_is_unknown_member_id() -> None:
    ctx = Context()
    sg = _static_stable(ctx, 2)
    r = ctx.join_reply(ctx.join(member_id=sg.leader, instance_id="nobody"))
    assert r.error is Error.UNKNOWN_MEMBER_ID


def test_known_instance_with_other_member_id_is_fenced() -> None:
    ctx = Context()
    sg = _static_stable(ctx, 2)
    r = ctx.join_reply(ctx.join(member_id=sg.member_ids[1], instance_id="i0"))
    assert r.error is Error.FENCED_INSTANCE_ID
    assert r.member_id == sg.member_ids[1]


def test_static_member_rejoining_with_its_id_and_no_instance_is_validated_by_member_id() -> None:
    ctx = Context()
    sg = _static_stable(ctx, 2)
    r = ctx.join_reply(ctx.join(member_id=sg.member_ids[1]))
    assert r.error is Error.NONE
    assert r.member_id == sg.member_ids[1]


def test_pending_member_id_sent_with_an_instance_id_is_an_internal_error() -> None:
    ctx = Context()
    pending = ctx.join_reply(ctx.join()).member_id
    r = ctx.join_reply(ctx.join(member_id=pending, instance_id="inst"))
    assert r.error is Error.UNKNOWN_SERVER_ERROR
    assert "inst" not in ctx.group().static_members


# ---- replacement in Stable (no rebalance) ------------------------------------------------------


def test_static_follower_rejoin_in_stable_replaces_id_without_rebalance() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    old = sg.member_ids[1]
    n = len(ctx.records)
    new = ctx.next_member_id("i1")
    h = ctx.join(instance_id="i1", skip_assignment=True)
    assert not ctx.answered(h)  # answered only after the write
    assert ctx.state() is GroupState.STABLE
    rec = ctx.last_group_record()
    assert len(ctx.records) == n + 1
    assert rec is not None
    assert rec.generation == sg.generation
    assert [m.member_id for m in rec.members] == [sg.member_ids[0], new, sg.member_ids[2]]
    assert [m.assignment for m in rec.members] == [b"assign-0", b"assign-1", b"assign-2"]
    assert rec.leader == sg.leader
    ctx.complete_writes()
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert r.member_id == new
    assert r.generation_id == sg.generation
    assert r.leader == sg.leader
    assert not r.skip_assignment
    assert r.members == ()
    group = ctx.group()
    assert group.static_members["i1"] == new
    assert old not in group.members
    assert group.members[new].assignment == b"assign-1"
    assert ctx.state() is GroupState.STABLE


def test_static_replacement_preserves_member_order_and_leader() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    new = ctx.next_member_id("i1")
    ctx.join(instance_id="i1")
    ctx.complete_writes()
    assert list(ctx.group().members) == [sg.member_ids[0], new, sg.member_ids[2]]
    assert ctx.group().leader_id == sg.leader


def test_static_leader_rejoin_v9_gets_skip_assignment() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    new = ctx.next_member_id("i0")
    h = ctx.join(instance_id="i0", skip_assignment=True)
    ctx.complete_writes()
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert r.member_id == new
    assert r.leader == new
    assert r.skip_assignment
    assert r.generation_id == sg.generation
    assert r.protocol_name == "range"
    assert r.members == (
        JoinGroupMember(new, "i0", subscription("t")),
        JoinGroupMember(sg.member_ids[1], "i1", subscription("t")),
        JoinGroupMember(sg.member_ids[2], "i2", subscription("t")),
    )
    assert ctx.group().leader_id == new


def test_static_leader_rejoin_before_v9_sees_old_leader_id_and_no_members() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    new = ctx.next_member_id("i0")
    h = ctx.join(instance_id="i0", skip_assignment=False)
    ctx.complete_writes()
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert r.member_id == new
    assert r.leader == sg.leader  # the obsolete id: the client believes it is a follower
    assert r.leader != new
    assert r.members == ()
    assert not r.skip_assignment
    assert ctx.group().leader_id == new


def test_returning_static_leader_sync_in_stable_gets_existing_assignment() -> None:
    ctx = Context()
    _static_stable(ctx)
    new = ctx.next_member_id("i0")
    h = ctx.join(instance_id="i0", skip_assignment=True)
    ctx.complete_writes()
    gen = ctx.join_reply(h).generation_id
    hs = ctx.sync(new, gen, instance_id="i0", assignments=[(new, b"ignored")])
    r = ctx.sync_reply(hs)
    assert r.error is Error.NONE
    assert r.assignment == b"assign-0"
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    assert ctx.pending_is_log_only()  # no assignment write in Stable
    assert ctx.group().members[new].assignment == b"assign-0"


def test_static_replacement_with_changed_subscription_alone_does_not_rebalance() -> None:
    ctx = Context()
    _static_stable(ctx)
    h = ctx.join(instance_id="i1", protocols=[("range", subscription("t", "other"))])
    ctx.complete_writes()
    assert ctx.join_reply(h).error is Error.NONE
    assert ctx.state() is GroupState.STABLE


def test_static_replacement_changing_selected_protocol_triggers_rebalance() -> None:
    ctx = Context()
    both = [("range", b""), ("roundrobin", b"")]
    sg = ctx.stable_group(["i0", "i1"], protocols=[("range", b""), ("roundrobin", b"")])
    assert ctx.group().protocol_name == "range"
    n = len(ctx.records)
    # i1 now prefers roundrobin: 1 vote each, tie -> oldest member (i0) prefers range: no change
    h = ctx.join(instance_id="i1", protocols=[("roundrobin", b""), ("range", b"")])
    assert len(ctx.records) == n + 1
    ctx.complete_writes()
    assert ctx.join_reply(h).error is Error.NONE
    assert ctx.state() is GroupState.STABLE
    # i1 drops range: only roundrobin is common -> selected protocol changes -> rebalance
    new_i1 = ctx.next_member_id("i1")
    h2 = ctx.join(instance_id="i1", protocols=[("roundrobin", b"")])
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert len(ctx.records) == n + 1
    assert not ctx.answered(h2)
    h0 = ctx.join(member_id=sg.leader, instance_id="i0", protocols=both)
    r = ctx.join_reply(h2)
    assert r.protocol_name == "roundrobin"
    assert r.member_id == new_i1
    assert r.generation_id == sg.generation + 1
    assert ctx.join_reply(h0).error is Error.NONE


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (AppendFailure.NOT_OWNER, Error.NOT_COORDINATOR),
        (AppendFailure.STORAGE, Error.NOT_COORDINATOR),
        (AppendFailure.TIMEOUT, Error.COORDINATOR_NOT_AVAILABLE),
        (AppendFailure.TOO_LARGE, Error.UNKNOWN_SERVER_ERROR),
    ],
)
def test_static_replacement_write_failure_reverts_and_maps_error(
    failure: AppendFailure, error: Error
) -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    old = sg.member_ids[0]
    new = ctx.next_member_id("i0")
    h = ctx.join(
        instance_id="i0",
        session_ms=7_000,
        rebalance_ms=9_000,
        protocols=[("range", b"new-meta")],
        skip_assignment=True,
    )
    ctx.fail_writes(failure)
    r = ctx.join_reply(h)
    assert r.error is error
    assert r.member_id == ""
    assert r.generation_id == sg.generation
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    assert r.leader == old  # leader before the replacement
    assert not r.skip_assignment
    group = ctx.group()
    assert group.static_members["i0"] == old
    assert new not in group.members
    member = group.members[old]
    assert member.protocols == (("range", subscription("t")),)
    assert member.session_timeout_ms == 2 * REBALANCE_MS
    assert member.rebalance_timeout_ms == REBALANCE_MS
    assert group.leader_id == old
    assert list(group.members) == sg.member_ids
    assert member.awaiting_join is None
    assert group.awaiting_join_count == 0
    # the old id stays valid, the new one is unknown
    assert ctx.heartbeat(old, sg.generation, instance_id="i0") is Error.NONE
    assert ctx.heartbeat(new, sg.generation) is Error.UNKNOWN_MEMBER_ID
    assert ("hb", GROUP, old) in ctx.coordinator.timers
    assert ("hb", GROUP, new) not in ctx.coordinator.timers
    assert ctx.state() is GroupState.STABLE


def test_old_static_id_is_fenced_after_replacement() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    old = sg.member_ids[1]
    ctx.join(instance_id="i1")
    ctx.complete_writes()
    gen = sg.generation
    assert ctx.heartbeat(old, gen, instance_id="i1") is Error.FENCED_INSTANCE_ID
    assert ctx.sync_reply(ctx.sync(old, gen, instance_id="i1")).error is Error.FENCED_INSTANCE_ID
    commit = ctx.commit(member_id=old, generation=gen, instance_id="i1")
    assert set(ctx.commit_errors(commit).values()) == {Error.FENCED_INSTANCE_ID}
    join = ctx.join_reply(ctx.join(member_id=old, instance_id="i1"))
    assert join.error is Error.FENCED_INSTANCE_ID
    leave = ctx.leave_reply(ctx.leave(LeaveMember(old, "i1")))
    assert leave.members[0].error is Error.FENCED_INSTANCE_ID
    # without the instance id the old id is simply unknown
    assert ctx.heartbeat(old, gen) is Error.UNKNOWN_MEMBER_ID
    assert ctx.state() is GroupState.STABLE


def test_static_replacement_reschedules_session_of_new_id() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    ctx.advance(1000)
    new = ctx.next_member_id("i2")
    ctx.join(instance_id="i2", session_ms=20_000)
    assert ("hb", GROUP, sg.member_ids[2]) not in ctx.coordinator.timers
    assert ctx.coordinator.timers[("hb", GROUP, new)] == ctx.now + 20_000


def test_second_replacement_before_first_write_completes_fences_the_first() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    first = ctx.next_member_id("i1")
    h1 = ctx.join(instance_id="i1")
    second = ctx.next_member_id("i1")
    h2 = ctx.join(instance_id="i1")
    r1 = ctx.join_reply(h1)
    assert r1.error is Error.FENCED_INSTANCE_ID
    assert r1.member_id == first
    ctx.complete_writes()  # both writes succeed; the first completion must not answer again
    r2 = ctx.join_reply(h2)
    assert r2.error is Error.NONE
    assert r2.member_id == second
    assert ctx.group().static_members["i1"] == second
    assert list(ctx.group().members) == [sg.member_ids[0], second, sg.member_ids[2]]


def test_first_replacement_write_failing_after_second_replacement_does_not_revert() -> None:
    ctx = Context()
    _static_stable(ctx)
    h1 = ctx.join(instance_id="i1")
    second = ctx.next_member_id("i1")
    h2 = ctx.join(instance_id="i1")
    assert ctx.join_reply(h1).error is Error.FENCED_INSTANCE_ID
    ctx.fail_writes(count=1)
    assert ctx.group().static_members["i1"] == second
    ctx.complete_writes()
    assert ctx.join_reply(h2).member_id == second


def test_static_member_removed_while_replacement_write_pending_is_answered_once() -> None:
    ctx = Context()
    _static_stable(ctx)
    h = ctx.join(instance_id="i1")
    ctx.leave(LeaveMember("", "i1"))
    assert ctx.join_reply(h).error is Error.UNKNOWN_MEMBER_ID
    ctx.complete_writes()  # must not answer h a second time
    assert "i1" not in ctx.group().static_members


# ---- replacement in other states ---------------------------------------------------------------


def test_static_replacement_in_completing_rebalance_fences_old_sync_and_rebalances() -> None:
    ctx = Context()
    h0 = ctx.join(instance_id="i0")
    h1 = ctx.join(instance_id="i1")
    ctx.complete_initial_rebalance([h0, h1])
    r0 = ctx.join_reply(h0)
    old1 = ctx.join_reply(h1).member_id
    hs1 = ctx.sync(old1, r0.generation_id, instance_id="i1")
    hs0 = ctx.sync(r0.member_id, r0.generation_id, instance_id="i0", assignments=[])
    assert ctx.state() is GroupState.COMPLETING_REBALANCE  # leader's write not yet durable
    new1 = ctx.next_member_id("i1")
    h = ctx.join(instance_id="i1")
    assert ctx.sync_reply(hs1).error is Error.FENCED_INSTANCE_ID
    assert ctx.sync_reply(hs0).error is Error.REBALANCE_IN_PROGRESS
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    ctx.complete_writes()  # the stale assignment write is ignored
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    h0b = ctx.join(member_id=r0.member_id, instance_id="i0")
    r = ctx.join_reply(h)
    assert r.member_id == new1
    assert r.generation_id == r0.generation_id + 1
    assert ctx.join_reply(h0b).leader == r0.member_id


def test_static_replacement_in_preparing_rebalance_fences_old_parked_join() -> None:
    ctx = Context()
    sg = _static_stable(ctx, 2)
    old1 = sg.member_ids[1]
    h_old = ctx.join(member_id=old1, instance_id="i1", protocols=[("range", b"x")])
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    new1 = ctx.next_member_id("i1")
    h_new = ctx.join(instance_id="i1")
    r_old = ctx.join_reply(h_old)
    assert r_old.error is Error.FENCED_INSTANCE_ID
    assert r_old.member_id == old1
    assert not ctx.answered(h_new)
    assert ctx.group().awaiting_join_count == 1
    h_leader = ctx.join(member_id=sg.leader, instance_id="i0")
    r = ctx.join_reply(h_new)
    assert r.error is Error.NONE
    assert r.member_id == new1
    assert [m.member_id for m in ctx.join_reply(h_leader).members] == [sg.leader, new1]


def test_static_replacement_of_the_leader_during_rebalance_moves_leadership() -> None:
    ctx = Context()
    sg = _static_stable(ctx, 2)
    ctx.join(member_id=sg.member_ids[1], instance_id="i1", protocols=[("range", b"x")])
    new0 = ctx.next_member_id("i0")
    h = ctx.join(instance_id="i0")
    r = ctx.join_reply(h)
    assert r.leader == new0
    assert r.member_id == new0
    assert len(r.members) == 2


def test_non_rejoined_static_member_keeps_old_generation_and_gets_illegal_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"], session_ms=2 * REBALANCE_MS)
    h = ctx.join(member_id=sg.leader, instance_id="i0")
    ctx.advance(REBALANCE_MS)
    gen = ctx.join_reply(h).generation_id
    assert gen == sg.generation + 1
    follower = sg.member_ids[1]
    assert ctx.heartbeat(follower, sg.generation, instance_id="i1") is Error.ILLEGAL_GENERATION
    # it may still sync into the new generation once it learns it (it is in pendingSync)
    assert follower in ctx.group().pending_sync


def test_static_member_expires_by_session_like_a_dynamic_one() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    for _ in range(3):
        ctx.advance(4000)
        ctx.heartbeat(sg.leader, sg.generation, instance_id="i0")
    assert sg.member_ids[1] not in ctx.group().members
    assert "i1" not in ctx.group().static_members
    assert ctx.state() is GroupState.PREPARING_REBALANCE


# ---- chained replacements whose writes fail (revert to what the log holds) ---------------------


def test_chained_replacements_both_failing_revert_to_the_durable_old_id() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    old = sg.member_ids[1]
    h1 = ctx.join(instance_id="i1", protocols=[("range", b"first")])
    h2 = ctx.join(instance_id="i1", protocols=[("range", b"second")])
    assert ctx.join_reply(h1).error is Error.FENCED_INSTANCE_ID
    ctx.fail_writes(count=2)
    assert ctx.join_reply(h2).error is Error.NOT_COORDINATOR
    group = ctx.group()
    assert group.static_members["i1"] == old
    assert group.members[old].protocols == (("range", subscription("t")),)
    assert ctx.heartbeat(old, sg.generation, instance_id="i1") is Error.NONE
    assert group.static_in_flight == {}
    assert [m.member_id for m in ctx.reloaded().group().members.values()] == sg.member_ids


def test_chained_replacements_first_durable_second_failing_revert_to_the_first() -> None:
    ctx = Context()
    sg = _static_stable(ctx)
    first = ctx.next_member_id("i1")
    ctx.join(instance_id="i1", protocols=[("range", b"first")])
    h2 = ctx.join(instance_id="i1", protocols=[("range", b"second")])
    ctx.complete_writes(count=1)
    ctx.fail_writes(count=1)
    assert ctx.join_reply(h2).error is Error.NOT_COORDINATOR
    group = ctx.group()
    assert group.static_members["i1"] == first
    assert group.members[first].protocols == (("range", b"first"),)
    loaded = ctx.reloaded().group()
    assert loaded.static_members == group.static_members
    assert (
        list(loaded.members) == list(group.members) == [sg.member_ids[0], first, sg.member_ids[2]]
    )


def test_replacement_of_a_re_added_instance_does_not_revert_to_an_older_incarnation() -> None:
    ctx = Context()
    sg = _static_stable(ctx, 2)
    ctx.join(instance_id="i1")  # W1 in flight (old id durable)
    ctx.leave(LeaveMember("", "i1"))  # the instance leaves: a rebalance starts
    h_leader = ctx.join(member_id=sg.leader, instance_id="i0")
    assert ctx.join_reply(h_leader).error is Error.NONE
    ctx.complete_writes()  # W1 completes; the member it named is gone
    assert "i1" not in ctx.group().static_members
    assert ctx.group().static_in_flight == {}


def test_leader_member_list_puts_static_members_first_in_join_order() -> None:
    # kafka-python's range assignor drops members of an interleaved static/dynamic list
    ctx = Context()
    handles = []
    for instance in ("s1", None, "s2", None):
        if instance is None:
            handles.append(ctx.join_dynamic()[1])
        else:
            handles.append(ctx.join(instance_id=instance))
    ctx.complete_initial_rebalance(handles)
    leader = next(r for r in map(ctx.join_reply, handles) if r.members)
    assert [m.group_instance_id for m in leader.members] == ["s1", "s2", None, None]
    dynamic = [m.member_id for m in leader.members if m.group_instance_id is None]
    joined = [ctx.join_reply(h).member_id for h in handles]
    assert dynamic == [joined[1], joined[3]]
