"""The benchmark report's statistics."""

from __future__ import annotations

import random

from bench.report import percentile


def test_percentile_is_the_nearest_rank() -> None:
    hundred = list(range(1, 101))
    random.Random(5).shuffle(hundred)
    assert percentile(hundred, 99) == 99  # 99% of the values are at or below it
    assert percentile(hundred, 50) == 50
    assert percentile(hundred, 100) == 100
    assert percentile(range(1, 31), 50) == 15  # not the 16th: ranks round up, not to even
    assert percentile(range(1, 21), 99) == 20  # with 20 values, p99 is the largest
    assert percentile([7.5], 1) == 7.5
