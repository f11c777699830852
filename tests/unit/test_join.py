"""JoinGroup (protocol.md §4, §5.4, §5.5)."""

from __future__ import annotations

import pytest

from app.group.config import CoreConfig
from app.group.messages import Error, JoinGroupMember
from app.group.state import GroupState
from tests.unit.context import (
    DELAY_MS,
    GROUP,
    REBALANCE_MS,
    SESSION_MS,
    Context,
    subscription,
)

# ---- protocol.md §4.1 request-level checks, in order -------------------------------------------


def test_empty_group_id_is_invalid_group_id_and_echoes_member_id() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(group_id="", member_id="m-1"))
    assert r.error is Error.INVALID_GROUP_ID
    assert r.member_id == "m-1"
    assert (r.generation_id, r.leader, r.protocol_name, r.protocol_type) == (-1, "", None, None)
    assert r.members == ()
    assert ctx.coordinator.groups == {}


def test_invalid_group_id_is_checked_before_session_timeout() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(group_id="", session_ms=1))
    assert r.error is Error.INVALID_GROUP_ID


@pytest.mark.parametrize("session_ms", [5_999, 1_800_001, 0])
def test_session_timeout_outside_bounds_is_rejected_without_creating_group(session_ms: int) -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(session_ms=session_ms))
    assert r.error is Error.INVALID_SESSION_TIMEOUT
    assert r.generation_id == -1
    assert not ctx.has_group()


@pytest.mark.parametrize("session_ms", [6_000, 1_800_000])
def test_session_timeout_bounds_are_inclusive(session_ms: int) -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(session_ms=session_ms))
    assert r.error is Error.MEMBER_ID_REQUIRED


def test_session_timeout_is_checked_before_the_group_lookup() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(member_id="ghost-1", session_ms=10))
    assert r.error is Error.INVALID_SESSION_TIMEOUT
    assert r.member_id == "ghost-1"


def test_known_member_id_on_unknown_group_is_unknown_member_id_and_creates_nothing() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(member_id="ghost-1"))
    assert r.error is Error.UNKNOWN_MEMBER_ID
    assert r.member_id == "ghost-1"
    assert not ctx.has_group()


# ---- protocol.md §4.4 new member: MEMBER_ID_REQUIRED (KIP-394) ---------------------------------


def test_first_join_v4_gets_member_id_required_and_group_stays_empty() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(client_id="consumer"))
    assert r.error is Error.MEMBER_ID_REQUIRED
    assert r.member_id == "consumer-1"  # <clientId>-<unique>
    assert r.generation_id == -1
    assert ctx.state() is GroupState.EMPTY
    assert ctx.group().pending_members == {"consumer-1"}
    assert ctx.group().members == {}
    assert ctx.records == []


def test_second_join_with_issued_id_adds_member_and_starts_rebalance() -> None:
    ctx = Context()
    mid, h = ctx.join_dynamic()
    assert not ctx.answered(h)
    group = ctx.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert list(group.members) == [mid]
    assert group.pending_members == set()
    assert group.leader_id == mid
    assert group.members[mid].is_new


def test_every_unknown_id_join_gets_a_fresh_member_id() -> None:
    ctx = Context()
    a = ctx.join_reply(ctx.join()).member_id
    b = ctx.join_reply(ctx.join()).member_id
    assert a != b
    assert ctx.group().pending_members == {a, b}


def test_v3_join_without_member_id_is_added_directly() -> None:
    ctx = Context()
    h = ctx.join(require_known_member_id=False)
    assert not ctx.answered(h)
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    ctx.advance(DELAY_MS)
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert r.member_id == "client-1"
    assert r.leader == r.member_id
    assert r.generation_id == 1


def test_pending_member_id_expires_after_its_session_timeout() -> None:
    ctx = Context()
    mid = ctx.join_reply(ctx.join(session_ms=SESSION_MS)).member_id
    ctx.advance(SESSION_MS - 1)
    assert mid in ctx.group().pending_members
    ctx.advance(1)
    assert not ctx.has_group() or mid not in ctx.group().pending_members
    r = ctx.join_reply(ctx.join(member_id=mid))
    assert r.error is Error.UNKNOWN_MEMBER_ID


