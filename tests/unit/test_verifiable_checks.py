"""The checks the verifier scenarios rely on (tests/support/verifiable.py) catch each violation
they exist for, on event streams written by hand the way the Kafka tools print them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.verifiable import CONSUMER_CLASS, PRODUCER_CLASS, Event, Tool, check

T = "t"


def tool(tmp_path: Path, name: str, events: list[tuple[float, dict[str, Any]]]) -> Tool:
    t = Tool(name, tmp_path, CONSUMER_CLASS if name != "producer" else PRODUCER_CLASS, [])
    t.events = [Event(at, body) for at, body in events]
    return t


def acked(*offsets: int, partition: int = 0) -> list[tuple[float, dict[str, Any]]]:
    return [
        (0.1, {"name": "producer_send_success", "topic": T, "partition": partition, "offset": o})
        for o in offsets
    ]


def assigned(at: float, *partitions: int) -> tuple[float, dict[str, Any]]:
    parts = [{"topic": T, "partition": p} for p in partitions]
    return (at, {"name": "partitions_assigned", "partitions": parts})


def revoked(at: float, *partitions: int) -> tuple[float, dict[str, Any]]:
    parts = [{"topic": T, "partition": p} for p in partitions]
    return (at, {"name": "partitions_revoked", "partitions": parts})


def read(at: float, offset: int, partition: int = 0) -> tuple[float, dict[str, Any]]:
    return (at, {"name": "record_data", "topic": T, "partition": partition, "offset": offset})


def committed(at: float, offset: int, success: bool = True) -> tuple[float, dict[str, Any]]:
    offsets = [{"topic": T, "partition": 0, "offset": offset}]
    return (at, {"name": "offsets_committed", "offsets": offsets, "success": success})


def handover(tmp_path: Path, b_starts_at: int, a_commits: int = 2) -> list[str]:
    """a reads 0-1 and commits `a_commits`, gives partition 0 up; b resumes at `b_starts_at`."""
    p = tool(tmp_path, "producer", acked(0, 1, 2, 3))
    a = tool(
        tmp_path,
        "a",
        [assigned(1, 0), read(2, 0), read(2.1, 1), committed(2.2, a_commits), revoked(3, 0)],
    )
    b = tool(tmp_path, "b", [assigned(4, 0), *(read(5 + o, o) for o in range(b_starts_at, 4))])
    return check(p, [a, b])


def test_a_clean_handover_at_the_commit_passes(tmp_path: Path) -> None:
    assert handover(tmp_path, b_starts_at=2) == []


def test_resuming_past_the_commit_is_a_skip_and_the_records_missing(tmp_path: Path) -> None:
    violations = handover(tmp_path, b_starts_at=3)
    assert any("never consumed" in v for v in violations)
    assert any("resumed at 3, past 2" in v for v in violations)


def test_resuming_before_a_successful_commit_is_a_lost_commit(tmp_path: Path) -> None:
    violations = handover(tmp_path, b_starts_at=1)
    assert violations == ["b: ('t', 0) resumed at 1, before the commit 2 (lost)"]


def test_a_failed_commit_that_landed_is_no_skip(tmp_path: Path) -> None:
    """The reply was lost with the node, the commit was not: b resumes where a had read to."""
    p = tool(tmp_path, "producer", acked(0, 1, 2))
    a = tool(tmp_path, "a", [assigned(1, 0), read(2, 0), read(2.1, 1), committed(2.2, 2, False)])
    a.events.append(Event(3, {"name": "exited"}))
    b = tool(tmp_path, "b", [assigned(4, 0), read(5, 2)])
    assert check(p, [a, b]) == []


def test_commits_going_back_are_reported(tmp_path: Path) -> None:
    p = tool(tmp_path, "producer", acked(0, 1))
    a = tool(tmp_path, "a", [assigned(1, 0), read(2, 0), read(2.1, 1), committed(3, 2)])
    b = tool(tmp_path, "b", [committed(4, 1)])
    assert any("committed 1 after 2" in v for v in check(p, [a, b]))


def test_two_owners_at_once_are_reported_eager_and_cooperative(tmp_path: Path) -> None:
    p = tool(tmp_path, "producer", [])
    a = tool(tmp_path, "a", [assigned(1, 0, 1), revoked(5, 1)])  # cooperative: 1 goes at 5
    b = tool(tmp_path, "b", [assigned(4, 1)])  # ... but b has it from 4
    assert any("owned by a and b at once" in v for v in check(p, [a, b]))
    b_late = tool(tmp_path, "b", [assigned(6, 1)])
    assert check(p, [a, b_late]) == []


def test_an_exit_ends_ownership(tmp_path: Path) -> None:
    p = tool(tmp_path, "producer", [])
    a = tool(tmp_path, "a", [assigned(1, 0)])
    a.events.append(Event(3, {"name": "exited"}))  # kill -9: no revocation
    b = tool(tmp_path, "b", [assigned(4, 0)])
    assert check(p, [a, b]) == []


def test_a_stale_owner_is_allowed_only_while_its_commits_fail(tmp_path: Path) -> None:
    """Cut from its coordinator past its session, a still holds partition 0 when b gets it."""
    p = tool(tmp_path, "producer", [])
    b = tool(tmp_path, "b", [assigned(4, 0)])
    fenced = tool(tmp_path, "a", [assigned(1, 0), committed(5, 2, success=False), revoked(6, 0)])
    assert check(p, [fenced, b], stale_window=(3, 10)) == []
    assert any("at once" in v for v in check(p, [fenced, b]))
    # outside the window of the cut, the overlap is a violation again
    assert any("at once" in v for v in check(p, [fenced, b], stale_window=(7, 10)))
    accepted = tool(tmp_path, "a", [assigned(1, 0), committed(5, 2), revoked(6, 0)])
    assert check(p, [accepted, b], stale_window=(3, 10)) == [
        "('t', 0): a committed 2 after b was given it"
    ]


def test_a_third_owner_overlapping_an_earlier_one_is_reported(tmp_path: Path) -> None:
    """a holds 0 to 10, b from 2 to 3, c from 4: c overlaps a, not only the latest end."""
    p = tool(tmp_path, "producer", [])
    a = tool(tmp_path, "a", [assigned(1, 0), revoked(10, 0)])
    b = tool(tmp_path, "b", [assigned(2, 0), revoked(3, 0)])
    c = tool(tmp_path, "c", [assigned(4, 0)])
    violations = check(p, [a, b, c])
    assert any("owned by a and c" in v for v in violations), violations


def test_a_position_counts_only_until_the_partition_is_given_up(tmp_path: Path) -> None:
    """b is assigned 0, gives it up before reading it, reads it again after a later
    assignment: that read is checked against the later assignment, where it is fine."""
    p = tool(tmp_path, "producer", acked(0, 1, 2, 3))
    a = tool(
        tmp_path,
        "a",
        [assigned(1, 0), read(2, 0), read(2.1, 1), committed(2.2, 2), revoked(3, 0)],
    )
    a.events += [Event(at, body) for at, body in [assigned(7, 0), read(8, 2), committed(8.1, 3)]]
    a.events += [Event(at, body) for at, body in [read(8.2, 3), committed(8.3, 4)]]
    b = tool(tmp_path, "b", [assigned(4, 0), revoked(5, 0)])
    assert check(p, [a, b]) == []


def test_without_reported_commits_a_skip_is_still_a_skip(tmp_path: Path) -> None:
    """Auto commit reports nothing: a resume past everything read is still caught."""
    p = tool(tmp_path, "producer", acked(0, 1, 2, 3))
    a = tool(tmp_path, "a", [assigned(1, 0), read(2, 0), revoked(3, 0)])
    b = tool(tmp_path, "b", [assigned(4, 0), read(5, 2), read(6, 3)])
    assert any("resumed at 2, past 1" in v for v in check(p, [a, b]))
