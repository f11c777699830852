"""The group-commit writer's bounds and their defaults, written once.

Standard library only, so `Settings` (app/config.py) takes them as the defaults of
COORD_MAX_RECORD_BYTES and COORD_MAX_QUEUED_RECORDS without loading a database driver.
"""

from __future__ import annotations

from typing import Final

MAX_RECORDS_PER_TXN: Final = 5000  # one transaction's share of a busy queue
MAX_RECORD_BYTES: Final = 16 * 1024 * 1024
MAX_QUEUED_RECORDS: Final = 100_000
