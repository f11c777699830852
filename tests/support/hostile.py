"""Hostile clients and well-behaved members against a live node, in processes of their own.

    python -m tests.support.hostile members HOST:PORT --groups N --seconds S --out F.json
    python -m tests.support.hostile attack  HOST:PORT --connections N --seconds S --out F.json

`members` forms N one-member static groups (JoinGroup v5 + SyncGroup), then heartbeats each
every 100 ms over 10 connections and records every round trip. `attack` runs the attack mix of
README's "Limits and hostile clients" on N connections at once, each looping over the classes
below until the time is up; it counts what each class got back (closed, answered). Used by the
live hostile test (tests/protocol/test_hostile_live.py) and by `bench/hostile.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import struct
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.fuzz.frames import CORPUS, mutate, valid_frame
from tests.support.kafka_client import KafkaTestClient, encode_request

TOPIC = "t1"
HEARTBEAT_EVERY_S = 0.1
CONNECTIONS = 10


def _frame(
    api_key: int, version: int, cid: int, client_id: str = "hostile", **values: Any
) -> bytes:
    return encode_request(KafkaTestClient.build_request(api_key, version, **values), cid, client_id)


# ==== well-behaved members ========================================================================


async def form(host: str, port: int, groups: int) -> list[tuple[str, str, int]]:
    """(group, member id, generation) of `groups` one-member static groups, all Stable."""
    client = await KafkaTestClient.connect(host, port, client_id="member")

    async def one(i: int) -> tuple[str, str, int]:
        group = f"steady-{i}"
        joined = await client.join_group(
            group, "", version=5, group_instance_id=f"i-{i}", session_timeout_ms=30_000
        )
        assert joined.error_code == 0, joined
        synced = await client.sync_group(
            group, joined.generation_id, joined.member_id, version=3,
            group_instance_id=f"i-{i}", assignments={joined.member_id: b""},
        )  # fmt: skip
        assert synced.error_code == 0, synced
        return group, joined.member_id, joined.generation_id

    out = []
    for start in range(0, groups, 100):
        out += await asyncio.gather(*(one(i) for i in range(start, min(start + 100, groups))))
    await client.close()
    return out


async def heartbeat(host: str, port: int, groups: int, seconds: float) -> dict[str, Any]:
    members = await form(host, port, groups)
    rtts: list[float] = []
    errors: Counter[int] = Counter()
    deadline = time.monotonic() + seconds

    async def connection(mine: list[tuple[str, str, int]]) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        sent: dict[int, float] = {}
        frames = [
            (cid, _frame(12, 4, cid, "member", group_id=g, generation_id=gen, member_id=m,
                         group_instance_id=None))
            for cid, (g, m, gen) in enumerate(mine)
        ]  # fmt: skip

        async def read() -> None:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                body = await reader.readexactly(size)
                cid = struct.unpack_from(">i", body)[0]
                rtts.append(time.monotonic() - sent.pop(cid))
                # v4 reply: correlation id, tagged fields (1), throttle (4), error code (2)
                errors[struct.unpack_from(">h", body, 9)[0]] += 1

        reading = asyncio.create_task(read())
        while time.monotonic() < deadline:
            t = time.monotonic()
            for cid, f in frames:
                if cid not in sent:  # one in flight per member, as a client heartbeats
                    sent[cid] = time.monotonic()
                    writer.write(f)
            await asyncio.sleep(max(0.0, HEARTBEAT_EVERY_S - (time.monotonic() - t)))
        # what is still unanswered at the end counts as its time so far
        now = time.monotonic()
        rtts.extend(now - t for t in sent.values())
        reading.cancel()
        writer.close()

    per = [members[i::CONNECTIONS] for i in range(CONNECTIONS)]
    await asyncio.gather(*(connection(m) for m in per if m))
    rtts.sort()
    return {
        "heartbeats": len(rtts),
        "p50_ms": 1000 * rtts[len(rtts) // 2],
        "p99_ms": 1000 * rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))],
        "max_ms": 1000 * rtts[-1],
        "errors": {str(k): v for k, v in errors.items()},
    }


# ==== the attack mix ==============================================================================


async def _send(host: str, port: int, data: bytes, linger: float = 0.5) -> str:
    """Write `data`, read whatever comes back for `linger` s; 'closed' or 'answered'."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return "refused"
    try:
        writer.write(data)
        got = await asyncio.wait_for(reader.read(1 << 20), linger)
        return "closed" if not got else "answered"
    except TimeoutError:
        return "open"
    except OSError:
        return "closed"
    finally:
        writer.close()


