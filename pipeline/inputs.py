"""The audit's input: an export's log + history, the one pass over every record of a local
export (pipeline/scan.py), the input_summary table and the records other than commits.

A local export is read by the Python workers, row group by row group; anywhere else by Spark's
scan. Either way the driver sees counts, never the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.group.records import RecordType
from pipeline import written
from pipeline.decode import INPUT_COLUMNS
from pipeline.output import AuditOutput, is_local_path, spark_schema
from pipeline.scan import (
    INPUT_SUMMARY_SCHEMA,
    RECORD,
    SCAN_SCHEMA,
    SUMMARY,
    input_summary,
    row_group_tasks,
    scan_row_groups,
)
from pipeline.spark import log
from storage.columns import LOG_COLUMN_NAMES

# each log partition's lowest and highest offset (None, None: no offset), which size the
# duplicate check
OffsetRanges = list[tuple[Any, Any]]


def input_paths(input_dir: str) -> dict[str, bool]:
    """The export's Parquet paths, each with whether it is the history."""
    base = input_dir.rstrip("/")
    paths = {}
    for name, in_history in (("log.parquet", False), ("history.parquet", True)):
        path = f"{base}/{name}"
        if is_local_path(path) and not Path(path.removeprefix("file://")).exists():
            if name == "log.parquet":
                raise FileNotFoundError(f"{path}: not a `coordinator export` directory")
            continue
        paths[path] = in_history
    return paths


def read_log(spark: Any, input_dir: str) -> Any:
    """log + history with `log_partition`, `log_offset` and `in_history`."""
    from pyspark.sql import functions as F

    frames = []
    for path, in_history in input_paths(input_dir).items():
        df = spark.read.parquet(path).select(*LOG_COLUMN_NAMES)
        frames.append(df.withColumn("in_history", F.lit(in_history)))
    recs = frames[0]
    for other in frames[1:]:
        recs = recs.unionByName(other)
    return recs.withColumnRenamed("partition", "log_partition").withColumnRenamed(
        "offset", "log_offset"
    )


@dataclass
class OnePass:
    """The one pass over every record of a local export, cached: `frame`'s rows are per row
    group counts and bitmaps, and the records other than commits; `counts` its SUMMARY rows,
    gathered; `other_records` how many records are not commits."""

    frame: Any
    counts: pa.Table
    other_records: int


@dataclass
class InputCounts:
    """What the input summary tells the later stages."""

    records: int  # every record read
    ranges: OffsetRanges


def scan_records(output: AuditOutput, input_dir: str, max_bitmaps: int) -> OnePass:
    """The one pass over every record (pipeline/scan.py), computed now and cached."""
    from pyspark.sql import functions as F

    spark = output.spark
    tasks = spark.createDataFrame(row_group_tasks(input_paths(input_dir)))
    scan = tasks.mapInArrow(
        partial(
            scan_row_groups,
            skip_type=RecordType.OFFSET_COMMIT.value,
            max_bitmaps=max_bitmaps,
        ),
        spark_schema(SCAN_SCHEMA),
    )
    scan = output.persist(scan)
    # computed now, in the job that gathers its counts (the input summary's)
    counts = (
        scan.filter(F.col("kind") == SUMMARY)
        .select(
            "record_type",
            "in_history",
            "log_partition",
            "records",
            "tombstones",
            "first_append_ms",
            "last_append_ms",
            "min_offset",
            "max_offset",
        )
        .toArrow()
    )
    # the RECORD rows: records with a type other than commits' (scan.record_rows)
    others = pc.and_(
        pc.is_valid(counts["record_type"]),
        pc.not_equal(counts["record_type"], RecordType.OFFSET_COMMIT.value),
    )
    return OnePass(scan, counts, int(pc.sum(counts.filter(others)["records"]).as_py() or 0))


