"""Read-only views of a partition's groups: DescribeGroups and ListGroups (spec §6)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from app.group.messages import DescribedGroup, DescribedMember, Error, ListedGroup
from app.group.state import Group, GroupState


def describe_group(groups: Mapping[str, Group], group_id: str) -> DescribedGroup:
    group = groups.get(group_id)
    if group is None:
        return DescribedGroup(group_id, Error.NONE, state=GroupState.DEAD.value)
    stable = group.is_(GroupState.STABLE)
    proto = group.protocol_name
    members = tuple(
        DescribedMember(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.metadata(proto) if stable else b"",
            m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return DescribedGroup(
        group_id,
        Error.NONE,
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
        if not g.is_(GroupState.DEAD) and (not states or g.state.value.lower() in states)
    ]
