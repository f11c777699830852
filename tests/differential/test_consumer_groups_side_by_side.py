"""kafka-consumer-groups (ConsumerGroupCommand from kafka-tools 4.x) against Apache Kafka's broker
and against our node, for the same group shapes built with the raw client on both: every
command's output must be the same once the cluster's own values are masked (coordinator port,
member-id UUIDs, whitespace padding).

Both clusters' topic is empty, so LOG-END-OFFSET is 0 on both and the lag agrees; on our node it
is always 0 because the node has no data plane (README: kafka-consumer-groups). Every pair of
outputs is written to artifacts/kcg-side-by-side.txt for the reader.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import AsyncIterator

import pytest

from tests.differential.scenarios import TOPIC, Run, Target, join_all
from tests.support.consumer_bytes import assignment, subscription
from tests.support.java import TOOL_CLASS, java_build, java_command  # noqa: F401 - fixture
from tests.support.kafka_broker import KAFKA_VERSION
from tests.support.kafka_client import KafkaTestClient
from tests.support.nodes import ROOT
from tests.support.tasks import cancel_and_wait

STABLE = "kcg-side-stable"
EMPTY = "kcg-side-empty"
ARTIFACT = ROOT / "artifacts" / "kcg-side-by-side.txt"
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PORT = re.compile(r"127\.0\.0\.1:\d+")

# each command, and what it must print on both sides (two tools failing alike would "agree")
COMMANDS: list[tuple[list[str], str | None]] = [
    (["--list"], None),
    (["--list", "--state"], None),
    (["--list", "--state", "Stable"], None),
    # ListGroups v5's type filter (KIP-1043): every group of ours is classic
    (["--list", "--type", "classic"], "kcg-side-stable Classic"),
    (["--list", "--type", "consumer"], None),
    (["--describe", "--group", STABLE], "diff-topic 2 7 0 -7"),
    (["--describe", "--group", STABLE, "--offsets"], None),
    (["--describe", "--group", STABLE, "--members"], None),
    (["--describe", "--group", STABLE, "--members", "--verbose"],
     "inst-a /127.0.0.1 kcg-side-a 2 - diff-topic:0,1 - -"),
    (["--describe", "--group", STABLE, "--state"], "range Stable 2"),
    (["--describe", "--group", EMPTY], None),
    (["--describe", "--group", EMPTY, "--state"], None),
    (["--describe", "--group", "kcg-side-unknown"],
     "GroupIdNotFoundException: Group kcg-side-unknown not found."),
    (["--reset-offsets", "--group", EMPTY, "--topic", TOPIC, "--to-earliest", "--dry-run"], None),
    (["--reset-offsets", "--group", EMPTY, "--topic", TOPIC, "--shift-by", "-1", "--dry-run"],
     None),
    (["--reset-offsets", "--group", EMPTY, "--all-topics", "--to-datetime",
      "2020-01-01T00:00:00.000", "--dry-run"], None),
    (["--reset-offsets", "--group", EMPTY, "--topic", f"{TOPIC}:0", "--to-offset", "0",
      "--execute"], "kcg-side-empty diff-topic 0 0"),
    (["--reset-offsets", "--group", STABLE, "--topic", TOPIC, "--to-earliest", "--execute"],
     "Assignments can only be reset if the group 'kcg-side-stable' is inactive"),
    (["--delete-offsets", "--group", EMPTY, "--topic", f"{TOPIC}:1"], "diff-topic 1 Successful"),
    (["--delete-offsets", "--group", STABLE, "--topic", TOPIC], "GroupSubscribedToTopicException"),
    (["--describe", "--group", EMPTY, "--offsets"], None),
    (["--delete", "--group", STABLE], "GroupNotEmptyException"),
    (["--delete", "--group", EMPTY],
     "Deletion of requested consumer groups ('kcg-side-empty') was successful."),
    (["--list"], None),
]  # fmt: skip


class Shape:
    """The groups both clusters get: STABLE with a static member A (partitions 0-1) and a dynamic
    member B (2-3), A committed 0:5 and 1:6, B committed 2:7; EMPTY with offsets 3 on every
    partition, committed by a simple consumer. A task heartbeats STABLE's members meanwhile."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.run = Run(target)
        self.beating: asyncio.Task[None] | None = None

    async def build(self) -> None:
        run = self.run
        sub = subscription([TOPIC])
        a = await run.client("kcg-side-a")
        b = await run.client("kcg-side-b")
        ja, jb = await join_all(
            a.join_group(STABLE, group_instance_id="inst-a", protocols=[("range", sub)],
                         session_timeout_ms=30_000),
            _join_dynamic(b, sub),
        )  # fmt: skip
        plan = {
            ja.member_id: assignment({TOPIC: [0, 1]}),
            jb.member_id: assignment({TOPIC: [2, 3]}),
        }
        await asyncio.gather(
            a.sync_group(STABLE, ja.generation_id, ja.member_id, assignments=plan,
                         group_instance_id="inst-a"),
            b.sync_group(STABLE, jb.generation_id, jb.member_id),
        )  # fmt: skip
        gen = ja.generation_id
        await a.offset_commit(STABLE, {(TOPIC, 0): 5, (TOPIC, 1): 6}, generation_id=gen,
                              member_id=ja.member_id, group_instance_id="inst-a")  # fmt: skip
        await b.offset_commit(STABLE, {(TOPIC, 2): 7}, generation_id=gen, member_id=jb.member_id)
        await a.offset_commit(EMPTY, {(TOPIC, p): 3 for p in range(4)})
        members = [(a, ja.member_id, "inst-a"), (b, jb.member_id, None)]
        self.beating = asyncio.ensure_future(_heartbeat(members, gen))

    async def close(self) -> None:
        if self.beating is not None:
            await cancel_and_wait(self.beating)
        await self.run.close()


