"""Read-only views of a partition's groups: DescribeGroups and ListGroups
(protocol.md §9.1, §9.2), and immutable snapshots for metrics and the admin API, so no reader
outside the core touches `Group` or `Member` (whose fields the core may change under it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from app.group.messages import NO_ERROR, DescribedGroup, DescribedMember, ListedGroup
from app.group.state import DEAD, STABLE, Group, GroupState


class GroupSummary(NamedTuple):
    """One line per group: what a listing or a gauge needs."""

    group_id: str
    state: GroupState
    protocol_type: str  # "" before a member chose one
    generation: int
    members: int
    static_members: int = 0
    state_timestamp: int = -1  # when it entered its state (a Stable group: its last rebalance)
    protocol_name: str | None = None


class MemberView(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    is_leader: bool
    subscription: bytes  # its metadata for the group's protocol; b"" while none is chosen
    assignment: bytes


class OffsetView(NamedTuple):
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int  # -1: the retention setting decides
    source: int = 0  # OFFSET_SOURCE_*: a member's commit, a reset, an import
    origin: str = ""  # an imported offset's upstream cluster


class GroupView(NamedTuple):
    """A group as the admin API shows it: members in join order, offsets by partition."""

    group_id: str
    state: GroupState
    generation: int
    protocol_type: str
    protocol_name: str | None
    leader_id: str | None
    rebalance_reason: str | None
    registered_static_members: tuple[str, ...]  # registered, not yet joined
    members: tuple[MemberView, ...]
    offsets: tuple[OffsetView, ...]
    # the open registration: when it was made, and when the scale-up it expects gives up on
    # instances that have not joined (its first JoinGroup + the expansion timeout; -1 before)
    registered_ms: int = -1
    registration_deadline_ms: int = -1


def summaries(groups: Mapping[str, Group]) -> tuple[GroupSummary, ...]:
    return tuple(
        GroupSummary(
            g.group_id,
            g.state,
            g.protocol_type or "",
            g.generation,
            len(g.members),
            sum(1 for m in g.members.values() if m.group_instance_id),
            -1 if g.state_timestamp is None else g.state_timestamp,
            g.protocol_name,
        )
        for g in groups.values()
    )


def snapshot(groups: Mapping[str, Group], group_id: str) -> GroupView | None:
    """None for a group that does not exist or is being deleted (Dead)."""
    g = groups.get(group_id)
    if g is None or g.is_(DEAD):
        return None
    proto = g.protocol_name
    reg = g.registration
    members = tuple(
        MemberView(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.session_timeout_ms,
            m.rebalance_timeout_ms,
            g.is_leader(m.member_id),
            m.metadata(proto) if proto else b"",
            m.assignment,
        )
        for m in g.members.values()
    )
    offsets = tuple(
        OffsetView(
            t,
            p,
            v.offset,
            v.leader_epoch,
            v.metadata,
            v.commit_timestamp,
            v.expire_timestamp,
            v.source,
            v.origin,
        )
        for (t, p), v in sorted(g.offsets.items())
    )
    return GroupView(
        g.group_id,
        g.state,
        g.generation,
        g.protocol_type or "",
        proto,
        g.leader_id,
        g.rebalance_reason,
        tuple(g.registered),
        members,
        offsets,
        reg.registered_ms if reg else -1,
        reg.expansion_started_ms + reg.timeout_ms if reg and reg.expansion_started_ms >= 0 else -1,
    )


def describe_group(groups: Mapping[str, Group], group_id: str) -> DescribedGroup:
    group = groups.get(group_id)
    if group is None:
        return DescribedGroup(group_id, NO_ERROR, state=DEAD.value)
    stable = group.is_(STABLE)
    proto = group.protocol_name
    members = tuple(
        DescribedMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata(proto) if stable else b"",
            # Kafka's describeNoMetadata keeps the assignment the member holds
            m.assignment,
        )
        for m in group.members.values()
    )
    return DescribedGroup(
        group_id,
        NO_ERROR,
        state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(proto or "") if stable else "",
        members=members,
    )


def list_groups(
    groups: Mapping[str, Group], states_filter: Iterable[str], types_filter: Iterable[str]
) -> list[ListedGroup]:
    states = {s.lower() for s in states_filter}
    types = {t.lower() for t in types_filter}
    if types and "classic" not in types:
        return []
    return [
        ListedGroup(g.group_id, g.protocol_type or "", g.state.value)
        for g in groups.values()
        if not g.is_(DEAD) and (not states or g.state.value.lower() in states)
    ]
