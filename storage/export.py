"""`coordinator export`: the log and its history as Parquet, as of one commit point.

Both tables are read inside one read transaction (REPEATABLE READ on PostgreSQL, a WAL read
snapshot on SQLite), so a record the compactor moves to the history while the export runs is in
exactly one of the two files. Rows stream in pages; memory stays bounded by one page.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Table, select

from storage.columns import HISTORY_COLUMNS, LOG_COLUMNS, arrow_schema
from storage.sql.tables import log_history, log_records

if TYPE_CHECKING:  # the pipeline imports the schemas without the log's machinery
    from storage.sql.log import EventLog

# the Parquet layout of both files (pipeline/ reads and writes the same)
LOG_SCHEMA = arrow_schema(LOG_COLUMNS)
HISTORY_SCHEMA = arrow_schema(HISTORY_COLUMNS)


@dataclass(frozen=True, slots=True)
class ExportManifest:
    exported_at_ms: int
    log_rows: int
    history_rows: int
    end_offsets: dict[int, int]  # partition -> next offset as of the commit point
    files: dict[str, str]


async def export(event_log: EventLog, out: Path, page_rows: int = 50_000) -> ExportManifest:
    """One consistent snapshot as Parquet, replaced atomically: the old manifest goes first, the
    files are written under temporary names and renamed, the new manifest last. A crash at any
    point leaves either no manifest (no export to read) or a manifest of complete files."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "manifest.json").unlink(missing_ok=True)
    tmp_log, tmp_history = out / ".log.parquet.tmp", out / ".history.parquet.tmp"
    async with event_log.snapshot() as conn:
        log_rows, end_offsets = await _dump(conn, log_records, LOG_SCHEMA, tmp_log, page_rows)
        history_rows, _ = await _dump(conn, log_history, HISTORY_SCHEMA, tmp_history, page_rows)
    _durable_rename(tmp_log, out / "log.parquet")
    _durable_rename(tmp_history, out / "history.parquet")
    manifest = ExportManifest(
        exported_at_ms=time.time_ns() // 1_000_000,
        log_rows=log_rows,
        history_rows=history_rows,
        end_offsets=end_offsets,
        files={"log": "log.parquet", "history": "history.parquet"},
    )
    tmp_manifest = out / ".manifest.json.tmp"
    tmp_manifest.write_text(json.dumps(asdict(manifest), indent=2) + "\n")
    _durable_rename(tmp_manifest, out / "manifest.json")
    return manifest


def _durable_rename(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        os.fsync(f.fileno())
    os.replace(src, dst)
    dir_fd = os.open(dst.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


async def _dump(
    conn: Any, table: Table, schema: pa.Schema, path: Path, page_rows: int
) -> tuple[int, dict[int, int]]:
    """Keyset-paged copy of `table` ordered by (partition, offset) into one Parquet file."""
    cols = [table.c[name] for name in schema.names]
    part, off = table.c.partition, table.c.offset
    rows_total = 0
    end_offsets: dict[int, int] = {}
    last: tuple[int, int] | None = None
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        while True:
            stmt = select(*cols).order_by(part, off).limit(page_rows)
            if last is not None:
                stmt = stmt.where((part > last[0]) | ((part == last[0]) & (off > last[1])))
            rows = (await conn.execute(stmt)).all()
            if not rows:
                break
            columns = list(zip(*rows, strict=True))
            writer.write_table(
                pa.Table.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(columns, schema, strict=True)],
                    schema=schema,
                )
            )
            rows_total += len(rows)
            for partition, offset in zip(columns[0], columns[1], strict=True):
                end_offsets[partition] = max(end_offsets.get(partition, 0), offset + 1)
            last = (rows[-1][0], rows[-1][1])
    return rows_total, end_offsets
