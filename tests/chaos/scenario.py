"""One chaos run: coordinator nodes on a shared database, real consumers, the protocol-client
workload, seeded fault rounds, then the invariants of issue 3 checked from client observations
and the event log.

The test thread injects the faults; consumer processes and the workload thread generate load
all along. Every wait is bounded; `teardown()` SIGKILLs every child whatever happened.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader

from app.runtime.placement import partition_for
from tests.chaos import checks
from tests.chaos.workload import Workload, fetch_committed, probe_service
from tests.support.consumers import ConsumerProcess, Hub
from tests.support.kafka_client import KafkaTestClient, encode_request
from tests.support.nodes import ROOT, CoordinatorProcess
from tests.support.postgres import PrivatePostgres

STATIC_GROUP = "chaos-static"
DYNAMIC_GROUP = "chaos-dynamic"
CLIENT_TOPIC = "orders"
CLIENT_PARTITIONS = 6
WORKLOAD_TOPIC = "work"
WORKLOAD_PARTITIONS = 4
# the real clients of a chaos run, beyond the consumer driver's defaults: a commit is tried once
# and its outcome reported (the driver sends one every 0.8 s; the checks count the acknowledged
# ones), a retriable error escaping poll() is reported and the poll retried, as an application
# must (kafka-python 3.0 re-raises its heartbeat loop's KafkaConnectionError('111 ECONNREFUSED')
# from poll() once when the coordinator's node dies: README, Several nodes, failover), a
# non-retriable one fails the consumer, short polls, request timeouts and reconnect backoffs (the
# cluster loses nodes all along), and librdkafka's group statistics
CHAOS_CLIENT: dict[str, str | int | bool | None] = {
    "commit_errors": "report",
    "poll_errors": "retry",
    "poll_ms": 100,
    "request_timeout_ms": 20000,
    "reconnect_backoff_max_ms": 500,
    "stats": True,
}


@dataclass(frozen=True)
class Config:
    name: str
    backend: str  # "postgres" | "sqlite"
    nodes: int
    rounds: int
    faults: tuple[str, ...]  # subset of kill, stop, pg_restart
    protocol_groups: int = 30
    static_members: int = 3
    dynamic_members: int = 2
    lease_ttl_ms: int = 2000
    log_partitions: int = 8
    static_session_timeout_ms: int = 15000
    seed: int | None = None
    budget_s: float = 300.0  # past this a watchdog kills every process: the test fails fast


@dataclass
class Counts:
    kills: int = 0
    stops: int = 0
    pg_restarts: int = 0
    takeovers_observed: int = 0  # partitions seen changing owner across a fault
    lease_epoch_bumps: int = 0  # lease acquisitions during the fault phase (from the lease table)
    acknowledged_commits: int = 0
    acknowledged_commits_real_clients: int = 0
    zombie_probes_refused: int = 0
    client_anomalies: int = 0  # a real client gave up by itself while the cluster served
    violations: int = 0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class ChaosRun:
    def __init__(self, cfg: Config, workdir: Path) -> None:
        self.cfg = cfg
        self.workdir = workdir
        self.seed = (
            cfg.seed
            if cfg.seed is not None
            else int(os.environ.get("CHAOS_SEED", "0")) or random.SystemRandom().randrange(1, 2**31)
        )
        self.rng = random.Random(self.seed)
        self.pg: PrivatePostgres | None = None
        self.db_url = ""
        self.nodes: list[CoordinatorProcess] = []
        self.hub = Hub()
        self.consumers: list[ConsumerProcess] = []
        self.workload: Workload | None = None
        self.counts = Counts()
        self.violations: list[str] = []
        self.violation_times: list[float] = []
        self.anomalies: list[str] = []
        self.timeline: list[str] = []
        self.failover_s: list[float] = []
        self.lost_leases: list[checks.LostLease] = []
        self.probe_acks: list[tuple[str, str, int, int]] = []
        self.svc_acks: list[tuple[str, str, int, int]] = []  # acknowledged service probes
        self.svc_offsets = itertools.count(2_000_000_000)
        self.svc_groups: dict[int, str] = {}  # log partition -> a group placed there
        for k in itertools.count():
            if len(self.svc_groups) == cfg.log_partitions:
                break
            self.svc_groups.setdefault(partition_for(f"svc-{k}", cfg.log_partitions), f"svc-{k}")
        self._commit_driver: threading.Thread | None = None
        self._driver_stop = threading.Event()
        self._sent: dict[str, int] = {}  # consumer name -> last offset sent
        self._t0 = time.monotonic()
        self._watchdog: threading.Timer | None = None
        self.summary = ""

    # ==== helpers ===========================================================================

    def note(self, msg: str) -> None:
        line = f"[{time.monotonic() - self._t0:6.1f}s] {msg}"
        self.timeline.append(line)
        print(line, flush=True)

    def violation(self, msg: str) -> None:
        self.violation_times.append(time.time())
        self.violations.append(msg)
        self.note(f"VIOLATION: {msg}")

    @property
    def all_partitions(self) -> list[int]:
        return [checks.METADATA_PARTITION, *range(self.cfg.log_partitions)]

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.cfg.log_partitions)

    def claims(self) -> dict[int, tuple[int, int]]:
        """partition -> (node id, epoch) of the live node serving it (an active partition in its
        own /cluster view; the highest epoch wins if two nodes still claim one)."""
        out: dict[int, tuple[int, int]] = {}
        for n in self.nodes:
            view = n.cluster()
            if view is None:
                continue
            for p in view["partitions"]:
                if p["state"] == "active" and p["owner"] == n.node_id:
                    cur = out.get(p["partition"])
                    if cur is None or p["epoch"] > cur[1]:
                        out[p["partition"]] = (n.node_id, p["epoch"])
        return out

    def node(self, node_id: int) -> CoordinatorProcess:
        return next(n for n in self.nodes if n.node_id == node_id)

    def wait_served(self, timeout: float, what: str) -> dict[int, tuple[int, int]]:
        """Until every log partition is active on a live node."""
        deadline = time.monotonic() + timeout
        claims: dict[int, tuple[int, int]] = {}
        while time.monotonic() < deadline:
            claims = self.claims()
            if all(p in claims for p in self.all_partitions):
                return claims
            time.sleep(0.1)
        missing = [p for p in self.all_partitions if p not in claims]
        raise AssertionError(f"{what}: partitions {missing} not served after {timeout}s")

    def owner(self, group: str) -> tuple[int, int] | None:
        return self.claims().get(self.partition_of(group))

    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    def check_consumers(self) -> None:
        for c in self.consumers:
            f = c.failure()
            if f:
                raise AssertionError(f)

    # ==== setup =============================================================================

    def _expire(self) -> None:
        self.violation(
            f"{self.cfg.name} exceeded its {self.cfg.budget_s:.0f}s budget: killing every process"
        )
        self.teardown()

    def setup(self) -> None:
        cfg = self.cfg
        self._watchdog = threading.Timer(cfg.budget_s, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()
        self.note(f"{cfg.name}: seed {self.seed} (rerun with CHAOS_SEED={self.seed})")
        if cfg.backend == "postgres":
            self.pg = PrivatePostgres()
            self.pg.start()
            self.db_url = self.pg.create_database("chaos")
            self.note(f"private PostgreSQL on 127.0.0.1:{self.pg.port} ({self.pg.base})")
        else:
            self.db_url = f"sqlite+aiosqlite:///{self.workdir}/coordinator.db"
        env = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
        env["COORD_DATABASE_URL"] = self.db_url
        subprocess.run(
            [sys.executable, "-m", "cli.main", "migrate"],
            cwd=ROOT, env=env, check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        node_env = {
            "COORD_LEASE_TTL_MS": str(cfg.lease_ttl_ms),
            "COORD_LOG_PARTITIONS": str(cfg.log_partitions),
            "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
            "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
            "COORD_TOPICS": f"{CLIENT_TOPIC}:{CLIENT_PARTITIONS},{WORKLOAD_TOPIC}:"
            f"{WORKLOAD_PARTITIONS}",
            "COORD_LOG_LEVEL": "INFO",
            # compaction runs all along, so it meets loads and takeovers; the checks read the
            # archived history too
            "COORD_COMPACTION_INTERVAL_MS": "3000",
            "COORD_ARCHIVE_HISTORY": "true",
        }
        self.nodes = [
            CoordinatorProcess(self.db_url, self.workdir, node_env, node_id=i)
            for i in range(1, cfg.nodes + 1)
        ]
        for n in self.nodes:
            n.start(wait_ready=False)
        for n in self.nodes:
            n.wait_ready(40)
        self.wait_even(30)
        self.wait_service("startup", time.monotonic())
        self.note(f"{cfg.nodes} nodes ready: {self.placement()}")

        boot = self.bootstrap()
        for i in range(cfg.static_members):
            self.consumers.append(
                ConsumerProcess(
                    self.hub, self.workdir, "confluent", boot, STATIC_GROUP, CLIENT_TOPIC,
                    f"static-{i}",
                    instance=f"static-{i}",
                    session_timeout_ms=cfg.static_session_timeout_ms,
                    heartbeat_interval_ms=1000,
                    debug="cgrp",  # librdkafka's group log, shown when the test fails
                    **CHAOS_CLIENT,
                )
            )  # fmt: skip
        for i in range(cfg.dynamic_members):
            self.consumers.append(
                ConsumerProcess(
                    self.hub, self.workdir, "kafka-python", boot, DYNAMIC_GROUP, CLIENT_TOPIC,
                    f"dynamic-{i}", session_timeout_ms=10000, heartbeat_interval_ms=1000,
                    **CHAOS_CLIENT,
                )
            )  # fmt: skip
        groups = [f"chaos-w{i:02d}" for i in range(cfg.protocol_groups)]
        self.workload = Workload(
            [n.address for n in self.nodes], groups, WORKLOAD_TOPIC, WORKLOAD_PARTITIONS,
            self.seed,
        )  # fmt: skip
        self.workload.start()
        self._commit_driver = threading.Thread(
            target=self._drive_commits, name="commit-driver", daemon=True
        )
        self._commit_driver.start()

    def placement(self) -> str:
        claims = self.claims()
        per: dict[int, list[int]] = collections.defaultdict(list)
        for p, (n, _e) in sorted(claims.items()):
            per[n].append(p)
        return " ".join(f"n{n}:{ps}" for n, ps in sorted(per.items()))

    def wait_even(self, timeout: float) -> None:
        """Until every partition is served and every live node has its share (±1)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            claims = self.claims()
            live = [n.node_id for n in self.nodes if n.live]
            load = collections.Counter(n for n, _ in claims.values())
            if (
                all(p in claims for p in self.all_partitions)
                and live
                and (max(load[n] for n in live) - min(load[n] for n in live) <= 1)
            ):
                return
            time.sleep(0.1)
        raise AssertionError(f"placement not even after {timeout}s: {self.placement()}")

    def _drive_commits(self) -> None:
        """Every ~0.8 s each real consumer is told to commit the next value of one counter."""
        counter = 1_000_000
        while not self._driver_stop.is_set():
            for c in self.consumers:
                counter += 1
                c.send(f"commit {counter}", quiet=True)  # a dead consumer: failure() says
                self._sent[c.name] = counter
            self._driver_stop.wait(0.8)

    # ==== baseline ==========================================================================

    def wait_baseline(self, timeout: float = 60.0) -> None:
        """The static group settled: its members own all partitions, disjointly, and the log's
        latest generation of the group is the one they hold. Every group of the workload synced
        once and the dynamic consumers have partitions."""
        assert self.workload is not None
        deadline = time.monotonic() + timeout
        static = [c for c in self.consumers if c.client == "confluent"]
        dynamic = [c for c in self.consumers if c.client == "kafka-python"]
        stable_since: float | None = None
        last_sig: Any = None
        while time.monotonic() < deadline:
            self.check_consumers()
            owned = [c.owned for c in static]
            union = frozenset().union(*owned) if owned else frozenset()
            ok_static = not static or (
                union == frozenset(range(CLIENT_PARTITIONS))
                and sum(len(o) for o in owned) == CLIENT_PARTITIONS
                and all(owned)
            )
            ok_dynamic = all(c.owned for c in dynamic)
            _acks, syncs = self.workload.snapshot()
            ok_work = {s.group for s in syncs} == set(self.workload.groups)
            sig = (tuple(owned), tuple(c.owned for c in dynamic))
            if ok_static and ok_dynamic and ok_work:
                if sig != last_sig:
                    stable_since = time.monotonic()
                    last_sig = sig
                elif stable_since is not None and time.monotonic() - stable_since > 3.0:
                    break
            else:
                stable_since, last_sig = None, None
            time.sleep(0.2)
        else:
            raise AssertionError(
                "workload did not settle: static "
                f"{[sorted(c.owned) for c in static]}, dynamic {[sorted(c.owned) for c in dynamic]}"
            )
        snap = checks.read_log(self.db_url)
        recs = checks.group_records(snap).get(STATIC_GROUP, [])
        assert recs, "no group metadata record of the static group in the log"
        self.static_baseline = recs[-1]
        self.static_baseline_t = time.time()
        self.static_owned = {c.name: c.owned for c in static}
        self.baseline_epochs = {r.partition: r.epoch for r in snap.leases}
        self.note(
            f"baseline: static group generation {self.static_baseline.generation} "
            f"{ {k: sorted(v) for k, v in self.static_owned.items()} }, "
            f"{len(syncs)} syncs in {len(self.workload.groups)} workload groups"
        )

    # ==== faults ============================================================================

    def run_rounds(self) -> None:
        for i in range(self.cfg.rounds):
            fault = (
                self.cfg.faults[i % len(self.cfg.faults)]
                if i < len(self.cfg.faults)
                else self.rng.choice(self.cfg.faults)
            )
            time.sleep(self.rng.uniform(0.3, 1.5))
            self.check_consumers()
            getattr(self, f"fault_{fault}")(i)
            self.wait_served(30, f"round {i} ({fault}): recovery")
            self.wait_static_members(i)
            self.note(f"round {i} done: {self.placement()}")

    def wait_static_members(self, i: int, timeout: float = 15.0) -> None:
        """The static members reach their coordinator again (an acknowledged commit sent after
        the recovery) and get a heartbeat interval to heartbeat, before the next fault: the
        invariant is about members that keep heartbeating within their session timeout, so
        faults must not be chained faster than they can follow. (A member whose client gave
        up by itself is not waited for; verify() reports it.)"""
        since = time.time()
        deadline = time.monotonic() + timeout
        late: list[ConsumerProcess] = []
        while time.monotonic() < deadline:
            late = [
                c
                for c in self.consumers
                if c.client == "confluent"
                and c.gave_up() is None
                and not any(e["t"] > since for e in c.snapshot("committed"))
            ]
            if not late:
                break
            time.sleep(0.1)
        if not late:
            time.sleep(1.2)  # > heartbeat.interval.ms
            return
        p = self.partition_of(STATIC_GROUP)
        served = p in self.service(5.0)
        self.violation(
            f"round {i}: static members {[c.name for c in late]} had no commit acknowledged "
            f"within {timeout:.0f}s after every partition was served again (their group's "
            f"partition {p} {'accepts' if served else 'does not accept'} commits from our client)"
        )

    def _moved(self, before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> int:
        """Partitions now served by another node than before the fault (takeovers)."""
        n = sum(1 for p, (node, _e) in after.items() if p in before and before[p][0] != node)
        self.counts.takeovers_observed += n
        return n

    def service(self, deadline_s: float, exclude: int | None = None) -> dict[int, float]:
        """Standalone commits to a group of each log partition through the live nodes (except
        `exclude`) until all are acknowledged or the deadline: partition -> seconds taken."""
        addresses = [n.address for n in self.nodes if n.live and n.node_id != exclude]
        self.rng.shuffle(addresses)
        return asyncio.run(
            probe_service(
                addresses, self.svc_groups, WORKLOAD_TOPIC, self.svc_offsets, deadline_s,
                self.svc_acks,
            )
        )  # fmt: skip

    def wait_service(self, what: str, t_start: float, timeout: float = 30.0) -> float:
        """Until every log partition acknowledges a commit; seconds since `t_start`."""
        served = self.service(timeout)
        missing = sorted(set(self.svc_groups) - set(served))
        if missing:
            raise AssertionError(
                f"{what}: partitions {missing} accept no commit after {timeout}s; "
                f"placement {self.placement()}"
            )
        return time.monotonic() - t_start

    def pg_activity(self) -> str:
        """Sessions of the private PostgreSQL that are idle in a transaction or wait for a
        lock (why a takeover can hang), as text for a violation message."""
        if self.pg is None:
            return ""
        try:
            rows = self.pg.query(
                "chaos",
                "SELECT pid, state, wait_event_type, "
                "round(extract(epoch FROM now() - xact_start)::numeric, 1) AS xact_age_s, "
                "left(query, 80) AS query FROM pg_stat_activity WHERE datname = 'chaos' "
                "AND (state LIKE 'idle in transaction%' OR wait_event_type = 'Lock')",
            )
        except Exception as e:
            return f"; pg_stat_activity unavailable: {e!r}"
        return "; PostgreSQL sessions in a transaction or waiting for a lock: " + "; ".join(
            str(r) for r in rows
        )

    def lease_table(self) -> dict[int, tuple[int | None, int]]:
        """partition -> (owner, epoch) straight from the database (the authority)."""
        try:
            return {
                r.partition: (r.owner_node_id, r.epoch) for r in checks.read_leases(self.db_url)
            }
        except Exception:  # e.g. the database is restarting
            return {}

    def _target(self) -> tuple[str, str]:
        """A group and the phase to hit: the static or dynamic consumer group (any time), or a
        workload group at the moment it sends a JoinGroup, SyncGroup or OffsetCommit."""
        assert self.workload is not None
        kind = self.rng.choice(["static", "dynamic", "join", "sync", "commit", "commit"])
        if kind == "static":
            return STATIC_GROUP, "any"
        if kind == "dynamic":
            return DYNAMIC_GROUP, "any"
        groups = self.workload.groups
        if kind in ("join", "sync"):
            groups = groups[:: self.workload.two_member_every]  # two members: parked requests
        return self.rng.choice(groups), kind

    def _hit(self, group: str, phase: str) -> tuple[int, int] | None:
        """Wait (bounded) until `group` sends a request of `phase`; the owner to fault."""
        assert self.workload is not None
        owner = self.owner(group)
        if phase != "any":
            ev = self.workload.arm(group, phase)
            if not ev.wait(8.0):
                self.note(f"  {group} sent no {phase} within 8 s: faulting its owner anyway")
            self.workload.disarm()
        return owner

    def fault_kill(self, i: int) -> None:
        group, phase = self._target()
        owner = self._hit(group, phase)
        if owner is None:
            self.note(f"round {i}: {group} has no owner right now; skipping the kill")
            return
        victim = self.node(owner[0])
        before = self.claims()
        t = time.monotonic()
        victim.kill()
        self.counts.kills += 1
        self.note(
            f"round {i}: SIGKILL node {victim.node_id} (owner of {group} p"
            f"{self.partition_of(group)} at epoch {owner[1]}) during {phase}"
        )
        took = self.wait_service(f"round {i}: takeover after SIGKILL of node {victim.node_id}", t)
        after = self.wait_served(10, f"round {i}: takeover after SIGKILL")
        self.failover_s.append(took)
        self.note(
            f"  every partition accepts commits again {took:.1f}s after the kill "
            f"({self._moved(before, after)} taken over): {self.placement()}"
        )
        time.sleep(self.rng.uniform(0, 0.5))
        t = time.monotonic()
        victim.start(wait_ready=True, timeout=40)
        self.wait_even(20)
        self.note(
            f"  node {victim.node_id} restarted and got its share in "
            f"{time.monotonic() - t:.1f}s: {self.placement()}"
        )

    def fault_stop(self, i: int) -> None:
        ttl_s = self.cfg.lease_ttl_ms / 1000
        group, phase = self._target()
        owner = self._hit(group, phase)
        if owner is None:
            self.note(f"round {i}: {group} has no owner right now; skipping the stop")
            return
        victim = self.node(owner[0])
        view = victim.cluster()
        held = {
            p["partition"]: p["epoch"]
            for p in (view or {}).get("partitions", [])
            if p["state"] is not None
        }
        probe_parts = sorted(p for p in held if p != checks.METADATA_PARTITION)
        probe = ZombieProbe(victim, self.cfg.log_partitions, probe_parts, i)
        probe.send("before")  # races the stop: in flight, or even acknowledged, is fine
        victim.sigstop()
        t = time.monotonic()
        self.counts.stops += 1
        self.note(
            f"round {i}: SIGSTOP node {victim.node_id} (owner of {group} during {phase}); "
            f"it held {held}"
        )
        # every lease it held must be taken at a higher epoch by another node (lease table)
        deadline = t + 2 * ttl_s + 1
        taken: dict[int, tuple[int, int]] = {}
        while time.monotonic() < deadline:
            leases = self.lease_table()
            taken = {
                p: (o, e)
                for p, (o, e) in leases.items()
                if p in held and o is not None and o != victim.node_id and e > held[p]
            }
            if len(taken) == len(held):
                break
            time.sleep(0.1)
        observed = now_ms()
        waited = time.monotonic() - t
        for p, (_n, e) in taken.items():
            self.lost_leases.append(checks.LostLease(victim.node_id, p, held[p], e, observed))
        if len(taken) < len(held):
            # resume it soon (below): the survivors are probably stuck too, and a long outage
            # would only add consequences (static sessions timing out) to this violation
            served = self.service(1.0, exclude=victim.node_id)
            unserved = sorted(set(self.svc_groups) - set(served))
            self.violation(
                f"round {i}: node {victim.node_id} paused for {waited:.1f}s (lease TTL {ttl_s}s) "
                f"but its partitions {sorted(set(held) - set(taken))} were not taken over "
                f"(lease table {self.lease_table()}); meanwhile the other nodes did not even "
                f"serve their own partitions {sorted(p for p in unserved if p not in held)}"
                + self.pg_activity()
            )
        else:
            self.counts.takeovers_observed += len(taken)
            self.note(f"  its leases were taken after {waited:.1f}s: {taken}")
            # the survivors serve every partition while it is still paused
            served = self.service(ttl_s + 3, exclude=victim.node_id)
            unserved = sorted(set(self.svc_groups) - set(served))
            if unserved:
                self.violation(
                    f"round {i}: while node {victim.node_id} was paused, partitions {unserved} "
                    "accepted no commit through the other nodes"
                )
            else:
                took = time.monotonic() - t
                self.failover_s.append(took)
                self.note(f"  every partition accepts commits {took:.1f}s after the stop")
        probe.send("during")  # queued in the socket: the zombie reads it when it resumes
        time.sleep(self.rng.uniform(0, 0.5))
        victim.sigcont()
        self.note(f"  SIGCONT node {victim.node_id} after {time.monotonic() - t:.1f}s")
        for label, (group_id, offset, error) in probe.results(8.0).items():
            if label == "during" and group_id:
                if error == 0:
                    self.violation(
                        f"round {i}: resumed node {victim.node_id} acknowledged a commit "
                        f"({group_id}={offset}) for partition {self.partition_of(group_id)} "
                        "that it had lost while paused"
                    )
                elif error > 0:
                    self.counts.zombie_probes_refused += 1
                self.note(f"  zombie probe sent during the pause -> error {error}")
            elif label == "before" and group_id and error == 0:
                self.probe_acks.append((group_id, WORKLOAD_TOPIC, 0, offset))
        # the resumed node must drop what it lost (at its next lease round)
        lost = {p: held[p] for p in taken}
        deadline = time.monotonic() + ttl_s * 1.5 + 2
        still: dict[int, int] = {}
        while time.monotonic() < deadline:
            v = victim.cluster()
            mine = {
                p["partition"]: p["epoch"]
                for p in (v or {}).get("partitions", [])
                if p["state"] is not None
            }
            still = {p: e for p, e in lost.items() if mine.get(p) == e}
            if v is not None and not still:
                break
            time.sleep(0.1)
        if still:
            self.violation(
                f"round {i}: resumed node {victim.node_id} still holds lost partitions at their "
                f"old epochs {still} {ttl_s * 1.5 + 2:.1f}s after SIGCONT"
            )
        else:
            self.note(f"  node {victim.node_id} dropped its lost partitions {sorted(lost)}")
        self.wait_service(f"round {i}: service after SIGCONT", t)
        self.wait_even(20)

    def fault_pg_restart(self, i: int) -> None:
        assert self.pg is not None
        mode = self.rng.choice(["fast", "immediate"])
        down = self.rng.uniform(0.2, 1.5)
        before = self.claims()
        t = time.monotonic()
        self.pg.restart(mode, down)
        self.counts.pg_restarts += 1
        self.note(f"round {i}: PostgreSQL restarted ({mode}, {down:.1f}s down)")
        took = self.wait_service(f"round {i}: service after the PostgreSQL restart", t)
        after = self.wait_served(10, f"round {i}: after the PostgreSQL restart")
        self.note(
            f"  every partition accepts commits {took:.1f}s after the stop "
            f"({self._moved(before, after)} changed owner): {self.placement()}"
        )
        self.wait_even(20)

    # ==== the end ===========================================================================

    def settle_and_stop_load(self) -> None:
        assert self.workload is not None
        self.wait_even(30)
        time.sleep(3.0)
        self._driver_stop.set()
        if self._commit_driver is not None:
            self._commit_driver.join(5)
        self.workload.stop()
        # each consumer answers every command it got, in order: wait for the last one
        deadline = time.monotonic() + 30
        for c in self.consumers:
            last = self._sent.get(c.name)
            while last is not None and time.monotonic() < deadline:
                done = {
                    e.get("offset")
                    for e in c.snapshot("committed", "commit_failed", "commit_skipped")
                }
                if last in done or c.failure():
                    break
                time.sleep(0.1)
        self.note("load stopped")

    def verify(self) -> None:
        assert self.workload is not None
        cfg = self.cfg
        self.check_consumers()
        for crash in self.workload.crashes:
            self.violation(crash)
        snap = checks.read_log(self.db_url)
        groups = checks.group_records(snap)
        final_epochs = {r.partition: r.epoch for r in snap.leases}
        self.counts.lease_epoch_bumps = sum(
            final_epochs.get(p, 0) - self.baseline_epochs.get(p, 0) for p in final_epochs
        )

        for v in checks.duplicate_offset_violations(snap):
            self.violation(v)
        for v in checks.epoch_violations(snap):
            self.violation(v)
        for v in checks.zombie_write_violations(snap, self.lost_leases):
            self.violation(v)
        for v in checks.generation_violations(groups):
            self.violation(v)
        for v in checks.double_assignment_violations(groups):
            self.violation(v)

        # client observations: one owner per partition per generation (workload syncs, and the
        # kafka-python consumers' assigned events, which carry their generation)
        acks, syncs = self.workload.snapshot()
        seen: dict[tuple[str, int, int], str] = {}
        for s in syncs:
            for p in s.partitions:
                other = seen.setdefault((s.group, s.generation, p), s.member_id)
                if other != s.member_id:
                    self.violation(
                        f"{s.group} gen {s.generation}: partition {p} synced to {other} and "
                        f"{s.member_id}"
                    )
        for c in self.consumers:
            if c.client != "kafka-python":
                continue
            for e in c.snapshot("assigned"):
                for p in e["all"]:
                    key = (DYNAMIC_GROUP, e.get("generation", -1), p)
                    other = seen.setdefault(key, c.name)
                    if other != c.name:
                        self.violation(
                            f"{DYNAMIC_GROUP} gen {key[1]}: partition {p} assigned to {other} "
                            f"and {c.name}"
                        )

        # the static group: no new generation, same assignment, no client-side rebalance —
        # up to the moment a member's client gave up by itself (librdkafka's own session
        # timeout or a fatal error): after that the group legitimately rebalances without it.
        # A give-up is a client anomaly when no violation happened in its silent session
        # before it (the cluster served all along: the client did not come back by itself);
        # otherwise it is a consequence of that violation, which already fails the test.
        session_s = cfg.static_session_timeout_ms / 1000
        for c in self.consumers:
            g = c.gave_up() if c.client == "confluent" else None
            if g is None:
                continue
            near = [v for v in self.violation_times if g[0] - session_s - 5 <= v <= g[0] + 1]
            if near:
                self.note(f"static member {c.name} gave up after the violation above: {g[1]}")
            else:
                self.counts.client_anomalies += 1
                self.anomalies.append(
                    f"CLIENT ANOMALY: static member {c.name}'s client gave up by itself while "
                    f"the cluster served (no violation in the {session_s:.0f}s before): {g[1]}"
                )
                self.note(self.anomalies[-1])
        base = self.static_baseline
        static = [c for c in self.consumers if c.client == "confluent"]
        gave_up = [g[0] for c in static if (g := c.gave_up()) is not None]
        until_s = min(gave_up) if gave_up else float("inf")
        after = [
            r
            for r in groups.get(STATIC_GROUP, [])
            if r.offset > base.offset and r.append_time_ms / 1000 < until_s
        ]
        gens = sorted({r.generation for r in after})
        if any(g != base.generation for g in gens):
            self.violation(
                f"static group {STATIC_GROUP}: generation {base.generation} at the baseline, "
                f"then generations {gens} in the log during the faults (members kept "
                f"heartbeating within {cfg.static_session_timeout_ms} ms)"
            )
        for r in after:
            if r.value is not None and r.assignments() != base.assignments():
                self.violation(
                    f"static group: assignment changed at p{r.partition}@{r.offset}: "
                    f"{r.assignments()} != {base.assignments()}"
                )
                break
        for c in static:
            moves = [
                e
                for e in c.snapshot("assigned", "revoked")
                if self.static_baseline_t < e["t"] < until_s
            ]
            if moves or (until_s == float("inf") and c.owned != self.static_owned[c.name]):
                self.violation(
                    f"static member {c.name} was rebalanced during the faults: {moves}, owned "
                    f"{sorted(c.owned)} (baseline {sorted(self.static_owned[c.name])})"
                )
        if gave_up:
            self.note(
                f"static-group checks applied until {until_s:.3f}, when a static member's "
                "client gave up by itself (client anomaly)"
            )

        # acknowledged commits: in the log, and OffsetFetch through the cluster returns them
        all_acks = [(a.group, a.topic, a.partition, a.offset) for a in acks]
        all_acks += self.probe_acks + self.svc_acks
        real = []
        by_committer: dict[tuple[str, str, int], dict[str, list[int]]] = {}
        last_ack: dict[tuple[str, str, int], tuple[float, str]] = {}
        for c in self.consumers:
            for e in c.snapshot("committed"):
                for p in e["partitions"]:
                    key = (c.group, CLIENT_TOPIC, p)
                    real.append((*key, int(e["offset"])))
                    by_committer.setdefault(key, {}).setdefault(c.name, []).append(int(e["offset"]))
                    last_ack[key] = max(last_ack.get(key, (0.0, "")), (e["t"], c.name))
        all_acks += real
        # each consumer works through its commands in order, so its own counters increase
        last_committers = [
            (*key, o) for key, (_t, name) in last_ack.items() for o in by_committer[key][name]
        ]
        self.counts.acknowledged_commits = len(all_acks)
        self.counts.acknowledged_commits_real_clients = len(real)
        addresses = [n.address for n in self.nodes]
        wanted: dict[str, set[tuple[str, int]]] = collections.defaultdict(set)
        for g, t, p, _o in all_acks:
            wanted[g].add((t, p))

        async def fetch_all() -> dict[str, dict[tuple[str, int], int]]:
            out: dict[str, dict[tuple[str, int], int]] = {}
            for g, tps in sorted(wanted.items()):
                res: dict[tuple[str, int], int] = {}
                for topic in {t for t, _ in tps}:
                    n = max(p for t, p in tps if t == topic) + 1
                    got = await fetch_committed(addresses, g, topic, n)
                    res.update({(topic, p): o for p, o in got.items()})
                out[g] = res
            return out

        async def fetch_all_bounded() -> dict[str, dict[tuple[str, int], int]]:
            return await asyncio.wait_for(fetch_all(), 90)

        fetched = asyncio.run(fetch_all_bounded())
        logged = checks.offset_records(snap)
        for v in checks.missing_ack_violations(all_acks, logged, fetched, last_committers):
            self.violation(v)

        self.counts.violations = len(self.violations)
        k = self.counts
        failover = (
            f"{min(self.failover_s):.1f}-{max(self.failover_s):.1f}s" if self.failover_s else "-"
        )
        self.summary = (
            f"{cfg.name} seed={self.seed}: kills={k.kills} stops={k.stops} "
            f"pg_restarts={k.pg_restarts} takeovers_observed={k.takeovers_observed} "
            f"lease_epoch_bumps={k.lease_epoch_bumps} "
            f"acknowledged_commits={k.acknowledged_commits} "
            f"(real clients {k.acknowledged_commits_real_clients}) "
            f"zombie_probes_refused={k.zombie_probes_refused} "
            f"client_anomalies={k.client_anomalies} violations={k.violations} | "
            f"failover {failover}, log {snap.count()} records appended "
            f"({snap.count() - snap.live_count()} compacted into history), workload "
            f"{dict(self.workload.counts)}, errors {dict(self.workload.errors)}, "
            f"{time.monotonic() - self._t0:.0f}s"
        )
        self.note(self.summary)
        self.summary += "".join(f"\n  {a}" for a in self.anomalies)

    def teardown(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._driver_stop.set()
        if self.workload is not None:
            self.workload.stop(5)
        for c in self.consumers:
            with contextlib.suppress(Exception):
                c.kill()
        for n in self.nodes:
            try:
                if n.stopped:
                    n.sigcont()
                n.kill()
            except Exception:
                pass
        if self.pg is not None:
            self.pg.cleanup(remove=False)

    def cleanup_files(self) -> None:
        if self.pg is not None:
            self.pg.cleanup(remove=True)

    def diagnostics(self) -> list[tuple[str, str]]:
        out = [("chaos timeline", "\n".join(self.timeline))]
        if self.violations:
            out.append(("violations", "\n".join(self.violations)))
        for n in self.nodes:
            out.append((f"node {n.node_id} log", n.logs(tail=15000)))
        for c in self.consumers:
            out.append((f"consumer {c.name}", c.describe(last=60)))
        if self.workload is not None:
            out.append(
                (
                    "workload",
                    f"counts {dict(self.workload.counts)}\nerrors {dict(self.workload.errors)}\n"
                    f"crashes {self.workload.crashes}",
                )
            )
        if self.pg is not None:
            out.append(("postgresql log", self.pg.log_tail(6000)))
        try:
            snap = checks.read_log(self.db_url)
            lines = []
            for g in (STATIC_GROUP, DYNAMIC_GROUP):
                for r in checks.group_records(snap).get(g, []):
                    desc = (
                        "TOMBSTONE"
                        if r.value is None
                        else (
                            f"gen={r.generation} leader={r.value.leader} "
                            f"assign={ {k: sorted(v) for k, v in r.assignments().items()} }"
                        )
                    )
                    lines.append(f"{g} p{r.partition}@{r.offset} e{r.epoch} n{r.node_id} {desc}")
            lines.extend(str(r) for r in snap.leases)
            out.append(("event log (consumer groups, leases)", "\n".join(lines)))
        except Exception as e:
            out.append(("event log", f"cannot read: {e!r}"))
        return out


class ZombieProbe:
    """A raw connection to a node that is about to be paused, to send simple-group offset
    commits (generation -1) for groups of its partitions before and during the pause and read
    the answers after it resumes. A commit acknowledged by a resumed node for a partition it
    lost is a zombie write that was not refused."""

    def __init__(
        self, node: CoordinatorProcess, log_partitions: int, partitions: list[int], round_: int
    ):
        self.groups: dict[str, str] = {}  # label -> group (one group per label)
        self.pending: dict[str, tuple[str, int, int]] = {}  # label -> (group, offset, corr)
        self.partitions = partitions
        self.log_partitions = log_partitions
        self.round = round_
        self.corr = 0
        self.sock: socket.socket | None = None
        try:
            self.sock = socket.create_connection(node.address, timeout=2)
        except OSError:
            self.sock = None

    def _group(self, label: str) -> str | None:
        for k in range(10_000):
            g = f"zprobe-r{self.round}-{label}-{k}"
            if partition_for(g, self.log_partitions) in self.partitions:
                return g
        return None

    def send(self, label: str) -> None:
        g = self._group(label) if self.partitions else None
        if self.sock is None or g is None:
            return
        self.corr += 1
        offset = 1_000_000_000 + self.round * 10 + self.corr
        req = KafkaTestClient.build_request(
            8,
            8,
            group_id=g,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            retention_time=-1,
            topics=[
                {
                    "name": WORKLOAD_TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        )
        try:
            self.sock.sendall(encode_request(req, self.corr, "zombie-probe"))
            self.pending[label] = (g, offset, self.corr)
        except OSError:
            pass

    def results(self, timeout: float) -> dict[str, tuple[str, int, int]]:
        """label -> (group, offset, error code; -2 = no answer)."""
        out: dict[str, tuple[str, int, int]] = {}
        if self.sock is None:
            return out
        by_corr = {corr: (label, g, o) for label, (g, o, corr) in self.pending.items()}
        cls = load_response_schema(8, 8)
        deadline = time.monotonic() + timeout
        buf = b""
        try:
            while by_corr and time.monotonic() < deadline:
                self.sock.settimeout(max(deadline - time.monotonic(), 0.01))
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf, 0)
                    if len(buf) < 4 + size:
                        break
                    frame, buf = buf[4 : 4 + size], buf[4 + size :]
                    (corr,) = struct.unpack_from(">i", frame, 0)
                    _, off = entity_reader(cls.__header_schema__)(frame, 0)
                    body: Any = entity_reader(cls)(frame, off)[0]
                    label, g, o = by_corr.pop(corr)
                    codes = [int(p.error_code) for t in body.topics for p in t.partitions]
                    out[label] = (g, o, max(codes, key=abs) if codes else -2)
        except OSError:
            pass
        finally:
            self.sock.close()
        for label, g, o in by_corr.values():
            out[label] = (g, o, -2)
        return out
