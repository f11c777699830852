"""DescribeGroups / ListGroups / DeleteGroups (protocol.md §9)."""

from __future__ import annotations

import pytest

from app.group.messages import DescribedMember, Error, ListedGroup
from app.group.results import AppendFailure
from app.group.state import GroupState
from tests.unit.context import Context, subscription

# ---- DescribeGroups ----------------------------------------------------------------------------


def test_describe_unknown_group_is_none_with_state_dead() -> None:
    d = Context().describe("nope")
    assert (d.group_id, d.error, d.state) == ("nope", Error.NONE, "Dead")
    assert (d.protocol_type, d.protocol_data, d.members) == ("", "", ())


def test_describe_stable_group_shows_protocol_metadata_and_assignments() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", None])
    d = ctx.describe()
    assert (d.error, d.state, d.protocol_type, d.protocol_data) == (
        Error.NONE,
        "Stable",
        "consumer",
        "range",
    )
    sub = subscription("t")
    assert d.members == (
        DescribedMember(sg.member_ids[0], "i0", "client", "/127.0.0.1", sub, b"assign-0"),
        DescribedMember(sg.member_ids[1], None, "c1", "/127.0.0.1", sub, b"assign-1"),
    )


def test_describe_rebalancing_group_hides_metadata_and_keeps_assignments() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader)
    d = ctx.describe()
    assert d.state == "PreparingRebalance"
    assert d.protocol_type == "consumer"
    assert d.protocol_data == ""
    assert [m.member_id for m in d.members] == sg.member_ids
    assert all(m.metadata == b"" for m in d.members)
    # Apache Kafka's describeNoMetadata: the assignment a member holds until its next SyncGroup
    assert [m.assignment for m in d.members] == [b"assign-0", b"assign-1"]


def test_describe_completing_rebalance_group_hides_metadata() -> None:
    ctx = Context()
    _, h = ctx.join_dynamic()
    ctx.complete_initial_rebalance([h])
    d = ctx.describe()
    assert d.state == "CompletingRebalance"
    assert d.protocol_data == ""
    assert d.members[0].metadata == b""


def test_describe_simple_group_is_empty_with_no_protocol_type() -> None:
    ctx = Context()
    ctx.commit()
    ctx.complete_writes()
    d = ctx.describe()
    assert (d.state, d.protocol_type, d.members) == ("Empty", "", ())


def test_describe_empty_consumer_group_keeps_protocol_type() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    d = ctx.describe()
    assert (d.state, d.protocol_type, d.protocol_data) == ("Empty", "consumer", "")


# ---- ListGroups --------------------------------------------------------------------------------


def _three_groups(ctx: Context) -> None:
    ctx.stable_group(1, group_id="stable")
    ctx.commit(group_id="simple")
    ctx.complete_writes()
    ctx.join_dynamic("preparing")


def test_list_groups_returns_every_live_group_with_type_classic() -> None:
    ctx = Context()
    _three_groups(ctx)
    assert sorted(ctx.list_groups(), key=lambda g: g.group_id) == [
        ListedGroup("preparing", "consumer", "PreparingRebalance", "classic"),
        ListedGroup("simple", "", "Empty", "classic"),
        ListedGroup("stable", "consumer", "Stable", "classic"),
    ]


@pytest.mark.parametrize("states", [["stable"], ["STABLE"], ["Stable"], ["sTaBlE", "dead"]])
def test_list_groups_states_filter_is_case_insensitive(states: list[str]) -> None:
    ctx = Context()
    _three_groups(ctx)
    assert [g.group_id for g in ctx.list_groups(states=states)] == ["stable"]


def test_list_groups_states_filter_with_several_states() -> None:
    ctx = Context()
    _three_groups(ctx)
    got = {g.group_id for g in ctx.list_groups(states=["Empty", "preparingrebalance"])}
    assert got == {"simple", "preparing"}


@pytest.mark.parametrize("types", [["classic"], ["Classic"], ["CLASSIC", "consumer"]])
def test_list_groups_types_filter_classic_matches(types: list[str]) -> None:
    ctx = Context()
    _three_groups(ctx)
    assert len(ctx.list_groups(types=types)) == 3


