"""Stopping background tasks in tests on Python 3.11, whose `asyncio.wait_for` can swallow a
cancellation that arrives as the awaited future completes (gh-86296, fixed in 3.12): a loop
around `wait_for` then keeps running, and `task.cancel(); await task` waits forever."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(task: asyncio.Future[Any], *, retry_s: float = 0.1) -> None:
    """Cancel `task` until it is done (once is not always enough on 3.11); its outcome is
    dropped."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=retry_s)
    if not task.cancelled():
        task.exception()  # retrieved, so asyncio does not log it as never retrieved
