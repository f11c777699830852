"""The TCP server in front of the real node: framing, ordering, malformed input, failures,
long polls, shutdown."""

from __future__ import annotations

import asyncio
import gc
import logging
import struct
import time
from typing import Any

import pytest
from kio.index import load_response_schema

from app.group.coordinator import GroupCoordinator
from app.group.messages import Error
from app.kafka.cluster_apis import FETCH_MAX_WAIT_CAP_MS
from app.kafka.codec import request_class
from app.kafka.connection import ReplySlot
from app.kafka.dispatch import KafkaConnection, ParkedReply
from app.kafka.group_apis import JoinGroupCall
from app.kafka.limits import EARLY_WRITE_BYTES
from tests.api.helpers import eventually
from tests.protocol.data_plane import fetch_request, produce_request
from tests.protocol.groups import PROTOCOLS, describe, join, stable_group, wait_for_state
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient, encode_request

MAX_FRAME_BYTES = 1 << 20


def _server_side(node: RunningNode, client: KafkaTestClient) -> KafkaConnection:
    """The node's end of `client`'s connection."""
    assert client._transport is not None
    port = client._transport.get_extra_info("sockname")[1]
    (conn,) = [c for c in node.server.connections if c._peer.endswith(f":{port}")]
    return conn


async def _assert_alive(node: RunningNode) -> None:
    other = await node.client("other")
    try:
        resp = await other.api_versions(version=3)
        assert resp.error_code == Error.NONE
    finally:
        await other.close()


# --- what the edge hands the coordinator -----------------------------------------------------


@pytest.mark.parametrize("version", [3, 9])
async def test_client_id_and_host_reach_the_member(client: KafkaTestClient, version: int) -> None:
    await stable_group(client, "who", join_version=version)
    (m,) = (await describe(client, "who")).members
    # Kafka records clientAddress.toString() as the member's host
    assert (m.client_id, m.client_host) == ("proto-test", "/127.0.0.1")
    assert m.member_id.startswith("proto-test-")


async def test_null_client_id_becomes_empty(node: RunningNode) -> None:
    c = await node.client()
    c.client_id = None  # type: ignore[assignment]
    try:
        joined = await join(c, "anon", version=1)
        assert joined.error_code == Error.NONE
        assert joined.member_id.startswith("-")  # "<clientId>-<uuid>" with clientId ""
        (m,) = (await describe(c, "anon")).members
        assert m.client_id == ""
    finally:
        await c.close()


# --- ordering and framing --------------------------------------------------------------------


async def test_replies_wait_behind_a_parked_join_on_the_same_connection(
    node: RunningNode, client: KafkaTestClient
) -> None:
    leader = await node.client("leader")
    try:
        member, gen = await stable_group(leader, "pipe")
        # a new member's join rebalances the group and stays parked until the leader rejoins;
        # everything pipelined behind it on this connection must wait for it
        join_fut = client.send(client.join_group_request("pipe", protocols=PROTOCOLS, version=3))
        hb_fut = client.send(client.heartbeat_request("pipe", gen, member, version=4))
        av_fut = client.send(
            request_class(18, 3)(client_software_name="x", client_software_version="1")
        )  # a synchronous handler
        hb0_fut = client.send(client.heartbeat_request("pipe", gen, member, version=0))
        # the node has read all four: the parked join and the three replies queued behind it
        conn = _server_side(node, client)
        await eventually(lambda: len(conn._slots) == 4, what="four requests held")
        assert not any(f.done() for f in (join_fut, hb_fut, av_fut, hb0_fut))
        # the leader's own connection is not held up by the other connection's parked join
        assert (await describe(leader, "pipe")).group_state == "PreparingRebalance"
        rejoin = await leader.join_group("pipe", member, protocols=PROTOCOLS, version=9)
        assert (rejoin.error_code, rejoin.generation_id) == (Error.NONE, gen + 1)
        joined, hb, av, hb0 = await asyncio.wait_for(
            asyncio.gather(join_fut, hb_fut, av_fut, hb0_fut), 10
        )
    finally:
        await leader.close()
    assert (joined.error_code, joined.generation_id) == (Error.NONE, gen + 1)
    # the heartbeats were handled when they arrived, during the rebalance (protocol.md §7.1)
    assert (hb.error_code, av.error_code, hb0.error_code) == (
        Error.REBALANCE_IN_PROGRESS,
        Error.NONE,
        Error.REBALANCE_IN_PROGRESS,
    )
    assert client.received == sorted(client.received)
    assert client.unexpected == []


