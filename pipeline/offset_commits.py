"""The driver's side of the offset commits (the workers' is pipeline/commits.py): per partition
the activity (commit_activity), the count checked for monotonic offsets and the rare rows an
invariant reports (violations, records that do not decode).

The commits are never cached: one pass folds each batch's stretch of every partition into a
partial row, the partials are grouped by partition and joined in log order; the window over
every commit (`commits_by_window`) runs when they cannot be joined (a partition's stretches
interleave), and only the flagged rows are sequenced again when the counts say there are some.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import pyarrow.compute as pc

from app.group.records import RecordType
from pipeline import written
from pipeline.commits import (
    ACTIVITY_SCHEMA,
    ANY_GENERATION,
    COMBINE_COUNTS_SCHEMA,
    COMBINED_SCHEMA,
    INTERVAL_SCHEMA,
    PARTIAL_SCHEMA,
    SOURCE_RESET,
    SOURCE_UPSTREAM,
    combine_partials,
    partial_batches,
    partial_row_groups,
    prepare_intervals,
)
from pipeline.decode import OFFSET_INPUT_COLUMNS, decode_offsets
from pipeline.group_pass import GroupPass
from pipeline.inputs import input_paths
from pipeline.output import AuditOutput, spark_schema
from pipeline.scan import row_group_tasks
from pipeline.spark import log

# group records whose intervals each commit task receives (about 50 bytes each): past this the
# commits are sequenced by the window, which broadcasts them the JVM's way
MAX_SHIPPED_INTERVALS = 1_000_000


@dataclass
class CommitReading:
    """How the commits are read and folded."""

    input_dir: str
    arrow_reads: bool  # the workers read a local export's row groups themselves
    fold_rows: int  # commits folded at once into partials
    merge_partials: bool  # a task's partials joined before all are joined


@dataclass
class CommitFigures:
    activity: Any  # commit_activity as written and read back
    checked: int  # commits checked for monotonic offsets
    # the commits an invariant reports (that do not decode, that go backwards), if any
    flagged: tuple[Any, Any] | None
    by: str  # "partials" or "window": how the commits were sequenced


def commits(
    output: AuditOutput, recs: Any, groups: GroupPass, reading: CommitReading
) -> CommitFigures:
    """The commits' figures from partials folded per batch; by the window when they cannot
    be joined. commit_activity is written by the joining tasks themselves to a local OUT."""
    from pyspark.sql import functions as F

    if (
        groups.rows_bound > MAX_SHIPPED_INTERVALS
        and groups.rows("intervals").count() > MAX_SHIPPED_INTERVALS
    ):
        log(f"  more than {MAX_SHIPPED_INTERVALS:,} group records to ship: commits by window")
        return commits_by_window(output, recs, groups, reading)
    table = groups.rows("intervals").toArrow().cast(INTERVAL_SCHEMA)
    spread = table.group_by("m_group").aggregate([("m_part", "count_distinct")])
    if (pc.max(spread["m_part_count_distinct"]).as_py() or 0) > 1:
        log("  a group's records in several log partitions: commits by window")
        return commits_by_window(output, recs, groups, reading)
    shipped = prepare_intervals(table)
    schema = spark_schema(PARTIAL_SCHEMA)
    spark = output.spark
    if reading.arrow_reads:
        # the workers read the row groups themselves (pipeline/commits.py)
        tasks = spark.createDataFrame(row_group_tasks(input_paths(reading.input_dir)))
        fold = partial(
            partial_row_groups,
            intervals=shipped,
            record_type=RecordType.OFFSET_COMMIT.value,
            fold_rows=reading.fold_rows,
            merge=reading.merge_partials,
        )
        partials = tasks.mapInArrow(fold, schema)
    else:
        raw = recs.filter(F.col("record_type") == RecordType.OFFSET_COMMIT.value).select(
            *OFFSET_INPUT_COLUMNS
        )
        partials = raw.mapInArrow(
            partial(partial_batches, intervals=shipped, merge=reading.merge_partials), schema
        )
    # each partition's partials, whichever tasks folded them, joined by one Python call (a
    # window and an aggregate in the JVM cost more)
    by_partition = partials.repartition(
        spark.sparkContext.defaultParallelism, "group_id", "topic", "partition"
    )
    if output.worker_writes:  # each task writes its rows of commit_activity, returns counts
        written.prepare(output.tables_dir, ["commit_activity"])
        combine = partial(combine_partials, tables_dir=output.tables_dir)
        per_task = by_partition.mapInArrow(combine, spark_schema(COMBINE_COUNTS_SCHEMA))
        sums = per_task.toArrow()
        counts = [int(pc.sum(sums[c]).as_py() or 0) for c in COMBINE_COUNTS_SCHEMA.names]
    else:
        partitions = output.persist(
            by_partition.mapInArrow(combine_partials, spark_schema(COMBINED_SCHEMA))
        )
        totals = partitions.agg(F.sum("_flagged"), F.sum("_checked"), F.sum("_interleaved"))
        counts = [int(c or 0) for c in totals.first()]
    if counts[2]:
        log(f"  {counts[2]:,} partitions' commits interleave across batches: by window")
        if not output.worker_writes:
            partitions.unpersist()
        return commits_by_window(output, recs, groups, reading)
    keys = ["group_id", "topic", "partition"]
    flagged = None
    if counts[0]:  # the plan of the decoded, sequenced commits: only when it is read
        flagged = keep_flagged(output, commit_sequences(decoded_commits(recs, groups), keys))
    if output.worker_writes:
        activity = output.written_table("commit_activity", spark_schema(ACTIVITY_SCHEMA))
    else:
        activity = write_activity(output, partitions.drop("_interleaved"))
    return CommitFigures(activity, counts[1], flagged, "partials")


def decoded_commits(recs: Any, groups: GroupPass) -> Any:
    """Every offset commit decoded, with the generation as of the log: the group's latest
    metadata record before it. Metadata records are few: each one's interval is broadcast
    and joined on the group, so the commits are not sorted for this."""
    from pyspark.sql import functions as F

    off = (
        decode_offsets(
            recs.filter(F.col("record_type") == RecordType.OFFSET_COMMIT.value).select(
                *OFFSET_INPUT_COLUMNS
            ),
            columns=[
                "log_partition",
                "log_offset",
                "group_id",
                "topic",
                "partition",
                "tombstone",
                "committed_offset",
                "commit_timestamp_ms",
                "source",
                "key_ok",
                "value_ok",
            ],
        )
        .withColumn("ok", F.col("key_ok") & F.col("value_ok"))
        .select(
            "group_id",
            "topic",
            "partition",
            "log_partition",
            "log_offset",
            "tombstone",
            "committed_offset",
            "commit_timestamp_ms",
            "source",
            "ok",
        )
    )
    # each group record's stretch of the log (the group pass's): the commits in it belong to
    # its generation (a tombstone's: generation -1, the next incarnation)
    intervals = groups.rows("intervals")
    during = (
        (F.col("group_id") == F.col("m_group"))
        & (F.col("log_partition") == F.col("m_part"))
        & (F.col("log_offset") > F.col("m_from"))
        & (F.col("m_to").isNull() | (F.col("log_offset") < F.col("m_to")))
    )
    return (
        off.join(F.broadcast(intervals), during, "left")
        .withColumn("generation", F.coalesce("m_gen", F.lit(-1)))
        .withColumn("incarnation", F.coalesce("m_inc", F.lit(0)))
        .drop("m_group", "m_part", "m_from", "m_to", "m_gen", "m_inc")
    )


def commits_by_window(
    output: AuditOutput, recs: Any, groups: GroupPass, reading: CommitReading
) -> CommitFigures:
    """The commits' figures from a window over every commit, partitioned by partition.

    Records that do not decode (`ok` false) never stand next to a good one: they sort first
    and a row only looks back at a row with the same `ok`. The window is partitioned by a
    64-bit hash of the partition's name alone, so the sort of all commits compares fixed-width
    keys only (the names, equal within a partition, were read in full on every tie); the
    aggregate below groups by hash and name on the same shuffle. Two partitions sharing a hash
    would share one window: the aggregate finds them (two names under one hash), and then the
    sequences are computed again with the names in the window's keys."""
    from pyspark.sql import functions as F

    decoded = decoded_commits(recs, groups)
    decoded = decoded.withColumn("_h", _partition_hash("group_id", "topic", "partition"))
    keys = ["_h", "group_id", "topic", "partition"]

    def per_partition(window_keys: list[str]) -> Any:
        seq = commit_sequences(decoded, window_keys)
        return output.persist(seq.groupBy(*keys).agg(*_commit_aggregates()))

    window_keys = ["_h"]
    partitions = per_partition(window_keys)
    # the rows an invariant reports: none in a healthy log, so the commits are only read
    # again (and filtered in the JVM) when the counts say there are some
    counts = partitions.agg(
        F.sum("_flagged"), F.sum("_checked"), F.count("*") - F.count_distinct("_h")
    ).first()
    if counts[2]:
        log(f"  {counts[2]:,} commit partitions share a hash: sequenced by name")
        partitions.unpersist()
        window_keys = keys
        partitions = per_partition(window_keys)
        counts = partitions.agg(F.sum("_flagged"), F.sum("_checked")).first()
    flagged = None
    if counts[0]:
        flagged = keep_flagged(output, commit_sequences(decoded, window_keys))
    activity = write_activity(output, partitions.drop("_h"))
    return CommitFigures(activity, int(counts[1] or 0), flagged, "window")


