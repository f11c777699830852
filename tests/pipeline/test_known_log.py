"""The audit of a hand-built log (tests/pipeline/logs.py): every table and every invariant
against answers worked out by hand, corrupted groups flagged, clean groups not."""

from __future__ import annotations

from typing import Any

from tests.pipeline.conftest import Audited
from tests.pipeline.logs import T

CLEAN = {"g-basic", "g-leader", "g-forced", "g-scale", "g-deleted", "g-import"}


def gens(known: Audited, group: str) -> dict[int, dict[str, Any]]:
    return {r["generation"]: r for r in known.rows("generations", group_id=group)}


def test_generations_have_rebalance_window_members_and_moves(known: Audited) -> None:
    g = gens(known, "g-basic")
    assert set(g) == {1, 2}
    one, two = g[1], g[2]
    assert (one["rebalance_started_ms"], one["rebalance_ended_ms"], one["duration_ms"]) == (
        T + 7_000,
        T + 10_000,
        3_000,
    )
    assert (one["members"], one["static_members"], one["dynamic_members"]) == (2, 1, 1)
    assert (one["leader"], one["protocol_type"], one["protocol_name"]) == (
        "a-1",
        "consumer",
        "range",
    )
    assert (one["partitions_assigned"], one["partitions_moved"], one["partitions_new"]) == (6, 0, 6)
    # generation 2 against the *last* record of generation 1 (after b-1 -> b-2, same instance)
    assert (two["members"], two["static_members"], two["dynamic_members"]) == (3, 1, 2)
    assert (
        two["partitions_assigned"],
        two["partitions_moved"],
        two["partitions_new"],
        two["partitions_revoked"],
    ) == (6, 3, 0, 0)
    assert two["duration_ms"] == 2_000 and two["rebalance_reason"] == "member joined"
    assert one["in_history"] and not two["in_history"]  # history + log are one history


def test_static_owner_identity_survives_new_member_ids(known: Audited) -> None:
    g = gens(known, "g-leader")
    assert set(g) == {5, 6}
    assert g[5]["static_members"] == 2 and g[5]["leader_instance"] == "i-l"
    assert g[6]["partitions_moved"] == 0 and g[6]["leader"] == "l-4"
    assert g[6]["rebalance_reason"] == "static member replaced during sync"


def test_emptied_group_revokes_everything(known: Audited) -> None:
    g = gens(known, "g-forced")
    assert g[3]["empty"] and g[3]["members"] == 0
    assert (g[3]["partitions_assigned"], g[3]["partitions_revoked"]) == (0, 2)
    assert g[2]["forced"] and not g[1]["forced"] and g[2]["partitions_moved"] == 0


def test_recreated_group_starts_a_new_incarnation(known: Audited) -> None:
    rows = known.rows("generations", group_id="g-deleted")
    assert sorted((r["incarnation"], r["generation"]) for r in rows) == [(0, 3), (1, 1)]
    assert known.rows("group_records", group_id="g-deleted", kind="tombstone")


def test_static_replacements_absorbed_without_rebalance(known: Audited) -> None:
    rows = known.rows("static_replacements")
    got = sorted(
        (
            r["group_id"],
            r["generation"],
            r["instance_id"],
            r["old_member_id"],
            r["new_member_id"],
            r["leader_replaced"],
        )
        for r in rows
    )
    assert got == [
        ("g-basic", 1, "i-b", "b-1", "b-2", False),
        ("g-leader", 5, "i-f", "f-1", "f-2", False),
        ("g-leader", 5, "i-l", "l-1", "l-2", True),
        ("g-leader", 5, "i-l", "l-2", "l-3", True),
    ]


def test_skip_assignment_leader_rejoins(known: Audited) -> None:
    rows = known.rows("skip_assignment_rejoins")
    assert sorted((r["new_member_id"], r["skip_assignment"]) for r in rows) == [
        ("l-2", True),
        ("l-3", False),
    ]


