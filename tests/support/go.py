"""The Go side of the real-client tests: franz-go (kgo) and IBM/sarama consumers
(tests/go/cmd/kgoconsumer, tests/go/cmd/saramaconsumer), and franz-go's own pkg/kgo tests.

The versions are pinned in tests/go/go.mod and go.sum. `download()` fetches the modules
(`go mod download`, the `make deps` step); `build()` builds the consumers into tests/go/bin
(ignored) unless every binary there is newer than every Go source, go.mod and go.sum. Each
build goes to a fresh folder whose binaries then replace the old ones by rename, so a
process starting meanwhile runs one build or the other. A missing `go` or a failing command
fails the test loudly with go's output (never a skip): CI must not pass by not running these.

`GoConsumer` runs one consumer process: its JSON lines (tests/go/internal/events) are read by
a thread into `events`; `stop()` is a SIGTERM (a clean close), `kill()` a SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.nodes import ROOT, die_with_parent

GO_DIR = ROOT / "tests" / "go"
BIN = GO_DIR / "bin"
COMMANDS = ("kgoconsumer", "saramaconsumer")

_lock = threading.Lock()


def go_binary() -> str:
    go = shutil.which("go")
    if go is None:
        pytest.fail(
            "go not found on PATH: the Go client tests need Go 1.26+ (https://go.dev/dl/)",
            pytrace=False,
        )
    return go


def go_env() -> dict[str, str]:
    """The caller's environment, pinned to the local toolchain and to go.sum as it is (a
    build never edits go.mod or downloads another Go)."""
    return {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=readonly"}


def run_go(*args: str, timeout: float = 900.0, cwd: Path = GO_DIR) -> str:
    """`go ARGS...` in tests/go: its output; pytest.fail with the output when it fails."""
    cmd = [go_binary(), *args]
    try:
        r = subprocess.run(
            cmd, cwd=cwd, env=go_env(), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{' '.join(cmd)} timed out:\n{e.stdout!r}\n{e.stderr!r}", pytrace=False)
    if r.returncode != 0:
        pytest.fail(
            f"{' '.join(cmd)} failed (rc={r.returncode}):\n{r.stdout[-20000:]}\n"
            f"{r.stderr[-20000:]}",
            pytrace=False,
        )
    return r.stdout + r.stderr


def download() -> None:
    """The modules of go.mod, test-only ones included, into Go's module cache."""
    with _lock:
        run_go("mod", "download")


def _sources() -> list[Path]:
    return [GO_DIR / "go.mod", GO_DIR / "go.sum", *sorted(GO_DIR.rglob("*.go"))]


def up_to_date() -> bool:
    built = [BIN / name for name in COMMANDS]
    if not all(p.exists() for p in built):
        return False
    oldest = min(p.stat().st_mtime for p in built)
    return all(p.stat().st_mtime <= oldest for p in _sources())


def build() -> None:
    """Build tests/go's commands into tests/go/bin unless they are up to date."""
    with _lock:
        go_binary()
        if up_to_date():
            return
        BIN.mkdir(exist_ok=True)
        fresh = BIN / f".new-{os.getpid()}"
        shutil.rmtree(fresh, ignore_errors=True)
        try:
            run_go("build", "-o", str(fresh) + os.sep, "./cmd/...")
            for name in COMMANDS:
                os.replace(fresh / name, BIN / name)
        finally:
            shutil.rmtree(fresh, ignore_errors=True)


@pytest.fixture(scope="session")
def go_build() -> None:
    build()


class GoConsumer:
    """One tests/go consumer process (`command`: kgoconsumer or saramaconsumer) in `group`,
    consuming `topic` through `bootstrap`."""

    def __init__(
        self,
        command: str,
        workdir: Path,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        *,
        balancer: str = "range",
        instance: str | None = None,
        session_timeout_ms: int = 10_000,
    ) -> None:
        self.command = command
        self.name = name
        self.events: list[dict[str, Any]] = []
        self.ended_at: float | None = None  # wall-clock time it was killed or exited
        self._lock = threading.Lock()
        self.stderr_path = workdir / f"{command}-{name}.stderr"
        args = [
            str(BIN / command), "-brokers", bootstrap, "-group", group, "-topic", topic,
            "-name", name, "-balancer", balancer, "-session-timeout", f"{session_timeout_ms}ms",
        ]  # fmt: skip
        if instance is not None:
            args += ["-instance", instance]
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                args,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                self.events.append(event)
        with self._lock:
            if self.ended_at is None:
                self.ended_at = time.time()

    def named(self, *names: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e["event"] in names]

    def values(self) -> set[str]:
        return {e["value"] for e in self.named("record")}

    def owned(self) -> set[int]:
        """The partitions it owns now, by its events."""
        held: set[int] = set()
        for e in self.named("assigned", "revoked", "lost"):
            if e["event"] == "assigned":
                held |= set(e["partitions"])
            else:
                held -= set(e["partitions"])
        return held if self.alive else set()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM: it commits, closes its client and exits; SIGKILL if it does not in time."""
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self._reader.join(10)

    def kill(self) -> None:
        """SIGKILL: what it owned is owned by no live process from now on."""
        if self.alive:
            with self._lock:
                self.ended_at = time.time()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(10)

    def tail(self, n: int = 40) -> str:
        with self._lock:
            events = [e for e in self.events if e["event"] != "record"][-n:]
        try:
            err = self.stderr_path.read_text(errors="replace")[-3000:]
        except OSError:
            err = ""
        lines = "\n".join(json.dumps(e) for e in events)
        return f"--- {self.command} {self.name} (rc={self.proc.poll()})\n{lines}\n{err}"


def ownership_overlaps(consumers: list[GoConsumer]) -> list[str]:
    """Every time two processes owned a partition at once, by their events' clocks: an
    ownership runs from "assigned" to "revoked" or "lost" (or to the process's end)."""
    spans: dict[int, list[tuple[float, float, str]]] = {}
    for c in consumers:
        start: dict[int, float] = {}
        for e in c.named("assigned", "revoked", "lost"):
            for p in e["partitions"]:
                if e["event"] == "assigned":
                    start.setdefault(p, e["t"])
                elif p in start:
                    spans.setdefault(p, []).append((start.pop(p), e["t"], c.name))
        end = c.ended_at if c.ended_at is not None else float("inf")
        for p, t in start.items():
            spans.setdefault(p, []).append((t, end, c.name))
    found = []
    for p, held in sorted(spans.items()):
        held.sort()
        last_end, last_name = float("-inf"), ""
        for start_t, end_t, name in held:
            if start_t < last_end:
                found.append(
                    f"partition {p}: {last_name} until {last_end:.3f}, {name} from {start_t:.3f}"
                )
            if end_t > last_end:
                last_end, last_name = end_t, name
    return found


def wait_for(pred: Callable[[], bool], timeout: float, what: str, *diag: GoConsumer) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout} s\n" + "\n".join(c.tail() for c in diag))
