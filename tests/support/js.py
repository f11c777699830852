"""kafkajs consumers (tests/js/consumer.js) as OS processes, seen from the test.

`ensure_node_modules()` installs the locked kafkajs into tests/js/node_modules (`npm ci`) when it
is missing or older than package-lock.json; a missing node or npm, or a failed install, fails the
test loudly (never a skip). `JsConsumer` runs one driver process: its JSON events are collected
by a reader thread into a shared `Hub`, commands go to its stdin.
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

from tests.support.consumers import Hub
from tests.support.nodes import ROOT

JS_DIR = ROOT / "tests" / "js"
DRIVER = JS_DIR / "consumer.js"
LOCK = JS_DIR / "package-lock.json"
MODULES = JS_DIR / "node_modules"
# npm ci writes this file last: its time says when the install finished
INSTALLED = MODULES / ".package-lock.json"


def node_binary() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the kafkajs tests need Node.js (>= 14) and npm")
    return node


def ensure_node_modules() -> None:
    """`npm ci` into tests/js/node_modules unless it is there and newer than the lock file."""
    node_binary()
    if INSTALLED.exists() and INSTALLED.stat().st_mtime >= LOCK.stat().st_mtime:
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is not installed: the kafkajs tests install kafkajs with `npm ci`")
    cmd = [npm, "ci", "--no-audit", "--no-fund"]
    try:
        done = subprocess.run(
            cmd, cwd=JS_DIR, capture_output=True, text=True, timeout=300, check=False
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"`{' '.join(cmd)}` in {JS_DIR} timed out after 300 s:\n{e.stdout}\n{e.stderr}")
    if done.returncode != 0 or not INSTALLED.exists():
        pytest.fail(
            f"`{' '.join(cmd)}` in {JS_DIR} failed (exit {done.returncode}):\n"
            f"{done.stdout}\n{done.stderr}"
        )


class JsConsumer:
    """One kafkajs consumer process in group `group`, subscribed to `topic`."""

    def __init__(
        self, hub: Hub, workdir: Path, bootstrap: str, group: str, topic: str, name: str
    ) -> None:
        self.hub = hub
        self.name = name
        self.group = group
        self.events: list[dict[str, Any]] = []
        self.stderr_path = workdir / f"kafkajs-{name}.stderr"
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed by kill()
        self.proc = subprocess.Popen(
            [node_binary(), str(DRIVER), bootstrap, group, topic, name],
            cwd=JS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,  # a test's Ctrl-C does not reach it; teardown kills it
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                ev = {"event": "garbage", "line": raw.decode(errors="replace"), "t": time.time()}
            with self.hub.cond:
                self.events.append(ev)
                self.hub.cond.notify_all()
        with self.hub.cond:
            self.events.append({"event": "exited", "t": time.time()})
            self.hub.cond.notify_all()

    # --- state ---------------------------------------------------------------------------

    def mark(self) -> int:
        with self.hub.cond:
            return len(self.events)

    def since(self, mark: int, *kinds: str) -> list[dict[str, Any]]:
        with self.hub.cond:
            evs = self.events[mark:]
        return [e for e in evs if not kinds or e["event"] in kinds]

    def last_join(self) -> dict[str, Any] | None:
        joins = self.since(0, "group_join")
        return joins[-1] if joins else None

    def joined(self) -> dict[str, Any]:
        """Its latest group_join (it must have joined)."""
        join = self.last_join()
        assert join is not None, f"kafkajs consumer {self.name} never joined\n{self.describe()}"
        return join

    @property
    def assignment(self) -> frozenset[int]:
        join = self.last_join()
        return frozenset(join["assignment"]) if join else frozenset()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # --- driving -------------------------------------------------------------------------

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise AssertionError(
                f"cannot send {line!r}: kafkajs consumer {self.name} is gone\n{self.describe()}"
            ) from None

    def wait_event(
        self,
        kind: str,
        timeout: float,
        after: int = 0,
        pred: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        """The first `kind` event after `after` that `pred` accepts; an AssertionError when the
        consumer reports an error or exits first."""

        def find() -> dict[str, Any] | None:
            for e in self.since(after):
                if e["event"] == kind and (pred is None or pred(e)):
                    return e
                if e["event"] in ("error", "exited"):
                    raise AssertionError(
                        f"kafkajs consumer {self.name}: {e} while waiting for {kind}\n"
                        + self.describe()
                    )
            return None

        got: dict[str, Any] = self.hub.wait_until(find, timeout, f"{self.name}: event {kind}")
        return got

    def command(self, line: str, reply: str, timeout: float = 30.0) -> dict[str, Any]:
        m = self.mark()
        self.send(line)
        return self.wait_event(reply, timeout, after=m)

    def commit(self, offsets: dict[int, int], timeout: float = 30.0) -> dict[str, Any]:
        arg = ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))
        return self.command(f"commit {arg}", "committed", timeout)

    def fetch(self, timeout: float = 30.0) -> dict[int, int]:
        """The group's committed offsets as kafkajs's admin.fetchOffsets reads them."""
        ev = self.command("fetch", "offsets", timeout)
        return {int(p): o for p, o in ev["offsets"].items()}

    def quit(self, timeout: float = 30.0) -> None:
        self.command("quit", "closed", timeout)
        self.proc.wait(timeout)

    def kill(self) -> None:
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)
        self._stderr.close()

    # --- diagnostics ---------------------------------------------------------------------

    def describe(self, log_lines: int = 60) -> str:
        evs = [e for e in self.since(0) if e["event"] != "heartbeat"]
        beats = self.since(0, "heartbeat")
        try:
            log = self.stderr_path.read_text(errors="replace").splitlines()[-log_lines:]
        except OSError:
            log = []
        return (
            f"--- kafkajs consumer {self.name} (group={self.group}, rc={self.proc.poll()}, "
            f"{len(beats)} heartbeats, last {beats[-1] if beats else None})\n"
            + "\n".join("  " + json.dumps(e) for e in evs)
            + "\n--- kafkajs log:\n"
            + "\n".join(ln[:400] for ln in log)
        )
