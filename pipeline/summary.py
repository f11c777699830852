"""group_summary: one row per group with a generation or a committed offset.

Spark's version (`spark_group_summary`) is one aggregate over the union of seven tables:
planning it and compiling its twenty aggregates cost seconds at the end of every audit, for a
few thousand rows. A local OUT has every table it reads on disk (the tasks wrote them:
pipeline/written.py), so the driver reads their few columns and aggregates them in
milliseconds. The two are compared row for row and by schema (tests/pipeline/test_one_pass.py).
The rules are Spark's: a sum over no value is null (`coalesce`d to 0 where Spark's is), a
distinct count ignores nulls, a group is listed when it has a generation or a committed offset.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline import written
from pipeline.output import AuditOutput, spark_schema

_I32, _I64 = pa.int32(), pa.int64()

SUMMARY_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("rebalances", _I64),
        ("last_generation", _I32),
        ("incarnations", _I64),
        ("time_in_rebalance_ms", _I64),
        ("longest_rebalance_ms", _I64),
        ("partitions_moved", _I64),
        ("forced_rebalances", _I64),
        ("emptied", _I64),
        ("max_members", _I32),
        ("first_generation_ms", _I64),
        ("last_generation_ms", _I64),
        ("commits", _I64),
        ("committed_partitions", _I64),
        ("offset_advance", _I64),
        ("resets", _I64),
        ("imports", _I64),
        ("static_restarts_absorbed", _I64),
        ("leader_rejoins", _I64),
        ("fenced_member_ids", _I64),
        ("scale_ups", _I64),
        ("violations", _I64),
    ]
)

# what the summary reads of each generation and of each committed partition
GENERATION_COLUMNS = [
    "generation",
    "incarnation",
    "duration_ms",
    "partitions_moved",
    "forced",
    "empty",
    "members",
    "rebalance_ended_ms",
]
ACTIVITY_COLUMNS = ["commits", "offset_advance", "resets", "imports"]
# the tables whose rows are counted per group, as the summary's columns
COUNTED = {
    "static_restarts_absorbed": "static_replacements",
    "leader_rejoins": "skip_assignment_rejoins",
    "fenced_member_ids": "fenced_instances",
    "scale_ups": "scale_ups",
    "violations": "invariant_violations",  # those naming a group
}


def group_summary(read: Any) -> pa.Table:
    """`read(table, columns)`: that table's columns as a pa.Table -> SUMMARY_SCHEMA rows."""
    gens = read("generations", ["group_id", *GENERATION_COLUMNS])
    gens = gens.set_column(
        gens.schema.get_field_index("forced"), "forced", gens["forced"].cast(_I64)
    ).set_column(gens.schema.get_field_index("empty"), "empty", gens["empty"].cast(_I64))
    by_gen = gens.group_by("group_id", use_threads=False).aggregate(
        [
            ([], "count_all"),
            ("generation", "max"),
            ("incarnation", "count_distinct"),
            ("duration_ms", "sum"),
            ("duration_ms", "max"),
            ("partitions_moved", "sum"),
            ("forced", "sum"),
            ("empty", "sum"),
            ("members", "max"),
            ("rebalance_ended_ms", "min"),
            ("rebalance_ended_ms", "max"),
        ]
    )
    activity = read("commit_activity", ["group_id", *ACTIVITY_COLUMNS])
    by_commits = activity.group_by("group_id", use_threads=False).aggregate(
        [
            ([], "count_all"),
            ("commits", "sum"),
            ("offset_advance", "sum"),
            ("resets", "sum"),
            ("imports", "sum"),
        ]
    )
    counted = {}
    for column, table in COUNTED.items():
        rows = read(table, ["group_id"])
        rows = rows.filter(pc.is_valid(rows["group_id"]))
        counted[column] = rows.group_by("group_id", use_threads=False).aggregate(
            [([], "count_all")]
        )
    # every group with a generation or a committed offset, once
    groups = pa.concat_arrays(
        [
            by_gen["group_id"].combine_chunks().cast(pa.string()),
            by_commits["group_id"].combine_chunks().cast(pa.string()),
        ]
    ).unique()

    def at(table: pa.Table, column: str) -> pa.Array:
        """`column` of `table` (one row per group) for each of `groups` (null where absent)."""
        idx = pc.index_in(groups, value_set=table["group_id"].combine_chunks())
        return table[column].combine_chunks().take(idx)

    def zero(values: pa.Array) -> pa.Array:
        return values.fill_null(0)

    rebalances = zero(at(by_gen, "count_all"))
    has_gen = pc.greater(rebalances, 0)
    columns = {
        "group_id": groups,
        "rebalances": rebalances,
        "last_generation": at(by_gen, "generation_max"),
        "incarnations": pc.if_else(
            has_gen, at(by_gen, "incarnation_count_distinct"), pa.scalar(None, _I64)
        ),
        "time_in_rebalance_ms": zero(at(by_gen, "duration_ms_sum")),
        "longest_rebalance_ms": at(by_gen, "duration_ms_max"),
        "partitions_moved": zero(at(by_gen, "partitions_moved_sum")),
        "forced_rebalances": zero(at(by_gen, "forced_sum")),
        "emptied": at(by_gen, "empty_sum"),
        "max_members": at(by_gen, "members_max"),
        "first_generation_ms": at(by_gen, "rebalance_ended_ms_min"),
        "last_generation_ms": at(by_gen, "rebalance_ended_ms_max"),
        "commits": zero(at(by_commits, "commits_sum")),
        "committed_partitions": zero(at(by_commits, "count_all")),
        "offset_advance": at(by_commits, "offset_advance_sum"),
        "resets": zero(at(by_commits, "resets_sum")),
        "imports": zero(at(by_commits, "imports_sum")),
        **{column: zero(at(counted[column], "count_all")) for column in COUNTED},
    }
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type) for f in SUMMARY_SCHEMA], schema=SUMMARY_SCHEMA
    )


