"""Admin operations of the core: static-member pre-registration (addMembersToGroup) and forced
rebalance. They have no Kafka reference; the rules are the project's (issue 4, README)."""

from __future__ import annotations

from app.group.messages import AdminResult, Error
from app.group.records import RecordType, decode_registration_value
from app.group.results import AppendFailure
from app.group.state import GroupState
from tests.storage.compaction_cases import compacted
from tests.unit.context import GROUP, Context

TIMEOUT = 20_000


def register(ctx: Context, ids: list[str], timeout: int = TIMEOUT) -> AdminResult:
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(h, GROUP, ids, timeout, ctx.now))
    ctx.complete_writes()
    return ctx.reply(h, AdminResult)


def force(ctx: Context, reason: str = "test") -> AdminResult:
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.force_rebalance(h, GROUP, reason, ctx.now))
    return ctx.reply(h, AdminResult)


def rejoin_all(ctx: Context, members: dict[str, str | None]) -> dict[str, int]:
    return {mid: ctx.join(GROUP, member_id=mid, instance_id=inst) for mid, inst in members.items()}


def generations(ctx: Context) -> list[int]:
    return sorted({r.generation for r in ctx.group_records() if r is not None})


def test_registered_scale_up_of_four_static_members_costs_one_rebalance() -> None:
    ctx = Context()
    g = ctx.stable_group(["s0", "s1", "s2", "s3"])
    assert register(ctx, ["n0", "n1", "n2", "n3"]).error is Error.NONE
    handles: dict[str, int] = {}
    for i in range(4):
        handles[f"n{i}"] = ctx.join(GROUP, instance_id=f"n{i}")
        if i == 0:  # the old members learn of the rebalance and rejoin at once
            handles.update(rejoin_all(ctx, g.instance_ids))
        ctx.advance(1000)  # newcomers arrive one by one, well within the timeout
        if i < 3:
            assert ctx.state() is GroupState.PREPARING_REBALANCE, "held for the rest"
    assert all(ctx.answered(h) for h in handles.values())
    replies = {k: ctx.join_reply(h) for k, h in handles.items()}
    assert {r.generation_id for r in replies.values()} == {g.generation + 1}
    assert len(ctx.group(GROUP).members) == 8
    gen = g.generation + 1
    for r in replies.values():
        ctx.sync(
            r.member_id,
            gen,
            instance_id=ctx.group().members[r.member_id].group_instance_id,
            assignments=[(m, b"a") for m in ctx.group().members] if r.members else (),
        )
    ctx.complete_writes()
    assert ctx.state() is GroupState.STABLE
    # the registration closes once the scale-up's generation is durable
    closing = decode_registration_value(
        [r for r in ctx.records if r.type is RecordType.STATIC_REGISTRATION][-1].value or b""
    )
    assert closing.expected == () and closing.dropped == ()


def test_without_registration_the_same_scale_up_rebalances_more_than_once() -> None:
    ctx = Context()
    g = ctx.stable_group(["s0", "s1", "s2", "s3"])
    members = dict(g.instance_ids)
    completed = 0
    for i in range(4):
        h = ctx.join(GROUP, instance_id=f"n{i}")
        rejoin = rejoin_all(ctx, members)
        ctx.advance(1000)
        if ctx.answered(h):
            completed += 1
            reply = ctx.join_reply(h)
            members[reply.member_id] = f"n{i}"
            gen = reply.generation_id
            syncs = [ctx.sync(m, gen, instance_id=inst) for m, inst in members.items()]
            ctx.complete_writes()
            # every member, the newcomer included, is in the new generation: Stable again
            assert [ctx.sync_reply(s).error for s in syncs] == [Error.NONE] * len(members)
            assert ctx.state() is GroupState.STABLE
        assert all(ctx.answered(x) for x in rejoin.values())
    assert completed > 1


