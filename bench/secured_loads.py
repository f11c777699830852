"""Figure 8 (a) and (b): figure 1's heartbeat load and figure 3's committers, over PLAINTEXT or
SASL_SSL (bench/security.py says how)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import heartbeats as hb
from bench.common import run_workers, sleep_until, start_barrier, worker_processes
from bench.generators import (
    COMMIT_MEMBERS,
    CommitStats,
    HeartbeatLoad,
    HeartbeatStats,
    commit_client_class,
    commit_percentile,
    heartbeat_percentile,
    run_committers,
)
from bench.probes import CpuWindow
from bench.secure_node import WORKER_BARRIER_S, client_context, connect, too_late


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """One load-generator process (bench.common.run_workers); `kind` says which load."""
    kinds = {"heartbeats": _heartbeat_worker, "commits": _commit_worker}
    result: dict[str, Any] = await kinds[args["kind"]](args)
    return result


# ---- (a) heartbeats: Figure 1's closed loop over either listener ---------------------------------


async def _heartbeat_worker(args: dict[str, Any]) -> dict[str, Any]:
    all_frames = json.loads(Path(args["frames_file"]).read_text())
    mine = [[bytes.fromhex(f) for f in conn] for conn in all_frames[args["index"] :: args["of"]]]
    start = float(args["start"])
    to_perf = time.perf_counter() - time.time()
    w_begin = start + float(args["warmup"])
    w_end = w_begin + float(args["window"])
    stats = HeartbeatStats(w_begin + to_perf, w_end + to_perf)
    clients = await asyncio.gather(
        *(
            connect(args["port"], args["security"], f"hb-{args['index']}-{i}")
            for i in range(len(mine))
        )
    )
    conns: list[HeartbeatLoad] = []
    for client, frames in zip(clients, mine, strict=True):
        transport = client._transport  # authenticated: the load protocol takes the connection
        assert transport is not None
        proto = HeartbeatLoad(frames, stats)
        transport.set_protocol(proto)
        proto.connection_made(transport)
        conns.append(proto)
    late = time.time() - start
    await sleep_until(start)
    for c in conns:
        c.start()
    await sleep_until(w_begin)
    cpu0 = time.process_time()
    await sleep_until(w_end)
    cpu1 = time.process_time()
    await asyncio.wait_for(asyncio.gather(*(c.done for c in conns)), 30)
    for c in conns:
        assert c.transport is not None
        c.transport.close()
    await asyncio.sleep(0.1)  # let the TLS close_notify go out
    return {
        "ok": stats.ok,
        "errors": {str(k): v for k, v in stats.errors.items()},
        "out_of_order": stats.out_of_order,
        "latency": {str(k): v for k, v in stats.latency.items()},
        "cpu": cpu1 - cpu0,
        "late": late,
    }


def heartbeat_window(
    port: int,
    pid: int,
    security: dict[str, str] | None,
    frames_file: Path,
    conns: int,
    window: float,
    warmup: float,
) -> hb.Window:
    """heartbeats.measure with this module's worker (the same load protocol, either listener)."""
    procs = min(worker_processes(), conns)
    start = start_barrier(WORKER_BARRIER_S)  # spawn, connect, authenticate before it
    cpu = CpuWindow(pid, start + warmup, start + warmup + window)
    cpu.start()
    base = {"kind": "heartbeats", "port": port, "security": security, "start": start}
    base |= {"frames_file": str(frames_file), "of": procs, "warmup": warmup, "window": window}
    results = run_workers(
        "bench.secured_loads",
        [{**base, "index": i} for i in range(procs)],
        timeout=window + warmup + 120,
    )
    cpu.join(5)
    too_late("heartbeat", results, warmup)
    hist: Counter[int] = Counter()
    errors: Counter[int] = Counter()
    for r in results:
        hist.update({int(k): v for k, v in r["latency"].items()})
        errors.update({int(k): v for k, v in r["errors"].items()})
    return hb.Window(
        rate=sum(r["ok"] for r in results) / window,
        p50=heartbeat_percentile(hist, 50),
        p99=heartbeat_percentile(hist, 99),
        server_cpu=cpu.server,
        loadgen_cpu=[r["cpu"] / window for r in results],
        machine_cpu=cpu.machine,
        errors=dict(errors),
        out_of_order=sum(r["out_of_order"] for r in results),
        late=max(r["late"] for r in results),
        lease_margin=None,
    )


# ---- (b) commits: Figure 3's committers over either listener ------------------------------------


async def _commit_worker(args: dict[str, Any]) -> dict[str, Any]:
    security = args["security"]
    cls = commit_client_class()
    if security:
        base = cls

        class SecureCommitClient(base):  # type: ignore[valid-type,misc]
            # replies to the authentication arrive before run_committers sets the real stats
            stats = CommitStats()

            @classmethod
            async def connect(cls, host: str, port: int, client_id: str = "", **_: Any) -> Any:
                return await super().connect(
                    host,
                    port,
                    client_id,
                    ssl=client_context(security["cafile"]),
                    sasl=(security["mechanism"], security["user"], security["password"]),
                )

        cls = SecureCommitClient
    return await run_committers(args, cls)


@dataclass
class CommitWindow:
    rate: float
    p50: float  # ms
    p99: float
    node_cpu: float  # cores
    gen_cpu: float
    verified: int
    committers: int
    errors: dict[str, int]


def commit_window(
    port: int,
    pid: int,
    security: dict[str, str] | None,
    prefix: str,
    groups: int,
    window: float,
    warmup: float,
    ready: Path,
) -> CommitWindow:
    n_workers = min(worker_processes(), groups)
    ready.mkdir(parents=True, exist_ok=True)
    args = [
        {
            "kind": "commits",
            "security": security,
            "port": port,
            "groups": [f"{prefix}-{g:04d}" for g in range(w, groups, n_workers)],
            "ready_dir": str(ready),
            "index": w,
            "workers": n_workers,
            "warmup": warmup,
            "window": window,
            "node_pid": pid if w == 0 else 0,
        }
        for w in range(n_workers)
    ]
    results = run_workers("bench.secured_loads", args, timeout=180)
    hist: dict[int, int] = {}
    errors: Counter[str] = Counter()
    for r in results:
        errors.update(r["errors"])
        for b, n in r["lat_hist"]:
            hist[b] = hist.get(b, 0) + n
    seconds = results[0]["seconds"]
    return CommitWindow(
        rate=sum(r["ok"] for r in results) / seconds,
        p50=commit_percentile(hist, 50),
        p99=commit_percentile(hist, 99),
        node_cpu=results[0]["node_cpu"] / seconds,
        gen_cpu=sum(r["cpu"] for r in results) / seconds,
        verified=sum(r["verified"] for r in results),
        committers=groups * COMMIT_MEMBERS,
        errors=dict(errors),
    )
