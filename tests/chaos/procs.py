"""OS processes of a chaos run: coordinator nodes and real consumers.

Every child is started in its own session (a Ctrl-C of the test does not reach it) and is
SIGKILLed by `kill()`; the scenario's teardown calls it for each one, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CONSUMER_SCRIPT = Path(__file__).resolve().with_name("consumer.py")


class Node:
    """One `coordinator serve` process; restartable on the same database, ports and node id."""

    def __init__(self, node_id: int, db_url: str, workdir: Path, env: dict[str, str]) -> None:
        self.node_id = node_id
        self.db_url = db_url
        self.workdir = workdir
        self.env_overrides = env
        self.kafka_port = free_port()
        self.admin_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stopped = False  # SIGSTOPped
        self._logs: list[Path] = []

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.kafka_port)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
        env.update(
            COORD_NODE_ID=str(self.node_id),
            COORD_DATABASE_URL=self.db_url,
            COORD_KAFKA_LISTEN=self.bootstrap,
            COORD_ADMIN_LISTEN=f"127.0.0.1:{self.admin_port}",
            PYTHONUNBUFFERED="1",
        )
        env.update(self.env_overrides)
        return env

    def start(self, wait_ready: bool = True, timeout: float = 30.0) -> None:
        self.starts += 1
        path = self.workdir / f"node{self.node_id}-{self.starts}.log"
        self._logs.append(path)
        with open(path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve"],
                cwd=ROOT,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.stopped = False
        if wait_ready:
            self.wait_ready(timeout)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def live(self) -> bool:
        """Running and not paused."""
        return self.running and not self.stopped

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"node {self.node_id} exited with {self.proc.returncode}:\n{self.logs()}"
                )
            try:
                with urllib.request.urlopen(self.admin_url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (OSError, urllib.error.HTTPError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"node {self.node_id} not ready after {timeout}s:\n{self.logs()}")

    def kill(self) -> None:
        """SIGKILL (no shutdown code runs); also resumes nothing: a stopped process dies too."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.stopped = False

    def sigstop(self) -> None:
        assert self.proc is not None and self.running
        os.kill(self.proc.pid, signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
        self.stopped = False

    def get(self, path: str, timeout: float = 2.0) -> Any:
        with urllib.request.urlopen(self.admin_url + path, timeout=timeout) as r:
            return json.loads(r.read())

    def cluster(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """This node's /cluster view, or None if it does not answer."""
        if not self.live:
            return None
        try:
            view: dict[str, Any] = self.get("/cluster", timeout)
            return view
        except (OSError, ValueError):
            return None

    def logs(self, tail: int = 6000) -> str:
        return "\n".join(
            f"--- {p.name} (last {tail} chars)\n" + p.read_text(errors="replace")[-tail:]
            for p in self._logs
            if p.exists()
        )

    def log_text(self) -> str:
        return "".join(p.read_text(errors="replace") for p in self._logs if p.exists())


class Consumer:
    """tests/chaos/consumer.py in its own process; its JSON events are collected by a thread."""

    def __init__(
        self,
        workdir: Path,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        name: str,
        *,
        instance: str | None = None,
        session_timeout_ms: int = 15000,
        heartbeat_interval_ms: int = 1000,
        debug: str = "",
    ) -> None:
        self.client = client
        self.group = group
        self.name = name
        self.instance = instance
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stderr_path = workdir / f"consumer-{name}.stderr"
        args = [
            sys.executable, str(CONSUMER_SCRIPT), client, bootstrap, group, topic,
            "--session-timeout-ms", str(session_timeout_ms),
            "--heartbeat-interval-ms", str(heartbeat_interval_ms),
            "--client-id", name,
        ]  # fmt: skip
        if instance:
            args += ["--instance", instance]
        if debug:
            args += ["--debug", debug]
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                args,
                cwd=ROOT,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
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
            with self.lock:
                self.events.append(ev)
        with self.lock:
            self.events.append({"event": "exited", "t": time.time()})

    def snapshot(self, *kinds: str) -> list[dict[str, Any]]:
        with self.lock:
            return [e for e in self.events if not kinds or e["event"] in kinds]

    @property
    def owned(self) -> frozenset[int]:
        owned: set[int] = set()
        for e in self.snapshot("assigned", "revoked"):
            if e["event"] == "assigned":
                owned |= set(e["partitions"])
            else:
                owned -= set(e["partitions"])
        return frozenset(owned)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def failure(self) -> str | None:
        bad = self.snapshot("error", "exited")
        if bad or not self.alive:
            return f"consumer {self.name} failed: {bad} rc={self.proc.poll()}\n{self.stderr_tail()}"
        return None

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the process died: failure() reports it

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def describe(self, last: int = 60) -> str:
        evs = [e for e in self.snapshot() if e["event"] not in ("stats", "commit_skipped")]
        stats = self.snapshot("stats")
        lines = "\n".join("  " + json.dumps(e) for e in evs[-last:])
        tail_stats = json.dumps(stats[-1]) if stats else "-"
        return (
            f"--- consumer {self.name} ({self.client}, group={self.group}, "
            f"instance={self.instance}, rc={self.proc.poll()}) owned={sorted(self.owned)}\n"
            f"  last stats: {tail_stats}\n{lines}\n--- client log (group events):\n"
            f"{self.client_log()}"
        )

    def gave_up(self) -> tuple[float, str] | None:
        """(unix time, line) of the first time librdkafka gave up on its group by itself:
        a client-side session timeout (SESSTMOUT) or a fatal error; None if it never did."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return None
        for ln in text.splitlines():
            parts = ln.split("|", 3)
            if len(parts) == 4 and parts[2] in ("SESSTMOUT", "FATAL"):
                try:
                    return float(parts[1]), ln[:400]
                except ValueError:
                    continue
        return None

    def client_log(self, n: int = 150) -> str:
        """The client's stderr; of librdkafka's debug log only the group-relevant lines."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""
        keep = (
            "|SESSTMOUT|", "|JOINGROUP|", "Joining group", "|SYNCGROUP|", "|FATAL|", "|FAIL|",
            "error response", "|COMMIT|", "|COORD|", "|CGRPCOORD|", "|REBALANCE|",
        )  # fmt: skip
        lines = [
            ln for ln in text.splitlines() if "|7|" not in ln[:4] or any(k in ln for k in keep)
        ]
        return "\n".join(ln[:300] for ln in lines[-n:])
