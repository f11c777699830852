"""Serving leaves nothing behind: once warm, rounds of a group's requests allocate no memory that
stays. The compiled build once leaked on every reply (mypyc before 2.x kept the left operand of
each `bytes + bytes`, pyproject.toml): a 1,000-member group grew by ~7 objects per member per
rebalance, and figure 5 of the benchmarks by 70 MiB. This holds either build to the same
steady state."""

from __future__ import annotations

import asyncio
import gc
import sys

from app.group.messages import Error
from tests.protocol.groups import ASSIGNMENT, stable_group
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient

WARM_ROUNDS = 60
ROUNDS = 400
# a SyncGroup later than this after its join (a loaded machine) would remove the member
REBALANCE_MS = 1000


async def test_rebalances_heartbeats_and_commits_leave_no_memory_behind(
    node: RunningNode, client: KafkaTestClient
) -> None:
    member, _ = await stable_group(client, "steady")

    async def one_round(i: int) -> None:
        # The leader's rejoin rebalances the group, which completes at once (it is alone).
        joined = await client.join_group("steady", member, rebalance_timeout_ms=REBALANCE_MS)
        assert joined.error_code == Error.NONE, joined
        synced = await client.sync_group(
            "steady", joined.generation_id, member, assignments={member: ASSIGNMENT}
        )
        assert synced.error_code == Error.NONE, synced
        hb = await client.heartbeat("steady", joined.generation_id, member)
        assert hb.error_code == Error.NONE
        commit = await client.offset_commit(
            "steady", {("t1", 0): i}, generation_id=joined.generation_id, member_id=member
        )
        assert all(p.error_code == Error.NONE for t in commit.topics for p in t.partitions)
        client.received.clear()  # the test client's own record of replies

    async def settled() -> int:
        # each rebalance's join and sync timers stay in the timer heap until their deadline
        # (timers.py): counted once they have passed, the heap holds the member's session alone
        await asyncio.sleep(REBALANCE_MS / 1000 * 1.5)
        gc.collect()
        return sys.getallocatedblocks()

    for i in range(WARM_ROUNDS):
        await one_round(i)
    before = await settled()
    for i in range(WARM_ROUNDS, WARM_ROUNDS + ROUNDS):
        await one_round(i)
    grown = await settled() - before
    # 4 requests a round: what stays (SQLite's and kio's caches settling) was under 110 blocks
    # in 200 rounds either way; the leak above left 4,700 in these 400
    assert grown < ROUNDS, f"{grown} blocks more after {ROUNDS} rounds of 4 requests"
