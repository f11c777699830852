"""The driver's side of the group pass (the workers' is pipeline/groups.py): the group metadata
and static registration records grouped by group, each group decoded and audited by one Python
call; its tables written (by its workers to a local OUT) and the rebalance reasons from them."""

from __future__ import annotations

from functools import partial
from typing import Any

from pipeline import written
from pipeline.decode import INPUT_COLUMNS
from pipeline.group_tables import KEPT_SCHEMA, PASS_RECORD_TYPES, PASS_SCHEMA
from pipeline.group_tables import TABLES as GROUP_TABLES
from pipeline.groups import audit_group_batches, group_key
from pipeline.output import AuditOutput, spark_schema

# records other than commits per task of the group pass
GROUP_TASK_ROWS = 50_000


class GroupPass:
    """The group pass, cached: each of its outputs (pipeline/group_tables.py OUTPUTS) a struct
    column of its rows; `rows_bound` the number of rows of every output."""

    def __init__(self, frame: Any, rows_bound: int) -> None:
        self.frame = frame
        self.rows_bound = rows_bound

    def rows(self, name: str) -> Any:
        """One of the outputs as a table."""
        from pyspark.sql import functions as F

        return self.frame.filter(F.col(name).isNotNull()).select(f"{name}.*")


def run_group_pass(output: AuditOutput, others: Any, others_bound: int) -> GroupPass:
    """Every per-group table at once, computed now. `others`: the records other than commits,
    at least `others_bound` of them (the pass's size)."""
    from pyspark.sql import functions as F

    raw = others.filter(F.col("record_type").isin(*PASS_RECORD_TYPES))
    raw = raw.select(*INPUT_COLUMNS, "record_type", group_key().alias("_group"))
    # each group's records in one task, next to each other; a task per GROUP_TASK_ROWS
    # records (tens of thousands of group records are two tasks here, not eight)
    tasks = output.spark.sparkContext.defaultParallelism
    tasks = max(2, min(tasks, -(-others_bound // GROUP_TASK_ROWS)))
    by_group = raw.repartition(tasks, "_group").sortWithinPartitions("_group")
    if output.worker_writes:  # each task writes its rows of the tables (pipeline/groups.py)
        written.prepare(output.tables_dir, list(GROUP_TABLES))
        audit = partial(audit_group_batches, tables_dir=output.tables_dir)
        per_group = by_group.mapInArrow(audit, spark_schema(KEPT_SCHEMA))
    else:
        per_group = by_group.mapInArrow(audit_group_batches, spark_schema(PASS_SCHEMA))
    per_group = output.persist(per_group)
    return GroupPass(per_group, per_group.count())  # computed now: rows of every output


def write_group_tables(output: AuditOutput, groups: GroupPass) -> Any:
    """The group pass's tables (pipeline/group_tables.py TABLES), written by its workers or by
    Spark now; the generations, as read back."""
    for name, schema in GROUP_TABLES.items():
        if output.worker_writes:
            output.written_table(name, spark_schema(schema))
        else:
            output.write(name, groups.rows(name))
    return output.written["generations"]


def write_reasons(output: AuditOutput, gens: Any) -> None:
    """rebalance_reasons: per reason, its rebalances, groups and the median duration."""
    from pyspark.sql import functions as F

    output.write(
        "rebalance_reasons",
        gens.groupBy(F.coalesce("rebalance_reason", F.lit("(not recorded)")).alias("reason"))
        .agg(
            F.count("*").alias("rebalances"),
            # a set, not countDistinct: a distinct aggregate beside the median made Spark
            # expand every row
            F.size(F.collect_set("group_id")).cast("long").alias("groups"),
            F.sum("duration_ms").alias("total_duration_ms"),
            # the exact lower median (percentile_approx's moved with the partitioning); it
            # holds a reason's durations, 8 bytes a generation
            F.expr("percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms)")
            .cast("long")
            .alias("median_duration_ms"),
            F.sum("partitions_moved").alias("partitions_moved"),
            F.sum(F.col("empty").cast("int")).alias("emptied_group"),
        )
        .coalesce(1),
    )
