"""Apache Kafka beside us: Apache Kafka 4.0.0's own broker and our node under the same clients.

Method. One Apache Kafka broker (tests/support/kafka_broker.py: a single KRaft node that is broker
and controller, PLAINTEXT on loopback, 256 MiB heap, serial GC, offsets.topic.num.partitions=1,
replication factor 1, its log in a temp dir on disk) and one of our nodes (SQLite FULL on disk)
per initial rebalance delay, both given the same delay: Kafka's default 3000 ms and 0 (full
mode; smoke runs delay 0 only). Each pair has the same topic (100 partitions). Before the first
group every server is warmed up as the differential suite does (FindCoordinator until it answers
without error: Kafka creates __consumer_offsets on the first one; then one group formed and
left), and in full mode one discarded confluent-kafka run per server warms Kafka's JIT up.

Two workloads, each run against every server in turn (interleaved per rep, so drift hits all
alike, the order rotated each rep):

- confluent-kafka (librdkafka): bench/tansu.py's workload unchanged (`one_run`): N consumers
  subscribe at a barrier; group formation, then synchronous one-partition commits for a window.
- Apache Kafka's Java consumer (kafka-clients 4.0.0, group.protocol=classic, range assignor,
  session.timeout.ms 10000, heartbeat.interval.ms 500, one JVM each, driven by
  tests/java/.../ConsumerDriver.java): N + 1 JVMs start with --no-subscribe; N subscribe at one
  wall-clock instant (formation: that instant -> every member holds a non-empty assignment of the
  same generation, all partitions covered once); one second later the last one subscribes
  (rebalance: its subscribe -> all N + 1 hold their new assignments); then all N + 1 loop
  synchronous one-partition commits for the window (commits/s summed).

Ratios are our speed / Kafka's speed (Kafka time / our time for formation and rebalance, Kafka
CPU / our CPU per commit): above 100% we are faster.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from bench.common import node, worker_processes
from bench.probes import process_cpu
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate, median
from bench.tansu import SESSION_MS, CpuSampler, Run, Server, one_run
from tests.support import java as java_support
from tests.support.consumers import Hub
from tests.support.java import JavaConsumerProcess
from tests.support.kafka_broker import JVM_OPTS, KAFKA_VERSION, KafkaBroker, warm_up

TOPIC = "bench-kafka"
PARTITIONS = 100  # 100 librdkafka consumers get one each
JAVA_SESSION_MS = 10000  # the Java driver's defaults, as the Java integration tests run it
JAVA_HEARTBEAT_MS = 500
LEAD_S = 0.4  # a timed command reaches every driver (it reads stdin every 100 ms) in time
SETTLE_S = 1.0  # formation -> the joiner's subscribe: two heartbeats of a Stable group
COMMIT_MARGIN_S = 0.5  # rebalance -> the commit window


# ---- servers ------------------------------------------------------------------------------------


@dataclass
class Pair:
    """Apache Kafka and our node configured with the same initial rebalance delay."""

    delay_ms: int
    kafka: Server
    ours: Server


@contextmanager
def apache_kafka(opts: BenchOptions, delay_ms: int) -> Iterator[Server]:
    """Apache Kafka's broker with TOPIC, warmed up; stopped on exit whatever happens. Java or
    Maven missing, or the broker not starting, raises: the figure must fail, not skip."""
    broker = KafkaBroker(opts.workdir / f"kafka-{delay_ms}", initial_rebalance_delay_ms=delay_ms)
    try:
        broker.start()
        broker.create_topic(TOPIC, PARTITIONS)
        asyncio.run(warm_up(broker.address))
        assert broker.proc is not None
        # the java process itself (no wrapper script): its CPU is the broker's
        yield Server(
            f"kafka{delay_ms}", f"Apache Kafka {KAFKA_VERSION}", broker.bootstrap, broker.proc.pid
        )
    finally:
        broker.stop()


@contextmanager
def ours(opts: BenchOptions, delay_ms: int) -> Iterator[Server]:
    with node(
        opts,
        f"kafka-peer-{delay_ms}",
        COORD_TOPICS=f"{TOPIC}:{PARTITIONS}",
        COORD_INITIAL_REBALANCE_DELAY_MS=str(delay_ms),
    ) as n:
        asyncio.run(warm_up(n.address))
        yield Server(f"ours{delay_ms}", "ours", n.bootstrap, n.proc.pid, n.admin_url)


def build_java() -> None:
    """tests/java built (first use: Maven); pytest.fail's exception is a BaseException the runner
    would not catch, so it becomes a RuntimeError that fails this figure only."""
    try:
        java_support.build()
    except pytest.fail.Exception as e:
        raise RuntimeError(f"the Java consumer driver did not build: {e}") from None


# ---- the Java workload: N JVM consumers, then one more ------------------------------------------


@dataclass
class JavaRun:
    formation_s: float
    rebalance_s: float
    commits_per_s: float
    server_cpu: float  # fraction of one core during the commit window
    driver_cpu: float  # all JVMs, fraction of one core during the commit window
    errors: int = 0
    late_s: float = 0.0  # worst lateness of a driver at a timed command
    rounds: int = 1  # most assignments one member received until the group was complete
    after: int = 0  # assigned/revoked events outside the two measured rebalances (should be 0)
    writer: tuple[float, float, float] | None = None  # our log writer: txn/s, records/txn, ms/txn


def java_run(
    opts: BenchOptions, server: Server, n: int, window: float, sampler: CpuSampler
) -> JavaRun:
    group = f"bench-java-{server.key}-{uuid.uuid4().hex[:8]}"
    workdir = opts.workdir / "java" / group
    workdir.mkdir(parents=True)
    hub = Hub()
    cs: list[JavaConsumerProcess] = []
    try:
        for i in range(n + 1):  # the joiner's JVM starts now too: its startup is not timed
            cs.append(
                JavaConsumerProcess(
                    hub,
                    workdir,
                    server.bootstrap,
                    group,
                    TOPIC,
                    f"{group}-{i}",
                    subscribe=False,
                    session_timeout_ms=JAVA_SESSION_MS,
                    heartbeat_interval_ms=JAVA_HEARTBEAT_MS,
                )
            )
        for c in cs:
            c.wait_event("ready", 120)
        members = cs[:n]
        t0, late0 = _subscribe(members)
        formed_at, rounds = _complete(hub, members, t0, f"{group}: {n} members formed")
        time.sleep(max(0.0, formed_at + SETTLE_S - time.time()))
        t1, late1 = _subscribe(cs[n:])
        rebalanced_at, _ = _complete(hub, cs, t1, f"{group}: member {n + 1} joined")
        time.sleep(max(0.0, rebalanced_at + COMMIT_MARGIN_S - time.time()))

        marks = [c.mark() for c in cs]
        ws = _ms(time.time() + LEAD_S)
        we = ws + _ms(window)
        for c in cs:
            c.send(f"commits {ws} {we}")
        time.sleep(max(0.0, ws / 1000 - time.time()))
        cpu0 = sum(process_cpu(c.proc.pid) for c in cs)
        time.sleep(max(0.0, we / 1000 - time.time()))
        cpu1 = sum(process_cpu(c.proc.pid) for c in cs)
        got = [
            c.wait_event("commits", window + 60, after=m) for c, m in zip(cs, marks, strict=True)
        ]
        # callbacks between formation and the joiner, or after the rebalance: a stray rebalance
        after = sum(
            1
            for c in cs
            for e in c.snapshot("assigned", "revoked")
            if formed_at < e["t"] < t1 or rebalanced_at < e["t"] <= we / 1000
        )
        return JavaRun(
            formation_s=formed_at - t0,
            rebalance_s=rebalanced_at - t1,
            commits_per_s=sum(g["ok"] for g in got) / window,
            server_cpu=sampler.cpu_share(server.pid, ws / 1000, we / 1000),
            writer=sampler.writer_stats(server.pid, ws / 1000, we / 1000),
            driver_cpu=(cpu1 - cpu0) / window,
            errors=sum(g["errors"] for g in got),
            late_s=max(late0, late1, max(g["late_ms"] for g in got) / 1000),
            rounds=rounds,
            after=after,
        )
    finally:
        _close(cs)


def _writer(w: tuple[float, float, float] | None) -> str:
    """Our log writer over the commit window (the node's /metrics), for the notes."""
    if w is None:
        return ""
    return f"; log writer {w[0]:.0f} txn/s, {w[1]:.1f} records and {w[2]:.1f} ms per txn"


def _ms(t: float) -> int:
    return round(t * 1000)


def _subscribe(cs: Sequence[JavaConsumerProcess]) -> tuple[float, float]:
    """Every driver in `cs` subscribes at one instant, LEAD_S from now: (the instant, the worst
    lateness of a driver's subscribe)."""
    at = _ms(time.time() + LEAD_S)
    marks = [c.mark() for c in cs]
    for c in cs:
        c.send(f"subscribe {at}")
    done = [c.wait_event("subscribed", 30, after=m) for c, m in zip(cs, marks, strict=True)]
    return at / 1000, max(0.0, max(e["t"] for e in done) - at / 1000)


def _complete(
    hub: Hub, cs: Sequence[JavaConsumerProcess], since: float, what: str, timeout: float = 90.0
) -> tuple[float, int]:
    """Wait until every consumer's latest callback since `since` is an assignment, non-empty and
    of one generation for all, and the assignments cover the topic once: (the instant of the
    last of those assignments, the most assignments one consumer received meanwhile)."""

    def done() -> tuple[float, int] | None:
        latest: list[dict[str, Any]] = []
        for c in cs:
            c.check_alive()
            evs = [e for e in c.snapshot("assigned", "revoked") if e["t"] >= since]
            if not evs or evs[-1]["event"] != "assigned" or not evs[-1]["all"]:
                return None
            latest.append(evs[-1])
        parts = sorted(p for e in latest for p in e["all"])
        if parts != list(range(PARTITIONS)) or len({e.get("generation") for e in latest}) != 1:
            return None
        rounds = max(
            sum(1 for e in c.snapshot("assigned") if e["t"] >= since) for c in cs
        )  # eager protocol: every generation is one assignment per member
        return max(e["t"] for e in latest), rounds

    return hub.wait_until(done, timeout, what)  # type: ignore[no-any-return]


def _close(cs: Sequence[JavaConsumerProcess]) -> None:
    """Close every consumer (LeaveGroup), all at once; SIGKILL what has not exited in 15 s."""
    for c in cs:
        c.send("close", quiet=True)
    deadline = time.monotonic() + 15
    for c in cs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            c.proc.wait(max(0.1, deadline - time.monotonic()))
        c.kill()


# ---- the figure ---------------------------------------------------------------------------------


def run(opts: BenchOptions) -> Figure:
    delays = [0] if opts.smoke else [3000, 0]
    sizes = [3] if opts.smoke else [10, 100]
    java_n = 2 if opts.smoke else 4
    reps = 1 if opts.smoke else 3
    # Java runs are cheaper per sample and their rebalances noisier (a heartbeat's phase): more
    java_reps = 1 if opts.smoke else 5
    window = 1.0 if opts.smoke else 3.0
    build_java()  # before any server starts: a first build resolves Maven artifacts for minutes
    statedir = opts.workdir / "kafka-groups"
    statedir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, int], list[Run]] = {}
    jruns: dict[str, list[JavaRun]] = {}
    with contextlib.ExitStack() as stack:
        pairs = [
            Pair(d, stack.enter_context(apache_kafka(opts, d)), stack.enter_context(ours(opts, d)))
            for d in delays
        ]
        servers = [s for p in pairs for s in (p.kafka, p.ours)]
        sampler = stack.enter_context(
            CpuSampler([s.pid for s in servers], {s.pid: s.admin for s in servers if s.admin})
        )
        if not opts.smoke:  # a JVM's first thousands of requests run interpreted: not measured
            for s in servers:
                one_run(s, 10, 1.0, sampler, statedir, TOPIC, PARTITIONS)
        for n in sizes:
            for i in range(reps):
                for s in _rotated(servers, i):
                    runs.setdefault((s.key, n), []).append(
                        one_run(s, n, window, sampler, statedir, TOPIC, PARTITIONS)
                    )
        for i in range(java_reps):
            for s in _rotated(servers, i):
                jruns.setdefault(s.key, []).append(java_run(opts, s, java_n, window, sampler))
    return _figure(opts, pairs, sizes, java_n, reps, java_reps, window, runs, jruns)


