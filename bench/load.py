"""Figure 4: load (replay) rate vs a raw scan, and failover time vs the lease TTL.

Load. A log of 1M records (smoke: 10k) as a busy cluster writes it, mostly superseded offset
commits (bench/synthetic_log.py `generate_log`), is written to a fresh database; one
`coordinator serve` starts on it and loads every partition. Rate = records / the wall time of
the loads (the largest per-partition `load_ms` in /cluster: a node's loads overlap and each
`load_ms` includes its wait for a load slot). Floor: the bare driver (sqlite3 cursor, asyncpg
fetch) reading the same rows and the columns a load needs, in partition and offset order, in
the same run, right after the node.

Failover. 100k consumer groups (smoke: 1k), each a live group-metadata record of two members
plus two committed offsets (a compacted log: every record is live, so every one is decoded and
replayed on takeover). 3 nodes on PostgreSQL (TTL 2 s and 5 s) and 2 nodes sharing one SQLite
file (TTL 2 s); the node owning the most partitions is SIGKILLed and the survivors' /cluster
is polled every 20 ms until every partition is active again (bench/failover.py
`measure_failover`). Reported against the TTL: the goal is kill -> all served <= TTL + 2 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics

from bench.cluster import log
from bench.databases import Backend, pg_drop
from bench.failover import measure_failover
from bench.load_time import measure_load
from bench.report import BenchOptions, Figure, fmt_pct, fmt_rate
from bench.synthetic_log import generate_log, groups_log, log_stats

PARTITIONS = 16


def _load_figure(opts: BenchOptions) -> Figure:
    size = 10_000 if opts.smoke else 1_000_000
    data = generate_log(size, PARTITIONS)
    stats = log_stats(data)
    results = []
    for name in ("sqlite", "postgresql"):
        log(f"load: {name}, {size} records")
        results.append(
            measure_load(
                Backend(name, opts.workdir, opts.pg_dsn),
                size,
                data,
                PARTITIONS,
                breakdown=False,
                py_spy=None,
            )
        )
    rows = []
    for r in results:
        rows.append(
            [
                r.backend,
                f"{r.records:,} ({r.live_keys:,} live keys)",
                f"{r.load_max_ms:,.0f} ms",
                fmt_rate(r.rate),
                fmt_rate(r.raw_rate),
                fmt_pct(r.rate / r.raw_rate),
                "never" if r.all_active_s is None else f"{r.all_active_s:.2f} s",
                str(r.load_failures),
            ]
        )
    worst = min(r.rate / r.raw_rate for r in results)
    met = "met" if worst >= 0.40 else "not met"
    return Figure(
        key="load",
        title=f"4a. Load: records/s replaying {size:,} records vs a raw scan",
        goal="load ≥ 40% of the raw scan of the same table",
        columns=[
            "backend",
            "records",
            "load wall time",
            "load rec/s",
            "raw scan rec/s",
            "load / raw",
            "spawn → all active",
            "failed loads",
        ],
        rows=rows,
        verdict=f"{fmt_pct(worst)} of the raw scan at worst; goal ≥ 40%: {met}",
        method=(
            f"{stats['records']:,} records, {stats['live_keys']:,} live keys, "
            f"{stats['group_metadata']:,} group-metadata records over {PARTITIONS} log "
            "partitions. Load = records / the longest per-partition load (they overlap). "
            "Raw scan = the bare driver reading the columns a load needs "
            "(offset, type, key, value) of every row in partition and offset order."
        ),
        notes=[
            "A load reads one snapshot per partition, keeps the newest record per key and "
            "replays only those (replaying the newest record per key equals replaying the "
            "log, the equivalence compaction relies on), so superseded commits cost a "
            "dictionary store rather than a decode."
        ],
    )


def _failover_figure(opts: BenchOptions) -> Figure:
    n_groups = 1_000 if opts.smoke else 100_000
    reps = 1 if opts.smoke else 3
    data = groups_log(n_groups, PARTITIONS)
    records = sum(len(v) for v in data.values())
    setups = [("postgresql", 3, 2000)]
    if not opts.smoke:
        setups += [("postgresql", 3, 5000), ("sqlite", 2, 2000)]
    filled: dict[str, str] = {}
    results = []
    for name, n_nodes, ttl in setups:
        log(f"failover: {name}, {n_nodes} nodes, TTL {ttl} ms, {n_groups} groups")
        r = measure_failover(
            Backend(name, opts.workdir, opts.pg_dsn),
            n_nodes,
            ttl,
            data,
            PARTITIONS,
            reps,
            url=filled.get(name),
            settle_timeout=120,
        )
        filled[name] = r.url
        results.append(r)
    rows = []
    worst_over = 0.0
    for f in results:
        ok = f.ok
        if not ok:
            err = next((r.error for r in f.runs if r.error), "no run")
            rows.append(
                [f.backend, str(f.nodes), f"{f.ttl_ms} ms", f"failed: {err}", "", "", "", "", ""]
            )
            worst_over = float("inf")
            continue
        total = statistics.median(r.total_ms for r in ok)
        expiry = statistics.median(r.expiry_ms for r in ok)
        claim = statistics.median(r.claim_ms - r.expiry_ms for r in ok)
        load = statistics.median(r.total_ms - r.claim_ms for r in ok)
        worst_over = max(worst_over, max(r.total_ms for r in ok) - f.ttl_ms)
        rows.append(
            [
                f.backend,
                str(f.nodes),
                f"{f.ttl_ms} ms",
                f"{total:,.0f} ms ({min(r.total_ms for r in ok):,.0f}-"
                f"{max(r.total_ms for r in ok):,.0f})",
                f"{total / f.ttl_ms:.2f}",
                f"{total - f.ttl_ms:+,.0f} ms",
                f"{expiry:,.0f} / {claim:,.0f} / {load:,.0f} ms",
                "/".join(str(r.victim_partitions) for r in ok),
                "/".join(f"{r.reloaded:,}" for r in ok),
            ]
        )
    met = "met" if worst_over <= 2000 else "not met"
    return Figure(
        key="load",
        title=f"4b. Failover: SIGKILL of an owner → all partitions served, {n_groups:,} groups",
        goal="kill → every partition served again ≤ TTL + 2 s at 100k groups",
        columns=[
            "backend",
            "nodes",
            "lease TTL",
            "kill → all served, median (min-max)",
            "total / TTL",
            "total - TTL",
            "lease expiry / first claim / reload",
            "victim partitions",
            "records reloaded",
        ],
        rows=rows,
        verdict=f"worst run TTL {worst_over:+,.0f} ms; goal ≤ TTL + 2000 ms: {met}",
        method=(
            f"{n_groups:,} groups, {records:,} live records over {PARTITIONS} log partitions, "
            f"{reps} kill(s) per setup (the victim is restarted and the cluster settles "
            "between kills). Kill → lease expiry is the victim's remaining lease time; "
            "first claim is the survivors' next lease round (≤ TTL/4); reload is the "
            "survivors loading the victim's partitions."
        ),
    )


def run(opts: BenchOptions) -> list[Figure]:
    try:
        return [_load_figure(opts), _failover_figure(opts)]
    finally:
        with contextlib.suppress(Exception):
            asyncio.run(pg_drop(opts.pg_dsn))