def test_registered_instances_that_never_come_are_dropped_when_the_timeout_expires() -> None:
    ctx = Context()
    g = ctx.stable_group(["s0", "s1"])
    register(ctx, ["n0", "n1", "n2"], timeout=5000)
    h = ctx.join(GROUP, instance_id="n0")
    rejoin = rejoin_all(ctx, g.instance_ids)
    ctx.advance(4000)
    assert not ctx.answered(h), "held while n1 and n2 may still come"
    ctx.advance(1000)
    ctx.complete_writes()
    assert ctx.answered(h) and all(ctx.answered(x) for x in rejoin.values())
    assert ctx.group().registered == {}
    regs = [
        decode_registration_value(r.value or b"")
        for r in ctx.records
        if r.type is RecordType.STATIC_REGISTRATION
    ]
    assert regs[-1].dropped == ("n1", "n2") and regs[-1].expected == ()


def test_registration_is_rejected_when_empty_duplicated_or_already_members() -> None:
    ctx = Context()
    ctx.stable_group(["s0"])
    assert register(ctx, []).error is Error.INVALID_REQUEST
    assert "duplicate" in register(ctx, ["a", "a"]).message
    assert "already members" in register(ctx, ["s0", "b"]).message
    assert register(ctx, ["b"]).error is Error.NONE
    assert "already registered" in register(ctx, ["b"]).message


def test_registration_survives_a_reload_and_still_holds_the_join_phase() -> None:
    ctx = Context()
    g = ctx.stable_group(["s0", "s1"])
    register(ctx, ["n0", "n1"])
    ctx.advance(100)
    joined_ms = ctx.now
    ctx.join(GROUP, instance_id="n0")
    ctx.complete_writes()
    other = ctx.reloaded()
    # n0's join was never synced, so after the failover both are still expected
    assert other.group().registered == {"n0": None, "n1": None}
    assert other.group().expansion_started_ms == joined_ms  # n0's join, not the registration
    h = other.join(GROUP, instance_id="n1")
    rejoin = rejoin_all(other, g.instance_ids)
    other.advance(100)
    assert not other.answered(h), "held for n0, which must come back too"
    n0 = other.join(GROUP, instance_id="n0")
    other.advance(100)
    assert other.answered(h) and other.answered(n0)
    assert all(other.answered(x) for x in rejoin.values())
    assert other.join_reply(h).generation_id == g.generation + 1


def test_a_failed_registration_write_leaves_nothing_registered() -> None:
    ctx = Context()
    ctx.stable_group(["s0"])
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(h, GROUP, ["n0"], TIMEOUT, ctx.now))
    ctx.fail_writes(AppendFailure.STORAGE)
    assert ctx.reply(h, AdminResult).error is Error.NOT_COORDINATOR
    assert ctx.group().registered == {}


def test_a_failed_first_registration_leaves_no_group_behind() -> None:
    # registering members of an unknown group creates it; when no write of its registration
    # succeeded, nothing of the group is durable: it must not be listed until a failover
    ctx = Context()
    first, second = ctx._handle(), ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(first, GROUP, ["n0"], TIMEOUT, ctx.now))
    ctx._absorb(ctx.coordinator.register_static_members(second, GROUP, ["n1"], TIMEOUT, ctx.now))
    ctx.fail_writes(AppendFailure.STORAGE, count=1)
    assert ctx.reply(first, AdminResult).error is Error.NOT_COORDINATOR
    assert ctx.group().registered == {"n1": None}  # the second is still being written
    ctx.fail_writes(AppendFailure.STORAGE)
    assert ctx.reply(second, AdminResult).error is Error.NOT_COORDINATOR
    assert not ctx.has_group() and ctx.list_groups() == []
    assert not ctx.reloaded().has_group()
    # a later registration creates it again, written this time
    assert register(ctx, ["n2"]).error is Error.NONE
    assert ctx.group().registered == {"n2": None} == ctx.reloaded().group().registered


