"""End-to-end: Apache Kafka's Java consumer (kafka-clients 4.x, `group.protocol=classic`), one JVM
per consumer (tests/support/java.py), against one real `coordinator serve` process per module
on SQLite.

The Java consumer is the released client that sends JoinGroup v9, so a static leader restarted
within its session timeout is answered with SkipAssignment (KIP-814) here with a real client:
the node's request metrics show the v9 JoinGroup, the log holds the SkipAssignment record, and
the group's generation does not move.
"""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import COORD_ENV
from tests.support.consumers import PARTITIONS, TOPIC, Consumers
from tests.support.eventlog import GroupRecord, group_records
from tests.support.java import JavaConsumerProcess, java_build, java_consumer  # noqa: F401
from tests.support.nodes import CoordinatorProcess, postgres_nodes

pytestmark = [pytest.mark.integration]

ALL = frozenset(range(PARTITIONS))
BALANCE_S = 60.0
HEARTBEAT_MS = 500
QUIET_S = 3.0  # six heartbeat intervals: a rebalance would reach every member within it
SESSION_MS = 15000  # a SIGKILLed static member's JVM restarts well within it


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, java_build: None) -> Iterator[Any]:  # noqa: F811
    workdir = tmp_path_factory.mktemp("java-node")
    coord = CoordinatorProcess(
        f"sqlite+aiosqlite:///{workdir}/coordinator.db", workdir, dict(COORD_ENV)
    )
    coord.start()
    try:
        yield coord
    finally:
        coord.kill()


