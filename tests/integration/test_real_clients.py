"""End-to-end: unmodified kafka-python, aiokafka and confluent-kafka consumers, each in its own
OS process, form groups against a real `coordinator serve` process persisting to SQLite.

Waits are event-driven (the consumers' JSON events, the group records in the event log) with
generous deadlines; the only fixed waits are the quiet windows that prove something did NOT
happen (no rebalance), a few heartbeat intervals long.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

import aiokafka  # noqa: F401  - a missing client library must fail the suite, not skip it
import confluent_kafka  # noqa: F401
import kafka  # noqa: F401
import pytest

from tests.integration.conftest import E2E
from tests.support.consumers import PARTITIONS, ConsumerProcess, Hub, WaitTimeout
from tests.support.eventlog import GroupRecord, generations, group_records

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

ALL = frozenset(range(PARTITIONS))
CLIENTS = ["kafka-python", "aiokafka", "confluent"]
# a fresh process of ANOTHER library reads the offsets back
OTHER = {"kafka-python": "aiokafka", "aiokafka": "confluent", "confluent": "kafka-python"}

BALANCE_S = 60.0  # deadline for a group to (re)converge
HEARTBEAT_MS = 500
QUIET_S = 3.0  # = 6 heartbeat intervals: a rebalance would reach every member within it


# ==== helpers ====================================================================================


def latest(e2e: E2E, group: str) -> GroupRecord | None:
    recs = [r for r in group_records(e2e.coord.db_path, group) if r.value is not None]
    return recs[-1] if recs else None


def wait_balanced(
    e2e: E2E, group: str, members: Sequence[ConsumerProcess], timeout: float = BALANCE_S
) -> GroupRecord:
    """Until the members' owned partitions are non-empty, disjoint and cover the topic, and the
    latest group record in the log assigns exactly these sets to exactly these members (so the
    callbacks reflect the current generation, not a stale one about to be revoked)."""

    def done() -> GroupRecord | None:
        for m in members:
            m.check_alive()
        owned = [m.owned for m in members]
        if not all(owned) or sum(len(o) for o in owned) != len(ALL):
            return None
        if frozenset().union(*owned) != ALL:
            return None
        rec = latest(e2e, group)
        if rec is None or rec.assignments() != {m.name: m.owned for m in members}:
            return None
        return rec

    return e2e.hub.wait_until(  # type: ignore[no-any-return]
        done, timeout, f"group {group} balanced over {[m.name for m in members]}"
    )


def rebalance_events(m: ConsumerProcess, mark: int) -> list[dict[str, Any]]:
    return m.since(mark, "assigned", "revoked")


def wait_rejoined(members: Sequence[ConsumerProcess], marks: Sequence[int], hub: Hub) -> None:
    """Until every member reported an eager rebalance since its mark: all revoked, then
    assigned. A balanced group does not prove it: the range assignor may hand a member the very
    set it had, and its callbacks may still be on their way when the log and the other members
    already show the new generation."""

    def kinds(m: ConsumerProcess, mark: int) -> list[str]:
        return [e["event"] for e in rebalance_events(m, mark)]

    def rejoined() -> bool:
        for m, mk in zip(members, marks, strict=True):
            m.check_alive()
            seen = kinds(m, mk)
            if "revoked" not in seen or "assigned" not in seen[seen.index("revoked") :]:
                return False
        return True

    try:
        hub.wait_until(rejoined, BALANCE_S, "every member revoked and then assigned")
    except WaitTimeout as e:
        seen = {m.name: kinds(m, mk) for m, mk in zip(members, marks, strict=True)}
        raise WaitTimeout(f"{e}; since the marks: {seen}") from None


def expect_offsets(members: Iterable[ConsumerProcess], base: int) -> dict[int, int]:
    return {p: base + i for i, m in enumerate(members) for p in m.owned}


def commit_all(members: Sequence[ConsumerProcess], base: int) -> dict[int, int]:
    """Member i commits base+i for its partitions (all members in parallel)."""
    marks = [m.mark() for m in members]
    for i, m in enumerate(members):
        m.send(f"commit {base + i}")
    for m, mk in zip(members, marks, strict=True):
        ev = m.wait_event("committed", 30, after=mk)
        assert set(ev["partitions"]) == set(m.owned), (m.name, ev)
    return expect_offsets(members, base)


def assert_read_back(
    e2e: E2E, client: str, group: str, name: str, expected: dict[int, int]
) -> None:
    """The whole topic's offsets, read by a fresh, non-joining consumer process (OffsetFetch
    only), equal `expected`. None = "nothing committed" as the client reports it; note that
    aiokafka (OffsetFetch v3) also reports a top-level error such as NOT_COORDINATOR as None."""
    reader = e2e.consumer(client, group, name, subscribe=False)
    reader.wait_event("ready", 30)
    got = reader.committed(ALL)
    reader.close()
    assert got == expected, f"{client} read {got} from group {group}, expected {expected}"


def assert_quiet(members: Sequence[ConsumerProcess], marks: Sequence[int], what: str) -> None:
    time.sleep(QUIET_S)  # proving an absence: a rebalance would show within a few heartbeats
    for m, mk in zip(members, marks, strict=True):
        m.check_alive()
        assert rebalance_events(m, mk) == [], f"{m.name} rebalanced {what}: {m.since(mk)}"


def start_group(e2e: E2E, client: str, group: str, n: int, **kw: Any) -> list[ConsumerProcess]:
    static = kw.pop("static", False)
    return [
        e2e.consumer(
            client,
            group,
            f"{group}-{i}",
            instance=f"{group}-inst{i}" if static else None,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **kw,
        )
        for i in range(n)
    ]


# ==== 1. dynamic group: split, join, leave, commits ===========================================


@pytest.mark.parametrize("client", CLIENTS)
def test_dynamic_group_split_join_leave_commit(e2e: E2E, client: str) -> None:
    g = f"dyn-{client}"
    members = start_group(e2e, client, g, 3)
    wait_balanced(e2e, g, members)

    expected = commit_all(members, 100)
    for m in members:
        assert m.committed() == {p: expected[p] for p in m.owned}

    # a 4th member joins: every old member sees its partitions revoked and reassigned (eager)
    marks = [m.mark() for m in members]
    fourth = e2e.consumer(client, g, f"{g}-3", heartbeat_interval_ms=HEARTBEAT_MS)
    members.append(fourth)
    wait_rejoined(members[:3], marks, e2e.hub)
    wait_balanced(e2e, g, members)
    assert fourth.owned

    # one member leaves (LeaveGroup on close): the other three take over its partitions
    leaver = members.pop(0)
    marks = [m.mark() for m in members]
    leaver.close()
    wait_rejoined(members, marks, e2e.hub)
    wait_balanced(e2e, g, members)

    # offsets committed in the first generation survive both rebalances ...
    for m in members:
        assert m.committed() == {p: expected[p] for p in m.owned}, m.name
    # ... and new commits in the current generation are read back by another library
    expected = commit_all(members, 200)
    assert_read_back(e2e, OTHER[client], g, f"{g}-reader", expected)

    gens = generations(e2e.coord.db_path, g)
    assert len(set(gens)) >= 3, gens  # initial, join, leave


# ==== 2. static member restart ===================================================================

STATIC_SESSION_MS = 20000  # a killed member is back well within this


def restart_static_member(
    e2e: E2E, g: str, members: list[ConsumerProcess], victim: ConsumerProcess
) -> ConsumerProcess:
    """SIGKILL `victim` (a static member sends no LeaveGroup anyway), start a new process with
    the same instance id and check: same partitions back, the others see no rebalance, the log
    replaces the instance's member id, and no new generation appears."""
    gens_before = set(generations(e2e.coord.db_path, g))
    rec = latest(e2e, g)
    assert rec is not None
    old_member_id = rec.instances()[victim.instance]  # type: ignore[index]
    others = [m for m in members if m is not victim]
    kept = victim.owned
    marks = [m.mark() for m in others]

    victim.kill()
    back = e2e.consumer(
        victim.client, g, victim.name, instance=victim.instance,
        heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=STATIC_SESSION_MS,
    )  # fmt: skip
    members[members.index(victim)] = back

    def assigned() -> frozenset[int]:
        back.check_alive()
        return back.owned

    e2e.hub.wait_until(assigned, 30, f"{back.name} assigned")
    assert back.owned == kept, "the restarted static member got other partitions"
    rec2 = wait_balanced(e2e, g, members)
    assert rec2.instances()[victim.instance] != old_member_id  # type: ignore[index]
    assert_quiet(others, marks, "when a static member restarted")
    assert back.owned == kept
    assert set(generations(e2e.coord.db_path, g)) == gens_before, "a new generation appeared"
    return back


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restart_keeps_assignment(e2e: E2E, client: str) -> None:
    g = f"static-{client}"
    members = start_group(e2e, client, g, 3, static=True, session_timeout_ms=STATIC_SESSION_MS)
    wait_balanced(e2e, g, members)
    expected = commit_all(members, 100)

    def leader() -> str:
        rec = latest(e2e, g)
        assert rec is not None and rec.value is not None
        return next(m.client_id for m in rec.value.members if m.member_id == rec.value.leader)

    # first a follower, then the leader: none of the three clients has KIP-814, so a returning
    # leader is told the OLD leader id and no members, syncs as a follower and gets its
    # partitions back; the log's leader becomes its new member id
    follower = next(m for m in members if m.name != leader())
    back = restart_static_member(e2e, g, members, follower)
    assert back.committed() == {p: expected[p] for p in back.owned}
    lead = next(m for m in members if m.name == leader())
    back = restart_static_member(e2e, g, members, lead)

    # the restarted members are full members of the unchanged generation: they can commit
    expected = commit_all(members, 500)
    assert_read_back(e2e, OTHER[client], g, f"{g}-reader", expected)


