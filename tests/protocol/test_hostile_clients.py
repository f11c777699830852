"""Hostile clients against a real node: each attack closes only its own connection, and a
well-behaved member on another connection keeps its group (README: Limits and hostile clients).
"""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path
from typing import Any

import pytest

from app.group.messages import Error
from tests.api.helpers import eventually
from tests.fuzz.frames import CORPUS
from tests.protocol.groups import stable_group
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient, encode_request
from tests.support.nodes import CoordinatorProcess


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


async def assert_member_unharmed(
    client: KafkaTestClient, group: str, member: str, gen: int
) -> None:
    assert (await client.heartbeat(group, gen, member)).error_code == Error.NONE


async def test_every_corpus_frame_closes_its_connection_and_nothing_else(tmp_path: Path) -> None:
    """The 23-byte DescribeGroups frame once aborted the node process (SIGABRT); so did the
    frames the fuzzer found. A real `coordinator serve` process gets each of them."""
    node = CoordinatorProcess(f"sqlite+aiosqlite:///{tmp_path}/c.db", tmp_path)
    node.start()
    try:
        member = await KafkaTestClient.connect(*node.address, client_id="member")
        m, gen = await stable_group(member, "steady")
        frames = sorted(CORPUS.glob("*.bin"))
        assert frames
        for path in frames:
            attacker = await KafkaTestClient.connect(*node.address, client_id="attacker")
            await attacker.send_raw(framed(path.read_bytes()))
            await attacker.wait_closed(10)
            assert node.running, f"{path.name} ended the node:\n{node.log_text()[-3000:]}"
            await assert_member_unharmed(member, "steady", m, gen)
        log = node.log_text()
        assert "closing Kafka connection from 127.0.0.1" in log
        assert "DescribeGroups v5" in log  # the line names the peer, the API and the version
        await member.close()
    finally:
        node.stop()


async def describe_raw(client: KafkaTestClient, groups: list[str]) -> list[str]:
    resp = await client.request(
        client.build_request(15, 5, groups=groups, include_authorized_operations=False)
    )
    return [g.group_id for g in resp.groups]


