"""The event log's columns, declared once.

storage/sql/tables.py builds log_records and log_history from them, the append INSERT lists them,
and the Parquet export (storage/export.py) and the audit pipeline (pipeline/) take their schema
from here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from sqlalchemy import BigInteger, Integer, LargeBinary, SmallInteger
from sqlalchemy.types import TypeEngine


class LogColumn(NamedTuple):
    name: str
    sql: type[TypeEngine[Any]]
    arrow: str  # the pyarrow type factory: pa.int32(), pa.binary(), ...
    nullable: bool = False


# The order is the order of an appended row's tuple (storage/sql/log.py builds them positionally).
LOG_COLUMNS: tuple[LogColumn, ...] = (
    LogColumn("partition", Integer, "int32"),
    LogColumn("offset", BigInteger, "int64"),  # dense per partition, assigned by the lease holder
    LogColumn("record_type", SmallInteger, "int16"),
    LogColumn("key", LargeBinary, "binary"),
    LogColumn("value", LargeBinary, "binary", nullable=True),  # NULL = tombstone
    LogColumn("epoch", Integer, "int32"),  # lease epoch of the writer
    LogColumn("node_id", Integer, "int32"),
    LogColumn("append_time_ms", BigInteger, "int64"),
)

# A row the compactor moved out of log_records, and when.
HISTORY_COLUMNS: tuple[LogColumn, ...] = (
    *LOG_COLUMNS,
    LogColumn("compacted_at_ms", BigInteger, "int64"),
)

LOG_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in LOG_COLUMNS)


def arrow_schema(columns: Iterable[LogColumn]) -> Any:
    """The pyarrow schema of `columns`. Every field is nullable, as the export has always
    written them (the Parquet files' layout stays the same)."""
    import pyarrow as pa  # here, not at import: only the export and the pipeline need Arrow

    return pa.schema([(c.name, getattr(pa, c.arrow)()) for c in columns])
