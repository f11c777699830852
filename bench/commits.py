"""Durable offset commits/s from many concurrent committers, against a raw append floor.

Method. One `coordinator serve` per backend (SQLite: WAL + synchronous=FULL, the node's own
engine settings; PostgreSQL: a fresh `bench_commits` database). Committers are real group
members: G groups of 10 members each join (JoinGroup/SyncGroup, range-like assignment of a
10-partition topic), so every member owns exactly one partition and commits it with its
generation and member id. That is the hot path of a real consumer (generation/member
validation, session re-arm, OffsetValue v0); simple generation -1 commits would be recorded
as offset resets (OffsetValue v1, the audit's "reset" source) and skip member validation.
Each member runs a closed loop: send OffsetCommit(offset n), await the reply, send n + 1.
A group's 10 members share one connection (G connections, spread over the worker processes);
frames are pre-encoded with kio once and only the offset and correlation id are patched.
Replies with partition error 0 are counted over the window; a reply is sent only after the
node's group commit reached the log, so the count is durable commits/s. At the end every
member's committed offset is read back with OffsetFetch and must equal its last acknowledged
offset; then the node is SIGKILLed and the log itself (log_records) is read: the newest
offset record of every partition must hold that offset too.

Floors, same run, same shape: rows/s of the raw driver appending 100-row batches, one
transaction each, into a table built from storage/sql/tables.py's log_records (same columns, PK
and index) holding real offset-commit keys/values (app.group.records): (a) sqlite3 on a fresh
file, WAL, synchronous=FULL; (b) asyncpg copy_records_to_table into the bench database. The
floor runs half before and half after the node, so drift on the shared machine hits both.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

from bench.common import node, run_async, run_workers, worker_processes
from bench.databases import pg_admin, pg_url
from bench.generators import (
    COMMIT_MEMBERS,
    COMMIT_TOPIC,
    commit_client_class,
    commit_percentile,
    run_committers,
)
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate

LOG_PARTITIONS = 16  # the node's default (app/config.py)
GOAL = 0.25
FLOOR_BATCH = 100
BENCH_DB = "bench_commits"
_COLUMNS = ("partition", "offset", "record_type", "key", "value", "epoch", "node_id",
            "append_time_ms")  # fmt: skip


# ==== load generator (runs in worker processes) =================================================


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """One load-generator process of committers (bench/generators.py)."""
    return await run_committers(args, commit_client_class())


# ==== floors ====================================================================================


def _floor_table(dialect: Any) -> list[str]:
    """DDL of a copy of log_records (same columns, PK and index) named floor_log_records: the
    constraint and index names are renamed too (PostgreSQL wants them unique per schema)."""
    from sqlalchemy.schema import CreateIndex, CreateTable

    from storage.sql.tables import log_records

    ddl = [str(CreateTable(log_records).compile(dialect=dialect))]
    ddl += [str(CreateIndex(ix).compile(dialect=dialect)) for ix in log_records.indexes]
    return [d.replace("log_records", "floor_log_records") for d in ddl]


class _Rows:
    """Real offset-commit rows (keys/values as the node writes them) for the groups of the run,
    offsets dense per log partition; `batch()` hands out the next 100."""

    def __init__(self, n_groups: int) -> None:
        from app.group.records import OffsetValue, offset_record
        from app.runtime.placement import partition_for

        now = int(time.time() * 1000)
        self.templates: list[tuple[int, bytes, bytes]] = []
        for g in range(n_groups):
            group = _group_name(g)
            lp = partition_for(group, LOG_PARTITIONS)
            for p in range(COMMIT_MEMBERS):
                r = offset_record(group, COMMIT_TOPIC, p, OffsetValue(123_456 + p, -1, "", now, -1))
                assert r.value is not None
                self.templates.append((lp, r.key, r.value))
        self.i = 0
        self.next_offset = [0] * LOG_PARTITIONS
        self.now = now

    def batch(self) -> list[tuple[Any, ...]]:
        out = []
        tpl, nxt, n = self.templates, self.next_offset, len(self.templates)
        for _ in range(FLOOR_BATCH):
            lp, key, value = tpl[self.i % n]
            self.i += 1
            out.append((lp, nxt[lp], 2, key, value, 1, 1, self.now))
            nxt[lp] += 1
        return out

    def sizes(self) -> tuple[int, int]:
        _, k, v = self.templates[0]
        return len(k), len(v)


def _sqlite_floor(con: sqlite3.Connection, rows: _Rows, seconds: float) -> tuple[int, float]:
    sql = f"INSERT INTO floor_log_records VALUES ({', '.join('?' * len(_COLUMNS))})"
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        batch = rows.batch()
        con.execute("BEGIN")
        con.executemany(sql, batch)
        con.execute("COMMIT")
        n += len(batch)
    return n, time.perf_counter() - t0


def _sqlite_floor_open(path: Path) -> sqlite3.Connection:
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    con = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT below
    con.execute("PRAGMA journal_mode = WAL")
    con.execute("PRAGMA synchronous = FULL")
    for ddl in _floor_table(sqlite_dialect.dialect()):
        con.execute(ddl)
    return con


async def _pg_floor(dsn: str, rows: _Rows, seconds: float, create: bool) -> tuple[int, float]:
    import asyncpg
    from sqlalchemy.dialects import postgresql

    con = await asyncpg.connect(dsn)
    try:
        if create:
            for ddl in _floor_table(postgresql.dialect()):  # type: ignore[no-untyped-call]
                await con.execute(ddl)
        n = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            batch = rows.batch()  # each COPY is its own (durable, synchronous_commit) txn
            await con.copy_records_to_table("floor_log_records", records=batch, columns=_COLUMNS)
            n += len(batch)
        return n, time.perf_counter() - t0
    finally:
        await con.close()


# ==== the figure ================================================================================


def _group_name(g: int) -> str:
    return f"bench-commits-{g:04d}"


def _log_offsets_sqlite(path: Path) -> list[tuple[int, bytes, bytes | None]]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(
            'SELECT "offset", key, value FROM log_records WHERE record_type = 2 '
            'ORDER BY "partition", "offset"'
        ).fetchall()
    finally:
        con.close()


async def _log_offsets_pg(dsn: str) -> list[tuple[int, bytes, bytes | None]]:
    import asyncpg

    con = await asyncpg.connect(dsn)
    try:
        rows = await con.fetch(
            'SELECT "offset", key, value FROM log_records WHERE record_type = 2 '
            'ORDER BY "partition", "offset"'
        )
        return [(r[0], bytes(r[1]), None if r[2] is None else bytes(r[2])) for r in rows]
    finally:
        await con.close()


def _durable(
    rows: list[tuple[int, bytes, bytes | None]], acked: list[tuple[str, int, int]]
) -> tuple[int, int]:
    """How many members' last acked offsets are the newest record of their key in the log."""
    from app.group.records import decode_offset_key, decode_offset_value

    newest: dict[tuple[str, int], int | None] = {}
    for _, key, value in rows:  # log order per partition; a key lives in one partition
        g, _, p = decode_offset_key(bytes(key))
        newest[(g, p)] = None if value is None else decode_offset_value(bytes(value)).offset
    good = sum(1 for g, p, off in acked if newest.get((g, p)) == off)
    return good, len(acked)