# ==== 3. cooperative-sticky two-phase rebalance ==================================================


def ownership_timeline(members: Sequence[ConsumerProcess]) -> list[dict[str, frozenset[int]]]:
    """Replay every member's assigned/revoked events in wall-clock order (same host clock);
    returns the ownership after each event. A partition is owned from the assign callback to
    the revoke callback, so the causal order revoke(A) -> rejoin -> assign(C) is preserved."""
    evs = sorted(
        (e for m in members for e in m.since(0, "assigned", "revoked")), key=lambda e: e["t"]
    )
    owned: dict[str, set[int]] = {m.name: set() for m in members}
    out = []
    for e in evs:
        if e["event"] == "assigned":
            owned[e["who"]] |= set(e["partitions"])
        else:
            owned[e["who"]] -= set(e["partitions"])
        out.append({k: frozenset(v) for k, v in owned.items()})
    return out


@pytest.mark.parametrize("client", ["kafka-python", "confluent"])
def test_cooperative_sticky_two_phase_rebalance(e2e: E2E, client: str) -> None:
    g = f"coop-{client}"
    members = start_group(e2e, client, g, 2, strategy="cooperative-sticky")
    wait_balanced(e2e, g, members)
    before = {m.name: m.owned for m in members}
    gens_before = generations(e2e.coord.db_path, g)
    marks = [m.mark() for m in members]

    third = e2e.consumer(
        client, g, f"{g}-2", strategy="cooperative-sticky", heartbeat_interval_ms=HEARTBEAT_MS
    )
    members.append(third)
    wait_balanced(e2e, g, members)

    # phase 1: the old members revoke only what moves (incrementally) and keep the rest
    released: dict[int, float] = {}  # partition -> when its old owner revoked it
    for m, mk in zip(members[:2], marks, strict=True):
        revoked = [e for e in m.since(mk, "revoked") if e["partitions"]]
        assert revoked, f"{m.name} revoked nothing: {m.since(mk)}"
        for e in revoked:
            assert set(e["partitions"]) < before[m.name], f"{m.name} revoked everything: {e}"
            released.update(dict.fromkeys(e["partitions"], e["t"]))
        assert m.owned and m.owned <= before[m.name], (m.name, before[m.name], m.owned)
    # phase 2: the newcomer is assigned each revoked partition only after it was released
    # (one old member may release its share a round after the other: compare per partition)
    gained = [e for e in third.since(0, "assigned") if e["partitions"]]
    assert gained
    for e in gained:
        for p in e["partitions"]:
            assert p in released and e["t"] > released[p], (p, e, released)
    assert third.owned == ALL - members[0].owned - members[1].owned

    # never a partition owned by two members at once
    for step in ownership_timeline(members):
        owners = [p for ps in step.values() for p in ps]
        assert len(owners) == len(set(owners)), f"partition owned twice: {step}"

    # the log holds the intermediate generation (revoked partitions unassigned) then the final
    recs = [r for r in group_records(e2e.coord.db_path, g) if r.value is not None]
    new = [r for r in recs if r.generation > max(gens_before)]
    assert len({r.generation for r in new}) >= 2, [r.generation for r in new]
    assert any(frozenset().union(*r.assignments().values()) != ALL for r in new)
    assert frozenset().union(*new[-1].assignments().values()) == ALL
    generations(e2e.coord.db_path, g)

    expected = commit_all(members, 700)
    assert_read_back(e2e, OTHER[client], g, f"{g}-reader", expected)


