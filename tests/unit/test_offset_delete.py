"""OffsetDelete in the pure core (protocol.md §9.4): tombstones, the group-level refusals,
GROUP_SUBSCRIBED_TO_TOPIC, commits in flight, failed writes and replay."""

from __future__ import annotations

from app.group.messages import DeleteGroupResult, Error, OffsetDeleteRequest
from app.group.results import AppendFailure
from tests.unit.context import GROUP, Context, subscription


def delete_offsets(ctx: Context, *partitions: tuple[str, int], group_id: str = GROUP) -> int:
    h = ctx._handle()
    req = OffsetDeleteRequest(group_id, tuple(partitions))
    ctx._absorb(ctx.coordinator.delete_offsets(h, req, ctx.now))
    return h


def test_tombstones_only_what_has_an_offset_and_replays() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 5, ("t", 1): 6, ("u", 0): 7})
    ctx.complete_writes()
    h = delete_offsets(ctx, ("t", 0), ("u", 0), ("u", 9))
    assert not ctx.answered(h)  # answered once durable
    assert ctx.fetched() == {("t", 0): 5, ("t", 1): 6, ("u", 0): 7}
    ctx.complete_writes()
    assert ctx.commit_errors(h) == {("t", 0): Error.NONE, ("u", 0): Error.NONE, ("u", 9): 0}
    assert [(t, p, v) for t, p, v in ctx.offset_records(durable=True) if v is None] == [
        ("t", 0, None),
        ("u", 0, None),
    ]
    assert ctx.fetched() == {("t", 1): 6}
    assert ctx.reloaded().fetched() == {("t", 1): 6}


def test_the_last_offset_takes_a_simple_group_with_it() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 5})
    ctx.complete_writes()
    delete_offsets(ctx, ("t", 0))
    ctx.complete_writes()
    assert not ctx.has_group()
    assert not ctx.reloaded().has_group()


def test_unknown_group_and_non_consumer_group_with_members() -> None:
    ctx = Context()
    h = delete_offsets(ctx, ("t", 0), group_id="ghost")
    assert ctx.reply(h, DeleteGroupResult).error is Error.GROUP_ID_NOT_FOUND
    ctx.join(group_id="conn", instance_id="w-1", protocol_type="connect")  # a member at once
    assert ctx.group("conn").members
    h = delete_offsets(ctx, ("t", 0), group_id="conn")
    assert ctx.reply(h, DeleteGroupResult).error is Error.NON_EMPTY_GROUP
    assert ctx.pending_is_log_only()


def test_subscribed_topics_of_an_active_consumer_group_are_kept() -> None:
    ctx = Context()
    group = ctx.stable_group(1, protocols=[("range", subscription("t"))])
    ctx.commit({("t", 0): 1, ("u", 0): 2}, member_id=group.leader, generation=group.generation)
    ctx.complete_writes()
    h = delete_offsets(ctx, ("t", 0), ("u", 0))
    ctx.complete_writes()
    assert ctx.commit_errors(h) == {
        ("t", 0): Error.GROUP_SUBSCRIBED_TO_TOPIC,
        ("u", 0): Error.NONE,
    }
    assert ctx.fetched() == {("t", 0): 1}


def test_a_commit_in_flight_is_tombstoned_and_a_failed_write_keeps_the_offset() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 5})
    ctx.complete_writes()
    ctx.commit({("t", 1): 6})  # still being written
    h = delete_offsets(ctx, ("t", 1))
    ctx.complete_writes()
    assert ctx.commit_errors(h) == {("t", 1): Error.NONE}
    assert ctx.fetched() == {("t", 0): 5}
    assert ctx.reloaded().fetched() == {("t", 0): 5}
    h = delete_offsets(ctx, ("t", 0))
    ctx.fail_writes(AppendFailure.NOT_OWNER)
    assert ctx.commit_errors(h) == {("t", 0): Error.NOT_COORDINATOR}
    assert ctx.fetched() == {("t", 0): 5}
    assert ctx.group().transient.pending_offset_commits == {}
