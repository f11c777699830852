"""SyncGroup (protocol.md §6)."""

from __future__ import annotations

from typing import Any

import pytest

from app.group.messages import Error, LeaveMember
from app.group.results import AppendFailure
from app.group.state import GroupState
from tests.unit.context import GROUP, REBALANCE_MS, Context, subscription


def _completing(ctx: Context, n: int = 3, **kw: Any) -> tuple[list[str], int]:
    ids, hs = [], []
    for _ in range(n):
        mid, h = ctx.join_dynamic(**kw)
        ids.append(mid)
        hs.append(h)
    ctx.complete_initial_rebalance(hs)
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    return ids, ctx.join_reply(hs[0]).generation_id


# ---- protocol.md §6.1 checks -------------------------------------------------------------------


def test_sync_with_empty_group_id_is_invalid_group_id() -> None:
    ctx = Context()
    assert ctx.sync_reply(ctx.sync("m", 1, group_id="")).error is Error.INVALID_GROUP_ID


def test_sync_for_unknown_group_is_unknown_member_id() -> None:
    ctx = Context()
    assert ctx.sync_reply(ctx.sync("m", 1)).error is Error.UNKNOWN_MEMBER_ID
    assert not ctx.has_group()


def test_sync_for_group_without_members_is_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    r = ctx.sync_reply(ctx.sync(sg.leader, sg.generation + 1))
    assert r.error is Error.UNKNOWN_MEMBER_ID


def test_sync_for_dead_group_is_coordinator_not_available() -> None:
    ctx = Context()
    ctx.commit()
    ctx.complete_writes()
    ctx.delete()
    assert ctx.sync_reply(ctx.sync("m", 0)).error is Error.COORDINATOR_NOT_AVAILABLE


def test_sync_from_unknown_member_is_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    assert ctx.sync_reply(ctx.sync("ghost", sg.generation)).error is Error.UNKNOWN_MEMBER_ID


def test_sync_with_fenced_instance_is_fenced_before_generation_check() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    r = ctx.sync_reply(ctx.sync(sg.member_ids[1], 99, instance_id="i0"))
    assert r.error is Error.FENCED_INSTANCE_ID
    r2 = ctx.sync_reply(ctx.sync(sg.member_ids[1], 99, instance_id="unknown"))
    assert r2.error is Error.UNKNOWN_MEMBER_ID


def test_sync_with_wrong_generation_is_illegal_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    r = ctx.sync_reply(ctx.sync(sg.leader, sg.generation + 1))
    assert r.error is Error.ILLEGAL_GENERATION
    assert (r.protocol_type, r.protocol_name, r.assignment) == (None, None, b"")


def test_generation_is_checked_before_protocol_consistency() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    r = ctx.sync_reply(ctx.sync(sg.leader, sg.generation - 1, protocol_type="connect"))
    assert r.error is Error.ILLEGAL_GENERATION


@pytest.mark.parametrize(
    ("ptype", "pname"), [("connect", None), (None, "roundrobin"), ("connect", "range")]
)
def test_sync_with_mismatching_protocol_type_or_name_is_inconsistent(
    ptype: str | None, pname: str | None
) -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    r = ctx.sync_reply(
        ctx.sync(sg.followers[0], sg.generation, protocol_type=ptype, protocol_name=pname)
    )
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL


def test_sync_with_matching_protocol_type_and_name_is_accepted() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    r = ctx.sync_reply(
        ctx.sync(sg.followers[0], sg.generation, protocol_type="consumer", protocol_name="range")
    )
    assert r.error is Error.NONE
    assert r.assignment == b"assign-1"


def test_sync_in_preparing_rebalance_is_rebalance_in_progress() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader)
    r = ctx.sync_reply(ctx.sync(sg.followers[0], sg.generation))
    assert r.error is Error.REBALANCE_IN_PROGRESS


# ---- protocol.md §6.2 CompletingRebalance ------------------------------------------------------


