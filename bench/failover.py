"""Benchmark (not a test): log load time vs log size, and failover time, on real processes.

    .venv/bin/python bench/failover.py            # full run (~6-8 min on 2 cores)
    .venv/bin/python bench/failover.py --quick    # 10k records, one failover each (~1 min)

1. Load time vs log size. For each size (10k, 100k, 1M records in the full run) and each
   backend (SQLite file, PostgreSQL), a fresh database is filled with a realistic log written
   straight through `EventLog.append` under leases taken by a fake node id (then released):
   offset commits of many consumer groups, most of them superseded by later commits, group
   metadata records at every rebalance (some groups end empty), and ~2% of the groups deleted
   (offset + group tombstones). One `coordinator serve` then starts on it; reported: time from
   spawn to /readyz 200 and to every partition active, failed (retried) loads, sum/max of
   the per-partition `load_ms` from /cluster, records/s (records / max load_ms: the loads of
   one node overlap, max is their wall time), and the ratio of that rate to a raw driver scan
   of the same rows in the same run (sqlite3 cursor / asyncpg fetch: the floor). A 0-record
   row gives the process start-up floor. An in-process breakdown splits a load into
   EventLog.read (SQL + rows) and GroupCoordinator.replay.
2. Failover time. 3 nodes on PostgreSQL (TTL 2000 and 5000 ms) and 2 nodes on one shared SQLite
   file (TTL 2000 ms), on a 100k-record log. The node owning the most partitions is SIGKILLed;
   the survivors' /cluster is polled every 20 ms until every partition is `active` on a
   survivor. Reported as TTL + takeover+load, split into kill -> lease expiry (the victim's
   remaining lease time, read from its /cluster just before the kill), expiry -> first claim
   by a survivor (lease-round latency, <= TTL/4), and first claim -> all active (loading).
   Each repetition restarts the victim and waits for the cluster to settle before killing the
   node that then owns the most partitions.

Compaction is pushed out of the way (COORD_COMPACTION_INTERVAL_MS=1h) so the log keeps the
size it was written with. Nodes are tests/support/nodes.py's CoordinatorProcess.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import json
import os
import random
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402

from app.group.config import CoreConfig  # noqa: E402
from app.group.coordinator import GroupCoordinator  # noqa: E402
from app.group.records import (  # noqa: E402
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    RecordType,
    group_record,
    offset_record,
)
from app.runtime.placement import partition_for  # noqa: E402
from bench.report import code_version, machine_info  # noqa: E402
from storage.log import AppendBatch, EventLog  # noqa: E402
from tests.support.consumer_bytes import assignment, subscription  # noqa: E402
from tests.support.nodes import CoordinatorProcess  # noqa: E402
from tests.support.postgres import PrivatePostgres  # noqa: E402

FAKE_NODE = 9999  # the writer of the pre-populated log (never a live node id)
PG_DB = f"bench_failover_{os.getpid()}"  # per run: a node orphaned by a killed run cannot join
POLL_S = 0.020
NODE_LOG_LEVEL = "WARNING"
# the floor reads what a load needs (EventLog.read_latest): four columns, in log order
RAW_SQL = 'SELECT "offset", record_type, key, value FROM log_records ORDER BY "partition", "offset"'


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ==== a realistic log ==========================================================================


OFFSET = RecordType.OFFSET_COMMIT
_OFFSET_V0 = struct.Struct(">hqiiqq")


def _offset_value(offset: int, ts: int) -> bytes:
    """encode_offset_value(OffsetValue(offset, -1, "", ts, -1)), precompiled: generating a
    million records through the generic writer takes longer than loading them. The first
    commit of every group is built by records.py and checked against this."""
    return _OFFSET_V0.pack(0, offset, -1, 0, ts, -1)


@dataclass
class _Group:
    gid: str
    part: int  # log partition
    topic: str
    partitions: int
    interval_ms: int
    generation: int = 0
    offsets: list[int] = field(default_factory=list)
    keys: list[bytes] = field(default_factory=list)  # offset record key per partition


def _metadata(rng: random.Random, g: _Group, ts: int, empty: bool) -> Record:
    g.generation += 1
    n = 0 if empty else rng.randint(1, min(4, g.partitions))
    members = []
    for i in range(n):
        mid = f"consumer-{g.gid}-{i}-{g.generation:08x}-4c1e-9a5b-{i:012x}"
        mine = [p for p in range(g.partitions) if p % n == i]
        members.append(
            MemberValue(
                member_id=mid,
                group_instance_id=None,
                client_id=f"consumer-{i}",
                client_host=f"/10.0.{i}.{rng.randint(1, 254)}",
                rebalance_timeout_ms=300_000,
                session_timeout_ms=300_000,  # nobody expires while the benchmark runs
                subscription=subscription([g.topic]),
                assignment=assignment({g.topic: mine}),
            )
        )
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=g.generation,
        protocol_name="range" if members else None,
        leader=members[0].member_id if members else None,
        current_state_timestamp=ts,
        members=tuple(members),
    )
    return group_record(g.gid, value)


def generate_log(n: int, partitions: int, seed: int = 7) -> dict[int, list[Record]]:
    """About `n` records (exactly n unless n is tiny), by log partition, in append order.

    One group per ~200 records; each consumes one topic of 3..12 partitions and commits every
    partition it consumes every 1..10 s (simulated), so most offset records are superseded;
    a rebalance (5% of a group's events) writes a new generation, 15% of which leave the group
    empty. At the end ~2% of the groups are deleted: a tombstone per offset and for the group.
    Commit timestamps start an hour ago (far inside offsets retention).
    """
    rng = random.Random(seed)
    out: dict[int, list[Record]] = {p: [] for p in range(partitions)}
    if n <= 0:
        return out
    n_groups = max(10, n // 200)
    topics = [(f"topic-{i:03d}", rng.choice((3, 6, 8, 12))) for i in range(max(5, n_groups // 8))]
    groups = []
    for i in range(n_groups):
        topic, parts = rng.choice(topics)
        gid = f"group-{i:06d}"
        groups.append(
            _Group(gid, partition_for(gid, partitions), topic, parts, rng.randint(1000, 10000))
        )
    deleted = set(rng.sample(range(n_groups), max(1, n_groups // 50)))
    tombstones = sum(groups[i].partitions + 1 for i in deleted)
    budget = max(n - tombstones, n_groups)
    start = now_ms() - 3_600_000
    heap = [(start + rng.randint(0, g.interval_ms), i) for i, g in enumerate(groups)]
    heapq.heapify(heap)
    written = 0
    while written < budget:
        ts, i = heapq.heappop(heap)
        g = groups[i]
        if g.generation == 0 or rng.random() < 0.05:
            recs = [_metadata(rng, g, ts, empty=g.generation > 0 and rng.random() < 0.15)]
            if not g.offsets:
                g.offsets = [rng.randint(0, 10_000_000) for _ in range(g.partitions)]
        else:
            recs = []
            if not g.keys:  # first commit: built by records.py, the template of later ones
                for p in range(g.partitions):
                    r = offset_record(g.gid, g.topic, p, OffsetValue(g.offsets[p], -1, "", ts, -1))
                    assert r.value == _offset_value(g.offsets[p], ts)
                    g.keys.append(r.key)
                    recs.append(r)
            else:
                rand = rng.random
                for p in range(g.partitions):
                    g.offsets[p] += int(rand() * 5000)
                    recs.append(Record(OFFSET, g.keys[p], _offset_value(g.offsets[p], ts)))
        recs = recs[: budget - written]
        out[g.part].extend(recs)
        written += len(recs)
        heapq.heappush(heap, (ts + g.interval_ms, i))
    for i in sorted(deleted):
        g = groups[i]
        out[g.part] += [offset_record(g.gid, g.topic, p, None) for p in range(g.partitions)]
        out[g.part].append(group_record(g.gid, None))
    return out


def log_stats(log_: dict[int, list[Record]]) -> dict[str, Any]:
    total = sum(len(v) for v in log_.values())
    keys = {(r.type, r.key) for v in log_.values() for r in v}
    groups = sum(1 for v in log_.values() for r in v if r.type == 1 and r.value is not None)
    return {"records": total, "live_keys": len(keys), "group_metadata": groups}


async def populate(url: str, log_: dict[int, list[Record]], partitions: int) -> float:
    """Write the log through EventLog under leases of FAKE_NODE, then release them."""
    t0 = time.perf_counter()
    ev = await EventLog.open(url, migrate=True)
    try:
        await ev.ensure_log_partitions(partitions)
        epochs = await ev.acquire_leases(list(range(partitions)), FAKE_NODE, 3_600_000, now_ms())
        assert len(epochs) == partitions, f"could not take every lease: {epochs}"
        chunk = 4000  # per partition per transaction (16 partitions -> 64k rows)
        longest = max((len(v) for v in log_.values()), default=0)
        for lo in range(0, longest, chunk):
            batches = [
                AppendBatch(p, epochs[p], FAKE_NODE, recs[lo : lo + chunk])
                for p, recs in log_.items()
                if recs[lo : lo + chunk]
            ]
            await ev.append(batches)
        for p, e in epochs.items():
            assert await ev.release_lease(p, FAKE_NODE, e)
    finally:
        await ev.close()
    return time.perf_counter() - t0


# ==== databases ================================================================================


def pg_url(admin_dsn: str) -> str:
    """The SQLAlchemy URL of this run's database on the server of `admin_dsn`."""
    base = admin_dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"{base}/{PG_DB}"


async def pg_recreate(admin_dsn: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
        await conn.execute(f"CREATE DATABASE {PG_DB}")
    finally:
        await conn.close()


async def pg_drop(admin_dsn: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f"DROP DATABASE IF EXISTS {PG_DB} WITH (FORCE)")
    finally:
        await conn.close()


@dataclass
class Backend:
    name: str  # "sqlite" | "postgresql"
    workdir: Path
    pg_admin_dsn: str = ""  # the PostgreSQL server's admin DSN (postgresql backend only)

    def fresh(self, tag: str) -> str:
        """A new empty database; returns its SQLAlchemy URL."""
        if self.name == "postgresql":
            asyncio.run(pg_recreate(self.pg_admin_dsn))
            return pg_url(self.pg_admin_dsn)
        path = self.workdir / f"{tag}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return f"sqlite+aiosqlite:///{path}"


def raw_scan(url: str) -> tuple[int, float]:
    """(rows, seconds) of reading every log row with the bare driver: the floor."""
    if url.startswith("sqlite"):
        path = url.split(":///", 1)[1]
        t0 = time.perf_counter()
        con = sqlite3.connect(path)
        try:
            cur = con.execute(RAW_SQL)
            n = 0
            while rows := cur.fetchmany(10_000):
                n += len(rows)
        finally:
            con.close()
        return n, time.perf_counter() - t0

    async def pg() -> tuple[int, float]:
        t0 = time.perf_counter()
        conn = await asyncpg.connect(url.replace("+asyncpg", ""))
        try:
            rows = await conn.fetch(RAW_SQL)
        finally:
            await conn.close()
        return len(rows), time.perf_counter() - t0

    return asyncio.run(pg())


async def inprocess_breakdown(url: str, partitions: int) -> dict[str, float]:
    """One sequential load of every partition in this process, split as the node's load is:
    EventLog.read_latest (scan, newest record per key), then GroupCoordinator.replay of those."""
    ev = await EventLog.open(url, record_types=RecordType)
    try:
        t0 = time.perf_counter()
        latest = [await ev.read_latest(p) for p in range(partitions)]
        read_s = time.perf_counter() - t0
    finally:
        await ev.close()
    t0 = time.perf_counter()
    core = GroupCoordinator(CoreConfig(), lambda prefix: f"{prefix}-x")
    for part in latest:
        for record in part.records:
            core.replay(record)
    replay_s = time.perf_counter() - t0
    n = sum(part.scanned for part in latest)
    return {"records": n, "read_s": read_s, "replay_s": replay_s, "groups": len(core.groups)}


# ==== nodes ====================================================================================


def node_env(partitions: int, ttl_ms: int, node_id: int) -> dict[str, str]:
    return {
        "COORD_NODE_ID": str(node_id),
        "COORD_LOG_PARTITIONS": str(partitions),
        "COORD_LEASE_TTL_MS": str(ttl_ms),
        "COORD_COMPACTION_INTERVAL_MS": "3600000",
        "COORD_LOG_LEVEL": NODE_LOG_LEVEL,
    }


LOAD_FAILED = "failed to load"  # node.py's warning when a load fails and is retried


@contextlib.contextmanager
def running(nodes: Sequence[CoordinatorProcess]) -> Iterator[None]:
    try:
        yield
    finally:
        for n in nodes:  # SIGTERM all first: they shut down in parallel
            if n.proc is not None and n.proc.poll() is None:
                n.proc.terminate()
        for n in nodes:
            with contextlib.suppress(Exception):
                n.stop()


# ==== 1. load time vs log size =================================================================


@dataclass
class LoadResult:
    backend: str
    records: int
    live_keys: int
    populate_s: float
    ready_s: float
    load_sum_ms: float
    load_max_ms: float
    loaded: int
    raw_s: float
    breakdown: dict[str, float] | None
    profile: list[tuple[str, float]] | None = None
    load_failures: int = 0
    all_active_s: float | None = None  # spawn -> every partition active (None: never)

    @property
    def rate(self) -> float:
        return self.records / (self.load_max_ms / 1000) if self.load_max_ms else 0.0

    @property
    def raw_rate(self) -> float:
        return self.records / self.raw_s if self.raw_s else 0.0


def measure_load(
    backend: Backend,
    size: int,
    log_: dict[int, list[Record]],
    partitions: int,
    breakdown: bool,
    py_spy: str | None,
    all_active_timeout: float = 180,
) -> LoadResult:
    url = backend.fresh(f"load-{size}")
    stats = log_stats(log_)
    populate_s = asyncio.run(populate(url, log_, partitions))
    raw = [raw_scan(url)]  # also warms the cache for the node
    wd = backend.workdir / f"node-load-{backend.name}-{size}"
    wd.mkdir(exist_ok=True)
    node = CoordinatorProcess(url, wd, node_env(partitions, 5000, 1))
    profile = None
    with running([node]):
        t0 = time.perf_counter()
        node.start(wait_ready=False)
        spy = attach_py_spy(py_spy, node, wd / "py-spy.txt") if py_spy and size else None
        node.wait_ready(timeout=600, poll=POLL_S)
        ready_s = time.perf_counter() - t0
        # /readyz only looks at the partitions the node holds: a partition whose load failed
        # was given back and is not counted until claimed again, so wait for all of them
        view, all_active_s = wait_all_active(node, partitions, t0, timeout=all_active_timeout)
        if spy is not None:
            spy.send_signal(2)  # SIGINT: py-spy writes its output and exits
            spy.wait(30)
            profile = summarize_profile(wd / "py-spy.txt")
    failures = node.log_text().count(LOAD_FAILED)
    raw.append(raw_scan(url))
    mine = [p for p in view["partitions"] if p["state"] == "active" and p["partition"] >= 0]
    loads = [p["load_ms"] or 0.0 for p in mine]
    loaded = sum(p["records_loaded"] or 0 for p in mine)
    if all_active_s is not None:
        assert loaded == stats["records"], f"loaded {loaded} of {stats['records']} records"
    assert all(n == stats["records"] for n, _ in raw), raw
    bd = asyncio.run(inprocess_breakdown(url, partitions)) if breakdown and size else None
    return LoadResult(
        backend.name, stats["records"], stats["live_keys"], populate_s, ready_s,
        sum(loads), max(loads, default=0.0), loaded, min(s for _, s in raw), bd, profile,
        failures, all_active_s,
    )  # fmt: skip


def wait_all_active(
    node: CoordinatorProcess, partitions: int, t0: float, timeout: float
) -> tuple[dict[str, Any], float | None]:
    """Poll /cluster until every partition is active on the node: (last view, seconds since
    t0), or (last view, None) after `timeout`."""
    want = set(range(-1, partitions))
    while True:
        view = node.get("/cluster", timeout=5)
        t = time.perf_counter()
        if {p["partition"] for p in view["partitions"] if p["state"] == "active"} >= want:
            return view, t - t0
        if t - t0 > timeout:
            return view, None
        time.sleep(POLL_S)


def attach_py_spy(py_spy: str, node: CoordinatorProcess, out: Path) -> subprocess.Popen[bytes]:
    """py-spy record on the node (attaching fails until the interpreter is up: retry)."""
    assert node.proc is not None
    for _ in range(20):
        time.sleep(0.1)
        spy = subprocess.Popen(
            [py_spy, "record", "--pid", str(node.proc.pid), "--rate", "200",
             "--format", "raw", "--nonblocking", "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        with contextlib.suppress(subprocess.TimeoutExpired):
            spy.wait(0.3)
        if spy.poll() is None:
            return spy
    raise RuntimeError("py-spy could not attach to the node")


def summarize_profile(path: Path, top: int = 15) -> list[tuple[str, float]]:
    """py-spy raw (collapsed) stacks of the node -> [(frame, %)]: first the share of all
    samples under CoordinatorNode._load, then, within those, the busiest frames of app/,
    storage/ and SQLAlchemy by inclusive share."""
    if not path.exists():
        return []

    def frame_name(frame: str) -> str:
        name, _, where = frame.partition(" (")
        file = where.rstrip(")").rpartition(":")[0]
        return f"{name} ({'/'.join(Path(file).parts[-2:])})"

    incl: Counter[str] = Counter()
    total = in_load = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        total += int(count)
        names = [frame_name(f) for f in stack.split(";")]
        if not any(n.startswith("CoordinatorNode._load ") for n in names):
            continue
        in_load += int(count)
        for n in set(names):
            if any(d in n for d in ("(group/", "(storage/", "(runtime/node", "(engine/")):
                incl[n] += int(count)
    if not in_load:
        return []
    out = [("all samples in CoordinatorNode._load (% of the node's samples)",
            100 * in_load / total)]  # fmt: skip
    out += [(f"{n} (% of _load)", 100 * c / in_load) for n, c in incl.most_common(top)]
    return out


# ==== 2. failover ==============================================================================


@dataclass
class FailoverRun:
    settle_s: float  # (re)start -> every partition active on its planned owner
    victim: int = 0
    victim_partitions: int = 0
    expiry_ms: float = 0.0  # kill -> the victim's leases expire
    claim_ms: float = 0.0  # kill -> first claim by a survivor
    total_ms: float = 0.0  # kill -> every partition active on a survivor
    reloaded: int = 0
    load_max_ms: float = 0.0
    extra_moves: int = 0  # lease epochs bumped beyond one per lost partition (churn)
    error: str = ""


@dataclass
class FailoverResult:
    backend: str
    nodes: int
    ttl_ms: int
    records: int
    runs: list[FailoverRun]
    url: str = ""
    load_failures: int = 0  # loads that failed and were retried, all nodes, whole setup

    @property
    def ok(self) -> list[FailoverRun]:
        return [r for r in self.runs if not r.error]


def views(nodes: Sequence[CoordinatorProcess]) -> dict[int, dict[str, Any]]:
    return {i: v for i, n in enumerate(nodes) if (v := n.cluster(timeout=1)) is not None}


def served(v: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The partitions a node's /cluster says it holds (loading or active)."""
    return {p["partition"]: p for p in v["partitions"] if p["state"] is not None}


def settled(
    nodes: Sequence[CoordinatorProcess], partitions: int
) -> dict[int, dict[str, Any]] | None:
    """Every live node's view once each partition is active on exactly one node, the one the
    placement plan names, and every live node serves some; else None."""
    live = [i for i, n in enumerate(nodes) if n.running]
    vs = views(nodes)
    if sorted(vs) != live:
        return None
    every: list[int] = []
    for v in vs.values():
        mine = served(v)
        if not mine or any(
            p["state"] != "active" or p["planned_owner"] != v["node_id"] for p in mine.values()
        ):
            return None
        every += mine
    return vs if sorted(every) == list(range(-1, partitions)) else None


def wait_settled(
    nodes: Sequence[CoordinatorProcess], partitions: int, timeout: float
) -> dict[int, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            if n.proc is not None and n.proc.poll() is not None and n.proc.returncode > 0:
                raise RuntimeError(f"node exited:\n{n.logs()}")
        got = settled(nodes, partitions)
        if got is not None:
            return got
        time.sleep(0.1)
    raise TimeoutError(f"cluster did not settle in {timeout:.0f} s: {unsettled(nodes)}")


def unsettled(nodes: Sequence[CoordinatorProcess]) -> str:
    """What each node last showed, with its logs copied where the run's scratch directory
    (deleted at the end) will not take them: a cluster that does not settle is rare, and its
    cause is in the nodes' lease and load warnings."""
    kept = Path(tempfile.mkdtemp(prefix="bench-unsettled-"))
    vs = views(nodes)
    said = []
    for i, n in enumerate(nodes):
        for path in n.log_paths:
            if path.exists():
                shutil.copy(path, kept / path.name)
        if not n.running:
            said.append(f"node {i + 1} not running")
            continue
        v = vs.get(i)
        if v is None:
            said.append(f"node {i + 1} no /cluster answer")
            continue
        mine = served(v)
        off_plan = sorted(
            p for p, st in mine.items()
            if st["state"] != "active" or st["planned_owner"] != v["node_id"]
        )  # fmt: skip
        said.append(
            f"node {i + 1} serves {sorted(mine)}, not active or not its own {off_plan}, "
            f"{n.log_text().count(LOAD_FAILED)} failed loads"
        )
    return f"{'; '.join(said)} (node logs in {kept})"


def kill_and_measure(
    nodes: Sequence[CoordinatorProcess],
    partitions: int,
    vs: dict[int, dict[str, Any]],
    run: FailoverRun,
    timeout: float,
) -> None:
    victim = max(vs, key=lambda i: (len(served(vs[i])), -i))
    survivors = [n for i, n in enumerate(nodes) if i != victim]
    epochs = {pid: p["epoch"] for v in vs.values() for pid, p in served(v).items()}
    pre = nodes[victim].get("/cluster", timeout=2)
    lost = set(served(pre))
    left = [p["lease_expires_in_ms"] for p in served(pre).values()
            if p["lease_expires_in_ms"] is not None]  # fmt: skip
    proc = nodes[victim].proc
    assert proc is not None
    t_view = time.perf_counter()
    proc.kill()  # SIGKILL
    t_kill = time.perf_counter()
    proc.wait(10)
    run.victim, run.victim_partitions = pre["node_id"], len(lost)
    # every lease of a node is renewed by one statement; the largest is the current one
    # (a partition claimed in the last round still shows the previous holder's row)
    run.expiry_ms = max(max(left) - (t_kill - t_view) * 1000, 0.0) if left else float("nan")
    want = set(range(-1, partitions))
    first_claim = None
    while True:
        t = time.perf_counter()
        if t > t_kill + timeout:
            raise TimeoutError(f"not every partition active on a survivor after {timeout:.0f} s")
        active: dict[int, dict[str, Any]] = {}
        claimed: set[int] = set()
        for n in survivors:
            with contextlib.suppress(OSError, ValueError):
                for pid, p in served(n.get("/cluster", timeout=1)).items():
                    claimed.add(pid)
                    if p["state"] == "active":
                        active[pid] = p
        if first_claim is None and claimed & lost:
            first_claim = t
        if set(active) >= want:
            break
        time.sleep(max(POLL_S - (time.perf_counter() - t), 0))
    assert first_claim is not None
    taken = [p for pid, p in active.items() if pid in lost and pid >= 0]
    run.claim_ms = (first_claim - t_kill) * 1000
    run.total_ms = (t - t_kill) * 1000
    run.reloaded = sum(p["records_loaded"] or 0 for p in taken)
    run.load_max_ms = max((p["load_ms"] or 0.0 for p in taken), default=0.0)
    run.extra_moves = sum(p["epoch"] - epochs[pid] for pid, p in active.items()) - len(lost)


def measure_failover(
    backend: Backend,
    n_nodes: int,
    ttl_ms: int,
    log_: dict[int, list[Record]],
    partitions: int,
    reps: int,
    url: str | None = None,
    settle_timeout: float = 60,
) -> FailoverResult:
    """`url`: a database already holding `log_` (the nodes of an earlier setup append nothing
    without clients but their lease bookkeeping), else a fresh one is filled.

    Nodes are started one after another, each once the cluster has settled: a node that starts
    together with others claims partitions and then blocks its loop in start-up, which with a
    short TTL costs it those leases again (see README_failover.md)."""
    if url is None:
        url = backend.fresh(f"failover-{n_nodes}-{ttl_ms}")
        asyncio.run(populate(url, log_, partitions))
    result = FailoverResult(backend.name, n_nodes, ttl_ms, sum(len(v) for v in log_.values()),
                            [], url)  # fmt: skip
    nodes = []
    for i in range(n_nodes):
        wd = backend.workdir / f"node-failover-{backend.name}-{ttl_ms}-{i + 1}"
        wd.mkdir(exist_ok=True)
        nodes.append(CoordinatorProcess(url, wd, node_env(partitions, ttl_ms, i + 1)))
    with running(nodes):
        t0 = time.perf_counter()
        for r in range(reps):
            run = FailoverRun(0.0)
            result.runs.append(run)
            try:
                for n in nodes:
                    if not n.running:
                        n.start(wait_ready=False)
                        wait_settled(nodes, partitions, settle_timeout)  # (re)joined
                vs = wait_settled(nodes, partitions, settle_timeout)
                run.settle_s = time.perf_counter() - t0
                kill_and_measure(nodes, partitions, vs, run, timeout=settle_timeout)
            except (TimeoutError, RuntimeError) as e:
                run.settle_s = time.perf_counter() - t0
                run.error = str(e).splitlines()[0]
                log(f"  {backend.name} {n_nodes} nodes TTL {ttl_ms}: rep {r + 1}: {run.error}")
                break
            log(
                f"  {backend.name} {n_nodes} nodes TTL {ttl_ms}: rep {r + 1}: settled in "
                f"{run.settle_s:.1f} s; killed node {run.victim} ({run.victim_partitions} "
                f"partitions), all active after {run.total_ms:.0f} ms (lease expiry "
                f"{run.expiry_ms:.0f}, first claim {run.claim_ms:.0f}, reloaded "
                f"{run.reloaded} records, {run.extra_moves} extra lease moves)"
            )
            t0 = time.perf_counter()
    result.load_failures = sum(n.log_text().count(LOAD_FAILED) for n in nodes)
    return result


# ==== report ===================================================================================


def fmt_n(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M" if n % 1_000_000 else f"{n // 1_000_000:.0f}M"
    if n >= 1000:
        return f"{n / 1000:.0f}k" if n % 1000 == 0 else f"{n / 1000:.1f}k"
    return f"{n:.0f}"


def load_table(results: list[LoadResult]) -> str:
    lines = [
        "| backend | records (live keys) | write s | time to /readyz s | all active s "
        "| load sum / max ms | load rec/s | raw scan rec/s | load / raw | failed loads |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        active = "never" if r.all_active_s is None else f"{r.all_active_s:.2f}"
        loads = f"{r.load_sum_ms:.0f} / {r.load_max_ms:.0f}"
        if r.records == 0:
            lines.append(
                f"| {r.backend} | 0 (start-up floor) | - | {r.ready_s:.2f} | {active} | {loads} "
                f"| - | - | - | {r.load_failures} |"
            )
            continue
        star = "*" if r.load_failures else ""  # load_ms then times the last attempts only
        lines.append(
            f"| {r.backend} | {fmt_n(r.records)} ({fmt_n(r.live_keys)}) | {r.populate_s:.1f} "
            f"| {r.ready_s:.2f} | {active} | {loads}{star} | {r.rate:,.0f}{star} "
            f"| {r.raw_rate:,.0f} | {r.rate / r.raw_rate:.3f}{star} | {r.load_failures} |"
        )
    return "\n".join(lines)


def breakdown_table(results: list[LoadResult]) -> str:
    rows = [r for r in results if r.breakdown]
    if not rows:
        return ""
    lines = [
        "| backend | records | raw scan s | EventLog.read_latest s | replay s | read+replay s "
        "| node load (max load_ms) s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        b = r.breakdown or {}
        lines.append(
            f"| {r.backend} | {fmt_n(r.records)} | {r.raw_s:.2f} | {b['read_s']:.2f} "
            f"| {b['replay_s']:.2f} | {b['read_s'] + b['replay_s']:.2f} "
            f"| {r.load_max_ms / 1000:.2f} |"
        )
    return "\n".join(lines)


def failover_table(results: list[FailoverResult]) -> str:
    lines = [
        "| backend | nodes | records | TTL ms | kill → all active ms: median (min-max) "
        "| = kill → lease expiry | + expiry → first claim | + claim → all active "
        "| takeover+load = total - TTL, ms | total / TTL | victim partitions; records reloaded "
        "| extra lease moves | settle s | failed loads |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    med = statistics.median
    for f in results:
        ok = f.ok
        head = f"| {f.backend} | {f.nodes} | {fmt_n(f.records)} | {f.ttl_ms} "
        if not ok:
            err = next((r.error for r in f.runs if r.error), "no run")
            settle = "/".join(f"{r.settle_s:.0f}" for r in f.runs)
            lines.append(head + f"| **{err}** | | | | | | | | {settle} | {f.load_failures} |")
            continue
        tot = [r.total_ms for r in ok]
        exp = [r.expiry_ms for r in ok]
        claim = [r.claim_ms - r.expiry_ms for r in ok]
        load = [r.total_ms - r.claim_ms for r in ok]
        vp = "/".join(str(r.victim_partitions) for r in ok)
        rl = "/".join(fmt_n(r.reloaded) for r in ok)
        failed = len(f.runs) - len(ok)
        note = f" (+{failed} failed: {f.runs[-1].error})" if failed else ""
        lines.append(
            head + f"| {med(tot):.0f} ({min(tot):.0f}-{max(tot):.0f}){note} | {med(exp):.0f} "
            f"| {med(claim):.0f} | {med(load):.0f} | {med(tot) - f.ttl_ms:.0f} "
            f"| {med(tot) / f.ttl_ms:.2f} | {vp}; {rl} "
            f"| {'/'.join(str(r.extra_moves) for r in ok)} "
            f"| {'/'.join(f'{r.settle_s:.0f}' for r in f.runs)} | {f.load_failures} |"
        )
    return "\n".join(lines)


def machine(pg_admin_dsn: str) -> str:
    return ", ".join(f"{k} {v}" for k, v in machine_info(pg_admin_dsn) if k != "code") + (
        f", {time.strftime('%Y-%m-%d %H:%M %Z')}"
    )


# ==== main =====================================================================================


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (< 1 min)")
    ap.add_argument(
        "--sizes",
        help="comma-separated record counts (default 0,10k,100k,1M; "
        "0 = the start-up floor; quick: 10k)",
    )
    ap.add_argument("--partitions", type=int, default=16, help="COORD_LOG_PARTITIONS")
    ap.add_argument("--failover-records", type=int, help="log size for failover (100k)")
    ap.add_argument("--reps", type=int, help="failover repetitions per setup (3; quick 1)")
    ap.add_argument(
        "--settle-timeout",
        type=float,
        default=60,
        help="seconds a cluster may take to settle (or a failover to finish)",
    )
    ap.add_argument("--backends", default="sqlite,postgresql")
    ap.add_argument(
        "--pg",
        default=os.environ.get("COORD_BENCH_PG", ""),
        help="PostgreSQL admin DSN (default $COORD_BENCH_PG; unset: a private cluster, fsync on)",
    )
    ap.add_argument("--skip-load", action="store_true")
    ap.add_argument("--skip-failover", action="store_true")
    ap.add_argument(
        "--breakdown-size",
        type=int,
        help="size whose load is also split in-process (100k; quick 10k; 0 = none)",
    )
    ap.add_argument("--py-spy", metavar="BIN", help="profile the node's load of the largest size")
    ap.add_argument("--json", metavar="PATH", help="also write the raw results as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--node-log-level", default="WARNING", help="COORD_LOG_LEVEL of the nodes")
    args = ap.parse_args()
    global NODE_LOG_LEVEL
    NODE_LOG_LEVEL = args.node_log_level

    if args.sizes:
        sizes = [int(float(s)) for s in args.sizes.split(",")]
    else:
        sizes = [10_000] if args.quick else [0, 10_000, 100_000, 1_000_000]
    fo_records = args.failover_records or (10_000 if args.quick else 100_000)
    reps = args.reps or (1 if args.quick else 3)
    breakdown_size = args.breakdown_size
    if breakdown_size is None:
        breakdown_size = 10_000 if args.quick else 100_000
    backends = args.backends.split(",")
    P = args.partitions
    work = Path(tempfile.mkdtemp(prefix="bench-failover-"))
    started = time.perf_counter()
    load_results: list[LoadResult] = []
    fo_results: list[FailoverResult] = []
    version = code_version()
    load_before = os.getloadavg()
    private_pg = None
    pg_admin = args.pg
    try:
        if not pg_admin and "postgresql" in backends:
            private_pg = PrivatePostgres(prefix="bench-failover-pg-", fsync=True)
            private_pg.start()
            pg_admin = private_pg.dsn()
        info = machine(pg_admin)
        if not args.skip_load:
            for size in sizes:
                t = time.perf_counter()
                data = generate_log(size, P)
                gen_s = time.perf_counter() - t
                for name in backends:
                    log(f"load: {name}, {size} records (generated in {gen_s:.1f}s)")
                    r = measure_load(
                        Backend(name, work, pg_admin), size, data, P,
                        breakdown=size == breakdown_size,
                        py_spy=args.py_spy if size == max(sizes) else None,
                    )  # fmt: skip
                    log(
                        f"  ready {r.ready_s:.2f}s, all active {r.all_active_s}, load max "
                        f"{r.load_max_ms:.0f} ms, {r.rate:,.0f} rec/s, raw {r.raw_rate:,.0f} "
                        f"rec/s, {r.load_failures} failed loads"
                    )
                    load_results.append(r)
                del data
        if not args.skip_failover:
            data = generate_log(fo_records, P)
            setups = []
            if "postgresql" in backends:
                setups += [("postgresql", 3, 2000)]
                if not args.quick:
                    setups += [("postgresql", 3, 5000)]
            if "sqlite" in backends:
                setups += [("sqlite", 2, 2000)]
            filled: dict[str, str] = {}
            for name, n_nodes, ttl in setups:
                log(f"failover: {name}, {n_nodes} nodes, TTL {ttl} ms, {fo_records} records")
                f = measure_failover(
                    Backend(name, work, pg_admin),
                    n_nodes,
                    ttl,
                    data,
                    P,
                    reps,
                    url=filled.get(name),
                    settle_timeout=args.settle_timeout,
                )
                filled[name] = f.url
                fo_results.append(f)
    finally:
        if "postgresql" in backends and pg_admin:
            with contextlib.suppress(Exception):
                asyncio.run(pg_drop(pg_admin))
        if private_pg is not None:
            private_pg.cleanup()
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()
    out = [
        f"Machine: {info}",
        f"Code: {version}",
        f"Load average (1 min) before / after: {load_before[0]:.1f} / {load_after[0]:.1f} "
        f"on {os.cpu_count()} CPUs (other work on the machine inflates every number)",
        f"Log partitions: {P}; total benchmark time {elapsed:.0f} s",
        "",
    ]
    if load_results:
        out += ["### Load time vs log size (one node)", "", load_table(load_results), ""]
        if any(r.load_failures for r in load_results):
            out += [
                "\\* some partition loads failed and were retried (`failed to load` in the "
                "node's log): load_ms then times the last attempts only; see 'all active'.",
                "",
            ]
        bd = breakdown_table(load_results)
        if bd:
            out += ["### Where a load's time goes (in-process, sequential, same rows)", "", bd, ""]
        for r in load_results:
            if r.profile:
                out += [
                    f"### py-spy: {r.backend}, {fmt_n(r.records)} records "
                    "(inclusive % of the node's samples)",
                    "",
                ]
                out += [f"- {pct:5.1f}%  {name}" for name, pct in r.profile]
                out.append("")
    if fo_results:
        out += [
            "### Failover (SIGKILL of the node owning the most partitions)",
            "",
            failover_table(fo_results),
            "",
        ]
    print("\n".join(out))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "machine": info,
                    "code": version,
                    "load": [r.__dict__ for r in load_results],
                    "failover": [
                        {**f.__dict__, "runs": [r.__dict__ for r in f.runs]} for f in fo_results
                    ],
                },
                indent=1,
                default=str,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
