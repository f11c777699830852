"""Rebalance timing (protocol.md §5.2, §5.3, §5.4, §5.6): initial-delay windows, the rebalance
timeout, the only-static-not-rejoined re-arm and pending-sync expiry."""

from __future__ import annotations

from app.group.config import CoreConfig
from app.group.messages import Error
from app.group.state import GroupState
from tests.unit.context import DELAY_MS as D
from tests.unit.context import GROUP, REBALANCE_MS, SESSION_MS, Context

LONG_SESSION = 2 * REBALANCE_MS  # members outlive a rebalance timeout without heartbeats

# ---- initial delay (from Empty) ----------------------------------------------------------------


def test_single_member_initial_rebalance_completes_after_exactly_the_delay() -> None:
    ctx = Context()
    _, h = ctx.join_dynamic()
    ctx.advance(D - 1)
    assert not ctx.answered(h)  # never completes early, though everybody has joined
    ctx.advance(1)
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert r.generation_id == 1


def test_initial_rebalance_budget_3d_with_a_joiner_in_every_window_lasts_d_d_d() -> None:
    ctx = Context()
    _, h0 = ctx.join_dynamic(rebalance_ms=3 * D)  # R0 = 3D
    hs = [h0]
    for window in range(3):
        ctx.advance(D // 2)
        _, h = ctx.join_dynamic(rebalance_ms=3 * D)
        hs.append(h)
        ctx.advance(D - D // 2 - (1 if window == 2 else 0))
        assert not any(ctx.answered(x) for x in hs)
    assert ctx.now == 3 * D - 1
    ctx.advance(1)
    assert all(ctx.join_reply(x).error is Error.NONE for x in hs)
    assert ctx.join_reply(h0).generation_id == 1
    assert len(ctx.join_reply(h0).members) == 4


def test_initial_windows_are_fixed_size_not_doubling() -> None:
    ctx = Context()
    _, h0 = ctx.join_dynamic(rebalance_ms=10 * D)
    # a joiner in each of the first four windows: each window is D long
    for _ in range(4):
        ctx.join_dynamic(rebalance_ms=10 * D)
        ctx.advance(D)
        assert not ctx.answered(h0)
        deadline = ctx.coordinator.timers[("join", GROUP)]
        assert deadline == ctx.now + D
    # no joiner in the fifth window: completes at its end
    ctx.advance(D)
    assert ctx.join_reply(h0).error is Error.NONE
    assert ctx.now == 5 * D


def test_initial_rebalance_without_new_joiners_completes_after_one_window() -> None:
    ctx = Context()
    _, ha = ctx.join_dynamic(rebalance_ms=10 * D)
    _, hb = ctx.join_dynamic(rebalance_ms=10 * D)  # same instant, inside window 1
    ctx.advance(D)
    assert not ctx.answered(ha)  # b was added during window 1: another window
    ctx.advance(D - 1)
    assert not ctx.answered(ha)
    ctx.advance(1)
    assert ctx.join_reply(ha).error is ctx.join_reply(hb).error is Error.NONE


def test_initial_rebalance_with_budget_below_delay_completes_after_d_despite_joiners() -> None:
    ctx = Context()
    _, h0 = ctx.join_dynamic(rebalance_ms=D // 2)  # remaining = max(R0 - D, 0) = 0
    ctx.advance(D - 1)
    ctx.join_dynamic(rebalance_ms=D // 2)
    ctx.advance(1)
    assert ctx.join_reply(h0).error is Error.NONE
    assert len(ctx.join_reply(h0).members) == 2


def test_initial_rebalance_last_window_is_shortened_to_the_remaining_budget() -> None:
    ctx = Context()
    r0 = 5 * D // 2  # 2.5 D: windows D, D, D/2
    _, h0 = ctx.join_dynamic(rebalance_ms=r0)
    ctx.join_dynamic(rebalance_ms=r0)
    ctx.advance(D)
    ctx.join_dynamic(rebalance_ms=r0)
    ctx.advance(D)
    ctx.join_dynamic(rebalance_ms=r0)  # a joiner in the last window does not extend it
    ctx.advance(D // 2 - 1)
    assert not ctx.answered(h0)
    ctx.advance(1)
    assert ctx.join_reply(h0).error is Error.NONE
    assert ctx.now == r0


def test_initial_budget_uses_the_rebalance_timeout_when_the_rebalance_began() -> None:
    ctx = Context()
    _, h0 = ctx.join_dynamic(rebalance_ms=D)  # R0 = D: no extension at all
    ctx.join_dynamic(rebalance_ms=100 * D)  # a later, larger timeout does not extend it
    ctx.advance(D)
    assert ctx.join_reply(h0).error is Error.NONE


def test_initial_delay_applies_again_after_the_group_became_empty() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    assert ctx.state() is GroupState.EMPTY
    _, h = ctx.join_dynamic()
    ctx.advance(D - 1)
    assert not ctx.answered(h)
    ctx.advance(1)
    assert ctx.join_reply(h).generation_id == sg.generation + 2


def test_initial_delay_zero_completes_on_the_next_timer_poll() -> None:
    ctx = Context(CoreConfig(initial_rebalance_delay_ms=0))
    _, h = ctx.join_dynamic()
    ctx.advance(0)
    assert ctx.join_reply(h).error is Error.NONE


# ---- rebalance timeout (non-initial) -----------------------------------------------------------


def test_rebalance_completes_as_soon_as_every_member_rejoined() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h1 = ctx.join(member_id=sg.leader)
    h2 = ctx.join(member_id=sg.followers[0])
    assert ctx.join_reply(h1).generation_id == sg.generation + 1
    assert ctx.join_reply(h2).generation_id == sg.generation + 1
    assert ("join", GROUP) not in ctx.coordinator.timers


def test_rebalance_timeout_forces_completion_and_drops_dynamic_non_joiners() -> None:
    ctx = Context()
    sg = ctx.stable_group(2, session_ms=LONG_SESSION)
    h = ctx.join(member_id=sg.leader, session_ms=LONG_SESSION)
    ctx.advance(REBALANCE_MS - 1)
    assert not ctx.answered(h)
    ctx.advance(1)
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert [m.member_id for m in r.members] == [sg.leader]
    assert list(ctx.group().members) == [sg.leader]


def test_rebalance_timeout_keeps_static_members_that_did_not_rejoin() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1", None], session_ms=LONG_SESSION)
    static_follower = sg.member_ids[1]
    dynamic_follower = sg.member_ids[2]
    h = ctx.join(member_id=sg.leader, instance_id="i0", session_ms=LONG_SESSION)
    ctx.advance(REBALANCE_MS)
    r = ctx.join_reply(h)
    assert [m.member_id for m in r.members] == [sg.leader, static_follower]
    assert r.members[1].group_instance_id == "i1"
    assert dynamic_follower not in ctx.group().members
    assert ctx.group().static_members == {"i0": sg.leader, "i1": static_follower}
    assert ctx.group().pending_sync == {sg.leader, static_follower}


def test_only_static_members_not_rejoined_rearms_join_timer_in_same_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"], session_ms=60_000)
    dyn, h_dyn = ctx.join_dynamic()  # a new dynamic member triggers the rebalance
    ctx.leave(dyn)  # ... and leaves: only non-rejoined statics remain
    assert ctx.join_reply(h_dyn).error is Error.UNKNOWN_MEMBER_ID
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    ctx.advance(REBALANCE_MS)
    group = ctx.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation == sg.generation
    assert ctx.coordinator.timers[("join", GROUP)] == ctx.now + REBALANCE_MS
    # one static member returns (replacement): the next timer completes the join
    new_id = ctx.next_member_id("i0")
    h = ctx.join(instance_id="i0", session_ms=60_000)
    ctx.advance(REBALANCE_MS)
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert r.member_id == new_id
    assert r.generation_id == sg.generation + 1
    assert r.leader == new_id


def test_statics_that_never_return_expire_by_session_and_group_becomes_empty() -> None:
    ctx = Context()
    ctx.stable_group(["i0", "i1"])
    dyn, _ = ctx.join_dynamic()
    ctx.leave(dyn)
    ctx.advance(SESSION_MS)
    assert ctx.state() is GroupState.EMPTY
    assert ctx.group().members == {}


# ---- pending-sync expiry -----------------------------------------------------------------------


def _completing(ctx: Context, n: int = 3) -> tuple[list[str], list[int]]:
    ids, hs = [], []
    for _ in range(n):
        mid, h = ctx.join_dynamic(session_ms=LONG_SESSION)
        ids.append(mid)
        hs.append(h)
    ctx.complete_initial_rebalance(hs)
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    return ids, hs


def test_pending_sync_expiry_removes_members_that_never_synced_and_rebalances() -> None:
    ctx = Context()
    (a, b, c), _ = _completing(ctx)
    ctx.sync(a, 1, assignments=[(a, b"A"), (b, b"B"), (c, b"C")])
    ctx.complete_writes()
    assert ctx.state() is GroupState.STABLE
    hb = ctx.sync(b, 1)
    assert ctx.sync_reply(hb).assignment == b"B"
    assert ctx.heartbeat(a, 1) is Error.NONE
    assert ctx.heartbeat(b, 1) is Error.NONE
    ctx.advance(REBALANCE_MS - 1)
    assert c in ctx.group().members
    ctx.advance(1)
    group = ctx.group()
    assert c not in group.members
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.generation == 1


def test_pending_sync_expiry_in_completing_rebalance_when_leader_never_syncs() -> None:
    ctx = Context()
    (a, b, c), _ = _completing(ctx)
    hb = ctx.sync(b, 1)
    hc = ctx.sync(c, 1)
    ctx.advance(REBALANCE_MS)
    assert a not in ctx.group().members
    assert ctx.sync_reply(hb).error is Error.REBALANCE_IN_PROGRESS
    assert ctx.sync_reply(hc).error is Error.REBALANCE_IN_PROGRESS
    assert ctx.state() is GroupState.PREPARING_REBALANCE


def test_pending_sync_timer_is_cancelled_once_everybody_synced() -> None:
    ctx = Context()
    (a, b, c), _ = _completing(ctx)
    key = ("sync", GROUP, "1")
    assert key in ctx.coordinator.timers
    for m in (b, c):
        ctx.sync(m, 1)
    assert key in ctx.coordinator.timers
    ctx.sync(a, 1, assignments=[])
    assert key not in ctx.coordinator.timers
    ctx.complete_writes()
    ctx.advance(REBALANCE_MS)
    assert ctx.state() is GroupState.STABLE


def test_stale_pending_sync_timer_of_an_older_generation_does_nothing() -> None:
    ctx = Context()
    (a, b, _c), _ = _completing(ctx)
    # a new rebalance cancels generation 1's pending-sync timer
    ha = ctx.join(member_id=a, protocols=[("range", b"changed")])
    assert ("sync", GROUP, "1") not in ctx.coordinator.timers
    ctx.join(member_id=b)
    ctx.advance(REBALANCE_MS)
    assert ctx.join_reply(ha).generation_id == 2
    assert set(ctx.group().members) == {a, b}


def test_new_member_join_timeout_is_five_minutes() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, session_ms=SESSION_MS)
    # the old member keeps heartbeating but never rejoins; rebalance timeout is huge
    newcomer, h = ctx.join_dynamic(rebalance_ms=600_000)
    assert ctx.coordinator.timers[("hb", GROUP, newcomer)] == ctx.now + 300_000
    for _ in range(59):
        ctx.advance(SESSION_MS // 2)
        assert ctx.heartbeat(sg.leader, sg.generation) is Error.REBALANCE_IN_PROGRESS
    ctx.advance(SESSION_MS // 2 - 1)
    assert not ctx.answered(h)
    ctx.advance(1)  # 300 s after the join
    r = ctx.join_reply(h)
    assert r.error is Error.UNKNOWN_MEMBER_ID
    assert r.member_id == ""
    assert newcomer not in ctx.group().members


def test_existing_member_rejoining_during_initial_window_does_not_extend_it() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic(rebalance_ms=10 * D)
    ctx.advance(D // 2)
    ha2 = ctx.join(member_id=a, rebalance_ms=10 * D)  # a re-join, not a new member
    assert ctx.join_reply(ha).error is Error.REBALANCE_IN_PROGRESS  # superseded
    ctx.advance(D - D // 2)
    assert ctx.join_reply(ha2).error is Error.NONE
    assert ctx.now == D


def test_new_static_member_during_initial_window_extends_it() -> None:
    ctx = Context()
    h0 = ctx.join(instance_id="i0", rebalance_ms=10 * D)
    ctx.advance(D - 1)
    ctx.join(instance_id="i1", rebalance_ms=10 * D)
    ctx.advance(1)
    assert not ctx.answered(h0)
    ctx.advance(D)
    assert ctx.join_reply(h0).error is Error.NONE


def test_initial_windows_extend_again_when_a_group_restarts_from_empty() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    _, h0 = ctx.join_dynamic(rebalance_ms=10 * D)  # previous state Empty (Java's rule)
    ctx.join_dynamic(rebalance_ms=10 * D)
    ctx.advance(D)
    assert not ctx.answered(h0)
    ctx.advance(D)
    assert ctx.join_reply(h0).generation_id == sg.generation + 2
