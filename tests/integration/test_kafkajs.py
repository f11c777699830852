"""End-to-end: kafkajs (npm, the fourth client language) against a real `coordinator serve`
process on SQLite.

Each consumer is a Node process running tests/js/consumer.js with the kafkajs version locked in
tests/js/package-lock.json, installed on first use (`npm ci`; a missing node or npm fails the
run). A group of two forms and splits the partitions, commits read back through kafkajs's admin
client, and after the coordinator is SIGKILLed and restarted on the same database and ports the
same consumer processes carry on in their group with their committed offsets.

Waits are event-driven (the consumers' JSON events) with generous deadlines.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.consumers import Hub
from tests.support.js import JsConsumer, ensure_node_modules
from tests.support.nodes import CoordinatorProcess

pytestmark = pytest.mark.integration

TOPIC = "kjs"
PARTITIONS = 6
ALL = frozenset(range(PARTITIONS))
BALANCE_S = 60.0  # deadline for a group to (re)converge

COORD_ENV = {
    "COORD_TOPICS": f"{TOPIC}:{PARTITIONS}",  # topics must exist before subscribing
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
    "COORD_LOG_LEVEL": "INFO",
}


@pytest.fixture(scope="session")
def kafkajs_installed() -> None:
    ensure_node_modules()


class JsEnv:
    """A test's coordinator and its kafkajs consumers."""

    def __init__(self, tmp_path: Path) -> None:
        self.workdir = tmp_path
        db_url = f"sqlite+aiosqlite:///{tmp_path}/coordinator.db"
        self.coord = CoordinatorProcess(db_url, tmp_path, dict(COORD_ENV))
        self.hub = Hub()
        self.consumers: list[JsConsumer] = []

    def consumer(self, group: str, name: str) -> JsConsumer:
        c = JsConsumer(self.hub, self.workdir, self.coord.bootstrap, group, TOPIC, name)
        self.consumers.append(c)
        return c

    def wait(self, pred: Any, what: str, timeout: float = BALANCE_S) -> Any:
        return self.hub.wait_until(pred, timeout, what)

    def group(self, group: str) -> dict[str, Any]:
        """The node's own view of the group (admin API)."""
        view: dict[str, Any] = self.coord.get(f"/groups/{group}")
        return view

    def diagnostics(self) -> str:
        parts = [c.describe() for c in self.consumers]
        parts.append("--- coordinator log\n" + self.coord.logs(tail=8000))
        return "\n".join(parts)


@pytest.fixture
def js(tmp_path: Path, kafkajs_installed: None) -> Iterator[JsEnv]:
    env = JsEnv(tmp_path)
    env.coord.start()
    try:
        yield env
    finally:
        for c in env.consumers:
            c.kill()
        env.coord.kill()
        # pytest shows a teardown's output only when the test failed
        print(env.diagnostics())


def formed(*members: JsConsumer) -> dict[str, Any] | None:
    """The members' common latest join when they are one generation that splits every partition
    between them (each gets some, none twice), else None."""
    joins = [m.last_join() for m in members]
    if any(j is None for j in joins):
        return None
    gens = {j["generation"] for j in joins if j is not None}
    parts = [frozenset(j["assignment"]) for j in joins if j is not None]
    if len(gens) != 1 or any(not p for p in parts):
        return None
    if sum(len(p) for p in parts) != PARTITIONS or frozenset().union(*parts) != ALL:
        return None
    return joins[0]


