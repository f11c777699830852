"""The rebalance audit: `coordinator export` Parquet (log + history) -> audit tables.

Every table is written as Parquet under OUT/tables/<name>. The large inputs are only ever
read by Spark's tasks; the driver sees counts, the groups' metadata intervals, a handful of
example rows and, for a local OUT, the tables of a few rows per group or partition it sums
(input_summary, group_summary: pipeline/summary.py). To a local OUT the tasks that compute
the group pass's tables and commit_activity write them themselves (pipeline/written.py);
elsewhere Spark writes every table. Tables that later stages read are written first and read
back, which keeps each stage's plan short and is the natural checkpoint on a cluster.

How the log answers each question (app/group/records.py):
- A group's history is its GROUP_METADATA records in log order (one log partition per group).
  A tombstone deletes the group; a later record starts a new *incarnation* at generation 1.
- The first record of a generation is written when the leader's assignment is durable: the
  rebalance started at `rebalance_started_ms` (v1), for `rebalance_reason` (v1), and ended at
  the record's append time. Later records of the same generation persist static replacements
  (same generation, a new member id for a known group.instance.id: no rebalance). A rebalance
  that emptied the group writes a record without members.
- An OFFSET_COMMIT belongs to the generation of the group's latest metadata record before it
  in the log (commits are refused while a group completes a rebalance). Resets are commits
  with `source` = reset (OffsetValue v1).
- STATIC_REGISTRATION records open a pre-registered scale-up (expected instances), mark its
  expansion start, and close it (empty expected, `dropped` = who never came).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.group.records import RecordType
from pipeline import written
from pipeline.commits import (
    ACTIVITY_SCHEMA,
    COMBINE_COUNTS_SCHEMA,
    COMBINED_SCHEMA,
    FOLD_ROWS,
    INTERVAL_SCHEMA,
    PARTIAL_SCHEMA,
    combine_partials,
    partial_batches,
    partial_row_groups,
    prepare_intervals,
)
from pipeline.decode import INPUT_COLUMNS, OFFSET_INPUT_COLUMNS, decode_offsets
from pipeline.groups import (
    GROUP_INVARIANTS,
    KEPT_SCHEMA,
    PASS_RECORD_TYPES,
    PASS_SCHEMA,
    audit_group_batches,
    group_key,
)
from pipeline.groups import TABLES as GROUP_TABLES
from pipeline.scan import (
    BITMAP,
    INPUT_SUMMARY_SCHEMA,
    MAX_BITMAPS_PER_ROW_GROUP,
    RECORD,
    SCAN_SCHEMA,
    SUMMARY,
    input_summary,
    row_group_tasks,
    scan_row_groups,
)
from pipeline.spark import log, progress
from pipeline.summary import (
    ACTIVITY_COLUMNS,
    GENERATION_COLUMNS,
    SUMMARY_SCHEMA,
    group_summary,
)
from storage.columns import LOG_COLUMN_NAMES

SOURCE_RESET = 1
# records other than commits per task of the group pass
GROUP_TASK_ROWS = 50_000
INPUT_SUMMARY_STAGE = "input summary (every record in log + history)"
GROUP_STAGE = "group pass: records decoded and audited per group (members, generations, ...)"
# group records whose intervals each commit task receives (about 50 bytes each): past this the
# commits are sequenced by the window, which broadcasts them the JVM's way
MAX_SHIPPED_INTERVALS = 1_000_000
# bitmaps of 32768 offsets (4 KiB each) the duplicate check may build: 32 MiB, 2^28 offsets
BITMAP_BUCKETS = 1 << 13

# every table, in the order of the stages that write them
TABLES = (
    "input_summary",
    "group_records",
    "generations",
    "static_replacements",
    "skip_assignment_rejoins",
    "fenced_instances",
    "scale_ups",
    "forced_rebalances",
    "rebalance_reasons",
    "commit_activity",
    "invariant_violations",
    "invariants",
    "group_summary",
)

INVARIANTS: dict[str, str] = {
    "generation_never_decreases": "a group's generation never decreases in log order "
    "(per incarnation: a deleted and re-created group starts again)",
    "partition_single_owner": "no partition is owned by two members (group.instance.id, else "
    "member id) in one generation",
    "assignment_within_subscription": "every member's assignment covers only topics it "
    "subscribed to (consumer protocol)",
    "offsets_monotonic_within_generation": "no committed offset goes backwards within one "
    "generation, unless it is a reset (OffsetValue source=reset: admin API)",
    "leader_is_member": "a group record with members names one of them as leader",
    "records_decode": "every record's key and value decode (group, offset, registration, "
    "consumer-protocol bytes; known record types)",
    "unique_log_positions": "each (partition, offset) appears once in log + history",
}


@dataclass
class AuditResult:
    input_dir: str
    out: Path
    input_rows: int
    seconds: float
    tables: dict[str, int] = field(default_factory=dict)
    invariants: list[dict[str, Any]] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return sum(int(i["violations"]) for i in self.invariants)


def _spark_schema(arrow_schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def _is_local_path(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def input_paths(input_dir: str) -> dict[str, bool]:
    """The export's Parquet paths, each with whether it is the history."""
    base = input_dir.rstrip("/")
    paths = {}
    for name, in_history in (("log.parquet", False), ("history.parquet", True)):
        path = f"{base}/{name}"
        if _is_local_path(path) and not Path(path.removeprefix("file://")).exists():
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