def write_local_group_summary(output: AuditOutput) -> None:
    """The per-group summary of a local OUT, from its tables as written: the same rows as
    `spark_group_summary`'s, without a Spark query."""
    written.write_table(output.tables_dir, "group_summary", group_summary(output.read))
    output.written_table("group_summary", spark_schema(SUMMARY_SCHEMA))


def spark_group_summary(output: AuditOutput, gens: Any, activity: Any, violations: Any) -> None:
    """The per-group summary in one aggregate over the union of the tables it counts from (a
    join per table took a job each). `violations`: the invariant_violations rows that name a
    group."""
    from pyspark.sql import functions as F

    def tagged(df: Any, tag: str, *cols: Any) -> Any:
        return df.select("group_id", F.lit(tag).alias("_from"), *cols)

    # the violations are not read back: the invariants write them beside this
    counted = {
        column: output.written[table]
        if column != "violations"
        else violations.filter(F.col("group_id").isNotNull())
        for column, table in COUNTED.items()
    }
    rows = tagged(gens, "generation", *GENERATION_COLUMNS).unionByName(
        tagged(activity, "commits", *ACTIVITY_COLUMNS), allowMissingColumns=True
    )
    for name, df in counted.items():
        rows = rows.unionByName(tagged(df, name), allowMissingColumns=True)

    def of(tag: str, c: str) -> Any:
        return F.when(F.col("_from") == tag, F.col(c))

    def rows_of(tag: str) -> Any:
        return F.count(F.when(F.col("_from") == tag, 1))

    has_gen, has_commits = rows_of("generation") > 0, rows_of("commits") > 0
    out = (
        rows.groupBy("group_id")
        .agg(
            rows_of("generation").alias("rebalances"),
            F.max(of("generation", "generation")).alias("last_generation"),
            # a set, not countDistinct: a distinct aggregate made Spark expand every row for a
            # second aggregation (two more jobs)
            F.when(has_gen, F.size(F.collect_set(of("generation", "incarnation"))))
            .cast("long")
            .alias("incarnations"),
            F.coalesce(F.sum(of("generation", "duration_ms")), F.lit(0)).alias(
                "time_in_rebalance_ms"
            ),
            F.max(of("generation", "duration_ms")).alias("longest_rebalance_ms"),
            F.coalesce(F.sum(of("generation", "partitions_moved")), F.lit(0)).alias(
                "partitions_moved"
            ),
            F.coalesce(F.sum(of("generation", "forced").cast("int")), F.lit(0)).alias(
                "forced_rebalances"
            ),
            F.sum(of("generation", "empty").cast("int")).alias("emptied"),
            F.max(of("generation", "members")).alias("max_members"),
            F.min(of("generation", "rebalance_ended_ms")).alias("first_generation_ms"),
            F.max(of("generation", "rebalance_ended_ms")).alias("last_generation_ms"),
            F.coalesce(F.sum(of("commits", "commits")), F.lit(0)).alias("commits"),
            rows_of("commits").alias("committed_partitions"),
            F.sum(of("commits", "offset_advance")).alias("offset_advance"),
            F.coalesce(F.sum(of("commits", "resets")), F.lit(0)).alias("resets"),
            F.coalesce(F.sum(of("commits", "imports")), F.lit(0)).alias("imports"),
            *(rows_of(name).alias(name) for name in counted),
            (has_gen | has_commits).alias("_listed"),
        )
        .filter("_listed")
        .drop("_listed")
    )
    output.write("group_summary", out)