def test_pending_member_blocks_rebalance_completion_until_it_expires() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h_leader = ctx.join(member_id=sg.leader)  # leader re-join: rebalance
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    newcomer = ctx.join_reply(ctx.join(session_ms=SESSION_MS)).member_id
    h_follower = ctx.join(member_id=sg.followers[0])
    assert not ctx.answered(h_leader)  # everybody parked but a pending id is outstanding
    ctx.advance(SESSION_MS)
    assert newcomer not in ctx.group().pending_members
    assert ctx.join_reply(h_leader).generation_id == sg.generation + 1
    assert ctx.join_reply(h_follower).error is Error.NONE


def test_pending_member_completing_its_join_unblocks_rebalance() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    newcomer = ctx.join_reply(ctx.join()).member_id  # pending; no rebalance yet
    assert ctx.state() is GroupState.STABLE
    h_leader = ctx.join(member_id=sg.leader)
    assert not ctx.answered(h_leader)  # all members parked, but one id is pending
    h_new = ctx.join(member_id=newcomer)
    r = ctx.join_reply(h_leader)
    assert r.error is Error.NONE
    assert [m.member_id for m in r.members] == [sg.leader, newcomer]
    assert ctx.join_reply(h_new).members == ()


# ---- protocol.md §4.2 capacity -----------------------------------------------------------------


def test_new_member_over_max_size_in_stable_gets_group_max_size_reached() -> None:
    ctx = Context(CoreConfig(group_max_size=2))
    ctx.stable_group(2)
    first = ctx.join_reply(ctx.join())
    assert first.error is Error.GROUP_MAX_SIZE_REACHED
    assert first.member_id == ""
    assert ctx.state() is GroupState.STABLE
    assert ctx.group().pending_members == set()


def test_v3_new_member_over_max_size_is_rejected() -> None:
    ctx = Context(CoreConfig(group_max_size=1))
    ctx.stable_group(1)
    r = ctx.join_reply(ctx.join(require_known_member_id=False))
    assert r.error is Error.GROUP_MAX_SIZE_REACHED
    assert len(ctx.group().members) == 1


def test_existing_member_is_accepted_when_group_is_full() -> None:
    ctx = Context(CoreConfig(group_max_size=2))
    sg = ctx.stable_group(2)
    h = ctx.join(member_id=sg.leader)
    assert not ctx.answered(h)
    assert ctx.state() is GroupState.PREPARING_REBALANCE


def test_preparing_rebalance_counts_parked_joiners_not_members() -> None:
    ctx = Context(CoreConfig(group_max_size=2))
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader)  # 1 parked of 2 members
    # a newcomer is accepted while fewer than max members are parked
    newcomer = ctx.join_reply(ctx.join()).member_id
    h_new = ctx.join(member_id=newcomer)
    assert not ctx.answered(h_new)
    assert len(ctx.group().members) == 3
    # now two are parked: the old follower is rejected and removed
    r = ctx.join_reply(ctx.join(member_id=sg.followers[0]))
    assert r.error is Error.GROUP_MAX_SIZE_REACHED
    assert r.member_id == ""
    assert sg.followers[0] not in ctx.group().members


def test_parked_member_rejoining_is_accepted_when_parked_count_is_at_max() -> None:
    ctx = Context(CoreConfig(group_max_size=2))
    sg = ctx.stable_group(2)
    h1 = ctx.join(member_id=sg.leader)
    ctx.join_dynamic()
    assert ctx.group().awaiting_join_count == 2
    h2 = ctx.join(member_id=sg.leader)  # already parked: accepted, supersedes h1
    assert ctx.join_reply(h1).error is Error.REBALANCE_IN_PROGRESS
    assert not ctx.answered(h2)
    assert sg.leader in ctx.group().members


def test_empty_group_always_accepts_joiners() -> None:
    ctx = Context(CoreConfig(group_max_size=1))
    a = ctx.join_reply(ctx.join())
    b = ctx.join_reply(ctx.join())
    assert a.error is b.error is Error.MEMBER_ID_REQUIRED


