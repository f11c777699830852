"""The read-only views the core offers metrics and the admin API: immutable snapshots."""

from __future__ import annotations

from app.group.state import GroupState
from app.group.view import GroupSummary, MemberView, OffsetView
from tests.unit.context import GROUP, Context, subscription


def test_groups_view_lists_every_group_with_its_member_count() -> None:
    ctx = Context()
    ctx.stable_group(2)
    became_stable = ctx.now
    ctx.advance(500)
    ctx.commit(group_id="simple")
    ctx.complete_writes()
    stable, simple = ctx.coordinator.groups_view()
    # the state timestamp is when it became Stable, not when it was last looked at
    assert stable == GroupSummary(
        GROUP, GroupState.STABLE, "consumer", 1, 2, 0, became_stable, "range"
    )
    assert simple[:6] == ("simple", GroupState.EMPTY, "", 0, 0, 0)


def test_groups_view_shows_a_group_being_deleted_as_dead() -> None:
    ctx = Context()
    ctx.commit(group_id="simple")
    ctx.complete_writes()
    ctx.delete("simple")  # the tombstones are not written yet
    assert [(s.group_id, s.state) for s in ctx.coordinator.groups_view()] == [
        ("simple", GroupState.DEAD)
    ]
    assert ctx.coordinator.describe("simple") is None


def test_describe_shows_members_in_join_order_with_leader_and_assignment() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", None])
    ctx.commit(
        {("t", 1): 7, ("t", 0): 5}, member_id=sg.leader, generation=sg.generation, instance_id="i0"
    )
    ctx.complete_writes()
    view = ctx.coordinator.describe(GROUP)
    assert view is not None
    assert (view.state, view.generation, view.protocol_type, view.protocol_name) == (
        GroupState.STABLE,
        sg.generation,
        "consumer",
        "range",
    )
    assert view.leader_id == sg.leader
    sub = subscription("t")
    assert view.members == (
        MemberView(
            sg.member_ids[0],
            "i0",
            "client",
            "/127.0.0.1",
            10_000,
            30_000,
            sg.member_ids[0] == sg.leader,
            sub,
            b"assign-0",
        ),
        MemberView(
            sg.member_ids[1],
            None,
            "c1",
            "/127.0.0.1",
            10_000,
            30_000,
            sg.member_ids[1] == sg.leader,
            sub,
            b"assign-1",
        ),
    )
    assert view.offsets == (
        OffsetView("t", 0, 5, -1, "", ctx.now, -1),
        OffsetView("t", 1, 7, -1, "", ctx.now, -1),
    )


def test_describe_is_a_snapshot_later_changes_do_not_reach() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    before = ctx.coordinator.describe(GROUP)
    ctx.leave(sg.followers[0])
    assert before is not None and len(before.members) == 2
    after = ctx.coordinator.describe(GROUP)
    assert after is not None
    assert after.state is GroupState.PREPARING_REBALANCE
    assert [m.member_id for m in after.members] == [sg.leader]


def test_describe_lists_registered_static_members_not_yet_joined() -> None:
    ctx = Context()
    ctx.stable_group(["i0"])
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(h, GROUP, ["n0", "n1"], 60_000, ctx.now))
    view = ctx.coordinator.describe(GROUP)
    assert view is not None and view.registered_static_members == ("n0", "n1")


def test_describe_unknown_group_is_none() -> None:
    assert Context().coordinator.describe("nope") is None