def _corpus_frame(rnd: random.Random) -> bytes:
    paths = sorted(CORPUS.glob("*.bin"))
    payload = rnd.choice(paths).read_bytes()
    return struct.pack(">i", len(payload)) + payload


def _fuzzed_frame(rnd: random.Random) -> bytes:
    from app.kafka.apis import version_table

    key = rnd.choice(sorted(version_table()))
    frame, lengths = valid_frame(rnd, *key)
    payload = mutate(rnd, frame, lengths)
    return struct.pack(">i", len(payload)) + payload


def _heavy_describe(rnd: random.Random) -> bytes:
    groups = [f"nope-{rnd.random()}-{i}" for i in range(9_999)]
    return _frame(15, 5, 1, groups=groups, include_authorized_operations=False)


def _repeated_metadata(rnd: random.Random) -> bytes:
    topics = [{"name": TOPIC, "topic_id": None}] * 9_999
    return _frame(3, 12, 1, topics=topics, allow_auto_topic_creation=False,
                  include_topic_authorized_operations=False)  # fmt: skip


def _junk_join(rnd: random.Random) -> bytes:
    # a 32 KB client id (the wire's int16 string allows 32,767): over COORD_MAX_CLIENT_ID_BYTES
    return _frame(
        11, 9, 1, "x" * 32_000, group_id=f"junk-{rnd.random()}", session_timeout=30_000,
        rebalance_timeout=30_000, member_id="", group_instance_id=None,
        protocol_type="consumer", protocols=[{"name": "range", "metadata": b""}], reason=None,
    )  # fmt: skip


def _junk_commits(rnd: random.Random) -> bytes:
    # generation -1 commits to ever new group ids: bounded by COORD_MAX_GROUPS
    return b"".join(
        _frame(
            8,
            8,
            i,
            group_id=f"junk-{rnd.random()}",
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time=-1,
            topics=[
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 1,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        )
        for i in range(50)
    )


def _long_group_id(rnd: random.Random) -> bytes:
    return _frame(12, 4, 1, group_id="g" * 1_000_000, generation_id=1, member_id="m",
                  group_instance_id=None)  # fmt: skip


def _oversized(rnd: random.Random) -> bytes:
    return struct.pack(">i", 1 << 30) + b"\x00" * 64


async def _slow_sender(host: str, port: int, rnd: random.Random) -> str:
    """A frame begun and never finished (the node closes it at COORD_FRAME_DEADLINE_MS)."""
    return await _send(host, port, struct.pack(">i", 4096) + b"\x00\x0c", linger=3)


async def _pipeliner(host: str, port: int, rnd: random.Random) -> str:
    """Requests back to back behind a parked JoinGroup, never reading a reply."""
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return "refused"
    join = _frame(
        11, 9, 0, group_id=f"parked-{rnd.random()}", session_timeout=30_000,
        rebalance_timeout=30_000, member_id="", group_instance_id="p", protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}], reason=None,
    )  # fmt: skip
    hb = _frame(12, 4, 1, group_id="nope", generation_id=1, member_id="x", group_instance_id=None)
    writer.write(join + hb * 20_000)
    await asyncio.sleep(2)
    writer.close()
    return "open"


async def _conn_flood(host: str, port: int, rnd: random.Random) -> str:
    """More connections than COORD_MAX_CONNECTIONS_PER_IP allows, held for a moment."""
    opened = []
    for _ in range(50):
        try:
            opened.append(await asyncio.open_connection(host, port))
        except OSError:
            break
    await asyncio.sleep(0.5)
    for _, w in opened:
        w.close()
    return f"opened {len(opened)}"


SIMPLE: dict[str, Callable[[random.Random], bytes]] = {
    "corpus frame (array count past the frame)": _corpus_frame,
    "fuzzed frame": _fuzzed_frame,
    "DescribeGroups of 9,999 unknown groups": _heavy_describe,
    "Metadata naming one topic 9,999 times": _repeated_metadata,
    "JoinGroup with a 32 KB client id": _junk_join,
    "50 OffsetCommits (gen -1) to new group ids": _junk_commits,
    "Heartbeat with a 1 MB group id": _long_group_id,
    "frame size of 1 GiB": _oversized,
}
SPECIAL: dict[str, Callable[[str, int, random.Random], Awaitable[str]]] = {
    "slow sender": _slow_sender,
    "pipeliner behind a parked join": _pipeliner,
    "connection flood": _conn_flood,
}


