"""OffsetCommit / OffsetFetch / retention (protocol.md §8)."""

from __future__ import annotations

import pytest

from app.group.config import CoreConfig
from app.group.messages import Error, FetchedOffset, OffsetCommitPartition
from app.group.results import AppendFailure
from app.group.state import GroupState
from tests.unit.context import GROUP, Context, subscription

DAY = 24 * 3600 * 1000
RETENTION = 7 * DAY
CHECK = 600_000


def _ok(ctx: Context, h: int) -> None:
    assert set(ctx.commit_errors(h).values()) == {Error.NONE}


# ---- protocol.md §8.1 group creation and validation --------------------------------------------


def test_commit_with_generation_minus_one_creates_simple_group() -> None:
    ctx = Context()
    h = ctx.commit({("t", 0): 5, ("t", 1): 6})
    assert not ctx.answered(h)  # answered after the write
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.protocol_type is None
    ctx.complete_writes()
    _ok(ctx, h)
    assert ctx.fetched() == {("t", 0): 5, ("t", 1): 6}


def test_commit_with_empty_group_id_is_allowed() -> None:
    ctx = Context()
    h = ctx.commit(group_id="")
    ctx.complete_writes()
    _ok(ctx, h)
    assert ctx.fetched(group_id="") == {("t", 0): 10}


@pytest.mark.parametrize(
    ("not_found", "error"),
    [(False, Error.ILLEGAL_GENERATION), (True, Error.GROUP_ID_NOT_FOUND)],
)
def test_commit_with_generation_to_unknown_group(not_found: bool, error: Error) -> None:
    ctx = Context()
    h = ctx.commit(member_id="m", generation=1, unknown_group_not_found=not_found)
    assert set(ctx.commit_errors(h).values()) == {error}
    assert not ctx.has_group()
    assert ctx.records == []


def test_commit_to_dead_group_is_coordinator_not_available() -> None:
    ctx = Context()
    ctx.commit()
    ctx.complete_writes()
    ctx.delete()
    h = ctx.commit()
    assert set(ctx.commit_errors(h).values()) == {Error.COORDINATOR_NOT_AVAILABLE}


def test_commit_without_generation_to_empty_group_skips_member_validation() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    h = ctx.commit(member_id="whoever", instance_id="whatever")
    ctx.complete_writes()
    _ok(ctx, h)


def test_commit_with_generation_to_empty_group_is_validated() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    h = ctx.commit(member_id=sg.leader, generation=sg.generation + 1)
    assert set(ctx.commit_errors(h).values()) == {Error.UNKNOWN_MEMBER_ID}


def test_commit_without_identity_to_non_empty_group_is_unknown_member_id() -> None:
    ctx = Context()
    ctx.stable_group(1)
    h = ctx.commit()
    assert set(ctx.commit_errors(h).values()) == {Error.UNKNOWN_MEMBER_ID}


def test_commit_with_only_member_id_and_no_generation_is_validated_as_illegal_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    h = ctx.commit(member_id=sg.leader, generation=-1)
    assert set(ctx.commit_errors(h).values()) == {Error.ILLEGAL_GENERATION}


def test_commit_with_unknown_member_in_stable_is_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    h = ctx.commit(member_id="ghost", generation=sg.generation)
    assert set(ctx.commit_errors(h).values()) == {Error.UNKNOWN_MEMBER_ID}


def test_commit_with_fenced_instance_is_fenced() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    h = ctx.commit(member_id=sg.member_ids[0], generation=sg.generation, instance_id="i1")
    assert set(ctx.commit_errors(h).values()) == {Error.FENCED_INSTANCE_ID}


def test_commit_with_wrong_generation_is_illegal_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    h = ctx.commit(member_id=sg.leader, generation=sg.generation + 1)
    assert set(ctx.commit_errors(h).values()) == {Error.ILLEGAL_GENERATION}


def test_commit_in_stable_by_member_is_stored() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h = ctx.commit({("t", 0): 42}, member_id=sg.followers[0], generation=sg.generation)
    ctx.complete_writes()
    _ok(ctx, h)
    assert ctx.fetched() == {("t", 0): 42}


def test_commit_in_completing_rebalance_is_rebalance_in_progress() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic()
    ctx.complete_initial_rebalance([ha])
    h = ctx.commit(member_id=a, generation=1)
    assert set(ctx.commit_errors(h).values()) == {Error.REBALANCE_IN_PROGRESS}


def test_commit_of_pre_rebalance_generation_is_allowed_in_preparing_rebalance() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader)
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    h = ctx.commit({("t", 3): 7}, member_id=sg.followers[0], generation=sg.generation)
    ctx.complete_writes()
    _ok(ctx, h)
    assert ctx.fetched() == {("t", 3): 7}