def keep_flagged(output: AuditOutput, sequenced: Any) -> tuple[Any, Any]:
    """The rows an invariant reports, from the sequenced commits (those that do not decode,
    those that go backwards): read again only when the counts found some (none in a healthy
    log, where the invariants do without)."""
    from pyspark.sql import functions as F

    # cached and computed now: the invariants and the per-group summary read them at once
    flagged_rows = output.persist(sequenced.filter(_flagged()), materialize=True)
    return flagged_rows.filter(~F.col("ok")), flagged_rows.filter(F.col("violation"))


def commit_sequences(decoded: Any, window_keys: list[str]) -> Any:
    """Each commit with the one before it in its partition's log order (window partitioned
    by `window_keys`): the delta, regressions and violations."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    tp = Window.partitionBy(*window_keys).orderBy("ok", "log_partition", "log_offset")
    prev_ok = (F.lag("ok").over(tp) == F.col("ok")) & (F.lag("tombstone").over(tp) == F.lit(False))
    prev_off = F.lag("committed_offset").over(tp)
    both_live = prev_ok & ~F.col("tombstone")
    return (
        decoded.withColumn("prev_committed_offset", F.when(both_live, prev_off))
        .withColumn("prev_generation", F.when(both_live, F.lag("generation").over(tp)))
        .withColumn("prev_incarnation", F.when(both_live, F.lag("incarnation").over(tp)))
        .withColumn("delta", F.col("committed_offset") - F.col("prev_committed_offset"))
        .withColumn("regression", F.coalesce(F.col("delta") < 0, F.lit(False)))
        .withColumn(
            "violation",
            F.col("ok")
            & F.col("regression")
            & ~F.col("source").isin(*ANY_GENERATION)  # a reset or an import: any generation's
            & (F.col("generation") == F.col("prev_generation"))
            & (F.col("incarnation") == F.col("prev_incarnation")),
        )
    )


def write_activity(output: AuditOutput, per_partition: Any) -> Any:
    """commit_activity: the partitions with a decoded commit, as written and read back."""
    from pyspark.sql import functions as F

    activity = per_partition.filter(F.col("_decoded") > 0).drop("_decoded", "_checked", "_flagged")
    return output.write("commit_activity", activity)


def _partition_hash(*cols: str) -> Any:
    """The 64-bit hash of an offset commit's partition name the commits' window is keyed by."""
    from pyspark.sql import functions as F

    return F.xxhash64(*cols)


def _flagged() -> Any:
    """A commit an invariant reports: a violation, or a record that does not decode."""
    from pyspark.sql import functions as F

    return F.col("violation") | ~F.col("ok")


def _commit_aggregates() -> list[Any]:
    """Per partition: the activity (decoded records only), the count checked for monotonic
    offsets and the number of rows an invariant reports."""
    from pyspark.sql import functions as F

    ok = F.col("ok")

    def good(c: Any) -> Any:
        return F.when(ok, c)

    live = ~F.col("tombstone")
    order = F.when(ok & live, F.col("log_offset"))
    delta = F.col("delta")
    return [
        F.sum(good(live.cast("long"))).alias("commits"),
        F.sum(good((live & ~F.col("source").isin(*ANY_GENERATION)).cast("long"))).alias(
            "member_commits"
        ),
        F.sum(good((F.col("source") == SOURCE_RESET).cast("long"))).alias("resets"),
        F.sum(good((F.col("source") == SOURCE_UPSTREAM).cast("long"))).alias("imports"),
        F.sum(good(F.col("tombstone").cast("long"))).alias("tombstones"),
        F.min(good(F.col("commit_timestamp_ms"))).alias("first_commit_ms"),
        F.max(good(F.col("commit_timestamp_ms"))).alias("last_commit_ms"),
        F.min_by("committed_offset", order).alias("first_offset"),
        F.max_by("committed_offset", order).alias("last_offset"),
        F.min(good(F.col("committed_offset"))).alias("min_offset"),
        F.max(good(F.col("committed_offset"))).alias("max_offset"),
        F.coalesce(F.sum(F.when(ok & (delta > 0), delta)), F.lit(0)).alias("offset_advance"),
        F.coalesce(F.sum(F.when(ok & (delta < 0), -delta)), F.lit(0)).alias("offset_rewound"),
        F.sum(good(F.col("regression").cast("long"))).alias("regressions"),
        F.sum(good(F.col("violation").cast("long"))).alias("violations"),
        F.count_distinct(good(F.col("generation"))).alias("generations"),
        F.count(good(F.lit(1))).alias("_decoded"),
        F.count(F.when(ok & F.col("prev_committed_offset").isNotNull(), 1)).alias("_checked"),
        F.count(F.when(_flagged(), 1)).alias("_flagged"),
    ]
