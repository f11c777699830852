"""Named work items over the group protocol: each member's metadata says which items it will take
(its subscription), which it holds and since which generation; the leader's assignor splits the
items among the members that subscribe to them.

Bytes on the wire are JSON (a protocol of this SDK, not the consumer protocol's):
  metadata   {"v": 1, "subscription": [...], "owned": [...], "generation": g, "data": ...}
  assignment {"v": 1, "items": [...], "basis": "<sha256>"}
`basis` digests every member's subscription and data as the leader saw them (keyed by
group.instance.id, else member id). After a SkipAssignment (KIP-814) the restarted leader digests
what it sees now: a different digest means a member's metadata changed while the leader was away,
and the leader rejoins once.

Strategies: "range" (contiguous runs of the sorted items), "roundrobin", "sticky" (items stay
where they are; among members claiming the same item the claim of the highest generation wins,
KIP-792's idea, so a stale claim from an older generation is dropped), or any callable
`(members: Mapping[str, Subscription]) -> Mapping[str, list[str]]`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from membership.member import JoinedMember

VERSION = 1


@dataclass(frozen=True)
class Subscription:
    """A member as an item strategy sees it."""

    member_id: str
    group_instance_id: str | None
    items: tuple[str, ...]  # what it will take
    owned: tuple[str, ...]  # what it held
    generation: int  # the generation it held them in (-1: none)
    data: Any = None

    @property
    def key(self) -> str:
        return self.group_instance_id or self.member_id


Strategy = Callable[[Mapping[str, Subscription]], Mapping[str, Sequence[str]]]


def encode_metadata(
    items: Iterable[str], owned: Iterable[str] = (), generation: int = -1, data: Any = None
) -> bytes:
    return json.dumps(
        {"v": VERSION, "subscription": sorted(set(items)), "owned": sorted(set(owned)),
         "generation": generation, "data": data},
        separators=(",", ":"),
    ).encode()  # fmt: skip


def decode_metadata(member: JoinedMember) -> Subscription:
    try:
        doc = json.loads(member.metadata)
        return Subscription(
            member.member_id,
            member.group_instance_id,
            tuple(str(i) for i in doc.get("subscription", ())),
            tuple(str(i) for i in doc.get("owned", ())),
            int(doc.get("generation", -1)),
            doc.get("data"),
        )
    except (ValueError, TypeError, AttributeError):
        # a member speaking something else takes nothing rather than breaking the leader
        return Subscription(member.member_id, member.group_instance_id, (), (), -1)


def encode_assignment(items: Iterable[str], basis: str) -> bytes:
    return json.dumps({"v": VERSION, "items": sorted(items), "basis": basis}).encode()


def decode_assignment(data: bytes) -> tuple[list[str], str | None]:
    if not data:
        return [], None
    try:
        doc = json.loads(data)
        return [str(i) for i in doc.get("items", ())], doc.get("basis")
    except (ValueError, TypeError, AttributeError):
        return [], None


def basis(members: Iterable[Subscription]) -> str:
    """What an assignment is computed from: each member's subscription and data."""
    view = sorted((m.key, sorted(m.items), json.dumps(m.data, sort_keys=True)) for m in members)
    return hashlib.sha256(json.dumps(view).encode()).hexdigest()


def _eligible(members: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """item -> the members subscribing to it, in a stable order (instance id, else member id)."""
    order = sorted(members.values(), key=lambda m: (m.key, m.member_id))
    out: dict[str, list[str]] = {}
    for m in order:
        for item in m.items:
            out.setdefault(item, []).append(m.member_id)
    return {item: out[item] for item in sorted(out)}


def range_strategy(members: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """Items with the same eligible members are cut into contiguous runs, one per member."""
    plan: dict[str, list[str]] = {m: [] for m in members}
    by_set: dict[tuple[str, ...], list[str]] = {}
    for item, subscribers in _eligible(members).items():
        by_set.setdefault(tuple(subscribers), []).append(item)
    for who, items in by_set.items():
        per, extra = divmod(len(items), len(who))
        start = 0
        for i, member in enumerate(who):
            n = per + (1 if i < extra else 0)
            plan[member].extend(items[start : start + n])
            start += n
    return plan


def roundrobin_strategy(members: Mapping[str, Subscription]) -> dict[str, list[str]]:
    plan: dict[str, list[str]] = {m: [] for m in members}
    order = sorted(members.values(), key=lambda m: (m.key, m.member_id))
    turn = 0
    for item, who in _eligible(members).items():
        allowed = set(who)
        for _ in range(len(order)):
            candidate = order[turn % len(order)].member_id
            turn += 1
            if candidate in allowed:
                plan[candidate].append(item)
                break
    return plan


def sticky_strategy(members: Mapping[str, Subscription]) -> dict[str, list[str]]:
    """Balanced (counts differ by at most one among members eligible alike) and sticky: an item
    stays with the member that held it in the newest generation, as long as that member still
    subscribes to it and is not above its share."""
    eligible = _eligible(members)
    plan: dict[str, list[str]] = {m: [] for m in members}
    if not eligible:
        return plan
    # KIP-792: the newest generation's claim wins; older claims on the same item are stale
    claim: dict[str, tuple[int, str]] = {}
    for sub in members.values():
        for item in sub.owned:
            still_wanted = item in eligible and sub.member_id in eligible[item]
            if still_wanted and (item not in claim or sub.generation > claim[item][0]):
                claim[item] = (sub.generation, sub.member_id)
    subscribers = [m for m in members if members[m].items]
    quota_low, extra = divmod(len(eligible), max(len(subscribers), 1))
    # members keep claimed items up to the ceiling share; the first `extra` to reach it use it
    ceilings_left = extra
    unassigned: list[str] = []
    kept: dict[str, list[str]] = {m: [] for m in members}
    for item in eligible:
        if item in claim:
            kept[claim[item][1]].append(item)
        else:
            unassigned.append(item)
    for m in sorted(kept, key=lambda m: (-len(kept[m]), members[m].key)):
        cap = quota_low
        if len(kept[m]) > quota_low and ceilings_left > 0:
            cap, ceilings_left = quota_low + 1, ceilings_left - 1
        plan[m] = kept[m][:cap]
        unassigned.extend(kept[m][cap:])
    for item in sorted(unassigned):
        target = min(eligible[item], key=lambda m: (len(plan[m]), members[m].key))
        plan[target].append(item)
    return plan


STRATEGIES: dict[str, Strategy] = {
    "range": range_strategy,
    "roundrobin": roundrobin_strategy,
    "sticky": sticky_strategy,
}


class ItemAssignor:
    """The GroupMember-level assignor for item strategies (by protocol name)."""

    def __init__(self, strategies: Mapping[str, Strategy] | None = None) -> None:
        self.strategies = dict(strategies or STRATEGIES)

    def assign(self, protocol: str, members: Sequence[JoinedMember]) -> dict[str, bytes]:
        subs = {m.member_id: decode_metadata(m) for m in members}
        plan = self.strategies[protocol](subs)
        digest = basis(subs.values())
        return {m: encode_assignment(plan.get(m, ()), digest) for m in subs}

    def basis_changed(
        self, protocol: str, members: Sequence[JoinedMember], own_assignment: bytes
    ) -> bool:
        _, was = decode_assignment(own_assignment)
        return was is not None and was != basis(decode_metadata(m) for m in members)
