"""Serving leaves nothing behind: once warm, rounds of a group's requests allocate no memory that
stays. The compiled build once leaked on every reply (mypyc before 2.x kept the left operand of
each `bytes + bytes`, pyproject.toml): a 1,000-member group grew by ~7 objects per member per
rebalance, and figure 5 of the benchmarks by 70 MiB. This holds either build to the same
steady state."""

from __future__ import annotations

import gc
import sys

from app.group.messages import Error
from tests.protocol.groups import ASSIGNMENT, stable_group
from tests.runtime.node_fixture import RunningNode
from tests.support.kafka_client import KafkaTestClient

WARM_ROUNDS = 60
ROUNDS = 400


async def test_rebalances_heartbeats_and_commits_leave_no_memory_behind(
    node: RunningNode, client: KafkaTestClient
) -> None:
    member, _ = await stable_group(client, "steady")
    late_syncs = 0

    async def one_round(i: int) -> None:
        nonlocal member, late_syncs
        # The leader's rejoin rebalances the group, which completes at once (it is alone). A
        # short rebalance timeout: each rebalance's join and sync timers leave an entry in the
        # timer heap until their deadline (timers.py), which would grow with the rounds here.
        joined = await client.join_group("steady", member, rebalance_timeout_ms=20)
        assert joined.error_code == Error.NONE, joined
        synced = await client.sync_group(
            "steady", joined.generation_id, member, assignments={member: ASSIGNMENT}
        )
        if synced.error_code == Error.UNKNOWN_MEMBER_ID and late_syncs < ROUNDS // 10:
            # a loaded machine let the 20 ms pass: the member was removed, as Kafka's would be
            late_syncs += 1
            member, _ = await stable_group(client, "steady")
            return await one_round(i)
        assert synced.error_code == Error.NONE, synced
        hb = await client.heartbeat("steady", joined.generation_id, member)
        assert hb.error_code == Error.NONE
        commit = await client.offset_commit(
            "steady", {("t1", 0): i}, generation_id=joined.generation_id, member_id=member
        )
        assert all(p.error_code == Error.NONE for t in commit.topics for p in t.partitions)
        client.received.clear()  # the test client's own record of replies

    for i in range(WARM_ROUNDS):
        await one_round(i)
    gc.collect()
    before = sys.getallocatedblocks()
    for i in range(WARM_ROUNDS, WARM_ROUNDS + ROUNDS):
        await one_round(i)
    gc.collect()
    grown = sys.getallocatedblocks() - before
    # 4 requests a round: what stays (SQLite's and kio's caches settling) was under 110 blocks
    # in 200 rounds either way; the leak above left 4,700 in these 400
    assert grown < ROUNDS, f"{grown} blocks more after {ROUNDS} rounds of 4 requests"
