"""Figure 11: gateway mode. The same confluent-kafka clients through our gateway and directly to
the same Apache Kafka broker: produce and fetch MB/s, added produce latency, the gateway's CPU.

Method. One Apache Kafka broker (tests/support/kafka_broker.py, KRaft, PLAINTEXT on loopback,
256 MiB heap) with two topics of 10 partitions: one the producers write, one preloaded once
(directly) that the consumers read. In front of it, all at once, three gateways
(COORD_UPSTREAM_BOOTSTRAP = the broker, each node on a block of 17 ports: its listener, then one
per broker id 0..15), every node on a PostgreSQL database of its own configuration:
- `gw`: one node, authorizer off;
- `gw+acl`: one node, COORD_AUTHORIZER=acl and ALLOW bindings for User:ANONYMOUS (the
  principal of a PLAINTEXT client) on every topic and group: every relayed request is checked;
- `gw-x2`: two nodes sharing one database (clients bootstrap to both).
Each workload runs against the direct broker and every gateway in turn, interleaved per rep
(the order rotated each rep), the clients in `worker_processes()` OS processes that start
their window at one wall-clock instant after a warm-up (connected, one record through):
- produce: N producers (N = 1, 10; acks=all, linger.ms 5, 1 KiB values, no key, no
  compression) produce as fast as they can for the window (at most MAX_RECORDS each); MB/s =
  bytes acknowledged within the window / the window;
- fetch: N consumers (manual assignment, no group protocol: the 1 consumer reads all 10
  partitions, each of 10 reads one) read the preloaded topic from offset 0, seeking back at the
  end of a partition (fetch.wait.max.ms 10: a fetch long-polled at a partition's end would hold
  the connection's one fetch for 500 ms); MB/s = value bytes consumed in the window / the window;
- latency: one producer (the same settings) paced at 50% of the direct broker's 1-producer rate of
  this run, every 8th record's latency from produce() to its delivery report (acks=all);
  p50/p99.
The gateway node's CPU (utime + stime of its process, /proc) over each window, divided by the
MB it moved, is its CPU cost; the broker's own over the direct runs is beside it for scale.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import run_async, run_workers, worker_processes
from bench.databases import pg_admin, pg_url
from bench.gateway_worker import RECORD, SAMPLE
from bench.probes import CpuWindow
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, median, percentile
from tests.support.kafka_broker import JVM_OPTS, KAFKA_VERSION, KafkaBroker
from tests.support.nodes import CoordinatorProcess
from tests.support.ports import free_port_block

KEY = "gateway"
PRODUCE_TOPIC = "bench-gw-produce"
FETCH_TOPIC = "bench-gw-fetch"
PARTITIONS = 10
BROKER_PORTS = 16  # COORD_GATEWAY_BROKER_PORTS' default
BENCH_DB = "bench_gateway"
MB = 1e6
CLIENTS = (1, 10)
THROUGHPUT_GOAL = 0.80  # of direct
ADDED_P99_GOAL_MS = 2.0
LATENCY_SHARE = 0.5  # of the direct broker's 1-producer rate
WARM_TIMEOUT_S = 60.0  # a worker's start and warm-up (connect, one record through)


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, psutil's when it is installed (it is not a dependency of the
    project), else /proc's: the same counters."""
    try:
        import psutil
    except ImportError:
        from bench.probes import process_cpu

        return process_cpu(pid)
    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


# ---- the servers ---------------------------------------------------------------------------------


@dataclass
class Target:
    key: str  # "direct", "gw", "gw+acl", "gw-x2"
    label: str
    bootstrap: str
    pids: list[int]  # the processes whose CPU is its cost (the broker's for "direct")
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)


def _gateway_env(broker: KafkaBroker, node_id: int, **env: str) -> dict[str, str]:
    return {
        "COORD_UPSTREAM_BOOTSTRAP": broker.bootstrap,
        "COORD_TOPICS": "",
        "COORD_NODE_ID": str(node_id),
        "COORD_LOG_LEVEL": "WARNING",
        "COORD_INITIAL_REBALANCE_DELAY_MS": "0",
        **env,
    }


