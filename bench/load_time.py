"""Load time vs log size: one `coordinator serve` starts on a database filled with a log and
loads every partition; its time against a raw driver scan of the same rows in the same run.

Reported: time from spawn to /readyz 200 and to every partition active, failed (retried)
loads, sum/max of the per-partition `load_ms` from /cluster, records/s (records / max load_ms:
the loads of one node overlap, max is their wall time), and the ratio of that rate to a raw
driver scan of the same rows (sqlite3 cursor / asyncpg fetch: the floor). An in-process
breakdown splits a load into EventLog.read_latest (SQL + rows) and GroupCoordinator.replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from app.group.config import CoreConfig
from app.group.coordinator import GroupCoordinator
from app.group.records import Record, RecordType
from bench.cluster import LOAD_FAILED, POLL_S, node_env, running, wait_all_active
from bench.databases import Backend
from bench.synthetic_log import log_stats, populate
from storage.log import EventLog
from tests.support.nodes import CoordinatorProcess

# the floor reads what a load needs (EventLog.read_latest): four columns, in log order
RAW_SQL = 'SELECT "offset", record_type, key, value FROM log_records ORDER BY "partition", "offset"'


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
