"""A class-data-sharing archive of the classes an audit loads, for local Spark sessions.

A local audit's JVM starts cold: it loads, verifies and links some 20,000 classes of Spark's SQL
engine while the first queries run, and that counts in the audit's time. Java's dynamic CDS
archive (`-XX:ArchiveClassesAtExit`, then `-XX:SharedArchiveFile`) maps them pre-parsed and
verified instead, which shortens the session's start and the audit (the measurements:
bench/README_audit.md).

`make install` builds it (`python -m pipeline.class_archive`) by auditing a small generated log
once, in the virtualenv, named after what it was made from (Spark's jars, the JVM), so an
upgrade of either builds a new one. The JVM checks the archive itself and runs without it,
silently, when it does not match; a missing archive only means a slower start.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# the JVM's own words about the archive (e.g. the signed jars it skips) are not ours to print
QUIET = "-Xlog:cds*=off"

WORKLOAD = """
import sys
from pyspark import SparkContext
from pipeline.audit import run_audit
from pipeline.spark import build_session
spark = build_session("local[2]", extra_conf={"spark.driver.extraJavaOptions": sys.argv[3]})
run_audit(spark, sys.argv[1], sys.argv[2])
jvm = SparkContext._gateway.proc
spark.stop()
# the JVM writes the archive as it exits, which it does when its stdin closes
jvm.stdin.close()
sys.exit(jvm.wait())
"""


def java_executable() -> str | None:
    """The `java` Spark's launcher runs: $JAVA_HOME's, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return str(Path(home, "bin", "java").resolve())
    found = shutil.which("java")
    return str(Path(found).resolve()) if found else None


def archive_path() -> Path | None:
    """Where the archive for this virtualenv's Spark and this JVM lives (None: no java)."""
    java = java_executable()
    if java is None:
        return None
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    modules = Path(java).parents[1] / "lib" / "modules"  # the JDK's own classes
    h = hashlib.sha256()
    h.update(f"{java}\n{pyspark.__version__}\n".encode())
    if modules.exists():
        st = modules.stat()
        h.update(f"{st.st_size} {st.st_mtime_ns}\n".encode())
    for jar in sorted(jars.glob("*.jar")):
        h.update(f"{jar.name} {jar.stat().st_size}\n".encode())
    return Path(sys.prefix) / "spark-classes" / f"{h.hexdigest()[:16]}.jsa"


def java_options() -> str:
    """What a local session's JVM adds to use the archive ("" when there is none)."""
    path = archive_path()
    if path is None or not path.exists():
        return ""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build() -> str:
    """Build the archive unless it exists; what was done, in a few words."""
    path = archive_path()
    if path is None:
        return "no java: local audits start without a class archive"
    if path.exists():
        return f"up to date ({path})"
    from pipeline.generate import main as generate

    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob("*.jsa"):  # another Spark's or JVM's
        stale.unlink()
    with tempfile.TemporaryDirectory(prefix="class-archive-") as work:
        log_dir, out = Path(work, "log"), Path(work, "audit")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            generate(["--out", str(log_dir), "--records", "20000"])
        part = path.with_name(f"{path.stem}.{os.getpid()}.part")  # same filesystem: renamed
        # which JIT runs makes no difference to the classes loaded
        options = f"-XX:ArchiveClassesAtExit={part} {QUIET}"
        done = subprocess.run(
            [sys.executable, "-c", WORKLOAD, str(log_dir), str(out), options],
            cwd=Path(__file__).resolve().parents[1],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        if done.returncode != 0 or not part.exists():
            part.unlink(missing_ok=True)
            raise RuntimeError(f"building the class archive failed:\n{done.stderr[-4000:]}")
        part.replace(path)  # whole or not at all: a session never maps a half-written one
    return f"built ({path}, {path.stat().st_size >> 20} MiB)"


if __name__ == "__main__":
    print("Spark class archive:", build())
