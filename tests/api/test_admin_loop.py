"""What an admin call may cost the Kafka clients that share its event loop: a registration of
10,000 static members, and its resubmission (refused), leave another member's heartbeats
answered promptly. Timed (tests/conftest.py TIMED): it bounds a round trip."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.api.helpers import close_all, form_group, served_node

IDS = 10_000  # COORD_MAX_REQUEST_ELEMENTS' default: the most one request may hold
# an O(n^2) duplicate check held the loop ~0.75 s here; a linear one a few milliseconds
ROUND_TRIP_BOUND_S = 0.25


async def test_a_large_registration_does_not_stall_other_members(tmp_path: Path) -> None:
    async with served_node(tmp_path) as api:
        (member,) = await form_group(api.kafka_port, "busy", ["steady-1"])
        worst = 0.0
        done = asyncio.Event()

        async def heartbeats() -> None:
            nonlocal worst
            while not done.is_set():
                t = time.perf_counter()
                assert await member.heartbeat() == 0
                worst = max(worst, time.perf_counter() - t)
                await asyncio.sleep(0.005)

        beating = asyncio.create_task(heartbeats())
        try:
            await asyncio.sleep(0.1)
            ids = [f"scale-up-{n:05d}" for n in range(IDS)]
            r = await api.http.post("/groups/big/static-members", json={"group_instance_ids": ids})
            assert r.status_code == 200, r.text
            assert len(r.json()["registered_static_members"]) == IDS
            r = await api.http.post("/groups/big/static-members", json={"group_instance_ids": ids})
            assert r.status_code == 422 and "already registered" in r.json()["detail"]
            await asyncio.sleep(0.1)
        finally:
            done.set()
            await beating
            await close_all([member])
        assert worst < ROUND_TRIP_BOUND_S, f"a heartbeat waited {worst:.3f} s"
