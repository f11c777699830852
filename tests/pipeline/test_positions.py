"""The duplicate log position check: offset bitmaps narrow it to the doubtful buckets, and it
finds the same duplicates as grouping every position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline import inputs, invariants
from pipeline.output import AuditOutput

SCHEMA = (
    "log_partition int, log_offset long, in_history boolean, record_type smallint, "
    "append_time_ms long, value binary"
)

POSITIONS = [
    (0, 5, False),
    (0, 5, True),  # held by the log and the history
    (0, 7, True),
    (0, 7, True),  # twice in the history
    (0, 32_768, False),  # the last offset of bucket 1, the first of bucket 2 next
    (0, 32_769, False),
    (1, 5, False),  # same offset, another partition
    (1, 100_000, True),
    (2, -1, False),  # offsets 0 and -1 share bucket 0 with distinct bits
    (2, 0, False),
    (0, None, False),
    (0, None, True),  # two positions without an offset: grouped together, as before
    (None, 3, False),
]


def duplicates(spark: Any, tmp_path: Path) -> dict[tuple[Any, Any], tuple[int, int]]:
    from pyspark.sql import functions as F

    recs = spark.createDataFrame([(*p, 2, 0, b"v") for p in POSITIONS], SCHEMA)
    a = AuditOutput(spark, str(tmp_path))
    summary, ranges = inputs.spark_input_summary(a, recs)
    summary.collect()
    try:
        rows = (
            invariants.positions(a, recs, ranges, None)
            .groupBy("log_partition", "log_offset")
            .agg(F.count("*").alias("copies"), F.sum(F.col("in_history").cast("int")).alias("h"))
            .filter(F.col("copies") > 1)
            .collect()
        )
    finally:
        a.release()
    return {(r["log_partition"], r["log_offset"]): (r["copies"], r["h"]) for r in rows}


@pytest.mark.parametrize("buckets", [invariants.BITMAP_BUCKETS, 0], ids=["bitmaps", "all"])
def test_duplicate_positions(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, buckets: int
) -> None:
    monkeypatch.setattr(invariants, "BITMAP_BUCKETS", buckets)  # 0: every position is grouped
    assert duplicates(spark, tmp_path) == {(0, 5): (2, 1), (0, 7): (2, 2), (0, None): (2, 1)}


def export_of_positions(out: Path) -> Path:
    """POSITIONS as a `coordinator export` (every column nullable), two rows a row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from storage.export import HISTORY_SCHEMA, LOG_SCHEMA

    out.mkdir(parents=True, exist_ok=True)
    for name, schema, in_history in (
        ("log", LOG_SCHEMA, False),
        ("history", HISTORY_SCHEMA, True),
    ):
        schema = pa.schema([f.with_nullable(True) for f in schema])
        rows = [
            {"partition": p, "offset": o, "record_type": 2, "key": b"k", "value": b"v"}
            for p, o, h in POSITIONS
            if h == in_history
        ]
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), out / f"{name}.parquet", 2)
    return out


@pytest.mark.parametrize("max_bitmaps", [64, 0], ids=["bitmaps", "too-spread"])
def test_duplicate_positions_from_the_one_pass(
    spark: Any, tmp_path: Path, max_bitmaps: int
) -> None:
    """The workers' bitmaps per row group (pipeline/scan.py), ORed by Spark, find the same
    duplicates; a row group too spread for its bitmaps makes every position grouped."""
    from pyspark.sql import functions as F

    export = export_of_positions(tmp_path / "export")
    a = AuditOutput(spark, str(tmp_path / "out"))
    recs = inputs.read_log(spark, str(export))
    try:
        scan = inputs.scan_records(a, str(export), max_bitmaps)
        summary, ranges = inputs.spark_input_summary(a, recs)
        summary.collect()
        positions = invariants.positions(a, recs, ranges, scan)
        grouped = positions.count()
        rows = (
            positions.groupBy("log_partition", "log_offset")
            .agg(F.count("*").alias("copies"), F.sum(F.col("in_history").cast("int")).alias("h"))
            .filter(F.col("copies") > 1)
            .collect()
        )
    finally:
        a.release()
    # the bitmaps leave out the buckets without a duplicate
    assert grouped == (len(POSITIONS) if max_bitmaps == 0 else 7)
    found = {(r["log_partition"], r["log_offset"]): (r["copies"], r["h"]) for r in rows}
    assert found == {(0, 5): (2, 1), (0, 7): (2, 2), (0, None): (2, 1)}
