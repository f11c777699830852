"""The SDK from code that does not run asyncio: `Blocking(factory)` builds the object (a
GroupMember, WorkDistributor or LeaderElection) on an event loop of its own, in a daemon thread,
and runs its coroutines from the calling thread.

    with Blocking(lambda: LeaderElection("127.0.0.1:9092", "jobs", group_instance_id="a")) as le:
        token = le.run(le.obj.wait_elected(30))
        while le.obj.is_leader: ...
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class Blocking(Generic[T]):
    def __init__(self, factory: Callable[[], T]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="membership", daemon=True
        )
        self._thread.start()

        async def make() -> T:
            return factory()

        self.obj: T = self.run(make())

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = None) -> R:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def start(self) -> Blocking[T]:
        self.run(self.obj.start())  # type: ignore[attr-defined]
        return self

    def close(self, **kw: Any) -> None:
        try:
            self.run(self.obj.close(**kw), timeout=30)  # type: ignore[attr-defined]
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> Blocking[T]:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
