"""Replay, loading and unloading (protocol.md §10)."""

from __future__ import annotations

import gc

from hypothesis import given, settings

from app.group.config import CoreConfig
from app.group.coordinator import GroupCoordinator
from app.group.messages import Error
from app.group.records import (
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    RegistrationValue,
    group_record,
    offset_record,
    registration_record,
)
from app.group.state import GroupState
from tests.storage.compaction_cases import (
    compacted,
    histories_with_registrations,
    replayed_state,
)
from tests.unit.context import GROUP, REBALANCE_MS, SESSION_MS, Context


def _member(mid: str, instance: str | None = None, assignment: bytes = b"") -> MemberValue:
    sub = b"sub-" + mid.encode()
    return MemberValue(mid, instance, "cid", "host", 20_000, 8_000, sub, assignment)


def _stable_value(*members: MemberValue, generation: int = 4) -> GroupMetadataValue:
    return GroupMetadataValue("consumer", generation, "range", members[0].member_id, 123, members)


def _loaded(*records: object, config: CoreConfig | None = None, now: int = 1_000) -> Context:
    ctx = Context(config, now=now, load=False)
    for r in records:
        ctx.coordinator.replay(r)  # type: ignore[arg-type]
    ctx._absorb(ctx.coordinator.on_loaded(now))
    return ctx


# ---- replay ------------------------------------------------------------------------------------


def test_group_record_with_members_loads_as_stable_with_everything_restored() -> None:
    value = _stable_value(_member("a", "ia", b"A"), _member("b", None, b"B"))
    ctx = _loaded(group_record(GROUP, value))
    group = ctx.group()
    assert group.state is GroupState.STABLE
    assert (group.generation, group.protocol_type, group.protocol_name) == (4, "consumer", "range")
    assert group.leader_id == "a"
    assert group.state_timestamp == 123
    assert list(group.members) == ["a", "b"]
    assert group.static_members == {"ia": "a"}
    a = group.members["a"]
    assert a.protocols == (("range", b"sub-a"),)
    assert a.assignment == b"A"
    assert (a.session_timeout_ms, a.rebalance_timeout_ms) == (8_000, 20_000)
    assert (a.client_id, a.client_host) == ("cid", "host")
    assert a.awaiting_join is None and a.awaiting_sync is None and not a.is_new
    assert group.pending_sync == set()


def test_loaded_members_get_session_timers_and_expire_without_heartbeats() -> None:
    ctx = _loaded(group_record(GROUP, _stable_value(_member("a"), _member("b"))))
    assert ctx.coordinator.timers[("hb", GROUP, "a")] == 1_000 + 8_000
    ctx.advance(5_000)
    assert ctx.heartbeat("a", 4) is Error.NONE
    ctx.advance(3_000)
    group = ctx.group()
    assert list(group.members) == ["a"]
    assert group.state is GroupState.PREPARING_REBALANCE


def test_loaded_follower_rejoin_with_same_metadata_is_answered_immediately() -> None:
    ctx = _loaded(group_record(GROUP, _stable_value(_member("a"), _member("b"))))
    r = ctx.join_reply(ctx.join(member_id="b", protocols=[("range", b"sub-b")]))
    assert r.error is Error.NONE
    assert (r.generation_id, r.leader) == (4, "a")
    sync = ctx.sync_reply(ctx.sync("b", 4))
    assert sync.error is Error.NONE


def test_empty_group_record_loads_as_empty_and_empty_protocol_type_means_none() -> None:
    v = GroupMetadataValue("", 7, None, None, -1, ())
    ctx = _loaded(group_record(GROUP, v))
    group = ctx.group()
    assert group.state is GroupState.EMPTY
    assert group.generation == 7
    assert group.protocol_type is None
    assert group.state_timestamp is None


