"""The core's timers: a deadline per key, and a heap the runtime polls at `next_deadline()`.

No clock: deadlines are absolute ms the caller computed from the `now` it was given.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from enum import StrEnum


class TimerKind(StrEnum):
    """What a timer is for; the first element of its key. String values keep keys readable
    (and equal to the plain tuples tests and logs spell)."""

    HEARTBEAT = "hb"  # (kind, group, member): the member's session
    PENDING = "pending"  # (kind, group, member): a KIP-394 member id not yet used to join
    JOIN = "join"  # (kind, group): the join phase's deadline
    SYNC = "sync"  # (kind, group, generation): members of a generation that have not synced
    EXPANSION = "expansion"  # (kind, group): a registered scale-up's deadline
    RETENTION = "retention"  # (kind,): the partition's periodic offset expiry


TimerKey = tuple[str, ...]

RETENTION_KEY: TimerKey = (TimerKind.RETENTION,)


def heartbeat_key(group_id: str, member_id: str) -> TimerKey:
    return (TimerKind.HEARTBEAT, group_id, member_id)


def pending_key(group_id: str, member_id: str) -> TimerKey:
    return (TimerKind.PENDING, group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return (TimerKind.JOIN, group_id)


def sync_key(group_id: str, generation: int) -> TimerKey:
    return (TimerKind.SYNC, group_id, str(generation))


def expansion_key(group_id: str) -> TimerKey:
    return (TimerKind.EXPANSION, group_id)


class TimerQueue:
    """Timers by key (one deadline each) over a lazily cleaned heap."""

    __slots__ = ("deadlines", "heap")

    def __init__(self) -> None:
        # both are mutated in place, never rebound: the façade exposes them as they are
        self.deadlines: dict[TimerKey, int] = {}
        self.heap: list[tuple[int, TimerKey]] = []

    def schedule(self, key: TimerKey, deadline: int) -> None:
        # The heap holds at least one entry at or before each timer's deadline, not one per
        # reschedule: a later deadline (every heartbeat's) pushes nothing; the old entry is
        # moved to the current deadline when it surfaces. One entry per member instead of one
        # per heartbeat within a session timeout (~15 at Kafka's defaults).
        current = self.deadlines.get(key)
        self.deadlines[key] = deadline
        if current is None or deadline < current:
            heapq.heappush(self.heap, (deadline, key))

    def schedule_all(self, timers: Iterable[tuple[TimerKey, int]]) -> None:
        """Many timers at once (every session after a load): one heapify, not a push each."""
        heap = self.heap
        for key, deadline in timers:
            current = self.deadlines.get(key)
            self.deadlines[key] = deadline
            if current is None or deadline < current:
                heap.append((deadline, key))
        heapq.heapify(heap)

    def cancel(self, key: TimerKey) -> None:
        self.deadlines.pop(key, None)

    def _surface(self) -> tuple[int, TimerKey] | None:
        """The heap's first entry that is due at its own deadline; stale ones are dropped or
        moved to their timer's current deadline on the way."""
        heap = self.heap
        while heap:
            deadline, key = heap[0]
            current = self.deadlines.get(key)
            if current == deadline:
                return deadline, key
            if current is None:
                heapq.heappop(heap)  # cancelled or fired
            else:
                heapq.heapreplace(heap, (current, key))  # rescheduled later
        return None

    def next_deadline(self) -> int | None:
        first = self._surface()
        return None if first is None else first[0]

    def pop_due(self, now: int) -> Iterator[TimerKey]:
        """Due timers, earliest first, each removed as it is yielded. Timers the consumer
        schedules meanwhile are seen too, and fire in this pass when already due."""
        while (first := self._surface()) is not None and first[0] <= now:
            key = heapq.heappop(self.heap)[1]
            del self.deadlines[key]
            yield key

    def clear(self) -> None:
        self.deadlines.clear()
        self.heap.clear()
