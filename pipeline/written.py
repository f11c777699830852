"""Tables a Spark task writes itself, for a local OUT: one Parquet file per table and task.

A Spark write of a table of a few thousand rows costs a fraction of a CPU-second (a query,
its planning and generated code, a job) where the task that computed the rows writes them in
milliseconds. The files are `OUT/tables/<table>/part-<task>.parquet` (zstd, as Spark's), one
per table and task even when empty, so a table every task left empty still has its schema;
`prepare` empties each table's directory first, as Spark's overwrite does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa


def prepare(tables_dir: str, names: list[str]) -> None:
    """Empty (or create) each table's directory before the tasks that write it run."""
    for name in names:
        shutil.rmtree(Path(tables_dir, name), ignore_errors=True)
        Path(tables_dir, name).mkdir(parents=True)


class TaskTables:
    """This task's file of each table in `schemas`, written batch by batch."""

    def __init__(self, tables_dir: str, schemas: dict[str, pa.Schema]) -> None:
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        self.writers = {
            name: pq.ParquetWriter(
                f"{tables_dir}/{name}/part-{task:05d}.parquet", schema, compression="zstd"
            )
            for name, schema in schemas.items()
        }

    def write(self, name: str, rows: pa.RecordBatch | pa.Table) -> None:
        if rows.num_rows:
            self.writers[name].write(rows)

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def write_table(tables_dir: str, name: str, table: pa.Table) -> None:
    """A table computed whole (by the driver, from tables already written): one file."""
    import pyarrow.parquet as pq

    prepare(tables_dir, [name])
    pq.write_table(table, f"{tables_dir}/{name}/part-00000.parquet", compression="zstd")
