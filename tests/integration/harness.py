"""Run real `coordinator serve` processes for end-to-end tests."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.group.consumer_protocol import decode_assignment
from app.group.records import GroupMetadataValue, decode_group_key, decode_group_value
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the test or benchmark process dies, so a
    killed run leaves no node behind to join the next run's cluster (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class CoordinatorProcess:
    """A coordinator node in its own OS process; restartable on the same database."""

    db_url: str
    workdir: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    kafka_port: int = field(default_factory=free_port)
    admin_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def db_path(self) -> Path:
        return Path(self.db_url.split(":///", 1)[1])

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.admin_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            COORD_DATABASE_URL=self.db_url,
            COORD_KAFKA_LISTEN=self.bootstrap,
            COORD_ADMIN_LISTEN=f"127.0.0.1:{self.admin_port}",
            COORD_INITIAL_REBALANCE_DELAY_MS="300",
            COORD_LOG_PARTITIONS="4",
            COORD_LOG_LEVEL="INFO",
        )
        env.update(self.env_overrides)
        return env

    def start(self, wait_ready: bool = True) -> None:
        self.starts += 1
        log = open(self.workdir / f"coordinator-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve"],
            cwd=ROOT,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        if wait_ready:
            self.wait_ready()

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                code = self.proc.returncode
                raise RuntimeError(f"coordinator exited with {code}:\n{self.logs()}")
            try:
                with urllib.request.urlopen(self.admin_url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"coordinator not ready after {timeout}s:\n{self.logs()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, wait_ready: bool = True) -> None:
        """SIGKILL, then start again on the same database and the same ports."""
        self.kill()
        self.start(wait_ready)

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(
            f"--- {p.name} (last {tail} chars)\n" + p.read_text(errors="replace")[-tail:]
            for p in sorted(self.workdir.glob("coordinator-*.log"))
        )

    def admin_get(self, path: str) -> object:
        with urllib.request.urlopen(self.admin_url + path, timeout=5) as r:
            return json.loads(r.read())


@contextmanager
def coordinator(tmp_path: Path, **env: str) -> Iterator[CoordinatorProcess]:
    node = CoordinatorProcess(f"sqlite+aiosqlite:///{tmp_path}/coordinator.db", tmp_path, env)
    node.start()
    try:
        yield node
    finally:
        node.stop()


# ==== real consumer processes ====================================================================

CONSUMER_PROC = Path(__file__).resolve().with_name("consumer_proc.py")
TOPIC = "t6"  # the topic every consumer subscribes to (registered through COORD_TOPICS)
PARTITIONS = 6


class Hub:
    """One condition variable shared by every consumer of a test: any event wakes the waiters,
    so a test can wait for a predicate over several consumers without polling loops."""

    def __init__(self) -> None:
        self.cond = threading.Condition()

    def wait_until(self, pred: Callable[[], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = pred()
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}")
                # wake up at least every 0.25 s: predicates may also look at the database
                self.cond.wait(min(left, 0.25))


class WaitTimeout(AssertionError):
    pass


class ConsumerProcess:
    """tests/integration/consumer_proc.py in its own OS process; its JSON events are collected
    by a reader thread. `owned` is the partition set implied by its assigned/revoked events."""

    def __init__(
        self,
        hub: Hub,
        workdir: Path,
        client: str,
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
    ) -> None:
        self.hub = hub
        self.client = client
        self.name = name
        self.instance = instance
        self.events: list[dict[str, Any]] = []
        self.stderr_path = workdir / f"consumer-{name}.stderr"
        args = [
            sys.executable, str(CONSUMER_PROC), client, bootstrap, group, topic,
            "--strategy", strategy,
            "--session-timeout-ms", str(session_timeout_ms),
            "--heartbeat-interval-ms", str(heartbeat_interval_ms),
            "--client-id", name,
        ]  # fmt: skip
        if instance:
            args += ["--instance", instance]
        if not subscribe:
            args.append("--no-subscribe")
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
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
                ev = {"event": "garbage", "line": raw.decode(errors="replace")}
            ev["who"] = self.name
            with self.hub.cond:
                self.events.append(ev)
                self.hub.cond.notify_all()
        with self.hub.cond:
            self.events.append({"event": "exited", "who": self.name, "t": time.time()})
            self.hub.cond.notify_all()

    # --- state derived from events ---------------------------------------------------------

    def mark(self) -> int:
        """A cursor: events after it are the ones that happen from now on."""
        with self.hub.cond:
            return len(self.events)

    def since(self, mark: int, *kinds: str) -> list[dict[str, Any]]:
        with self.hub.cond:
            evs = self.events[mark:]
        return [e for e in evs if not kinds or e["event"] in kinds]

    @property
    def owned(self) -> frozenset[int]:
        with self.hub.cond:
            owned: set[int] = set()
            for e in self.events:
                if e["event"] == "assigned":
                    owned |= set(e["partitions"])
                elif e["event"] == "revoked":
                    owned -= set(e["partitions"])
            return frozenset(owned)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        if not self.alive or any(e["event"] in ("exited", "error") for e in self.since(0)):
            bad = [e for e in self.since(0) if e["event"] in ("error", "exited")]
            raise AssertionError(f"consumer {self.name} failed: {bad}\n{self.stderr_tail()}")

    # --- driving ---------------------------------------------------------------------------

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            bad = [e for e in self.since(0) if e["event"] in ("error", "exited")]
            raise AssertionError(
                f"cannot send {line!r}: consumer {self.name} is gone {bad}\n{self.stderr_tail()}"
            ) from None

    def wait_event(
        self,
        kind: str,
        timeout: float,
        after: int = 0,
        pred: Callable[[dict[str, Any]], bool] | None = None,
    ) -> dict[str, Any]:
        def find() -> dict[str, Any] | None:
            for e in self.events[after:]:
                if e["event"] == kind and (pred is None or pred(e)):
                    return e
                if e["event"] == "error" or e["event"] == "exited":
                    raise AssertionError(
                        f"consumer {self.name}: {e} while waiting for {kind}\n{self.stderr_tail()}"
                    )
            return None

        return self.hub.wait_until(find, timeout, f"{self.name}: event {kind}")  # type: ignore[no-any-return]

    def command(self, line: str, reply: str, timeout: float = 30.0) -> dict[str, Any]:
        m = self.mark()
        self.send(line)
        return self.wait_event(reply, timeout, after=m)

    def commit(self, offset: int, timeout: float = 30.0) -> dict[str, Any]:
        return self.command(f"commit {offset}", "committed", timeout)

    def committed(
        self, partitions: Iterable[int] | None = None, timeout: float = 30.0
    ) -> dict[int, int | None]:
        arg = ",".join(str(p) for p in sorted(partitions)) if partitions is not None else ""
        ev = self.command(f"committed {arg}".strip(), "offsets", timeout)
        return {int(p): o for p, o in ev["offsets"].items()}

    def close(self, timeout: float = 30.0) -> None:
        self.command("close", "closed", timeout)
        self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the consumer's process group (it runs in a session of its own)."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)
        self._stderr.close()

    def stderr_tail(self, n: int = 6000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def describe(self) -> str:
        evs = "\n".join(
            "  " + json.dumps({k: v for k, v in e.items() if k != "who"}) for e in self.since(0)
        )
        return (
            f"--- consumer {self.name} ({self.client}, instance={self.instance}, "
            f"rc={self.proc.poll()}) owned={sorted(self.owned)}\n{evs}\n"
            f"--- stderr tail:\n{self.stderr_tail()}"
        )


# ==== reading the event log ======================================================================


@dataclass(frozen=True)
class GroupRecord:
    partition: int
    offset: int
    value: GroupMetadataValue | None  # None = tombstone

    @property
    def generation(self) -> int:
        return -1 if self.value is None else self.value.generation

    def assignments(self) -> dict[str, frozenset[int]]:
        """client_id -> partitions (of every topic) assigned in this record."""
        out: dict[str, frozenset[int]] = {}
        if self.value is None:
            return out
        for m in self.value.members:
            ps: set[int] = set()
            if m.assignment:
                for _topic, parts in decode_assignment(m.assignment).partitions:
                    ps |= set(parts)
            out[m.client_id] = frozenset(ps)
        return out

    def instances(self) -> dict[str, str]:
        """group_instance_id -> member_id."""
        if self.value is None:
            return {}
        return {m.group_instance_id: m.member_id for m in self.value.members if m.group_instance_id}


def group_records(db_path: Path, group: str) -> list[GroupRecord]:
    """Every GROUP_METADATA record of `group` in log order (the group lives in one partition)."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute(
            'SELECT "partition", "offset", key, value FROM log_records '
            'WHERE record_type = 1 ORDER BY "partition", "offset"'
        ).fetchall()
    finally:
        con.close()
    out = []
    for part, off, key, value in rows:
        if decode_group_key(bytes(key)) != group:
            continue
        out.append(GroupRecord(part, off, None if value is None else decode_group_value(value)))
    return out


def generations(db_path: Path, group: str) -> list[int]:
    """Generations of the group's metadata records in log order; asserts they never decrease."""
    gens = [r.generation for r in group_records(db_path, group) if r.value is not None]
    assert gens == sorted(gens), f"generation went backwards in the log of {group}: {gens}"
    return gens
