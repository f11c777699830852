"""Two ready uses of the group protocol: `WorkDistributor` splits named work items across the
members (stickily by default) and `LeaderElection` keeps exactly one leader, with a fencing token
(the group generation) to pass along with what the leader writes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from membership.items import STRATEGIES, ItemAssignor, Strategy, decode_assignment, encode_metadata
from membership.member import Assignment, GroupMember


class WorkDistributor:
    """This member's share of `items`. `items` are the ones it will take (its subscription); the
    group splits the union of all members' subscriptions. `on_change(items, generation)` is
    called with the new share on every assignment, and with an empty set when the share is
    revoked (a rebalance) or lost (the session expired)."""

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        group_id: str,
        items: Iterable[str],
        *,
        group_instance_id: str | None = None,
        strategy: str | Strategy = "sticky",
        protocol_type: str = "work",
        data: Any = None,
        on_change: Callable[[frozenset[str], int], Any] | None = None,
        **member_settings: Any,
    ) -> None:
        if isinstance(strategy, str):
            name, fn = strategy, STRATEGIES[strategy]
        else:
            name, fn = getattr(strategy, "__name__", "custom"), strategy
        self.strategy = name
        self.subscription = frozenset(items)
        self.data = data
        self.on_change = on_change
        self.items: frozenset[str] = frozenset()
        self.generation = -1
        # what this member held and in which generation, told to the leader at the next join
        self._owned: frozenset[str] = frozenset()
        self._owned_generation = -1
        self._updates: asyncio.Queue[frozenset[str] | None] = asyncio.Queue()
        self.member = GroupMember(
            bootstrap if isinstance(bootstrap, str) else list(bootstrap),
            group_id,
            protocol_type,
            [(name, self._metadata())],
            ItemAssignor({name: fn}),
            group_instance_id,
            on_assigned=self._assigned,
            on_revoked=self._revoked,
            on_lost=self._revoked,
            **member_settings,
        )

    def _metadata(self) -> bytes:
        return encode_metadata(self.subscription, self._owned, self._owned_generation, self.data)

    def _assigned(self, a: Assignment) -> None:
        items, _ = decode_assignment(a.data)
        self._set(frozenset(items), a.generation)
        self._owned, self._owned_generation = self.items, a.generation
        self.member.protocols = [(self.strategy, self._metadata())]

    def _revoked(self, a: Assignment) -> None:
        self._set(frozenset(), a.generation)

    def _set(self, items: frozenset[str], generation: int) -> None:
        self.items, self.generation = items, generation
        self._updates.put_nowait(items)
        if self.on_change is not None:
            self.on_change(items, generation)

    def set_subscription(self, items: Iterable[str], data: Any = None) -> None:
        """Take other items from now on: the group rebalances."""
        self.subscription = frozenset(items)
        self.data = data if data is not None else self.data
        self.member.set_protocols([(self.strategy, self._metadata())], "subscription changed")

    async def updates(self) -> AsyncIterator[frozenset[str]]:
        """This member's share each time it changes (empty while revoked); ends at close."""
        while (items := await self._updates.get()) is not None:
            yield items

    async def start(self) -> WorkDistributor:
        await self.member.start()
        return self

    async def close(self, *, leave: bool | None = None) -> None:
        await self.member.close(leave=leave)
        self._updates.put_nowait(None)

    async def leave(self) -> None:
        await self.member.leave()
        self._updates.put_nowait(None)

    async def __aenter__(self) -> WorkDistributor:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class LeaderElection:
    """One leader among the members; `fencing_token` is the generation it was elected in.

    `is_leader` is true only while the member also `holds_assignment` (a heartbeat sent less than
    a session timeout ago succeeded): a leader cut off from the coordinator stops acting before
    the coordinator can elect another, so two members never act with the same token at once.
    Writers downstream should still refuse a token lower than one they have seen."""

    ITEM = "leader"

    def __init__(
        self,
        bootstrap: str | Iterable[str],
        group_id: str,
        *,
        group_instance_id: str | None = None,
        on_elected: Callable[[int], Any] | None = None,
        on_demoted: Callable[[], Any] | None = None,
        **member_settings: Any,
    ) -> None:
        self.on_elected = on_elected
        self.on_demoted = on_demoted
        self._was_leader = False
        self.work = WorkDistributor(
            bootstrap,
            group_id,
            [self.ITEM],
            group_instance_id=group_instance_id,
            strategy="sticky",
            protocol_type="leader-election",
            on_change=self._changed,
            **member_settings,
        )

    def _changed(self, items: frozenset[str], generation: int) -> None:
        leading = self.ITEM in items
        if leading and self.on_elected is not None:
            self.on_elected(generation)
        if self._was_leader and not leading and self.on_demoted is not None:
            self.on_demoted()
        self._was_leader = leading

    @property
    def is_leader(self) -> bool:
        return self.ITEM in self.work.items and self.work.member.holds_assignment

    @property
    def fencing_token(self) -> int | None:
        return self.work.generation if self.is_leader else None

    async def wait_elected(self, timeout: float | None = None) -> int:
        """Until this member leads; its fencing token."""

        async def elected() -> int:
            async for items in self.work.updates():
                if self.ITEM in items:
                    return self.work.generation
            raise asyncio.CancelledError("closed before being elected")

        if self.is_leader:
            return self.work.generation
        async with asyncio.timeout(timeout):
            return await elected()

    async def start(self) -> LeaderElection:
        await self.work.start()
        return self

    async def close(self, *, leave: bool | None = None) -> None:
        await self.work.close(leave=leave)

    async def __aenter__(self) -> LeaderElection:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
