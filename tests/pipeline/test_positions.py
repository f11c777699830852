"""The duplicate log position check: offset bitmaps narrow it to the doubtful buckets, and it
finds the same duplicates as grouping every position."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline import audit
from pipeline.audit import Audit

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
    a = Audit(spark, "unused", str(tmp_path))
    a._input_summary(recs).collect()
    try:
        rows = (
            a._positions(recs)
            .groupBy("log_partition", "log_offset")
            .agg(F.count("*").alias("copies"), F.sum(F.col("in_history").cast("int")).alias("h"))
            .filter(F.col("copies") > 1)
            .collect()
        )
    finally:
        a.release()
    return {(r["log_partition"], r["log_offset"]): (r["copies"], r["h"]) for r in rows}


@pytest.mark.parametrize("buckets", [audit.BITMAP_BUCKETS, 0], ids=["bitmaps", "all"])
def test_duplicate_positions(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, buckets: int
) -> None:
    monkeypatch.setattr(audit, "BITMAP_BUCKETS", buckets)  # 0: every position is grouped
    assert duplicates(spark, tmp_path) == {(0, 5): (2, 1), (0, 7): (2, 2), (0, None): (2, 1)}
