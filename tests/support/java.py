"""The Java side of the real-client tests: Apache Kafka's own consumer (kafka-clients 4.x, driven
by tests/java/src/main/java/coord/ConsumerDriver.java) and kafka-consumer-groups
(`ConsumerGroupCommand` from kafka-tools 4.x).

`tests/java/pom.xml` is resolved and built on first use, into tests/java/target (ignored), by the
session fixture `java_build`: `mvn package dependency:copy-dependencies`. It does nothing when the
jar and target/lib are newer than the pom and every Java source, and target/lib's stamp names the
pom's Kafka version and hash; the dependencies go to a fresh folder that then replaces target/lib
(an older kafka.version's jars never share the classpath with the new). A missing `java` or
`mvn`, or a failing build, fails the test loudly (never a skip): CI must not pass by not running
these.

`JavaConsumerProcess` is tests/support/consumers.py's `ConsumerProcess` with a JVM behind it: the
Java driver takes the Python driver's command line and prints the same JSON events, so the
Python side's Hub, waits and commands work unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.support.consumers import ConsumerProcess, Consumers, Hub, driver_args
from tests.support.kafka_broker import pom_stamp, stamp_current, swap_in
from tests.support.nodes import ROOT

JAVA_DIR = ROOT / "tests" / "java"
TARGET = JAVA_DIR / "target"
JAR = TARGET / "java-clients-1.jar"
LIB = TARGET / "lib"
STAMP = LIB / ".complete"  # written after copy-dependencies succeeded
DRIVER_CLASS = "coord.ConsumerDriver"
TOOL_CLASS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
JVM_OPTS = ["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]

_lock = threading.Lock()


def _sources() -> list[Path]:
    return [JAVA_DIR / "pom.xml", *sorted((JAVA_DIR / "src").rglob("*.java"))]


def up_to_date() -> bool:
    if not (JAR.exists() and STAMP.exists()):
        return False
    built = min(JAR.stat().st_mtime, STAMP.stat().st_mtime)
    fresh = all(p.stat().st_mtime <= built for p in _sources())
    return fresh and stamp_current(STAMP, pom_stamp(JAVA_DIR / "pom.xml"))


def build() -> None:
    """Resolve and build tests/java unless it is up to date; pytest.fail with the output when a
    tool is missing or the build fails."""
    with _lock:
        missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
        if missing:
            pytest.fail(
                f"{' and '.join(missing)} not found on PATH: the Java client tests need Java 17+ "
                "and Maven 3.8+ (e.g. apt-get install openjdk-17-jdk-headless maven)",
                pytrace=False,
            )
        if up_to_date():
            return
        STAMP.unlink(missing_ok=True)
        fresh = LIB.with_name(f"lib.new-{os.getpid()}")
        shutil.rmtree(fresh, ignore_errors=True)
        cmd = [
            "mvn", "-q", "-B", "-f", str(JAVA_DIR / "pom.xml"), "package",
            "dependency:copy-dependencies", f"-DoutputDirectory={fresh}",
        ]  # fmt: skip
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired as e:
            pytest.fail(f"{' '.join(cmd)} timed out:\n{e.stdout!r}\n{e.stderr!r}", pytrace=False)
        if r.returncode != 0 or not JAR.exists():
            pytest.fail(
                f"{' '.join(cmd)} failed (rc={r.returncode}):\n{r.stdout[-20000:]}\n"
                f"{r.stderr[-20000:]}",
                pytrace=False,
            )
        (fresh / STAMP.name).write_text(pom_stamp(JAVA_DIR / "pom.xml"))
        swap_in(fresh, LIB)


@pytest.fixture(scope="session")
def java_build() -> None:
    build()


def classpath() -> str:
    return f"{JAR}:{LIB}/*"


def java_command(main_class: str, *args: str, log_level: str = "info") -> list[str]:
    return [
        "java", *JVM_OPTS, f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
        "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", classpath(), main_class, *args,
    ]  # fmt: skip


def consumer_groups(bootstrap: str, *args: str, timeout: float = 120.0) -> str:
    """kafka-consumer-groups.sh --bootstrap-server BOOTSTRAP ARGS...: its stdout; an
    AssertionError with stdout and stderr when it exits non-zero."""
    cmd = java_command(TOOL_CLASS, "--bootstrap-server", bootstrap, *args, log_level="warn")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    assert r.returncode == 0, f"kafka-consumer-groups {' '.join(args)} rc={r.returncode}:\n" + (
        f"{r.stdout}\n{r.stderr}"
    )
    return r.stdout


class JavaConsumerProcess(ConsumerProcess):
    """A ConsumerProcess whose process is a JVM running coord.ConsumerDriver."""

    def __init__(
        self,
        hub: Hub,
        workdir: Path,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        *,
        instance: str | None = None,
        strategy: str = "range",
        session_timeout_ms: int = 10000,
        heartbeat_interval_ms: int = 500,
        subscribe: bool = True,
        **options: str | int | bool | None,
    ) -> None:
        self.hub = hub
        self.client = "java"
        self.group = group
        self.name = name
        self.instance = instance
        self.events: list[dict[str, Any]] = []
        self.stderr_path = workdir / f"consumer-{name}.stderr"
        args = java_command(
            DRIVER_CLASS,
            "java",
            bootstrap,
            group,
            topic,
            *driver_args(
                instance=instance,
                strategy=strategy,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                client_id=name,
                no_subscribe=not subscribe,
                **options,
            ),
        )
        self._spawn(args)

    def client_log(self, n: int = 150) -> str:
        """The group coordination lines of the Java client's log."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        keep = ("ConsumerCoordinator", "AbstractCoordinator", "WARN", "ERROR", "Exception")
        lines = [ln for ln in text.splitlines() if any(k in ln for k in keep)]
        return "\n".join(ln[:400] for ln in lines[-n:])


def java_consumer(
    env: Consumers, group: str, name: str, topic: str, **kw: Any
) -> JavaConsumerProcess:
    """A Java consumer in `env` (its teardown kills it, its diagnostics describe it)."""
    env.groups.add(group)
    c = JavaConsumerProcess(
        env.hub, env.workdir, env.coord.bootstrap, group, topic, name, **{**env.defaults, **kw}
    )
    env.consumers.append(c)
    return c
