"""The two record fields the audit needs (app/group/records.py), written by the real core."""

from __future__ import annotations

from pathlib import Path

from app.group.records import (
    OFFSET_SOURCE_MEMBER,
    OFFSET_SOURCE_RESET,
    GroupMetadataValue,
    OffsetValue,
    decode_group_value,
    decode_offset_value,
    encode_group_value,
    encode_offset_value,
)
from tests.unit.context import Context


def test_offset_value_v1_only_for_resets_members_stay_v0() -> None:
    member = OffsetValue(5, -1, "m", 10, -1)
    assert encode_offset_value(member)[:2] == b"\x00\x00"  # hot path: v0, byte for byte
    reset = OffsetValue(5, -1, "m", 10, -1, OFFSET_SOURCE_RESET)
    assert encode_offset_value(reset)[:2] == b"\x00\x01"
    assert decode_offset_value(encode_offset_value(reset)) == reset
    assert decode_offset_value(encode_offset_value(member)).source == OFFSET_SOURCE_MEMBER


def test_group_value_v2_round_trips_skip_assignment() -> None:
    v = GroupMetadataValue("consumer", 3, "range", "l", 1, (), "member joined", 7, True)
    assert decode_group_value(encode_group_value(v)) == v


def test_admin_commit_on_empty_group_is_a_reset_member_commit_is_not() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 10})  # generation -1, no member, no group yet: Empty
    ctx.complete_writes()
    g = ctx.stable_group(1)
    ctx.commit({("t", 0): 20}, member_id=g.leader, generation=g.generation)
    ctx.complete_writes()
    sources = [v.source for _, _, v in ctx.offset_records(durable=True) if v is not None]
    assert sources == [OFFSET_SOURCE_RESET, OFFSET_SOURCE_MEMBER]


def test_static_leader_rejoin_records_skip_assignment() -> None:
    ctx = Context()
    g = ctx.stable_group(["i-a", "i-b"])
    leader_instance = g.instance_ids[g.leader]
    follower_instance = g.instance_ids[g.followers[0]]
    ctx.join(instance_id=leader_instance, skip_assignment=True)  # v9 leader restarts
    ctx.complete_writes()
    ctx.join(instance_id=follower_instance, skip_assignment=True)  # a follower restarts
    ctx.complete_writes()
    ctx.join(instance_id=leader_instance, skip_assignment=False)  # an older client
    ctx.complete_writes()
    recs = [v for v in ctx.group_records(durable=True) if v is not None]
    assert [v.generation for v in recs[-3:]] == [g.generation] * 3  # no rebalance
    assert [v.skip_assignment for v in recs[-3:]] == [True, False, False]


def test_plots_take_group_ids_and_reasons_as_plain_text(tmp_path: Path) -> None:
    """A group id such as "$\\frac{$" once made matplotlib's TeX parser fail the report."""
    from pipeline.plots import write_plots

    nasty = "$\\frac{$"
    write_plots(
        tmp_path,
        [{"b": 0, "reason": f"admin: {nasty}", "count": 2}],
        {0: 1},
        0,
        1000,
        [{"group_id": nasty, "time_in_rebalance_ms": 1500, "rebalances": 2}],
        [{"partitions_moved": 3, "count": 1}],
    )
    assert len(list(tmp_path.glob("*.png"))) == 4
