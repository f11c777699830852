"""LoopHistogram (app/runtime/metrics.py) is scraped exactly as prometheus-client's Histogram."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from app.runtime.metrics import LATENCY_BUCKETS, LoopHistogram


@pytest.mark.parametrize(
    "values",
    [
        [],
        [0.001, 0.0005, 0.005],  # on a bound: counted in that bucket (le)
        [0.02, 1, 5, 700.0, 0.3, 120, 600, 600.0001, 1e-9],
    ],
)
def test_the_exposition_matches_the_librarys_histogram(values: list[float]) -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("op_seconds", "doc", registry=theirs, buckets=LATENCY_BUCKETS)
    fast = LoopHistogram("op_seconds", "doc", LATENCY_BUCKETS, ours)
    for v in values:
        reference.observe(v)
        fast.observe(v)
    expected = [
        line for line in generate_latest(theirs).decode().splitlines() if "_created" not in line
    ]
    assert generate_latest(ours).decode().splitlines() == expected
