"""Real-record consumers and producers of every client library as OS processes, seen from the
test (tests/gateway/test_clients.py).

One protocol for all of them (tests/support/record_client.py's docstring): kafka-python, aiokafka
and confluent-kafka run tests/support/record_client.py, kafkajs tests/js/records.js, Apache
Kafka's Java client tests/support/RecordClient.java (compiled here with javac against
tests/java's jars: the `java_build` fixture must have run). `RecordConsumer` collects a driver's
JSON events by a reader thread; `RecordGroup` is what the tests check on a group of them: every
record read, how often, where each partition's reading started after a mark, what was committed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.support.nodes import ROOT

CLIENTS = ("kafka-python", "aiokafka", "confluent", "kafkajs", "java")
# the libraries that send group.instance.id (KIP-345); kafkajs 2.2 has no static membership
STATIC = {"kafka-python": True, "aiokafka": True, "confluent": True, "kafkajs": False, "java": True}

JAVA_SOURCE = ROOT / "tests" / "support" / "RecordClient.java"
JS_DRIVER = ROOT / "tests" / "js" / "records.js"
JVM_OPTS = ["-Xms32m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"]

_java_lock = threading.Lock()
_java_classes: Path | None = None


def java_classes() -> Path:
    """RecordClient.java compiled (once per test process) into a temporary directory."""
    global _java_classes
    from tests.support.java import LIB

    with _java_lock:
        if _java_classes is None:
            out = Path(tempfile.mkdtemp(prefix="record-client-"))
            cmd = ["javac", "-nowarn", "-d", str(out), "-cp", f"{LIB}/*", str(JAVA_SOURCE)]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
            _java_classes = out
        return _java_classes


def command(client: str, mode: str, *args: str) -> list[str]:
    if client in ("kafka-python", "aiokafka", "confluent"):
        return [sys.executable, "-m", "tests.support.record_client", client, mode, *args]
    if client == "kafkajs":
        from tests.support.js import ensure_node_modules, node_binary

        ensure_node_modules()
        return [node_binary(), str(JS_DRIVER), client, mode, *args]
    if client == "java":
        from tests.support.java import LIB

        return [
            "java", *JVM_OPTS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", f"{java_classes()}:{LIB}/*", "RecordClient", client, mode, *args,
        ]  # fmt: skip
    raise ValueError(f"unknown client {client}")


def produce(client: str, bootstrap: str, topic: str, start: int, count: int) -> None:
    """COUNT records "record-START".. through `bootstrap`, with `client`'s producer (acks=all)."""
    cmd = command(client, "produce", bootstrap, topic, str(start), str(count))
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    events = [json.loads(ln) for ln in r.stdout.splitlines() if ln.startswith("{")]
    produced = [e for e in events if e["event"] == "produced"]
    assert r.returncode == 0 and produced == [{**produced[0], "count": count}], (
        f"{client} producer rc={r.returncode}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    )


class RecordConsumer:
    """One consumer process in `group`; restartable (same name, instance and log file)."""

    def __init__(
        self,
        client: str,
        workdir: Path,
        bootstrap: str,
        topic: str,
        group: str,
        name: str,
        *,
        instance: str | None = None,
        session_timeout_ms: int = 10_000,
    ) -> None:
        self.client = client
        self.name = name
        self.instance = instance
        self.cond = threading.Condition()
        self.events: list[dict[str, Any]] = []
        self.stderr_path = workdir / f"{client}-{name}.stderr"
        self.args = command(
            client,
            "consume",
            bootstrap,
            topic,
            group,
            name,
            instance or "-",
            str(session_timeout_ms),
        )
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.start()

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None
        self.starts += 1
        with open(self.stderr_path, "ab") as err:
            err.write(f"--- start {self.starts}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                self.args,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                ev = {"event": "garbage", "line": raw.decode(errors="replace")}
            with self.cond:
                self.events.append(ev)
                self.cond.notify_all()
        with self.cond:
            self.events.append({"event": "exited", "rc": proc.wait(), "t": time.time()})
            self.cond.notify_all()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def mark(self) -> int:
        with self.cond:
            return len(self.events)

    def since(self, mark: int, *kinds: str) -> list[dict[str, Any]]:
        with self.cond:
            evs = self.events[mark:]
        return [e for e in evs if not kinds or e["event"] in kinds]

    def quit(self, timeout: float = 20.0) -> None:
        """`quit` on stdin (a clean close: a dynamic member leaves), SIGKILL after `timeout`."""
        if not self.alive:
            return
        assert self.proc is not None and self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.write(b"quit\n")
            self.proc.stdin.flush()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to its process group: no close, no LeaveGroup, no commit."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)

    def describe(self, tail: int = 40) -> str:
        evs = [e for e in self.since(0) if e["event"] != "records"]
        try:
            log = self.stderr_path.read_text(errors="replace").splitlines()[-tail:]
        except OSError:
            log = []
        return (
            f"--- {self.client} consumer {self.name} (instance {self.instance}, "
            f"rc={self.proc.poll() if self.proc else None})\n"
            + "\n".join("  " + json.dumps(e)[:300] for e in evs[-60:])
            + "\n--- its log:\n"
            + "\n".join(ln[:300] for ln in log)
        )


class RecordGroup:
    """The consumers of one group, and what the tests check on them."""

    def __init__(
        self,
        client: str,
        workdir: Path,
        bootstrap: str,
        topic: str,
        group: str,
        size: int = 3,
        *,
        static: bool | None = None,
        session_timeout_ms: int = 10_000,
    ) -> None:
        self.client = client
        self.workdir = workdir
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.static = STATIC[client] if static is None else static
        self.session_timeout_ms = session_timeout_ms
        self.members: list[RecordConsumer] = []
        for _ in range(size):
            self.add()

    def add(self) -> RecordConsumer:
        """One more member: consumer GROUP-c<i>, static instance GROUP-w<i>."""
        i = len(self.members)
        c = RecordConsumer(
            self.client,
            self.workdir,
            self.bootstrap,
            self.topic,
            self.group,
            f"{self.group}-c{i}",
            instance=f"{self.group}-w{i}" if self.static else None,
            session_timeout_ms=self.session_timeout_ms,
        )
        self.members.append(c)
        return c

    def __enter__(self) -> RecordGroup:
        return self

    def __exit__(self, *_exc: object) -> None:
        for c in self.members:
            c.kill()

    def marks(self) -> list[int]:
        return [c.mark() for c in self.members]

    def events(self, kind: str, marks: list[int] | None = None) -> list[tuple[str, dict[str, Any]]]:
        marks = marks or [0] * len(self.members)
        return [
            (c.name, e) for c, m in zip(self.members, marks, strict=True) for e in c.since(m, kind)
        ]

    def records(self, marks: list[int] | None = None) -> list[tuple[int, int, str]]:
        """Every record read (partition, offset, value), by every member, since `marks`."""
        return [(r[0], r[1], r[2]) for _, e in self.events("records", marks) for r in e["records"]]

    def committed(self) -> dict[int, int]:
        """Per partition, the highest offset a member says it committed."""
        out: dict[int, int] = {}
        for _, e in self.events("committed"):
            for p, o in e["offsets"].items():
                out[int(p)] = max(out.get(int(p), 0), o)
        return out

    def describe(self) -> str:
        return "\n".join(c.describe() for c in self.members)

    def wait(self, pred: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pred():
                return
            dead = [c for c in self.members if not c.alive and c.since(0, "exited")]
            if dead and any(c.since(0, "error") for c in dead):
                break
            time.sleep(0.1)
        raise AssertionError(f"{what}: not after {timeout:.0f} s\n{self.describe()}")

    def wait_consumed(self, values: Iterable[str], ends: dict[int, int], timeout: float) -> None:
        """Until every one of `values` is read and every partition committed up to `ends`."""
        want = set(values)

        def done() -> bool:
            seen = {v for _, _, v in self.records()}
            committed = self.committed()
            return want <= seen and all(committed.get(p, 0) >= o for p, o in ends.items() if o)

        try:
            self.wait(done, timeout, f"{self.client} group {self.group}: all read and committed")
        except AssertionError as e:
            seen = {v for _, _, v in self.records()}
            missing = sorted(want - seen)
            raise AssertionError(
                f"{len(missing)} of {len(want)} never read (e.g. {missing[:5]}); committed "
                f"{self.committed()} of {ends}\n{e}"
            ) from None

    def wait_assigned(
        self, partitions: int, timeout: float = 60, marks: list[int] | None = None
    ) -> None:
        """Until every member has had an assignment since `marks` and, by their latest ones,
        together they own each of the topic's `partitions` exactly once."""

        def done() -> bool:
            latest = []
            for c, m in zip(self.members, marks or [0] * len(self.members), strict=True):
                got = c.since(m, "assigned")
                if not got:
                    return False
                latest.append(got[-1])
            owned = [p for e in latest for p in e["partitions"]]
            return sorted(owned) == list(range(partitions))

        self.wait(done, timeout, f"{self.client} group {self.group}: every member assigned")

    def quit(self) -> None:
        for c in self.members:
            c.quit()
