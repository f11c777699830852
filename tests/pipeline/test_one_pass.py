"""The audit reads a local export in the Python workers (pipeline/scan.py: counts, offset
bitmaps and the records other than commits in one pass; pipeline/commits.py: the commits
folded per batch into partials, grouped by partition and joined in log order) and has the
group pass's workers write its tables to a local OUT. Whatever the batches, its tables are
the ones of the reference path: Spark's own scan, the window over every commit and Spark's
writes of every table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipeline import offset_commits
from pipeline.audit import TABLES, Audit, AuditResult
from tests.pipeline.logs import LogBuilder, T, known_log, member


def run(spark: Any, export: Path, out: Path, **attrs: Any) -> tuple[Audit, AuditResult]:
    a = Audit(spark, str(export), str(out))
    for name, value in attrs.items():
        setattr(a, name, value)
    return a, a.run()


def tables(spark: Any, out: Path) -> dict[str, list[tuple[Any, ...]]]:
    found = {}
    for name in TABLES:
        df = spark.read.parquet(str(out / "tables" / name))
        found[name] = sorted((tuple(r) for r in df.collect()), key=repr)
        found[f"{name} schema"] = [(f.name, f.dataType.simpleString()) for f in df.schema]
    return found


Reference = tuple[AuditResult, dict[str, list[tuple[Any, ...]]]]
# a log's name and how to export it -> its reference
References = Callable[[str, Callable[[Path], Path]], Reference]


def reference(spark: Any, export: Path, out: Path) -> Reference:
    """Spark's scan, the window over every commit and Spark's writes: the result and every
    table."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(offset_commits, "commits", offset_commits.commits_by_window)
        a, result = run(spark, export, out, arrow_reads=False, worker_writes=False)
    assert a.commits_by == "window"
    return result, tables(spark, out)


