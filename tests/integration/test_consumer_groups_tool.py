"""End-to-end: Apache Kafka's kafka-consumer-groups (`ConsumerGroupCommand` from kafka-tools 4.x,
tests/support/java.py) against one real `coordinator serve` process per module, with a group of
two Java consumers.

What an operator sees is asserted column by column (the same columns and states the tool prints
against an Apache Kafka broker). The node has no data plane: ListOffsets answers 0 for the
earliest and the latest offset (and no record for a timestamp), so LOG-END-OFFSET is 0, LAG is
minus the committed offset, and the tool clamps every --reset-offsets target into [0, 0].
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import COORD_ENV
from tests.support.consumers import PARTITIONS, TOPIC, Consumers
from tests.support.java import (  # noqa: F401 - java_build is a fixture
    TOOL_CLASS,
    consumer_groups,
    java_build,
    java_command,
    java_consumer,
)
from tests.support.nodes import CoordinatorProcess

pytestmark = [pytest.mark.integration]

ALL = list(range(PARTITIONS))
STABLE = "kcg-stable"
SAMPLES = Path("/tmp/kcg_samples.txt")
OFFSET_COLUMNS = [
    "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
    "HOST", "CLIENT-ID",
]  # fmt: skip
MEMBER_COLUMNS = [
    "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "CURRENT-EPOCH",
    "CURRENT-ASSIGNMENT", "TARGET-EPOCH", "TARGET-ASSIGNMENT",
]  # fmt: skip


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, java_build: None) -> Iterator[Any]:  # noqa: F811
    workdir = tmp_path_factory.mktemp("kcg-node")
    coord = CoordinatorProcess(
        f"sqlite+aiosqlite:///{workdir}/coordinator.db", workdir, dict(COORD_ENV)
    )
    coord.start()
    try:
        yield coord
    finally:
        coord.kill()


@pytest.fixture(scope="module")
def stable(node: CoordinatorProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Group STABLE: two Java consumers (range), member i committed 10+i for its partitions."""
    env = Consumers(tmp_path_factory.mktemp("kcg-consumers"), node)
    try:
        members = [java_consumer(env, STABLE, f"{STABLE}-{i}", TOPIC) for i in range(2)]

        def balanced() -> bool:
            for m in members:
                m.check_alive()
            if sorted(p for m in members for p in m.owned) != ALL or not all(
                m.owned for m in members
            ):
                return False
            g = node.get(f"/groups/{STABLE}")
            if g["state"] != "Stable" or len(g["members"]) != 2:
                return False
            # the consumers' callbacks are of the group's current generation
            return all(m.snapshot("assigned")[-1]["generation"] == g["generation"] for m in members)

        env.wait(balanced, f"group {STABLE} stable with both members")
        for i, m in enumerate(members):
            m.commit(10 + i)
        yield env, members
    finally:
        env.kill_consumers()


# ==== helpers ====================================================================================


def table(out: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of the tool's table (columns separated by runs of spaces; no value
    holds a space)."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    # warnings the tool prints first ("Warn: Partition 0 from topic t6 is empty. ...")
    while lines and lines[0].startswith("Warn:"):
        lines.pop(0)
    header = lines[0].split()
    return header, [dict(zip(header, ln.split(), strict=True)) for ln in lines[1:]]


def api(node: CoordinatorProcess, method: str, path: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        node.admin_url + path,
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read() or b"null")


def offsets(node: CoordinatorProcess, group: str) -> dict[int, int]:
    return {o["partition"]: o["offset"] for o in node.get(f"/groups/{group}/offsets")}


def set_offsets(node: CoordinatorProcess, group: str, value: int) -> None:
    """An Empty group with offset `value` on every partition (the admin API's reset)."""
    body = {"offsets": [{"topic": TOPIC, "partition": p, "offset": value} for p in ALL]}
    api(node, "POST", f"/groups/{group}/offsets", body)
    assert offsets(node, group) == dict.fromkeys(ALL, value)


