"""The audit's output: OUT/tables/<name> written, read back and counted, and what is cached.

Tables that later stages read are written first and read back, which keeps each stage's plan
short and is the natural checkpoint on a cluster. A local OUT's small tables are read and
counted from their files with pyarrow, where Spark would run a job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.spark import log


def is_local_path(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def spark_schema(arrow_schema: Any) -> Any:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


class AuditOutput:
    """OUT/tables of one audit run: every table written, as read back, with its row count, and
    the frames cached on the way (`release` frees them)."""

    def __init__(self, spark: Any, out_dir: str) -> None:
        self.spark = spark
        self.out = out_dir.rstrip("/")
        self.tables: dict[str, int] = {}
        self.written: dict[str, Any] = {}  # each table written, as read back
        self._persisted: list[Any] = []
        # a local OUT gets the group pass's tables from the workers that compute them
        self.worker_writes = is_local_path(out_dir)

    def path(self, name: str) -> str:
        return f"{self.out}/tables/{name}"

    @property
    def tables_dir(self) -> str:
        """OUT/tables as a local path, where the tasks write tables (`worker_writes`)."""
        return self.path("").removeprefix("file://").rstrip("/")

    def write(self, name: str, df: Any) -> Any:
        """Write a table, read it back (lineage cut), log its row count."""
        df.write.mode("overwrite").parquet(self.path(name))
        return self.written_table(name, df.schema)

    def written_table(self, name: str, schema: Any) -> Any:
        """A table just written, read back, its rows counted and logged."""
        # with the schema just written: reading it from a file footer is a Spark job
        back = self.spark.read.schema(schema).parquet(self.path(name))
        self.written[name] = back
        rows = parquet_rows(self.path(name))
        if rows is None:  # not a local directory: ask Spark
            rows = int(back.count())
        self.tables[name] = rows
        log(f"  table {name}: {rows:,} rows")
        return back

    def read(self, name: str, columns: list[str]) -> pa.Table | None:
        """The `columns` of a small table written, read without Spark (None: not local)."""
        return parquet_table(self.path(name), columns)

    def persist(self, df: Any, materialize: bool = False) -> Any:
        """Cache `df`; `materialize` computes it now, in one job, so that the branches of a
        later plan (a union, a self-join) read the cache instead of each computing it at once."""
        from pyspark.storagelevel import StorageLevel

        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._persisted.append(df)
        if materialize:
            df.count()
        return df

    def release(self) -> None:
        for df in self._persisted:
            df.unpersist()
        self._persisted.clear()


def parquet_files(path: str) -> list[Path] | None:
    """The files of a Parquet directory written by Spark (None: not a local directory)."""
    if not is_local_path(path):
        return None
    return sorted(Path(path.removeprefix("file://")).glob("*.parquet"))


def parquet_table(path: str, columns: list[str]) -> pa.Table | None:
    """The `columns` of a small Parquet directory written by Spark, read without Spark (None:
    not a local directory)."""
    import pyarrow.parquet as pq

    files = parquet_files(path)
    if not files:
        return None
    return pa.concat_tables([pq.read_table(f, columns=columns) for f in files])


def parquet_rows(path: str) -> int | None:
    """Rows of a Parquet directory written by Spark, from the footers alone (no Spark job)."""
    import pyarrow.parquet as pq

    files = parquet_files(path)
    if files is None:
        return None
    return sum(int(pq.ParquetFile(f).metadata.num_rows) for f in files)