def test_a_failed_registration_keeps_a_group_whose_registration_was_written() -> None:
    ctx = Context()
    assert register(ctx, ["n0"]).error is Error.NONE
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.unregister_static_member(h, GROUP, "n0", ctx.now))
    ctx.complete_writes()  # the group's registration record holds no instance now
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(h, GROUP, ["n1"], TIMEOUT, ctx.now))
    ctx.fail_writes(AppendFailure.STORAGE)
    assert ctx.reply(h, AdminResult).error is Error.NOT_COORDINATOR
    assert ctx.has_group() and ctx.group().registered == {}
    assert ctx.reloaded().has_group()  # as the log has it


def test_a_failed_first_registration_keeps_the_group_a_withdrawal_being_written_holds() -> None:
    # the withdrawal's record is the group's registration once written: the group stays for it
    ctx = Context()
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(h, GROUP, ["n0"], TIMEOUT, ctx.now))
    withdrawal = ctx._handle()
    ctx._absorb(ctx.coordinator.unregister_static_member(withdrawal, GROUP, "n0", ctx.now))
    ctx.fail_writes(AppendFailure.STORAGE, count=1)
    assert ctx.reply(h, AdminResult).error is Error.NOT_COORDINATOR
    ctx.complete_writes()
    assert ctx.reply(withdrawal, AdminResult).error is Error.NONE
    assert ctx.has_group() and ctx.reloaded().has_group()


def test_forced_rebalance_moves_a_stable_group_to_preparing_and_heartbeats_learn_it() -> None:
    ctx = Context()
    g = ctx.stable_group(2)
    assert force(ctx, "operator asked").error is Error.NONE
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    assert ctx.heartbeat(g.member_ids[0], g.generation) is Error.REBALANCE_IN_PROGRESS
    assert ctx.coordinator.rebalances["admin"] == 1
    handles = rejoin_all(ctx, {m: None for m in g.member_ids})
    assert all(ctx.answered(h) for h in handles.values())
    assert ctx.join_reply(handles[g.member_ids[0]]).generation_id == g.generation + 1


def test_forced_rebalance_of_an_empty_or_unknown_group_is_refused() -> None:
    ctx = Context()
    assert force(ctx).error is Error.GROUP_ID_NOT_FOUND
    ctx.commit(generation=-1)
    ctx.complete_writes()
    assert force(ctx).error is Error.NON_EMPTY_GROUP


def test_the_group_record_says_why_and_when_its_rebalance_started() -> None:
    ctx = Context()
    g = ctx.stable_group(2)
    ctx.advance(500)
    started = ctx.now
    force(ctx, "audit me")
    handles = rejoin_all(ctx, {m: None for m in g.member_ids})
    reply = ctx.join_reply(handles[g.member_ids[0]])
    for mid in g.member_ids:
        ctx.sync(mid, reply.generation_id, assignments=[(m, b"x") for m in g.member_ids])
    ctx.complete_writes()
    value = ctx.last_group_record()
    assert value is not None
    assert value.rebalance_reason == "admin: audit me"
    assert value.rebalance_started_ms == started


def test_a_deleted_group_stays_deleted_after_compaction_though_it_had_a_registration() -> None:
    # compaction keeps a registration record that nothing tombstones: the reload would bring
    # the deleted group back, Empty, still expecting its instances
    ctx = Context()
    register(ctx, ["n0"])
    ctx.commit(generation=-1)
    ctx.complete_writes()
    h = ctx.delete()
    ctx.complete_writes()
    assert ctx.delete_reply(h).error is Error.NONE and not ctx.has_group()
    ends = [(r.type, r.value) for r in ctx.log[-2:]]
    assert ends == [(RecordType.STATIC_REGISTRATION, None), (RecordType.GROUP_METADATA, None)]
    assert not ctx.reloaded().has_group()
    assert not ctx.reloaded(compacted(ctx.log)).has_group()


