"""examples/ against a real node, as a newcomer runs them after `make run`; the blocking
wrapper from plain threaded code; and the SDK standing alone: a process that uses it loads
nothing of the server."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from membership import Blocking, LeaderElection
from tests.support.nodes import ROOT, CoordinatorProcess

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    workdir = tmp_path_factory.mktemp("examples")
    n = CoordinatorProcess(
        f"sqlite+aiosqlite:///{workdir}/c.db", workdir, {"COORD_INITIAL_REBALANCE_DELAY_MS": "300"}
    )
    n.start()
    try:
        yield n
    finally:
        n.kill()


def run_example(name: str, node: CoordinatorProcess, seconds: float) -> str:
    r = subprocess.run(
        [sys.executable, f"examples/{name}.py", "--bootstrap", node.bootstrap,
         "--seconds", str(seconds)],
        cwd=ROOT, capture_output=True, text=True, timeout=seconds + 30,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    return r.stdout


def test_work_distribution_example_splits_the_jobs(node: CoordinatorProcess) -> None:
    out = run_example("work_distribution", node, 6)
    shares: dict[str, set[str]] = {}
    for worker, jobs in re.findall(r"^\[(worker-\w)\] generation \d+: (job-.*)$", out, re.M):
        shares[worker] = set(jobs.split(", "))
    assert sorted(shares) == ["worker-a", "worker-b", "worker-c"], out
    assert set().union(*shares.values()) == {f"job-{n:02d}" for n in range(12)}
    assert [len(s) for s in shares.values()] == [4, 4, 4]


def test_leader_election_example_hands_over_with_higher_tokens(node: CoordinatorProcess) -> None:
    out = run_example("leader_election", node, 12)
    elected = [
        (who, int(t))
        for who, t in re.findall(r"^\[(node-\w)\] elected, fencing token (\d+)$", out, re.M)
    ]
    assert len(elected) >= 2, out
    tokens = [t for _, t in elected]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert len({who for who, _ in elected}) == len(elected)  # each hand-over to another node
    # a leader only writes with its own token
    for who, token in re.findall(r"^\[(node-\w)\] leading: write with token (\d+)$", out, re.M):
        assert (who, int(token)) in elected


def test_blocking_wrapper_from_threaded_code(node: CoordinatorProcess, tmp_path: Path) -> None:
    election = Blocking(
        lambda: LeaderElection(node.bootstrap, "blocking-election", group_instance_id="solo")
    )
    with election:
        token = election.run(election.obj.wait_elected(30))
        assert token >= 1 and election.obj.is_leader and election.obj.fencing_token == token
        group = node.get("/groups/blocking-election")
        assert group["state"] == "Stable" and group["generation"] == token
    # a static member closing does not leave: the group keeps it until its session expires
    assert node.get("/groups/blocking-election")["members"]


def test_consumers_example_forms_a_group_on_demo(tmp_path: Path) -> None:
    """examples/consumers.py against a node with `make run`'s topic: three consumers split it."""
    n = CoordinatorProcess(
        f"sqlite+aiosqlite:///{tmp_path}/c.db",
        tmp_path,
        {"COORD_INITIAL_REBALANCE_DELAY_MS": "300", "COORD_TOPICS": "demo:6"},
    )
    n.start()
    try:
        out = run_example("consumers", n, 10)
        group = n.get("/groups/demo-app")
    finally:
        n.kill()
    assert group["protocol_type"] == "consumer" and group["generation"] >= 1, group
    # at some point the three held the six partitions between them, each once (when the example
    # stops, the consumers leave one by one and the last ones may be handed the others' share)
    last: dict[str, str] = {}
    split = False
    for who, parts in re.findall(r"^\[(consumer-\d)\] assigned (.*)$", out, re.M):
        last[who] = parts
        held = sorted(p for parts in last.values() for p in parts.split(", "))
        split |= len(last) == 3 and held == [f"demo:{p}" for p in range(6)]
    assert sorted(last) == ["consumer-1", "consumer-2", "consumer-3"], out
    assert split, out


# a process on the SDK alone: a member elected by a real node, then what it had loaded
STANDALONE = """
import asyncio, json, sys
from membership import WorkDistributor

async def main():
    async with WorkDistributor(sys.argv[1], "standalone", ["a", "b"]) as work:
        await work.member.wait_assigned(30)
        return sorted(work.items)

items = asyncio.run(main())
server = ("app", "storage", "api", "cli", "pipeline", "bench", "tests")
print(json.dumps({
    "items": items,
    "server_modules": sorted(m for m in sys.modules if m.split(".")[0] in server),
    "finders": [type(f).__module__ + "." + type(f).__qualname__ for f in sys.meta_path],
}))
"""


def test_the_sdk_loads_nothing_of_the_server(node: CoordinatorProcess) -> None:
    # run from the checkout, where `app` is importable: nothing may import it
    r = subprocess.run(
        [sys.executable, "-c", STANDALONE, node.bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    seen = json.loads(r.stdout.splitlines()[-1])
    assert seen["items"] == ["a", "b"]
    assert seen["server_modules"] == []
    # app/__init__.py installs the compiled hot path's finder (app/compiled.py) on import
    assert not [f for f in seen["finders"] if f.startswith("app.")], seen["finders"]


# members closed while heartbeats fly (one every millisecond): each close must return
CLOSES = """
import asyncio, random, sys
from membership import WorkDistributor

async def main():
    for i in range(30):
        work = WorkDistributor(sys.argv[1], f"closing-{i}", ["a"])
        work.member.heartbeat_interval_ms = 1
        await work.start()
        await work.member.wait_assigned(30)
        await asyncio.sleep(random.random() * 0.05)
        await work.close()
    print("closed 30")

asyncio.run(main())
"""


def test_a_member_closed_amid_heartbeats_stops(node: CoordinatorProcess) -> None:
    # a cancellation that meets a reply in one turn of the loop must still stop the heartbeat
    # task (Python 3.11's wait_for dropped it, and close() waited on it forever)
    r = subprocess.run(
        [sys.executable, "-c", CLOSES, node.bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    assert r.stdout.split() == ["closed", "30"]
