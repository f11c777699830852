"""Entry point behind `coordinator audit`: a session, the audit, a one-screen summary."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.audit import AuditResult, run_audit
from pipeline.spark import build_session, is_local, log


def audit_main(
    input_dir: str,
    out_dir: str,
    master: str = "local[*]",
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    examples: int = 5,
    report: bool = True,
) -> AuditResult:
    t0 = time.monotonic()
    if "://" not in out_dir:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    log(f"starting Spark ({master})")
    spark = build_session(
        master, shuffle_partitions=shuffle_partitions, driver_memory=driver_memory
    )
    try:
        log(f"Spark {spark.version} up in {time.monotonic() - t0:.1f} s")
        write_report = report and (is_local(master) or "://" not in out_dir)
        return run_audit(spark, input_dir, out_dir, examples, report=write_report)
    finally:
        spark.stop()
