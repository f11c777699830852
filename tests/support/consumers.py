"""Real Kafka consumers (tests/support/consumer.py), each in its own OS process, seen from the
test: their JSON events collected by a reader thread, commands sent over stdin.

A `Hub` is shared by the consumers of a test: any event of any of them wakes the waiters, so a
test can wait for a predicate over several consumers without polling loops. `Consumers` is what
a test holds: the hub, the consumers it started, their teardown and the diagnostics of a
failure.
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from tests.support.eventlog import group_records
from tests.support.nodes import ROOT, CoordinatorProcess

DRIVER = "tests.support.consumer"
TOPIC = "t6"  # the topic the end-to-end tests subscribe to (registered through COORD_TOPICS)
PARTITIONS = 6


class WaitTimeout(AssertionError):
    pass


class Hub:
    """One condition variable shared by every consumer of a test."""

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


def driver_args(**options: str | int | bool | None) -> list[str]:
    """The driver's command-line options: `poll_ms=100` -> `--poll-ms 100`, `stats=True` ->
    `--stats`; None and False are left out."""
    out: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        out += [flag] if value is True else [flag, str(value)]
    return out


class ConsumerProcess:
    """One consumer process. `owned` is the partition set implied by its assigned/revoked
    events. `options` are the driver's further options (see its usage), as `driver_args`
    takes them."""

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
        **options: str | int | bool | None,
    ) -> None:
        self.hub = hub
        self.client = client
        self.group = group
        self.name = name
        self.instance = instance
        self.events: list[dict[str, Any]] = []
        self.stderr_path = workdir / f"consumer-{name}.stderr"
        args = [sys.executable, "-m", DRIVER, client, bootstrap, group, topic]
        args += driver_args(
            instance=instance,
            strategy=strategy,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            client_id=name,
            no_subscribe=not subscribe,
            **options,
        )
        self._spawn(args)

    def _spawn(self, args: list[str]) -> None:
        """Start the driver process; a reader thread turns its stdout lines into events."""
        self._stderr = open(self.stderr_path, "ab")  # noqa: SIM115 - closed by kill()
        self.proc = subprocess.Popen(
            args,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,  # a test's Ctrl-C does not reach it; teardown kills it
        )
        self._reader = threading.Thread(target=self._read, name=f"read-{self.name}", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                ev = {"event": "garbage", "line": raw.decode(errors="replace"), "t": time.time()}
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

    def snapshot(self, *kinds: str) -> list[dict[str, Any]]:
        """Every event so far (of these kinds)."""
        return self.since(0, *kinds)

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
        """Why this consumer is unusable (it reported an error or exited), or None."""
        bad = self.snapshot("error", "exited")
        if bad or not self.alive:
            return f"consumer {self.name} failed: {bad} rc={self.proc.poll()}\n{self.stderr_tail()}"
        return None

    def check_alive(self) -> None:
        if (failure := self.failure()) is not None:
            raise AssertionError(failure)

    # --- driving ---------------------------------------------------------------------------

    def send(self, line: str, *, quiet: bool = False) -> None:
        """One command on the consumer's stdin; if the consumer is gone, an AssertionError (or
        nothing with `quiet`: `failure()` says so)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((line + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            if quiet:
                return
            bad = self.snapshot("error", "exited")
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

    # --- diagnostics -----------------------------------------------------------------------

    def stderr_tail(self, n: int = 6000) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def gave_up(self) -> tuple[float, str] | None:
        """(unix time, line) of the first time librdkafka gave up on its group by itself:
        a client-side session timeout (SESSTMOUT) or a fatal error; None if it never did
        (librdkafka logs those with --debug cgrp)."""
        try:
            text = self.stderr_path.read_text(errors="replace")
        except OSError:
            return None
        for ln in text.splitlines():
            fields = ln.split("|", 3)
            if len(fields) == 4 and fields[2] in ("SESSTMOUT", "FATAL"):
                try:
                    return float(fields[1]), ln[:400]
                except ValueError:
                    continue
        return None

    def client_log(self, n: int = 150) -> str:
        """The end of the client's stderr; of librdkafka's debug log only the group lines."""
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

    def describe(self, last: int | None = None) -> str:
        """Its events (the `last` ones), the latest librdkafka statistics, its client log."""
        evs = [e for e in self.snapshot() if e["event"] not in ("stats", "commit_skipped")]
        if last is not None:
            evs = evs[-last:]
        stats = self.snapshot("stats")
        lines = "\n".join(
            "  " + json.dumps({k: v for k, v in e.items() if k != "who"}) for e in evs
        )
        return (
            f"--- consumer {self.name} ({self.client}, group={self.group}, "
            f"instance={self.instance}, rc={self.proc.poll()}) owned={sorted(self.owned)}\n"
            + (f"  last stats: {json.dumps(stats[-1])}\n" if stats else "")
            + f"{lines}\n--- client log:\n{self.client_log()}"
        )


class Consumers:
    """The consumers of one test against one node: a factory, their teardown, and what a failed
    test reports (the node's log, every consumer's events and stderr, and the group records of
    the event log)."""

    def __init__(self, workdir: Path, coord: CoordinatorProcess, **defaults: Any) -> None:
        self.workdir = workdir
        self.coord = coord
        self.defaults = defaults  # ConsumerProcess options every consumer gets
        self.hub = Hub()
        self.consumers: list[ConsumerProcess] = []
        self.groups: set[str] = set()

    def consumer(
        self, client: str, group: str, name: str, topic: str = TOPIC, **kw: Any
    ) -> ConsumerProcess:
        self.groups.add(group)
        c = ConsumerProcess(
            self.hub,
            self.workdir,
            client,
            self.coord.bootstrap,
            group,
            topic,
            name,
            **{**self.defaults, **kw},
        )
        self.consumers.append(c)
        return c

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        return self.hub.wait_until(pred, timeout, what)

    def kill_consumers(self) -> None:
        for c in self.consumers:
            with contextlib.suppress(Exception):  # keep killing the others
                c.kill()

    def diagnostics(self) -> list[tuple[str, str]]:
        out = [("coordinator log", self.coord.logs(tail=12000))]
        for c in self.consumers:
            out.append((f"consumer {c.name}", c.describe()))
        for g in sorted(self.groups):
            try:
                lines = [
                    f"p{r.partition}@{r.offset} gen={r.generation} "
                    + (
                        "TOMBSTONE"
                        if r.value is None
                        else f"leader={r.value.leader} "
                        f"assign={ {k: sorted(v) for k, v in r.assignments().items()} } "
                        f"instances={r.instances()}"
                    )
                    for r in group_records(self.coord.db_path, g)
                ]
            except Exception as e:
                lines = [f"cannot read the log: {e!r}"]
            out.append((f"event log of group {g}", "\n".join(lines)))
        return out