@pytest.mark.parametrize("types", [["consumer"], ["share"], ["garbage"]])
def test_list_groups_types_filter_other_values_match_nothing(types: list[str]) -> None:
    ctx = Context()
    _three_groups(ctx)
    assert ctx.list_groups(types=types) == []


def test_list_groups_combines_state_and_type_filters() -> None:
    ctx = Context()
    _three_groups(ctx)
    assert [g.group_id for g in ctx.list_groups(states=["empty"], types=["classic"])] == ["simple"]


def test_list_groups_omits_a_group_being_deleted() -> None:
    ctx = Context()
    _three_groups(ctx)
    ctx.delete("simple")
    assert "simple" not in {g.group_id for g in ctx.list_groups()}


# ---- DeleteGroups ------------------------------------------------------------------------------


def test_delete_unknown_group_is_group_id_not_found() -> None:
    ctx = Context()
    r = ctx.delete_reply(ctx.delete("nope"))
    assert (r.group_id, r.error) == ("nope", Error.GROUP_ID_NOT_FOUND)


def test_delete_non_empty_group_is_non_empty_group_in_every_active_state() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic()
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert ctx.delete_reply(ctx.delete()).error is Error.NON_EMPTY_GROUP
    ctx.complete_initial_rebalance([ha])
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    assert ctx.delete_reply(ctx.delete()).error is Error.NON_EMPTY_GROUP
    ctx.sync(a, 1, assignments=[])
    ctx.complete_writes()
    assert ctx.state() is GroupState.STABLE
    assert ctx.delete_reply(ctx.delete()).error is Error.NON_EMPTY_GROUP
    assert ctx.records[-1].value is not None  # no tombstone


def test_delete_empty_group_writes_offset_and_group_tombstones_then_answers() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.commit({("t", 0): 1, ("t", 1): 2}, member_id=sg.leader, generation=sg.generation)
    ctx.complete_writes()
    ctx.leave(sg.leader)
    ctx.complete_writes()
    h = ctx.delete()
    assert not ctx.answered(h)
    assert ctx.state() is GroupState.DEAD
    assert ctx.fetched() == {}  # Dead: fetch answers -1 / nothing at once
    ctx.complete_writes()
    assert ctx.delete_reply(h).error is Error.NONE
    assert not ctx.has_group()
    tombstones = [(t, p) for t, p, v in ctx.offset_records(durable=True) if v is None]
    assert sorted(tombstones) == [("t", 0), ("t", 1)]
    assert ctx.group_records(durable=True)[-1] is None
    assert ctx.fetch([("t", 0)]).partitions[0].offset == -1
    assert ctx.describe().state == "Dead"


def test_delete_twice_second_is_group_id_not_found() -> None:
    ctx = Context()
    ctx.commit()
    ctx.complete_writes()
    h1 = ctx.delete()
    assert ctx.delete_reply(ctx.delete()).error is Error.GROUP_ID_NOT_FOUND  # Dead meanwhile
    ctx.complete_writes()
    assert ctx.delete_reply(h1).error is Error.NONE
    assert ctx.delete_reply(ctx.delete()).error is Error.GROUP_ID_NOT_FOUND


def test_failed_delete_write_keeps_the_group_and_its_offsets() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 5})
    ctx.complete_writes()
    ts = ctx.group().state_timestamp
    ctx.advance(1_000)
    h = ctx.delete()
    ctx.fail_writes(AppendFailure.NOT_OWNER)
    assert ctx.delete_reply(h).error is Error.NOT_COORDINATOR
    assert ctx.state() is GroupState.EMPTY
    assert ctx.group().state_timestamp == ts
    assert ctx.fetched() == {("t", 0): 5}


def test_group_can_be_recreated_after_delete() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    ctx.delete()
    ctx.complete_writes()
    assert not ctx.has_group()
    _, h = ctx.join_dynamic()
    ctx.complete_initial_rebalance([h])
    assert ctx.join_reply(h).generation_id == 1