def test_missing_rebalance_timeout_defaults_to_session_timeout() -> None:
    m = MemberValue("a", None, "c", "h", -1, 9_000, b"", b"")
    ctx = _loaded(group_record(GROUP, _stable_value(m)))
    assert ctx.group().members["a"].rebalance_timeout_ms == 9_000


def test_last_group_record_wins_and_tombstone_removes_the_group() -> None:
    v1 = _stable_value(_member("a"), generation=1)
    v2 = _stable_value(_member("b"), generation=2)
    ctx = _loaded(group_record(GROUP, v1), group_record(GROUP, v2))
    assert list(ctx.group().members) == ["b"]
    assert ctx.group().generation == 2
    ctx2 = _loaded(group_record(GROUP, v1), group_record(GROUP, None))
    assert not ctx2.has_group()


def test_offsets_without_group_record_load_as_simple_group() -> None:
    o = OffsetValue(5, -1, "m", 10, -1)
    ctx = _loaded(offset_record("simple", "t", 0, o))
    group = ctx.group("simple")
    assert group.state is GroupState.EMPTY
    assert group.protocol_type is None
    assert ctx.fetched("simple") == {("t", 0): 5}


def test_offset_tombstone_removes_the_offset_and_last_value_wins() -> None:
    ctx = _loaded(
        offset_record(GROUP, "t", 0, OffsetValue(1, -1, "", 1, -1)),
        offset_record(GROUP, "t", 1, OffsetValue(2, -1, "", 1, -1)),
        offset_record(GROUP, "t", 0, OffsetValue(3, -1, "", 2, -1)),
        offset_record(GROUP, "t", 1, None),
    )
    assert ctx.fetched() == {("t", 0): 3}


def test_offsets_survive_group_records_in_either_order() -> None:
    o = offset_record(GROUP, "t", 0, OffsetValue(1, -1, "", 1, -1))
    g = group_record(GROUP, _stable_value(_member("a")))
    for order in ([o, g], [g, o]):
        ctx = _loaded(*order)
        assert ctx.fetched() == {("t", 0): 1}
        assert ctx.state() is GroupState.STABLE


def test_group_tombstone_keeps_offsets_as_a_simple_group() -> None:
    ctx = _loaded(
        group_record(GROUP, _stable_value(_member("a"))),
        offset_record(GROUP, "t", 0, OffsetValue(1, -1, "", 1, -1)),
        group_record(GROUP, None),
    )
    group = ctx.group()
    assert group.members == {} and group.protocol_type is None
    assert ctx.fetched() == {("t", 0): 1}


def test_the_last_offsets_tombstone_keeps_a_group_its_own_records_made() -> None:
    """Only a group that existed for its offsets goes with the last of them: compaction keeps
    a group's metadata and registration records, so a replay after it would bring the group
    back (found by the compaction property test: a generation 0 record with no members)."""
    commit = offset_record(GROUP, "t", 0, OffsetValue(1, -1, "", 1, -1))
    tombstone = offset_record(GROUP, "t", 0, None)
    empty = group_record(GROUP, GroupMetadataValue("consumer", 0, None, None, 5, ()))
    registered = registration_record(GROUP, RegistrationValue(("i1",), 60_000, 1_000, -1))
    for made_by in (empty, registered):
        ctx = _loaded(commit, made_by, tombstone)
        assert ctx.has_group() and ctx.fetched() == {}
        assert _loaded(made_by).group().registration == ctx.group().registration
    assert not _loaded(commit, tombstone).has_group()


@settings(max_examples=300, deadline=None)
@given(history=histories_with_registrations)
def test_replaying_what_compaction_leaves_gives_the_same_groups(history: list[Record]) -> None:
    # design.md §7.2/§8.4: each key's newest record decides, so a reload after compaction finds
    # the groups, offsets and registrations the whole log gives (the storage suites check the
    # stores' compaction itself; this checks replay, registrations and a group's end included)
    assert replayed_state(compacted(history)) == replayed_state(history)


