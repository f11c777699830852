"""A group's rebalance timeline, derived from its GROUP_METADATA records (the log and what
compaction archived): one mark per record that changed something an operator cares about.

- `rebalance`: a new generation; its reason (what started it, recorded by the coordinator), how
  long it took (rebalance start to the record), members in and out, partitions that changed
  owner (consumer protocol assignments; owners compared by instance id, else member id).
- `static-restart`: same generation, a static member came back under a new member id and got
  its assignment back without a rebalance (KIP-345).
- `skip-assignment`: the same, for the static leader, answered with SkipAssignment (KIP-814).
- `empty`: the last member left; `deleted`: the group's tombstone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.group.consumer_protocol import decode_assignment
from app.group.records import GroupMetadataValue, MemberValue


@dataclass(frozen=True, slots=True)
class TimelineMark:
    offset: int
    at_ms: int
    kind: str
    generation: int
    reason: str
    duration_ms: int | None
    members: int
    members_in: tuple[str, ...]
    members_out: tuple[str, ...]
    partitions_moved: int


def _key(m: MemberValue) -> str:
    return m.group_instance_id or m.member_id


def _owners(v: GroupMetadataValue) -> dict[tuple[str, int], str]:
    if v.protocol_type != "consumer":
        return {}
    owners: dict[tuple[str, int], str] = {}
    for m in v.members:
        if not m.assignment:
            continue
        try:
            parts = decode_assignment(m.assignment).partitions
        except Exception:  # not the consumer protocol after all: nothing to compare
            continue
        for topic, ps in parts:
            for p in ps:
                owners[(topic, p)] = _key(m)
    return owners


def timeline(records: Iterable[tuple[int, int, GroupMetadataValue | None]]) -> list[TimelineMark]:
    """Marks in log order from (offset, append time ms, value or None for a tombstone)."""
    marks: list[TimelineMark] = []
    prev: GroupMetadataValue | None = None
    for offset, at_ms, v in records:
        if v is None:
            marks.append(TimelineMark(offset, at_ms, "deleted", -1, "group deleted", None, 0,
                                      (), (), 0))  # fmt: skip
            prev = None
            continue
        before = {_key(m): m for m in prev.members} if prev else {}
        now = {_key(m): m for m in v.members}
        joined = tuple(sorted(now.keys() - before.keys()))
        left = tuple(sorted(before.keys() - now.keys()))
        moved = _moved(_owners(prev) if prev else {}, _owners(v))
        if prev is None or v.generation != prev.generation:
            started = v.rebalance_started_ms
            kind = "rebalance" if v.members else "empty"
            reason = v.rebalance_reason or ("all members left" if not v.members else "")
            duration = at_ms - started if started > 0 and at_ms >= started else None
            marks.append(TimelineMark(offset, at_ms, kind, v.generation, reason, duration,
                                      len(v.members), joined, left, moved))  # fmt: skip
        else:
            replaced = _replaced(before, now)
            if replaced or v.skip_assignment:
                kind = "skip-assignment" if v.skip_assignment else "static-restart"
                reason = (
                    f"static leader {', '.join(replaced)} returned (SkipAssignment)"
                    if v.skip_assignment
                    else f"static member {', '.join(replaced)} returned"
                )
                marks.append(TimelineMark(offset, at_ms, kind, v.generation, reason, None,
                                          len(v.members), (), (), moved))  # fmt: skip
        prev = v
    return marks


def _replaced(before: dict[str, MemberValue], now: dict[str, MemberValue]) -> list[str]:
    return sorted(
        k
        for k, m in now.items()
        if m.group_instance_id and k in before and before[k].member_id != m.member_id
    )


def _moved(before: dict[tuple[str, int], str], after: dict[tuple[str, int], str]) -> int:
    return sum(1 for tp in before.keys() | after.keys() if before.get(tp) != after.get(tp))


def summary(marks: Sequence[TimelineMark]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in marks:
        counts[m.kind] = counts.get(m.kind, 0) + 1
    return counts