def test_follower_sync_waits_for_the_leaders_assignment_to_be_durable() -> None:
    ctx = Context()
    (a, b, c), gen = _completing(ctx)
    hb = ctx.sync(b, gen)
    assert not ctx.answered(hb)
    assert ctx.records == []
    ha = ctx.sync(a, gen, assignments=[(a, b"A"), (b, b"B"), (c, b"C")])
    assert not ctx.answered(ha) and not ctx.answered(hb)  # no reply before the write
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    rec = ctx.last_group_record()
    assert rec is not None
    assert rec.generation == gen
    assert (rec.protocol_type, rec.protocol_name, rec.leader) == ("consumer", "range", a)
    assert [(m.member_id, m.assignment) for m in rec.members] == [(a, b"A"), (b, b"B"), (c, b"C")]
    assert all(m.subscription == subscription("t") for m in rec.members)
    assert rec.members[0].session_timeout_ms == 10_000
    assert rec.members[0].rebalance_timeout_ms == REBALANCE_MS
    ctx.complete_writes()
    ra, rb = ctx.sync_reply(ha), ctx.sync_reply(hb)
    assert (ra.error, ra.assignment, ra.protocol_type, ra.protocol_name) == (
        Error.NONE,
        b"A",
        "consumer",
        "range",
    )
    assert rb.assignment == b"B"
    assert ctx.state() is GroupState.STABLE
    # a late follower gets its assignment at once in Stable
    rc = ctx.sync_reply(ctx.sync(c, gen))
    assert rc.assignment == b"C"
    assert ctx.group().pending_sync == set()


def test_leader_assignment_missing_members_get_empty_bytes_and_unknown_ids_are_ignored() -> None:
    ctx = Context()
    (a, b, c), gen = _completing(ctx)
    ctx.sync(a, gen, assignments=[(a, b"A"), ("stranger", b"S")])
    rec = ctx.last_group_record()
    assert rec is not None
    assert [(m.member_id, m.assignment) for m in rec.members] == [(a, b"A"), (b, b""), (c, b"")]
    ctx.complete_writes()
    assert ctx.group().members[b].assignment == b""
    assert "stranger" not in ctx.group().members


def test_sync_success_resets_session_timers_of_parked_members() -> None:
    ctx = Context()
    (a, b, _c), gen = _completing(ctx, session_ms=20_000)
    ctx.advance(5_000)
    ctx.sync(b, gen)
    ctx.advance(5_000)
    ctx.sync(a, gen, assignments=[])
    ctx.advance(5_000)
    ctx.complete_writes()
    assert ctx.coordinator.timers[("hb", GROUP, b)] == ctx.now + 20_000
    assert ctx.coordinator.timers[("hb", GROUP, a)] == ctx.now + 20_000


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (AppendFailure.NOT_OWNER, Error.NOT_COORDINATOR),
        (AppendFailure.STORAGE, Error.NOT_COORDINATOR),
        (AppendFailure.TIMEOUT, Error.COORDINATOR_NOT_AVAILABLE),
        (AppendFailure.TOO_LARGE, Error.UNKNOWN_SERVER_ERROR),
    ],
)
def test_sync_write_failure_answers_mapped_error_and_rebalances(
    failure: AppendFailure, error: Error
) -> None:
    ctx = Context()
    (a, b, _c), gen = _completing(ctx)
    hb = ctx.sync(b, gen)
    ha = ctx.sync(a, gen, assignments=[(a, b"A"), (b, b"B")])
    ctx.fail_writes(failure)
    for h in (ha, hb):
        r = ctx.sync_reply(h)
        assert r.error is error
        assert (r.protocol_type, r.protocol_name, r.assignment) == (None, None, b"")
    group = ctx.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation == gen
    assert all(m.assignment == b"" for m in group.members.values())
    assert ctx.log == []


def test_assignment_write_completing_after_a_new_rebalance_is_ignored() -> None:
    ctx = Context()
    (a, b, c), gen = _completing(ctx)
    hb = ctx.sync(b, gen)
    ha = ctx.sync(a, gen, assignments=[(a, b"A"), (b, b"B"), (c, b"C")])
    ctx.leave(c)  # -> PreparingRebalance: parked syncs answered REBALANCE_IN_PROGRESS
    assert ctx.sync_reply(ha).error is Error.REBALANCE_IN_PROGRESS
    assert ctx.sync_reply(hb).error is Error.REBALANCE_IN_PROGRESS
    ctx.complete_writes()
    group = ctx.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert all(m.assignment == b"" for m in group.members.values())


