"""SparkSession settings and progress reporting for the audit.

Local runs follow design.md §12.3: bind the loopback interface only (Spark binds
eth0 otherwise), no UI, a handful of shuffle partitions. `--master` points the same job at any
cluster; the code it needs on executors (`pipeline`, `app.group`) is shipped as a zip.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pipeline import class_archive

ROOT = Path(__file__).resolve().parents[1]

# The JIT's optimising tier (C2) took close to half the JVM's CPU in a local audit: hundreds of
# short queries, each with its own generated classes, on the cores the tasks need. C1 alone
# compiles them for a fraction of that; a long scan runs slower, the audit faster (the
# measurements: bench/README_audit.md). Clusters keep the default.
# C1 alone reserves 48 MiB for compiled code, which an audit of 10M records fills near its end
# ("CodeCache is full. Compiler has been disabled": what runs after that stays interpreted)
LOCAL_JIT = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m"


def log(msg: str) -> None:
    """Progress goes to stderr, so stdout stays clean for whatever calls us."""
    print(f"[audit {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def is_local(master: str) -> bool:
    return master.startswith("local")


def build_session(
    master: str = "local[*]",
    app_name: str = "coordinator-audit",
    shuffle_partitions: int | None = None,
    driver_memory: str | None = None,
    extra_conf: dict[str, str] | None = None,
) -> Any:
    """A SparkSession for the audit. Local masters get the platform's loopback settings."""
    local = is_local(master)
    if local:
        # must be in the environment before the JVM starts
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # executors' Python must be able to import pyarrow/pandas: use ours unless told otherwise
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    b = SparkSession.builder.master(master).appName(app_name)
    conf: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",  # our own progress goes to stderr
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # big Arrow batches: the per-batch cost of the Python passes (numpy, group_by) is paid
        # once per 100k rows, not once per 10k
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        "spark.sql.parquet.compression.codec": "zstd",
        # the audit caches only small tables (members, partials, per-partition rows): encoding
        # them was a fifth of the executor's samples (dictionary statistics of every column),
        # for memory these tables do not need saved
        "spark.sql.inMemoryColumnarStorage.compressed": "false",
        # jobs from several driver threads (Audit.beside) share the task slots by pool
        "spark.scheduler.mode": "FAIR",
    }
    if local:
        conf.update(
            {
                # Spark's classes mapped from the archive `make install` built, if any
                "spark.driver.extraJavaOptions": f"{LOCAL_JIT} {class_archive.java_options()}",
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.sql.shuffle.partitions": str(shuffle_partitions or 8),
                "spark.default.parallelism": str(shuffle_partitions or 8),
            }
        )
    elif shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(shuffle_partitions)
    if driver_memory:
        conf["spark.driver.memory"] = driver_memory
    conf.update(extra_conf or {})
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if not local:
        ship_code(spark)
    return spark


def ship_code(spark: Any) -> None:
    """Executors on a cluster need `pipeline` and `app.group` (the record decoders)."""
    path = Path(tempfile.mkdtemp(prefix="audit-code-")) / "audit_code.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("app/__init__.py", "")
        for pkg in ("app/group", "pipeline"):
            for f in sorted((ROOT / pkg).glob("*.py")):
                z.write(f, f"{pkg}/{f.name}")
    spark.sparkContext.addPyFile(str(path))


@contextmanager
def progress(spark: Any, stage: str, every_s: float = 5.0) -> Iterator[None]:
    """Log `stage`, then every `every_s` the Spark stages running for it (tasks done/total),
    and the time it took."""
    t0 = time.monotonic()
    log(f"{stage} ...")
    stop = threading.Event()
    sc = spark.sparkContext
    tracker = sc.statusTracker()
    # the stage names this thread's jobs (Spark UI, event log)
    described = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(stage)

    def watch() -> None:
        while not stop.wait(every_s):
            try:
                infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the JVM is going away: nothing to say
                return
            running = [
                f"stage {i.stageId} {i.numCompletedTasks}/{i.numTasks} tasks"
                for i in infos
                if i is not None
            ]
            if running:
                log(f"  {stage}: {', '.join(running)} ({time.monotonic() - t0:.0f} s)")

    t = threading.Thread(target=watch, name="audit-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        sc.setJobDescription(described)
        stop.set()
        t.join(1)
        log(f"{stage} done in {time.monotonic() - t0:.1f} s")