def test_fenced_instances_in_place_and_across_a_rebalance(known: Audited) -> None:
    rows = known.rows("fenced_instances")
    assert len([r for r in rows if r["kind"] == "replaced_in_place"]) == 4
    (across,) = [r for r in rows if r["kind"] == "replaced_across_rebalance"]
    assert (
        across["group_id"],
        across["instance_id"],
        across["fenced_member_id"],
        across["by_member_id"],
        across["from_generation"],
        across["generation"],
    ) == (
        "g-leader",
        "i-l",
        "l-3",
        "l-4",
        5,
        6,
    )


def test_pre_registered_scale_ups_and_their_rebalances(known: Audited) -> None:
    rows = sorted(known.rows("scale_ups", group_id="g-scale"), key=lambda r: r["registered_ms"])
    done, never = rows
    assert done["instances"] == ["i-2", "i-3"] and done["dropped"] == []
    assert (done["joined"], done["rebalances"], done["generations"], done["outcome"]) == (
        2,
        1,
        [2],
        "completed",
    )
    assert (done["registered_ms"], done["expansion_started_ms"], done["closed_ms"]) == (
        T + 11_000,
        T + 12_000,
        T + 15_001,
    )
    assert (
        never["instances"],
        never["dropped"],
        never["joined"],
        never["rebalances"],
        never["outcome"],
    ) == (["i-4"], ["i-4"], 0, 0, "none_joined")
    assert gens(known, "g-scale")[2]["partitions_moved"] == 2


