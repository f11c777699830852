"""The core's timers: a deadline per key, and a heap the runtime polls at `next_deadline()`.

No clock: deadlines are absolute ms the caller computed from the `now` it was given.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from enum import StrEnum
from typing import Final


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

# every session timer and commit reads this: not through 3.11's slow enum hook (state.py)
_HEARTBEAT: Final = TimerKind.HEARTBEAT

RETENTION_KEY: TimerKey = (TimerKind.RETENTION,)


def heartbeat_key(group_id: str, member_id: str) -> TimerKey:
    return (_HEARTBEAT, group_id, member_id)


def pending_key(group_id: str, member_id: str) -> TimerKey:
    return (TimerKind.PENDING, group_id, member_id)


def join_key(group_id: str) -> TimerKey:
    return (TimerKind.JOIN, group_id)


def sync_key(group_id: str, generation: int) -> TimerKey:
    return (TimerKind.SYNC, group_id, str(generation))


def expansion_key(group_id: str) -> TimerKey:
    return (TimerKind.EXPANSION, group_id)


class TimerQueue:
    """Timers by key (one deadline each) over a lazily cleaned heap.

    Session timers (`heartbeat_key`, one per member: most of the timers) are kept per group,
    member id -> deadline, with one heap entry per group at or before its earliest session: a
    member's timer costs a dict slot and its deadline, not a key tuple, a heap entry and a
    second deadline. The other timers are a dict of key -> deadline beside the heap.
    """

    __slots__ = ("_other", "bounds", "heap", "sessions")

    def __init__(self) -> None:
        self._other: dict[TimerKey, int] = {}
        # group id -> member id -> session deadline
        self.sessions: dict[str, dict[str, int]] = {}
        # group id -> deadline of the group's live heap entry (the lowest one pushed)
        self.bounds: dict[str, int] = {}
        # (deadline, key) and (deadline, (HEARTBEAT, group)) for a group's sessions
        self.heap: list[tuple[int, TimerKey]] = []

    @property
    def deadlines(self) -> Mapping[TimerKey, int]:
        """Every timer, key -> deadline (a read-only view)."""
        return _Deadlines(self)

    def schedule(self, key: TimerKey, deadline: int) -> None:
        # The heap holds at least one entry at or before each timer's deadline, not one per
        # reschedule: a later deadline (every heartbeat's) pushes nothing; the old entry is
        # moved to the current deadline when it surfaces. One entry per member instead of one
        # per heartbeat within a session timeout (~15 at Kafka's defaults).
        if key[0] == _HEARTBEAT:
            self.schedule_session(key[1], key[2], deadline)
            return
        current = self._other.get(key)
        self._other[key] = deadline
        if current is None or deadline < current:
            heapq.heappush(self.heap, (deadline, key))

    def schedule_all(self, timers: Iterable[tuple[TimerKey, int]]) -> None:
        """Many timers at once (every session after a load): one heapify, not a push each."""
        heap = self.heap
        lowered: set[str] = set()
        for key, deadline in timers:
            if key[0] == _HEARTBEAT:
                group_id = key[1]
                self.sessions.setdefault(group_id, {})[key[2]] = deadline
                bound = self.bounds.get(group_id)
                if bound is None or deadline < bound:
                    self.bounds[group_id] = deadline
                    lowered.add(group_id)
                continue
            current = self._other.get(key)
            self._other[key] = deadline
            if current is None or deadline < current:
                heap.append((deadline, key))
        heap.extend((self.bounds[g], (_HEARTBEAT, g)) for g in lowered)
        heapq.heapify(heap)

    def schedule_session(self, group_id: str, member_id: str, deadline: int) -> None:
        """`schedule(heartbeat_key(group_id, member_id), deadline)` without the key: the
        heartbeat path's (a member heartbeating has its session timer, and it moves later)."""
        members = self.sessions.get(group_id)
        if members is None:
            members = self.sessions[group_id] = {}
        members[member_id] = deadline
        bound = self.bounds.get(group_id)
        if bound is None or deadline < bound:
            self.bounds[group_id] = deadline
            heapq.heappush(self.heap, (deadline, (_HEARTBEAT, group_id)))

    def cancel(self, key: TimerKey) -> None:
        if key[0] == _HEARTBEAT:
            members = self.sessions.get(key[1])
            if members is not None:
                members.pop(key[2], None)
                if not members:
                    del self.sessions[key[1]]
            return
        self._other.pop(key, None)

    def _surface(self) -> tuple[int, TimerKey] | None:
        """The heap's first entry that is due at its own deadline; stale ones are dropped or
        moved to their timer's current deadline on the way. A group's entry is a lower bound
        of its sessions and is trusted as such (reading its members is for when it is due)."""
        heap = self.heap
        while heap:
            deadline, key = heap[0]
            if len(key) == 2 and key[0] == _HEARTBEAT:
                group_id = key[1]
                if self.bounds.get(group_id) != deadline:
                    heapq.heappop(heap)  # superseded by a lower entry of the group
                elif group_id not in self.sessions:
                    heapq.heappop(heap)  # the group's sessions are all gone
                    del self.bounds[group_id]
                else:
                    return deadline, key
                continue
            current = self._other.get(key)
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
            key = first[1]
            if len(key) == 2 and key[0] == _HEARTBEAT:
                yield from self._pop_sessions(key[1], now)
                continue
            heapq.heappop(self.heap)
            del self._other[key]
            yield key

    def _pop_sessions(self, group_id: str, now: int) -> Iterator[TimerKey]:
        """The group's entry is due: its expired sessions, earliest first, up to the next
        entry of the heap (so timers keep their order across groups and kinds); then the
        entry moves to the group's earliest remaining session."""
        heapq.heappop(self.heap)
        del self.bounds[group_id]
        following = self._surface()
        limit = now if following is None else min(now, following[0])
        members = self.sessions[group_id]
        due = sorted((d, m) for m, d in members.items() if d <= limit)
        for deadline, member_id in due:
            members = self.sessions.get(group_id, {})
            if members.get(member_id) != deadline:
                continue  # cancelled or moved by what an earlier expiry did
            del members[member_id]
            if not members:
                del self.sessions[group_id]
            yield (_HEARTBEAT, group_id, member_id)
        members = self.sessions.get(group_id, {})
        if members and group_id not in self.bounds:
            low = min(members.values())
            self.bounds[group_id] = low
            heapq.heappush(self.heap, (low, (_HEARTBEAT, group_id)))

    def clear(self) -> None:
        self._other.clear()
        self.sessions.clear()
        self.bounds.clear()
        self.heap.clear()


class _Deadlines(Mapping[TimerKey, int]):
    """Read-only key -> deadline view over both stores of a TimerQueue."""

    __slots__ = ("_queue",)

    def __init__(self, queue: TimerQueue) -> None:
        self._queue = queue

    def __getitem__(self, key: TimerKey) -> int:
        if len(key) == 3 and key[0] == _HEARTBEAT:
            return self._queue.sessions[key[1]][key[2]]
        return self._queue._other[key]

    def __iter__(self) -> Iterator[TimerKey]:
        yield from self._queue._other
        for group_id, members in list(self._queue.sessions.items()):
            for member_id in list(members):
                yield (_HEARTBEAT, group_id, member_id)

    def __len__(self) -> int:
        return len(self._queue._other) + sum(len(m) for m in self._queue.sessions.values())
