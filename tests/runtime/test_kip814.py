"""KIP-814 at the protocol level: no released client sends JoinGroup v9, so the project's own
client proves it against a real node."""

from __future__ import annotations

from pathlib import Path

from tests.runtime.node_fixture import running_node
from tests.support.kafka_client import KafkaTestClient

GROUP = "kip814"
PROTOCOLS = [("range", b"\x00\x00subscription")]


async def form_static_group(c: KafkaTestClient, version: int) -> tuple[str, str, int]:
    """Two static members; returns (leader id, follower id, generation) once Stable."""
    j1 = c.join_group(GROUP, group_instance_id="leader", protocols=PROTOCOLS, version=version)
    first = await j1
    j2 = c.join_group(GROUP, group_instance_id="follower", protocols=PROTOCOLS, version=version)
    # the second member's join rebalances the Stable... group; the first must rejoin
    import asyncio

    second_task = asyncio.ensure_future(j2)
    await asyncio.sleep(0.05)
    first_again = await c.join_group(
        GROUP, first.member_id, group_instance_id="leader", protocols=PROTOCOLS, version=version
    )
    second = await second_task
    assert first_again.error_code == 0 and second.error_code == 0
    leader = first_again.leader
    follower = second.member_id if leader == first_again.member_id else first_again.member_id
    gen = first_again.generation_id
    assignments = {leader: b"leader-assignment", follower: b"follower-assignment"}
    sync_l = asyncio.ensure_future(
        c.sync_group(GROUP, gen, leader, group_instance_id="leader", assignments=assignments)
    )
    sync_f = await c.sync_group(GROUP, gen, follower, group_instance_id="follower")
    assert (await sync_l).error_code == 0 and sync_f.error_code == 0
    assert sync_f.assignment == b"follower-assignment"
    return leader, follower, gen


async def test_static_leader_rejoin_v9_gets_skip_assignment(tmp_path: Path) -> None:
    async with running_node(tmp_path) as n:
        c = await n.client()
        leader, follower, gen = await form_static_group(c, version=9)

        rejoin = await c.join_group(GROUP, group_instance_id="leader", protocols=PROTOCOLS)
        assert rejoin.error_code == 0
        assert rejoin.skip_assignment is True
        assert rejoin.generation_id == gen, "a returning static leader must not rebalance"
        assert rejoin.leader == rejoin.member_id != leader
        assert {m.member_id for m in rejoin.members} == {rejoin.member_id, follower}
        assert {m.group_instance_id for m in rejoin.members} == {"leader", "follower"}

        sync = await c.sync_group(
            GROUP,
            gen,
            rejoin.member_id,
            group_instance_id="leader",
            assignments={rejoin.member_id: b"ignored"},
        )
        assert sync.error_code == 0
        assert sync.assignment == b"leader-assignment"

        # the old id is fenced
        hb = await c.heartbeat(GROUP, gen, leader, group_instance_id="leader")
        assert hb.error_code == 82  # FENCED_INSTANCE_ID
        # the follower keeps heartbeating in the same generation
        hb = await c.heartbeat(GROUP, gen, follower, group_instance_id="follower")
        assert hb.error_code == 0
        await c.close()


async def test_static_leader_rejoin_before_v9_sees_old_leader_and_no_members(
    tmp_path: Path,
) -> None:
    for version in (5, 8):
        async with running_node(tmp_path / f"v{version}") as n:
            c = await n.client()
            leader, _follower, gen = await form_static_group(c, version=version)
            rejoin = await c.join_group(
                GROUP, group_instance_id="leader", protocols=PROTOCOLS, version=version
            )
            assert rejoin.error_code == 0
            assert rejoin.generation_id == gen
            assert rejoin.leader == leader, "old clients must see the obsolete leader id"
            assert rejoin.member_id != leader
            assert list(rejoin.members) == []
            sync = await c.sync_group(GROUP, gen, rejoin.member_id, group_instance_id="leader")
            assert sync.error_code == 0 and sync.assignment == b"leader-assignment"
            hb = await c.heartbeat(GROUP, gen, leader, group_instance_id="leader", version=3)
            assert hb.error_code == 82
            await c.close()