def test_oversized_metadata_fails_only_that_partition() -> None:
    ctx = Context(CoreConfig(offset_metadata_max_bytes=10))
    h = ctx.commit(
        partitions=[
            OffsetCommitPartition("t", 0, 1, metadata="x" * 10),
            OffsetCommitPartition("t", 1, 2, metadata="x" * 11),
            OffsetCommitPartition("t", 2, 3, metadata="é" * 6),  # 12 bytes in UTF-8
        ]
    )
    ctx.complete_writes()
    assert ctx.commit_errors(h) == {
        ("t", 0): Error.NONE,
        ("t", 1): Error.OFFSET_METADATA_TOO_LARGE,
        ("t", 2): Error.OFFSET_METADATA_TOO_LARGE,
    }
    assert ctx.fetched() == {("t", 0): 1}
    assert [(t, p) for t, p, _ in ctx.offset_records()] == [("t", 0)]


def test_commit_with_only_oversized_metadata_answers_at_once_and_leaves_no_group() -> None:
    ctx = Context(CoreConfig(offset_metadata_max_bytes=1))
    h = ctx.commit(metadata="too long")
    assert ctx.commit_errors(h) == {("t", 0): Error.OFFSET_METADATA_TOO_LARGE}
    assert ctx.records == []
    assert not ctx.has_group()
    assert ctx.describe().state == "Dead"


def test_null_metadata_is_stored_as_empty_string_with_commit_timestamp_now() -> None:
    ctx = Context(now=1_000)
    ctx.commit(partitions=[OffsetCommitPartition("t", 0, 9, leader_epoch=4, metadata=None)])
    ctx.complete_writes()
    [(_, _, value)] = ctx.offset_records()
    assert value is not None
    assert (value.offset, value.leader_epoch, value.metadata) == (9, 4, "")
    assert value.commit_timestamp == 1_000
    assert value.expire_timestamp == -1
    [f] = ctx.fetch([("t", 0)]).partitions
    assert f == FetchedOffset("t", 0, 9, 4, "", Error.NONE)


def test_retention_time_sets_an_explicit_expire_timestamp() -> None:
    ctx = Context(now=1_000)
    ctx.commit(retention_ms=5_000)
    [(_, _, value)] = ctx.offset_records()
    assert value is not None and value.expire_timestamp == 6_000


def test_offsets_are_visible_only_after_the_write() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    ctx.commit({("t", 0): 2})
    assert ctx.fetched() == {("t", 0): 1}
    ctx.complete_writes()
    assert ctx.fetched() == {("t", 0): 2}


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (AppendFailure.NOT_OWNER, Error.NOT_COORDINATOR),
        (AppendFailure.STORAGE, Error.NOT_COORDINATOR),
        (AppendFailure.TIMEOUT, Error.COORDINATOR_NOT_AVAILABLE),
        (AppendFailure.TOO_LARGE, Error.INVALID_COMMIT_OFFSET_SIZE),
    ],
)
def test_failed_commit_write_maps_error_and_stays_invisible(
    failure: AppendFailure, error: Error
) -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    h = ctx.commit({("t", 0): 2, ("t", 1): 2})
    ctx.fail_writes(failure)
    assert ctx.commit_errors(h) == {("t", 0): error, ("t", 1): error}
    assert ctx.fetched() == {("t", 0): 1}
    assert ctx.group().pending_offset_commits == {}


def test_failed_first_commit_leaves_no_simple_group_behind() -> None:
    ctx = Context()
    ctx.commit()
    ctx.fail_writes()
    assert not ctx.has_group()
    assert ctx.list_groups() == []


# ---- protocol.md §8.3 OffsetFetch --------------------------------------------------------------


def test_fetch_for_unknown_group_returns_minus_one_per_partition() -> None:
    ctx = Context()
    r = ctx.fetch([("t", 0), ("u", 3)])
    assert r.error is Error.NONE
    assert r.partitions == (FetchedOffset("t", 0), FetchedOffset("u", 3))
    assert r.partitions[0].offset == -1 and r.partitions[0].leader_epoch == -1
    assert ctx.fetch(None).partitions == ()


def test_fetch_all_partitions_lists_every_committed_partition() -> None:
    ctx = Context()
    ctx.commit({("b", 1): 3, ("a", 0): 1, ("b", 0): 2})
    ctx.complete_writes()
    parts = ctx.fetch(None).partitions
    assert [(p.topic, p.partition, p.offset) for p in parts] == [
        ("a", 0, 1),
        ("b", 0, 2),
        ("b", 1, 3),
    ]


