"""Benchmark (not a test): log load time vs log size, and failover time, on real processes.

    .venv/bin/python -m bench.failover_report            # full run (~6-8 min on 2 cores)
    .venv/bin/python -m bench.failover_report --quick    # 10k records, one failover each (~1 min)

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
size it was written with. Nodes are tests/support/nodes.py's CoordinatorProcess. The log is
bench/synthetic_log.py's, the load bench/load_time.py's, the failover bench/failover.py's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench import cluster
from bench.cluster import log
from bench.databases import Backend, pg_drop
from bench.failover import FailoverResult, measure_failover
from bench.load_time import LoadResult, measure_load
from bench.report import code_version, machine_info
from bench.synthetic_log import generate_log
from tests.support.postgres import PrivatePostgres


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
    cluster.NODE_LOG_LEVEL = args.node_log_level

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
