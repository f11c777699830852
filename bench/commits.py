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

import asyncio
import contextlib
import math
import os
import sqlite3
import struct
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import node, run_async, run_workers, worker_processes
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate
from tests.support.consumer_bytes import assignment, subscription

TOPIC = "bench-commits"
MEMBERS = 10  # members (= committed partitions) per group; one connection per group
LOG_PARTITIONS = 16  # the node's default (app/config.py)
GOAL = 0.25
HOT = 1 << 30  # correlation ids of hot-loop commits: HOT + member index on the connection
SENTINEL = 0x0123456789ABCDEF  # placeholder offset located in the encoded frame
FLOOR_BATCH = 100
BENCH_DB = "bench_commits"
_COLUMNS = ("partition", "offset", "record_type", "key", "value", "epoch", "node_id",
            "append_time_ms")  # fmt: skip

_SIZE = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
_ERR = struct.Struct(">h")


# ==== load generator (runs in worker processes) =================================================


class _Stats:
    """Shared by every connection of a worker: window bounds (perf_counter) and counters."""

    def __init__(self) -> None:
        self.running = False
        self.w0 = float("inf")
        self.w1 = float("inf")
        self.ok = 0
        self.errors: dict[int, int] = {}
        self.lat: list[float] = []
        self.sent = 0
        self.inflight = 0


class _Member:
    __slots__ = ("acked", "frame", "group", "member_id", "offset", "partition", "pos", "sent")

    def __init__(self, group: str, member_id: str, partition: int) -> None:
        self.group = group
        self.member_id = member_id
        self.partition = partition
        self.frame = bytearray()
        self.pos = 0
        self.offset = 0  # offset of the commit in flight (or last sent)
        self.acked = -1  # last offset acknowledged with error 0
        self.sent = 0.0


def _make_client_class() -> Any:
    from tests.support.kafka_client import KafkaTestClient

    class CommitClient(KafkaTestClient):
        """KafkaTestClient whose hot-loop replies bypass futures and kio decoding: the reply
        handler patches and writes the member's next commit right away (closed loop)."""

        members: list[_Member]
        stats: _Stats

        def _on_frame(self, frame: bytes) -> None:
            (corr,) = _SIZE.unpack_from(frame, 0)
            st = self.stats
            if corr < HOT or (not st.running and not st.inflight):
                super()._on_frame(frame)
                return
            now = time.perf_counter()
            m = self.members[corr - HOT]
            # v8 reply, one topic, one partition: error_code, then 3 empty tagged-field sets
            (err,) = _ERR.unpack_from(frame, len(frame) - 5)
            if err == 0:
                m.acked = m.offset
            if st.w0 <= now < st.w1:
                if err == 0:
                    st.ok += 1
                    st.lat.append(now - m.sent)
                else:
                    st.errors[err] = st.errors.get(err, 0) + 1
            if st.running:
                m.offset += 1
                _OFFSET.pack_into(m.frame, m.pos, m.offset)
                m.sent = now
                st.sent += 1
                self._transport.write(bytes(m.frame))  # type: ignore[union-attr]
            else:
                st.inflight -= 1

        def fire(self, m: _Member) -> None:
            m.offset += 1
            _OFFSET.pack_into(m.frame, m.pos, m.offset)
            m.sent = time.perf_counter()
            self.stats.sent += 1
            self._transport.write(bytes(m.frame))  # type: ignore[union-attr]

    return CommitClient


async def _join(client: Any, group: str, n: int) -> tuple[int, list[_Member]]:
    """n members join `group` (KIP-394 member-id round trip), the leader assigns one
    partition each, everyone syncs. Returns the generation and the members."""
    sub = subscription([TOPIC])

    def join(member_id: str) -> Any:
        return client.send(
            client.join_group_request(
                group,
                member_id,
                protocols=[("range", sub)],
                session_timeout_ms=30_000,
                rebalance_timeout_ms=60_000,
            )
        )

    first = await asyncio.gather(*(join("") for _ in range(n)))
    ids = [r.member_id for r in first]
    joined = await asyncio.gather(*(join(i) for i in ids))
    gens = {r.generation_id for r in joined}
    if any(r.error_code != 0 for r in joined) or len(gens) != 1:
        got = [(r.error_code, r.generation_id) for r in joined]
        raise RuntimeError(f"{group}: join failed (error, generation): {got}")
    gen = gens.pop()
    leader = joined[0].leader
    order = sorted(ids)
    plan = {mid: order.index(mid) for mid in ids}
    assignments = {m: assignment({TOPIC: [p]}) for m, p in plan.items()}
    syncs = await asyncio.gather(
        *(
            client.send(
                client.sync_group_request(
                    group,
                    gen,
                    mid,
                    assignments=assignments if mid == leader else None,
                )
            )
            for mid in ids
        )
    )
    if any(s.error_code != 0 for s in syncs):
        raise RuntimeError(f"{group}: sync failed {[s.error_code for s in syncs]}")
    return gen, [_Member(group, mid, plan[mid]) for mid in ids]


