"""A local audit's JVM maps Spark's classes from the archive `make install` built
(pipeline/class_archive.py) instead of loading them from the jars."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pipeline import class_archive
from pipeline.spark import ROOT

SESSION = """
import sys
from pipeline.spark import build_session
spark = build_session("local[1]", extra_conf={"spark.driver.extraJavaOptions": sys.argv[1]})
assert spark.range(1000).selectExpr("sum(id)").collect()[0][0] == 499500
spark.stop()
"""


def classes_loaded(tmp_path: Path, java_options: str) -> dict[str, int]:
    """Where a session's Spark SQL classes came from: source -> classes."""
    trace = tmp_path / "classes.log"
    options = f"{java_options} -Xlog:class+load=info:file={trace}"
    subprocess.run([sys.executable, "-c", SESSION, options], cwd=ROOT, check=True, timeout=300)
    sources: dict[str, int] = {}
    for line in trace.read_text().splitlines():
        if " org.apache.spark.sql." in line and "source: " in line:
            source = line.split("source: ", 1)[1]
            if "shared objects file" in source:
                source = "archive"
            elif source.startswith(("jar:", "file:")):
                source = "jar"
            else:  # defined at run time (lambdas, generated code)
                source = "generated"
            sources[source] = sources.get(source, 0) + 1
    return sources


def test_a_local_session_maps_sparks_classes_from_the_archive(tmp_path: Path) -> None:
    path = class_archive.archive_path()
    assert path is not None, "no java"
    assert path.exists(), "`make spark-classes` (make install, make test) builds it"
    used = classes_loaded(tmp_path, class_archive.java_options())
    assert used.get("archive", 0) > 1000, used
    assert used.get("jar", 0) < used["archive"] / 10, used  # e.g. in signed jars


def test_a_session_without_the_archive_reads_the_jars(tmp_path: Path) -> None:
    # the other side of the test above: what the archive saves a cold session from
    used = classes_loaded(tmp_path, class_archive.QUIET)
    assert used.get("archive", 0) == 0 and used["jar"] > 1000, used
