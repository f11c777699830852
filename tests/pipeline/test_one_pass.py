"""The audit reads a local export in the Python workers (pipeline/scan.py: counts, offset
bitmaps and the records other than commits in one pass; pipeline/commits.py: the commits
folded per batch into partials joined in log order by the JVM). Whatever the batches, its
tables are the ones of the reference path: Spark's own scan and the window over every commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.audit import TABLES, Audit, AuditResult
from tests.pipeline.logs import LogBuilder, T, known_log, member


def run(spark: Any, export: Path, out: Path, **attrs: Any) -> tuple[Audit, AuditResult]:
    a = Audit(spark, str(export), str(out))
    for name, value in attrs.items():
        setattr(a, name, value)
    return a, a.run()


def reference(spark: Any, export: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> AuditResult:
    """Spark's scan and the window over every commit."""
    with monkeypatch.context() as m:
        m.setattr(Audit, "_commits", Audit._commits_by_window)
        a, result = run(spark, export, out, arrow_reads=False)
    assert a.commits_by == "window"
    return result


def tables(spark: Any, out: Path) -> dict[str, list[tuple[Any, ...]]]:
    found = {}
    for name in TABLES:
        df = spark.read.parquet(str(out / "tables" / name))
        found[name] = sorted((tuple(r) for r in df.collect()), key=repr)
        found[f"{name} schema"] = [(f.name, f.dataType.simpleString()) for f in df.schema]
    return found


def same_audit(spark: Any, out: Path, result: AuditResult, ref_out: Path, ref: AuditResult) -> None:
    assert result.invariants == ref.invariants
    assert result.tables == ref.tables
    assert tables(spark, out) == tables(spark, ref_out)


@pytest.mark.parametrize("row_group_size", [1, 3, None], ids=["rows", "threes", "one-group"])
def test_commits_folded_per_batch_match_the_window(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row_group_size: int | None
) -> None:
    # every commit its own batch (fold_rows=1 with one-row groups): each step of a partition's
    # sequence, the known log's regressions and reset included, crosses a batch boundary
    export = known_log(tmp_path / "export", duplicate=False, row_group_size=row_group_size)
    ref = reference(spark, export, tmp_path / "ref", monkeypatch)
    a, result = run(spark, export, tmp_path / "out", fold_rows=1)
    assert a.commits_by == "partials"
    same_audit(spark, tmp_path / "out", result, tmp_path / "ref", ref)
    violations = {i["invariant"]: i["violations"] for i in result.invariants}
    assert violations["offsets_monotonic_within_generation"] == 1  # 100 -> 90 in generation 1
    assert violations["records_decode"] == 4


def test_commits_from_spark_batches_match_the_window(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an export elsewhere than a local disk is read by Spark, and its Arrow batches folded
    export = known_log(tmp_path / "export", duplicate=False)
    ref = reference(spark, export, tmp_path / "ref", monkeypatch)
    with monkeypatch.context():
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
        try:
            a, result = run(spark, export, tmp_path / "out", arrow_reads=False)
        finally:
            spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")
    assert a.commits_by == "partials"
    same_audit(spark, tmp_path / "out", result, tmp_path / "ref", ref)


def interleaved_history(out: Path) -> Path:
    """One partition's commits in the history with odd offsets first, two row groups: the
    stretches [1, 3, 5] and [2, 4, 6] overlap in log order."""
    b = LogBuilder()
    b.group("g", T + 1_000, 1, [member("m-1", None, ("t",), t=[0])], "m-1")
    for i, committed in enumerate([10, 20, 15, 30, 40, 35]):
        b.history.add(b.commit("g", "t", 0, committed, T + 2_000 + i))
    b.commit("g", "t", 0, 50, T + 3_000)
    odd_first = lambda r: (r["offset"] % 2 == 0, r["offset"])  # noqa: E731
    return b.write(out, row_group_size=3, history_order=odd_first)


@pytest.mark.parametrize("log", ["interleaved-history", "duplicate"])
def test_interleaved_batches_fall_back_to_the_window(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str
) -> None:
    # a history out of log order, or a commit held twice: a partition's batches interleave,
    # so their partials cannot be joined end to end
    if log == "duplicate":
        export = known_log(tmp_path / "export", row_group_size=2)
    else:
        export = interleaved_history(tmp_path / "export")
    ref = reference(spark, export, tmp_path / "ref", monkeypatch)
    a, result = run(spark, export, tmp_path / "out", fold_rows=1)
    assert a.commits_by == "window"
    same_audit(spark, tmp_path / "out", result, tmp_path / "ref", ref)


def test_batches_in_any_order_are_joined_in_log_order(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stretches that do not overlap are joined by their position, whatever order they come in
    b = LogBuilder()
    b.group("g", T + 1_000, 1, [member("m-1", None, ("t",), t=[0])], "m-1")
    for i, committed in enumerate([10, 20, 15, 30, 40, 35]):
        b.history.add(b.commit("g", "t", 0, committed, T + 2_000 + i))
    b.commit("g", "t", 0, 50, T + 3_000)
    export = b.write(tmp_path / "export", row_group_size=2, history_order=lambda r: -r["offset"])
    ref = reference(spark, export, tmp_path / "ref", monkeypatch)
    a, result = run(spark, export, tmp_path / "out", fold_rows=1)
    assert a.commits_by == "partials"
    same_audit(spark, tmp_path / "out", result, tmp_path / "ref", ref)
    (monotonic,) = [i for i in result.invariants if "monotonic" in i["invariant"]]
    assert monotonic["violations"] == 2  # 20 -> 15 and 40 -> 35, one of them across batches


def test_a_group_in_two_log_partitions_is_sequenced_by_window(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    b = LogBuilder()
    b.group("g", T + 1_000, 1, [member("m-1", None, ("t",), t=[0])], "m-1")
    b.commit("g", "t", 0, 10, T + 2_000)
    b.partition = 1
    b.group("g", T + 3_000, 2, [member("m-1", None, ("t",), t=[0])], "m-1")
    b.commit("g", "t", 0, 20, T + 4_000)
    export = b.write(tmp_path / "export", row_group_size=1)
    ref = reference(spark, export, tmp_path / "ref", monkeypatch)
    a, result = run(spark, export, tmp_path / "out", fold_rows=1)
    assert a.commits_by == "window"
    same_audit(spark, tmp_path / "out", result, tmp_path / "ref", ref)


def test_offsets_too_spread_for_bitmaps_group_every_position(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = known_log(tmp_path / "export")  # one commit in log and history
    ref = reference(spark, export, tmp_path / "ref", monkeypatch)
    _, result = run(spark, export, tmp_path / "out", max_bitmaps=0)
    same_audit(spark, tmp_path / "out", result, tmp_path / "ref", ref)
    (dup,) = [i for i in result.invariants if i["invariant"] == "unique_log_positions"]
    assert dup["violations"] == 1
