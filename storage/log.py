"""The SQL event log under the name its callers open it by: `await EventLog.open(url)`.

The runtime types against the ports (storage/ports.py); whoever builds a node (the CLI, the
tests, the benchmarks) opens this implementation of them.
"""

from __future__ import annotations

from storage.envelope import AppendBatch, Envelope, LatestRecords, StoredRecord
from storage.sql.log import CompactionStats, EventLog, LeaseRow, NodeRow

__all__ = [
    "AppendBatch",
    "CompactionStats",
    "Envelope",
    "EventLog",
    "LatestRecords",
    "LeaseRow",
    "NodeRow",
    "StoredRecord",
]
