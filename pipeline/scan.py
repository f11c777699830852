"""The audit's one pass over every record, in the Python workers, one task per row group.

Everything the audit needs from *all* records (not only the offset commits) is small once
folded: per row group, the counts behind `input_summary`, a bitmap of the log offsets seen
per log partition and bucket of 32768 (the duplicate check), and the records other than
offset commits themselves (a fraction of a percent of a log). One pass reads each row group
with pyarrow and emits the three as rows of one schema, told apart by `kind`; the JVM sums
them. It replaces three scans of the whole input (each handing every record to the next
operator) with one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

SUMMARY, RECORD, BITMAP = 0, 1, 2
BUCKET_BITS = 32768  # Spark's bitmap_bucket_number / bitmap_bit_position: 4 KiB a bucket
# bitmaps one row group may emit; a row group whose offsets spread over more buckets emits one
# row without a bitmap, and the audit then groups every position (as past BITMAP_BUCKETS)
MAX_BITMAPS_PER_ROW_GROUP = 64

TASK_SCHEMA = pa.schema(
    [("path", pa.string()), ("row_group", pa.int32()), ("in_history", pa.bool_())]
)

SCAN_SCHEMA = pa.schema(
    [
        ("kind", pa.int8()),
        ("log_partition", pa.int32()),
        ("record_type", pa.int16()),
        ("in_history", pa.bool_()),
        # SUMMARY: per record type and log partition; BITMAP: records in the bucket
        ("records", pa.int64()),
        ("tombstones", pa.int64()),
        ("first_append_ms", pa.int64()),
        ("last_append_ms", pa.int64()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        # BITMAP: null with a null bitmap when the row group's offsets are too spread
        ("bucket", pa.int64()),
        ("bitmap", pa.binary()),
        # RECORD
        ("log_offset", pa.int64()),
        ("append_time_ms", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)

READ_COLUMNS = ["partition", "offset", "record_type", "key", "value", "append_time_ms"]


def row_group_tasks(paths: dict[str, bool]) -> pa.Table:
    """One task per row group of every Parquet file under `paths` (a file or a directory of
    them, each with whether it is the history)."""
    import pyarrow.parquet as pq

    rows: list[tuple[str, int, bool]] = []
    for p, in_history in paths.items():
        path = Path(p.removeprefix("file://"))
        files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
        for f in files:
            groups = pq.ParquetFile(f).metadata.num_row_groups
            rows += [(str(f), i, in_history) for i in range(groups)]
    return pa.table(
        {
            "path": [r[0] for r in rows],
            "row_group": [r[1] for r in rows],
            "in_history": [r[2] for r in rows],
        },
        schema=TASK_SCHEMA,
    )


def read_row_groups(
    tasks: Iterator[pa.RecordBatch], columns: list[str] = READ_COLUMNS
) -> Iterator[tuple[pa.Table, bool]]:
    """Each task's row group (`columns` of READ_COLUMNS, in that order), named as the audit
    names them (`read_log`)."""
    names = {"partition": "log_partition", "offset": "log_offset"}
    import pyarrow.parquet as pq

    files: dict[str, Any] = {}  # a task's row groups are mostly in one file: opened once
    for task in tasks:
        for path, group, in_history in zip(
            task.column("path").to_pylist(),
            task.column("row_group").to_pylist(),
            task.column("in_history").to_pylist(),
            strict=True,
        ):
            if path not in files:
                files = {path: pq.ParquetFile(path)}
            t = files[path].read_row_group(group, columns=columns)
            yield (
                t.rename_columns([names.get(c, c) for c in columns]).combine_chunks(),
                bool(in_history),
            )


def _rows(n: int, in_history: bool, kind: int, columns: dict[str, Any]) -> pa.RecordBatch:
    arrays = []
    for f in SCAN_SCHEMA:
        if f.name == "kind":
            arrays.append(pa.array([kind] * n, pa.int8()))
        elif f.name == "in_history":
            arrays.append(pa.array([in_history] * n, pa.bool_()))
        elif f.name in columns:
            arrays.append(pa.array(columns[f.name], f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=SCAN_SCHEMA)


def summary_rows(t: pa.Table, in_history: bool) -> pa.RecordBatch:
    """Per record type and log partition: records, tombstones, append time and offset range."""
    t = t.select(["record_type", "log_partition", "log_offset", "append_time_ms"]).append_column(
        "tomb", pc.is_null(t["value"]).cast(pa.int64())
    )
    g = t.group_by(["record_type", "log_partition"], use_threads=False).aggregate(
        [
            ([], "count_all"),
            ("tomb", "sum"),
            ("append_time_ms", "min"),
            ("append_time_ms", "max"),
            ("log_offset", "min"),
            ("log_offset", "max"),
        ]
    )
    return _rows(
        g.num_rows,
        in_history,
        SUMMARY,
        {
            "record_type": g["record_type"],
            "log_partition": g["log_partition"],
            "records": g["count_all"],
            "tombstones": g["tomb_sum"],
            "first_append_ms": g["append_time_ms_min"],
            "last_append_ms": g["append_time_ms_max"],
            "min_offset": g["log_offset_min"],
            "max_offset": g["log_offset_max"],
        },
    )


def bitmap_rows(
    t: pa.Table, in_history: bool, max_bitmaps: int = MAX_BITMAPS_PER_ROW_GROUP
) -> pa.RecordBatch:
    """Per log partition and bucket (Spark's `bitmap_bucket_number`), the records and a bitmap
    of their offsets (`bitmap_bit_position`): ORed and counted by Spark's `bitmap_or_agg` and
    `bitmap_count`, which read a bitmap as 4096 bytes. A null offset sets no bit: its bucket
    (null) is doubtful."""
    import numpy as np

    lp = t["log_partition"]
    off = t["log_offset"]
    has = np.asarray(pc.is_valid(off))
    o = np.asarray(off.fill_null(0), np.int64)
    # Spark: a positive offset x is bit (x-1) % 32768 of bucket (x-1) // 32768 + 1; zero and
    # negative ones are bit -x % 32768 of bucket x / 32768 (Java's division, towards zero)
    pos = o > 0
    bucket = np.where(pos, (o - 1) // BUCKET_BITS + 1, -((-o) // BUCKET_BITS))
    bit = np.where(pos, (o - 1) % BUCKET_BITS, (-o) % BUCKET_BITS)
    lp_valid = np.asarray(pc.is_valid(lp))
    lo_bucket = int(bucket[has].min()) if has.any() else 0
    rel = np.where(has, bucket - lo_bucket, 0)
    if int(rel.max(initial=0)) >= 1 << 21:  # spread over more than 2^36 offsets: too sparse
        return _rows(1, in_history, BITMAP, {"records": [len(o)]})
    # one int64 key per (log partition or null, bucket or null): 33 + 1 + 21 bits
    lp_key = np.where(lp_valid, np.asarray(lp.fill_null(0), np.int64) + (1 << 31), 1 << 32)
    keys = (lp_key << 22) | (~has).astype(np.int64) << 21 | rel
    uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    n = len(uniq)
    if n > max_bitmaps:
        return _rows(1, in_history, BITMAP, {"records": [len(o)]})
    bitmaps = np.zeros((n, BUCKET_BITS // 8), np.uint8)
    sel = has
    # Spark's bitmaps: bit b is bit b % 8 of byte b // 8
    np.bitwise_or.at(
        bitmaps,
        (inverse.ravel()[sel], bit[sel] // 8),
        (1 << (bit[sel] % 8)).astype(np.uint8),
    )
    u_lp = uniq >> 22
    u_null = (uniq >> 21) & 1 == 1
    lps = pa.array((u_lp - (1 << 31)).astype(np.int32), pa.int32(), mask=u_lp == 1 << 32)
    buckets = pa.array((uniq & ((1 << 21) - 1)) + lo_bucket, pa.int64(), mask=u_null)
    return _rows(
        n,
        in_history,
        BITMAP,
        {
            "log_partition": lps,
            "bucket": buckets,
            "records": counts.astype(np.int64),
            "bitmap": [b.tobytes() for b in bitmaps],
        },
    )


def record_rows(t: pa.Table, in_history: bool, skip_type: int) -> pa.RecordBatch | None:
    """The records other than `skip_type` (offset commits), as the audit reads them; a record
    without a type is neither (as Spark's `!=` drops a null)."""
    rest = t.filter(pc.not_equal(t["record_type"], skip_type))
    if not rest.num_rows:
        return None
    return _rows(
        rest.num_rows,
        in_history,
        RECORD,
        {c: rest[c] for c in ("log_partition", "record_type", "log_offset", "append_time_ms")}
        | {"key": rest["key"], "value": rest["value"]},
    )


def scan_row_groups(
    tasks: Iterator[pa.RecordBatch], skip_type: int, max_bitmaps: int = MAX_BITMAPS_PER_ROW_GROUP
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over TASK_SCHEMA rows -> SCAN_SCHEMA rows."""
    for t, in_history in read_row_groups(tasks):
        if not t.num_rows:
            continue
        yield summary_rows(t, in_history)
        yield bitmap_rows(t, in_history, max_bitmaps)
        rest = record_rows(t, in_history, skip_type)
        if rest is not None:
            yield rest


INPUT_SUMMARY_SCHEMA = pa.schema(
    [
        ("record_type", pa.int16()),
        ("kind", pa.string()),
        ("in_history", pa.bool_()),
        ("records", pa.int64()),
        ("tombstones", pa.int64()),
        ("first_append_ms", pa.int64()),
        ("last_append_ms", pa.int64()),
        ("log_partitions", pa.int64()),
    ]
)


def input_summary(counts: pa.Table, kinds: dict[int, str]) -> pa.Table:
    """The SUMMARY rows of every row group -> the input_summary table: per record type (its
    `kinds` name, else "unknown") and file, the records, tombstones, append times and log
    partitions (as the audit's Spark aggregate of them, for an export Spark reads)."""
    g = counts.group_by(["record_type", "in_history"], use_threads=False).aggregate(
        [
            ("records", "sum"),
            ("tombstones", "sum"),
            ("first_append_ms", "min"),
            ("last_append_ms", "max"),
            ("log_partition", "count_distinct"),
        ]
    )
    kind = [kinds.get(t, "unknown") for t in g["record_type"].to_pylist()]
    columns = {
        "record_type": g["record_type"],
        "kind": pa.array(kind, pa.string()),
        "in_history": g["in_history"],
        "records": g["records_sum"],
        "tombstones": g["tombstones_sum"],
        "first_append_ms": g["first_append_ms_min"],
        "last_append_ms": g["last_append_ms_max"],
        "log_partitions": g["log_partition_count_distinct"],
    }
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type) for f in INPUT_SUMMARY_SCHEMA],
        schema=INPUT_SUMMARY_SCHEMA,
    )
