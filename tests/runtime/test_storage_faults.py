"""The database goes away under load (PostgreSQL stopped for 15 s; SQLite's disk full): requests
get retriable Kafka errors, /readyz says why, the node keeps running, recovers by itself when the
database returns, and no acknowledged commit is lost (README: Limits and hostile clients)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

from app.runtime.runtime import monotonic_ms
from tests.protocol.groups import stable_group
from tests.runtime.node_fixture import RunningNode, running_node
from tests.support.kafka_client import KafkaTestClient
from tests.support.postgres import PrivatePostgres

RETRIABLE = {14, 15, 16, 7}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR, REQUEST_TIMED_OUT


class Committer:
    """Commits ever larger offsets to one partition; remembers what was acknowledged."""

    def __init__(self, client: KafkaTestClient, metadata: str = "") -> None:
        self.client = client
        self.metadata = metadata
        self.next = 1
        self.acked = 0
        self.errors: dict[int, int] = {}

    async def once(self) -> int:
        offset, self.next = self.next, self.next + 1
        try:
            resp = await self.client.offset_commit("g", {("t1", 0): offset}, metadata=self.metadata)
        except (ConnectionError, TimeoutError):
            self.client = await KafkaTestClient.connect(*self.client_address)
            return -1
        (error,) = [p.error_code for t in resp.topics for p in t.partitions]
        if error == 0:
            self.acked = offset
        else:
            self.errors[error] = self.errors.get(error, 0) + 1
        return int(error)

    async def until(self, done: Callable[[int], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done(await self.once()):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"not done in {timeout} s; errors {self.errors}")

    client_address: tuple[str, int] = ("127.0.0.1", 0)


async def committed(n: RunningNode) -> int:
    c = await n.client()
    fetched = await c.offset_fetch("g", [("t1", 0)])
    await c.close()
    return int(fetched.groups[0].topics[0].partitions[0].committed_offset)


async def outage(
    n: RunningNode,
    start: Callable[[], Awaitable[None]],
    end: Callable[[], Awaitable[None]],
    metadata: str = "",
) -> Committer:
    c = Committer(await n.client(), metadata)
    c.client_address = ("127.0.0.1", n.port)
    await c.until(lambda e: c.acked >= 20, 20)
    await start()
    await c.until(lambda e: e in RETRIABLE, 30)  # the outage shows as a retriable error
    until = time.monotonic() + 2
    while time.monotonic() < until:  # commits keep failing, the node keeps running
        await c.once()
        await asyncio.sleep(0.1)
    assert c.errors and set(c.errors) <= RETRIABLE, c.errors
    for _ in range(40):
        if n.node.storage_error() is not None:
            break
        await asyncio.sleep(0.25)
    assert n.node.storage_error() is not None and not n.node.ready(), n.node.storage_error()
    await end()
    await c.until(lambda e: e == 0, 60)  # recovered by itself
    for _ in range(300):  # the next lease rounds succeed (stale pooled connections are dropped)
        if n.node.ready() and n.node.storage_error() is None:
            break
        await asyncio.sleep(0.1)
    assert n.node.ready() and n.node.storage_error() is None, n.node.storage_error()
    await c.until(lambda e: e == 0, 10)
    assert await committed(n) == c.acked  # nothing acknowledged was lost
    return c


@contextlib.contextmanager
def small_disk(where: Path, size: str = "16M") -> Iterator[Path]:
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


async def test_sqlite_on_a_full_disk(tmp_path: Path) -> None:
    with small_disk(tmp_path / "disk") as disk:
        filler = disk / "filler"
        hog: asyncio.Task[None] | None = None

        def take(size: int) -> None:
            # the WAL may have taken the last bytes already: ENOSPC at open is the same outage
            with contextlib.suppress(OSError), open(filler, "ab") as f:
                while True:
                    f.write(b"\0" * size)
                    f.flush()

        async def hold() -> None:
            # SQLite frees blocks as it checkpoints and trims its WAL; left free, they would let
            # small commits through and the outage would end by itself
            while True:
                take(4096)
                await asyncio.sleep(0.01)

        async def fill() -> None:
            nonlocal hog
            take(65536)
            hog = asyncio.create_task(hold())

        async def free() -> None:
            assert hog is not None
            hog.cancel()
            filler.unlink(missing_ok=True)

        async with running_node(
            tmp_path, database_url=f"sqlite+aiosqlite:///{disk}/c.db", lease_ttl_ms=2000
        ) as n:
            # commits that need new pages (the metadata), not just the ones freed before
            c = await outage(n, fill, free, metadata="m" * 2000)
            assert c.acked > 20


async def test_a_failed_append_counts_for_one_lease_ttl(tmp_path: Path) -> None:
    # with no traffic after a failed append, no later append would clear it
    async with running_node(tmp_path, lease_ttl_ms=2000) as n:
        assert n.node.ready() and n.node.storage_error() is None
        t = monotonic_ms()
        n.node.writer.failing = ("OperationalError: database or disk is full", t - 5000, t - 100)
        error = n.node.storage_error()
        assert error is not None and error["error"].endswith("disk is full"), error
        assert error["for_ms"] >= 5000 and not n.node.ready()
        n.node.writer.failing = ("OperationalError: database or disk is full", t - 5000, t - 2000)
        assert n.node.storage_error() is None and n.node.ready()


async def test_postgresql_stopped_for_15_seconds(tmp_path: Path) -> None:
    pg = PrivatePostgres(prefix="coord-outage-pg-")
    try:
        await asyncio.to_thread(pg.start)
        url = await asyncio.to_thread(pg.create_database, "outage")
        stopped_at = 0.0

        async def stop() -> None:
            nonlocal stopped_at
            stopped_at = time.monotonic()
            await asyncio.to_thread(pg.stop, "immediate")

        async def start_after_15_s() -> None:
            await asyncio.sleep(max(0.0, 15 - (time.monotonic() - stopped_at)))
            await asyncio.to_thread(pg.start)

        async with running_node(tmp_path, database_url=url, lease_ttl_ms=2000) as n:
            await outage(n, stop, start_after_15_s)
    finally:
        pg.cleanup()


async def test_a_frozen_postgresql_keeps_no_request_waiting(tmp_path: Path) -> None:
    """A store that keeps its connections and answers nothing (frozen; a cut link looks the
    same) must not keep clients waiting with it: once the node's lease may be another node's,
    the commit whose append is in flight gets NOT_COORDINATOR, and the heartbeat pipelined
    behind it on the same connection its answer, while the store is still frozen. Thawed, the
    node serves again; the commit it could not confirm may have landed, no acknowledged one is
    lost."""
    pg = PrivatePostgres(prefix="coord-frozen-pg-")
    try:
        await asyncio.to_thread(pg.start)
        url = await asyncio.to_thread(pg.create_database, "frozen")
        async with running_node(tmp_path, database_url=url, lease_ttl_ms=2000) as n:
            client = await n.client()
            member, generation = await stable_group(client, "m")
            c = Committer(client)
            c.client_address = ("127.0.0.1", n.port)
            await c.until(lambda e: e == 0, 10)
            with pg.frozen():
                commit = client.send(client.offset_commit_request("g", {("t1", 0): 1000}))
                heartbeat = client.send(client.heartbeat_request("m", generation, member))
                # a TTL of 2 s: answered long before this, unless they wait for the store
                committed_reply, beat = await asyncio.wait_for(
                    asyncio.gather(commit, heartbeat), 30
                )
                assert [p.error_code for p in committed_reply.topics[0].partitions] == [16]
                # answered on arrival (NONE) or after the drop (NOT_COORDINATOR); its reply waited
                # behind the commit's, as Kafka's replies keep the requests' order
                assert beat.error_code in (0, 16), beat
                found = await client.find_coordinator("g")
                assert found.error_code == 15  # no other node to name
            await c.until(lambda e: e == 0, 60)
            assert await committed(n) == c.acked
    finally:
        pg.cleanup()