class Audit:
    """One audit run: input -> OUT/tables/*. `run()` executes every stage in order."""

    def __init__(self, spark: Any, input_dir: str, out_dir: str, examples: int = 5) -> None:
        self.spark = spark
        self.input_dir = input_dir
        self.out = out_dir.rstrip("/")
        self.examples = examples
        self.tables: dict[str, int] = {}
        self._persisted: list[Any] = []
        self._beside_stages: list[Future[Any]] = []
        self._written: dict[str, Any] = {}  # each table written, as read back
        # a local export is read by the Python workers, row group by row group (pipeline/
        # scan.py); anywhere else by Spark's scan
        self.arrow_reads = _is_local_path(input_dir)
        # a local OUT gets the group pass's tables from the workers that compute them
        self.worker_writes = _is_local_path(out_dir)
        self.fold_rows = FOLD_ROWS  # commits folded at once into partials
        self.merge_partials = True  # a task's partials joined before all are joined
        self.max_bitmaps = MAX_BITMAPS_PER_ROW_GROUP  # offset bitmaps a row group may emit
        self.commits_by = ""  # "partials" or "window": how the commits were sequenced
        # the commits an invariant reports (that do not decode, that go backwards), if any
        self._flagged_commits: tuple[Any, Any] | None = None
        self._scan: Any = None

    # ---- plumbing ---------------------------------------------------------------------------

    def path(self, name: str) -> str:
        return f"{self.out}/tables/{name}"

    @property
    def tables_dir(self) -> str:
        """OUT/tables as a local path, where the tasks write tables (`worker_writes`)."""
        return self.path("").removeprefix("file://").rstrip("/")

    def write(self, name: str, df: Any) -> Any:
        """Write a table, read it back (lineage cut), log its row count."""
        df.write.mode("overwrite").parquet(self.path(name))
        return self._written_table(name, df.schema)

    def _written_table(self, name: str, schema: Any) -> Any:
        """A table just written, read back, its rows counted and logged."""
        # with the schema just written: reading it from a file footer is a Spark job
        back = self.spark.read.schema(schema).parquet(self.path(name))
        self._written[name] = back
        rows = _parquet_rows(self.path(name))
        if rows is None:  # not a local directory: ask Spark
            rows = int(back.count())
        self.tables[name] = rows
        log(f"  table {name}: {rows:,} rows")
        return back

    def persist(self, df: Any, materialize: bool = False) -> Any:
        """Cache `df`; `materialize` computes it now, in one job, so that the branches of a
        later plan (a union, a self-join) read the cache instead of each computing it at once."""
        from pyspark.storagelevel import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        if materialize:
            df.count()
        return df

    def beside(self, stage: str, work: Callable[[], Any]) -> Future[Any]:
        """Run `work`, a stage the next ones do not read, from another driver thread while they
        run: its jobs go to a scheduler pool of its own (`spark.scheduler.mode` FAIR), so
        its tasks take the slots the next stages' small jobs leave idle (one task on two
        slots, the driver planning the next job) and a task slot is shared as soon as one
        frees. `.result()` waits for it and raises what it raised."""
        sc = self.spark.sparkContext

        def body() -> Any:
            sc.setLocalProperty("spark.scheduler.pool", f"beside: {stage}")
            try:
                with progress(self.spark, stage):
                    return work()
            finally:
                sc.setLocalProperty("spark.scheduler.pool", None)

        threads = ThreadPoolExecutor(1, thread_name_prefix="audit-beside")
        try:
            future = threads.submit(body)
        finally:
            threads.shutdown(wait=False)
        self._beside_stages.append(future)
        return future

    def release(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()

    # ---- stages -----------------------------------------------------------------------------

    def run(self) -> AuditResult:
        t0 = time.monotonic()
        try:
            recs = read_log(self.spark, self.input_dir)
            if self.arrow_reads:
                with progress(self.spark, "one pass over every record (counts, offsets seen)"):
                    self._scan = self._scan_records()
            # the input summary (a JVM aggregate: of the one pass's counts, or of every record)
            # runs beside the group pass, which only the invariants' counts wait for
            input_summary = self.beside(
                INPUT_SUMMARY_STAGE, lambda: self._write_input_summary(recs)
            )
            with progress(
                self.spark, GROUP_STAGE if self.arrow_reads else f"reading + {GROUP_STAGE}"
            ):
                self._others = self._other_records(recs)
                self._groups = self._group_pass()
            # The commits (a pass over every commit, both slots busy) and the duplicate check
            # run beside the writes of the group pass's tables, whose small jobs leave a slot
            # idle most of the time; only the invariants and the per-group summary read them
            commits = self.beside(
                "offset commits (generation as of the log, movement)",
                lambda: self._commits(recs),
            )

            def positions_seen() -> Any:
                input_summary.result()  # the offset ranges, which size the bitmaps
                return self._positions(recs)

            positions = self.beside("duplicate log positions: offset bitmaps", positions_seen)
            with progress(self.spark, "group records, generations, static identity, scale-ups"):
                gens = self._group_tables()
            with progress(self.spark, "rebalance reasons"):
                self._reasons(gens)
            activity = commits.result()
            # Spark's per-group summary reads no table of the invariants'; a local OUT's is
            # computed from the tables written, the invariants' violations among them
            summary = None
            if not self.worker_writes:
                summary = self.beside(
                    "per-group summary", lambda: self._group_summary(gens, activity)
                )
            input_rows = input_summary.result()
            with progress(self.spark, "invariants"):
                invariants = self._invariants(positions.result())
            if summary is None:
                with progress(self.spark, "per-group summary"):
                    self._local_group_summary()
            else:
                summary.result()
        except BaseException:
            if not all(f.done() for f in self._beside_stages):
                self.spark.sparkContext.cancelAllJobs()  # a stage beside this one: stop it
            raise
        finally:
            wait(self._beside_stages)
            self.release()
        result = AuditResult(
            self.input_dir,
            Path(self.out),
            input_rows,
            time.monotonic() - t0,
            # in the order of the stages, whichever thread wrote them first
            {name: self.tables[name] for name in (*TABLES, *self.tables) if name in self.tables},
            invariants,
        )
        if _is_local_path(self.out):
            Path(self.out, "summary.json").write_text(
                json.dumps(
                    {
                        "input": self.input_dir,
                        "input_rows": input_rows,
                        "seconds": round(result.seconds, 3),
                        "tables": result.tables,
                        "invariants": invariants,
                    },
                    indent=2,
                )
                + "\n"
            )
        return result

    def _write_input_summary(self, recs: Any) -> int:
        """The input_summary table; the number of records read."""
        if self._scan is not None:
            rows = self._scanned_summary()
        else:
            summary = self.write("input_summary", self._input_summary(recs))
            # a local table's few rows are read from its file, where Spark would run a job
            rows = _parquet_table(self.path("input_summary"), ["record_type", "records"])
            if rows is None:
                rows = summary.select("record_type", "records").toArrow()
        input_rows = int(pc.sum(rows["records"]).as_py() or 0)
        self._other_rows = int(
            pc.sum(
                rows.filter(pc.not_equal(rows["record_type"], RecordType.OFFSET_COMMIT.value))[
                    "records"
                ]
            ).as_py()
            or 0
        )
        log(f"  {input_rows:,} records in log + history, {self._other_rows:,} of them not commits")
        self._input_rows = input_rows
        return input_rows

    def _scan_records(self) -> Any:
        """The one pass over every record (pipeline/scan.py), computed now and cached: its
        rows are per row group counts and bitmaps, and the records other than commits."""
        from pyspark.sql import functions as F

        tasks = self.spark.createDataFrame(row_group_tasks(input_paths(self.input_dir)))
        scan = tasks.mapInArrow(
            partial(
                scan_row_groups,
                skip_type=RecordType.OFFSET_COMMIT.value,
                max_bitmaps=self.max_bitmaps,
            ),
            _spark_schema(SCAN_SCHEMA),
        )
        scan = self.persist(scan)
        # computed now, in the job that gathers its counts (the input summary's)
        self._scan_counts = (
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
        counts = self._scan_counts
        others = pc.and_(
            pc.is_valid(counts["record_type"]),
            pc.not_equal(counts["record_type"], RecordType.OFFSET_COMMIT.value),
        )
        self._scan_records_out = int(pc.sum(counts.filter(others)["records"]).as_py() or 0)
        return scan

    def _scanned_summary(self) -> pa.Table:
        """input_summary from the one pass's counts (a few rows per row group), gathered and
        summed by the driver (pipeline/scan.py: four Spark jobs for 2,000 rows took 1.5-2
        task-seconds beside the group pass), written and returned; it also keeps each log
        partition's offset range, which sizes the duplicate check (`_positions`)."""
        counts = self._scan_counts
        ranges = counts.group_by("log_partition", use_threads=False).aggregate(
            [("min_offset", "min"), ("max_offset", "max")]
        )
        lo, hi = ranges["min_offset_min"].to_pylist(), ranges["max_offset_max"].to_pylist()
        self._ranges = list(zip(lo, hi, strict=True))
        kinds = {t.value: t.name.lower() for t in RecordType}
        table = input_summary(counts, kinds)
        if self.worker_writes:
            written.write_table(self.tables_dir, "input_summary", table)
            self._written_table("input_summary", _spark_schema(INPUT_SUMMARY_SCHEMA))
        else:
            self.write("input_summary", self.spark.createDataFrame(table).coalesce(1))
        return table

    def _input_summary(self, recs: Any) -> Any:
        """Counts per record type, file and log partition from one aggregate in the JVM over
        every record Spark read; it also keeps each log partition's offset range, which sizes
        the duplicate check (`_positions`)."""
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
        shape = self.persist(shape)
        ranges = (
            shape.groupBy("log_partition")
            .agg(F.min("min_offset").alias("lo"), F.max("max_offset").alias("hi"))
            .collect()
        )
        self._ranges = [(r["lo"], r["hi"]) for r in ranges]
        kind = (
            F.when(F.col("record_type") == RecordType.GROUP_METADATA.value, "group_metadata")
            .when(F.col("record_type") == RecordType.OFFSET_COMMIT.value, "offset_commit")
            .when(F.col("record_type") == RecordType.TOPIC.value, "topic")
            .when(
                F.col("record_type") == RecordType.STATIC_REGISTRATION.value, "static_registration"
            )
            .otherwise("unknown")
        )
        return (
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

    def _other_records(self, recs: Any) -> Any:
        """Every record but the offset commits: the one pass's rows of them (already cached),
        or (`recs` read by Spark) read once and kept for the stages below. Sets
        `_others_bound`, at least their number (the group pass's size)."""
        from pyspark.sql import functions as F

        if self._scan is not None:
            self._others_bound = self._scan_records_out
            return self._scan.filter(F.col("kind") == RECORD).select(*INPUT_COLUMNS, "record_type")
        rest = recs.filter(F.col("record_type") != RecordType.OFFSET_COMMIT.value)
        others = self.persist(rest.select(*INPUT_COLUMNS, "record_type"))
        self._others_bound = others.count()
        return others

    # ---- group metadata ---------------------------------------------------------------------

    def _group_pass(self) -> Any:
        """Every per-group table at once (pipeline/groups.py): the group metadata and static
        registration records grouped by group, each group decoded and audited by one Python
        call; cached, each table a struct column of its rows."""
        from pyspark.sql import functions as F

        raw = self._others.filter(F.col("record_type").isin(*PASS_RECORD_TYPES))
        raw = raw.select(*INPUT_COLUMNS, "record_type", group_key().alias("_group"))
        # each group's records in one task, next to each other; a task per GROUP_TASK_ROWS
        # records (tens of thousands of group records are two tasks here, not eight)
        tasks = self.spark.sparkContext.defaultParallelism
        tasks = max(2, min(tasks, -(-self._others_bound // GROUP_TASK_ROWS)))
        by_group = raw.repartition(tasks, "_group").sortWithinPartitions("_group")
        if self.worker_writes:  # each task writes its rows of the tables (pipeline/groups.py)
            written.prepare(self.tables_dir, list(GROUP_TABLES))
            audit = partial(audit_group_batches, tables_dir=self.tables_dir)
            per_group = by_group.mapInArrow(audit, _spark_schema(KEPT_SCHEMA))
        else:
            per_group = by_group.mapInArrow(audit_group_batches, _spark_schema(PASS_SCHEMA))
        per_group = self.persist(per_group)
        self._pass_rows_bound = per_group.count()  # computed now: rows of every output
        return per_group

    def _pass_rows(self, name: str) -> Any:
        """One of the group pass's outputs (pipeline/groups.py OUTPUTS) as a table."""
        from pyspark.sql import functions as F

        return self._groups.filter(F.col(name).isNotNull()).select(f"{name}.*")

    def _group_tables(self) -> Any:
        """The group pass's tables (pipeline/groups.py TABLES), written by its workers or by
        Spark now; the generations, as read back."""
        for name, schema in GROUP_TABLES.items():
            if self.worker_writes:
                self._written_table(name, _spark_schema(schema))
            else:
                self.write(name, self._pass_rows(name))
        return self._written["generations"]

    def _reasons(self, gens: Any) -> None:
        from pyspark.sql import functions as F

        self.write(
            "rebalance_reasons",
            gens.groupBy(F.coalesce("rebalance_reason", F.lit("(not recorded)")).alias("reason"))
            .agg(
                F.count("*").alias("rebalances"),
                # a set, not countDistinct: a distinct aggregate beside the median made Spark
                # expand every row (1.2 s of one task for 9k generations, against 0.2)
                F.size(F.collect_set("group_id")).cast("long").alias("groups"),
                F.sum("duration_ms").alias("total_duration_ms"),
                # the exact lower median (percentile_approx's moved with the partitioning: 16 ms
                # off at 10M); it holds a reason's durations, 8 bytes a generation
                F.expr("percentile_disc(0.5) WITHIN GROUP (ORDER BY duration_ms)")
                .cast("long")
                .alias("median_duration_ms"),
                F.sum("partitions_moved").alias("partitions_moved"),
                F.sum(F.col("empty").cast("int")).alias("emptied_group"),
            )
            .coalesce(1),
        )

    # ---- offset commits ------------------------------------------------------------------------

    def _commits(self, recs: Any) -> Any:
        """Offset commits: per partition the activity, the count checked for monotonic offsets
        and the rare rows an invariant reports (violations, records that do not decode). The
        10M commits are never cached: one pass folds each batch's stretch of every partition
        into a partial row (pipeline/commits.py), the partials are grouped by partition and
        joined in log order; the window over every commit (`_commits_by_window`) runs when
        they cannot be joined (a partition's stretches interleave), and only the flagged rows
        are sequenced again when the counts say there are some. Returns commit_activity as
        written (by the joining tasks themselves to a local OUT) and read back."""
        from pyspark.sql import functions as F

        if (
            self._pass_rows_bound > MAX_SHIPPED_INTERVALS
            and self._pass_rows("intervals").count() > MAX_SHIPPED_INTERVALS
        ):
            log(f"  more than {MAX_SHIPPED_INTERVALS:,} group records to ship: commits by window")
            return self._commits_by_window(recs)
        table = self._pass_rows("intervals").toArrow().cast(INTERVAL_SCHEMA)
        spread = table.group_by("m_group").aggregate([("m_part", "count_distinct")])
        if (pc.max(spread["m_part_count_distinct"]).as_py() or 0) > 1:
            log("  a group's records in several log partitions: commits by window")
            return self._commits_by_window(recs)
        shipped = prepare_intervals(table)
        schema = _spark_schema(PARTIAL_SCHEMA)
        if self.arrow_reads:
            # the workers read the row groups themselves (pipeline/commits.py)
            tasks = self.spark.createDataFrame(row_group_tasks(input_paths(self.input_dir)))
            fold = partial(
                partial_row_groups,
                intervals=shipped,
                record_type=RecordType.OFFSET_COMMIT.value,
                fold_rows=self.fold_rows,
                merge=self.merge_partials,
            )
            partials = tasks.mapInArrow(fold, schema)
        else:
            raw = recs.filter(F.col("record_type") == RecordType.OFFSET_COMMIT.value).select(
                *OFFSET_INPUT_COLUMNS
            )
            partials = raw.mapInArrow(
                partial(partial_batches, intervals=shipped, merge=self.merge_partials), schema
            )
        # each partition's partials, whichever tasks folded them, joined by one Python call
        # (a window and an aggregate in the JVM took 2.2 CPU-s for 105k partials at 10M)
        by_partition = partials.repartition(
            self.spark.sparkContext.defaultParallelism, "group_id", "topic", "partition"
        )
        if self.worker_writes:  # each task writes its rows of commit_activity, returns counts
            written.prepare(self.tables_dir, ["commit_activity"])
            combine = partial(combine_partials, tables_dir=self.tables_dir)
            per_task = by_partition.mapInArrow(combine, _spark_schema(COMBINE_COUNTS_SCHEMA))
            sums = per_task.toArrow()
            counts = [int(pc.sum(sums[c]).as_py() or 0) for c in COMBINE_COUNTS_SCHEMA.names]
        else:
            partitions = self.persist(
                by_partition.mapInArrow(combine_partials, _spark_schema(COMBINED_SCHEMA))
            )
            counts = partitions.agg(F.sum("_flagged"), F.sum("_checked"), F.sum("_interleaved"))
            counts = [int(c or 0) for c in counts.first()]
        if counts[2]:
            log(f"  {counts[2]:,} partitions' commits interleave across batches: by window")
            if not self.worker_writes:
                partitions.unpersist()
            return self._commits_by_window(recs)
        self.commits_by = "partials"
        self._commits_checked = counts[1]
        keys = ["group_id", "topic", "partition"]
        if counts[0]:  # the plan of the decoded, sequenced commits: only when it is read
            self._keep_flagged(self._commit_sequences(self._decoded_commits(recs), keys))
        if self.worker_writes:
            return self._written_table("commit_activity", _spark_schema(ACTIVITY_SCHEMA))
        return self._commit_activity(partitions.drop("_interleaved"))

    def _decoded_commits(self, recs: Any) -> Any:
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
        # each group record's stretch of the log (the group pass's): the commits in it
        # belong to its generation (a tombstone's: generation -1, the next incarnation)
        intervals = self._pass_rows("intervals")
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

    def _commits_by_window(self, recs: Any) -> Any:
        """The commits' figures from a window over every commit, partitioned by partition.

        Records that do not decode (`ok` false) never stand next to a good one: they sort
        first and a row only looks back at a row with the same `ok`. The window is partitioned
        by a 64-bit hash of the partition's name alone, so the sort of all commits compares
        fixed-width keys only (the names, equal within a partition, were read in full on every
        tie); the aggregate below groups by hash and name on the same shuffle. Two partitions
        sharing a hash would share one window: the aggregate finds them (two names under one
        hash), and then the sequences are computed again with the names in the window's keys."""
        from pyspark.sql import functions as F

        commits = self._decoded_commits(recs)
        commits = commits.withColumn("_h", _partition_hash("group_id", "topic", "partition"))
        keys = ["_h", "group_id", "topic", "partition"]

        def per_partition(window_keys: list[str]) -> Any:
            seq = self._commit_sequences(commits, window_keys)
            return self.persist(seq.groupBy(*keys).agg(*_commit_aggregates()))

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
        self.commits_by = "window"
        n_flagged = int(counts[0] or 0)
        self._commits_checked = int(counts[1] or 0)
        if n_flagged:
            self._keep_flagged(self._commit_sequences(commits, window_keys))
        return self._commit_activity(partitions.drop("_h"))

    def _keep_flagged(self, sequenced: Any) -> None:
        """The rows an invariant reports, from the sequenced commits: read again only when
        the counts found some (none in a healthy log, where the invariants do without)."""
        from pyspark.sql import functions as F

        # cached and computed now: the invariants and the per-group summary read them at once
        flagged_rows = self.persist(sequenced.filter(_flagged()), materialize=True)
        self._flagged_commits = (
            flagged_rows.filter(~F.col("ok")),
            flagged_rows.filter(F.col("violation")),
        )

    @staticmethod
    def _commit_sequences(commits: Any, window_keys: list[str]) -> Any:
        """Each commit with the one before it in its partition's log order (window
        partitioned by `window_keys`): the delta, regressions and violations."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        tp = Window.partitionBy(*window_keys).orderBy("ok", "log_partition", "log_offset")
        prev_ok = (F.lag("ok").over(tp) == F.col("ok")) & (
            F.lag("tombstone").over(tp) == F.lit(False)
        )
        prev_off = F.lag("committed_offset").over(tp)
        both_live = prev_ok & ~F.col("tombstone")
        return (
            commits.withColumn("prev_committed_offset", F.when(both_live, prev_off))
            .withColumn("prev_generation", F.when(both_live, F.lag("generation").over(tp)))
            .withColumn("prev_incarnation", F.when(both_live, F.lag("incarnation").over(tp)))
            .withColumn("delta", F.col("committed_offset") - F.col("prev_committed_offset"))
            .withColumn("regression", F.coalesce(F.col("delta") < 0, F.lit(False)))
            .withColumn(
                "violation",
                F.col("ok")
                & F.col("regression")
                & (F.col("source") != SOURCE_RESET)
                & (F.col("generation") == F.col("prev_generation"))
                & (F.col("incarnation") == F.col("prev_incarnation")),
            )
        )

    def _commit_activity(self, per_partition: Any) -> Any:
        from pyspark.sql import functions as F

        activity = per_partition.filter(F.col("_decoded") > 0).drop(
            "_decoded", "_checked", "_flagged"
        )
        return self.write("commit_activity", activity)

    def _positions(self, recs: Any) -> Any:
        """The log positions to group for duplicates. One narrow aggregate keeps, per log
        partition and bucket of 32768 offsets, a bitmap of the offsets seen (Spark's `bitmap_*`
        functions, 4 KiB a bucket): a position held twice is in a bucket whose records outnumber
        its bits, and only such buckets' positions are grouped (none in a log without
        duplicates). When the offset ranges would need more than BITMAP_BUCKETS bitmaps, all
        positions are grouped."""
        from pyspark.sql import functions as F

        positions = recs.select("log_partition", "log_offset", "in_history")
        buckets = sum(
            2 + (hi >> 15) - (lo >> 15) if lo is not None else 1 for lo, hi in self._ranges
        )
        if buckets > BITMAP_BUCKETS:
            return positions
        keys = ["log_partition", "bucket"]
        bucketed = positions.withColumn("bucket", F.bitmap_bucket_number("log_offset"))
        if self._scan is not None:
            # each row group's bitmaps (pipeline/scan.py), ORed
            bitmaps = self._scan.filter(F.col("kind") == BITMAP)
            if not bitmaps.filter(F.col("bitmap").isNull()).isEmpty():
                return positions  # a row group's offsets too spread for bitmaps
            per_bucket = bitmaps.groupBy(*keys).agg(
                F.sum("records").alias("records"),
                F.bitmap_count(F.bitmap_or_agg("bitmap")).alias("distinct"),
            )
        else:
            per_bucket = bucketed.groupBy(*keys).agg(
                F.count("*").alias("records"),
                # a null offset sets no bit: its bucket (null) is doubtful
                F.bitmap_count(F.bitmap_construct_agg(F.bitmap_bit_position("log_offset"))).alias(
                    "distinct"
                ),
            )
        doubtful = per_bucket.filter(F.col("records") > F.col("distinct")).select(*keys).collect()
        if not doubtful:
            return positions.limit(0)
        d = self.spark.createDataFrame(
            pa.table(
                {
                    "d_partition": pa.array([r["log_partition"] for r in doubtful], pa.int32()),
                    "d_bucket": pa.array([r["bucket"] for r in doubtful], pa.int64()),
                }
            )
        )
        # null-safe: a null partition or offset is a bucket of its own
        on = F.col("log_partition").eqNullSafe(F.col("d_partition")) & F.col("bucket").eqNullSafe(
            F.col("d_bucket")
        )
        return bucketed.join(F.broadcast(d), on, "left_semi").drop("bucket")

    # ---- invariants ----------------------------------------------------------------------------

    def _group_violations(self) -> Any:
        """The invariant_violations rows that name a group: the group pass's (generation never
        decreases, one owner per partition and generation, assignments within subscriptions,
        the leader is a member, group and registration records decode) and the commits'
        (offsets never go backwards within a generation, offset commits decode)."""
        from pyspark.sql import functions as F

        found = self._pass_rows("violations")
        if self._flagged_commits is None:
            return found
        bad, backwards = self._flagged_commits
        offsets = backwards.select(
            F.lit("offsets_monotonic_within_generation").alias("invariant"),
            "group_id",
            F.col("generation").cast("int").alias("generation"),
            "log_partition",
            "log_offset",
            F.format_string(
                "%s-%d: offset %d after %d in generation %d",
                "topic",
                "partition",
                "committed_offset",
                "prev_committed_offset",
                "generation",
            ).alias("detail"),
        )
        bad_offsets = bad.select(
            F.lit("records_decode").alias("invariant"),
            "group_id",
            F.lit(None).cast("int").alias("generation"),
            "log_partition",
            "log_offset",
            F.lit("offset commit: key or value shorter than its layout").alias("detail"),
        )
        return found.unionByName(offsets).unionByName(bad_offsets)

    def _invariants(self, positions: Any) -> list[dict[str, Any]]:
        """`positions`: the log positions to group for duplicates (`_positions`). The
        invariants within one group come from the group pass (pipeline/groups.py)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        # the rows each checked: the group pass's counts, summed in one job
        sums = (
            self._pass_rows("checked")
            .agg(*(F.sum(name).alias(name) for name in GROUP_INVARIANTS))
            .first()
        )
        checked: dict[str, int] = {name: int(sums[name] or 0) for name in GROUP_INVARIANTS}
        # the violations naming a group: those of the group pass, the commits' (offsets that go
        # backwards, records that do not decode)
        found = [self._group_violations()]
        checked["offsets_monotonic_within_generation"] = self._commits_checked
        unknown = self._others.filter(
            ~F.col("record_type").isin(*(t.value for t in RecordType))
        ).select(
            F.lit("records_decode").alias("invariant"),
            F.lit(None).cast("string").alias("group_id"),
            F.lit(None).cast("int").alias("generation"),
            "log_partition",
            "log_offset",
            F.format_string("unknown record type %d", "record_type").alias("detail"),
        )
        checked["records_decode"] = self._input_rows
        found.append(unknown)

        # each log position once
        dup = positions.groupBy("log_partition", "log_offset").agg(
            F.count("*").alias("copies"),
            F.sum(F.col("in_history").cast("int")).alias("in_history"),
        )
        checked["unique_log_positions"] = self._input_rows
        found.append(
            dup.filter(F.col("copies") > 1).select(
                F.lit("unique_log_positions").alias("invariant"),
                F.lit(None).cast("string").alias("group_id"),
                F.lit(None).cast("int").alias("generation"),
                "log_partition",
                "log_offset",
                F.format_string("%d copies (%d in history)", "copies", "in_history").alias(
                    "detail"
                ),
            )
        )

        all_v = found[0]
        for df in found[1:]:
            all_v = all_v.unionByName(df)
        violations = self.write("invariant_violations", all_v)
        n_checked = {name: int(c) for name, c in checked.items()}
        first = Window.partitionBy("invariant").orderBy("log_partition", "log_offset")
        examples: dict[str, list[str]] = {}
        n_found: dict[str, int] = {}
        # a healthy log has no violations: nothing to look for (the count is the file footers')
        found_rows = (
            violations.withColumn("rn", F.row_number().over(first))
            .withColumn("n", F.count("*").over(Window.partitionBy("invariant")))
            .filter(F.col("rn") <= self.examples)
            .orderBy("invariant", "rn")
            .collect()
            if self.tables["invariant_violations"]
            else []
        )
        for r in found_rows:
            examples.setdefault(r["invariant"], []).append(_example(r))
            n_found[r["invariant"]] = int(r["n"])
        summary = []
        for name, description in INVARIANTS.items():
            n = n_found.get(name, 0)
            summary.append(
                {
                    "invariant": name,
                    "description": description,
                    "checked": n_checked[name],
                    "violations": n,
                    "ok": n == 0,
                    "examples": examples.get(name, []),
                }
            )
            status = "ok" if n == 0 else f"VIOLATED {n:,} times"
            log(f"  invariant {name}: {status} ({n_checked[name]:,} checked)")
        # from Arrow: the JVM reads the rows itself, where a list would start a Python worker
        table = pa.Table.from_pylist(summary, schema=_INVARIANT_SCHEMA)
        self.write("invariants", self.spark.createDataFrame(table).coalesce(1))
        return summary

    # ---- per group ---------------------------------------------------------------------------

    def _local_group_summary(self) -> None:
        """The per-group summary of a local OUT, from its tables as written (pipeline/
        summary.py): the same rows as `_group_summary`'s, without a Spark query."""
        table = group_summary(lambda name, columns: _parquet_table(self.path(name), columns))
        written.write_table(self.tables_dir, "group_summary", table)
        self._written_table("group_summary", _spark_schema(SUMMARY_SCHEMA))

    def _group_summary(self, gens: Any, activity: Any) -> None:
        """One row per group with a generation or a committed offset: one aggregate over
        the union of the tables it counts from (a join per table took a job each)."""
        from pyspark.sql import functions as F

        def t(name: str) -> Any:
            return self._written[name]

        def tagged(df: Any, tag: str, *cols: Any) -> Any:
            return df.select("group_id", F.lit(tag).alias("_from"), *cols)

        counted = {
            "static_restarts_absorbed": t("static_replacements"),
            "leader_rejoins": t("skip_assignment_rejoins"),
            "fenced_member_ids": t("fenced_instances"),
            "scale_ups": t("scale_ups"),
            "violations": self._group_violations().filter(F.col("group_id").isNotNull()),
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
                # a set, not countDistinct: a distinct aggregate made Spark expand every row
                # for a second aggregation (two more jobs)
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
                *(rows_of(name).alias(name) for name in counted),
                (has_gen | has_commits).alias("_listed"),
            )
            .filter("_listed")
            .drop("_listed")
        )
        self.write("group_summary", out)


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
        F.sum(good((live & (F.col("source") != SOURCE_RESET)).cast("long"))).alias(
            "member_commits"
        ),
        F.sum(good((F.col("source") == SOURCE_RESET).cast("long"))).alias("resets"),
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


_INVARIANT_SCHEMA = pa.schema(
    [
        ("invariant", pa.string()),
        ("description", pa.string()),
        ("checked", pa.int64()),
        ("violations", pa.int64()),
        ("ok", pa.bool_()),
        ("examples", pa.list_(pa.string())),
    ]
)


def _parquet_files(path: str) -> list[Path] | None:
    """The files of a Parquet directory written by Spark (None: not a local directory)."""
    if not _is_local_path(path):
        return None
    return sorted(Path(path.removeprefix("file://")).glob("*.parquet"))


def _parquet_table(path: str, columns: list[str]) -> pa.Table | None:
    """The `columns` of a small Parquet directory written by Spark, read without Spark (None:
    not a local directory)."""
    import pyarrow.parquet as pq

    files = _parquet_files(path)
    if not files:
        return None
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files])


def _parquet_rows(path: str) -> int | None:
    """Rows of a Parquet directory written by Spark, from the footers alone (no Spark job)."""
    import pyarrow.parquet as pq

    files = _parquet_files(path)
    if files is None:
        return None
    return sum(int(pq.ParquetFile(f).metadata.num_rows) for f in files)


def _example(r: Any) -> str:
    where = f"p{r['log_partition']}@{r['log_offset']}"
    group = f"group {r['group_id']}" if r["group_id"] is not None else "log"
    gen = f" gen {r['generation']}" if r["generation"] is not None else ""
    return f"{group}{gen} ({where}): {r['detail']}"


def run_audit(
    spark: Any, input_dir: str, out_dir: str, examples: int = 5, report: bool = True
) -> AuditResult:
    """The whole audit: tables, then (by default) report.md and the plots."""
    result = Audit(spark, input_dir, out_dir, examples).run()
    if report:
        from pipeline.report import write_report

        with progress(spark, "report and plots"):
            write_report(spark, out_dir, result)
    return result
