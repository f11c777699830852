"""The audit of a log written by a real `coordinator serve` under real Kafka clients: two
consumer processes (one static), commits, a static restart absorbed without a rebalance, then
`coordinator export` and the audit. Whatever the clients did, no invariant may be violated."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.audit import run_audit
from tests.support.consumers import PARTITIONS, TOPIC, ConsumerProcess, Hub
from tests.support.nodes import ROOT, CoordinatorProcess

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

GROUP = "audited"
ALL = frozenset(range(PARTITIONS))


def balanced(hub: Hub, members: list[ConsumerProcess], timeout: float = 60.0) -> None:
    def done() -> bool:
        for m in members:
            m.check_alive()
        owned = [m.owned for m in members]
        return (
            all(owned) and sum(map(len, owned)) == PARTITIONS and frozenset().union(*owned) == ALL
        )

    hub.wait_until(done, timeout, f"{GROUP} balanced over {[m.name for m in members]}")


def test_audit_of_a_real_coordinator_log(spark: Any, tmp_path: Path) -> None:
    env = {
        "COORD_TOPICS": f"{TOPIC}:{PARTITIONS}",
        "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
        "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
    }
    coord = CoordinatorProcess(f"sqlite+aiosqlite:///{tmp_path}/coordinator.db", tmp_path, env)
    hub = Hub()
    consumers: list[ConsumerProcess] = []

    def consumer(name: str, instance: str | None) -> ConsumerProcess:
        c = ConsumerProcess(
            hub,
            tmp_path,
            "kafka-python",
            coord.bootstrap,
            GROUP,
            TOPIC,
            name,
            instance=instance,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        consumers.append(c)
        return c

    coord.start()
    try:
        static, dynamic = consumer("static-1", "s-1"), consumer("dynamic-1", None)
        balanced(hub, [static, dynamic])
        for offset in (10, 20):
            static.commit(offset)
            dynamic.commit(offset)
        static.kill()  # no LeaveGroup: the restarted process replaces the static member
        again = consumer("static-1b", "s-1")
        balanced(hub, [again, dynamic])
        again.commit(30)
        dynamic.commit(30)
    finally:
        for c in consumers:
            c.kill()
        coord.stop()
    export = tmp_path / "export"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "export",
            "--out",
            str(export),
            "--database-url",
            coord.db_url,
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    out = tmp_path / "audit"
    result = run_audit(spark, str(export), str(out), report=False)  # the report: test_known_log

    assert result.violations == 0, [i for i in result.invariants if not i["ok"]]
    checked = {i["invariant"]: i["checked"] for i in result.invariants}
    assert checked["offsets_monotonic_within_generation"] > 0
    assert checked["partition_single_owner"] >= PARTITIONS

    def rows(name: str) -> list[dict[str, Any]]:
        df = spark.read.parquet(str(out / "tables" / name))
        return [r.asDict(recursive=True) for r in df.filter(df.group_id == GROUP).collect()]

    gens = rows("generations")
    assert gens and all(g["rebalance_reason"] for g in gens)
    full = [g for g in gens if g["members"] == 2]
    assert full and all(g["partitions_assigned"] == PARTITIONS for g in full)
    assert all(g["static_members"] == 1 and g["dynamic_members"] == 1 for g in full)
    assert all(g["duration_ms"] is not None and g["duration_ms"] >= 0 for g in gens)
    replaced = rows("static_replacements")
    assert [r["instance_id"] for r in replaced] == ["s-1"]
    activity = rows("commit_activity")
    assert {a["partition"] for a in activity} == set(ALL)
    assert all(a["last_offset"] == 30 and a["regressions"] == 0 for a in activity)
