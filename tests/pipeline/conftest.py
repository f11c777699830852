"""One SparkSession for the whole pipeline suite (a session costs seconds to start), and the
audit of the hand-built log, run once and shared by the tests that check its tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.audit import AuditResult, run_audit
from pipeline.spark import build_session
from tests.pipeline.logs import known_log


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Tiny inputs: one shuffle partition and no adaptive re-planning keep each job short.
    # Generated code is compiled per query, and for a few dozen rows that costs more than it
    # saves: Spark's interpreted evaluation took a tiny audit from 17-21 s to 11-12 s, and the
    # JVM's CPU from 78 to 54 s for three. The audit's results do not depend on it; the
    # benchmark smoke test audits with generated code, as the CLI does.
    session = build_session(
        "local[2]",
        app_name="pipeline-tests",
        shuffle_partitions=1,
        extra_conf={
            "spark.sql.adaptive.enabled": "false",
            "spark.sql.codegen.wholeStage": "false",
            "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        },
    )
    yield session
    session.stop()


class Audited:
    def __init__(self, spark: Any, out: Path, result: AuditResult) -> None:
        self.spark = spark
        self.out = out
        self.result = result

    def table(self, name: str) -> Any:
        return self.spark.read.parquet(str(self.out / "tables" / name))

    def rows(self, name: str, **where: Any) -> list[dict[str, Any]]:
        """The (small) rows of a table matching column == value filters, as dicts."""
        df = self.table(name)
        for col, value in where.items():
            df = df.filter(df[col] == value)
        return [r.asDict(recursive=True) for r in df.collect()]

    def invariant(self, name: str) -> dict[str, Any]:
        (inv,) = [i for i in self.result.invariants if i["invariant"] == name]
        return inv


@pytest.fixture(scope="session")
def known(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Audited:
    base = tmp_path_factory.mktemp("known")
    export = known_log(base / "export")
    out = base / "audit"
    result = run_audit(spark, str(export), str(out))
    return Audited(spark, out, result)