def test_second_step_over_max_size_in_preparing_rebalance_is_rejected() -> None:
    ctx = Context(CoreConfig(group_max_size=1))
    a = ctx.join_reply(ctx.join()).member_id
    b = ctx.join_reply(ctx.join()).member_id
    ctx.join(member_id=a)
    r = ctx.join_reply(ctx.join(member_id=b))
    assert r.error is Error.GROUP_MAX_SIZE_REACHED
    assert list(ctx.group().members) == [a]


# ---- protocol.md §4.3 protocol checks ----------------------------------------------------------


def test_empty_protocol_type_on_empty_group_is_inconsistent_group_protocol() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(protocol_type=""))
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL
    assert r.member_id == ""
    assert not ctx.has_group()


def test_empty_protocol_list_on_empty_group_is_inconsistent_group_protocol() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(protocols=()))
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL


def test_different_protocol_type_is_inconsistent_group_protocol() -> None:
    ctx = Context()
    ctx.stable_group(1)
    r = ctx.join_reply(ctx.join(protocol_type="connect"))
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL
    assert r.member_id == ""


def test_no_protocol_supported_by_all_members_is_inconsistent_group_protocol() -> None:
    ctx = Context()
    ctx.stable_group(2, protocols=[("range", b"r"), ("roundrobin", b"rr")])
    r = ctx.join_reply(ctx.join(protocols=[("sticky", b"s")]))
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL
    ok = ctx.join_reply(ctx.join(protocols=[("sticky", b"s"), ("roundrobin", b"x")]))
    assert ok.error is Error.MEMBER_ID_REQUIRED


def test_existing_member_with_inconsistent_protocol_gets_its_member_id_echoed() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    r = ctx.join_reply(ctx.join(member_id=sg.leader, protocols=[("other", b"")]))
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL
    assert r.member_id == sg.leader
    assert ctx.state() is GroupState.STABLE


def test_protocol_check_comes_before_the_member_check() -> None:
    ctx = Context()
    ctx.stable_group(1)
    r = ctx.join_reply(ctx.join(member_id="ghost-9", protocol_type="other"))
    assert r.error is Error.INCONSISTENT_GROUP_PROTOCOL


# ---- protocol.md §4.6 existing member ----------------------------------------------------------


def test_unknown_member_id_on_existing_group_is_unknown_member_id() -> None:
    ctx = Context()
    ctx.stable_group(1)
    r = ctx.join_reply(ctx.join(member_id="ghost-9"))
    assert r.error is Error.UNKNOWN_MEMBER_ID
    assert r.member_id == "ghost-9"


def test_known_member_id_on_empty_group_is_unknown_member_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(1)
    ctx.leave(sg.leader)
    assert ctx.state() is GroupState.EMPTY
    r = ctx.join_reply(ctx.join(member_id=sg.leader))
    assert r.error is Error.UNKNOWN_MEMBER_ID


def test_dead_group_answers_new_and_existing_joiners_coordinator_not_available() -> None:
    ctx = Context()
    ctx.commit()  # a simple group with one offset
    ctx.complete_writes()
    ctx.delete()  # Dead until the tombstones are durable
    assert ctx.state() is GroupState.DEAD
    r = ctx.join_reply(ctx.join())
    assert r.error is Error.COORDINATOR_NOT_AVAILABLE
    assert r.member_id == ""
    r2 = ctx.join_reply(ctx.join(member_id="m-1"))
    assert r2.error is Error.COORDINATOR_NOT_AVAILABLE
    assert r2.member_id == "m-1"


def test_member_rejoin_in_preparing_rebalance_updates_protocols_and_parks() -> None:
    ctx = Context()
    sg = ctx.stable_group(2, protocols=[("range", b"a")])
    ctx.join(member_id=sg.leader, protocols=[("range", b"b")])
    h = ctx.join(member_id=sg.followers[0], protocols=[("range", b"c")], rebalance_ms=1234)
    member = ctx.group().members[sg.followers[0]]
    assert member.protocols == (("range", b"c"),)
    assert member.rebalance_timeout_ms == 1234
    r = ctx.join_reply(h)
    assert r.error is Error.NONE