async def attack(host: str, port: int, connections: int, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    outcomes: dict[str, Counter[str]] = {k: Counter() for k in (*SIMPLE, *SPECIAL)}

    async def attacker(n: int) -> None:
        rnd = random.Random(n)
        names = [*SIMPLE, *SPECIAL]
        while time.monotonic() < deadline:
            name = rnd.choice(names)
            if name in SIMPLE:
                outcome = await _send(host, port, SIMPLE[name](rnd))
            else:
                outcome = await SPECIAL[name](host, port, rnd)
            outcomes[name][outcome] += 1

    await asyncio.gather(*(attacker(n) for n in range(connections)))
    return {k: dict(v) for k, v in outcomes.items()}


# ==== junk that would grow state: memory must stay under a ceiling ===============================


def _templated(template: bytes, marker: bytes, values: list[bytes]) -> list[bytes]:
    at = template.index(marker)
    return [template[:at] + v + template[at + len(marker) :] for v in values]


async def _pipeline(
    host: str, port: int, frames: list[bytes], error_of: Callable[[bytes], int], window: int = 500
) -> Counter[int]:
    """Send `frames` on one connection, at most `window` unanswered; count the error codes of
    the replies. Reconnects when the node closes the connection."""
    errors: Counter[int] = Counter()
    reader, writer = await asyncio.open_connection(host, port)
    for start in range(0, len(frames), window):
        batch = frames[start : start + window]
        writer.write(b"".join(batch))
        try:
            for _ in batch:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                errors[error_of(await reader.readexactly(size))] += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            errors[-1] += 1  # closed by the node
            writer.close()
            reader, writer = await asyncio.open_connection(host, port)
    writer.close()
    return errors


# Flexible replies: correlation id (4), header tags (1), throttle time (4), then JoinGroup v9's
# error code; OffsetCommit v8's one partition error sits before the last three tag bytes.
def _join_error(body: bytes) -> int:
    return int(struct.unpack_from(">h", body, 9)[0])


def _commit_error(body: bytes) -> int:
    return int(struct.unpack_from(">h", body, len(body) - 5)[0])


async def junk(
    host: str, port: int, joins: int, commits: int, client_id_bytes: int, connections: int = 8
) -> dict[str, Any]:
    """`joins` JoinGroups (v9, a new group each, client ids of `client_id_bytes`: each leaves
    a pending member for its session timeout) and `commits` generation -1 OffsetCommits to new
    group ids, pipelined on `connections` connections."""
    join = _frame(
        11, 9, 7, "c" * client_id_bytes, group_id="junk-join-XXXXXXXX", session_timeout=30_000,
        rebalance_timeout=30_000, member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=[{"name": "range", "metadata": b""}], reason=None,
    )  # fmt: skip
    commit = _frame(
        8, 8, 7, group_id="junk-commit-XXXXXXXX", generation_id_or_member_epoch=-1,
        member_id="", group_instance_id=None, retention_time=-1,
        topics=[{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1,
                 "committed_leader_epoch": -1, "committed_metadata": ""}]}],
    )  # fmt: skip
    ids = [f"{i:08d}".encode() for i in range(max(joins, commits))]
    out: dict[str, Any] = {}
    kinds = (("joins", join, joins, _join_error), ("commits", commit, commits, _commit_error))
    for name, template, n, error_of in kinds:
        frames = _templated(template, b"XXXXXXXX", ids[:n])
        per = [frames[i::connections] for i in range(connections)]
        counts = await asyncio.gather(*(_pipeline(host, port, p, error_of) for p in per if p))
        total: Counter[int] = Counter()
        for c in counts:
            total.update(c)
        out[name] = {str(k): v for k, v in sorted(total.items())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=["members", "attack", "junk"])
    ap.add_argument("address")
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--connections", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--joins", type=int, default=0)
    ap.add_argument("--commits", type=int, default=0)
    ap.add_argument("--client-id-bytes", type=int, default=4000)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    host, port = a.address.rsplit(":", 1)
    if a.role == "members":
        result = asyncio.run(heartbeat(host, int(port), a.groups, a.seconds))
    elif a.role == "attack":
        result = asyncio.run(attack(host, int(port), a.connections, a.seconds))
    else:
        result = asyncio.run(junk(host, int(port), a.joins, a.commits, a.client_id_bytes))
    a.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