async def _join_dynamic(c: KafkaTestClient, sub: bytes) -> object:
    kw = {"protocols": [("range", sub)], "session_timeout_ms": 30_000}
    first = await c.join_group(STABLE, **kw)  # MEMBER_ID_REQUIRED at v9
    return await c.join_group(STABLE, first.member_id, **kw)


async def _heartbeat(members: list[tuple[KafkaTestClient, str, str | None]], gen: int) -> None:
    while True:
        for c, member_id, instance in members:
            reply = await c.heartbeat(STABLE, gen, member_id, group_instance_id=instance)
            assert reply.error_code == 0, reply
        await asyncio.sleep(1.0)


# Kafka's other admin tools on the same AdminClient: kafka-groups (ListGroups with types) and
# kafka-cluster cluster-id (DescribeCluster, API 60)
OTHER_TOOLS: list[tuple[str, list[str], str]] = [
    ("org.apache.kafka.tools.GroupsCommand", ["--list"], "kcg-side-stable Classic consumer"),
    ("org.apache.kafka.tools.ClusterTool", ["cluster-id"], "Cluster ID: <cluster-id>"),
]
CLUSTER_ID = re.compile(r"Cluster ID: \S+")


def kcg(bootstrap: str, args: list[str], tool: str = TOOL_CLASS) -> str:
    """The tool's stdout, then its stderr lines that are not log lines."""
    if tool == "org.apache.kafka.tools.ClusterTool":  # its subcommand comes first
        args = [*args, "--bootstrap-server", bootstrap]
    else:
        args = ["--bootstrap-server", bootstrap, *args]
    cmd = java_command(tool, *args, log_level="error")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    errors = [ln for ln in r.stderr.splitlines() if ln.strip() and "] ERROR " not in ln]
    return r.stdout + ("\n[stderr]\n" + "\n".join(errors) if errors else "")


# The broker is the session's, shared with other tests on this worker (the gateway suites'
# upstream): listings compare this test's own groups only.
OWN = "kcg-side-"
LIST_COLUMNS = {"GROUP", "STATE", "TYPE", "PROTOCOL"}


def masked(out: str) -> list[str]:
    """Lines without the cluster's own values or padding; rows sorted under their header (the
    tool prints groups in ListGroups order, which is the coordinator's)."""
    lines = []
    for ln in out.splitlines():
        ln = PORT.sub("127.0.0.1:<port>", UUID.sub("<uuid>", ln))
        ln = CLUSTER_ID.sub("Cluster ID: <cluster-id>", ln)
        ln = " ".join(ln.split())
        if not ln or ("warm-up" in ln):  # the differential fixtures' own group
            continue
        lines.append(ln)
    if lines and set(lines[0].split()) <= LIST_COLUMNS:  # a --list table
        return [lines[0], *sorted(ln for ln in lines[1:] if ln.startswith(OWN))]
    if lines and lines[0].split()[0] == "GROUP":
        return [lines[0], *sorted(lines[1:])]
    if lines and all(" " not in ln for ln in lines):  # --list: one group per line
        return sorted(ln for ln in lines if ln.startswith(OWN))
    return lines


@pytest.fixture
async def shapes(apache_kafka: Target, coordinator: Target) -> AsyncIterator[list[Shape]]:
    both = [Shape(apache_kafka), Shape(coordinator)]
    try:
        await asyncio.gather(*(s.build() for s in both))
        yield both
    finally:
        for s in both:
            await s.close()


async def test_same_output_as_against_apache_kafka(java_build: None, shapes: list[Shape]) -> None:  # noqa: F811
    ARTIFACT.parent.mkdir(exist_ok=True)
    report: list[str] = []
    differing: list[str] = []
    runs = [(TOOL_CLASS, args, expect) for args, expect in COMMANDS] + OTHER_TOOLS
    for tool, args, expect in runs:
        theirs, ours = await asyncio.gather(
            *(asyncio.to_thread(kcg, _bootstrap(s.target), args, tool) for s in shapes)
        )
        name = {TOOL_CLASS: "kafka-consumer-groups"}.get(tool, tool.rsplit(".", 1)[1])
        title = f"{name} --bootstrap-server <node> " + " ".join(args)
        report += [f"$ {title}", f"--- Apache Kafka {KAFKA_VERSION}", theirs.rstrip(),
                   "--- coordinator", ours.rstrip(), ""]  # fmt: skip
        if masked(theirs) != masked(ours):
            differing.append(f"{title}\n{theirs}\n--- ours:\n{ours}")
        if expect is not None:
            assert expect in " ".join(masked(ours)).replace("<uuid> ", ""), (title, ours)
    ARTIFACT.write_text("\n".join(report) + "\n")
    assert not differing, "\n\n".join(differing)


def _bootstrap(target: Target) -> str:
    host, port = target.address
    return f"{host}:{port}"
