"""Figure 5: resident memory per member, 100k static members in 10k Stable groups.

Method. One node (SQLite) is started with a 50 ms initial rebalance delay; members use a
20-minute session timeout, so no heartbeat is needed while we measure. A warm-up worker forms
a few groups first (every code path, the admin API and the log writer have run once); then
the node's RSS is sampled (`before`). Worker processes then form `groups x members` static
members (group_instance_id: a new one joins in one JoinGroup round trip, protocol.md §4.5; a group's
first joins go out back to back so they land in one delay window) over 400 connections (a
forming group borrows one per member: a parked JoinGroup holds up the replies behind it on its
connection). Each member carries a 34-byte consumer-protocol v3 subscription; each group's
leader syncs a range assignment (10 partitions per member: 68 bytes). The workers report when
every member got its assignment and keep their connections open; the node is checked (every
group Stable with all its members, via /metrics, and a sample of /groups/{id}), RSS is sampled
again after a pause (`after`), and the figure is (after - before) / members.

Floor: the issue's goal, 1 KiB per member plus the bytes the member itself brings (subscription,
assignment, group_instance_id and member id). Breakdown: the same members are driven through
the pure state machine (`GroupCoordinator`, app/group) in a worker process under tracemalloc,
which splits the Python heap into payload objects (the member's own bytes/str, headers
included), bookkeeping (Member, dicts, tuples) and timers; the rest of the RSS growth is the
runtime, allocator slack, connection buffers and the SQLite page cache.
"""

from __future__ import annotations

import gc
import json
import random
import re
import sys
import threading
import time
import tracemalloc
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from bench.common import node, rss_bytes, run_workers, worker_processes
from bench.probes import process_cpu
from bench.report import BenchOptions, Figure, fmt_rate
from tests.support import consumer_bytes

KEY = "memory"
TOPIC = "bench-orders"
PARTS_PER_MEMBER = 10
SESSION_MS = 1_200_000  # 20 min: no heartbeats needed while we measure
REBALANCE_MS = 60_000  # bounds a rebalance that waits for a member slowed by the load
DELAY_MS = 50  # initial rebalance delay: a group's back-to-back first joins land in one window
CONNECTIONS = 400  # in all; a forming group borrows one per member
HB_ROUNDS = 15  # heartbeats per member per phase = a 45 s session heartbeated every 3 s
HB_PHASES = 2  # the first shows the one-off cost of serving heartbeats, the second any growth
REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION = 27, 22
# a client backs off and retries on these (rediscovering the coordinator, here the same node)
COORDINATOR_ERRORS = {14, 15, 16}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR


# ---- consumer-protocol bytes (what a Java 3.x consumer sends) -----------------------------------


def subscription(topic: str = TOPIC) -> bytes:
    """ConsumerProtocolSubscription v3: topics, null user data, no owned partitions,
    generation -1, null rack (34 bytes for TOPIC). A new object on every call."""
    return consumer_bytes.subscription([topic], version=3)


def assignment(parts: list[int], topic: str = TOPIC) -> bytes:
    """ConsumerProtocolAssignment v3: one topic's partitions, null user data."""
    return consumer_bytes.assignment({topic: parts}, version=3)


def instance_id(group_id: str, j: int) -> str:
    return f"{group_id}-i{j}"


def group_name(i: int) -> str:
    return f"bench-mem-{i:05d}"


def member_bytes(group_id: str) -> dict[str, int]:
    """What one member brings, in bytes (the floor counts these on top of 1 KiB)."""
    inst = instance_id(group_id, 0)
    return {
        "subscription": len(subscription()),
        "assignment": len(assignment(list(range(PARTS_PER_MEMBER)))),
        # member id = "<instance id>-<uuid4>" (protocol.md §2.2)
        "ids": len(inst) + len(inst) + 1 + 36,
    }


# ---- load generator ----------------------------------------------------------------------------