def test_retention_keeps_a_group_while_registered_members_are_expected() -> None:
    ctx = Context()
    register(ctx, ["n0"])  # an unknown group: created Empty, no offsets
    ctx.advance(ctx.config.offsets_retention_check_interval_ms * 3)
    ctx.complete_writes()
    assert ctx.group().registered == {"n0": None}
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.unregister_static_member(h, GROUP, "n0", ctx.now))
    ctx.complete_writes()
    ctx.advance(ctx.config.offsets_retention_check_interval_ms)
    ctx.complete_writes()
    assert not ctx.has_group()  # nothing expected any more: an Empty group without offsets
    assert not ctx.reloaded(compacted(ctx.log)).has_group()


def test_a_failed_first_join_does_not_drop_a_group_a_registration_made() -> None:
    # the registration is being written: the group exists for it, not for the failed join
    ctx = Context()
    h = ctx._handle()
    ctx._absorb(ctx.coordinator.register_static_members(h, GROUP, ["n0"], TIMEOUT, ctx.now))
    ghost = ctx.join(GROUP, member_id="ghost")
    assert ctx.join_reply(ghost).error is Error.UNKNOWN_MEMBER_ID
    ctx.complete_writes()
    assert ctx.reply(h, AdminResult).error is Error.NONE
    assert ctx.group().registered == {"n0": None}
    assert ctx.reloaded().group().registered == {"n0": None}


def test_a_group_being_deleted_writes_no_registration_after_its_tombstones() -> None:
    ctx = Context()
    register(ctx, ["n0", "n1"])  # an unknown group: created Empty for it
    h = ctx.delete()
    h2 = ctx._handle()  # a withdrawal while the tombstones are being written
    ctx._absorb(ctx.coordinator.unregister_static_member(h2, GROUP, "n1", ctx.now))
    assert ctx.reply(h2, AdminResult).error is Error.UNKNOWN_MEMBER_ID
    ctx.complete_writes()
    assert ctx.delete_reply(h).error is Error.NONE
    assert ctx.log[-1].type is RecordType.GROUP_METADATA and ctx.log[-1].value is None
    assert not ctx.reloaded().has_group()
    assert not ctx.reloaded(compacted(ctx.log)).has_group()


def _expanding_after_failover() -> Context:
    """n0 and n1 registered, n0's join started the expansion and never synced: after a
    failover the group is Empty, both expected, the expansion's deadline armed again."""
    ctx = Context()
    register(ctx, ["n0", "n1"], timeout=1_000)
    ctx.join(GROUP, instance_id="n0")
    ctx.complete_writes()
    other = ctx.reloaded()
    assert other.state() is GroupState.EMPTY and other.group().registered == {
        "n0": None,
        "n1": None,
    }
    return other


def test_a_failed_delete_gives_the_expansion_its_deadline_back() -> None:
    ctx = _expanding_after_failover()
    h = ctx.delete()
    ctx.advance(2_000)  # the deadline passes while the tombstones are in flight: nothing written
    ctx.fail_writes(AppendFailure.STORAGE)
    assert ctx.delete_reply(h).error is Error.NOT_COORDINATOR
    ctx.advance(1)
    ctx.complete_writes()
    assert ctx.group().registered == {}  # the instances that never came are dropped, as on reload
    assert ctx.reloaded().group().registered == {}


def test_a_deleted_groups_expansion_deadline_does_not_reach_a_new_registration() -> None:
    ctx = _expanding_after_failover()
    ctx.delete()
    ctx.complete_writes()
    register(ctx, ["n5"])  # the same group id, registered again before the old deadline
    ctx.advance(2_000)
    ctx.complete_writes()
    assert ctx.group().registered == {"n5": None}


def test_an_expansion_deadline_during_a_deletion_writes_nothing_after_its_tombstones() -> None:
    ctx = _expanding_after_failover()
    h = ctx.delete()
    ctx.advance(2_000)  # the deadline passes while the tombstones are in flight
    ctx.complete_writes()
    assert ctx.delete_reply(h).error is Error.NONE
    assert ctx.log[-1].type is RecordType.GROUP_METADATA and ctx.log[-1].value is None
    assert not ctx.reloaded().has_group()
    assert not ctx.reloaded(compacted(ctx.log)).has_group()
