"""The report's formatting: durations, timestamps, counts, Markdown tables, time buckets."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

MAX_BUCKETS = 60
TOP = 15

_NICE_MS = [
    1_000,
    2_000,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    21_600_000,
    43_200_000,
    86_400_000,
]


def bucket_width_ms(span_ms: int, buckets: int = MAX_BUCKETS) -> int:
    """The smallest "nice" width that cuts `span_ms` into at most `buckets` buckets."""
    want = max(span_ms / buckets, 1)
    for w in _NICE_MS:
        if w >= want:
            return w
    return int(math.ceil(want / 86_400_000) * 86_400_000)


def fmt_ms(ms: Any) -> str:
    if ms is None:
        return "-"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def ts(ms: Any) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def num(x: Any) -> str:
    return "-" if x is None else f"{int(x):,}"


def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)