def test_on_loaded_arms_the_retention_check() -> None:
    ctx = _loaded()
    assert ctx.coordinator.timers[("retention",)] == 1_000 + 600_000


def test_members_over_max_size_after_load_trigger_a_rebalance() -> None:
    value = _stable_value(_member("a"), _member("b"), _member("c"))
    ctx = _loaded(group_record(GROUP, value), config=CoreConfig(group_max_size=2))
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    h = ctx.join(member_id="a", protocols=[("range", b"sub-a")])
    ctx.join(member_id="b", protocols=[("range", b"sub-b")])
    ctx.advance(20_000)  # rebalance timeout: c (not rejoined) is dropped
    r = ctx.join_reply(h)
    assert r.error is Error.NONE
    assert [m.member_id for m in r.members] == ["a", "b"]
    assert r.generation_id == 5


# ---- failover ----------------------------------------------------------------------------------


def test_round_trip_of_a_live_stable_group_through_the_log() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", None, "i2"])
    ctx.commit({("t", 0): 11}, member_id=sg.leader, generation=sg.generation, instance_id="i0")
    ctx.complete_writes()
    other = ctx.reloaded()
    live, loaded = ctx.group(), other.group()
    assert loaded.state is GroupState.STABLE
    assert (loaded.generation, loaded.protocol_type, loaded.protocol_name, loaded.leader_id) == (
        live.generation,
        live.protocol_type,
        live.protocol_name,
        live.leader_id,
    )
    assert list(loaded.members) == list(live.members)
    assert loaded.static_members == live.static_members
    assert {m: v.assignment for m, v in loaded.members.items()} == {
        m: v.assignment for m, v in live.members.items()
    }
    assert other.fetched() == {("t", 0): 11}


def test_failover_mid_rebalance_restores_the_last_stable_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(2, session_ms=60_000)
    h0 = ctx.join(member_id=sg.leader, session_ms=60_000)
    newcomer, hn = ctx.join_dynamic(session_ms=60_000)
    h1 = ctx.join(member_id=sg.followers[0], session_ms=60_000)
    gen2 = ctx.join_reply(h0).generation_id
    assert gen2 == sg.generation + 1
    assert ctx.join_reply(hn).error is ctx.join_reply(h1).error is Error.NONE
    # the leader's assignment write never became durable: the coordinator moves
    ctx.sync(sg.leader, gen2, assignments=[])
    ctx.pending.clear()
    other = ctx.reloaded()
    group = other.group()
    assert group.state is GroupState.STABLE
    assert group.generation == sg.generation
    assert list(group.members) == sg.member_ids
    assert other.heartbeat(sg.leader, gen2) is Error.ILLEGAL_GENERATION
    assert other.heartbeat(newcomer, gen2) is Error.UNKNOWN_MEMBER_ID
    assert other.sync_reply(other.sync(sg.followers[0], gen2)).error is Error.ILLEGAL_GENERATION
    # members rejoin: generations continue from the last durable one
    h = other.join(member_id=sg.leader)
    other.join(member_id=sg.followers[0])
    assert other.join_reply(h).generation_id == sg.generation + 1


def test_failover_right_after_static_replacement_restores_the_new_id() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    new = ctx.next_member_id("i1")
    ctx.join(instance_id="i1")
    ctx.complete_writes()
    other = ctx.reloaded()
    group = other.group()
    assert group.static_members == {"i0": sg.member_ids[0], "i1": new}
    assert other.heartbeat(new, sg.generation, instance_id="i1") is Error.NONE
    assert other.heartbeat(sg.member_ids[1], sg.generation, instance_id="i1") is (
        Error.FENCED_INSTANCE_ID
    )


def test_static_member_rejoining_after_failover_is_replaced_without_rebalance() -> None:
    ctx = Context()
    sg = ctx.stable_group(["i0", "i1"])
    other = ctx.reloaded()
    h = other.join(instance_id="i0", skip_assignment=True)
    other.complete_writes()
    r = other.join_reply(h)
    assert r.error is Error.NONE
    assert r.skip_assignment
    assert r.generation_id == sg.generation
    assert other.state() is GroupState.STABLE