def test_kafkajs_group_of_two_forms_and_splits_partitions(js: JsEnv) -> None:
    a = js.consumer("kjs-split", "a")
    b = js.consumer("kjs-split", "b")
    join = js.wait(lambda: formed(a, b), "a and b to split the partitions in one generation")

    assert a.assignment.isdisjoint(b.assignment)
    leaders = {a.joined()["leaderId"], b.joined()["leaderId"]}
    assert len(leaders) == 1
    assert {a.joined()["isLeader"], b.joined()["isLeader"]} == {True, False}

    view = js.group("kjs-split")
    assert view["state"] == "Stable"
    assert view["generation"] == join["generation"]
    members = {m["member_id"]: m for m in view["members"]}
    assert set(members) == {a.joined()["memberId"], b.joined()["memberId"]}
    for c in (a, b):
        m = members[c.joined()["memberId"]]
        assert m["client_id"] == c.name
        (assigned,) = m["assignment"]["partitions"]
        assert assigned["topic"] == TOPIC and frozenset(assigned["partitions"]) == c.assignment

    # b leaves (LeaveGroup): a takes every partition in the next generation
    b.quit()
    js.wait(
        lambda: (
            (j := a.last_join()) and j["generation"] > join["generation"] and a.assignment == ALL
        ),
        "a to own every partition after b left",
    )


def test_kafkajs_commits_read_back(js: JsEnv) -> None:
    a = js.consumer("kjs-commit", "a")
    b = js.consumer("kjs-commit", "b")
    join = js.wait(lambda: formed(a, b), "a and b to form the group")

    # each member commits its own partitions (consumer.commitOffsets), at 100 + 7 * partition
    want = {p: 100 + 7 * p for p in range(PARTITIONS)}
    for c in (a, b):
        ev = c.commit({p: want[p] for p in c.assignment})
        assert ev["generation"] == join["generation"]

    # read back with kafkajs's admin client (admin.fetchOffsets), from either process
    assert a.fetch() == want
    assert b.fetch() == want
    # and the node agrees
    offsets = {o["partition"]: o["offset"] for o in js.group("kjs-commit")["offsets"]}
    assert offsets == want, js.group("kjs-commit")["offsets"]

    # a later commit replaces the earlier one
    p = min(a.assignment)
    a.commit({p: 5000})
    assert a.fetch() == {**want, p: 5000}


def test_kafkajs_resumes_after_coordinator_restart(js: JsEnv) -> None:
    a = js.consumer("kjs-restart", "a")
    b = js.consumer("kjs-restart", "b")
    before = js.wait(lambda: formed(a, b), "a and b to form the group")
    want = {p: 40 + p for p in range(PARTITIONS)}
    for c in (a, b):
        c.commit({p: want[p] for p in c.assignment})
    assert a.fetch() == want
    members_before = {a.joined()["memberId"], b.joined()["memberId"]}

    # SIGKILL the node; start it again on the same database and ports. The consumer processes
    # are left alone: kafkajs reconnects by itself.
    marks = {c.name: c.mark() for c in (a, b)}
    js.coord.restart()

    # both get heartbeats answered by the new process, in one generation splitting everything
    for c in (a, b):
        c.wait_event("heartbeat", BALANCE_S, after=marks[c.name])

    def settled() -> dict[str, Any] | None:
        join = formed(a, b)
        if join is None:
            return None
        for c in (a, b):
            beats = c.since(marks[c.name], "heartbeat")
            if not beats or beats[-1]["generation"] != join["generation"]:
                return None
        return join

    after = js.wait(settled, "a and b to heartbeat in one group again after the restart")
    assert after["generation"] >= before["generation"]
    assert a.alive and b.alive
    for c in (a, b):
        assert not c.since(marks[c.name], "error"), c.describe()

    view = js.group("kjs-restart")
    assert view["state"] == "Stable"
    assert {m["member_id"] for m in view["members"]} == {
        a.joined()["memberId"],
        b.joined()["memberId"],
    }
    # the offsets committed before the kill are still there, and new commits are accepted
    assert a.fetch() == want
    assert b.fetch() == want
    more = {p: 1000 + p for p in a.assignment}
    ev = a.commit(more)
    assert ev["generation"] == after["generation"]
    assert b.fetch() == {**want, **more}

    # what happened, for the log of a passing run too (-s): did the group keep its generation?
    print(
        json.dumps(
            {
                "generation_before": before["generation"],
                "generation_after": after["generation"],
                "same_members": members_before == {a.joined()["memberId"], b.joined()["memberId"]},
            }
        )
    )