def test_forced_rebalances_and_reasons(known: Audited) -> None:
    (forced,) = known.rows("forced_rebalances")
    assert (forced["group_id"], forced["generation"], forced["reason"], forced["duration_ms"]) == (
        "g-forced",
        2,
        "rolling config change",
        1_000,
    )
    reasons = {r["reason"]: r for r in known.rows("rebalance_reasons")}
    assert reasons["member joined"]["rebalances"] == 9
    assert reasons["admin: rolling config change"]["rebalances"] == 1
    assert reasons["member removed"]["emptied_group"] == 1
    # the exact lower median of the reason's known durations, and the groups it happened in
    joined = [r for r in known.rows("generations") if r["rebalance_reason"] == "member joined"]
    durations = sorted(r["duration_ms"] for r in joined if r["duration_ms"] is not None)
    assert len(set(durations)) > 2  # a median that means something
    assert reasons["member joined"]["median_duration_ms"] == durations[(len(durations) - 1) // 2]
    assert reasons["member joined"]["groups"] == len({r["group_id"] for r in joined})


def test_commit_activity_per_partition(known: Audited) -> None:
    (a,) = known.rows("commit_activity", group_id="g-forced")
    assert (a["topic"], a["partition"], a["commits"], a["member_commits"], a["resets"]) == (
        "t2",
        0,
        5,
        3,
        2,
    )
    assert a["imports"] == 0
    assert (a["first_offset"], a["last_offset"], a["min_offset"], a["max_offset"]) == (
        100,
        30,
        30,
        150,
    )
    assert (a["offset_advance"], a["offset_rewound"], a["regressions"], a["violations"]) == (
        50,
        120,
        3,
        0,
    )
    assert a["generations"] == 3 and (a["first_commit_ms"], a["last_commit_ms"]) == (
        T + 11_000,
        T + 27_000,
    )
    (b,) = known.rows("commit_activity", group_id="bad-commit")
    assert (b["commits"], b["regressions"], b["violations"]) == (3, 2, 1)


def test_imports_are_counted_beside_resets_and_may_move_a_position_back(known: Audited) -> None:
    # g-import (tests/pipeline/logs.py): t13-0 imported 500, committed 520, imported 300
    # (backwards in generation 1), committed 310; t13-1 imported 40, committed 45
    rows = {r["partition"]: r for r in known.rows("commit_activity", group_id="g-import")}
    got = {
        p: (r["commits"], r["member_commits"], r["resets"], r["imports"]) for p, r in rows.items()
    }
    assert got == {0: (4, 2, 0, 2), 1: (2, 1, 0, 1)}
    zero = rows[0]
    assert (zero["first_offset"], zero["last_offset"], zero["generations"]) == (500, 310, 2)
    assert (zero["offset_advance"], zero["offset_rewound"]) == (30, 220)
    # the import that moved 520 back to 300 within generation 1 is a regression (the log's
    # movement, as a reset's), not a violation of offsets_monotonic_within_generation
    assert (zero["regressions"], zero["violations"]) == (1, 0)
    assert "g-import" not in rows_groups(flagged(known, "offsets_monotonic_within_generation"))
    summary = {r["group_id"]: r for r in known.rows("group_summary")}
    assert (summary["g-import"]["imports"], summary["g-import"]["resets"]) == (3, 0)
    assert (summary["g-forced"]["imports"], summary["g-forced"]["resets"]) == (0, 2)
    assert summary["g-import"]["violations"] == 0 and summary["g-import"]["commits"] == 6
    # the report: the totals (resets: g-forced's 2, bad-commit's 1), the column, the note
    report = (known.out / "report.md").read_text()
    assert "| offset resets / imports (gateway); offsets advanced by | 3 / 3; " in report
    assert "| g-import | t13-0 | 4 | 0 | 2 | 500 → 310 | 30 | 220 | 1 (0) | 2 |" in report
    assert "| g-forced | t2-0 | 5 | 2 | 0 | 100 → 30 |" in report
    assert "- *Imports* are commits with OffsetValue v2 `source` = upstream" in report


def flagged(known: Audited, invariant: str) -> list[dict[str, Any]]:
    return known.rows("invariant_violations", invariant=invariant)


def test_each_corruption_is_flagged_by_its_invariant(known: Audited) -> None:
    expected = {
        "generation_never_decreases": ["bad-gen"],
        "partition_single_owner": ["bad-owner"],
        "assignment_within_subscription": ["bad-subs"],
        "offsets_monotonic_within_generation": ["bad-commit"],
        "leader_is_member": ["bad-leader"],
        "records_decode": [None, "bad-bytes", "bad-bytes2", "bad-bytes3"],
        "unique_log_positions": [None],
    }
    for name, groups in expected.items():
        rows = flagged(known, name)
        assert rows_groups(rows) == sorted(groups, key=str), (name, rows)
        inv = known.invariant(name)
        assert inv["violations"] == len(groups) and not inv["ok"]
        assert inv["examples"] and inv["checked"] >= len(groups)
    (own,) = flagged(known, "partition_single_owner")
    assert own["detail"] == "t4-1 owned by p-1, q-1"
    (back,) = flagged(known, "offsets_monotonic_within_generation")
    assert back["detail"] == "t9-0: offset 90 after 100 in generation 1"
    (subs,) = flagged(known, "assignment_within_subscription")
    assert "assigned t6 but subscribed to [t5]" in subs["detail"]


def rows_groups(rows: list[dict[str, Any]]) -> list[Any]:
    return sorted((r["group_id"] for r in rows), key=str)


def test_clean_groups_are_never_flagged(known: Audited) -> None:
    groups = {r["group_id"] for r in known.rows("invariant_violations")}
    assert not groups & CLEAN
    summary = {r["group_id"]: r for r in known.rows("group_summary")}
    assert all(summary[g]["violations"] == 0 for g in CLEAN)
    assert summary["g-leader"]["static_restarts_absorbed"] == 3
    assert summary["g-leader"]["leader_rejoins"] == 2
    assert summary["g-scale"]["scale_ups"] == 2
    assert summary["g-forced"]["forced_rebalances"] == 1


def test_report_and_plots_are_written(known: Audited) -> None:
    report = (known.out / "report.md").read_text()
    assert "# Rebalance audit" in report and "invariant(s) violated" in report
    for name in (
        "generation_never_decreases",
        "partition_single_owner",
        "g-forced",
        "rolling config change",
        "Pre-registered scale-ups",
    ):
        assert name in report
    for png in (
        "rebalances_over_time",
        "time_in_rebalance_per_group",
        "partitions_moved_per_rebalance",
        "static_restarts_absorbed",
    ):
        data = (known.out / f"{png}.png").read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, png
        assert f"({png}.png)" in report
    assert (known.out / "summary.json").exists()