def test_failover_with_failed_sync_write_keeps_previous_generation() -> None:
    ctx = Context()
    sg = ctx.stable_group(1, session_ms=60_000)
    h = ctx.join(member_id=sg.leader, session_ms=60_000)
    gen2 = ctx.join_reply(h).generation_id
    ctx.sync(sg.leader, gen2, assignments=[(sg.leader, b"new")])
    ctx.fail_writes()
    other = ctx.reloaded()
    assert other.group().generation == sg.generation
    assert other.group().members[sg.leader].assignment == b"assign-0"


# ---- unloading ---------------------------------------------------------------------------------


def test_unload_answers_parked_joins_not_coordinator() -> None:
    ctx = Context()
    sg = ctx.stable_group(2)
    h = ctx.join(member_id=sg.leader)
    _, h_new = ctx.join_dynamic("other")
    ctx._absorb(ctx.coordinator.unload(ctx.now))
    for x in (h, h_new):
        r = ctx.join_reply(x)
        assert r.error is Error.NOT_COORDINATOR
    assert ctx.coordinator.groups == {}
    assert ctx.coordinator.timers == {}
    assert ctx.coordinator.next_deadline() is None


def test_unload_answers_parked_syncs_not_coordinator() -> None:
    ctx = Context()
    a, ha = ctx.join_dynamic()
    b, hb = ctx.join_dynamic()
    ctx.complete_initial_rebalance([ha, hb])
    hs = ctx.sync(b, 1)
    ctx.sync(a, 1, assignments=[])
    ctx._absorb(ctx.coordinator.unload(ctx.now))
    assert ctx.sync_reply(hs).error is Error.NOT_COORDINATOR
    ctx.complete_writes()  # a late completion changes nothing and answers nobody again
    assert ctx.coordinator.groups == {}


def test_unload_during_static_replacement_write_answers_once() -> None:
    ctx = Context()
    ctx.stable_group(["i0", "i1"])
    h = ctx.join(instance_id="i1")
    ctx._absorb(ctx.coordinator.unload(ctx.now))
    assert ctx.join_reply(h).error is Error.NOT_COORDINATOR
    ctx.complete_writes()


def test_timers_after_unload_do_nothing() -> None:
    ctx = Context()
    ctx.stable_group(2)
    ctx._absorb(ctx.coordinator.unload(ctx.now))
    result = ctx.advance(REBALANCE_MS + SESSION_MS)
    assert result.replies == [] and result.writes == []


def test_loaded_state_holds_no_reference_cycles() -> None:
    # The node freezes loaded state out of the cyclic collector's sight (runtime/node.py
    # _GcPause): a deleted group or an unloaded partition is then freed by reference counts
    # alone, which holds only while the state has no cycles.
    ctx = Context()
    ctx.stable_group(["i0", None, "i2"])
    ctx.commit()
    ctx.complete_writes()
    log = list(ctx.log)
    gc.collect()
    gc.disable()
    # only what this test makes is examined: whatever earlier tests left behind (a server's
    # transports, freed when their last reference goes) is not this state's leak
    gc.freeze()
    try:
        core = GroupCoordinator(CoreConfig(), lambda prefix: f"{prefix}-x")
        for record in log:
            core.replay(record)
        core.on_loaded(1_000)
        core.poll_timers(1_000 + SESSION_MS + 1)  # sessions expire, a rebalance starts
        assert core.groups
        del core
        gc.set_debug(gc.DEBUG_SAVEALL)
        found = gc.collect()
        kinds = sorted({type(o).__qualname__ for o in gc.garbage})
        assert found == 0, f"unreachable cycles, the frozen state would leak: {kinds}"
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.unfreeze()
        gc.enable()
