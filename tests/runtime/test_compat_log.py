"""A log written by an earlier release (tests/golden/compat-log.sqlite, see
tests/runtime/compat_log.py) opened by this one: a node migrates a copy as `coordinator serve`
does, loads it, and serves every group, member, assignment, registration and committed offset
exactly as the writing node served them when it stopped (tests/golden/compat-log.json); the
deleted groups stay deleted, and every record the file holds still decodes.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from app.group.records import (
    RecordType,
    decode_group_key,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
    decode_registration_value,
    decode_topic_key,
    decode_topic_value,
)
from app.runtime.placement import partition_for
from tests.runtime.compat_log import DB, MANIFEST, served
from tests.runtime.node_fixture import RunningNode, running_node
from tests.support.kafka_client import KafkaTestClient

MANIFEST_DATA: dict[str, Any] = json.loads(MANIFEST.read_text())
GROUPS = {g: v for groups in MANIFEST_DATA["partitions"].values() for g, v in groups.items()}
DELETED: list[str] = MANIFEST_DATA["deleted"]


def node_on_a_copy(tmp_path: Path) -> AbstractAsyncContextManager[RunningNode]:
    """A node of this release on a copy of the checked-in file (never the file itself): its
    migrations and load, as at a start or a takeover; no topics configured, so the registry
    is what the log holds."""
    shutil.copyfile(DB, tmp_path / "coordinator.db")  # the file running_node opens
    return running_node(tmp_path, log_partitions=MANIFEST_DATA["log_partitions"], topics="")


async def test_a_node_loads_every_group_as_the_writer_served_it(tmp_path: Path) -> None:
    async with node_on_a_copy(tmp_path) as n:
        assert n.node.topics == MANIFEST_DATA["topics"]
        assert served(n) == MANIFEST_DATA["partitions"]
        # each group is where every release's placement looks for it
        for pid, groups in served(n).items():
            assert {g: partition_for(g, n.node.log_partitions) for g in groups} == dict.fromkeys(
                groups, int(pid)
            )
        assert not {g for groups in served(n).values() for g in groups} & set(DELETED)


def fetched_offsets(response: Any) -> dict[tuple[str, int], list[Any]]:
    (group,) = response.groups
    assert group.error_code == 0
    return {
        (t.name, p.partition_index): [p.committed_offset, p.committed_leader_epoch, p.metadata]
        for t in group.topics
        for p in t.partitions
    }


async def described(c: KafkaTestClient, groups: list[str]) -> dict[str, Any]:
    r = await c.request(c.build_request(15, 5, groups=groups))
    return {g.group_id: g for g in r.groups}


async def test_clients_find_their_groups_offsets_and_sessions(tmp_path: Path) -> None:
    """What consumers and kafka-consumer-groups see over the wire after the upgrade."""
    async with node_on_a_copy(tmp_path) as n:
        c = await n.client()
        listed = await c.request(c.build_request(16, 4, states_filter=[]))
        assert {(g.group_id, g.group_state) for g in listed.groups} == {
            (g, v["state"]) for g, v in GROUPS.items()
        }
        got = await described(c, list(GROUPS))
        for g, v in GROUPS.items():
            assert (got[g].error_code, got[g].group_state) == (0, v["state"])
            assert (got[g].protocol_type, got[g].protocol_data or None) == (
                v["protocol_type"], v["protocol_name"],
            )  # fmt: skip
            assert [
                [m.member_id, m.group_instance_id, m.client_id, m.client_host,
                 bytes(m.member_metadata).hex(), bytes(m.member_assignment).hex()]
                for m in got[g].members
            ] == [
                [m["member_id"], m["group_instance_id"], m["client_id"], m["client_host"],
                 m["subscription"], m["assignment"]]
                for m in v["members"]
            ]  # fmt: skip
            assert fetched_offsets(await c.offset_fetch(g)) == {
                (o["topic"], o["partition"]): [o["offset"], o["leader_epoch"], o["metadata"]]
                for o in v["offsets"]
            }
        await heartbeat_every_member(n)
        for g in DELETED:
            assert fetched_offsets(await c.offset_fetch(g)) == {}
        gone = await described(c, DELETED)
        assert {g: d.group_state for g, d in gone.items()} == dict.fromkeys(DELETED, "Dead")
        await c.close()


async def heartbeat_every_member(n: RunningNode) -> None:
    """The members the log holds are members still: their heartbeats in their generation are
    answered NONE, with no rebalance (a consumer that restarted nowhere keeps consuming)."""
    c = await n.client()
    errors = {}
    for g, v in GROUPS.items():
        for m in v["members"]:
            r = await c.heartbeat(
                g, v["generation"], m["member_id"], group_instance_id=m["group_instance_id"]
            )
            errors[g, m["member_id"]] = r.error_code
    assert errors and errors == dict.fromkeys(errors, 0)
    await c.close()


DECODERS: dict[int, tuple[Callable[[bytes], Any], Callable[[bytes], Any]]] = {
    RecordType.GROUP_METADATA: (decode_group_key, decode_group_value),
    RecordType.OFFSET_COMMIT: (decode_offset_key, decode_offset_value),
    RecordType.TOPIC: (decode_topic_key, decode_topic_value),
    RecordType.STATIC_REGISTRATION: (decode_group_key, decode_registration_value),
}


def test_every_record_of_the_log_and_its_history_decodes(tmp_path: Path) -> None:
    """Not only the newest record per key (what a load replays): the superseded ones still in
    the log and those compaction archived, which the admin API's timeline and the audit
    pipeline read, of every group the log ever held."""
    copy = tmp_path / "copy.db"
    shutil.copyfile(DB, copy)
    kinds: set[tuple[str, int]] = set()
    versions: set[tuple[int, int]] = set()  # (record type, value version)
    groups: set[str] = set()
    with sqlite3.connect(copy) as conn:
        for table in ("log_records", "log_history"):
            for t, key, value in conn.execute(f"SELECT record_type, key, value FROM {table}"):
                decode_key, decode_value = DECODERS[t]
                k = decode_key(key)
                if value is not None:
                    decode_value(value)
                    versions.add((t, int.from_bytes(value[:2], "big")))
                if t != RecordType.TOPIC:
                    groups.add(k[0] if t == RecordType.OFFSET_COMMIT else k)
                kinds.add((table, t))
    assert groups == set(GROUPS) | set(DELETED)
    # every value version the writing release wrote: group v2, offset v0 (members) and v1
    # (resets), topic v0, registration v0
    assert versions == {(1, 2), (2, 0), (2, 1), (3, 0), (4, 0)}
    assert kinds >= {("log_records", t) for t in RecordType}
    assert kinds >= {
        ("log_history", RecordType.GROUP_METADATA),
        ("log_history", RecordType.OFFSET_COMMIT),
    }