def test_rejoin_with_same_metadata_in_completing_rebalance_returns_current_generation() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic()
    b, hb = ctx.join_dynamic()
    ctx.complete_initial_rebalance([ha, hb])
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    leader_again = ctx.join_reply(ctx.join(member_id=a))
    assert leader_again.error is Error.NONE
    assert leader_again.generation_id == 1
    assert leader_again.leader == a
    assert [m.member_id for m in leader_again.members] == [a, b]
    follower_again = ctx.join_reply(ctx.join(member_id=b))
    assert follower_again.members == ()
    assert follower_again.protocol_name == "range"
    assert ctx.state() is GroupState.COMPLETING_REBALANCE


def test_rejoin_with_changed_metadata_in_completing_rebalance_triggers_rebalance() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic()
    b, hb = ctx.join_dynamic()
    ctx.complete_initial_rebalance([ha, hb])
    h_sync = ctx.sync(b, 1)  # follower parked in sync
    h = ctx.join(member_id=a, protocols=[("range", subscription("t", "u"))])
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert not ctx.answered(h)
    assert ctx.sync_reply(h_sync).error is Error.REBALANCE_IN_PROGRESS


def test_leader_rejoin_in_stable_always_rebalances() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h = ctx.join(member_id=sg.leader)  # identical metadata
    assert not ctx.answered(h)
    assert ctx.state() is GroupState.PREPARING_REBALANCE


def test_follower_rejoin_with_changed_metadata_in_stable_rebalances() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h = ctx.join(member_id=sg.followers[0], protocols=[("range", subscription("t", "u"))])
    assert not ctx.answered(h)
    assert ctx.state() is GroupState.PREPARING_REBALANCE


def test_follower_rejoin_with_same_metadata_in_stable_is_answered_immediately() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    r = ctx.join_reply(ctx.join(member_id=sg.followers[0]))
    assert r.error is Error.NONE
    assert r.generation_id == sg.generation
    assert r.leader == sg.leader
    assert r.member_id == sg.followers[0]
    assert r.members == ()
    assert (r.protocol_type, r.protocol_name) == ("consumer", "range")
    assert ctx.state() is GroupState.STABLE


def test_second_join_while_parked_supersedes_the_first() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h1 = ctx.join(member_id=sg.leader)
    h2 = ctx.join(member_id=sg.leader)
    assert ctx.join_reply(h1).error is Error.REBALANCE_IN_PROGRESS  # implementation's choice
    assert ctx.group().awaiting_join_count == 1
    h3 = ctx.join(member_id=sg.followers[0])
    assert ctx.join_reply(h2).error is Error.NONE
    assert ctx.join_reply(h3).error is Error.NONE


# ---- protocol.md §4.8, §5.4 join completion ----------------------------------------------------


def test_join_completion_answers_leader_with_all_members_and_followers_with_none() -> None:
    ctx = Context()
    p = [("range", b"meta-a"), ("roundrobin", b"rr")]
    a, ha = ctx.join_dynamic(protocols=p)
    b, hb = ctx.join_dynamic(protocols=[("range", b"meta-b")])
    ctx.complete_initial_rebalance([ha, hb])
    ra, rb = ctx.join_reply(ha), ctx.join_reply(hb)
    assert ra.generation_id == rb.generation_id == 1
    assert ra.leader == rb.leader == a
    assert (ra.protocol_type, ra.protocol_name) == ("consumer", "range")
    assert ra.members == (
        JoinGroupMember(a, None, b"meta-a"),
        JoinGroupMember(b, None, b"meta-b"),
    )
    assert rb.members == ()
    assert not ra.skip_assignment and not rb.skip_assignment
    group = ctx.group()
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.pending_sync == {a, b}
    assert not any(m.is_new for m in group.members.values())


