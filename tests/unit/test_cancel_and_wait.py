"""The suite's background loops stop even when a cancellation is swallowed (Python 3.11's
`wait_for` can do that); a teardown that waited on one hung CI for ten minutes."""

from __future__ import annotations

import asyncio

from tests.support.tasks import cancel_and_wait


async def test_a_loop_that_swallows_one_cancellation_still_stops() -> None:
    swallowed = 0

    async def beating() -> None:
        nonlocal swallowed
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed += 1  # what a racing wait_for does on 3.11

    task = asyncio.create_task(beating())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task, retry_s=0.01), 2.0)
    assert task.cancelled() and swallowed == 1


async def test_a_failed_task_is_stopped_without_raising() -> None:
    async def fails() -> None:
        raise RuntimeError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert isinstance(task.exception(), RuntimeError)
