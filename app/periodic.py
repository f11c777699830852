"""A background loop: `step` every `interval_s`, started and stopped with its owner. A step
that fails is logged and the loop goes on (a bug in a watch must not end it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("app")


class Periodic:
    def __init__(
        self, name: str, interval_s: float, step: Callable[[], Awaitable[None]], *, first: bool
    ) -> None:
        """`first`: run a step at once, then wait; else wait first."""
        self.name = name
        self.interval_s = interval_s
        self._step = step
        self._first = first
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        if not self._first:
            await asyncio.sleep(self.interval_s)
        while True:
            try:
                await self._step()
            except Exception:
                log.exception("%s failed; retried in %.1f s", self.name, self.interval_s)
            await asyncio.sleep(self.interval_s)