@pytest.fixture(scope="module")
def references(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> References:
    """The reference of a log, audited once for the module (`write` exports it): how an export
    cuts and orders its row groups changes nothing in the reference's tables, and an audit
    costs seconds, mostly fixed."""
    made: dict[str, Reference] = {}

    def of(log: str, write: Callable[[Path], Path]) -> Reference:
        if log not in made:
            base = tmp_path_factory.mktemp("reference")
            made[log] = reference(spark, write(base / "export"), base / "out")
        return made[log]

    return of


def known(references: References, duplicate: bool) -> Reference:
    """The known log's reference, with its position held twice or not."""
    return references(f"known {duplicate}", lambda out: known_log(out, duplicate=duplicate))


def commits(references: References) -> Reference:
    """history_of_commits' reference."""
    return references("commits", history_of_commits)


def audit_like_reference(
    spark: Any,
    export: Path,
    tmp_path: Path,
    commits_by: str,
    ref: Reference | None = None,
    **attrs: Any,
) -> AuditResult:
    """Audit `export` with `attrs` set on the Audit: its commits sequenced by `commits_by`,
    every table and invariant the reference's (`ref`: the reference of the same log, else
    audited here)."""
    ref_result, ref_tables = ref or reference(spark, export, tmp_path / "ref")
    a, result = run(spark, export, tmp_path / "out", **attrs)
    assert a.commits_by == commits_by
    assert result.invariants == ref_result.invariants
    assert result.tables == ref_result.tables
    assert tables(spark, tmp_path / "out") == ref_tables
    return result


def violations(result: AuditResult) -> dict[str, int]:
    return {i["invariant"]: i["violations"] for i in result.invariants}


def history_of_commits(out: Path, row_group_size: int | None = None, order: Any = None) -> Path:
    """One partition's commits 10, 20, 15, 30, 40, 35 in the history (`order`: a sort key for
    its rows), 50 in the log: two regressions in one generation."""
    b = LogBuilder()
    b.group("g", T + 1_000, 1, [member("m-1", None, ("t",), t=[0])], "m-1")
    for i, committed in enumerate([10, 20, 15, 30, 40, 35]):
        b.history.add(b.commit("g", "t", 0, committed, T + 2_000 + i))
    b.commit("g", "t", 0, 50, T + 3_000)
    return b.write(out, row_group_size=row_group_size, history_order=order)


@pytest.mark.parametrize("row_group_size", [1, 3, None], ids=["rows", "threes", "one-group"])
def test_commits_folded_per_batch_match_the_window(
    spark: Any,
    tmp_path: Path,
    references: References,
    row_group_size: int | None,
) -> None:
    # every commit its own batch (fold_rows=1 with one-row groups): each step of a partition's
    # sequence, the known log's regressions and reset included, crosses a batch boundary
    export = known_log(tmp_path / "export", duplicate=False, row_group_size=row_group_size)
    ref = known(references, False)
    result = audit_like_reference(spark, export, tmp_path, "partials", ref, fold_rows=1)
    found = violations(result)
    assert found["offsets_monotonic_within_generation"] == 1  # 100 -> 90 in generation 1
    assert found["records_decode"] == 4


def test_partials_joined_by_the_jvm_alone_match_the_window(
    spark: Any, tmp_path: Path, references: References
) -> None:
    # a task's partials not joined in the worker first: the JVM joins every step
    export = known_log(tmp_path / "export", duplicate=False, row_group_size=1)
    ref = known(references, False)
    audit_like_reference(
        spark, export, tmp_path, "partials", ref, fold_rows=1, merge_partials=False
    )


def test_tables_written_by_spark_match_the_reference(
    spark: Any, tmp_path: Path, references: References
) -> None:
    # an OUT elsewhere than a local disk: the group pass's tables and the joined partials
    # are cached and written by Spark, not by the tasks that compute them
    export = known_log(tmp_path / "export", duplicate=False, row_group_size=3)
    ref = known(references, False)
    audit_like_reference(spark, export, tmp_path, "partials", ref, fold_rows=1, worker_writes=False)


def test_commits_from_spark_batches_match_the_window(
    spark: Any, tmp_path: Path, references: References
) -> None:
    # an export elsewhere than a local disk is read by Spark, and its Arrow batches folded
    export = known_log(tmp_path / "export", duplicate=False)
    ref = known(references, False)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        audit_like_reference(spark, export, tmp_path, "partials", ref, arrow_reads=False)
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100000")


@pytest.mark.parametrize("log", ["interleaved-history", "duplicate"])
def test_interleaved_batches_fall_back_to_the_window(
    spark: Any, tmp_path: Path, references: References, log: str
) -> None:
    # a history out of log order (odd offsets first, three rows a group: the stretches
    # [1, 3, 5] and [2, 4, 6] overlap), or a commit held twice: a partition's batches
    # interleave, so their partials cannot be joined end to end
    ref = None
    if log == "duplicate":
        export = known_log(tmp_path / "export", row_group_size=2)
        ref = known(references, True)
    else:
        odd_first = lambda r: (r["offset"] % 2 == 0, r["offset"])  # noqa: E731
        export = history_of_commits(tmp_path / "export", 3, odd_first)
        ref = commits(references)
    audit_like_reference(spark, export, tmp_path, "window", ref, fold_rows=1)


def test_batches_in_any_order_are_joined_in_log_order(
    spark: Any, tmp_path: Path, references: References
) -> None:
    # stretches that do not overlap are joined by their position, whatever order they come in
    export = history_of_commits(tmp_path / "export", 2, lambda r: -r["offset"])
    ref = commits(references)
    result = audit_like_reference(spark, export, tmp_path, "partials", ref, fold_rows=1)
    # 20 -> 15 and 40 -> 35, one of them across batches
    assert violations(result)["offsets_monotonic_within_generation"] == 2


def test_a_group_in_two_log_partitions_is_sequenced_by_window(spark: Any, tmp_path: Path) -> None:
    b = LogBuilder()
    b.group("g", T + 1_000, 1, [member("m-1", None, ("t",), t=[0])], "m-1")
    b.commit("g", "t", 0, 10, T + 2_000)
    b.partition = 1
    b.group("g", T + 3_000, 2, [member("m-1", None, ("t",), t=[0])], "m-1")
    b.commit("g", "t", 0, 20, T + 4_000)
    export = b.write(tmp_path / "export", row_group_size=1)
    audit_like_reference(spark, export, tmp_path, "window", fold_rows=1)


def test_offsets_too_spread_for_bitmaps_group_every_position(
    spark: Any, tmp_path: Path, references: References
) -> None:
    # one commit in the log and in the history: as two batches (fold_rows), by window
    export = known_log(tmp_path / "export")
    result = audit_like_reference(
        spark, export, tmp_path, "window", known(references, True), max_bitmaps=0, fold_rows=1
    )
    assert violations(result)["unique_log_positions"] == 1


def test_tables_written_by_the_workers_replace_any_earlier_audit(
    spark: Any, tmp_path: Path, references: References
) -> None:
    # an OUT that already holds an audit of another log, written by Spark (files of other
    # names): the group pass's workers leave only their own files in each table
    ref = known(references, False)
    earlier = history_of_commits(tmp_path / "earlier")
    run(spark, earlier, tmp_path / "out", worker_writes=False)
    export = known_log(tmp_path / "export", duplicate=False)
    a, result = run(spark, export, tmp_path / "out")
    assert a.worker_writes
    assert result.tables == ref[0].tables
    assert tables(spark, tmp_path / "out") == ref[1]