def test_join_completion_answers_the_leader_first_when_it_is_not_the_oldest_member() -> None:
    """The leader's reply goes out first (it assigns while the others' replies are made), also
    when an older member rejoined under a newer leader."""
    ctx = Context()
    ctx.stable_group(["a", "b", "c"], session_ms=2 * REBALANCE_MS)  # "a" outlives a rebalance
    a, b, c = ctx.group().members  # join order; "a" leads
    ctx.join(member_id=b, instance_id="b", protocols=[("range", subscription("t", "u"))])
    ctx.join(member_id=c, instance_id="c")
    ctx.advance(REBALANCE_MS)  # "a" did not rejoin: "b" leads the new generation
    assert ctx.group().leader_id == b
    # everybody rejoins: "a" (a metadata change), then "c", then "b" completes the join
    h_a = ctx.join(member_id=a, instance_id="a", protocols=[("range", subscription("t", "v"))])
    h_c = ctx.join(member_id=c, instance_id="c")
    h_b = ctx.join(member_id=b, instance_id="b")
    assert list(ctx.replies)[-3:] == [h_b, h_a, h_c]  # in the order they were answered
    leader_reply = ctx.join_reply(h_b)
    assert leader_reply.leader == b
    assert [m.member_id for m in leader_reply.members] == [a, b, c]  # the list keeps join order
    assert list(ctx.group().members) == [a, b, c]


def test_no_record_is_written_when_a_rebalance_starts_or_completes_with_members() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    n = len(ctx.records)
    h1 = ctx.join(member_id=sg.leader)
    ctx.join(member_id=sg.followers[0])
    assert ctx.join_reply(h1).error is Error.NONE
    assert len(ctx.records) == n


def test_join_completion_removes_dynamic_members_that_did_not_rejoin() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    h = ctx.join(member_id=sg.leader)
    ctx.join(member_id=sg.followers[0])
    ctx.advance(REBALANCE_MS)
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert [m.member_id for m in r.members] == [sg.leader, sg.followers[0]]
    assert list(ctx.group().members) == [sg.leader, sg.followers[0]]
    assert ("hb", GROUP, sg.followers[1]) not in ctx.coordinator.timers
    assert ctx.heartbeat(sg.followers[1], r.generation_id) is Error.UNKNOWN_MEMBER_ID


def test_leader_that_does_not_rejoin_is_replaced_by_oldest_parked_member() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    f1, f2 = sg.followers
    # f2 changes its metadata (rebalance) and parks first; f1 parks next; the leader never
    # re-joins
    h2 = ctx.join(member_id=f2, protocols=[("range", subscription("t", "u"))])
    h1 = ctx.join(member_id=f1)
    ctx.advance(REBALANCE_MS)
    r1, r2 = ctx.join_reply(h1), ctx.join_reply(h2)
    assert r1.leader == r2.leader == f1  # oldest parked member (join order), not park order
    assert [m.member_id for m in r1.members] == [f1, f2]
    assert r2.members == ()
    assert sg.leader not in ctx.group().members


def test_leader_leaving_hands_leadership_to_oldest_remaining_member() -> None:
    ctx = Context()
    sg = ctx.stable_group(3)
    ctx.leave(sg.leader)
    assert ctx.group().leader_id == sg.followers[0]


def test_join_completion_into_empty_bumps_generation_and_writes_empty_record() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.leave(sg.leader, sg.followers[0])
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.generation == sg.generation + 1
    assert group.protocol_name is None
    assert group.protocol_type == "consumer"
    rec = ctx.last_group_record()
    assert rec is not None
    assert rec.members == ()
    assert rec.generation == sg.generation + 1
    assert rec.protocol_name is None
    assert rec.leader is None
    assert rec.protocol_type == "consumer"
    assert rec.current_state_timestamp == ctx.now


# ---- protocol.md §5.5 protocol selection -------------------------------------------------------


def _initial(ctx: Context, *protocol_lists: list[tuple[str, bytes]]) -> list[int]:
    hs = [ctx.join_dynamic(protocols=p)[1] for p in protocol_lists]
    ctx.complete_initial_rebalance(hs)
    return hs


def test_protocol_vote_picks_the_most_voted_common_protocol() -> None:
    ctx = Context()
    hs = _initial(
        ctx,
        [("range", b""), ("roundrobin", b"")],
        [("roundrobin", b""), ("range", b"")],
        [("roundrobin", b""), ("range", b""), ("sticky", b"")],
    )
    assert ctx.join_reply(hs[0]).protocol_name == "roundrobin"