def _prepare_frames(client: Any, gen: int, members: Sequence[_Member]) -> None:
    """kio-encode each member's OffsetCommit v8 once; remember where the offset sits."""
    for idx, m in enumerate(members):
        req = client.build_request(
            8, 8, group_id=m.group, generation_id_or_member_epoch=gen, member_id=m.member_id,
            group_instance_id=None, retention_time=-1,
            topics=[{"name": TOPIC, "partitions": [{
                "partition_index": m.partition, "committed_offset": SENTINEL,
                "committed_leader_epoch": -1, "committed_metadata": "",
            }]}],
        )  # fmt: skip
        frame = bytearray(client.encode(req, HOT + idx))
        sentinel = _OFFSET.pack(SENTINEL)
        m.pos = frame.index(sentinel)
        if frame.find(sentinel, m.pos + 1) != -1:
            raise RuntimeError("offset sentinel found twice in the frame")
        m.frame = frame
        m.offset = -1


async def _first_commit(client: Any, members: Sequence[_Member]) -> None:
    """Commit offset 0 for every member, decoding the replies with kio to check that the
    hand-parsed error position of the hot loop reads the same code."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(8, 8)
    futs = []
    for idx, m in enumerate(members):
        m.offset = 0
        _OFFSET.pack_into(m.frame, m.pos, 0)
        futs.append(client.expect(HOT + idx, None))
        await client.send_raw(bytes(m.frame))
    for idx, (m, raw) in enumerate(zip(members, await asyncio.gather(*futs), strict=True)):
        full = _SIZE.pack(HOT + idx) + raw
        _, off = entity_reader(cls.__header_schema__)(full, 0)
        body: Any = entity_reader(cls)(full, off)[0]
        code = body.topics[0].partitions[0].error_code
        (fast,) = _ERR.unpack_from(full, len(full) - 5)
        if code != fast or code != 0:
            raise RuntimeError(f"{m.group}/{m.partition}: first commit error {code} (fast {fast})")
        m.acked = 0


def _bucket(seconds: float) -> int:
    """Latency histogram bucket: 1% wide (log scale), so percentiles are within 1%."""
    return int(math.log(max(seconds, 1e-6)) * 100)


def _unbucket(b: int) -> float:
    """Milliseconds at the middle of bucket b."""
    return math.exp((b + 0.5) / 100) * 1000


def _hist_percentile(hist: dict[int, int], q: float) -> float:
    total = sum(hist.values())
    if not total:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * total))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return _unbucket(b)
    return _unbucket(max(hist))


def _cpu_of(pid: int) -> float:
    """utime + stime of a process (all threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    v = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = v[3] + v[4]
    return float(sum(v) - idle), float(sum(v))


async def _ready_barrier(ready_dir: str, index: int, n: int, slack: float) -> float:
    """File barrier: each worker writes the wall time its setup ended; all start `slack` after
    the last one (a fixed start time would either waste seconds or catch a slow setup)."""
    d = Path(ready_dir)
    tmp = d / f".{index}"
    tmp.write_text(repr(time.time()))
    tmp.rename(d / str(index))
    deadline = time.monotonic() + 120
    while True:
        got = [p for p in d.iterdir() if not p.name.startswith(".")]
        if len(got) >= n:
            return max(float(p.read_text()) for p in got) + slack
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(got)}/{n} workers got ready")
        await asyncio.sleep(0.02)


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """One load-generator process: its groups (one connection each) join, then every member
    runs its closed commit loop; counts the window, drains, verifies with OffsetFetch."""
    cls = _make_client_class()
    stats = _Stats()
    loop = asyncio.get_running_loop()
    clients: list[Any] = []
    groups: list[tuple[Any, int, list[_Member]]] = []

    async def setup(group: str) -> None:
        client = await cls.connect("127.0.0.1", args["port"], client_id=f"commits-{group}")
        client.stats = stats
        clients.append(client)
        gen, members = await _join(client, group, MEMBERS)
        client.members = members
        _prepare_frames(client, gen, members)
        await _first_commit(client, members)
        groups.append((client, gen, members))

    await asyncio.gather(*(setup(g) for g in args["groups"]))
    start_wall = await _ready_barrier(args["ready_dir"], args["index"], args["workers"], 0.3)
    # wall clock -> perf_counter, so the hot path compares monotonic floats only
    offset = time.perf_counter() - time.time()
    start = start_wall + offset
    stats.w0 = start + args["warmup"]
    stats.w1 = stats.w0 + args["window"]
    await asyncio.sleep(max(0.0, start - time.perf_counter()))
    stats.running = True
    for client, _, members in groups:
        for m in members:
            client.fire(m)

    await asyncio.sleep(max(0.0, stats.w0 - time.perf_counter()))
    cpu0, node0, mach0 = time.process_time(), 0.0, (0.0, 0.0)
    if args.get("node_pid"):
        node0, mach0 = _cpu_of(args["node_pid"]), _machine_cpu()
    t0 = time.perf_counter()
    await asyncio.sleep(max(0.0, stats.w1 - time.perf_counter()))
    t1 = time.perf_counter()
    cpu1 = time.process_time()
    node1, mach1 = 0.0, (0.0, 0.0)
    if args.get("node_pid"):
        node1, mach1 = _cpu_of(args["node_pid"]), _machine_cpu()
    # stop: every member has exactly one commit in flight; wait for all of them
    stats.inflight = sum(len(ms) for _, _, ms in groups)
    stats.running = False
    deadline = loop.time() + 30
    while stats.inflight and loop.time() < deadline:
        await asyncio.sleep(0.01)
    if stats.inflight:
        raise RuntimeError(f"{stats.inflight} commits unanswered 30 s after the window")

    # read back: the committed offset of every member's partition is its last acked offset
    bad: list[str] = []
    for client, _, members in groups:
        resp = await client.offset_fetch(members[0].group, [(TOPIC, m.partition) for m in members])
        got = {p.partition_index: p.committed_offset for p in resp.groups[0].topics[0].partitions}
        bad += [
            f"{m.group}/{m.partition}: fetched {got.get(m.partition)} acked {m.acked}"
            for m in members
            if got.get(m.partition) != m.acked
        ]
    for client in clients:
        with contextlib.suppress(Exception):
            await client.close()
    # The result must stay well under 64 KiB: with PYTHONUNBUFFERED=1 in the environment, a
    # worker's final print after uvloop.run() is cut at the pipe size when run_workers has
    # not started reading that pipe yet (seen: JSON truncated at 65536 bytes, exit code 0).
    # Hence a latency histogram rather than samples.
    hist: dict[int, int] = {}
    for x in stats.lat:
        b = _bucket(x)
        hist[b] = hist.get(b, 0) + 1
    return {
        "ok": stats.ok,
        "errors": {str(k): v for k, v in stats.errors.items()},
        "lat_hist": [[b, n] for b, n in sorted(hist.items())],
        "seconds": t1 - t0,
        "cpu": cpu1 - cpu0,
        "node_cpu": node1 - node0,
        "machine": [mach1[0] - mach0[0], mach1[1] - mach0[1]],
        "verified": sum(len(ms) for _, _, ms in groups) - len(bad),
        "bad": bad[:5],
        "acked": {
            ms[0].group: [m.acked for m in sorted(ms, key=lambda m: m.partition)]
            for _, _, ms in groups
        },
    }


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
            for p in range(MEMBERS):
                r = offset_record(group, TOPIC, p, OffsetValue(123_456 + p, -1, "", now, -1))
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