async def test_a_join_that_completes_the_rebalance_answers_a_parked_one_on_its_own_connection(
    client: KafkaTestClient,
) -> None:
    """The lane's replies are delivered from inside the request that completes the rebalance:
    here the parked join is on the very connection whose next frame completes it, and every
    reply still leaves in request order."""
    member, gen = await stable_group(client, "same")
    parked = client.send(client.join_group_request("same", protocols=PROTOCOLS, version=3))
    hb = client.send(client.heartbeat_request("same", gen, member, version=4))
    rejoin = client.send(client.join_group_request("same", member, protocols=PROTOCOLS, version=9))
    after = client.send(client.heartbeat_request("same", gen + 1, member, version=4))
    joined, beat, rejoined, beat_after = await asyncio.wait_for(
        asyncio.gather(parked, hb, rejoin, after), 10
    )
    assert (joined.error_code, joined.generation_id) == (Error.NONE, gen + 1)
    assert (rejoined.error_code, rejoined.generation_id) == (Error.NONE, gen + 1)
    assert beat.error_code == Error.REBALANCE_IN_PROGRESS
    assert beat_after.error_code == Error.NONE  # CompletingRebalance: the new generation syncs
    assert client.received == sorted(client.received)
    assert client.unexpected == []


@pytest.mark.pure_python  # patches the hot path: interpreted only
async def test_a_reply_that_cannot_be_placed_closes_only_its_connection(
    node: RunningNode,
    client: KafkaTestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bug past the lane's own error handling, while the rebalance's last JoinGroup answers
    a parked one on another connection: that connection is closed (its later replies would
    wait behind the lost one forever), and the JoinGroup that completed the rebalance and the
    rest of the node go on."""
    leader = await node.client("leader")
    try:
        member, gen = await stable_group(leader, "placed")
        parked = client.send(client.join_group_request("placed", protocols=PROTOCOLS, version=3))
        await wait_for_state(leader, "placed", "PreparingRebalance")  # the join is parked
        on_done = KafkaConnection._on_done

        def broken(self: KafkaConnection, slot: Any, entry: Any, *args: Any) -> None:
            if entry.api.name == "JoinGroup":
                raise RuntimeError("injected bug placing a reply")
            on_done(self, slot, entry, *args)

        monkeypatch.setattr(KafkaConnection, "_on_done", broken)
        with caplog.at_level(logging.ERROR, logger="app.kafka.server"):
            rejoin = await leader.join_group("placed", member, protocols=PROTOCOLS, version=9)
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(parked, 10)
        monkeypatch.undo()
        assert (rejoin.error_code, rejoin.generation_id) == (Error.NONE, gen + 1)
        assert any("reply for" in r.getMessage() for r in caplog.records)
        hb = await leader.send(leader.heartbeat_request("placed", gen + 1, member, version=4))
        assert hb.error_code == Error.NONE
    finally:
        await leader.close()


@pytest.mark.pure_python  # patches the hot path: interpreted only
@pytest.mark.node_settings(initial_rebalance_delay_ms=300)
async def test_a_large_reply_leaves_before_the_next_members_replies_are_made(
    node: RunningNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JoinGroup that completes a rebalance answers every parked member from inside its
    own processing. The leader's reply (every member's subscription, here over
    EARLY_WRITE_BYTES) is written as soon as it is made, not with the others' at the end of
    the loop's turn: the leader assigns while the node makes the rest."""
    big = (("range", b"s" * (EARLY_WRITE_BYTES // 3 + 1)),)
    clients = [await node.client(f"member-{i}") for i in range(3)]
    try:
        formed = await asyncio.gather(*(join(c, "early", protocols=big) for c in clients))
        leader_id, generation = formed[0].leader, formed[0].generation_id
        for c, joined in zip(clients, formed, strict=True):
            assignments = {j.member_id: b"" for j in formed} if joined.members else None
            synced = await c.sync_group(
                "early", generation, joined.member_id, assignments=assignments
            )
            assert synced.error_code == Error.NONE
        by_id = {j.member_id: (c, j) for c, j in zip(clients, formed, strict=True)}
        leader = by_id.pop(leader_id)[0]
        (parked, parked_joined), (last, last_joined) = by_id.values()
        events: list[tuple[str, Any]] = []
        reply, send = JoinGroupCall.reply, KafkaConnection._send

        def made(self: JoinGroupCall, version: int) -> Any:
            assert self.response is not None
            events.append(("made", self.response.member_id))
            return reply(self, version)

        def written(self: KafkaConnection) -> None:
            events.append(("written", sum(map(len, self._out))))
            send(self)

        monkeypatch.setattr(JoinGroupCall, "reply", made)
        monkeypatch.setattr(KafkaConnection, "_send", written)
        # the leader and one follower rejoin and wait; the other follower completes the join
        waiting = [
            leader.send(leader.join_group_request("early", leader_id, protocols=big)),
            parked.send(parked.join_group_request("early", parked_joined.member_id, protocols=big)),
        ]
        held = [_server_side(node, c) for c in (leader, parked)]
        await eventually(lambda: all(c._slots for c in held), what="both rejoins parked")
        completing = await last.join_group("early", last_joined.member_id, protocols=big)
        led, other = await asyncio.wait_for(asyncio.gather(*waiting), 10)
        monkeypatch.undo()
        assert [r.error_code for r in (led, other, completing)] == [Error.NONE] * 3
        assert len(led.members) == 3 and led.generation_id == generation + 1
        # the leader's reply first, and on the wire before the next one is made
        assert [who for what, who in events if what == "made"][:2] == [
            leader_id,
            parked_joined.member_id,
        ]
        leader_written = next(
            i for i, (what, n) in enumerate(events) if what == "written" and n >= EARLY_WRITE_BYTES
        )
        assert leader_written < events.index(("made", parked_joined.member_id))
    finally:
        for c in clients:
            await c.close()


async def test_many_pipelined_requests(client: KafkaTestClient) -> None:
    member, gen = await stable_group(client, "many")
    futures = [client.send(client.heartbeat_request("many", gen, member)) for _ in range(3000)]
    futures.append(client.send(client.join_group_request("many", member, protocols=PROTOCOLS)))
    futures += [client.send(client.heartbeat_request("many", gen, member)) for _ in range(10)]
    replies = await asyncio.wait_for(asyncio.gather(*futures), 30)
    assert all(r.error_code == Error.NONE for r in replies[:3000])
    # a leader's rejoin rebalances (protocol.md §4.6) and, alone in the group, completes at once
    assert (replies[3000].error_code, replies[3000].generation_id) == (Error.NONE, gen + 1)
    assert {r.error_code for r in replies[3001:]} == {Error.ILLEGAL_GENERATION}
    assert client.received == sorted(client.received)


async def test_frames_split_and_coalesced_across_packets(client: KafkaTestClient) -> None:
    member, gen = await stable_group(client, "split")
    hb = client.heartbeat_request("split", gen, member)
    stale = client.heartbeat_request("split", gen + 7, member)
    frames = encode_request(hb, 1001, "x") + encode_request(stale, 1002, "x")
    waiters = [client.expect(corr, load_response_schema(12, 4)) for corr in (1001, 1002)]
    for i in range(len(frames)):  # one byte at a time
        await client.send_raw(frames[i : i + 1])
    replies = await asyncio.gather(*waiters)
    assert [r.error_code for r in replies] == [Error.NONE, Error.ILLEGAL_GENERATION]


# --- malformed input closes only that connection ---------------------------------------------


@pytest.mark.node_settings(max_frame_bytes=MAX_FRAME_BYTES)
@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (struct.pack(">i", MAX_FRAME_BYTES + 1), "frame size"),
        (struct.pack(">i", -5), "frame size"),
        (struct.pack(">i", 4) + b"\x00\x0c\x00\x04", "shorter than a request header"),
        (
            struct.pack(">i", 12) + struct.pack(">hhih", 12, 4, 1, 0) + b"\xff\xff",
            "undecodable Heartbeat v4",
        ),
        (
            struct.pack(">i", 14) + struct.pack(">hhih", 11, 9, 1, -1) + b"\x00\x05ab",
            "undecodable JoinGroup v9",
        ),
        (struct.pack(">i", 10) + struct.pack(">hhih", 99, 0, 1, -1), "unsupported request"),
        (struct.pack(">i", 10) + struct.pack(">hhih", 12, 5, 1, -1), "unsupported request"),
        (struct.pack(">i", 10) + struct.pack(">hhih", 8, 1, 1, -1), "unsupported request"),
    ],
)
async def test_bad_frame_closes_that_connection_only(
    node: RunningNode, caplog: pytest.LogCaptureFixture, raw: bytes, reason: str
) -> None:
    bystander = await node.client("bystander")
    member, gen = await stable_group(bystander, "calm")
    victim = await node.client("victim")
    with caplog.at_level(logging.WARNING, logger="app.kafka.server"):
        await victim.send_raw(raw)
        await victim.wait_closed()
    (record,) = [r for r in caplog.records if r.name == "app.kafka.server"]
    assert reason in record.getMessage()
    assert "127.0.0.1:" in record.getMessage()  # the peer
    # the other connection's group is untouched and keeps working
    assert (await bystander.heartbeat("calm", gen, member)).error_code == Error.NONE
    d = await describe(bystander, "calm")
    assert (d.group_state, [m.member_id for m in d.members]) == ("Stable", [member])
    await bystander.close()
    await _assert_alive(node)


async def test_truncated_frame_at_eof_is_logged(
    node: RunningNode, caplog: pytest.LogCaptureFixture
) -> None:
    bystander = await node.client("bystander")
    member, gen = await stable_group(bystander, "calm")
    victim = await node.client("victim")
    frame = encode_request(victim.heartbeat_request("calm", gen, member), 1, "v")
    with caplog.at_level(logging.WARNING, logger="app.kafka.server"):
        await victim.send_raw(frame[:-3])
        assert victim._transport is not None
        victim._transport.write_eof()
        await victim.wait_closed()
    assert any("truncated frame" in r.getMessage() for r in caplog.records)
    assert (await bystander.heartbeat("calm", gen, member)).error_code == Error.NONE
    await bystander.close()


async def test_unknown_tagged_field_on_the_wire_is_skipped(client: KafkaTestClient) -> None:
    member, gen = await stable_group(client, "tags")
    mid = member.encode()
    body = (
        b"\x05tags"  # compact group id
        + struct.pack(">i", gen)
        + bytes([len(mid) + 1])
        + mid  # compact member id (< 127 bytes)
        + b"\x00"  # null group instance id
        + b"\x01\x63\x02hi"  # one tagged field: tag 99, 2 bytes
    )
    resp = await client.request_raw(12, 4, body, load_response_schema(12, 4), flexible_header=True)
    assert resp.error_code == Error.NONE
    stale = body.replace(struct.pack(">i", gen), struct.pack(">i", gen + 1), 1)
    resp = await client.request_raw(12, 4, stale, load_response_schema(12, 4), flexible_header=True)
    assert resp.error_code == Error.ILLEGAL_GENERATION  # decoded for real, not ignored


# --- handler failures (fault injection into the real node) -----------------------------------


@pytest.mark.parametrize(
    "method",
    [
        "heartbeat_error",  # a callable attribute of the core: patched in either build
        # methods of the core's class: only the interpreted source takes the patch
        pytest.param("join_group", marks=pytest.mark.pure_python),
        pytest.param("offset_fetch", marks=pytest.mark.pure_python),
    ],
)
async def test_handler_exception_becomes_unknown_server_error(
    node: RunningNode,
    client: KafkaTestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
) -> None:
    member, gen = await stable_group(client, "boom")

    def broken(*args: object) -> None:
        raise RuntimeError(f"injected failure in {method}")

    if method == "heartbeat_error":  # bound per core at its creation (the hot path's entry)
        for p in node.node.runtime.partitions.values():
            if p.core is not None:
                monkeypatch.setattr(p.core, method, broken)
    else:
        monkeypatch.setattr(GroupCoordinator, method, broken)  # a bug in the core's handler
    with caplog.at_level(logging.ERROR, logger="app.kafka.server"):
        if method == "heartbeat_error":
            error = (await client.heartbeat("boom", gen, member)).error_code
        elif method == "join_group":
            error = (await client.join_group("boom", member, version=7)).error_code
        else:
            resp = await client.offset_fetch("boom", [("t1", 0)], version=3)
            error = resp.error_code
    assert error == Error.UNKNOWN_SERVER_ERROR
    assert any("failed" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    # the connection still serves, and the group was not disturbed
    assert (await client.heartbeat("boom", gen, member)).error_code == Error.NONE


def test_every_api_the_hot_readers_read_has_a_write_call() -> None:
    """The connection serves what app/kafka/hot_group.py reads through the API's WriteCall
    when no ACLs apply; an API read there without one would fall back to its handler."""
    from app.kafka.apis import version_table
    from app.kafka.group_apis import JOIN_GROUP, SYNC_GROUP
    from app.kafka.offset_apis import OFFSET_COMMIT

    read_hot = (JOIN_GROUP, SYNC_GROUP, OFFSET_COMMIT)
    hot = [e for (key, _), e in version_table().items() if key in read_hot]
    assert len(hot) == 10 + 6 + 8  # JoinGroup v0-9, SyncGroup v0-5, OffsetCommit v2-9
    assert all(e.api.start is not None for e in hot)


def _fail_the_edges_futures(
    monkeypatch: pytest.MonkeyPatch, node: RunningNode, api: str, fault: str
) -> None:
    """The core still runs `api`'s requests, but the future the edge waits on is cancelled or
    failed with something other than a CoordinatorError (the handlers' schedule_write and the
    lane's, into its reply, alike). The lane then settles a future failed at once: the
    runtime never fails the DirectReply it would otherwise get, so this is the path where
    `settle` raises for the lane. "elsewhere": the lane's write delivers into a future of its
    own instead of the lane's reply (nothing would ever fill the connection's slot)."""
    # the runtime's, bound where the edge calls it
    schedule_write = node.node.schedule_write

    def failed(name: str, scheduled: Any) -> Any:
        if name != api:
            return scheduled
        # the reply may be there already (a rebalance's join completes at once)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if fault == "cancelled":
            fut.cancel()
        else:
            fut.set_exception(RuntimeError("injected failure of the write's future"))
        return fut

    def failing(name: str, *args: Any, into: Any = None, **kwargs: Any) -> Any:
        if into is None:
            return failed(name, schedule_write(name, *args, **kwargs))
        if fault == "elsewhere" and name == api:  # its reply goes to a future of its own
            return schedule_write(name, *args, **kwargs)
        return failed(name, schedule_write(name, *args, into=into, **kwargs))

    monkeypatch.setattr(node.node, "schedule_write", failing)


def _commit_errors(resp: Any) -> list[tuple[str, int, int]]:
    return [(t.name, p.partition_index, p.error_code) for t in resp.topics for p in t.partitions]


# interpreted only: the faults hand the compiled edge a plain future where it types a reply
@pytest.mark.pure_python
@pytest.mark.parametrize("fault", ["raises", "write fails", "cancelled", "elsewhere"])
async def test_a_failed_offset_commit_answers_every_partition_and_the_connection_serves_on(
    node: RunningNode,
    client: KafkaTestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
) -> None:
    """Without ACLs a commit is served by the connection's own path (a callback on the write's
    future): a bug in the core, a future failed by something other than the coordinator, and
    a cancelled one are each answered UNKNOWN_SERVER_ERROR for every partition, as a parked
    handler's would be; the bug and the failure are logged, and nothing else is disturbed.
    "elsewhere": a write whose reply would not come where the lane waits (a bug) is answered
    so too, rather than holding the connection's later replies for ever."""
    member, gen = await stable_group(client, "faulty")

    if fault == "raises":

        def broken(*args: object) -> None:
            raise RuntimeError("injected failure in offset_commit")

        monkeypatch.setattr(GroupCoordinator, "offset_commit", broken)
    else:
        _fail_the_edges_futures(monkeypatch, node, "OffsetCommit", fault)
    with caplog.at_level(logging.ERROR, logger="app.kafka.server"):
        # t9 is unknown: refused at the edge, yet a failure answers it like the rest
        commit = client.send(
            client.build_request(
                8,
                8,
                group_id="faulty",
                generation_id_or_member_epoch=gen,
                member_id=member,
                group_instance_id=None,
                topics=[
                    {
                        "name": name,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 5,
                                "committed_leader_epoch": -1,
                                "committed_metadata": "",
                            }
                        ],
                    }
                    for name in ("t1", "t9")
                ],
            )
        )
        behind = client.send(client.heartbeat_request("faulty", gen, member, version=4))
        resp, hb = await asyncio.wait_for(asyncio.gather(commit, behind), 10)
    assert _commit_errors(resp) == [
        ("t1", 0, Error.UNKNOWN_SERVER_ERROR),
        ("t9", 0, Error.UNKNOWN_SERVER_ERROR),
    ]
    assert hb.error_code == Error.NONE
    assert client.received == sorted(client.received)  # the heartbeat waited behind the commit
    logged = any("OffsetCommit v8" in r.getMessage() for r in caplog.records)
    assert logged == (fault != "cancelled")
    monkeypatch.undo()
    resp = await client.offset_commit("faulty", {("t1", 0): 6}, generation_id=gen, member_id=member)
    assert _commit_errors(resp) == [("t1", 0, Error.NONE)]
    fetched = await client.offset_fetch("faulty", [("t1", 0)], version=3)
    assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [6]


# interpreted only: the faults hand the compiled edge a plain future where it types a reply
@pytest.mark.pure_python
@pytest.mark.parametrize("api", ["JoinGroup", "SyncGroup"])
@pytest.mark.parametrize("fault", ["write fails", "cancelled"])
async def test_a_failed_join_or_sync_is_answered_in_its_own_shape(
    node: RunningNode,
    client: KafkaTestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    api: str,
    fault: str,
) -> None:
    """JoinGroup and SyncGroup are served like the commit without ACLs: a failed or cancelled
    future becomes UNKNOWN_SERVER_ERROR in the API's reply (JoinGroup's naming the member),
    and the group goes on being served."""
    member, gen = await stable_group(client, "faulty-" + api)
    _fail_the_edges_futures(monkeypatch, node, api, fault)
    with caplog.at_level(logging.ERROR, logger="app.kafka.server"):
        if api == "JoinGroup":
            resp = await client.join_group("faulty-" + api, member, protocols=PROTOCOLS, version=9)
            assert resp.member_id == member
        else:
            resp = await client.sync_group("faulty-" + api, gen, member, version=5)
    assert resp.error_code == Error.UNKNOWN_SERVER_ERROR
    logged = any(f"{api} v" in r.getMessage() for r in caplog.records)
    assert logged == (fault != "cancelled")
    monkeypatch.undo()
    # the connection and the group go on: the member rejoins and syncs as usual
    group = "faulty-" + api
    joined = await client.join_group(group, member, protocols=PROTOCOLS, version=9)
    assert joined.error_code == Error.NONE
    synced = await client.sync_group(
        group, joined.generation_id, member, assignments={member: b"a"}, version=5
    )
    assert synced.error_code == Error.NONE
    assert (await client.heartbeat(group, joined.generation_id, member)).error_code == Error.NONE


async def test_failure_without_error_shape_closes_connection(
    node: RunningNode,
    client: KafkaTestClient,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken() -> None:
        raise RuntimeError("registry down")

    with caplog.at_level(logging.WARNING, logger="app.kafka.server"):
        monkeypatch.setattr(node.node, "cluster", broken)
        with pytest.raises(ConnectionError):
            await client.metadata(["t1"])
        monkeypatch.undo()
    assert any("no error reply shape" in r.getMessage() for r in caplog.records)
    await _assert_alive(node)


# --- Fetch long poll, Produce ----------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 12])
async def test_fetch_holds_for_max_wait(client: KafkaTestClient, version: int) -> None:
    start = time.monotonic()
    resp = await client.request(fetch_request(version, max_wait_ms=300))
    assert time.monotonic() - start >= 0.28
    assert {p.records for p in resp.responses[0].partitions} == {b""}


async def _answered_while_a_long_poll_waits(
    node: RunningNode, client: KafkaTestClient, request: Any
) -> Any:
    """`request`'s reply, which must come while a Fetch of the same max_wait that waits for
    data, held on another connection, is still waiting: "at once" measured against the
    node's own long poll, not in seconds that a loaded machine stretches."""
    poller = await node.client("poller")
    try:
        held = poller.send(fetch_request(12, max_wait_ms=FETCH_MAX_WAIT_CAP_MS))
        conn = _server_side(node, poller)
        await eventually(lambda: bool(conn._slots), what="the long poll held")
        resp = await client.request(request)
        assert not held.done(), "answered no sooner than a long poll"
        return resp
    finally:
        await poller.close()


async def test_fetch_with_min_bytes_zero_answers_at_once(
    node: RunningNode, client: KafkaTestClient
) -> None:
    request = fetch_request(12, max_wait_ms=FETCH_MAX_WAIT_CAP_MS, min_bytes=0)
    resp = await _answered_while_a_long_poll_waits(node, client, request)
    assert {p.records for p in resp.responses[0].partitions} == {b""}


async def test_fetch_of_unknown_topic_answers_at_once(
    node: RunningNode, client: KafkaTestClient
) -> None:
    request = fetch_request(12, max_wait_ms=FETCH_MAX_WAIT_CAP_MS, topic="nope")
    resp = await _answered_while_a_long_poll_waits(node, client, request)
    assert {p.error_code for p in resp.responses[0].partitions} == {
        Error.UNKNOWN_TOPIC_OR_PARTITION
    }


@pytest.mark.pure_python  # patches the hot path: interpreted only
async def test_fetch_wait_ends_when_the_connection_closes(
    client: KafkaTestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.kafka import cluster_apis

    answered: list[object] = []
    real = cluster_apis._fetch_response

    def recording(*args: Any) -> Any:
        answered.append(args)
        return real(*args)

    monkeypatch.setattr(cluster_apis, "_fetch_response", recording)
    client.send(fetch_request(12, max_wait_ms=20_000))
    await asyncio.sleep(0.2)
    assert not answered  # the long poll waits
    await client.close()
    for _ in range(50):
        if answered:
            break
        await asyncio.sleep(0.01)
    assert answered  # and ends with the connection, not after 20 s


async def test_produce_acks_0_sends_nothing_and_stream_stays_in_sync(
    client: KafkaTestClient,
) -> None:
    member, gen = await stable_group(client, "prod")
    assert await client.request(produce_request(9, acks=0)) is None
    resp = await client.request(produce_request(9, acks=-1))
    assert resp.responses[0].partition_responses[0].error_code == Error.POLICY_VIOLATION
    assert (await client.heartbeat("prod", gen, member)).error_code == Error.NONE
    assert client.unexpected == []


# --- shutdown --------------------------------------------------------------------------------


async def test_stop_closes_open_connections(node: RunningNode, client: KafkaTestClient) -> None:
    await stable_group(client, "bye")
    parked = await node.client("parked")
    join_fut = parked.send(parked.join_group_request("bye", protocols=PROTOCOLS, version=3))
    await asyncio.sleep(0.05)
    await node.server.stop()
    await client.wait_closed()
    await parked.wait_closed()
    assert not node.server.is_serving()
    with pytest.raises(ConnectionError):
        await join_fut


# --- eager handlers ----------------------------------------------------------------------------


async def test_a_handler_resumed_after_its_eager_start_behaves_as_in_a_task() -> None:
    from app.kafka.context import resume

    loop = asyncio.get_running_loop()

    async def handler(fut: asyncio.Future[int]) -> int:
        await asyncio.sleep(0)  # a bare yield first
        try:
            return await fut + 1
        except KeyError:
            return -1

    # result, exception thrown in at the await, and cancellation reaching the handler there
    for outcome in ("result", "error", "cancel"):
        fut: asyncio.Future[int] = loop.create_future()
        coro = handler(fut)
        done: asyncio.Future[tuple[object, BaseException | None]] = loop.create_future()
        resume(coro, coro.send(None), lambda r, e, done=done: done.set_result((r, e)))
        await asyncio.sleep(0.01)
        assert not done.done()
        if outcome == "result":
            fut.set_result(41)
            assert await done == (42, None)
        elif outcome == "error":
            fut.set_exception(KeyError("x"))
            assert await done == (-1, None)
        else:
            fut.cancel()
            result, exc = await done
            assert result is None and isinstance(exc, asyncio.CancelledError)


async def test_parked_requests_are_freed_without_the_cyclic_collector(
    client: KafkaTestClient,
) -> None:
    """A commit, a rebalance's JoinGroup and its leader's SyncGroup wait for the core or a
    write and are then freed by reference counting alone: a reference cycle per parked request
    left the cyclic collector 13% of the loop's time under a commit load."""
    from app.kafka.context import RequestContext
    from app.kafka.group_apis import JoinGroupCall, SyncGroupCall
    from app.kafka.offset_apis import OffsetCommitCall

    member, gen = await stable_group(client, "no-cycles")
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds stays in gc.garbage
    try:
        for offset in range(20):
            resp = await client.offset_commit(
                "no-cycles", {("t1", 0): offset}, generation_id=gen, member_id=member
            )
            assert resp.topics[0].partitions[0].error_code == Error.NONE
        for _ in range(5):  # the leader's rejoin rebalances; its SyncGroup waits for the write
            joined = await client.join_group("no-cycles", member, protocols=PROTOCOLS, version=9)
            synced = await client.sync_group(
                "no-cycles", joined.generation_id, member, assignments={member: b"a"}, version=5
            )
            assert (joined.error_code, synced.error_code) == (Error.NONE, Error.NONE)
        gc.collect()
        in_cycles = [
            o
            for o in gc.garbage
            if isinstance(
                o,
                (
                    RequestContext,
                    OffsetCommitCall,
                    JoinGroupCall,
                    SyncGroupCall,
                    ReplySlot,
                    ParkedReply,
                ),
            )
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert in_cycles == []


# --- load shedding -----------------------------------------------------------------------------


async def test_a_connection_opened_while_shedding_waits_like_the_others(node: RunningNode) -> None:
    """While the node sheds load no connection is read, a new one included: an attacker that
    opens a connection per request must not be the only client served."""
    server = node.server
    assert server._watchdog is not None
    server._watchdog.cancel()  # hold the shedding state where the test puts it
    server._shed_all(True)
    late = await node.client("opened-while-shedding")
    try:
        answer = asyncio.ensure_future(late.api_versions(version=3))
        await asyncio.sleep(0.3)
        assert not answer.done(), "a connection opened while shedding was read"
        server._shed_all(False)
        resp = await asyncio.wait_for(answer, 5)
        assert resp.error_code == Error.NONE
    finally:
        await late.close()
