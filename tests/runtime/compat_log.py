"""The compatibility log: a SQLite database written by a real node of this release under scripted
Kafka clients, checked in as tests/golden/compat-log.sqlite with what the node served when it
stopped (tests/golden/compat-log.json). tests/runtime/test_compat_log.py opens a copy with the
current code; the groups must come back exactly as they were.

Written once, by hand: `.venv/bin/python -m tests.runtime.compat_log` (about 10 s; it replaces
both files). Do not regenerate it to make the test pass: a release that cannot read the
checked-in log cannot read its users' logs either. A new release adds its own log beside it.

What the log holds, on 4 log partitions, topics orders:6 and payments:3:
* orders-static: two static members committing twice, then (after the compaction) its leader
  restarted, answered with SkipAssignment (KIP-814), and commits by the new member id;
* gruppe-ü-📈: a static and a dynamic member, offsets with non-ASCII metadata, then its static
  member replaced by a restart (JoinGroup v5) in Stable;
* scale-up: one static member and a registration of two more that have not joined;
* emptied: both members left; their offsets, and a reset (generation -1, offset value v1);
* standalone: offsets committed without a group (generation -1, no member);
* deleted-early (before the compaction) and deleted-late (after it): group and offset
  tombstones;
* a compaction between the two phases, so log_history holds superseded records and the log
  holds records superseded since.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from app.admin import AdminService
from app.group.view import GroupView
from tests.runtime.node_fixture import RunningNode, running_node
from tests.support.consumer_bytes import assignment, range_assign, subscription
from tests.support.kafka_client import KafkaTestClient

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "golden"
DB = GOLDEN_DIR / "compat-log.sqlite"
MANIFEST = GOLDEN_DIR / "compat-log.json"

LOG_PARTITIONS = 4
TOPICS = {"orders": 6, "payments": 3}
SESSION_MS = 60_000  # long enough for the test to heartbeat the loaded members
DELETED = ("deleted-early", "deleted-late")
MEMBER_ID_REQUIRED = 79


OFFSET_FIELDS = (
    "topic", "partition", "offset", "leader_epoch", "metadata", "commit_timestamp_ms",
    "expire_timestamp_ms",
)  # fmt: skip


def view_json(v: GroupView) -> dict[str, Any]:
    """A group as the node serves it, in JSON (bytes as hex)."""
    return {
        "state": str(v.state),
        "generation": v.generation,
        "protocol_type": v.protocol_type,
        "protocol_name": v.protocol_name,
        "leader_id": v.leader_id,
        "rebalance_reason": v.rebalance_reason,
        "registered_static_members": list(v.registered_static_members),
        "registered_ms": v.registered_ms,
        "registration_deadline_ms": v.registration_deadline_ms,
        "members": [
            {**m._asdict(), "subscription": m.subscription.hex(), "assignment": m.assignment.hex()}
            for m in v.members
        ],
        # the fields that release served (an offset's source and origin came later)
        "offsets": [{k: o._asdict()[k] for k in OFFSET_FIELDS} for o in v.offsets],
    }


def served(n: RunningNode) -> dict[str, dict[str, Any]]:
    """log partition (as a string, for JSON) -> group id -> view_json of every group there."""
    out: dict[str, dict[str, Any]] = {}
    for pid, p in sorted(n.node.partitions.items()):
        if p.core is not None:
            views = {g: p.core.describe(g) for g in sorted(p.core.groups)}
            out[str(pid)] = {g: view_json(v) for g, v in views.items() if v is not None}
    return out


class Member:
    """One scripted consumer: its own connection, so its parked requests block no other."""

    def __init__(self, client: KafkaTestClient, group: str, instance: str | None) -> None:
        self.c, self.group, self.instance = client, group, instance
        self.member_id, self.generation = "", -1
        self.protocols = [("range", subscription(list(TOPICS), version=1))]

    async def join(self, version: int = 9) -> Any:
        for _ in range(2):
            r = await self.c.join_group(
                self.group, self.member_id, group_instance_id=self.instance,
                protocols=self.protocols, session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=30_000, version=version,
            )  # fmt: skip
            self.member_id = r.member_id
            if r.error_code != MEMBER_ID_REQUIRED:
                break
        assert r.error_code == 0, r
        self.generation = r.generation_id
        return r

    async def sync(self, assignments: dict[str, bytes] | None = None) -> bytes:
        r = await self.c.sync_group(
            self.group, self.generation, self.member_id, group_instance_id=self.instance,
            assignments=assignments,
        )  # fmt: skip
        assert r.error_code == 0, r
        return bytes(r.assignment)

    async def commit(self, offsets: dict[tuple[str, int], int], metadata: str) -> None:
        r = await self.c.offset_commit(
            self.group, offsets, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.instance, metadata=metadata, leader_epoch=5,
        )  # fmt: skip
        assert all(p.error_code == 0 for t in r.topics for p in t.partitions), r

    async def leave(self) -> None:
        r = await self.c.leave_group(self.group, members=[(self.member_id, self.instance)])
        assert r.error_code == 0, r


async def form(n: RunningNode, group: str, instances: list[str | None]) -> list[Member]:
    """A Stable group of these members (None: dynamic), range-assigned by its leader."""
    members = [Member(await n.client(f"client-{group}-{i}"), group, x) for i, x in
               enumerate(instances)]  # fmt: skip
    joins = await asyncio.gather(*(m.join() for m in members))
    ids = [m.member_id for m in members]
    plan = {m: assignment(parts) for m, parts in range_assign(ids, TOPICS).items()}
    leader = next(m for m, j in zip(members, joins, strict=True) if j.leader == m.member_id)
    got = await asyncio.gather(*(m.sync(plan if m is leader else None) for m in members))
    assert got == [plan[i] for i in ids]
    return members


async def commit_all(members: list[Member], base: int, metadata: str) -> None:
    for i, m in enumerate(members):
        parts = {(t, p): base + 10 * i + p for t, n in TOPICS.items() for p in range(n)}
        await m.commit({tp: o for tp, o in parts.items() if tp[1] % len(members) == i}, metadata)


async def deleted_group(n: RunningNode, group: str) -> None:
    (m,) = await form(n, group, [None])
    await m.commit({("orders", 0): 7, ("payments", 2): 8}, "gone")
    await m.leave()
    r = await m.c.request(m.c.build_request(42, 2, groups_names=[group]))
    assert [g.error_code for g in r.results] == [0], r


async def scenario(n: RunningNode) -> None:
    admin = AdminService(n.node)
    static = await form(n, "orders-static", ["i-a", "i-b"])
    await commit_all(static, 100, "orders checkpoint")
    await commit_all(static, 500, "orders checkpoint 1")  # the first one goes to the history
    mixed = await form(n, "gruppe-ü-📈", ["statisch-1", None])
    await commit_all(mixed, 200, "Zähler ✓ 📈")
    (scale,) = await form(n, "scale-up", ["s-1"])
    await scale.commit({("orders", 1): 31}, "")
    await admin.register_static_members("scale-up", ["s-2", "s-3"], 120_000)
    emptied = await form(n, "emptied", [None, None])
    await commit_all(emptied, 300, "before leaving")
    for m in emptied:
        await m.leave()
    reset = await n.client("reset-tool")
    r = await reset.offset_commit("emptied", {("payments", 0): 0}, metadata="reset to 0")
    assert r.topics[0].partitions[0].error_code == 0, r
    r = await reset.offset_commit("standalone", {("orders", 5): 55}, metadata="assign()")
    assert r.topics[0].partitions[0].error_code == 0, r
    await deleted_group(n, "deleted-early")

    assert await n.node.compact() > 0  # superseded records move to log_history

    # the static leader restarts: SkipAssignment, same generation, same assignment
    leader = next(m for m in static if m.instance == "i-a")
    held = await leader.sync()
    leader.member_id = ""
    j = await leader.join(version=9)
    assert j.skip_assignment and j.leader == leader.member_id, j
    assert await leader.sync() == held
    await commit_all(static, 1_000, "orders checkpoint 2")
    # a static member restarts with an older client: replaced in Stable, no rebalance
    restarted = next(m for m in mixed if m.instance == "statisch-1")
    restarted.member_id = ""
    await restarted.join(version=5)
    await restarted.sync()
    await commit_all(mixed, 2_000, "Zähler ✓ 📈 2")
    await deleted_group(n, "deleted-late")


async def write(out_db: Path, out_manifest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="compat-log-") as tmp:
        topics = ",".join(f"{t}:{k}" for t, k in TOPICS.items())
        async with running_node(
            Path(tmp), log_partitions=LOG_PARTITIONS, topics=topics,
            initial_rebalance_delay_ms=500, compaction_interval_ms=3_600_000,
        ) as n:  # fmt: skip
            await scenario(n)
            manifest = {
                "log_partitions": n.node.log_partitions,
                "topics": n.node.topics,
                "deleted": list(DELETED),
                "partitions": served(n),
            }
        out_db.unlink(missing_ok=True)
        with sqlite3.connect(Path(tmp) / "coordinator.db") as conn:  # one file, no WAL
            conn.execute("VACUUM INTO ?", (str(out_db),))
    out_manifest.write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    GOLDEN_DIR.mkdir(exist_ok=True)
    asyncio.run(write(DB, MANIFEST))
    print(f"wrote {DB} ({DB.stat().st_size} bytes) and {MANIFEST}", file=sys.stderr)


if __name__ == "__main__":
    main()
