"""The membership SDK end to end: worker processes (tests/sdk/worker.py) against real nodes
(`coordinator serve`; two on PostgreSQL for failover) and against Apache Kafka's broker.

What is counted: generations (one per rebalance), every worker's assignment events (a worker
whose share did not change prints nothing), the items each holds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sdk.workers import Fleet, SdkWorker
from tests.support.kafka_broker import KafkaBroker
from tests.support.nodes import CoordinatorProcess, postgres_nodes

pytestmark = [pytest.mark.integration]

COORD_ENV = {
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
}
GROUP = "sdk-work"


@pytest.fixture
def node(tmp_path: Path) -> Iterator[CoordinatorProcess]:
    n = CoordinatorProcess(f"sqlite+aiosqlite:///{tmp_path}/c.db", tmp_path, dict(COORD_ENV))
    n.start()
    try:
        yield n
    finally:
        n.kill()


def fleet_on(tmp_path: Path, bootstrap: str, **defaults: Any) -> Fleet:
    return Fleet(tmp_path, bootstrap, GROUP, **defaults)


def form(fleet: Fleet, names: list[str], items: set[str], **options: Any) -> int:
    """Start static workers `names` and wait until one generation splits `items` among them
    exactly; that generation."""
    for name in names:
        fleet.start(name, instance=name, **options)

    def formed() -> int | None:
        lasts = [w.last for w in fleet.workers.values()]
        if any(e is None or e["event"] != "assigned" for e in lasts):
            return None
        gens = {e["generation"] for e in lasts if e}
        held = [w.items for w in fleet.workers.values()]
        if len(gens) == 1 and set().union(*held) == items and sum(map(len, held)) == len(items):
            return gens.pop()
        return None

    generation: int = fleet.wait(formed, f"{len(names)} workers splitting {len(items)} items", 90)
    return generation


def leader_of(fleet: Fleet) -> SdkWorker:
    return next(w for w in fleet.workers.values() if w.last and w.last.get("leader"))


def quiet_since(marks: dict[str, int], fleet: Fleet, *but: str) -> dict[str, list[Any]]:
    """The assignment events of every worker other than `but` since `marks`."""
    return {
        n: w.since(marks[n], "assigned", "revoked", "lost")
        for n, w in fleet.workers.items()
        if n not in but
    }


def restart(fleet: Fleet, name: str, **options: Any) -> SdkWorker:
    """SIGKILL a worker and start it again under the same group.instance.id."""
    old = fleet.workers[name]
    old.kill()
    return fleet.start(name, instance=name, **options)


ITEMS_100 = {f"item-{i:03d}" for i in range(100)}


def test_ten_workers_a_static_worker_killed_and_restarted_gets_its_items_back(
    node: CoordinatorProcess, tmp_path: Path
) -> None:
    fleet = fleet_on(tmp_path, node.bootstrap, items="100")
    try:
        names = [f"w{i}" for i in range(10)]
        gen = form(fleet, names, ITEMS_100)
        before = fleet.items()
        assert all(len(v) == 10 for v in before.values()), before  # sticky: balanced
        victim = next(n for n in names if not fleet.workers[n].last["leader"])  # type: ignore[index]
        marks = {n: w.mark() for n, w in fleet.workers.items()}
        back = restart(fleet, victim, items="100")
        ev = back.wait_event("assigned", 30)
        assert (ev["generation"], set(ev["items"])) == (gen, before[victim])
        assert not ev["skip"] and ev["sent"] == 0
        time.sleep(1.0)  # a rebalance would show by now (heartbeat interval 0.5 s)
        assert quiet_since(marks, fleet, victim) == {n: [] for n in names if n != victim}
        assert node.get(f"/groups/{GROUP}")["generation"] == gen
    finally:
        fleet.kill_all()


def test_static_leader_restart_is_answered_with_skip_assignment(
    node: CoordinatorProcess, tmp_path: Path
) -> None:
    fleet = fleet_on(tmp_path, node.bootstrap, items="20")
    try:
        gen = form(fleet, ["a", "b", "c", "d"], {f"item-{i:03d}" for i in range(20)})
        before = fleet.items()
        leader = leader_of(fleet).name
        marks = {n: w.mark() for n, w in fleet.workers.items()}
        ev = restart(fleet, leader, items="20").wait_event("assigned", 30)
        # KIP-814: the coordinator said SkipAssignment, the leader sent no assignment and got
        # its own back; the generation did not move
        assert (ev["leader"], ev["skip"], ev["sent"]) == (True, True, 0)
        assert (ev["generation"], set(ev["items"])) == (gen, before[leader])
        time.sleep(1.0)
        assert quiet_since(marks, fleet, leader) == {n: [] for n in before if n != leader}
        group = node.get(f"/groups/{GROUP}")
        assert group["generation"] == gen and group["state"] == "Stable"
        assert group["leader"] == ev["member_id"]
    finally:
        fleet.kill_all()


def test_leader_restart_after_a_silent_subscription_change_rebalances_once(
    node: CoordinatorProcess, tmp_path: Path
) -> None:
    nine = {f"item-{i:03d}" for i in range(9)}
    fleet = fleet_on(tmp_path, node.bootstrap, items="9")
    try:
        gen = form(fleet, ["a", "b", "c"], nine)
        leader = leader_of(fleet).name
        follower = next(n for n in fleet.workers if n != leader)
        # the follower restarts wanting one more item: a static member back within its session
        # with the same protocol is not rebalanced (its new metadata is only stored)
        wider = ",".join(sorted(nine | {"extra-1"}))
        ev = restart(fleet, follower, items=wider).wait_event("assigned", 30)
        assert ev["generation"] == gen and "extra-1" not in ev["items"]
        time.sleep(1.0)
        assert node.get(f"/groups/{GROUP}")["generation"] == gen
        # the leader restarts: SkipAssignment, but the basis of the current assignment no longer
        # matches the members' metadata, so it rejoins once
        back = restart(fleet, leader, items="9")
        skipped = back.wait_event("assigned", 30)
        assert (skipped["skip"], skipped["generation"]) == (True, gen)
        fleet.wait(lambda: fleet.assigned_in(gen + 1), "the rebalance the leader triggered", 30)
        time.sleep(1.5)
        assert node.get(f"/groups/{GROUP}")["generation"] == gen + 1  # exactly one rebalance
        rebalanced = back.snapshot("assigned")[-1]
        assert rebalanced["reason"] == "members' metadata changed while the leader was away"
        assert rebalanced["leader"] and rebalanced["sent"] == 3
        assert "extra-1" in fleet.workers[follower].items  # only it subscribes to extra-1
        assert set().union(*fleet.items().values()) == nine | {"extra-1"}
    finally:
        fleet.kill_all()


@pytest.fixture
def pg_nodes(pg_admin_dsn: str, tmp_path: Path) -> Iterator[list[CoordinatorProcess]]:
    env = {**COORD_ENV, "COORD_LEASE_TTL_MS": "3000"}
    with postgres_nodes(pg_admin_dsn, tmp_path, env, prefix="sdk") as nodes:
        yield nodes


def owner_of(nodes: list[CoordinatorProcess], group: str) -> CoordinatorProcess:
    alive = next(n for n in nodes if n.running)
    pid = next(g["log_partition"] for g in alive.get("/groups") if g["group_id"] == group)
    owner_id = next(
        p["owner"] for p in alive.get("/cluster")["partitions"] if p["partition"] == pid
    )
    return next(n for n in nodes if n.node_id == owner_id)


def stats(w: SdkWorker) -> dict[str, Any]:
    return w.command("stats", "stats", 10)


def test_members_keep_working_through_a_coordinator_failover(
    pg_nodes: list[CoordinatorProcess], tmp_path: Path
) -> None:
    bootstrap = ",".join(n.bootstrap for n in pg_nodes)
    fleet = fleet_on(tmp_path, bootstrap, items="12")
    try:
        gen = form(fleet, ["a", "b", "c"], {f"item-{i:03d}" for i in range(12)})
        before = fleet.items()
        marks = {n: w.mark() for n, w in fleet.workers.items()}
        owner = owner_of(pg_nodes, GROUP)
        survivor = next(n for n in pg_nodes if n is not owner)
        owner.kill()
        fleet.wait(
            lambda: all(stats(w)["coordinator_changes"] >= 1 for w in fleet.workers.values()),
            "every worker heartbeating its new coordinator",
            60,
        )
        time.sleep(1.0)
        group = survivor.get(f"/groups/{GROUP}")
        assert (group["state"], group["generation"]) == ("Stable", gen)
        assert quiet_since(marks, fleet) == {n: [] for n in before}  # no revoke, no rebalance
        assert fleet.items() == before
    finally:
        fleet.kill_all()


def test_leader_election_never_two_leaders_with_one_token(
    pg_nodes: list[CoordinatorProcess], tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens.txt"
    bootstrap = ",".join(n.bootstrap for n in pg_nodes)
    fleet = Fleet(tmp_path, bootstrap, "sdk-election", mode="elect", token_file=str(tokens),
                  session_timeout_ms=3000, heartbeat_interval_ms=300)  # fmt: skip
    names = ["e0", "e1", "e2"]
    rounds: list[str] = []
    try:
        for name in names:
            fleet.start(name, instance=name)

        def leader() -> SdkWorker | None:
            held = [w for w in fleet.workers.values() if w.alive and w.items == {"leader"}]
            return held[0] if len(held) == 1 else None

        for _ in range(3):
            current = fleet.wait(leader, "one leader", 60)
            time.sleep(0.5)  # let it act (write its token) for a while
            # kill the leader: another is elected once its session expires
            current.kill()
            nxt = fleet.wait(
                lambda gone=current: (w := leader()) is not None and w is not gone and w,
                "a new leader",
                60,
            )
            rounds.append(f"{current.name} killed -> {nxt.name}")
            fleet.start(current.name, instance=current.name)
            # and the coordinator owning the group dies and comes back
            owner = owner_of(pg_nodes, "sdk-election")
            owner.kill()
            time.sleep(1.0)
            owner.start()
        fleet.wait(leader, "one leader at the end", 60)
        time.sleep(1.0)
    finally:
        fleet.kill_all()
    writers: dict[int, set[str]] = {}
    for line in tokens.read_text().splitlines():
        token, instance, _pid, _t = line.split()
        writers.setdefault(int(token), set()).add(instance)
    assert len(writers) >= 4, (writers, rounds)  # the first election and one per killed leader
    assert all(len(w) == 1 for w in writers.values()), writers
    print(json.dumps({"rounds": rounds, "tokens": {t: sorted(w) for t, w in writers.items()}}))


def test_against_apache_kafka_static_leader_restart(
    apache_kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """The same SDK against Apache Kafka 4.0: versions negotiated (JoinGroup v9 there too),
    SkipAssignment for the returning static leader, the generation unchanged."""
    fleet = Fleet(tmp_path, apache_kafka_broker.bootstrap, "sdk-on-kafka", items="12")
    try:
        gen = form(fleet, ["a", "b", "c"], {f"item-{i:03d}" for i in range(12)})
        before = fleet.items()
        leader = leader_of(fleet).name
        marks = {n: w.mark() for n, w in fleet.workers.items()}
        ev = restart(fleet, leader, items="12").wait_event("assigned", 30)
        assert (ev["skip"], ev["sent"], ev["generation"]) == (True, 0, gen)
        assert set(ev["items"]) == before[leader]
        time.sleep(1.0)
        assert quiet_since(marks, fleet, leader) == {n: [] for n in before if n != leader}
    finally:
        fleet.kill_all()
