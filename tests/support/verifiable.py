"""Apache Kafka's own verification tools as test drivers: `VerifiableProducer` and
`VerifiableConsumer` (kafka-tools 4.x, on tests/java's classpath), each a JVM printing one JSON
event per line, and the checks Kafka's system tests (`consumer_test.py`, the
VerifiableConsumer service) make on those events:

- every record the producer saw acknowledged is consumed (at least once);
- per partition, the successfully committed offsets never decrease;
- after every assignment, a member's first record of a partition is at the partition's last
  committed offset: never past it (nothing skipped), never before a commit that succeeded
  (no commit lost in a failover);
- no partition is owned by two live members at the same time.

Events are ordered by the timestamp each tool writes in them (the wall clock of this one
machine, shared by every JVM), not by when this process read them: a JVM's output reaches us
later than it happened, and a commit read after another member's assignment may have been
made before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.java import java_command
from tests.support.nodes import die_with_parent

PRODUCER_CLASS = "org.apache.kafka.tools.VerifiableProducer"
CONSUMER_CLASS = "org.apache.kafka.tools.VerifiableConsumer"
ASSIGNORS = {
    "range": "org.apache.kafka.clients.consumer.RangeAssignor",
    "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
    "sticky": "org.apache.kafka.clients.consumer.StickyAssignor",
    "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor",
}

TP = tuple[str, int]


@dataclass
class Event:
    at: float  # wall-clock seconds: the event's own timestamp
    body: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.body.get("name", ""))


class Tool:
    """One JVM of the verifiable tools; its JSON events collected by a reader thread."""

    def __init__(self, name: str, workdir: Path, main_class: str, args: list[str]) -> None:
        self.name = name
        self.args = args
        self.main_class = main_class
        self.stderr_path = workdir / f"{name}.stderr"
        self.events_path = workdir / f"{name}.events.jsonl"  # every event, for a post-mortem
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        with open(self.stderr_path, "ab") as err:
            self.proc = subprocess.Popen(
                java_command(
                    self.main_class,
                    *self.args,
                    log_level=os.environ.get("COORD_VERIFY_TOOL_LOG", "warn"),  # info: why
                ),
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                preexec_fn=die_with_parent,  # no JVM outlives a killed test run
            )
        proc = self.proc
        threading.Thread(target=self._read, args=(proc,), daemon=True).start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        with open(self.events_path, "ab") as kept:
            for line in proc.stdout:
                kept.write(line)
                try:
                    body = json.loads(line)
                except ValueError:
                    continue
                at = body.get("timestamp")
                at = at / 1000 if isinstance(at, int | float) else time.time()
                with self._lock:
                    self.events.append(Event(at, body))
            with self._lock:
                self.events.append(Event(time.time(), {"name": "exited"}))

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def named(self, *names: str) -> list[Event]:
        with self._lock:
            return [e for e in self.events if e.name in names]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM: the tool closes its client (a static member sends no LeaveGroup)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def tail(self, n: int = 30) -> str:
        with self._lock:
            shown = [json.dumps(e.body)[:300] for e in self.events[-n:]]
        try:
            err = self.stderr_path.read_text(errors="replace").splitlines()[-10:]
        except OSError:
            err = []
        return "\n".join([f"--- {self.name} (all: {self.events_path})", *shown, "--- stderr", *err])


def producer(workdir: Path, bootstrap: str, topic: str, count: int, throughput: int = -1) -> Tool:
    """Numbered records (values "0", "1", ...), acks=all."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--max-messages", str(count)]
    args += ["--acks", "-1", "--throughput", str(throughput)]
    return Tool("producer", workdir, PRODUCER_CLASS, args)


def consumer(
    workdir: Path,
    name: str,
    bootstrap: str,
    topic: str,
    group: str,
    *,
    instance: str | None = None,
    assignor: str = "range",
    auto_commit: bool = False,
    session_timeout_ms: int = 30_000,
    protocol: str = "classic",
) -> Tool:
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--group-id", group]
    args += ["--group-protocol", protocol, "--reset-policy", "earliest", "--verbose"]
    if protocol == "classic":
        args += ["--assignment-strategy", ASSIGNORS[assignor]]
        args += ["--session-timeout", str(session_timeout_ms)]
    if instance is not None:
        args += ["--group-instance-id", instance]
    if auto_commit:
        args += ["--enable-autocommit"]
    return Tool(name, workdir, CONSUMER_CLASS, args)


def acked(p: Tool) -> set[TP]:
    """(partition as topic, partition), offset pairs of every acknowledged record."""
    out: set[Any] = set()
    for e in p.named("producer_send_success"):
        out.add(((e.body["topic"], int(e.body["partition"])), int(e.body["offset"])))
    return out


def consumed(consumers: Iterable[Tool]) -> set[Any]:
    out: set[Any] = set()
    for c in consumers:
        for e in c.named("record_data"):
            out.add(((e.body["topic"], int(e.body["partition"])), int(e.body["offset"])))
    return out