def test_protocol_vote_ignores_protocols_not_supported_by_everyone() -> None:
    ctx = Context()
    hs = _initial(
        ctx,
        [("sticky", b""), ("range", b"")],
        [("sticky", b""), ("range", b"")],
        [("range", b"")],
    )
    assert ctx.join_reply(hs[0]).protocol_name == "range"


def test_protocol_vote_tie_goes_to_oldest_members_preference() -> None:
    ctx = Context()
    hs = _initial(ctx, [("b", b""), ("a", b"")], [("a", b""), ("b", b"")])
    assert ctx.join_reply(hs[0]).protocol_name == "b"
    ctx2 = Context()
    hs2 = _initial(ctx2, [("a", b""), ("b", b"")], [("b", b""), ("a", b"")])
    assert ctx2.join_reply(hs2[0]).protocol_name == "a"


def test_protocol_vote_tie_skips_oldest_members_non_tied_preferences() -> None:
    ctx = Context()
    hs = _initial(
        ctx,
        [("c", b""), ("b", b""), ("a", b"")],
        [("a", b""), ("b", b""), ("c", b"")],
        [("a", b""), ("c", b""), ("b", b"")],
        [("b", b""), ("a", b""), ("c", b"")],
    )
    # votes: c=1, a=2, b=1 -> a wins outright; then a tie case below
    assert ctx.join_reply(hs[0]).protocol_name == "a"
    ctx2 = Context()
    hs2 = _initial(
        ctx2,
        [("c", b""), ("b", b""), ("a", b"")],
        [("a", b""), ("b", b"")],
        [("b", b""), ("a", b"")],
        [("c", b""), ("a", b"")],
    )
    # common: a (c and b not supported by all). Everyone votes a.
    assert ctx2.join_reply(hs2[0]).protocol_name == "a"
    ctx3 = Context()
    hs3 = _initial(
        ctx3,
        [("c", b""), ("b", b""), ("a", b"")],
        [("a", b""), ("b", b""), ("c", b"")],
        [("b", b""), ("a", b""), ("c", b"")],
        [("a", b""), ("c", b""), ("b", b"")],
        [("b", b""), ("c", b""), ("a", b"")],
    )
    # votes: c=1, a=2, b=2: tie between a and b; the oldest prefers c, then b
    assert ctx3.join_reply(hs3[0]).protocol_name == "b"


def test_join_response_metadata_is_for_the_selected_protocol() -> None:
    ctx = Context()
    hs = _initial(
        ctx,
        [("range", b"R1"), ("roundrobin", b"RR1")],
        [("roundrobin", b"RR2"), ("range", b"R2")],
        [("roundrobin", b"RR3")],
    )
    r = ctx.join_reply(hs[0])
    assert r.protocol_name == "roundrobin"
    assert [m.metadata for m in r.members] == [b"RR1", b"RR2", b"RR3"]


def test_group_rebalance_timeout_is_the_max_over_members() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    ctx.join(member_id=sg.leader, rebalance_ms=50_000)
    assert ctx.group().rebalance_timeout_ms() == 50_000
    assert ctx.coordinator.timers[("join", GROUP)] == ctx.now + 50_000


def test_member_ids_handed_out_and_unused_are_bounded() -> None:
    """A flood of first joins (MEMBER_ID_REQUIRED) cannot grow a group without bound."""
    ctx = Context(CoreConfig(max_pending_members=3, initial_rebalance_delay_ms=0))
    errors = [ctx.join_reply(ctx.join(client_id=f"c{i}")).error for i in range(5)]
    assert errors == [Error.MEMBER_ID_REQUIRED] * 3 + [Error.GROUP_MAX_SIZE_REACHED] * 2
    # once a pending id expires its place is free again
    ctx.advance(SESSION_MS + 1)
    assert ctx.join_reply(ctx.join(client_id="late")).error == Error.MEMBER_ID_REQUIRED


def test_a_member_id_keeps_only_the_first_64_characters_of_its_prefix() -> None:
    ctx = Context()
    r = ctx.join_reply(ctx.join(client_id="c" * 5000))
    assert r.error is Error.MEMBER_ID_REQUIRED
    assert r.member_id.startswith("c" * 64 + "-") and len(r.member_id) < 64 + 40
