"""Moving a group in (gateway mode's import) and the ownership check, in the pure core."""

from __future__ import annotations

import struct

from app.group.consumer_protocol import assigned_partitions
from app.group.messages import Error, OffsetCommitPartition
from app.group.ownership import ownership
from app.group.records import OFFSET_SOURCE_UPSTREAM
from app.group.results import AppendFailure
from app.group.state import GroupState
from tests.unit.context import GROUP, Context, subscription


def _import(ctx: Context, offsets: dict[tuple[str, int], int], group_id: str = GROUP) -> int:
    parts = tuple(
        OffsetCommitPartition(t, p, o, leader_epoch=3, metadata="upstream-meta")
        for (t, p), o in offsets.items()
    )
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.import_offsets(h, group_id, "cluster-x", parts, ctx.now))
    return h


def test_imported_offsets_are_positions_once_durable_and_survive_a_reload() -> None:
    ctx = Context()
    h = _import(ctx, {("t", 0): 40, ("t", 1): 7})
    assert ctx.fetched() == {}  # not visible before the write is durable
    ctx.complete_writes()
    assert [r.partition for r in ctx.commit_reply(h).partitions] == [0, 1]
    assert ctx.fetched() == {("t", 0): 40, ("t", 1): 7}
    (_, _, value), _ = ctx.offset_records(durable=True)
    assert value is not None
    assert (value.source, value.origin, value.leader_epoch) == (
        OFFSET_SOURCE_UPSTREAM,
        "cluster-x",
        3,
    )
    assert ctx.reloaded().fetched() == {("t", 0): 40, ("t", 1): 7}


def test_an_import_never_moves_a_position_committed_here() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 100})
    ctx.complete_writes()
    h = _import(ctx, {("t", 0): 40, ("t", 1): 7})
    ctx.complete_writes()
    assert [(r.topic, r.partition) for r in ctx.commit_reply(h).partitions] == [("t", 1)]
    assert ctx.fetched() == {("t", 0): 100, ("t", 1): 7}


def test_a_commit_in_flight_wins_over_an_import() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 100})  # not yet durable
    _import(ctx, {("t", 0): 40})
    ctx.complete_writes()
    assert ctx.fetched() == {("t", 0): 100}


def test_a_failed_import_leaves_no_group_and_no_position() -> None:
    ctx = Context()
    h = _import(ctx, {("t", 0): 40})
    ctx.fail_writes(AppendFailure.STORAGE)
    assert ctx.commit_reply(h).partitions[0].error is not Error.NONE
    assert not ctx.has_group()


def _assignment(*partitions: tuple[str, int]) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    out = [struct.pack(">hi", 0, len(by_topic))]
    for t, ps in by_topic.items():
        raw = t.encode()
        out.append(struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(ps)))
        out.extend(struct.pack(">i", p) for p in ps)
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def test_ownership_finds_unowned_and_doubly_owned_partitions() -> None:
    ctx = Context()
    protocols = (("range", subscription("t", "u")),)
    assignments = {0: _assignment(("t", 0), ("u", 0)), 1: _assignment(("t", 0), ("t", 2))}
    ctx.stable_group(2, protocols=protocols, assignments=assignments)
    view = ctx.coordinator.describe(GROUP)
    assert view is not None and view.state is GroupState.STABLE
    found = ownership(view, {"t": 3, "u": 2})
    assert found is not None
    assert found.unowned == (("t", 1), ("u", 1))
    assert found.doubly_owned == (("t", 0),)
    grown = ownership(view, {"t": 4, "u": 2})  # a partition added upstream
    assert grown is not None and ("t", 3) in grown.unowned
    nothing_known = ownership(view, {})
    assert nothing_known is not None and nothing_known.unknown_topics == ("t", "u")


def test_a_well_assigned_group_has_nothing_to_flag() -> None:
    ctx = Context()
    protocols = (("range", subscription("t")),)
    assignments = {0: _assignment(("t", 0)), 1: _assignment(("t", 1))}
    ctx.stable_group(2, protocols=protocols, assignments=assignments)
    view = ctx.coordinator.describe(GROUP)
    assert view is not None
    assert ownership(view, {"t": 2}) == (GROUP, view.generation, (), (), ())


def test_assigned_partitions_are_those_a_consumer_groups_assignments_name() -> None:
    assignments = [_assignment(("t", 0), ("u", 1)), b"", b"\x00\x01junk", _assignment(("t", 2))]
    assert assigned_partitions("consumer", assignments) == {("t", 0), ("u", 1), ("t", 2)}
    assert assigned_partitions("connect", assignments) == set()  # not the consumer protocol