def kcg(node: CoordinatorProcess, *args: str) -> str:
    return consumer_groups(node.bootstrap, *args)


def sample(title: str, out: str) -> None:
    with SAMPLES.open("a") as f:
        f.write(f"$ kafka-consumer-groups --bootstrap-server <node> {title}\n{out.rstrip()}\n\n")


# ==== tests ======================================================================================


def test_list_and_list_state(node: CoordinatorProcess, stable: Any) -> None:
    set_offsets(node, "kcg-empty-listed", 3)
    assert {"kcg-empty-listed", STABLE} <= set(kcg(node, "--list").split())
    header, rows = table(kcg(node, "--list", "--state"))
    assert header == ["GROUP", "STATE"]
    states = {r["GROUP"]: r["STATE"] for r in rows}
    assert states[STABLE] == "Stable" and states["kcg-empty-listed"] == "Empty"
    header, rows = table(kcg(node, "--list", "--state", "Empty"))
    assert "kcg-empty-listed" in {r["GROUP"] for r in rows} and STABLE not in str(rows)


def test_describe_offsets_members_state(node: CoordinatorProcess, stable: Any) -> None:
    _env, members = stable
    SAMPLES.write_text("")
    detail = node.get(f"/groups/{STABLE}")
    member_ids = {m["client_id"]: m["member_id"] for m in detail["members"]}
    owner = {p: m.name for m in members for p in m.owned}
    committed = {p: 10 + i for i, m in enumerate(members) for p in m.owned}

    for args in (["--describe", "--group", STABLE], ["--describe", "--group", STABLE, "--offsets"]):
        out = kcg(node, *args)
        header, rows = table(out)
        assert header == OFFSET_COLUMNS, out
        assert sorted(int(r["PARTITION"]) for r in rows) == ALL
        for r in rows:
            p = int(r["PARTITION"])
            assert (r["GROUP"], r["TOPIC"]) == (STABLE, TOPIC)
            assert int(r["CURRENT-OFFSET"]) == committed[p]
            # no data plane: ListOffsets answers 0, so the lag is minus the committed offset
            assert int(r["LOG-END-OFFSET"]) == 0 and int(r["LAG"]) == -committed[p]
            assert r["CLIENT-ID"] == owner[p] and r["CONSUMER-ID"] == member_ids[owner[p]]
            assert r["HOST"] == "/127.0.0.1"
    sample(" ".join(args), out)

    out = kcg(node, "--describe", "--group", STABLE, "--members", "--verbose")
    sample(f"--describe --group {STABLE} --members --verbose", out)
    header, rows = table(out)
    assert header == MEMBER_COLUMNS, out
    assert {r["CLIENT-ID"] for r in rows} == {m.name for m in members}
    for r in rows:
        m = next(m for m in members if m.name == r["CLIENT-ID"])
        assert r["CONSUMER-ID"] == member_ids[m.name] and r["HOST"] == "/127.0.0.1"
        assert int(r["#PARTITIONS"]) == len(m.owned) == 3
        assert r["CURRENT-ASSIGNMENT"] == f"{TOPIC}:" + ",".join(map(str, sorted(m.owned)))
        # classic-protocol members have no epochs nor target assignment (as against Kafka)
        assert (r["CURRENT-EPOCH"], r["TARGET-EPOCH"], r["TARGET-ASSIGNMENT"]) == ("-", "-", "-")

    out = kcg(node, "--describe", "--group", STABLE, "--state")
    sample(f"--describe --group {STABLE} --state", out)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[0].split() == [
        "GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
    ]  # fmt: skip
    assert lines[1].split() == [STABLE, node.bootstrap, "(1)", "range", "Stable", "2"]


