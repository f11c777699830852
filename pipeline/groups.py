"""The audit's per-group tables, from one Python pass over each group's records.

Everything the audit says about a group's membership (its records in log order, generations
and the partitions they moved, static replacements and fenced member ids, pre-registered
scale-ups, and the invariants checked within one group) is a function of that group's
GROUP_METADATA and STATIC_REGISTRATION records alone, a few hundred rows at most. Spark groups
the records by group (`group_key`) and hands whole groups to `audit_groups` (`mapInArrow`),
which decodes them with the coordinator's own decoders and returns one row per output row of
any table, each table a struct column of PASS_SCHEMA (the others null). The audit caches that
once and writes each table as a filter of it, or (a local OUT) each task writes its rows of
the tables itself and hands back only what later stages read: one query and one shuffle of
the group records, where joins and windows in Spark cost a job each for a few thousand rows.
One group's history is pipeline/group_history.py; the outputs' schemas pipeline/group_tables.py.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from functools import reduce
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.group.records import RecordType
from pipeline.decode import INPUT_COLUMNS, decode_group_rows, decode_registration_rows
from pipeline.group_history import audit_group
from pipeline.group_tables import KEPT_SCHEMA, TABLES, PassRows, Row

_GROUP_METADATA = RecordType.GROUP_METADATA.value
_STATIC_REGISTRATION = RecordType.STATIC_REGISTRATION.value
FLUSH_ROWS = 20_000  # records audited at once (whole groups; see the module's docstring)


def group_key() -> Any:
    """The Spark column every record of one group shares: the UTF-8 bytes of the group id in
    its key (i16 version, i32 length, bytes), exactly the bytes `decode_group_key` decodes, so
    a key it decodes to a group lands with that group's records. A key it cannot decode lands
    anywhere; its record only ever yields a decoding violation."""
    from pyspark.sql import functions as F

    length = F.conv(F.hex(F.col("key").substr(3, 4)), 16, 10).cast("long")
    return F.col("key").substr(F.lit(7), F.least(length, F.lit(1 << 30)).cast("int"))


def audit_group_batches(
    batches: Iterator[pa.RecordBatch], tables_dir: str | None = None
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over records sorted by `_group` (INPUT_COLUMNS, record_type, _group) ->
    PASS_SCHEMA rows: whole groups are audited FLUSH_ROWS records or more at a time (one call
    per group cost more than the auditing), and a group that may go on in the next batch waits
    for it. What a worker holds is bounded by FLUSH_ROWS plus the largest group.

    With `tables_dir` (a local directory) the task writes its rows of each of TABLES there
    itself, as `<table>/part-<task>.parquet` (a file, maybe empty, per table and task), and
    returns KEPT_SCHEMA rows: a Spark write per table is a query, its planning and code and a
    job for a few thousand rows, and seven of them cost more than the pass itself."""
    if tables_dir is None:
        yield from _audited(batches)
        return
    from pipeline.written import TaskTables

    files = TaskTables(tables_dir, TABLES)
    try:
        for batch in _audited(batches):
            for name in TABLES:
                col = batch.column(name)
                files.write(name, pa.RecordBatch.from_struct_array(col.filter(pc.is_valid(col))))
            kept = batch.select(KEPT_SCHEMA.names)
            kept = kept.filter(reduce(pc.or_, (pc.is_valid(c) for c in kept.columns)))
            if kept.num_rows:
                yield kept
    finally:
        files.close()


def _audited(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    pending: list[pa.RecordBatch] = []
    rows, threshold = 0, FLUSH_ROWS
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows < threshold:
            continue
        t = pa.Table.from_batches(pending).combine_chunks()
        last = t["_group"][-1]
        # the rows of the last group: a suffix (nulls sort first, so a null last key means
        # every key is null, and nothing is known to be whole yet)
        tail = pc.equal(t["_group"], last) if last.is_valid else pc.is_null(t["_group"])
        done = t.filter(pc.invert(tail))
        if done.num_rows:
            yield from audit_groups(done).to_batches()
        kept = t.filter(tail)
        pending, rows = kept.to_batches(), kept.num_rows
        # a group larger than FLUSH_ROWS is not copied again for every batch it spans
        threshold = max(FLUSH_ROWS, 2 * rows)
    if rows:
        yield from audit_groups(pa.Table.from_batches(pending)).to_batches()


def audit_groups(table: pa.Table) -> pa.Table:
    """Whole groups' records (INPUT_COLUMNS + record_type; any number of groups) ->
    PASS_SCHEMA."""
    cols = table.to_pydict()
    types = cols["record_type"]

    def rows_of(record_type: int) -> dict[str, list[Any]]:
        picked = [i for i, t in enumerate(types) if t == record_type]
        return {c: [cols[c][i] for i in picked] for c in INPUT_COLUMNS}

    out = PassRows()
    members = decode_group_rows(rows_of(_GROUP_METADATA))
    registrations = decode_registration_rows(rows_of(_STATIC_REGISTRATION))
    for m in members:  # every record decodes, consumer-protocol bytes included
        if m["decode_error"] is not None or m["protocol_error"] is not None:
            member = "?" if m["member_id"] is None else m["member_id"]
            why = m["decode_error"] or f"member {member}: {m['protocol_error']}"
            out.violation("records_decode", m, f"group metadata: {why}", m["generation"])
    for r in registrations:
        if r["decode_error"] is not None:
            out.violation("records_decode", r, f"static registration: {r['decode_error']}")
    by_group: dict[str, tuple[list[Row], list[Row]]] = defaultdict(lambda: ([], []))
    for m in members:
        if m["group_id"] is not None:
            by_group[m["group_id"]][0].append(m)
    for r in registrations:
        if r["decode_error"] is None:
            by_group[r["group_id"]][1].append(r)
    for group_id, (group_members, group_registrations) in by_group.items():
        audit_group(group_id, group_members, group_registrations, out)
    return out.table()
