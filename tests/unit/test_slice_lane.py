"""Requests served in slices (DescribeGroups, OffsetFetch, DeleteGroups, Metadata naming many
names) take turns node-wide: one slice of one of them per turn of the loop, so many of them at
once cannot make each turn long (README: Limits and hostile clients)."""

from __future__ import annotations

import asyncio

from app.kafka.group_apis import SLICE, in_slices


async def test_concurrent_sliced_requests_run_one_slice_per_turn() -> None:
    turn = 0
    stop = False

    def tick() -> None:  # counts turns of the loop
        nonlocal turn
        turn += 1
        if not stop:
            asyncio.get_running_loop().call_soon(tick)

    asyncio.get_running_loop().call_soon(tick)
    starts: list[tuple[str, int, int]] = []  # (request, slice, turn it ran in)

    async def request(name: str) -> list[int]:
        def serve(i: int) -> int:
            if i % SLICE == 0:
                starts.append((name, i // SLICE, turn))
            return i

        return await in_slices(range(4 * SLICE), serve)

    answers = await asyncio.gather(*(request(n) for n in "abcdef"))
    stop = True
    assert all(a == list(range(4 * SLICE)) for a in answers)  # every item served, in order
    later = [t for (_, s, t) in starts if s > 0]
    assert len(later) == 6 * 3
    assert len(set(later)) == len(later), "two slices ran in one turn of the loop"
    # and they take turns: every request's second slice before any request's third
    seconds = [t for (_, s, t) in starts if s == 1]
    thirds = [t for (_, s, t) in starts if s == 2]
    assert max(seconds) < min(thirds)


async def test_a_cancelled_request_does_not_hold_the_lane() -> None:
    async def request() -> list[int]:
        return await in_slices(range(3 * SLICE), lambda i: i)

    doomed = asyncio.ensure_future(request())
    await asyncio.sleep(0)  # it ran its first slice and waits for a turn
    doomed.cancel()
    assert await asyncio.wait_for(request(), 2) == list(range(3 * SLICE))