def test_reset_offsets_on_empty_group(node: CoordinatorProcess, stable: Any) -> None:
    group = "kcg-reset"
    set_offsets(node, group, 10)
    base = ["--reset-offsets", "--group", group]

    # a Stable group is refused, as by Kafka
    r = consumer_groups_raw(node, "--reset-offsets", "--group", STABLE, "--topic", TOPIC,
                            "--to-earliest", "--execute")  # fmt: skip
    assert "can only be reset if the group" in r and "Stable" in r, r
    assert offsets(node, STABLE) == {p: 10 + i for i, m in enumerate(stable[1]) for p in m.owned}

    # --dry-run prints the plan and changes nothing
    out = kcg(node, *base, "--topic", TOPIC, "--to-earliest", "--dry-run")
    header, rows = table(out)
    assert header == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in rows} == dict.fromkeys(ALL, 0)
    assert offsets(node, group) == dict.fromkeys(ALL, 10)

    # --execute on two partitions only: those two move, the others stay
    out = kcg(node, *base, "--topic", f"{TOPIC}:0,1", "--to-earliest", "--execute")
    assert sorted(int(r["PARTITION"]) for r in table(out)[1]) == [0, 1]
    assert offsets(node, group) == {0: 0, 1: 0, 2: 10, 3: 10, 4: 10, 5: 10}

    # --to-offset, --shift-by, --to-datetime: the tool clamps each target into
    # [earliest, latest] = [0, 0] from ListOffsets (and warns when it does); a timestamp finds
    # no record in an empty log, so --to-datetime falls back to the latest offset, 0
    targets = (
        ["--to-offset", "5"],
        ["--shift-by", "-3"],
        ["--to-datetime", "2020-01-01T00:00:00.000"],
    )
    for how in targets:
        set_offsets(node, group, 10)
        out = consumer_groups_raw(node, *base, "--topic", TOPIC, *how, "--execute")
        if how[0] == "--to-offset":
            assert "is higher than latest offset" in out, out
        if how[0] == "--to-datetime":
            assert "is empty. Falling back to latest known offset" in out, out
        plan = {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(stdout_of(out))[1]}
        assert plan == dict.fromkeys(ALL, 0), (how, out)
        assert offsets(node, group) == dict.fromkeys(ALL, 0), how
    # --to-offset 0 on all topics of the group from 10
    set_offsets(node, group, 10)
    kcg(node, *base, "--all-topics", "--to-offset", "0", "--execute")
    assert offsets(node, group) == dict.fromkeys(ALL, 0)
    out = kcg(node, "--describe", "--group", group, "--offsets")
    header, rows = table(out)
    assert header == OFFSET_COLUMNS
    assert all((r["CURRENT-OFFSET"], r["LAG"], r["CONSUMER-ID"]) == ("0", "0", "-") for r in rows)


def test_delete(node: CoordinatorProcess, stable: Any) -> None:
    set_offsets(node, "kcg-delete", 4)
    out = kcg(node, "--delete", "--group", "kcg-delete")
    assert "Deletion of requested consumer groups ('kcg-delete') was successful." in out, out
    assert "kcg-delete" not in kcg(node, "--list").split()
    with pytest.raises(urllib.error.HTTPError) as e:
        node.get("/groups/kcg-delete")
    assert e.value.code == 404
    # a group with members is not deleted
    out = consumer_groups_raw(node, "--delete", "--group", STABLE)
    assert "NON_EMPTY_GROUP" in out or "not empty" in out.lower(), out
    assert node.get(f"/groups/{STABLE}")["state"] == "Stable"


# ==== raw output (stdout + stderr, any exit code) ================================================


def consumer_groups_raw(node: CoordinatorProcess, *args: str) -> str:
    cmd = java_command(TOOL_CLASS, "--bootstrap-server", node.bootstrap, *args, log_level="warn")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return f"{r.stdout}\n--- stderr\n{r.stderr}"


def stdout_of(raw: str) -> str:
    return raw.split("\n--- stderr\n", 1)[0]
