"""Several nodes on one database: even placement, FindCoordinator, handover and takeover."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from app.config import Settings
from app.runtime.node import CoordinatorNode
from app.runtime.placement import partition_for, plan
from app.runtime.runtime import METADATA_PARTITION
from storage.log import EventLog
from storage.migrate import upgrade_async
from storage.writer import LogWriter
from tests.runtime.node_fixture import sqlite_url

TTL = 1000


@asynccontextmanager
async def node(url: str, node_id: int, **overrides: object) -> AsyncIterator[CoordinatorNode]:
    settings = Settings(
        database_url=url,
        node_id=node_id,
        kafka_listen=f"127.0.0.1:{19000 + node_id}",
        log_partitions=8,
        topics="t1:3",
        **{"lease_ttl_ms": TTL, **overrides},
    )
    event_log = await EventLog.open(url)
    writer = LogWriter(event_log, node_id)
    writer.start()
    n = CoordinatorNode(settings, event_log, writer)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()
        await writer.stop()
        await event_log.close()


async def eventually(check: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():  # type: ignore[operator]
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


async def hang_renewals(n: CoordinatorNode) -> None:
    """From now on `n`'s lease renewals never answer, as over a dropped link; returns once one
    hangs."""
    stalled = asyncio.Event()

    async def hang(*args: object) -> object:
        stalled.set()
        await asyncio.Event().wait()
        raise AssertionError

    n.leasing.log.renew_leases = hang  # type: ignore[method-assign]
    await asyncio.wait_for(stalled.wait(), TTL / 1000 * 2)


def test_placement_is_even_sticky_and_deterministic() -> None:
    parts = list(range(-1, 16))
    one = plan(parts, [1], {})
    assert set(one.values()) == {1}
    two = plan(parts, [1, 2], one)
    counts = sorted(list(two.values()).count(n) for n in (1, 2))
    assert counts == [8, 9]
    # the old owner keeps the "+1" slot: only the newcomer's share moves
    assert sum(1 for p in parts if two[p] != one[p]) == 8
    assert plan(parts, [2, 1], one) == two  # order of discovery does not matter
    three = plan(parts, [1, 2, 3], two)
    assert sorted(list(three.values()).count(n) for n in (1, 2, 3)) == [5, 6, 6]
    moved = sum(1 for p in parts if three[p] != two[p])
    assert moved == 5, "only the newcomer's share moves"
    assert plan(parts, [1, 2, 3], three) == three


async def test_two_nodes_share_partitions_and_point_clients_to_the_owner(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    async with AsyncExitStack() as stack:
        a = await stack.enter_async_context(node(url, 1))
        b = await stack.enter_async_context(node(url, 2))
        await eventually(
            lambda: (
                len(a.partitions) + len(b.partitions) == 9
                and not set(a.partitions) & set(b.partitions)
                and abs(len(a.partitions) - len(b.partitions)) <= 1
            )
        )
        await a.wait_loaded()
        await b.wait_loaded()
        assert a.ready() and b.ready()

        # every node answers FindCoordinator with the partition's owner (after one lease
        # round, each node's view of the other's leases is current)
        def owners_agree() -> bool:
            for group in ("alpha", "beta", "gamma", "delta", "epsilon"):
                owner = a if partition_for(group, 8) in a.partitions else b
                for n in (a, b):
                    found = n.find_coordinator(group, 0)
                    if found.broker is None or found.broker.node_id != owner.node_id:
                        return False
            return True

        await eventually(owners_agree)
        assert {x.node_id for x in a.cluster().brokers} == {1, 2}
        # the topic registry written by the metadata owner is seen by both
        await eventually(lambda: a.topics == b.topics == {"t1": 3})


async def test_a_stopped_node_hands_its_partitions_over(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    async with node(url, 1) as a:
        async with node(url, 2) as b:
            await eventually(lambda: len(b.partitions) >= 4)
        # b released its leases on stop: a takes them at the next round, not after the TTL
        await eventually(lambda: len(a.partitions) == 9, timeout=TTL / 1000 * 1.5)
        assert METADATA_PARTITION in a.partitions


async def test_a_crashed_node_is_replaced_after_the_lease_ttl(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    async with node(url, 1) as a, node(url, 2) as b:
        await eventually(lambda: len(b.partitions) >= 4)
        epochs = {pid: p.epoch for pid, p in b.partitions.items()}
        # crash: b stops renewing and serving without releasing anything
        await b.stop(release=False)
        t0 = asyncio.get_running_loop().time()
        await eventually(lambda: set(epochs) <= set(a.partitions), timeout=10)
        took = asyncio.get_running_loop().time() - t0
        assert took >= TTL / 1000 * 0.5
        assert all(a.partitions[pid].epoch > e for pid, e in epochs.items())


async def test_a_crashed_nodes_partitions_are_claimed_when_its_lease_expires(
    tmp_path: Path,
) -> None:
    """The survivor's claim comes at the crashed node's lease expiry, in a round of its own,
    not at its next regular round (up to TTL/4 later)."""
    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    ttl = 8000  # regular rounds 2 s apart
    async with node(url, 1, lease_ttl_ms=ttl) as a, node(url, 2, lease_ttl_ms=ttl) as b:
        await eventually(lambda: len(b.partitions) >= 4, timeout=ttl / 1000 * 2)
        epochs = {pid: p.epoch for pid, p in b.partitions.items()}
        claims: list[tuple[float, list[int]]] = []
        acquire = a.leasing.log.acquire_leases

        async def recorded(pids: list[int], *args: object, **kw: object) -> dict[int, int]:
            claims.append((asyncio.get_running_loop().time(), list(pids)))
            return await acquire(pids, *args, **kw)  # type: ignore[arg-type]

        a.leasing.log.acquire_leases = recorded  # type: ignore[method-assign]
        await b.stop(release=False)
        store = a.leasing.log
        rows = [r for r in await store.leases() if r.owner_node_id == 2]
        loop = asyncio.get_running_loop()
        expiry = loop.time() + (max(r.expires_at_ms for r in rows) - await store.clock_ms()) / 1000
        await eventually(lambda: set(epochs) <= set(a.partitions), timeout=ttl / 1000 * 2)
        taken = [t for t, pids in claims if set(pids) & set(epochs)]
        # within 0.5 s of the expiry; a regular round would come anywhere in the 2 s after it
        assert taken and expiry - 0.05 <= taken[0] <= expiry + 0.5, (taken, expiry)


async def test_a_node_whose_store_hangs_stops_naming_itself_once_its_lease_lapses(
    tmp_path: Path,
) -> None:
    """Cut off from the store (its renewals hang, as over a dropped link), a node must not send
    clients back to itself once it cannot know who holds its leases: alone, FindCoordinator
    answers COORDINATOR_NOT_AVAILABLE, and the group NOT_COORDINATOR."""
    from app.group.messages import Error
    from app.service import CoordinatorError

    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    async with node(url, 1) as a:
        await eventually(lambda: len(a.partitions) == 9)
        group = "alpha"
        assert a.find_coordinator(group, 0).broker is not None
        await hang_renewals(a)
        await eventually(lambda: a.find_coordinator(group, 0).broker is None, timeout=TTL / 1000)
        assert a.find_coordinator(group, 0).error is Error.COORDINATOR_NOT_AVAILABLE
        with pytest.raises(CoordinatorError) as refused:
            a.runtime.route(group, Error.COORDINATOR_LOAD_IN_PROGRESS)
        assert refused.value.error is Error.NOT_COORDINATOR


async def test_a_node_cut_off_from_the_store_names_the_node_that_takes_over(
    tmp_path: Path,
) -> None:
    """A client asks the node it fetches through where its group's coordinator is, so a node
    cut off from the store must name another: the one its peers' plan gives its partitions once
    it is gone. The peer it names takes the group over and serves it."""
    from app.group.messages import Error

    url = sqlite_url(tmp_path)
    await upgrade_async(url)
    async with node(url, 1) as a, node(url, 2) as b:
        await eventually(lambda: len(a.partitions) + len(b.partitions) == 9)
        await eventually(lambda: len(a.partitions) in (4, 5) and len(b.partitions) in (4, 5))
        group = next(
            g for g in (f"g{i}" for i in range(100)) if partition_for(g, 8) in a.partitions
        )
        assert a.find_coordinator(group, 0).broker.node_id == 1  # type: ignore[union-attr]
        await hang_renewals(a)
        await eventually(lambda: partition_for(group, 8) not in a.partitions)  # dropped, lapsed
        named = a.find_coordinator(group, 0)
        assert named.error is Error.NONE and named.broker is not None
        assert named.broker.node_id == 2
        # taken over once node 1's heartbeat row and lease expire (a TTL after its last round)
        await eventually(lambda: partition_for(group, 8) in b.partitions)
        assert b.find_coordinator(group, 0).broker.node_id == 2  # type: ignore[union-attr]
        await eventually(lambda: b.partitions[partition_for(group, 8)].core is not None)
        assert b.runtime.route(group, Error.COORDINATOR_LOAD_IN_PROGRESS).core is not None