def _tps(body: dict[str, Any]) -> list[TP]:
    return [(p["topic"], int(p["partition"])) for p in body.get("partitions", [])]


@dataclass
class Verdict:
    violations: list[str] = field(default_factory=list)

    def add(self, what: str) -> None:
        if len(self.violations) < 50:
            self.violations.append(what)


def check(
    p: Tool, consumers: list[Tool], stale_window: tuple[float, float] | None = None
) -> list[str]:
    """Kafka's properties over the tools' events (the module docstring); the violations. An
    auto-committing VerifiableConsumer reports no commits: then a position is bounded by what
    was read only.

    `stale_window` (wall-clock seconds): the members were cut off from their coordinator for
    longer than their session timeout then. A classic-protocol member learns that it was
    expired only from its coordinator's next answer (Apache Kafka's Java consumer included: the
    session timing out unanswered only makes it look for the coordinator again), so until it
    gets one it still holds what the group has given to others. For a partition given to a
    member within the window, the property is Kafka's fencing instead: no commit of its stale
    owner succeeds once it was given away."""
    v = Verdict()
    missing = acked(p) - consumed(consumers)
    if missing:
        v.add(f"{len(missing)} acknowledged records never consumed, e.g. {sorted(missing)[:5]}")
    # every commit of every member (success or not), in time order
    commits: list[tuple[float, TP, int, str]] = []
    attempts: list[tuple[float, TP, int, str]] = []
    for c in consumers:
        for e in c.named("offsets_committed"):
            for o in e.body.get("offsets", []):
                row = (e.at, (o["topic"], int(o["partition"])), int(o["offset"]), c.name)
                (commits if e.body.get("success") else attempts).append(row)
    commits.sort(key=lambda row: row[0])  # stable: one ms keeps emission order
    # a failed commit may have landed (the reply lost with the node), and a killed member's
    # last commit may be unreported: the next record after anything read counts as committed
    for c in consumers:
        for e in c.named("record_data"):
            tp = (e.body["topic"], int(e.body["partition"]))
            attempts.append((e.at, tp, int(e.body["offset"]) + 1, c.name))
    attempts = sorted(attempts + commits, key=lambda row: row[0])
    last: dict[TP, int] = {}
    for _, tp, offset, who in commits:
        if offset < last.get(tp, 0):
            v.add(f"{tp}: {who} committed {offset} after {last[tp]} had been committed")
        last[tp] = max(last.get(tp, 0), offset)
    # ownership intervals: assigned -> revoked (or the member's exit)
    owned: dict[TP, list[tuple[float, float, str]]] = {}
    for c in consumers:
        held: dict[TP, float] = {}
        for e in c.named("partitions_assigned", "partitions_revoked", "exited"):
            if e.name == "partitions_assigned":
                for tp in _tps(e.body):
                    held.setdefault(tp, e.at)
            else:
                gone = list(held) if e.name == "exited" else _tps(e.body)
                for tp in gone:
                    if tp in held:
                        owned.setdefault(tp, []).append((held.pop(tp), e.at, c.name))
        for tp, since in held.items():
            owned.setdefault(tp, []).append((since, float("inf"), c.name))
    for tp, spans in owned.items():
        spans.sort()
        for j, (start, _, who) in enumerate(spans):
            for _, end, holder in spans[:j]:  # every earlier span still open at `start`
                if holder == who or end <= start:
                    continue
                if not (stale_window and stale_window[0] <= start <= stale_window[1]):
                    v.add(f"{tp} owned by {holder} and {who} at once ({end - start:.2f} s)")
                    continue
                for at, ctp, offset, by in commits:
                    if by == holder and ctp == tp and start <= at <= end:
                        v.add(f"{tp}: {holder} committed {offset} after {who} was given it")
    # after each assignment, a partition's first record is
    # - not past what was committed or read before it (nothing skipped): the commit that set
    #   the new owner's position was made before that record was read;
    # - not before the last successful commit stamped before the assignment (no commit lost:
    #   the position a failover or rebalance hands out is the last committed one)
    for c in consumers:
        events = c.named("partitions_assigned", "partitions_revoked", "record_data", "exited")
        for i, e in enumerate(events):
            if e.name != "partitions_assigned":
                continue
            for tp in _tps(e.body):
                first = _first_read(events[i + 1 :], tp)
                if first is None:
                    continue
                offset = int(first.body["offset"])
                # (events are stamped in ms: the first record's own read is not before it)
                most = _committed_before(attempts, first.at - 0.0005).get(tp, 0)
                if offset > most:
                    v.add(f"{c.name}: {tp} resumed at {offset}, past {most}: records skipped")
                least = _committed_before(commits, e.at).get(tp, 0)
                if offset < least:
                    v.add(f"{c.name}: {tp} resumed at {offset}, before the commit {least} (lost)")
    return v.violations