async def test_repeated_names_are_answered_once(node: RunningNode, client: KafkaTestClient) -> None:
    await stable_group(client, "g1")
    assert await describe_raw(client, ["g1", "g2", "g1"] * 1000) == ["g1", "g2"]
    resp = await client.request(
        client.build_request(
            3,
            12,
            topics=[{"name": "t1", "topic_id": None}] * 5000,
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    assert [t.name for t in resp.topics] == ["t1"]
    # OffsetFetch v8: a group named twice, and a partition asked twice, are answered once
    commit = await client.offset_commit("c1", {("t1", 0): 5, ("t1", 1): 6})
    assert [p.error_code for t in commit.topics for p in t.partitions] == [0, 0]
    asked = [("t1", 1), ("t1", 0), ("t1", 1)] * 100
    fetched = await client.offset_fetch("", groups={"c1": asked, "c2": None})
    assert [g.group_id for g in fetched.groups] == ["c1", "c2"]
    (first,) = [g for g in fetched.groups if g.group_id == "c1"]
    got = [
        (t.name, p.partition_index, p.committed_offset) for t in first.topics for p in t.partitions
    ]
    assert got == [("t1", 1, 6), ("t1", 0, 5)]
    raw = client.build_request(
        9, 8, groups=[{"group_id": "c1", "topics": None}] * 50, require_stable=False
    )
    assert [g.group_id for g in (await client.request(raw)).groups] == ["c1"]
    # DeleteGroups: one result per group named
    deleted = await client.request(client.build_request(42, 2, groups_names=["c1", "c1", "c2"]))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("c1", Error.NONE),
        ("c2", Error.GROUP_ID_NOT_FOUND),
    ]


@pytest.mark.node_settings(max_client_id_bytes=64)
async def test_a_client_id_over_the_limit_closes_the_connection(node: RunningNode) -> None:
    ok = await node.client("a" * 64)
    await stable_group(ok, "fine")
    big = await node.client("b" * 65)
    with pytest.raises(ConnectionError):
        await big.request(
            big.build_request(18, 3, client_software_name="x", client_software_version="1")
        )
    assert big.is_closed and not ok.is_closed


@pytest.mark.node_settings(max_request_elements=100)
async def test_a_request_with_too_many_elements_closes_the_connection(
    node: RunningNode, client: KafkaTestClient
) -> None:
    m, gen = await stable_group(client, "steady")
    other = await node.client("greedy")
    with pytest.raises(ConnectionError):
        await describe_raw(other, [f"g{i}" for i in range(101)])
    assert other.is_closed
    await assert_member_unharmed(client, "steady", m, gen)


@pytest.mark.node_settings(max_connections_per_ip=3)
async def test_connections_per_ip_are_bounded(node: RunningNode, client: KafkaTestClient) -> None:
    m, gen = await stable_group(client, "steady")
    more = [await node.client(f"c{i}") for i in range(3)]
    await asyncio.gather(*(c.wait_closed(5) for c in more[2:]))
    assert [c.is_closed for c in more] == [False, False, True]
    await assert_member_unharmed(client, "steady", m, gen)
    await more[0].close()
    # the node has counted the closed one out: `client` and more[1] are left
    await eventually(lambda: len(node.server.connections) == 2, what="the slot freed")
    again = await node.client("again")
    await stable_group(again, "other")


@pytest.mark.node_settings(frame_deadline_ms=300)
async def test_a_frame_that_never_completes_is_closed(
    node: RunningNode, client: KafkaTestClient
) -> None:
    m, gen = await stable_group(client, "steady")
    slow = await node.client("slowloris")
    await slow.send_raw(struct.pack(">i", 1000) + b"\x00\x0c")  # 2 of 1000 bytes, then nothing
    await slow.wait_closed(5)
    await assert_member_unharmed(client, "steady", m, gen)


@pytest.mark.node_settings(connections_max_idle_ms=1000)
async def test_idle_connections_are_closed(node: RunningNode) -> None:
    idle = await node.client("idle")
    await idle.request(
        idle.build_request(18, 3, client_software_name="x", client_software_version="1")
    )
    await idle.wait_closed(5)


async def test_a_stalled_event_loop_shows_in_the_lag_metric(node: RunningNode) -> None:
    registry = node.node.metrics.registry
    await asyncio.sleep(0.3)  # the watcher's first rounds
    time.sleep(0.4)  # what a request that blocks the loop would do
    await asyncio.sleep(0.3)
    assert (registry.get_sample_value("coordinator_event_loop_lag_max_seconds") or 0) >= 0.3
    over = registry.get_sample_value("coordinator_event_loop_lag_seconds_bucket", {"le": "0.25"})
    total = registry.get_sample_value("coordinator_event_loop_lag_seconds_count")
    assert over is not None and total is not None and total - over >= 1


def commit_errors(resp: Any) -> list[int]:
    return [p.error_code for t in resp.topics for p in t.partitions]


@pytest.mark.node_settings(max_groups=5)
async def test_a_node_holds_a_bounded_number_of_groups(
    node: RunningNode, client: KafkaTestClient
) -> None:
    """OffsetCommits with generation -1 naming ever new group ids, then JoinGroups."""
    for i in range(5):
        assert commit_errors(await client.offset_commit(f"junk-{i}", {("t1", 0): i})) == [0]
    refused = await client.offset_commit("junk-5", {("t1", 0): 5})
    assert commit_errors(refused) == [Error.COORDINATOR_NOT_AVAILABLE]
    joined = await client.join_group("junk-6", "", version=9)
    assert joined.error_code == Error.COORDINATOR_NOT_AVAILABLE
    # the groups it holds are served as before
    assert commit_errors(await client.offset_commit("junk-0", {("t1", 0): 9})) == [0]
    assert node.node.runtime.group_count() == 5


@pytest.mark.node_settings(max_record_bytes=2048)
async def test_a_record_over_the_limit_fails_its_request_and_keeps_state(
    node: RunningNode, client: KafkaTestClient
) -> None:
    ok = await client.offset_commit("g", {("t1", 0): 1}, metadata="m")
    assert commit_errors(ok) == [0]
    big = await client.offset_commit("g", {("t1", 0): 2}, metadata="x" * 3000)
    assert commit_errors(big) == [Error.INVALID_COMMIT_OFFSET_SIZE]  # Kafka's error for it
    fetched = await client.offset_fetch("g", [("t1", 0)])
    assert [p.committed_offset for t in fetched.groups[0].topics for p in t.partitions] == [1]


async def pipelined_conn(
    node: RunningNode, frames: list[bytes]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client that writes requests back to back and does not read (yet)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", node.port)
    writer.write(b"".join(frames))
    return reader, writer


async def read_replies(reader: asyncio.StreamReader, n: int) -> list[int]:
    """The correlation ids of the next `n` replies."""
    ids = []
    for _ in range(n):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        ids.append(struct.unpack_from(">i", await reader.readexactly(size))[0])
    return ids


# a static member's first join: parked for COORD_INITIAL_REBALANCE_DELAY_MS
PARKED_JOIN = KafkaTestClient.build_request(
    11,
    9,
    group_id="parked",
    session_timeout=10_000,
    rebalance_timeout=10_000,
    member_id="",
    group_instance_id="i",
    protocol_type="consumer",
    protocols=[{"name": "range", "metadata": b""}],
    reason=None,
)


def server_conn(node: RunningNode, client_port: int) -> Any:
    """The node's end of the connection from `client_port` (None before it is accepted)."""
    conns = [c for c in node.server.connections if c._peer.endswith(f":{client_port}")]
    return conns[0] if conns else None


def stopped_reading(node: RunningNode, client_port: int) -> Any:
    """That connection once it has stopped reading for what it holds (requests or reply bytes
    in flight), not for a turn of the loop (a long read yields) or while the node sheds."""
    conn = server_conn(node, client_port)
    if conn is None or not conn._reading_paused:
        return None
    return None if conn._yielding or conn._shed or conn._heavy_wait or conn._write_paused else conn


@pytest.mark.node_settings(max_inflight_requests=64, initial_rebalance_delay_ms=1500)
async def test_requests_piled_behind_a_parked_join_stop_the_reading(
    node: RunningNode, client: KafkaTestClient
) -> None:
    m, gen = await stable_group(client, "steady")  # delay: parks ~1.5 s, then Stable
    join = PARKED_JOIN
    hb = KafkaTestClient.build_request(
        12, 4, group_id="nope", generation_id=1, member_id="x", group_instance_id=None
    )
    frames = [encode_request(join, 0, "pipeliner")]
    frames += [encode_request(hb, i, "pipeliner") for i in range(1, 5000)]
    reader, writer = await pipelined_conn(node, frames)
    port = writer.get_extra_info("sockname")[1]
    conn = await eventually(lambda: stopped_reading(node, port), what="the reading stopped")
    assert len(conn._slots) <= 64  # it stopped reading: 64 unanswered, the rest in the socket
    await assert_member_unharmed(client, "steady", m, gen)
    # once the join completes every request is answered, in order
    ids = await asyncio.wait_for(read_replies(reader, 5000), 30)
    assert ids == list(range(5000))
    writer.close()


@pytest.mark.node_settings(max_queued_reply_bytes=4096, initial_rebalance_delay_ms=1500)
async def test_reply_bytes_piled_behind_a_parked_join_stop_the_reading(
    node: RunningNode, client: KafkaTestClient
) -> None:
    join = PARKED_JOIN
    meta = KafkaTestClient.build_request(
        3,
        12,
        topics=None,
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    frames = [encode_request(join, 0, "pipeliner")]
    frames += [encode_request(meta, i, "pipeliner") for i in range(1, 500)]
    reader, writer = await pipelined_conn(node, frames)
    port = writer.get_extra_info("sockname")[1]
    conn = await eventually(lambda: stopped_reading(node, port), what="the reading stopped")
    assert conn._queued_bytes < 4096 + 1024  # one reply past the mark at most
    ids = await asyncio.wait_for(read_replies(reader, 500), 30)
    assert ids == list(range(500))
    writer.close()


async def test_a_group_id_over_the_limit_is_an_invalid_group_id(
    node: RunningNode, client: KafkaTestClient
) -> None:
    m, gen = await stable_group(client, "steady")
    long_id = "g" * 4097  # COORD_MAX_GROUP_ID_LENGTH is 4096
    assert (await client.join_group(long_id, "", version=9)).error_code == Error.INVALID_GROUP_ID
    assert (await client.heartbeat(long_id, 1, "m")).error_code == Error.INVALID_GROUP_ID
    assert (await client.find_coordinator(long_id)).error_code == Error.INVALID_GROUP_ID
    commit = await client.offset_commit(long_id, {("t1", 0): 1})
    assert commit_errors(commit) == [Error.INVALID_GROUP_ID]
    assert await describe_raw(client, [long_id, "steady"]) == [long_id, "steady"]
    resp = await client.request(
        client.build_request(15, 5, groups=[long_id], include_authorized_operations=False)
    )
    assert resp.groups[0].error_code == Error.INVALID_GROUP_ID
    assert node.node.runtime.group_count() == 1
    await assert_member_unharmed(client, "steady", m, gen)


@pytest.mark.pure_python  # patches the hot path: interpreted only
async def test_a_core_that_raises_leaves_no_waiter_behind(
    node: RunningNode, client: KafkaTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each failed write used to leave its future in the runtime for good (a slow leak a
    client could drive by sending what makes the core raise)."""
    from app.group.coordinator import GroupCoordinator

    def broken(*args: object) -> None:
        raise RuntimeError("injected")

    monkeypatch.setattr(GroupCoordinator, "join_group", broken)
    for _ in range(50):
        joined = await client.join_group("boom", "", version=9)
        assert joined.error_code == Error.UNKNOWN_SERVER_ERROR
    assert node.node.runtime._waiting == {}


class TurnCounter:
    """Counts turns of the running loop, and calls of a patched writer per turn."""

    def __init__(self) -> None:
        self.turn = 0
        self.stopped = False
        self.per_turn: dict[int, int] = {}

    def start(self) -> None:
        asyncio.get_running_loop().call_soon(self._tick)

    def _tick(self) -> None:
        self.turn += 1
        if not self.stopped:
            asyncio.get_running_loop().call_soon(self._tick)

    def counting(self, write: Any) -> Any:
        def counted(*args: Any) -> bytes:
            self.per_turn[self.turn] = self.per_turn.get(self.turn, 0) + 1
            return bytes(write(*args))

        return counted


@pytest.mark.pure_python  # counts the groups written per turn through a patched writer
async def test_a_reply_naming_thousands_of_groups_is_written_a_slice_per_turn(
    node: RunningNode, client: KafkaTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DescribeGroups naming 2,000 groups was looked up in slices but answered in one piece:
    9,999 groups held the loop about 120 ms while kio encoded the reply. Each group is now
    written in the slice it is looked up in, and the reply is still every group, in order."""
    from app.kafka import group_apis

    turns = TurnCounter()
    monkeypatch.setattr(
        group_apis, "described_group_entry", turns.counting(group_apis.described_group_entry)
    )
    await stable_group(client, "real")
    names = [f"nope-{i}" for i in range(4 * group_apis.SLICE - 1)] + ["real"]
    turns.start()
    resp = await client.request(client.build_request(15, 5, groups=names))
    turns.stopped = True
    assert [d.group_id for d in resp.groups] == names
    assert [d.group_state for d in resp.groups[-2:]] == ["Dead", "Stable"]
    assert len(resp.groups[-1].members) == 1
    assert sum(turns.per_turn.values()) == len(names)
    assert max(turns.per_turn.values()) <= group_apis.SLICE, turns.per_turn


@pytest.mark.pure_python  # counts the groups written per turn through a patched writer
async def test_listing_every_group_of_a_big_node_is_written_a_slice_per_turn(
    node: RunningNode, client: KafkaTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListGroups answered every group of the node in one piece: 100,000 groups held the loop
    about 900 ms (kafka-consumer-groups --list on a big fleet stalled every heartbeat)."""
    from app.kafka import group_apis

    names = [f"listed-{i}" for i in range(3 * group_apis.SLICE + 7)]
    for name in names:  # a group each, by an offset commit of generation -1
        assert commit_errors(await client.offset_commit(name, {("t1", 0): 1})) == [0]
    turns = TurnCounter()
    monkeypatch.setattr(
        group_apis, "listed_group_entry", turns.counting(group_apis.listed_group_entry)
    )
    turns.start()
    resp = await client.request(client.build_request(16, 5, states_filter=[], types_filter=[]))
    turns.stopped = True
    assert resp.error_code == 0
    assert sorted(x.group_id for x in resp.groups) == sorted(names)
    assert {(x.group_state, x.group_type) for x in resp.groups} == {("Empty", "classic")}
    assert max(turns.per_turn.values()) <= group_apis.SLICE, turns.per_turn
