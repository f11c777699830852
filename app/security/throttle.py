"""Failed logins, per principal and source: Kafka's connection.failed.authentication.delay.ms,
and a wait that doubles with each failure.

A failed attempt is answered `delay_s` late (Kafka's delay). The next attempt of the same
principal from the same address is checked only after delay_s * 2^(failures - 1) (at most
MAX_WAIT_S) and one at a time, so guessing from one address slows with every guess; a right
password is never refused, only delayed, and the same user elsewhere is not held up. A
success clears the count. At most MAX_KEYS pairs are remembered (the oldest go first); what
waits is bounded by the connections the listeners admit.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Final

MAX_WAIT_S: Final = 5.0
MAX_KEYS: Final = 10_000

Key = tuple[str | None, str]  # (principal, or None when the attempt named none; source)


class FailedLogins:
    def __init__(
        self,
        delay_s: float,
        *,
        max_keys: int = MAX_KEYS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.delay_s = delay_s
        self.max_keys = max_keys
        self._clock = clock
        self._failures: OrderedDict[Key, tuple[int, float]] = OrderedDict()  # count, not before
        self._turns: dict[Key, tuple[asyncio.Lock, int]] = {}  # the attempts under way

    def wait_s(self, key: Key) -> float:
        """How long an attempt of `key` would wait before it is checked; 0 if not at all."""
        entry = self._failures.get(key)
        return 0.0 if entry is None else max(0.0, entry[1] - self._clock())

    def failures(self, key: Key) -> int:
        """The failures of `key` since its last success (while remembered)."""
        entry = self._failures.get(key)
        return 0 if entry is None else entry[0]

    @asynccontextmanager
    async def attempt(self, key: Key) -> AsyncIterator[None]:
        """Check one attempt of `key` inside this: after its wait, one at a time."""
        lock, users = self._turns.get(key) or (asyncio.Lock(), 0)
        self._turns[key] = (lock, users + 1)
        try:
            async with lock:
                wait = self.wait_s(key)
                if wait > 0:
                    await asyncio.sleep(wait)
                yield
        finally:
            lock, users = self._turns[key]
            if users > 1:
                self._turns[key] = (lock, users - 1)
            else:
                del self._turns[key]

    def failed(self, key: Key) -> float:
        """Count a failure; the delay to answer it after."""
        if self.delay_s <= 0:
            return 0.0
        count = self._failures.pop(key, (0, 0.0))[0] + 1
        wait = min(MAX_WAIT_S, self.delay_s * 2 ** min(count - 1, 32))
        self._failures[key] = (count, self._clock() + wait)
        while len(self._failures) > self.max_keys:
            self._failures.popitem(last=False)
        return self.delay_s

    def succeeded(self, key: Key) -> None:
        self._failures.pop(key, None)

    def __len__(self) -> int:
        return len(self._failures)
