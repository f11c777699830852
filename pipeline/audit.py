"""The rebalance audit: `coordinator export` Parquet (log + history) -> audit tables.

Every table is written as Parquet under OUT/tables/<name>. The large inputs are only ever
read by Spark's tasks; the driver sees counts, the groups' metadata intervals, a handful of
example rows and, for a local OUT, the tables of a few rows per group or partition it sums
(input_summary, group_summary: pipeline/summary.py). To a local OUT the tasks that compute
the group pass's tables and commit_activity write them themselves (pipeline/written.py);
elsewhere Spark writes every table (pipeline/output.py).

This module schedules the stages, each a module of its own job:
- pipeline/inputs.py          the export read, the one pass over every record, input_summary
- pipeline/group_pass.py      the group pass (workers: pipeline/groups.py) and its tables
- pipeline/offset_commits.py  commit_activity and the commits' invariant rows
- pipeline/invariants.py      the duplicate check, invariant_violations and invariants
- pipeline/summary.py         group_summary

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
  with `source` = reset (OffsetValue v1), imports those with `source` = upstream (v2: the
  upstream cluster's committed offsets, taken when a group moved in through the gateway);
  either may move a position back whatever the generation.
- STATIC_REGISTRATION records open a pre-registered scale-up (expected instances), mark its
  expansion start, and close it (empty expected, `dropped` = who never came).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline import inputs, invariants, offset_commits
from pipeline.commits import FOLD_ROWS
from pipeline.group_pass import run_group_pass, write_group_tables, write_reasons
from pipeline.inputs import read_log
from pipeline.offset_commits import CommitReading
from pipeline.output import AuditOutput, is_local_path
from pipeline.scan import MAX_BITMAPS_PER_ROW_GROUP
from pipeline.spark import progress
from pipeline.summary import spark_group_summary, write_local_group_summary

__all__ = ["TABLES", "Audit", "AuditResult", "read_log", "run_audit"]

INPUT_SUMMARY_STAGE = "input summary (every record in log + history)"
GROUP_STAGE = "group pass: records decoded and audited per group (members, generations, ...)"

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


class Audit:
    """One audit run: input -> OUT/tables/*. `run()` executes every stage in order."""

    def __init__(self, spark: Any, input_dir: str, out_dir: str, examples: int = 5) -> None:
        self.spark = spark
        self.input_dir = input_dir
        self.output = AuditOutput(spark, out_dir)
        self.out = self.output.out
        self.examples = examples
        self._beside_stages: list[Future[Any]] = []
        # a local export is read by the Python workers, row group by row group (pipeline/
        # scan.py); anywhere else by Spark's scan
        self.arrow_reads = is_local_path(input_dir)
        self.fold_rows = FOLD_ROWS  # commits folded at once into partials
        self.merge_partials = True  # a task's partials joined before all are joined
        self.max_bitmaps = MAX_BITMAPS_PER_ROW_GROUP  # offset bitmaps a row group may emit
        self.commits_by = ""  # "partials" or "window": how the commits were sequenced

    @property
    def worker_writes(self) -> bool:
        """A local OUT gets the group pass's tables from the workers that compute them."""
        return self.output.worker_writes

    @worker_writes.setter
    def worker_writes(self, value: bool) -> None:
        self.output.worker_writes = value

    @property
    def tables(self) -> dict[str, int]:
        return self.output.tables

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

    def run(self) -> AuditResult:
        t0 = time.monotonic()
        output = self.output
        try:
            recs = read_log(self.spark, self.input_dir)
            scan = None
            if self.arrow_reads:
                with progress(self.spark, "one pass over every record (counts, offsets seen)"):
                    scan = inputs.scan_records(output, self.input_dir, self.max_bitmaps)
            # the input summary (a JVM aggregate: of the one pass's counts, or of every record)
            # runs beside the group pass, which only the invariants' counts wait for
            input_summary = self.beside(
                INPUT_SUMMARY_STAGE, lambda: inputs.write_input_summary(output, recs, scan)
            )
            with progress(
                self.spark, GROUP_STAGE if self.arrow_reads else f"reading + {GROUP_STAGE}"
            ):
                others, others_bound = inputs.other_records(output, recs, scan)
                groups = run_group_pass(output, others, others_bound)
            # The commits (a pass over every commit, both slots busy) and the duplicate check
            # run beside the writes of the group pass's tables, whose small jobs leave a slot
            # idle most of the time; only the invariants and the per-group summary read them
            reading = CommitReading(
                self.input_dir, self.arrow_reads, self.fold_rows, self.merge_partials
            )
            commits = self.beside(
                "offset commits (generation as of the log, movement)",
                lambda: offset_commits.commits(output, recs, groups, reading),
            )

            def positions_seen() -> Any:
                # the offset ranges, which size the bitmaps
                ranges = input_summary.result().ranges
                return invariants.positions(output, recs, ranges, scan)

            positions = self.beside("duplicate log positions: offset bitmaps", positions_seen)
            with progress(self.spark, "group records, generations, static identity, scale-ups"):
                gens = write_group_tables(output, groups)
            with progress(self.spark, "rebalance reasons"):
                write_reasons(output, gens)
            figures = commits.result()
            self.commits_by = figures.by
            # Spark's per-group summary reads no table of the invariants'; a local OUT's is
            # computed from the tables written, the invariants' violations among them
            summary = None
            if not output.worker_writes:
                violations = invariants.group_violations(groups, figures)
                summary = self.beside(
                    "per-group summary",
                    lambda: spark_group_summary(output, gens, figures.activity, violations),
                )
            input_rows = input_summary.result().records
            with progress(self.spark, "invariants"):
                checks = invariants.check_invariants(
                    output, groups, figures, others, input_rows, positions.result(), self.examples
                )
            if summary is None:
                with progress(self.spark, "per-group summary"):
                    write_local_group_summary(output)
            else:
                summary.result()
        except BaseException:
            if not all(f.done() for f in self._beside_stages):
                self.spark.sparkContext.cancelAllJobs()  # a stage beside this one: stop it
            raise
        finally:
            wait(self._beside_stages)
            output.release()
        result = AuditResult(
            self.input_dir,
            Path(self.out),
            input_rows,
            time.monotonic() - t0,
            # in the order of the stages, whichever thread wrote them first
            {name: self.tables[name] for name in (*TABLES, *self.tables) if name in self.tables},
            checks,
        )
        if is_local_path(self.out):
            Path(self.out, "summary.json").write_text(
                json.dumps(
                    {
                        "input": self.input_dir,
                        "input_rows": input_rows,
                        "seconds": round(result.seconds, 3),
                        "tables": result.tables,
                        "invariants": checks,
                    },
                    indent=2,
                )
                + "\n"
            )
        return result


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
