"""Failover time: the node owning the most partitions is SIGKILLed and the survivors' /cluster
is polled every 20 ms until every partition is `active` on a survivor.

Reported as TTL + takeover+load, split into kill -> lease expiry (the victim's remaining lease
time, read from its /cluster just before the kill), expiry -> first claim by a survivor
(lease-round latency, <= TTL/4), and first claim -> all active (loading). Each repetition
restarts the victim and waits for the cluster to settle before killing the node that then
owns the most partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.group.records import Record
from bench.cluster import LOAD_FAILED, POLL_S, log, node_env, running, served, wait_settled
from bench.databases import Backend
from bench.synthetic_log import populate
from tests.support.nodes import CoordinatorProcess


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