def test_assignment_write_of_an_older_generation_is_ignored() -> None:
    ctx = Context()
    (a, b), gen = _completing(ctx, n=2)
    ctx.sync(a, gen, assignments=[(a, b"A1"), (b, b"B1")])
    # everybody re-joins before the write completes: a new generation in CompletingRebalance
    ja = ctx.join(member_id=a, protocols=[("range", b"new")])
    ctx.join(member_id=b)
    gen2 = ctx.join_reply(ja).generation_id
    assert gen2 == gen + 1
    ctx.complete_writes()
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    assert ctx.group().members[a].assignment == b""


def test_second_sync_while_parked_supersedes_the_first() -> None:
    ctx = Context()
    (a, b), gen = _completing(ctx, n=2)
    h1 = ctx.sync(b, gen)
    h2 = ctx.sync(b, gen)
    assert ctx.sync_reply(h1).error is Error.REBALANCE_IN_PROGRESS
    ctx.sync(a, gen, assignments=[(b, b"B")])
    ctx.complete_writes()
    assert ctx.sync_reply(h2).assignment == b"B"


def test_parked_sync_of_a_member_that_leaves_is_answered() -> None:
    ctx = Context()
    (_a, b, _c), gen = _completing(ctx)
    hb = ctx.sync(b, gen)
    ctx.leave(LeaveMember(b))
    assert ctx.sync_reply(hb).error is Error.UNKNOWN_MEMBER_ID


# ---- protocol.md §6.3 Stable -------------------------------------------------------------------


def test_sync_in_stable_returns_stored_assignment_and_ignores_provided_one() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    n = len(ctx.records)
    r = ctx.sync_reply(ctx.sync(sg.leader, sg.generation, assignments=[(sg.leader, b"new")]))
    assert r.error is Error.NONE
    assert r.assignment == b"assign-0"
    assert len(ctx.records) == n
    assert ctx.group().members[sg.leader].assignment == b"assign-0"


def test_sync_in_stable_resets_session_timer() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.advance(4_000)
    ctx.sync(sg.followers[0], sg.generation)
    assert ctx.coordinator.timers[("hb", GROUP, sg.followers[0])] == ctx.now + 10_000


def test_sync_in_completing_rebalance_by_leader_after_leaving_member_uses_current_members() -> None:
    ctx = Context()
    (a, b, c), gen = _completing(ctx)
    ctx.sync(a, gen, assignments=[(a, b"A"), (b, b"B"), (c, b"C")])
    ctx.complete_writes()
    group = ctx.group()
    assert [m.assignment for m in group.members.values()] == [b"A", b"B", b"C"]


def test_leader_resending_sync_while_assignment_write_in_flight_writes_once() -> None:
    ctx = Context()
    (a, b), gen = _completing(ctx, n=2)
    h1 = ctx.sync(a, gen, assignments=[(a, b"A1"), (b, b"B1")])
    h2 = ctx.sync(a, gen, assignments=[(a, b"A2"), (b, b"B2")])
    assert ctx.sync_reply(h1).error is Error.REBALANCE_IN_PROGRESS  # superseded
    assert len(ctx.group_records()) == 1  # what is live is exactly what is durable
    ctx.complete_writes()
    assert ctx.sync_reply(h2).assignment == b"A1"
    loaded = ctx.reloaded().group()
    assert {m: v.assignment for m, v in loaded.members.items()} == {a: b"A1", b: b"B1"}
    assert {m: v.assignment for m, v in ctx.group().members.items()} == {a: b"A1", b: b"B1"}


def test_leader_sync_after_failed_assignment_write_of_older_generation_writes_again() -> None:
    ctx = Context()
    (a, b), gen = _completing(ctx, n=2)
    ctx.sync(a, gen, assignments=[(a, b"A1")])
    ctx.fail_writes()  # -> PreparingRebalance; everybody re-joins
    ha = ctx.join(member_id=a)
    ctx.join(member_id=b)
    gen2 = ctx.join_reply(ha).generation_id
    h = ctx.sync(a, gen2, assignments=[(a, b"A2")])
    assert len(ctx.group_records()) == 2
    ctx.complete_writes()
    assert ctx.sync_reply(h).assignment == b"A2"