@contextlib.contextmanager
def gateways(
    opts: BenchOptions, broker: KafkaBroker, name: str, size: int, **env: str
) -> Iterator[list[CoordinatorProcess]]:
    """`size` gateway nodes on one fresh PostgreSQL database, each on its block of ports."""
    db = f"{BENCH_DB}_{name}"
    run_async(pg_admin(opts.pg_dsn, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
    run_async(pg_admin(opts.pg_dsn, f"CREATE DATABASE {db}"))
    url = pg_url(opts.pg_dsn, db, "postgresql+asyncpg")
    workdir = opts.workdir / f"gateway-{name}"
    workdir.mkdir(parents=True, exist_ok=True)
    nodes = []
    for i in range(size):
        n = CoordinatorProcess(url, workdir, _gateway_env(broker, i + 1, **env), node_id=i + 1)
        n.kafka_port = free_port_block(1 + BROKER_PORTS)
        nodes.append(n)
    try:
        for n in nodes:  # together: each one's start (migrations, leases) overlaps the others'
            n.start(wait_ready=False)
        for n in nodes:
            n.wait_ready(timeout=90)
        yield nodes
    finally:
        for n in nodes:
            if n.running and n.proc is not None:
                n.proc.terminate()
        for n in nodes:
            with contextlib.suppress(Exception):
                n.stop()
        with contextlib.suppress(Exception):
            run_async(pg_admin(opts.pg_dsn, f"DROP DATABASE IF EXISTS {db} WITH (FORCE)"))


def _allow_anonymous(node: CoordinatorProcess) -> None:
    from tests.support.secure import add_acl

    for rtype in ("TOPIC", "GROUP"):
        add_acl(
            node.db_url,
            "--principal=User:ANONYMOUS",
            "--operation=ALL",
            f"--resource-type={rtype}",
            "--resource-name=*",
        )


def _placements(nodes: Sequence[CoordinatorProcess]) -> list[dict[int, str]]:
    """Each node's Metadata: broker id -> the address it hands out."""
    from confluent_kafka.admin import AdminClient

    out = []
    for n in nodes:
        md = AdminClient({"bootstrap.servers": n.bootstrap}).list_topics(timeout=5)
        out.append({b.id: f"{b.host}:{b.port}" for b in md.brokers.values() if b.id < 1_000_000})
    return out


def wait_placed(nodes: Sequence[CoordinatorProcess], topics: Sequence[str], timeout: float) -> str:
    """Until every node's Metadata places the broker at one address, the same on every node, and
    lists the topics; returns that address."""
    from confluent_kafka.admin import AdminClient

    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            placed = _placements(nodes)
            last = placed
            md = AdminClient({"bootstrap.servers": nodes[0].bootstrap}).list_topics(timeout=5)
            if (
                all(len(p) == 1 for p in placed)
                and len({json.dumps(p, sort_keys=True) for p in placed}) == 1
                and all(t in md.topics and md.topics[t].error is None for t in topics)
            ):
                return next(iter(placed[0].values()))
        time.sleep(0.5)
    raise RuntimeError(
        f"the gateways did not agree on the broker's address in {timeout:.0f} s: {last}"
    )


def _preload(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    value = bytes(RECORD)
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError(f"preloading {topic}: records not delivered")


def _node_metrics(node: CoordinatorProcess) -> str:
    with urllib.request.urlopen(node.admin_url + "/metrics", timeout=5) as r:
        return str(r.read().decode())


def _relayed(nodes: Sequence[CoordinatorProcess]) -> list[float]:
    """coordinator_gateway_request_bytes_total summed, per node."""
    out = []
    for n in nodes:
        total = 0.0
        with contextlib.suppress(Exception):
            for line in _node_metrics(n).splitlines():
                if line.startswith("coordinator_gateway_request_bytes_total") or line.startswith(
                    "coordinator_gateway_reply_bytes_total"
                ):
                    total += float(line.rsplit(" ", 1)[1])
        out.append(total)
    return out


# ---- one run ---------------------------------------------------------------------------------


def _spread(items: Sequence[Any], procs: int) -> list[list[Any]]:
    out: list[list[Any]] = [[] for _ in range(min(procs, len(items)))]
    for i, x in enumerate(items):
        out[i % len(out)].append(x)
    return out


def one_run(
    t: Target, mode: str, n: int, window: float, max_records: int, rate: float = 0.0
) -> dict[str, Any]:
    procs = worker_processes()
    if mode == "produce":
        args = [
            {"mode": mode, "bootstrap": t.bootstrap, "topic": PRODUCE_TOPIC, "clients": len(g),
             "max_records": max_records, "window": window}
            for g in _spread(range(n), procs)
        ]  # fmt: skip
    elif mode == "fetch":
        parts = list(range(PARTITIONS))
        assignments = [parts] if n == 1 else [parts[i::n] for i in range(n)]
        args = [
            {"mode": mode, "bootstrap": t.bootstrap, "topic": FETCH_TOPIC, "assignments": g,
             "window": window}
            for g in _spread(assignments, procs)
        ]  # fmt: skip
    else:
        args = [
            {"mode": mode, "bootstrap": t.bootstrap, "topic": PRODUCE_TOPIC, "rate": rate,
             "window": window}
        ]  # fmt: skip
    sync = Path(tempfile.mkdtemp(prefix="bench-gw-sync-"))
    for i, x in enumerate(args):
        x.update(sync=str(sync), index=i)
    cpus: list[CpuWindow] = []

    def starter() -> None:
        """Once every worker is warm (or after WARM_TIMEOUT_S: the late ones say so), the
        start instant, shared through the `go` file; the CPU windows over the same span."""
        deadline = time.monotonic() + WARM_TIMEOUT_S
        while len(list(sync.glob("ready-*"))) < len(args) and time.monotonic() < deadline:
            time.sleep(0.01)
        t0 = time.time() + 0.2
        cpus.extend(CpuWindow(pid, t0, t0 + window) for pid in t.pids)
        for c in cpus:
            c.start()
        (sync / "go.tmp").write_text(repr(t0))
        (sync / "go.tmp").rename(sync / "go")

    th = threading.Thread(target=starter, daemon=True)
    th.start()
    try:
        got = _run_workers(args, timeout=WARM_TIMEOUT_S + window + 120)
    finally:
        th.join(timeout=WARM_TIMEOUT_S + 1)
        for c in cpus:
            c.join(timeout=window + 30)
        shutil.rmtree(sync, ignore_errors=True)
    out: dict[str, Any] = {
        "mb_s": sum(g.get("bytes", 0) for g in got) / MB / window,
        "errors": sum(g["errors"] for g in got),
        "late": max(g["late"] for g in got),
        "cpu": [c.server for c in cpus],  # cores, per process
    }
    if mode == "latency":
        lat = sorted(x for g in got for x in g["lat"])
        out.update(
            p50=percentile(lat, 50) * 1000 if lat else float("nan"),
            p99=percentile(lat, 99) * 1000 if lat else float("nan"),
            count=len(lat),
            sent=sum(g["sent"] for g in got),
            mb_s=len(lat) * RECORD / MB / window,
        )
    return out


def _run_workers(args: Sequence[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
    """bench.common.run_workers with the light bench.gateway_worker as each process."""
    module = "bench.gateway_worker"
    return run_workers(module, args, timeout, command=[sys.executable, "-m", module])


def _rotated(targets: list[Target], i: int) -> list[Target]:
    k = i % len(targets)
    return targets[k:] + targets[:k]


# ---- the figure ----------------------------------------------------------------------------------


def run(opts: BenchOptions) -> Figure:
    smoke = opts.smoke
    reps = 1 if smoke else 3
    window = 0.75 if smoke else 4.0
    preload = 30_000 if smoke else 400_000  # records of the fetch topic (1 KiB each)
    max_records = 200_000 if smoke else 1_000_000  # per producer per run
    t_start = time.time()
    broker = KafkaBroker(opts.workdir / "gateway-kafka", initial_rebalance_delay_ms=0)
    with contextlib.ExitStack() as stack:
        broker.start()
        stack.callback(broker.stop)
        broker.create_topic(PRODUCE_TOPIC, PARTITIONS)
        broker.create_topic(FETCH_TOPIC, PARTITIONS)
        _preload(broker.bootstrap, FETCH_TOPIC, preload)
        assert broker.proc is not None
        gw1 = stack.enter_context(gateways(opts, broker, "one", 1))
        acl = stack.enter_context(gateways(opts, broker, "acl", 1, COORD_AUTHORIZER="acl"))
        _allow_anonymous(acl[0])
        gw2 = stack.enter_context(gateways(opts, broker, "two", 2))
        topics = [PRODUCE_TOPIC, FETCH_TOPIC]
        placed = {
            "gw": wait_placed(gw1, topics, 60),
            "gw+acl": wait_placed(acl, topics, 60),
            "gw-x2": wait_placed(gw2, topics, 60),
        }
        targets = [
            Target("direct", f"Apache Kafka {KAFKA_VERSION} direct", broker.bootstrap,
                   [broker.proc.pid]),
            Target("gw", "gateway, 1 node", gw1[0].bootstrap, [gw1[0].proc.pid]),  # type: ignore[union-attr]
            Target("gw+acl", "gateway, 1 node, ACL authorizer", acl[0].bootstrap,
                   [acl[0].proc.pid]),  # type: ignore[union-attr]
            Target("gw-x2", "gateway, 2 nodes, one PostgreSQL",
                   ",".join(n.bootstrap for n in gw2), [n.proc.pid for n in gw2]),  # type: ignore[union-attr]
        ]  # fmt: skip
        relayed0 = _relayed(gw2)
        setup_s = time.time() - t_start
        for i in range(reps):
            for mode in ("produce", "fetch"):
                for n in CLIENTS:
                    for t in _rotated(targets, i):
                        t.runs.setdefault(f"{mode}{n}", []).append(
                            one_run(t, mode, n, window, max_records)
                        )
        direct1 = median([r["mb_s"] for r in targets[0].runs["produce1"]])
        rate = LATENCY_SHARE * direct1 * MB / RECORD
        for i in range(reps):
            for t in _rotated(targets, i):
                t.runs.setdefault("latency", []).append(
                    one_run(t, "latency", 1, window, max_records, rate)
                )
        relayed = [b - a for a, b in zip(relayed0, _relayed(gw2), strict=True)]
    return _figure(opts, targets, reps, window, preload, rate, placed, relayed, setup_s)


def _figure(
    opts: BenchOptions,
    targets: list[Target],
    reps: int,
    window: float,
    preload: int,
    rate: float,
    placed: dict[str, str],
    relayed_two: list[float],
    setup_s: float,
) -> Figure:
    direct = targets[0]
    gws = targets[1:]
    columns = ["workload", direct.label]
    for t in gws:
        columns += [t.label, "vs direct"]

    def med(t: Target, key: str, attr: str) -> float:
        return median([r[attr] for r in t.runs[key]])

    def cpu_per_mb(t: Target, key: str) -> float:
        """CPU seconds per MB moved: the medians of the runs' cores (all the target's
        processes) and MB/s."""
        return median([sum(r["cpu"]) for r in t.runs[key]]) / max(med(t, key, "mb_s"), 1e-9)

    rows: list[list[str]] = []
    ratios: dict[tuple[str, str], float] = {}
    for mode, what in (("produce", "produce"), ("fetch", "fetch")):
        for n in CLIENTS:
            key = f"{mode}{n}"
            d = med(direct, key, "mb_s")
            cells = [f"{what} MB/s, {n} client{'s' if n > 1 else ''} (median of {reps})",
                     f"{d:.1f}"]  # fmt: skip
            for t in gws:
                g = med(t, key, "mb_s")
                ratios[(t.key, key)] = g / max(d, 1e-9)
                cells += [f"{g:.1f}", fmt_pct(ratios[(t.key, key)])]
            rows.append(cells)
    added: dict[str, float] = {}
    for q in ("p50", "p99"):
        d = med(direct, "latency", q)
        cells = [f"produce latency {q}, 1 producer at {rate / 1000:.1f}k records/s "
                 f"({fmt_pct(LATENCY_SHARE)} of direct)", fmt_ms(d)]  # fmt: skip
        for t in gws:
            g = med(t, "latency", q)
            if q == "p99":
                added[t.key] = g - d
            cells += [fmt_ms(g), f"{g - d:+.2f} ms"]
        rows.append(cells)
    for n in CLIENTS:
        for mode in ("produce", "fetch"):
            key = f"{mode}{n}"
            d = cpu_per_mb(direct, key)
            cells = [f"CPU s per MB, {mode}, {n} client{'s' if n > 1 else ''} (gateway node(s); "
                     "direct: the broker)", f"{d * 1000:.1f} ms"]  # fmt: skip
            for t in gws:
                if med(t, key, "mb_s") < 0.01:  # nothing moved: no cost per MB to tell
                    cells += ["n/a", "n/a"]
                    continue
                g = cpu_per_mb(t, key)
                cells += [f"{g * 1000:.1f} ms", f"{g / max(d, 1e-12):.1f}x the broker's"]
            rows.append(cells)

    keys = [f"{m}{n}" for m in ("produce", "fetch") for n in CLIENTS]
    worst = {t.key: min(ratios[(t.key, k)] for k in keys) for t in gws}
    met_tp = all(w >= THROUGHPUT_GOAL for w in worst.values())
    met_lat = all(a <= ADDED_P99_GOAL_MS for a in added.values())
    verdict = (
        "; ".join(
            f"{t.key}: throughput {'/'.join(fmt_pct(ratios[(t.key, k)]) for k in keys)} of "
            f"direct, added p99 {added[t.key]:+.2f} ms"
            for t in gws
        )
        + f" (produce 1/10, fetch 1/10 clients); goal ≥ {fmt_pct(THROUGHPUT_GOAL)} and "
        f"≤ {ADDED_P99_GOAL_MS:g} ms: throughput {'met' if met_tp else 'not met'}, "
        f"latency {'met' if met_lat else 'not met'}"
    )

    notes: list[str] = []
    two = targets[3]
    for key in ("produce10", "fetch10"):
        per = [median([r["cpu"][i] for r in two.runs[key]]) for i in range(len(two.pids))]
        notes.append(
            f"gw-x2, {key[:-2]} with 10 clients: node 1 {fmt_pct(per[0])}, node 2 "
            f"{fmt_pct(per[1])} of a core over the window"
        )
    if len(relayed_two) == 2:
        tot = max(sum(relayed_two), 1.0)
        notes.append(
            "gw-x2: relayed bytes (request + reply, /metrics) over the whole figure: node 1 "
            f"{fmt_pct(relayed_two[0] / tot)}, node 2 {fmt_pct(relayed_two[1] / tot)}. Every "
            f"node's Metadata places the one upstream broker at {placed['gw-x2']}: broker b goes "
            "to the (b mod n)-th live node, so with one upstream broker every client's data "
            "connection lands on one node, whichever it bootstrapped to, and a second node adds "
            "no relay capacity (it would with as many upstream brokers as nodes)."
        )
    for t in targets:
        late = max(r["late"] for rs in t.runs.values() for r in rs)
        errs = sum(r["errors"] for rs in t.runs.values() for r in rs)
        lat_sent = [(r["count"], r["sent"]) for r in t.runs["latency"]]
        notes.append(
            f"{t.key}: {errs} client errors, worst warm-up lateness {late:.2f} s, latency runs "
            f"timed/sent (1 in {SAMPLE} timed) " + ", ".join(f"{c}/{s}" for c, s in lat_sent)
        )
    one, ten = cpu_per_mb(targets[1], "fetch1"), cpu_per_mb(targets[1], "fetch10")
    notes.append(
        f"Fetch with 1 client: its replies carry up to 10 partitions x 1 MiB "
        "(max.partition.fetch.bytes), 10 clients' one partition each; the gateway's CPU per MB "
        f"is {one / max(ten, 1e-12):.1f}x higher for the large replies ({one * 1000:.1f} vs "
        f"{ten * 1000:.1f} ms/MB, gw). A large reply is one frame the relay receives whole "
        "(copied once into one buffer, app/gateway/upstream.py) before it is written on; a "
        "single connection's fetch is one stream through one event loop."
    )
    load1, load5, _ = os.getloadavg()
    notes.append(
        f"Machine load average at the figure's end: {load1:.1f} (1 min), {load5:.1f} (5 min) on "
        f"{os.cpu_count()} cores: other processes than the figure's share the cores, which "
        "widens the latency percentiles of every column alike."
    )
    notes.append(
        "Everything shares 2 cores: the broker's JVM, the gateway node(s), the client processes. "
        "A relayed record costs the gateway's CPU on the same cores the broker and the clients "
        "need, so the direct run is the whole machine for the broker and the clients, and the "
        "gateway's runs take their share from both."
    )
    if opts.smoke:
        notes.append(f"Smoke run: 1 rep, {window:g} s windows, {preload} records preloaded.")
    method = (
        f"Apache Kafka {KAFKA_VERSION}'s broker (tests/support/kafka_broker.py: one KRaft node, "
        f"PLAINTEXT on 127.0.0.1, JVM {' '.join(JVM_OPTS)}, the log in a temp dir on disk), two "
        f"topics of {PARTITIONS} partitions: one written by the producers, one preloaded once "
        f"with {preload:,} records of {RECORD} B (directly) that the consumers read. Three "
        "gateways in front of it, all running through the figure, each on a PostgreSQL database "
        "of its own (the node's defaults, fsync on): one node; one node with "
        "COORD_AUTHORIZER=acl and ALLOW ALL bindings for User:ANONYMOUS on every topic and group "
        "(the principal of a PLAINTEXT client: every relayed request is checked); two nodes "
        "sharing one database (clients bootstrap to both). Each node listens on a block of 17 "
        "ports (its listener, then one per upstream broker id 0..15). Each workload runs "
        "against the broker directly and against every gateway, interleaved per rep, the order "
        f"rotated each rep; the clients (confluent-kafka, librdkafka) in {worker_processes()} "
        "worker processes that connect and move one record before a shared wall-clock start, "
        f"then run for a {window:g} s window. Produce: N producers (acks=all, linger.ms 5, "
        f"{RECORD} B values, no key, no compression, idempotence off) as fast as they can; MB/s "
        "= bytes acknowledged within the window / the window. Fetch: N consumers, manual "
        "assignment (no group protocol: 1 consumer reads all partitions, each of 10 reads one), "
        "from offset 0 (fetch.wait.max.ms 10), seeking back to 0 at a partition's end; MB/s = "
        "value bytes consumed in the window / the window. Latency: one producer (the same "
        "settings) paced at "
        f"{fmt_pct(LATENCY_SHARE)} of the direct broker's 1-producer rate of this run, each "
        f"timed record's (1 in {SAMPLE}) latency from produce() to its delivery report; the "
        "added p99 is the "
        "gateway's p99 minus the direct one. CPU per MB: the gateway node's utime + stime "
        "(/proc, psutil's counters) over each window / the MB it moved in it (the broker's for "
        "the direct column). Medians of the reps. Setup (broker, topics, preload, nodes) took "
        f"{setup_s:.0f} s."
    )
    return Figure(
        key=KEY,
        title="11. Gateway mode: through the gateway vs directly to the same Apache Kafka broker",
        goal=f"through the gateway ≥ {fmt_pct(THROUGHPUT_GOAL)} of the direct produce and fetch "
        f"throughput (1 and 10 clients, 1 KiB records), added p99 produce latency ≤ "
        f"{ADDED_P99_GOAL_MS:g} ms at {fmt_pct(LATENCY_SHARE)} of the direct load; with the "
        "authorizer off and on, and 1 vs 2 gateway nodes",
        columns=columns,
        rows=rows,
        verdict=verdict,
        method=method,
        notes=notes,
    )