class _Conn:
    """A connection sending kio requests under its own correlation ids."""

    def __init__(self, client: Any) -> None:
        import itertools

        self.client = client
        self.corr = itertools.count(1)

    async def send(self, requests: list[Any]) -> list[Any]:
        from kio.index import load_response_schema

        from tests.support.kafka_client import encode_request

        frames, futures = [], []
        for req in requests:
            corr = next(self.corr)
            schema = load_response_schema(req.__api_key__, req.__version__)
            futures.append(self.client.expect(corr, schema))
            frames.append(encode_request(req, corr, self.client.client_id))
        await self.client.send_raw(b"".join(frames))
        return futures


async def _form_group(
    conns: list[_Conn],
    group_id: str,
    stats: dict[str, int],
    formed: list[tuple[str, int, str, str]],
) -> None:
    """Every member of one group (one connection each, as real consumers) joins as a static
    member and syncs until it holds its assignment: REBALANCE_IN_PROGRESS/ILLEGAL_GENERATION
    on sync means re-join, a coordinator error means back off and retry."""
    import asyncio

    def join(conn: _Conn, inst: str, member_id: str) -> Any:
        return conn.client.join_group_request(
            group_id,
            member_id,
            protocols=[("range", subscription())],
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            group_instance_id=inst,
            version=9,
        )

    async def member(conn: _Conn, inst: str, joined: Any) -> None:
        client = conn.client
        while True:
            jr = await asyncio.wait_for(joined, 120)
            stats["joins"] += 1
            if int(jr.error_code) in COORDINATOR_ERRORS:
                stats["coordinator_errors"] += 1
                await asyncio.sleep(random.uniform(0.1, 0.3))
                (joined,) = await conn.send([join(conn, inst, "")])
                continue
            if int(jr.error_code) != 0:
                raise RuntimeError(f"JoinGroup {group_id}/{inst}: error {int(jr.error_code)}")
            member_id = str(jr.member_id)
            plan: dict[str, bytes] = {}
            if jr.leader == jr.member_id:  # the leader computes a range assignment
                ids = sorted(str(m.member_id) for m in jr.members)
                plan = {
                    mid: assignment(list(range(k * PARTS_PER_MEMBER, (k + 1) * PARTS_PER_MEMBER)))
                    for k, mid in enumerate(ids)
                }
            (synced,) = await conn.send(
                [
                    client.sync_group_request(
                        group_id,
                        jr.generation_id,
                        member_id,
                        assignments=plan,
                        group_instance_id=inst,
                        version=5,
                    )
                ]
            )
            sr = await asyncio.wait_for(synced, 120)
            stats["syncs"] += 1
            err = int(sr.error_code)
            if err == 0 and sr.assignment:
                stats["members"] += 1
                formed.append((group_id, jr.generation_id, member_id, inst))
                return
            if err in COORDINATOR_ERRORS:
                stats["coordinator_errors"] += 1
                await asyncio.sleep(random.uniform(0.1, 0.3))
            elif err in (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION):
                stats["rejoins"] += 1
            else:
                raise RuntimeError(f"SyncGroup {group_id}/{inst}: error {err}")
            (joined,) = await conn.send([join(conn, inst, member_id)])

    insts = [instance_id(group_id, j) for j in range(len(conns))]
    # the first JoinGroups go out back to back, so they land in one delay window
    firsts = [(await c.send([join(c, i, "")]))[0] for c, i in zip(conns, insts, strict=True)]
    await asyncio.gather(*(member(c, i, f) for c, i, f in zip(conns, insts, firsts, strict=True)))