def test_fetch_of_uncommitted_partition_of_known_group_is_minus_one() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    assert ctx.fetch([("t", 1)]).partitions == (FetchedOffset("t", 1),)


def test_fetch_needs_no_membership_in_any_state() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.commit({("t", 0): 4}, member_id=sg.leader, generation=sg.generation)
    ctx.complete_writes()
    ctx.join(member_id=sg.leader)
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert ctx.fetched() == {("t", 0): 4}


def test_require_stable_reports_unstable_offset_commit_while_a_commit_is_pending() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    ctx.commit({("t", 0): 2})
    r = ctx.fetch([("t", 0), ("t", 1)], require_stable=True)
    assert r.partitions[0] == FetchedOffset("t", 0, error=Error.UNSTABLE_OFFSET_COMMIT)
    assert r.partitions[0].offset == -1
    assert r.partitions[1] == FetchedOffset("t", 1)
    # without require_stable the last durable value is returned
    assert ctx.fetch([("t", 0)]).partitions[0].offset == 1
    ctx.complete_writes()
    assert ctx.fetch([("t", 0)], require_stable=True).partitions[0].offset == 2


def test_two_pending_commits_to_one_partition_stay_unstable_until_both_complete() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.commit({("t", 0): 2})
    ctx.complete_writes(count=1)
    r = ctx.fetch([("t", 0)], require_stable=True)
    assert r.partitions[0].error is Error.UNSTABLE_OFFSET_COMMIT
    ctx.complete_writes()
    assert ctx.fetch([("t", 0)], require_stable=True).partitions[0].offset == 2


# ---- protocol.md §8.4 retention ----------------------------------------------------------------


def _tick_to(ctx: Context, t: int) -> None:
    """Advance in retention-check steps until at least t; writes complete as they appear."""
    while ctx.now < t:
        ctx.advance(min(CHECK, t - ctx.now))
        ctx.complete_writes()


def test_simple_group_offsets_expire_by_commit_timestamp_then_group_is_removed() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    _tick_to(ctx, DAY)
    ctx.commit({("t", 1): 2})
    ctx.complete_writes()
    _tick_to(ctx, RETENTION + CHECK)
    assert ctx.fetched() == {("t", 1): 2}  # first expired, second is younger
    _tick_to(ctx, DAY + RETENTION + CHECK)
    assert not ctx.has_group()
    tomb = [(t, p) for t, p, v in ctx.offset_records(durable=True) if v is None]
    assert tomb == [("t", 0), ("t", 1)]
    assert ctx.group_records(durable=True)[-1] is None


def test_empty_consumer_group_offsets_expire_from_when_it_became_empty() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, session_ms=60_000)
    ctx.commit({("t", 0): 1}, member_id=sg.leader, generation=sg.generation)
    ctx.complete_writes()
    for _ in range(10):  # stay alive for a while
        ctx.advance(50_000)
        ctx.heartbeat(sg.leader, sg.generation)
        ctx.complete_writes()
    ctx.leave(sg.leader)
    ctx.complete_writes()
    empty_since = ctx.now
    assert ctx.group().state_timestamp == empty_since
    _tick_to(ctx, empty_since + RETENTION - 1)
    assert ctx.fetched() == {("t", 0): 1}  # commit is older than retention, but Empty is not
    _tick_to(ctx, empty_since + RETENTION + CHECK)
    assert ctx.fetched() == {}
    assert not ctx.has_group()


def test_stable_consumer_group_expires_only_unsubscribed_topics() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, protocols=[("range", subscription("t"))], session_ms=1_800_000)
    ctx.commit({("t", 0): 1, ("old", 0): 2}, member_id=sg.leader, generation=sg.generation)
    ctx.complete_writes()
    while ctx.now < RETENTION + CHECK:
        ctx.advance(CHECK)
        assert ctx.heartbeat(sg.leader, sg.generation) is Error.NONE
        ctx.complete_writes()
    assert ctx.fetched() == {("t", 0): 1}
    assert ctx.state() is GroupState.STABLE


def test_non_consumer_stable_group_never_expires_offsets() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, session_ms=1_800_000)
    ctx.group().protocol_type = "connect"  # a non-consumer protocol with members
    ctx.commit({("x", 0): 1}, member_id=sg.leader, generation=sg.generation)
    ctx.complete_writes()
    while ctx.now < RETENTION + 2 * CHECK:
        ctx.advance(CHECK)
        ctx.heartbeat(sg.leader, sg.generation)
        ctx.complete_writes()
    assert ctx.fetched() == {("x", 0): 1}


