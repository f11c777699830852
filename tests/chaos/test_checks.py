"""The chaos suite's invariant checks catch what they claim to catch (synthetic logs)."""

from __future__ import annotations

from app.group.records import (
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    RecordType,
    group_record,
    offset_record,
)
from tests.chaos import checks
from tests.chaos.checks import LoggedRecord, LogSnapshot, LostLease
from tests.support import consumer_bytes


def rec(p: int, o: int, r: Record, epoch: int, node: int, t: int = 0) -> LoggedRecord:
    return LoggedRecord(p, o, r.type, r.key, r.value, epoch, t, node, True)


def offsets(group: str, values: list[int], epochs: list[int], node: int = 1) -> list[LoggedRecord]:
    return [
        rec(0, i, offset_record(group, "t", 0, OffsetValue(v, -1, "", 0, -1)), e, node)
        for i, (v, e) in enumerate(zip(values, epochs, strict=True))
    ]


def meta(generation: int, assignment: dict[str, list[int]], static: bool = False) -> Record:
    members = tuple(
        MemberValue(
            member_id=f"{who}-id",
            group_instance_id=who if static else None,
            client_id=who,
            client_host="h",
            rebalance_timeout_ms=1000,
            session_timeout_ms=1000,
            subscription=b"",
            assignment=consumer_bytes.assignment({"t": parts}),
        )
        for who, parts in assignment.items()
    )
    return group_record("g", GroupMetadataValue("consumer", generation, "range", None, -1, members))


def snap(records: list[LoggedRecord]) -> LogSnapshot:
    by: dict[int, list[LoggedRecord]] = {}
    for r in records:
        by.setdefault(r.partition, []).append(r)
    return LogSnapshot(by, [])


def test_epochs_must_not_decrease_and_belong_to_one_node() -> None:
    assert checks.epoch_violations(snap(offsets("g", [1, 2, 3], [1, 2, 2]))) == []
    back = checks.epoch_violations(snap(offsets("g", [1, 2, 3], [1, 2, 1])))
    assert len(back) == 1 and "superseded epoch" in back[0]
    shared = [*offsets("g", [1], [3], node=1), *offsets("g", [2], [3], node=2)]
    shared[1] = shared[1]._replace(offset=1)
    assert any("written by nodes 1 and 2" in v for v in checks.epoch_violations(snap(shared)))


def test_a_zombie_write_after_the_observed_takeover_is_caught() -> None:
    records = [
        r._replace(append_time_ms=t)
        for r, t in zip(offsets("g", [1, 2], [4, 4]), [100, 300], strict=True)
    ]
    lost = [LostLease(node_id=1, partition=0, epoch=4, taken_at_epoch=5, observed_taken_ms=200)]
    found = checks.zombie_write_violations(snap(records), lost)
    assert len(found) == 1 and "offset 1" in found[0]


def test_generations_never_decrease_and_partitions_have_one_owner_per_generation() -> None:
    ok = [rec(0, 0, meta(1, {"a": [0], "b": [1]}), 1, 1), rec(0, 1, meta(2, {"a": [0, 1]}), 1, 1)]
    groups = checks.group_records(snap(ok))
    assert checks.generation_violations(groups) == []
    assert checks.double_assignment_violations(groups) == []

    back = [*ok, rec(0, 2, meta(1, {"a": [0, 1]}), 2, 2)]
    assert len(checks.generation_violations(checks.group_records(snap(back)))) == 1

    twice_in_one = [rec(0, 0, meta(1, {"a": [0, 1], "b": [1]}), 1, 1)]
    assert checks.double_assignment_violations(checks.group_records(snap(twice_in_one)))

    across = [rec(0, 0, meta(3, {"a": [0], "b": [1]}), 1, 1),
              rec(0, 1, meta(3, {"a": [1], "b": [0]}), 2, 2)]  # fmt: skip
    assert len(checks.double_assignment_violations(checks.group_records(snap(across)))) == 2

    static = [rec(0, 0, meta(3, {"s1": [0]}, static=True), 1, 1),
              rec(0, 1, meta(3, {"s1": [0]}, static=True), 1, 1)]  # fmt: skip
    assert checks.double_assignment_violations(checks.group_records(snap(static))) == []


def test_acknowledged_commits_must_be_logged_and_fetched() -> None:
    logged = checks.offset_records(snap(offsets("g", [5, 7], [1, 1])))
    assert logged == {("g", "t", 0): [5, 7]}
    fetched = {"g": {("t", 0): 7}}
    assert (
        checks.missing_ack_violations([("g", "t", 0, 5), ("g", "t", 0, 7)], logged, fetched) == []
    )
    lost = checks.missing_ack_violations([("g", "t", 0, 6)], logged, fetched)
    assert lost == ["acknowledged commit g/t/0=6 is not in the log"]
    stale = checks.missing_ack_violations([("g", "t", 0, 7)], logged, {"g": {("t", 0): 5}})
    assert len(stale) == 1 and "answers 5" in stale[0]


def test_a_partition_that_moved_is_held_to_its_last_committer() -> None:
    """Consumer A committed 22 and lost the partition to B, which then worked through its
    backlog (18, 20): the answer 20 is right, though 22 was acknowledged earlier; 19 is not."""
    logged = checks.offset_records(snap(offsets("g", [22, 18, 20], [1, 1, 1])))
    acks = [("g", "t", 0, 22), ("g", "t", 0, 18), ("g", "t", 0, 20)]
    last = [("g", "t", 0, 18), ("g", "t", 0, 20)]
    assert checks.missing_ack_violations(acks, logged, {"g": {("t", 0): 20}}, last) == []
    stale = checks.missing_ack_violations(acks, logged, {"g": {("t", 0): 19}}, last)
    assert len(stale) == 1 and "answers 19, but 20" in stale[0]
    assert checks.missing_ack_violations(acks, logged, {"g": {("t", 0): 20}})  # without: 22


def test_an_offset_appended_twice_is_caught() -> None:
    a = offsets("g", [1], [1])[0]
    assert checks.duplicate_offset_violations(snap([a, a._replace(live=False)]))
    assert RecordType.OFFSET_COMMIT is a.type