def _measure(
    opts: BenchOptions,
    name: str,
    db_url: str | None,
    n_groups: int,
    window: float,
    warmup: float,
    read_log: Any,
) -> dict[str, Any]:
    """Start a node, run the committers, SIGKILL the node, check the log. One result dict."""
    env = {
        "COORD_TOPICS": f"{COMMIT_TOPIC}:{COMMIT_MEMBERS}",
        "COORD_LOG_PARTITIONS": str(LOG_PARTITIONS),
        # the 10 members of a group must land in one generation: with no initial delay the
        # first rejoins complete generation 1 alone (as in Kafka); 300 ms covers the rest
        "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    }
    n_workers = min(worker_processes(), n_groups)
    ready = opts.workdir / f"{name}-ready"
    ready.mkdir(parents=True, exist_ok=True)
    with node(opts, name, db_url, **env) as proc:
        assert proc.proc is not None
        args = [
            {
                "port": proc.kafka_port,
                "groups": [_group_name(g) for g in range(w, n_groups, n_workers)],
                "ready_dir": str(ready),
                "index": w,
                "workers": n_workers,
                "warmup": warmup,
                "window": window,
                "node_pid": proc.proc.pid if w == 0 else 0,
            }
            for w in range(n_workers)
        ]
        results = run_workers("bench.commits", args, timeout=180)
        proc.kill()  # SIGKILL: what the log holds now is what a crash would leave
        log_rows = read_log()
    acked = [(g, p, off) for r in results for g, offs in r["acked"].items()
             for p, off in enumerate(offs)]  # fmt: skip
    good, total = _durable(log_rows, acked)
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    hist: dict[int, int] = {}
    for r in results:
        for b, n in r["lat_hist"]:
            hist[b] = hist.get(b, 0) + n
    seconds = results[0]["seconds"]
    busy, total_j = results[0]["machine"]
    return {
        "rate": sum(r["ok"] for r in results) / seconds,
        "node_cpu": results[0]["node_cpu"] / seconds,
        "gen_cpu": sum(r["cpu"] for r in results) / seconds,
        "machine": busy / total_j if total_j else 0.0,
        "p50": commit_percentile(hist, 50),
        "p99": commit_percentile(hist, 99),
        "verified": sum(r["verified"] for r in results),
        "bad": [b for r in results for b in r["bad"]],
        "durable": (good, total),
        "errors": errors,
        "workers": n_workers,
    }


def run(opts: BenchOptions) -> Figure:
    n_groups = 10 if opts.smoke else 100
    window = 1.5 if opts.smoke else 10.0
    warmup = 0.3 if opts.smoke else 1.0
    floor_half = 0.5 if opts.smoke else window / 2
    committers = n_groups * COMMIT_MEMBERS
    rows = _Rows(n_groups)
    results: dict[str, tuple[dict[str, Any], float]] = {}

    # --- SQLite ---
    fcon = _sqlite_floor_open(opts.workdir / "commits-floor.db")
    try:
        n1, s1 = _sqlite_floor(fcon, rows, floor_half)
        db = opts.workdir / "commits-sqlite" / "coordinator.db"
        res = _measure(
            opts, "commits-sqlite", None, n_groups, window, warmup,
            lambda: _log_offsets_sqlite(db),
        )  # fmt: skip
        n2, s2 = _sqlite_floor(fcon, rows, floor_half)
    finally:
        fcon.close()
    results["SQLite (WAL, synchronous=FULL)"] = (res, (n1 + n2) / (s1 + s2))

    # --- PostgreSQL ---
    admin = opts.pg_dsn
    bench_dsn = pg_url(admin, BENCH_DB)
    run_async(pg_admin(admin, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
    run_async(pg_admin(admin, f"CREATE DATABASE {BENCH_DB}"))
    try:
        n1, s1 = run_async(_pg_floor(bench_dsn, rows, floor_half, create=True))
        res = _measure(
            opts, "commits-pg", pg_url(admin, BENCH_DB, "postgresql+asyncpg"), n_groups, window,
            warmup, lambda: run_async(_log_offsets_pg(bench_dsn)),
        )  # fmt: skip
        n2, s2 = run_async(_pg_floor(bench_dsn, rows, floor_half, create=False))
    finally:
        run_async(pg_admin(admin, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
    results["PostgreSQL"] = (res, (n1 + n2) / (s1 + s2))

    table: list[list[str]] = []
    verdicts: list[str] = []
    notes: list[str] = []
    floors = {"SQLite (WAL, synchronous=FULL)": "sqlite3 raw", "PostgreSQL": "asyncpg COPY"}
    for backend, (r, floor) in results.items():
        ratio = r["rate"] / floor
        good, total = r["durable"]
        table.append([
            backend, fmt_rate(r["rate"]), f"{floors[backend]} {fmt_rate(floor)}", fmt_pct(ratio),
            fmt_pct(r["node_cpu"]), fmt_pct(r["gen_cpu"]), fmt_pct(r["machine"]),
            fmt_ms(r["p50"]), fmt_ms(r["p99"]), f"{r['verified']}/{total} · {good}/{total}",
        ])  # fmt: skip
        short = "SQLite" if backend.startswith("SQLite") else "PostgreSQL"
        verdicts.append(
            f"{short} {fmt_pct(ratio)} of {floors[backend]}"
            f" ({'met' if ratio >= GOAL else 'not met'})"
        )
        if r["errors"]:
            notes.append(f"{short}: non-zero commit errors in the window: {r['errors']}")
        if r["bad"] or good != total or r["verified"] != total:
            notes.append(f"{short}: read-back mismatches: {r['bad']} (log {good}/{total})")
    worst = min(r["rate"] / f for r, f in results.values())
    met = "met" if worst >= GOAL else "not met"
    klen, vlen = rows.sizes()
    notes += [
        f"{committers} committers = {n_groups} groups x {COMMIT_MEMBERS} members (one partition "
        f"each), {n_groups} connections over {results['PostgreSQL'][0]['workers']} worker "
        "processes; "
        f"{'smoke' if opts.smoke else 'full'} window {window:g} s after {warmup:g} s warm-up.",
        f"Floor rows: {klen}-byte key, {vlen}-byte value (a real offset commit), "
        f"{FLOOR_BATCH} rows per transaction, {LOG_PARTITIONS} log partitions.",
        "CPU columns are % of one core over the window: the node process (all threads), the "
        "load generators summed, and the whole machine (2 cores = 100%). On PostgreSQL the "
        "server's own CPU is in the machine figure only.",
        "read back: members whose OffsetFetch equals their last acked offset · whose newest "
        "log record (read after SIGKILL of the node) holds it.",
    ]
    return Figure(
        key="commits",
        title="3. Durable offset commits/s",
        goal="≥ 25% of the raw 100-row-batch append floor (rows/s) on each backend",
        columns=[
            "backend",
            "commits/s",
            "floor rows/s",
            "ratio",
            "node CPU",
            "load-gen CPU",
            "machine CPU",
            "p50",
            "p99",
            "read back · in log",
        ],
        rows=table,
        verdict="; ".join(verdicts) + f"; goal ≥ 25% on both: {met}",
        method=__doc__.split("\n\n", 1)[1].strip() if __doc__ else "",
        notes=notes,
    )
