"""The invariant checks: invariant_violations (every violation found) and invariants (per
invariant the rows checked, the violations and a few examples).

The invariants within one group come from the group pass (pipeline/groups.py) and the
commits' from their sequences (pipeline/offset_commits.py); the records of an unknown type and
the log positions held twice are found here.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from app.group.records import RecordType
from pipeline.group_pass import GroupPass
from pipeline.group_tables import GROUP_INVARIANTS
from pipeline.inputs import OffsetRanges, OnePass
from pipeline.offset_commits import CommitFigures
from pipeline.output import AuditOutput
from pipeline.scan import BITMAP
from pipeline.spark import log

# bitmaps of 32768 offsets (4 KiB each) the duplicate check may build: 32 MiB, 2^28 offsets
BITMAP_BUCKETS = 1 << 13

INVARIANTS: dict[str, str] = {
    "generation_never_decreases": "a group's generation never decreases in log order "
    "(per incarnation: a deleted and re-created group starts again)",
    "partition_single_owner": "no partition is owned by two members (group.instance.id, else "
    "member id) in one generation",
    "assignment_within_subscription": "every member's assignment covers only topics it "
    "subscribed to (consumer protocol)",
    "offsets_monotonic_within_generation": "no committed offset goes backwards within one "
    "generation, unless it is a reset or an import (OffsetValue source=reset: admin API; "
    "source=upstream: the upstream cluster's offsets, gateway mode)",
    "leader_is_member": "a group record with members names one of them as leader",
    "records_decode": "every record's key and value decode (group, offset, registration, "
    "consumer-protocol bytes; known record types)",
    "unique_log_positions": "each (partition, offset) appears once in log + history",
}

INVARIANT_SCHEMA = pa.schema(
    [
        ("invariant", pa.string()),
        ("description", pa.string()),
        ("checked", pa.int64()),
        ("violations", pa.int64()),
        ("ok", pa.bool_()),
        ("examples", pa.list_(pa.string())),
    ]
)


def positions(output: AuditOutput, recs: Any, ranges: OffsetRanges, scan: OnePass | None) -> Any:
    """The log positions to group for duplicates. One narrow aggregate keeps, per log
    partition and bucket of 32768 offsets, a bitmap of the offsets seen (Spark's `bitmap_*`
    functions, 4 KiB a bucket): a position held twice is in a bucket whose records outnumber
    its bits, and only such buckets' positions are grouped (none in a log without
    duplicates). When the offset ranges would need more than BITMAP_BUCKETS bitmaps, all
    positions are grouped. `scan`: the one pass, whose row groups' bitmaps are ORed."""
    from pyspark.sql import functions as F

    every = recs.select("log_partition", "log_offset", "in_history")
    buckets = sum(2 + (hi >> 15) - (lo >> 15) if lo is not None else 1 for lo, hi in ranges)
    if buckets > BITMAP_BUCKETS:
        return every
    keys = ["log_partition", "bucket"]
    bucketed = every.withColumn("bucket", F.bitmap_bucket_number("log_offset"))
    if scan is not None:
        # each row group's bitmaps (pipeline/scan.py), ORed
        bitmaps = scan.frame.filter(F.col("kind") == BITMAP)
        if not bitmaps.filter(F.col("bitmap").isNull()).isEmpty():
            return every  # a row group's offsets too spread for bitmaps
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
        return every.limit(0)
    d = output.spark.createDataFrame(
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


def group_violations(groups: GroupPass, commits: CommitFigures) -> Any:
    """The invariant_violations rows that name a group: the group pass's (generation never
    decreases, one owner per partition and generation, assignments within subscriptions, the
    leader is a member, group and registration records decode) and the commits' (offsets
    never go backwards within a generation, offset commits decode)."""
    from pyspark.sql import functions as F

    found = groups.rows("violations")
    if commits.flagged is None:
        return found
    bad, backwards = commits.flagged
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


def check_invariants(
    output: AuditOutput,
    groups: GroupPass,
    commits: CommitFigures,
    others: Any,
    input_rows: int,
    positions: Any,
    examples: int,
) -> list[dict[str, Any]]:
    """Write invariant_violations and invariants; the invariants' rows. `others`: the records
    other than commits; `positions`: the log positions to group for duplicates."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # the rows each checked: the group pass's counts, summed in one job
    sums = groups.rows("checked").agg(*(F.sum(name).alias(name) for name in GROUP_INVARIANTS))
    sums = sums.first()
    checked: dict[str, int] = {name: int(sums[name] or 0) for name in GROUP_INVARIANTS}
    # the violations naming a group: those of the group pass, the commits' (offsets that go
    # backwards, records that do not decode)
    found = [group_violations(groups, commits)]
    checked["offsets_monotonic_within_generation"] = commits.checked
    unknown = others.filter(~F.col("record_type").isin(*(t.value for t in RecordType))).select(
        F.lit("records_decode").alias("invariant"),
        F.lit(None).cast("string").alias("group_id"),
        F.lit(None).cast("int").alias("generation"),
        "log_partition",
        "log_offset",
        F.format_string("unknown record type %d", "record_type").alias("detail"),
    )
    checked["records_decode"] = input_rows
    found.append(unknown)

    # each log position once
    dup = positions.groupBy("log_partition", "log_offset").agg(
        F.count("*").alias("copies"),
        F.sum(F.col("in_history").cast("int")).alias("in_history"),
    )
    checked["unique_log_positions"] = input_rows
    found.append(
        dup.filter(F.col("copies") > 1).select(
            F.lit("unique_log_positions").alias("invariant"),
            F.lit(None).cast("string").alias("group_id"),
            F.lit(None).cast("int").alias("generation"),
            "log_partition",
            "log_offset",
            F.format_string("%d copies (%d in history)", "copies", "in_history").alias("detail"),
        )
    )

    all_v = found[0]
    for df in found[1:]:
        all_v = all_v.unionByName(df)
    violations = output.write("invariant_violations", all_v)
    n_checked = {name: int(c) for name, c in checked.items()}
    first = Window.partitionBy("invariant").orderBy("log_partition", "log_offset")
    kept: dict[str, list[str]] = {}
    n_found: dict[str, int] = {}
    # a healthy log has no violations: nothing to look for (the count is the file footers')
    found_rows = (
        violations.withColumn("rn", F.row_number().over(first))
        .withColumn("n", F.count("*").over(Window.partitionBy("invariant")))
        .filter(F.col("rn") <= examples)
        .orderBy("invariant", "rn")
        .collect()
        if output.tables["invariant_violations"]
        else []
    )
    for r in found_rows:
        kept.setdefault(r["invariant"], []).append(_example(r))
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
                "examples": kept.get(name, []),
            }
        )
        status = "ok" if n == 0 else f"VIOLATED {n:,} times"
        log(f"  invariant {name}: {status} ({n_checked[name]:,} checked)")
    # from Arrow: the JVM reads the rows itself, where a list would start a Python worker
    table = pa.Table.from_pylist(summary, schema=INVARIANT_SCHEMA)
    output.write("invariants", output.spark.createDataFrame(table).coalesce(1))
    return summary


def _example(r: Any) -> str:
    where = f"p{r['log_partition']}@{r['log_offset']}"
    group = f"group {r['group_id']}" if r["group_id"] is not None else "log"
    gen = f" gen {r['generation']}" if r["generation"] is not None else ""
    return f"{group}{gen} ({where}): {r['detail']}"