# ==== 4. coordinator SIGKILL and restart on the same database ====================================


@pytest.mark.parametrize("client", CLIENTS)
def test_coordinator_kill_restart(e2e: E2E, client: str) -> None:
    gs, gd = f"crash-static-{client}", f"crash-dyn-{client}"
    static = start_group(e2e, client, gs, 3, static=True, session_timeout_ms=STATIC_SESSION_MS)
    dynamic = start_group(e2e, client, gd, 2, session_timeout_ms=STATIC_SESSION_MS)
    rec_s = wait_balanced(e2e, gs, static)
    wait_balanced(e2e, gd, dynamic)
    exp_s = commit_all(static, 100)
    exp_d = commit_all(dynamic, 300)
    gens_s = generations(e2e.coord.db_path, gs)
    owned_s = {m.name: m.owned for m in static}
    marks = [m.mark() for m in static]

    e2e.coord.restart()  # SIGKILL, then the same database and ports

    # committed offsets are intact: read back by a fresh process of another library
    reader = OTHER[client]
    assert_read_back(e2e, reader, gs, f"{gs}-reader1", exp_s)
    assert_read_back(e2e, reader, gd, f"{gd}-reader1", exp_d)

    # the static group resumes at the same generation: its members can commit (the commit
    # carries their member id and generation) and nobody rebalances
    exp_s = commit_all(static, 1000)
    assert_quiet(static, marks, "after the coordinator restart")
    assert {m.name: m.owned for m in static} == owned_s
    gens_after = generations(e2e.coord.db_path, gs)
    assert max(gens_after) == max(gens_s), (gens_s, gens_after)
    rec_after = latest(e2e, gs)
    assert rec_after is not None and rec_after.assignments() == rec_s.assignments()

    # the dynamic members (re)join as needed and end up complete and disjoint
    wait_balanced(e2e, gd, dynamic)
    exp_d = commit_all(dynamic, 2000)
    assert_read_back(e2e, reader, gs, f"{gs}-reader2", exp_s)
    assert_read_back(e2e, reader, gd, f"{gd}-reader2", exp_d)
