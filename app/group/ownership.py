"""Who owns what in a Stable consumer group: the partitions of its members' subscribed topics
that no member's assignment holds (unowned: nobody reads them), and those that two members of
the generation hold (doubly owned: both read them). Kafka's brokers check neither; a buggy or
custom assignor, mixed subscriptions or a partition added upstream while the group is Stable
leave a group like this without a client noticing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from app.group.consumer_protocol import decode_assignment, subscription_topics
from app.group.state import GroupState
from app.group.view import GroupView


class Ownership(NamedTuple):
    group_id: str
    generation: int
    unowned: tuple[tuple[str, int], ...]
    doubly_owned: tuple[tuple[str, int], ...]
    # subscribed topics the registry does not know (their partitions cannot be counted)
    unknown_topics: tuple[str, ...] = ()


def ownership(group: GroupView, topics: Mapping[str, int]) -> Ownership | None:
    """The check for one group; None unless it is a Stable consumer group whose members'
    subscriptions and assignments all decode (nothing can be said of the others)."""
    if group.state is not GroupState.STABLE or group.protocol_type != "consumer":
        return None
    subscribed: set[str] = set()
    owners: dict[tuple[str, int], int] = {}
    for m in group.members:
        parsed = subscription_topics(m.subscription)
        if parsed is None:
            return None
        subscribed.update(parsed)
        if not m.assignment:
            continue
        try:
            assignment = decode_assignment(m.assignment)
        except Exception:  # opaque bytes: nothing to check
            return None
        for topic, partitions in assignment.partitions:
            for partition in partitions:
                tp = (topic, partition)
                owners[tp] = owners.get(tp, 0) + 1
    unowned: list[tuple[str, int]] = []
    unknown: list[str] = []
    for topic in sorted(subscribed):
        count = topics.get(topic)
        if count is None:
            unknown.append(topic)
            continue
        unowned.extend((topic, p) for p in range(count) if (topic, p) not in owners)
    doubly = sorted(tp for tp, n in owners.items() if n > 1)
    return Ownership(
        group.group_id, group.generation, tuple(unowned), tuple(doubly), tuple(unknown)
    )