def _first_read(events: list[Event], tp: TP) -> Event | None:
    """The first record of `tp` read before the member gave it up (or its JVM ended)."""
    for r in events:
        if r.name == "exited" or (r.name == "partitions_revoked" and tp in _tps(r.body)):
            return None
        if r.name == "record_data" and (r.body["topic"], int(r.body["partition"])) == tp:
            return r
    return None


def _committed_before(commits: list[tuple[float, TP, int, str]], at: float) -> dict[TP, int]:
    out: dict[TP, int] = {}
    for when, tp, offset, _ in commits:
        if when > at:
            break
        out[tp] = max(out.get(tp, 0), offset)
    return out


def assignments_since(c: Tool, at: float) -> list[Event]:
    """Assignment changes after `at` (wall-clock seconds, time.time())."""
    return [e for e in c.named("partitions_assigned", "partitions_revoked") if e.at > at]


# --- driving a scenario --------------------------------------------------------------------


def wait(pred: Callable[[], bool], timeout: float, what: str, tools: Iterable[Tool]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what}: not after {timeout} s\n" + "\n".join(t.tail() for t in tools))


def owned_now(c: Tool) -> set[TP]:
    """What a member owns by its events: eager assignors revoke everything and assign the
    whole set, cooperative ones add and revoke increments."""
    held: set[TP] = set()
    for e in c.named("partitions_assigned", "partitions_revoked", "exited"):
        if e.name == "partitions_assigned":
            held |= set(_tps(e.body))
        elif e.name == "partitions_revoked":
            held -= set(_tps(e.body))
        else:
            held.clear()
    return held


def settled(
    view: Callable[[], dict[str, Any] | None], consumers: list[Tool], partitions: int
) -> Callable[[], bool]:
    """The group (as `view` reads it from the admin API, None while no node answers) Stable
    with every member, each partition owned by exactly one of them, and no member rebalanced
    for the last 2 s."""

    def done() -> bool:
        g = view()
        if g is None or g["state"] != "Stable" or len(g["members"]) != len(consumers):
            return False
        owned = [tp for c in consumers for tp in owned_now(c)]
        quiet = all(not assignments_since(c, time.time() - 2) for c in consumers)
        return len(owned) == len(set(owned)) == partitions and quiet

    return done


def finish(
    p: Tool, consumers: list[Tool], records: int, timeout: float = 120, lossy: bool = False
) -> float:
    """The producer done and every record it saw acknowledged consumed; then every member stops
    (their closing revokes what they own). When they began to stop. The producer does not retry
    (Kafka's VerifiableProducer sets retries=0), so a send in flight when a node dies fails:
    `lossy` scenarios accept that for up to a tenth of the records (never for an acked one)."""
    wait(lambda: not p.alive, timeout, "the producer finished", [p])
    errors = [e.body for e in p.named("producer_send_error")]
    floor = records * 9 // 10 if lossy else records
    assert len(acked(p)) >= floor, f"{len(acked(p))} of {records} acked: {errors[:5]}"
    wait(lambda: acked(p) <= consumed(consumers), timeout, "every acked record consumed", consumers)
    time.sleep(1.5)  # the last commits (after each batch) land
    stopping = time.time()
    for c in consumers:
        c.stop()
    return stopping


def verdict(
    p: Tool,
    consumers: list[Tool],
    context: str = "",
    stale_window: tuple[float, float] | None = None,
) -> None:
    """Fail with every violation, the members' last events and `context` (a seed, a log);
    else print what was verified (`pytest -rP` shows it)."""
    violations = check(p, consumers, stale_window)
    assert not violations, "\n".join([*violations, context, *(c.tail() for c in consumers)])
    print("verified:", json.dumps(tally(p, consumers)))


def tally(p: Tool, consumers: list[Tool]) -> dict[str, int]:
    """What a run verified: records sent, acked and failed, read (and read again after a
    rebalance or failover), commits, assignment changes."""
    reads = [e for c in consumers for e in c.named("record_data")]
    return {
        "sent": len(acked(p)) + len(p.named("producer_send_error")),
        "acked": len(acked(p)),
        "send_errors": len(p.named("producer_send_error")),
        "consumed": len(consumed(consumers)),
        "read_again": len(reads) - len(consumed(consumers)),
        "commits": sum(len(c.named("offsets_committed")) for c in consumers),
        "assignment_changes": sum(
            len(c.named("partitions_assigned", "partitions_revoked")) for c in consumers
        ),
    }


def rejoined(c: Tool, since: float) -> Callable[[], bool]:
    """`c` has been assigned something since `since` (a closing JVM's own revocation is not
    a rejoin)."""
    return lambda: any(e.name == "partitions_assigned" for e in assignments_since(c, since))


def group_view(node: Any, group: str) -> Callable[[], dict[str, Any] | None]:
    """`settled`'s view of `group`: one node's admin API (a CoordinatorProcess), None while it
    does not answer."""

    def read() -> dict[str, Any] | None:
        try:
            g: dict[str, Any] = node.get(f"/groups/{group}", timeout=3)
            return g
        except (OSError, ValueError):  # down, refusing, or mid-restart
            return None

    return read