async def _formation(a: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    from tests.support.kafka_client import KafkaTestClient

    conns = [
        _Conn(
            await KafkaTestClient.connect("127.0.0.1", a["port"], client_id=f"mem-{a['tag']}-{i}")
        )
        for i in range(a["connections"])
    ]
    stats = {"joins": 0, "syncs": 0, "rejoins": 0, "coordinator_errors": 0, "members": 0}
    formed: list[tuple[str, int, str, str]] = []  # (group, generation, member id, instance)
    # connected: the node's RSS is sampled with the connections open and idle, then go
    Path(a["connected"]).touch()
    while not Path(a["go"]).exists():
        await asyncio.sleep(0.05)
    # a parked JoinGroup holds up the replies behind it on its connection (in order, as in
    # Kafka): a forming group borrows one connection per member, never shared meanwhile
    pool: asyncio.Queue[_Conn] = asyncio.Queue()
    for c in conns:
        pool.put_nowait(c)
    gate = asyncio.Semaphore(max(1, len(conns) // a["members"]))
    cpu0, t0 = time.process_time(), time.time()

    async def one(i: int) -> None:
        async with gate:
            mine = [pool.get_nowait() for _ in range(a["members"])]
            try:
                await _form_group(mine, group_name(i), stats, formed)
            finally:
                for c in mine:
                    pool.put_nowait(c)

    await asyncio.gather(*(one(i) for i in range(a["first"], a["first"] + a["count"])))
    stats.update(seconds=time.time() - t0, cpu=time.process_time() - cpu0)
    # hand over, keep the connections open while the node is measured, then leave
    ready = Path(a["ready"])
    ready.with_suffix(".tmp").write_text(json.dumps(stats))
    ready.with_suffix(".tmp").rename(ready)
    release = Path(a["release"])
    for phase in range(HB_PHASES):  # the fleet heartbeats, the node is measured after each
        beat = Path(f"{a['beat']}-{phase}")
        while not release.exists() and not beat.exists():
            await asyncio.sleep(0.1)
        if release.exists():
            break
        beaten = Path(f"{a['beaten']}-{phase}")
        result = await _heartbeat_rounds(conns, formed)
        beaten.with_suffix(".tmp").write_text(json.dumps(result))
        beaten.with_suffix(".tmp").rename(beaten)
    while not release.exists():
        await asyncio.sleep(0.1)
    for c in conns:
        await c.client.close()
    return stats


async def _heartbeat_rounds(
    conns: list[_Conn], formed: list[tuple[str, int, str, str]]
) -> dict[str, Any]:
    """HB_ROUNDS heartbeats from every formed member (Heartbeat v4, pipelined over the
    connections); every answer must be NONE: the members are live and Stable."""
    import asyncio

    errors: dict[str, int] = {}
    sent = 0
    for _ in range(HB_ROUNDS):
        futures = []
        for i, conn in enumerate(conns):
            mine = formed[i :: len(conns)]
            if mine:
                futures += await conn.send(
                    [
                        conn.client.heartbeat_request(g, gen, mid, group_instance_id=inst)
                        for g, gen, mid, inst in mine
                    ]
                )
        for reply in await asyncio.wait_for(asyncio.gather(*futures), 120):
            code = str(int(reply.error_code))
            errors[code] = errors.get(code, 0) + 1
        sent += len(futures)
    return {"heartbeats": sent, "errors": errors}


def _timer_bytes(core: Any) -> int:
    """Bytes of the timer queue: its dicts (sessions per group, bounds, other timers) and heap,
    entry and key tuples, deadlines (id strings are the members' own)."""
    queue = core._queue
    seen: set[int] = set()
    total = 0

    def add(*objs: Any) -> None:
        nonlocal total
        for obj in objs:
            if id(obj) not in seen:
                seen.add(id(obj))
                total += sys.getsizeof(obj)

    add(queue.sessions, queue.bounds, queue._other, queue.heap)
    for members in queue.sessions.values():
        add(members, *members.values())
    add(*queue.bounds.values())
    for entry in queue.heap:
        add(entry, entry[0], entry[1])
    for key, deadline in queue._other.items():
        add(key, deadline)
    return total


def _model(a: dict[str, Any]) -> dict[str, Any]:
    """The same members through the pure state machine, under tracemalloc: the Python heap
    the node's core state needs, split into payload, bookkeeping and timers."""
    from app.group.config import CoreConfig
    from app.group.coordinator import GroupCoordinator
    from app.group.messages import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
    from app.group.results import SyncDone

    groups, members = a["groups"], a["members"]
    core = GroupCoordinator(
        CoreConfig(initial_rebalance_delay_ms=DELAY_MS, max_session_timeout_ms=1_800_000),
        lambda prefix: f"{prefix}-{uuid.uuid4()}",
    )
    hosts = [f"/127.0.0.1:{40000 + i}" for i in range(CONNECTIONS)]  # per connection, shared
    cids = [f"mem-model-{i}" for i in range(CONNECTIONS)]
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    now, handle = 1_000_000, 0
    payload = 0  # sys.getsizeof of what each member carries (unique objects per member)
    chunk = 500
    for first in range(0, groups, chunk):
        ids = [group_name(i) for i in range(first, min(groups, first + chunk))]
        joined: dict[int, tuple[str, str]] = {}
        for gi, gid in enumerate(ids):
            for j in range(members):
                handle += 1
                inst = instance_id(gid, j)
                req = JoinGroupRequest(
                    gid,
                    "",
                    inst,
                    SESSION_MS,
                    REBALANCE_MS,
                    "consumer",
                    (("range", subscription()),),
                    cids[(first + gi) % CONNECTIONS],
                    hosts[(first + gi) % CONNECTIONS],
                    None,
                    False,
                    True,
                )
                core.join_group(handle, req, now)
                joined[handle] = (gid, inst)
        replies = []
        for step in (DELAY_MS, DELAY_MS):  # first window, then the extension (protocol.md §5.2)
            now += step
            replies += core.poll_timers(now).replies
        writes = []
        for h, resp in replies:
            gid, inst = joined[h]
            plan: tuple[tuple[str, bytes], ...] = ()
            if resp.leader == resp.member_id:
                mids = sorted(m.member_id for m in resp.members)
                plan = tuple(
                    (mid, assignment(list(range(k * PARTS_PER_MEMBER, (k + 1) * PARTS_PER_MEMBER))))
                    for k, mid in enumerate(mids)
                )
            handle += 1
            sreq = SyncGroupRequest(
                gid, resp.generation_id, resp.member_id, inst, "consumer", "range", plan
            )
            writes += core.sync_group(handle, sreq, now).writes
        for w in writes:
            assert isinstance(w.continuation, SyncDone)
            core.on_write_complete(w.continuation, None, now)
        del replies, writes, joined
        now += 1
    states = {g.state.value for g in core.groups.values()}
    for g in core.groups.values():
        for m in g.members.values():
            payload += sum(
                sys.getsizeof(x)
                for x in (m.member_id, m.group_instance_id, m.protocols[0][1], m.assignment)
            )
    gc.collect()
    total = tracemalloc.get_traced_memory()[0] - base
    n = groups * members
    # timers as they stand: the objects only they hold (id strings are the members' own)
    heap_entries = len(core.heap)
    timers = _timer_bytes(core)
    # heartbeats move deadlines in place: what they leave behind shows here
    hb_groups = [g for g in list(core.groups.values())[: max(1, groups // 10)]]
    hb_members = sum(len(g.members) for g in hb_groups)
    gc.collect()
    before_hb = tracemalloc.get_traced_memory()[0]
    for _ in range(HB_ROUNDS):
        now += 3000
        for g in hb_groups:
            for m in g.members.values():
                core.heartbeat(
                    HeartbeatRequest(g.group_id, g.generation, m.member_id, m.group_instance_id),
                    now,
                )
        core.poll_timers(now)
    gc.collect()
    hb_growth = tracemalloc.get_traced_memory()[0] - before_hb
    tracemalloc.stop()
    return {
        "states": sorted(states),
        "members": n,
        "total": total,
        "timers": timers,
        "payload": payload,
        "heap_entries": heap_entries,
        "hb_per_member": hb_growth / max(1, hb_members),
    }


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    if args.get("mode") == "model":
        return _model(args)
    return await _formation(args)


# ---- measurement -------------------------------------------------------------------------------


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as r:
        data: bytes = r.read()
        return data


def _gauges(admin_url: str) -> tuple[dict[str, float], float]:
    """coordinator_groups by state and coordinator_members from /metrics."""
    text = _get(admin_url + "/metrics").decode()
    states = {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'^coordinator_groups\{state="(\w+)"\} (\S+)$', text, re.M)
    }
    found = re.search(r"^coordinator_members (\S+)$", text, re.M)
    return states, float(found.group(1)) if found else -1.0


def _check_groups(admin_url: str, ids: list[str], members: int) -> None:
    for gid in ids:
        g = json.loads(_get(f"{admin_url}/groups/{gid}"))
        ok = (
            g["state"] == "Stable"
            and len(g["members"]) == members
            and all(m["assignment"] and m["group_instance_id"] for m in g["members"])
        )
        if not ok:
            raise RuntimeError(f"group {gid} is not Stable with {members} assigned members: {g}")


def _settled_rss(pid: int, samples: int, pause: float) -> int:
    """Median of a few samples after a pause (the event loop drains, garbage is collected)."""
    got = []
    for _ in range(samples):
        time.sleep(pause)
        got.append(rss_bytes(pid))
    return sorted(got)[len(got) // 2]


def _mib(b: float) -> str:
    return f"{b / 2**20:.1f} MiB"


def run(opts: BenchOptions) -> Figure:
    groups, members = (100, 10) if opts.smoke else (10_000, 10)
    warm_groups = 10 if opts.smoke else 50
    n = groups * members
    nworkers = worker_processes()
    conns = 10 * members if opts.smoke else CONNECTIONS
    sync = opts.workdir / "memory-sync"
    sync.mkdir(parents=True, exist_ok=True)
    mine = member_bytes(group_name(0))
    own = sum(mine.values())
    floor = 1024 + own

    with node(
        opts,
        "memory",
        COORD_TOPICS=f"{TOPIC}:{members * PARTS_PER_MEMBER}",
        COORD_INITIAL_REBALANCE_DELAY_MS=str(DELAY_MS),
        COORD_MAX_SESSION_TIMEOUT_MS="1800000",
        COORD_LOG_PARTITIONS="16",
    ) as proc:
        assert proc.proc is not None
        pid = proc.proc.pid
        print(f"[memory] node pid {pid}", file=sys.stderr, flush=True)
        # warm-up: a few groups formed (they stay; their members are not counted)
        for f in ("go-warm", "release-warm"):
            (sync / f).touch()
        run_workers(
            __name__,
            [
                {
                    "port": proc.kafka_port,
                    "tag": "warm",
                    "first": groups,
                    "count": warm_groups,
                    "members": members,
                    "connections": 5 * members,
                    "connected": str(sync / "connected-warm"),
                    "go": str(sync / "go-warm"),
                    "ready": str(sync / "ready-warm"),
                    "release": str(sync / "release-warm"),
                    "beat": str(sync / "beat-warm"),
                    "beaten": str(sync / "beaten-warm"),
                }
            ],
        )
        _gauges(proc.admin_url)
        _check_groups(proc.admin_url, [group_name(groups)], members)
        before = _settled_rss(pid, 3, 0.5)

        release, go, beat = sync / "release", sync / "go", sync / "beat"
        args = [
            {
                "port": proc.kafka_port,
                "tag": f"w{w}",
                "first": w * groups // nworkers,
                "count": (w + 1) * groups // nworkers - w * groups // nworkers,
                "members": members,
                "connections": max(members, conns // nworkers),
                "connected": str(sync / f"connected-{w}"),
                "go": str(go),
                "ready": str(sync / f"ready-{w}"),
                "release": str(release),
                "beat": str(beat),
                "beaten": str(sync / f"beaten-{w}"),
            }
            for w in range(nworkers)
        ]
        results: list[dict[str, Any]] = []
        failure: list[BaseException] = []

        def drive() -> None:
            try:
                results.extend(run_workers(__name__, args, timeout=300))
            except BaseException as exc:  # reported below, with the stderr
                failure.append(exc)

        peak = 0  # RSS sampled while waiting (VmHWM would include the start-up peak)

        def wait_for(key: str, limit: float) -> None:
            nonlocal peak
            deadline = time.time() + limit
            while not all(Path(a[key]).exists() for a in args):
                if failure or not thread.is_alive():
                    raise RuntimeError(f"memory workers failed: {failure}")
                if time.time() > deadline:
                    raise TimeoutError(f"memory workers not {key} in {limit:.0f} s")
                peak = max(peak, rss_bytes(pid))
                time.sleep(0.1)

        thread = threading.Thread(target=drive, daemon=True)
        thread.start()
        try:
            wait_for("connected", 60)
            connected = _settled_rss(pid, 3, 0.3)
            cpu0, t0 = process_cpu(pid), time.time()
            go.touch()
            wait_for("ready", 280)
            formed_s = time.time() - t0
            node_cpu = process_cpu(pid) - cpu0
            stats = [json.loads(Path(a["ready"]).read_text()) for a in args]
            states, n_members = _gauges(proc.admin_url)
            total_groups = groups + warm_groups
            if states.get("Stable") != total_groups or n_members != total_groups * members:
                raise RuntimeError(f"not all Stable: {states}, {n_members} members")
            sample = random.Random(6).sample(range(groups), min(5, groups))
            _check_groups(proc.admin_url, [group_name(i) for i in sample], members)
            after = _settled_rss(pid, 5, 0.6)
            formation_peak = peak
            beats, after_hb, hb_s = [], [], []
            for phase in range(HB_PHASES):
                Path(f"{beat}-{phase}").touch()
                t_hb = time.time()
                for a in args:
                    a[f"beaten-{phase}"] = f"{a['beaten']}-{phase}"
                wait_for(f"beaten-{phase}", 300)
                hb_s.append(time.time() - t_hb)
                beats += [json.loads(Path(a[f"beaten-{phase}"]).read_text()) for a in args]
                after_hb.append(_settled_rss(pid, 5, 0.6))
        finally:
            go.touch()
            release.touch()
            thread.join(30)
        if failure:
            raise RuntimeError(f"memory workers failed: {failure[0]}") from failure[0]

    model = run_workers(__name__, [{"mode": "model", "groups": groups, "members": members}])[0]
    if model["states"] != ["Stable"]:
        raise RuntimeError(f"model groups not Stable: {model['states']}")

    grown = after - before
    heartbeats = sum(b["heartbeats"] for b in beats)
    hb_errors: dict[str, int] = {}
    for b in beats:
        for code, k in b["errors"].items():
            hb_errors[code] = hb_errors.get(code, 0) + k
    if set(hb_errors) != {"0"}:
        raise RuntimeError(f"heartbeats of the formed fleet answered {hb_errors}")
    first_hb = (after_hb[0] - after) / n  # buffers and allocator pools reach their size
    hb_growth = (after_hb[-1] - after_hb[0]) / n  # what more heartbeats add
    per = grown / n
    core = model["total"] / n
    timers = model["timers"] / n
    payload = model["payload"] / n
    books = core - timers - payload
    conn_share = (connected - before) / n
    rest = per - core - conn_share
    coord_errors = sum(s["coordinator_errors"] for s in stats)
    joins = sum(s["joins"] for s in stats)
    rejoins = sum(s["rejoins"] for s in stats)
    worker_cpu = sum(s["cpu"] for s in stats)

    def row(what: str, total: float | None, bpm: float) -> list[str]:
        return [
            what,
            _mib(total) if total is not None else "",
            f"{bpm:.0f} B",
            f"{bpm / floor:.2f}x",
        ]

    rows = [
        row(
            f"floor: 1 KiB + own bytes ({mine['subscription']} B subscription + "
            f"{mine['assignment']} B assignment + {mine['ids']} B ids)",
            floor * n,
            floor,
        ),
        row(f"**node RSS growth, {n:,} members in {groups:,} Stable groups**", grown, per),
        row(
            "node peak RSS during formation (sampled every 0.1 s) - before",
            formation_peak - before,
            (formation_peak - before) / n,
        ),
        row("core state, same members through GroupCoordinator (tracemalloc)", core * n, core),
        row(
            "· payload objects: ids, subscription, assignment (with headers)", payload * n, payload
        ),
        row("· bookkeeping: Member, Group, dicts, tuples", books * n, books),
        row(
            f"· timers: sessions per group + heap ({model['heap_entries'] / n:.2f} heap "
            "entries/member)",
            timers * n,
            timers,
        ),
        row(
            f"{conns} open connections, idle (RSS before forming - before; "
            f"{(connected - before) / conns / 1024:.1f} KiB each)",
            connected - before,
            conn_share,
        ),
        row("rest of the RSS growth: runtime, allocator slack, SQLite cache", rest * n, rest),
        row(
            f"node RSS after the first {HB_ROUNDS} live heartbeats per member - after forming",
            after_hb[0] - after,
            first_hb,
        ),
        row(
            f"**node RSS growth over {HB_ROUNDS * (HB_PHASES - 1)} more heartbeats per member** "
            f"({heartbeats:,} heartbeats in all, every one answered NONE)",
            after_hb[-1] - after_hb[0],
            hb_growth,
        ),
        row(
            f"model: core heap growth over {HB_ROUNDS} heartbeats/member (tracemalloc)",
            None,
            model["hb_per_member"],
        ),
    ]
    # "does not grow": less than one heartbeat record's worth per member over all the rounds
    flat = hb_growth < 16
    verdict = (
        f"{per:.0f} B/member = {per / floor:.2f}x the floor ({floor} B = 1 KiB + {own} B own); "
        f"{hb_growth:+.0f} B/member over {HB_ROUNDS * (HB_PHASES - 1)} more heartbeats each; "
        f"goal ≤ 1.00x and no "
        f"growth with heartbeats: {'met' if per <= floor and flat else 'not met'}"
    )
    return Figure(
        key=KEY,
        title="5. Memory: RSS per member",
        goal=(
            "≤ 1 KiB per member plus its metadata bytes (100k members in 10k groups), and no "
            "growth while the fleet heartbeats"
        ),
        columns=["measure", "total", "per member", "vs floor"],
        rows=rows,
        verdict=verdict,
        method=(
            "One node on SQLite, initial rebalance delay 50 ms, session timeout 20 min (no "
            "heartbeats during the run), rebalance timeout 60 s. After a warm-up of "
            f"{warm_groups} groups the node's RSS is sampled (median of 3): {_mib(before)}. "
            f"{nworkers} worker processes then form {groups:,} groups x {members} static members "
            f"(JoinGroup v9 with group_instance_id, SyncGroup v5; the leader syncs a range "
            f"assignment) over {conns} connections (a forming group borrows one per member), "
            "kept open while measuring. Every group is "
            "checked Stable with all members assigned (/metrics gauges, and /groups/{id} for a "
            f"sample), then RSS is sampled again (median of 5): {_mib(after)}. The breakdown "
            "drives the same members through the pure GroupCoordinator under tracemalloc."
        ),
        notes=[
            f"formation: {formed_s:.1f} s, {fmt_rate(n / formed_s)} members/s; {joins:,} "
            f"JoinGroups ({rejoins} re-joins after REBALANCE_IN_PROGRESS/ILLEGAL_GENERATION, "
            f"{coord_errors} retries after a coordinator error)",
            f"CPU during formation: node {node_cpu:.1f} s ({node_cpu / formed_s:.0%} of one "
            f"core), load generators {worker_cpu:.1f} s over {nworkers} processes",
            f"heartbeats: after the RSS sample every member sent {HB_ROUNDS} Heartbeats v4, "
            f"{HB_PHASES} times ({', '.join(f'{x:.1f} s' for x in hb_s)}), RSS sampled after "
            f"each (median of 5): {', '.join(_mib(x) for x in after_hb)}. The first phase "
            "sizes what serving a burst needs (read and write buffers of 400 connections, "
            "allocator pools); the growth is measured from there. A heartbeat re-arms its "
            "member's session deadline in place; the timer heap gains no entry",
        ],
    )