def write_input_summary(output: AuditOutput, recs: Any, scan: OnePass | None) -> InputCounts:
    """The input_summary table: of the one pass's counts, or of every record Spark read."""
    if scan is not None:
        rows, ranges = scanned_summary(output, scan)
    else:
        df, ranges = spark_input_summary(output, recs)
        summary = output.write("input_summary", df)
        # a local table's few rows are read from its file, where Spark would run a job
        rows = output.read("input_summary", ["record_type", "records"])
        if rows is None:
            rows = summary.select("record_type", "records").toArrow()
    input_rows = int(pc.sum(rows["records"]).as_py() or 0)
    not_commits = pc.not_equal(rows["record_type"], RecordType.OFFSET_COMMIT.value)
    other_rows = int(pc.sum(rows.filter(not_commits)["records"]).as_py() or 0)
    log(f"  {input_rows:,} records in log + history, {other_rows:,} of them not commits")
    return InputCounts(input_rows, ranges)


def scanned_summary(output: AuditOutput, scan: OnePass) -> tuple[pa.Table, OffsetRanges]:
    """input_summary from the one pass's counts (a few rows per row group), gathered and
    summed by the driver (Spark's jobs for these few rows cost more than the group pass
    beside them), written and returned with each log partition's offset range."""
    counts = scan.counts
    by_partition = counts.group_by("log_partition", use_threads=False).aggregate(
        [("min_offset", "min"), ("max_offset", "max")]
    )
    lo, hi = by_partition["min_offset_min"].to_pylist(), by_partition["max_offset_max"].to_pylist()
    ranges = list(zip(lo, hi, strict=True))
    kinds = {t.value: t.name.lower() for t in RecordType}
    table = input_summary(counts, kinds)
    if output.worker_writes:
        written.write_table(output.tables_dir, "input_summary", table)
        output.written_table("input_summary", spark_schema(INPUT_SUMMARY_SCHEMA))
    else:
        output.write("input_summary", output.spark.createDataFrame(table).coalesce(1))
    return table, ranges


def spark_input_summary(output: AuditOutput, recs: Any) -> tuple[Any, OffsetRanges]:
    """Counts per record type, file and log partition from one aggregate in the JVM over
    every record Spark read, with each log partition's offset range."""
    from pyspark.sql import functions as F

    keys = ["record_type", "in_history", "log_partition"]
    shape = recs.groupBy(*keys).agg(
        F.count("*").alias("records"),
        F.sum(F.col("value").isNull().cast("long")).alias("tombstones"),
        F.min("append_time_ms").alias("first_append_ms"),
        F.max("append_time_ms").alias("last_append_ms"),
        F.min("log_offset").alias("min_offset"),
        F.max("log_offset").alias("max_offset"),
    )
    shape = output.persist(shape)
    by_partition = (
        shape.groupBy("log_partition")
        .agg(F.min("min_offset").alias("lo"), F.max("max_offset").alias("hi"))
        .collect()
    )
    ranges = [(r["lo"], r["hi"]) for r in by_partition]
    kind = (
        F.when(F.col("record_type") == RecordType.GROUP_METADATA.value, "group_metadata")
        .when(F.col("record_type") == RecordType.OFFSET_COMMIT.value, "offset_commit")
        .when(F.col("record_type") == RecordType.TOPIC.value, "topic")
        .when(F.col("record_type") == RecordType.STATIC_REGISTRATION.value, "static_registration")
        .otherwise("unknown")
    )
    summary = (
        shape.groupBy("record_type", kind.alias("kind"), "in_history")
        .agg(
            F.sum("records").alias("records"),
            F.sum("tombstones").alias("tombstones"),
            F.min("first_append_ms").alias("first_append_ms"),
            F.max("last_append_ms").alias("last_append_ms"),
            F.countDistinct("log_partition").alias("log_partitions"),
        )
        .coalesce(1)
    )
    return summary, ranges


def other_records(output: AuditOutput, recs: Any, scan: OnePass | None) -> tuple[Any, int]:
    """Every record but the offset commits: the one pass's rows of them (already cached), or
    (`recs` read by Spark) read once and kept for the stages below; with their number."""
    from pyspark.sql import functions as F

    if scan is not None:
        others = scan.frame.filter(F.col("kind") == RECORD).select(*INPUT_COLUMNS, "record_type")
        return others, scan.other_records
    rest = recs.filter(F.col("record_type") != RecordType.OFFSET_COMMIT.value)
    others = output.persist(rest.select(*INPUT_COLUMNS, "record_type"))
    return others, others.count()