@pytest.fixture
def env(node: CoordinatorProcess, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    e = Consumers(tmp_path, node)
    failed_before = request.session.testsfailed
    try:
        yield e
    finally:
        e.kill_consumers()
        if request.session.testsfailed != failed_before:  # shown as "Captured stdout teardown"
            for title, text in e.diagnostics():
                print(f"===== {title}\n{text}")


# ==== helpers ====================================================================================


def latest(env: Consumers, group: str) -> GroupRecord | None:
    recs = [r for r in group_records(env.coord.db_path, group) if r.value is not None]
    return recs[-1] if recs else None


def wait_balanced(
    env: Consumers, group: str, members: Sequence[JavaConsumerProcess]
) -> GroupRecord:
    """Until the members' partitions are non-empty, disjoint and cover the topic, and the latest
    group record in the log assigns exactly these sets to these members."""

    def done() -> GroupRecord | None:
        for m in members:
            m.check_alive()
        owned = [m.owned for m in members]
        if not all(owned) or sum(len(o) for o in owned) != len(ALL):
            return None
        if frozenset().union(*owned) != ALL:
            return None
        rec = latest(env, group)
        if rec is None or rec.assignments() != {m.name: m.owned for m in members}:
            return None
        return rec

    return env.wait(done, f"group {group} balanced over {[m.name for m in members]}", BALANCE_S)  # type: ignore[no-any-return]


def start(env: Consumers, group: str, n: int, **kw: Any) -> list[JavaConsumerProcess]:
    static = kw.pop("static", False)
    return [
        java_consumer(
            env,
            group,
            f"{group}-{i}",
            TOPIC,
            instance=f"{group}-inst{i}" if static else None,
            heartbeat_interval_ms=HEARTBEAT_MS,
            **kw,
        )
        for i in range(n)
    ]


def assert_quiet(members: Sequence[JavaConsumerProcess], marks: Sequence[int], what: str) -> None:
    time.sleep(QUIET_S)  # proving an absence
    for m, mk in zip(members, marks, strict=True):
        m.check_alive()
        moves = m.since(mk, "assigned", "revoked")
        assert moves == [], f"{m.name} rebalanced {what}: {moves}"


def join_v9_count(node: CoordinatorProcess) -> float:
    """coordinator_requests_total{api="JoinGroup",version="9",error="0"} from /metrics."""
    with urllib.request.urlopen(node.admin_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    pat = r'^coordinator_requests_total\{api="JoinGroup",error="0",version="9"\} (\S+)$'
    m = re.search(pat, text, re.M)
    return float(m.group(1)) if m else 0.0


def metric_line(node: CoordinatorProcess) -> str:
    with urllib.request.urlopen(node.admin_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return "\n".join(
        ln
        for ln in text.splitlines()
        if ln.startswith('coordinator_requests_total{api="JoinGroup"')
    )


def leader_name(rec: GroupRecord) -> str:
    assert rec.value is not None
    return next(m.client_id for m in rec.value.members if m.member_id == rec.value.leader)


# ==== tests ======================================================================================


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "cooperative-sticky"])
def test_dynamic_group_splits_and_commits_read_back(env: Consumers, strategy: str) -> None:
    group = f"java-dyn-{strategy}"
    members = start(env, group, 2, strategy=strategy)
    rec = wait_balanced(env, group, members)
    assert rec.value is not None and rec.value.protocol_name == strategy
    assert all(len(m.owned) == PARTITIONS // 2 for m in members), [m.owned for m in members]
    if strategy == "range":  # contiguous halves
        assert sorted(sorted(m.owned) for m in members) == [[0, 1, 2], [3, 4, 5]]
    if strategy == "roundrobin":
        assert sorted(sorted(m.owned) for m in members) == [[0, 2, 4], [1, 3, 5]]
    for i, m in enumerate(members):
        ev = m.commit(100 + i)
        assert set(ev["partitions"]) == set(m.owned) and ev["generation"] == rec.generation
    expected = {p: 100 + i for i, m in enumerate(members) for p in m.owned}
    # read back by the Java client (OffsetFetch) and by the admin API
    assert members[0].committed(ALL) == expected
    got = {o["partition"]: o["offset"] for o in env.coord.get(f"/groups/{group}")["offsets"]}
    assert got == expected
    for m in members:
        m.close()


def test_static_member_sigkill_restart_and_leader_skip_assignment(env: Consumers) -> None:
    """A static follower, then the static leader, each SIGKILLed and restarted within the session
    timeout: each gets its partitions back, the other member never rebalances, the generation
    stays; the leader's JoinGroup (v9) is answered with SkipAssignment."""
    group = "java-static"
    kw: dict[str, Any] = {"static": True, "session_timeout_ms": SESSION_MS}
    members = start(env, group, 2, **kw)
    rec = wait_balanced(env, group, members)
    gen = rec.generation
    before = {m.name: m.owned for m in members}
    lead = leader_name(rec)
    by_name = {m.name: m for m in members}
    order = [n for n in by_name if n != lead] + [lead]  # the follower first, then the leader
    current = dict(by_name)
    for name in order:
        other = next(m for n, m in current.items() if n != name)
        victim = current[name]
        idx = int(name.rsplit("-", 1)[1])
        v9_before = join_v9_count(env.coord)
        mark_other = other.mark()
        victim.kill()
        back = java_consumer(
            env, group, name, TOPIC, instance=f"{group}-inst{idx}",
            heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS,
        )  # fmt: skip
        current[name] = back
        back.wait_event("assigned", BALANCE_S)
        want = before[name]

        def owns_again(b: JavaConsumerProcess = back, w: frozenset[int] = want) -> bool:
            return b.owned == w

        env.wait(owns_again, f"{name} owns {sorted(want)} again")
        assert_quiet([other], [mark_other], f"while {name} restarted")
        assert join_v9_count(env.coord) >= v9_before + 1, metric_line(env.coord)
        now = latest(env, group)
        assert now is not None and now.generation == gen, (gen, now)
        assert env.coord.get(f"/groups/{group}")["generation"] == gen
        assert env.coord.get(f"/groups/{group}")["state"] == "Stable"
        assert now.assignments() == before
        if name == lead:
            # KIP-814: the returning leader's replacement record says SkipAssignment, and the
            # leader is still the one that came back (with its new member id)
            assert now.value is not None and now.value.skip_assignment, now
            assert leader_name(now) == lead
            ev = back.snapshot("assigned")[-1]
            assert ev["generation"] == gen, ev
            (env.workdir / "skip_assignment_evidence.txt").write_text(
                f"{metric_line(env.coord)}\ngeneration before={gen} after={now.generation} "
                f"skip_assignment={now.value.skip_assignment}\n"
            )
            print(f"SkipAssignment evidence:\n{metric_line(env.coord)}\ngeneration {gen}")
    ev = current[order[0]].commit(7)
    assert ev["generation"] == gen


def test_cooperative_sticky_third_member_moves_only_what_it_must(env: Consumers) -> None:
    """Two cooperative-sticky members hold 3+3; a third joins: in the first round each old member
    revokes only the partition that moves, in the second the newcomer gets them; nothing else
    is revoked, and the old members keep what they kept throughout."""
    group = "java-coop"
    members = start(env, group, 2, strategy="cooperative-sticky")
    rec = wait_balanced(env, group, members)
    gen = rec.generation
    before = {m.name: m.owned for m in members}
    marks = [m.mark() for m in members]
    third = java_consumer(
        env, group, f"{group}-2", TOPIC, strategy="cooperative-sticky",
        heartbeat_interval_ms=HEARTBEAT_MS,
    )  # fmt: skip
    everyone = [*members, third]
    rec2 = wait_balanced(env, group, everyone)
    assert all(len(m.owned) == 2 for m in everyone), [m.owned for m in everyone]
    moved: set[int] = set()
    for m, mk in zip(members, marks, strict=True):
        assert m.owned < before[m.name], (m.name, before[m.name], m.owned)
        revoked = {p for e in m.since(mk, "revoked") for p in e["partitions"]}
        assigned = {p for e in m.since(mk, "assigned") for p in e["partitions"]}
        # only what moved is revoked (no eager revoke-everything), nothing new is assigned
        assert revoked == before[m.name] - m.owned, (m.name, revoked)
        assert assigned == set(), (m.name, assigned)
        assert not any(e.get("lost") for e in m.since(mk, "revoked"))
        moved |= revoked
    assert moved == set(third.owned)
    # two rounds: the revoking generation, then the one that hands the partitions over
    assert rec2.generation >= gen + 2, (gen, rec2.generation)
    gens = [r.generation for r in group_records(env.coord.db_path, group) if r.value]
    assert gen + 1 in gens and gen + 2 in gens, gens


@pytest.fixture
def pg_nodes(pg_admin_dsn: str, tmp_path: Path) -> Iterator[list[CoordinatorProcess]]:
    """Two nodes on a fresh PostgreSQL database (short leases: a takeover within seconds)."""
    env = {**COORD_ENV, "COORD_LEASE_TTL_MS": "3000"}
    with postgres_nodes(pg_admin_dsn, tmp_path, env, prefix="java") as nodes:
        yield nodes


def test_static_group_survives_coordinator_failover_on_postgres(
    pg_nodes: list[CoordinatorProcess], tmp_path: Path
) -> None:
    """Two static Java members on a 2-node cluster: the node owning the group is SIGKILLed, the
    other takes the group over from the log; the members find the new coordinator and carry on
    without a rebalance (no callback, same generation, commits accepted)."""
    group = "java-failover"
    env = Consumers(tmp_path, pg_nodes[0])
    bootstrap = ",".join(n.bootstrap for n in pg_nodes)
    members = [
        JavaConsumerProcess(
            env.hub,
            tmp_path,
            bootstrap,
            group,
            TOPIC,
            f"{group}-{i}",
            instance=f"{group}-inst{i}",
            heartbeat_interval_ms=HEARTBEAT_MS,
            session_timeout_ms=30000,
        )
        for i in range(2)
    ]
    env.consumers.extend(members)
    try:

        def stable() -> dict[str, Any] | None:
            for m in members:
                m.check_alive()
            if sorted(p for m in members for p in m.owned) != sorted(ALL):
                return None
            try:
                g: dict[str, Any] = pg_nodes[0].get(f"/groups/{group}")
            except OSError:
                return None
            ok = g["state"] == "Stable" and len(g["members"]) == 2
            return g if ok and all(m.owned for m in members) else None

        g = env.wait(stable, f"group {group} stable", BALANCE_S)
        gen = g["generation"]
        before = {m.name: m.owned for m in members}
        for m in members:
            assert m.commit(5)["generation"] == gen
        pid = next(x["log_partition"] for x in pg_nodes[0].get("/groups") if x["group_id"] == group)
        owner_id = next(
            p["owner"] for p in pg_nodes[0].get("/cluster")["partitions"] if p["partition"] == pid
        )
        owner = next(n for n in pg_nodes if n.node_id == owner_id)
        survivor = next(n for n in pg_nodes if n is not owner)
        marks = [m.mark() for m in members]
        owner.kill()

        def taken_over() -> dict[str, Any] | None:
            try:
                g2: dict[str, Any] = survivor.get(f"/groups/{group}")
            except OSError:
                return None
            return g2 if g2["state"] == "Stable" else None

        g2 = env.wait(taken_over, f"node {survivor.node_id} serves {group}", BALANCE_S)
        assert g2["generation"] == gen
        for m in members:  # commits reach the new coordinator, with the same generation
            assert m.commit(6, timeout=60)["generation"] == gen
        assert_quiet(members, marks, "through the failover")
        assert {m.name: m.owned for m in members} == before
        got = {o["partition"]: o["offset"] for o in survivor.get(f"/groups/{group}")["offsets"]}
        assert got == dict.fromkeys(ALL, 6)
        assert survivor.get(f"/groups/{group}")["generation"] == gen
    finally:
        env.kill_consumers()