def _pg_url(dsn: str, db: str, scheme: str | None = None) -> str:
    u = urllib.parse.urlsplit(dsn)
    return urllib.parse.urlunsplit(u._replace(path=f"/{db}", scheme=scheme or u.scheme))


async def _pg_admin(dsn: str, sql: str) -> None:
    import asyncpg

    con = await asyncpg.connect(dsn)
    try:
        await con.execute(sql)
    finally:
        await con.close()


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
        "COORD_TOPICS": f"{TOPIC}:{MEMBERS}",
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
        "p50": _hist_percentile(hist, 50),
        "p99": _hist_percentile(hist, 99),
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
    committers = n_groups * MEMBERS
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
    bench_dsn = _pg_url(admin, BENCH_DB)
    run_async(_pg_admin(admin, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
    run_async(_pg_admin(admin, f"CREATE DATABASE {BENCH_DB}"))
    try:
        n1, s1 = run_async(_pg_floor(bench_dsn, rows, floor_half, create=True))
        res = _measure(
            opts, "commits-pg", _pg_url(admin, BENCH_DB, "postgresql+asyncpg"), n_groups, window,
            warmup, lambda: run_async(_log_offsets_pg(bench_dsn)),
        )  # fmt: skip
        n2, s2 = run_async(_pg_floor(bench_dsn, rows, floor_half, create=False))
    finally:
        run_async(_pg_admin(admin, f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)"))
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
        f"{committers} committers = {n_groups} groups x {MEMBERS} members (one partition each), "
        f"{n_groups} connections over {results['PostgreSQL'][0]['workers']} worker processes; "
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