def _rotated(servers: list[Server], i: int) -> list[Server]:
    """Rep i's order: interleaved so drift hits every server alike, and rotated so no server
    always runs right after the same one (a JVM broker still busy after its run, closing
    consumers, GC, would otherwise always tax the same neighbour on 2 cores)."""
    k = i % len(servers)
    return servers[k:] + servers[:k]


def _figure(
    opts: BenchOptions,
    pairs: list[Pair],
    sizes: list[int],
    java_n: int,
    reps: int,
    java_reps: int,
    window: float,
    runs: dict[tuple[str, int], list[Run]],
    jruns: dict[str, list[JavaRun]],
) -> Figure:
    columns = ["workload"]
    for p in pairs:
        columns += [
            f"Apache Kafka {KAFKA_VERSION}, delay {p.delay_ms} ms",
            f"ours, delay {p.delay_ms} ms, SQLite FULL on disk",
            "vs Kafka",
        ]

    def med(key: str, n: int, attr: str) -> float:
        return median([getattr(r, attr) for r in runs[(key, n)]])

    def jmed(key: str, attr: str) -> float:
        return median([getattr(r, attr) for r in jruns[key]])

    def per_commit(cpu: float, rate: float) -> float:
        return cpu / max(rate, 1e-9)

    rows: list[list[str]] = []
    ratio: dict[tuple[str, int, int], float] = {}  # (row kind, delay, size) -> ours / Kafka speed

    def row(
        label: str,
        kind: str,
        n: int,
        get: Callable[[str], float],
        fmt: Callable[[float], str],
        faster: str,
    ) -> None:
        """One workload row; `faster` says which way is better: "lower" (times) or "higher"."""
        cells = [label]
        for p in pairs:
            k, o = get(p.kafka.key), get(p.ours.key)
            r = k / max(o, 1e-12) if faster == "lower" else o / max(k, 1e-12)
            ratio[(kind, p.delay_ms, n)] = r
            cells += [fmt(k), fmt(o), fmt_pct(r)]
        rows.append(cells)

    def ms(x: float) -> str:
        return fmt_ms(1000 * x)

    def us(x: float) -> str:
        return f"{1e6 * x:.0f} µs"

    for n in sizes:
        row(
            f"confluent-kafka: group formation, {n} consumers (median of {reps})",
            "form",
            n,
            lambda key, n=n: med(key, n, "formation_s"),
            ms,
            "lower",
        )
    for n in sizes:
        row(
            f"confluent-kafka: sync commits/s, {n} consumers ({window:g} s window)",
            "commit",
            n,
            lambda key, n=n: med(key, n, "commits_per_s"),
            fmt_rate,
            "higher",
        )
    for n in sizes:
        row(
            f"confluent-kafka: server CPU per commit, {n} consumers",
            "cpu",
            n,
            lambda key, n=n: per_commit(med(key, n, "server_cpu"), med(key, n, "commits_per_s")),
            us,
            "lower",
        )
    jn = java_n
    row(
        f"Java: group formation, {jn} consumers (median of {java_reps})",
        "jform",
        jn,
        lambda key: jmed(key, "formation_s"),
        ms,
        "lower",
    )
    row(
        f"Java: rebalance, consumer {jn + 1} joins a stable group of {jn} (median of {java_reps})",
        "jrebal",
        jn,
        lambda key: jmed(key, "rebalance_s"),
        ms,
        "lower",
    )
    row(
        f"Java: sync commits/s, {jn + 1} consumers ({window:g} s window)",
        "jcommit",
        jn,
        lambda key: jmed(key, "commits_per_s"),
        fmt_rate,
        "higher",
    )
    row(
        f"Java: server CPU per commit, {jn + 1} consumers",
        "jcpu",
        jn,
        lambda key: per_commit(jmed(key, "server_cpu"), jmed(key, "commits_per_s")),
        us,
        "lower",
    )

    ns = "/".join(str(n) for n in sizes)

    def pct(kind: str, d: int, ns_: Sequence[int]) -> str:
        return "/".join(fmt_pct(ratio[(kind, d, n)]) for n in ns_)

    verdict = (
        f"vs Apache Kafka {KAFKA_VERSION} (our speed / its speed, same initial delay on both) — "
        + "; ".join(
            f"delay {p.delay_ms} ms: confluent-kafka formation {pct('form', p.delay_ms, sizes)} "
            f"at {ns} consumers{' (bimodal at delay 0, see notes)' if p.delay_ms == 0 else ''}, "
            f"sync commits {pct('commit', p.delay_ms, sizes)}, Java ({jn} consumers) formation "
            f"{pct('jform', p.delay_ms, [jn])}, rebalance on a join "
            f"{pct('jrebal', p.delay_ms, [jn])}, commits {pct('jcommit', p.delay_ms, [jn])}"
            for p in pairs
        )
        + " (no target set: the issue asks for the ratio)"
    )

    notes: list[str] = []
    for (key, n), rs in sorted(runs.items()):
        r = rs[0]
        notes.append(
            f"confluent-kafka, {key}, {n} consumers (rep 1): server {fmt_pct(r.server_cpu)} of a "
            f"core, driver {fmt_pct(r.driver_cpu)} of a core ({min(worker_processes(), n)} "
            "processes) in the commit window"
            + _writer(r.writer)
            + "; formation "
            + ", ".join(f"{fmt_ms(1000 * x.formation_s)} ({x.rounds} gen.)" for x in rs)
        )
        bad = [x for x in rs if x.errors or x.after or x.late_s > 0.2]
        if bad:
            notes.append(
                f"**confluent-kafka, {key}, {n} consumers**: {sum(x.errors for x in bad)} commit "
                f"errors, {sum(x.after for x in bad)} rebalance callbacks after formation, worst "
                f"lateness {max(x.late_s for x in bad):.2f} s"
            )
    for key, js in sorted(jruns.items()):
        j = js[0]
        notes.append(
            f"Java, {key} (rep 1): server {fmt_pct(j.server_cpu)} of a core, the {jn + 1} JVMs "
            f"{fmt_pct(j.driver_cpu)} of a core in the commit window"
            + _writer(j.writer)
            + "; formation "
            + ", ".join(f"{fmt_ms(1000 * x.formation_s)} ({x.rounds} gen.)" for x in js)
            + "; rebalance "
            + ", ".join(fmt_ms(1000 * x.rebalance_s) for x in js)
        )
        bad_j = [x for x in js if x.errors or x.after or x.late_s > 0.2]
        if bad_j:
            notes.append(
                f"**Java, {key}**: {sum(x.errors for x in bad_j)} commit errors, "
                f"{sum(x.after for x in bad_j)} callbacks outside the measured rebalances, worst "
                f"lateness {max(x.late_s for x in bad_j):.2f} s"
            )
    method = (
        f"Apache Kafka {KAFKA_VERSION}'s broker (kafka_2.13 jars from Maven, "
        "tests/support/kafka_broker.py): one KRaft node that is broker and controller, PLAINTEXT "
        f"on 127.0.0.1, JVM {' '.join(JVM_OPTS)} (256 MiB heap, serial GC), "
        "offsets.topic.num.partitions=1, offsets.topic.replication.factor=1, the log in a temp "
        "dir on disk, group.initial.rebalance.delay.ms as the column says, every other setting "
        "Kafka's default. Beside it our node (SQLite WAL, synchronous=FULL, on disk) with the "
        "same initial delay. Both get the topic (100 partitions) and a warm-up (FindCoordinator "
        "until __consumer_offsets is led, one group formed and left"
        + ("" if opts.smoke else ", one discarded confluent-kafka run")
        + "); runs interleaved over all servers, the order rotated each rep. confluent-kafka: "
        "bench/tansu.py's workload "
        f"(session.timeout.ms {SESSION_MS}, range, auto commit off, fresh group per run, "
        f"{worker_processes()} worker processes): formation = barrier -> every consumer holds a "
        "non-empty assignment, all partitions covered once; then synchronous one-partition "
        f"commits per consumer for the window. Java: kafka-clients {KAFKA_VERSION}, "
        f"group.protocol=classic, range, session.timeout.ms {JAVA_SESSION_MS}, "
        f"heartbeat.interval.ms {JAVA_HEARTBEAT_MS}, one JVM per consumer started before the "
        f"clock: {jn} subscribe at one instant (formation: -> all hold assignments of one "
        f"generation covering the topic), {SETTLE_S:g} s later one more subscribes "
        f"(rebalance: its subscribe -> all {jn + 1} hold their new assignments), then each loops "
        "commitSync of one partition for the window. Ratio = our speed / Kafka's (Kafka time / "
        "our time for formation and rebalance, Kafka CPU / our CPU per commit): above 100% we "
        "are faster. Server CPU per commit includes the consumers' Fetch long-polls and "
        "heartbeats."
    )
    notes += [
        "Commit durability differs: Kafka answers an OffsetCommit once the record is appended to "
        "__consumer_offsets (page cache, no fsync: by default Kafka leaves flushing to the OS, "
        "log.flush.interval.messages = Long.MAX_VALUE; one replica, so no follower is waited "
        "for); our node answers after "
        "SQLite's COMMIT with synchronous=FULL (an fsync, group-committed across requests). "
        "Kafka 4.0's group coordinator also holds writes up to group.coordinator.append.linger.ms "
        "(default 5 ms) to batch them.",
        "Formation follows the same rule on both servers (Kafka 4.0's classic group, and ours, "
        "protocol.md §5.2): a join from Empty completes only when an initial-delay window ends, "
        "never early, and a window in which members were added is followed by another. At "
        "3000 ms consumers subscribing together land in the first window, so formation takes "
        "about twice the delay on both. At 0 each window ends at once and formation is "
        "bimodal on both: either every JoinGroup lands in the first generation (tens of ms), or "
        "an early subset forms one and the others get in once the subset's next heartbeat "
        f"(librdkafka every 3000 ms, Java every {JAVA_HEARTBEAT_MS} ms here) learns of the "
        "rebalance. Which mode a run falls in is a race between the burst of JoinGroups and "
        "the end of the first (0 ms) window, sensitive to what else the 2 cores are doing; a "
        "median of a few runs can fall on either mode (the per-run formations above tell "
        "which), so the delay-0 ratio for small groups says which side of that race a server "
        "landed on more than how fast it handles a join.",
        "Rebalance on a join: a member of a classic group only learns of a rebalance from its "
        f"next heartbeat's REBALANCE_IN_PROGRESS (every {JAVA_HEARTBEAT_MS} ms here), on both "
        "servers: that wait is most of the rebalance time, and no initial delay applies to a "
        "group that is not Empty.",
        "Commit batching: Kafka's linger gathers the commits that arrive within 5 ms into one "
        "log append, so its rate grows with the number of concurrent committers; ours "
        "group-commits too, but each transaction waits for its fsync (log writer figures above: "
        "the node's /metrics over the same window).",
    ]
    if opts.smoke:
        notes.append(
            f"Smoke run: delay 0 only, {sizes[0]} confluent-kafka consumers, {jn} + 1 Java "
            "consumers, 1 rep, no JIT warm-up run."
        )
    return Figure(
        key="kafka",
        title="6b. Apache Kafka beside us: the same confluent-kafka and Java consumer workloads",
        goal="Apache Kafka's own broker and our node under the same client workloads "
        "(confluent-kafka and Apache Kafka's Java consumer): group formation, rebalance on a "
        "join, commit round trips/s; report the ratio beside Tansu's.",
        columns=columns,
        rows=rows,
        verdict=verdict,
        method=method,
        notes=notes,
    )
