"""A group's rebalance timeline from its records (app/group/timeline.py)."""

from __future__ import annotations

from app.group.records import GroupMetadataValue, MemberValue
from app.group.timeline import timeline
from tests.support.consumer_bytes import assignment


def member(mid: str, instance: str | None, parts: list[int]) -> MemberValue:
    return MemberValue(mid, instance, "client", "/127.0.0.1", 30000, 10000, b"",
                       assignment({"t": parts}))  # fmt: skip


def value(gen: int, members: list[MemberValue], reason: str = "", started: int = -1,
          skip: bool = False) -> GroupMetadataValue:  # fmt: skip
    return GroupMetadataValue("consumer", gen, "range", members[0].member_id if members else None,
                              0, tuple(members), reason, started, skip)  # fmt: skip


def test_marks_rebalances_static_restarts_skip_assignment_and_deletion() -> None:
    a, b = member("a-1", "a", [0, 1]), member("b-1", None, [2, 3])
    records = [
        (10, 1_000, value(1, [a, b], "member joined", started=400)),
        # a static member back under a new id, same generation: absorbed, no rebalance
        (11, 2_000, value(1, [member("a-2", "a", [0, 1]), b])),
        # the static leader back, answered with SkipAssignment
        (12, 3_000, value(1, [member("a-3", "a", [0, 1]), b], skip=True)),
        # a third member: one partition moves to it
        (
            13,
            5_000,
            value(
                2,
                [member("a-3", "a", [0]), b, member("c-1", None, [1])],
                "member joined",
                started=4_500,
            ),
        ),
        (14, 6_000, value(3, [], "member left")),
        (15, 7_000, None),
    ]
    marks = timeline(records)
    assert [(m.kind, m.generation) for m in marks] == [
        ("rebalance", 1), ("static-restart", 1), ("skip-assignment", 1), ("rebalance", 2),
        ("empty", 3), ("deleted", -1),
    ]  # fmt: skip
    first, restart, skip, grow, empty, _ = marks
    assert (first.reason, first.duration_ms, first.members_in) == (
        "member joined",
        600,
        ("a", "b-1"),
    )
    assert first.partitions_moved == 4
    assert restart.reason == "static member a returned" and restart.partitions_moved == 0
    assert "SkipAssignment" in skip.reason
    assert (grow.duration_ms, grow.members_in, grow.partitions_moved) == (500, ("c-1",), 1)
    assert (empty.members, empty.members_out) == (0, ("a", "b-1", "c-1"))


def test_a_record_rewritten_in_the_same_generation_without_a_restart_is_not_a_mark() -> None:
    a = member("a-1", "a", [0])
    marks = timeline([(1, 10, value(1, [a], "member joined")), (2, 20, value(1, [a]))])
    assert [m.kind for m in marks] == ["rebalance"]