def test_rebalancing_group_never_expires_offsets() -> None:
    ctx = Context(
        CoreConfig(offsets_retention_ms=60_000, offsets_retention_check_interval_ms=5_000)
    )
    sg = ctx.stable_group(2, session_ms=60_000, rebalance_ms=200_000)
    ctx.commit({("old", 0): 1}, member_id=sg.leader, generation=sg.generation)
    ctx.complete_writes()
    ctx.join(member_id=sg.leader)  # PreparingRebalance: the follower heartbeats, never rejoins
    for _ in range(30):
        ctx.advance(5_000)
        assert ctx.heartbeat(sg.followers[0], sg.generation) is Error.REBALANCE_IN_PROGRESS
        ctx.complete_writes()
    assert ctx.now - ctx.group().offsets[("old", 0)].commit_timestamp > 60_000
    assert ctx.fetched() == {("old", 0): 1}


def test_explicit_expire_timestamp_wins_over_the_retention_age() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1}, retention_ms=2 * CHECK)
    ctx.commit({("t", 1): 1})
    ctx.complete_writes()
    _tick_to(ctx, 2 * CHECK)
    assert ctx.fetched() == {("t", 1): 1}


def test_explicit_expire_timestamp_does_not_expire_subscribed_topic_of_stable_group() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, protocols=[("range", subscription("t"))], session_ms=1_800_000)
    ctx.commit(
        {("t", 0): 1, ("old", 0): 2},
        member_id=sg.leader,
        generation=sg.generation,
        retention_ms=CHECK,
    )
    ctx.complete_writes()
    for _ in range(3):
        ctx.advance(CHECK)
        ctx.heartbeat(sg.leader, sg.generation)
        ctx.complete_writes()
    assert ctx.fetched() == {("t", 0): 1}


def test_explicit_expire_timestamp_does_not_expire_offsets_of_rebalancing_group() -> None:
    ctx = Context()
    sg = ctx.stable_group(2, session_ms=1_800_000, rebalance_ms=1_000_000)
    ctx.commit({("t", 0): 1}, member_id=sg.leader, generation=sg.generation, retention_ms=1)
    ctx.complete_writes()
    ctx.join(member_id=sg.leader)
    ctx.advance(CHECK)
    ctx.complete_writes()
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert ctx.fetched() == {("t", 0): 1}


def test_offset_with_pending_commit_is_not_expired_and_group_not_removed() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    _tick_to(ctx, RETENTION)
    ctx.commit({("t", 0): 2})  # in flight across the retention check
    ctx.advance(CHECK)
    assert ctx.state() is GroupState.EMPTY
    ctx.complete_writes()
    assert ctx.fetched() == {("t", 0): 2}
    assert ctx.has_group()


def test_retention_removes_an_empty_group_without_offsets_with_a_tombstone() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    ctx.complete_writes()
    _tick_to(ctx, 2 * CHECK)
    assert not ctx.has_group()
    assert ctx.group_records(durable=True)[-1] is None


def test_failed_retention_tombstone_write_keeps_the_group() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1})
    ctx.complete_writes()
    ctx.advance_to(RETENTION + CHECK)
    assert ctx.state() is GroupState.DEAD
    ctx.fail_writes()
    assert ctx.state() is GroupState.EMPTY
    assert ctx.fetched() == {("t", 0): 1}


def test_retention_keeps_offsets_of_a_group_id_not_expired_yet() -> None:
    ctx = Context()
    ctx.commit({("t", 0): 1}, group_id="a")
    ctx.complete_writes()
    _tick_to(ctx, RETENTION - CHECK)
    ctx.commit({("t", 0): 1}, group_id="b")
    ctx.complete_writes()
    _tick_to(ctx, RETENTION + CHECK)
    assert not ctx.has_group("a")
    assert ctx.fetched("b") == {("t", 0): 1}
    assert GROUP not in ctx.coordinator.groups


def test_loaded_empty_group_without_state_timestamp_ages_offsets_from_commit_time() -> None:
    from app.group.records import GroupMetadataValue, OffsetValue, group_record, offset_record

    ctx = Context(load=False)
    ctx.coordinator.replay(
        group_record(GROUP, GroupMetadataValue("consumer", 3, None, None, -1, ()))
    )
    ctx.coordinator.replay(offset_record(GROUP, "t", 0, OffsetValue(1, -1, "", DAY, -1)))
    ctx.coordinator.replay(offset_record(GROUP, "t", 1, OffsetValue(2, -1, "", 0, -1)))
    ctx._absorb(ctx.coordinator.on_loaded(ctx.now))
    _tick_to(ctx, RETENTION + CHECK)
    assert ctx.fetched() == {("t", 0): 1}
