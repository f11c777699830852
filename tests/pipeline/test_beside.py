"""Audit.beside: a stage run from another driver thread while the next stages run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline import audit
from pipeline.audit import Audit
from tests.pipeline.conftest import Audited


def test_beside_runs_in_a_pool_of_its_own_and_returns_its_result(
    spark: Any, tmp_path: Path
) -> None:
    sc = spark.sparkContext
    a = Audit(spark, "unused", str(tmp_path))
    pool = a.beside(
        "pool", lambda: (sc.getLocalProperty("spark.scheduler.pool"), sc.range(5).sum())
    )
    assert pool.result() == ("beside: pool", 10)
    assert sc.getLocalProperty("spark.scheduler.pool") is None  # this thread's jobs: default


def test_beside_raises_what_its_stage_raised(spark: Any, tmp_path: Path) -> None:
    def fails() -> None:
        raise RuntimeError("stage failed")

    with pytest.raises(RuntimeError, match="stage failed"):
        Audit(spark, "unused", str(tmp_path)).beside("failing", fails).result()


def test_tables_in_stage_order_whichever_thread_wrote_them(known: Audited) -> None:
    assert list(known.result.tables) == list(audit.TABLES)
    assert known.result.tables["input_summary"] > 0 and known.result.tables["generations"] > 0
