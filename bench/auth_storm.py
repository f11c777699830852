"""Figure 8 (d): members heartbeating over SASL_SSL through storms of clients authenticating at
once (bench/security.py says how; tests/protocol/test_auth_storm.py holds its bound)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import run_workers, sleep_until
from bench.probes import CpuSampler, loop_lag
from bench.secure_node import (
    HB_MECHANISM,
    PASSWORD,
    USER,
    client_context,
    connect,
    scram_authenticate,
)
from tests.support.consumer_bytes import assignment, subscription
from tests.support.kafka_client import KafkaTestClient

STORM_MECHANISM = "SCRAM-SHA-512"
STORM_CLIENTS = 200
STORM_BOUND_MS = 250.0  # an authenticated member's Heartbeat p99 during the storm
MEMBERS_PER_GROUP = 10
HEARTBEAT_EVERY_S = 0.1
MEMBER_SESSION_MS = 10_000  # a stalled node would fence the members within the run
TOPIC = "sec"


async def worker(args: dict[str, Any]) -> dict[str, Any]:
    """One load-generator process (bench.common.run_workers); `kind` says which."""
    kinds = {"members": _members_worker, "storm": _storm_worker}
    result: dict[str, Any] = await kinds[args["kind"]](args)
    return result


async def _form(client: KafkaTestClient, group: str, n: int) -> list[tuple[str, int, str, str]]:
    """n static members of `group` joined and synced on one connection (the leader assigns one
    partition each); (group, generation, member id, instance id) of each."""
    sub = subscription([TOPIC])
    instances = [f"{group}-m{m}" for m in range(n)]
    joins = await asyncio.gather(
        *(
            client.request(
                client.join_group_request(
                    group,
                    protocols=[("range", sub)],
                    session_timeout_ms=MEMBER_SESSION_MS,
                    rebalance_timeout_ms=30_000,
                    group_instance_id=iid,
                    version=9,
                ),
                timeout=60,
            )
            for iid in instances
        )
    )
    generations = {r.generation_id for r in joins}
    if any(r.error_code != 0 for r in joins) or len(generations) != 1:
        raise RuntimeError(f"JoinGroup {group}: {[(r.error_code, r.generation_id) for r in joins]}")
    generation = generations.pop()
    ids = [r.member_id for r in joins]
    leader = joins[0].leader
    plan = {m: assignment({TOPIC: [i % 10]}) for i, m in enumerate(sorted(ids))}
    syncs = await asyncio.gather(
        *(
            client.request(
                client.sync_group_request(
                    group,
                    generation,
                    mid,
                    assignments=plan if mid == leader else None,
                    group_instance_id=iid,
                    version=5,
                ),
                timeout=60,
            )
            for mid, iid in zip(ids, instances, strict=True)
        )
    )
    if any(s.error_code != 0 for s in syncs):
        raise RuntimeError(f"SyncGroup {group}: {[s.error_code for s in syncs]}")
    return [(group, generation, mid, iid) for mid, iid in zip(ids, instances, strict=True)]


async def _members_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Form the groups, heartbeat every 100 ms until the storm process is done (+0.5 s).
    Returns every heartbeat as [wall-clock send time, round trip s, error code]."""
    port, security = int(args["port"]), args["security"]
    groups = int(args["groups"])
    clients = await asyncio.gather(*(connect(port, security, f"member-{g}") for g in range(groups)))
    formed = await asyncio.gather(
        *(_form(c, f"{args['prefix']}-{g}", int(args["per_group"])) for g, c in enumerate(clients))
    )
    hb_start = time.time() + 0.2
    ready, done = Path(args["ready_file"]), Path(args["done_file"])
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(json.dumps({"hb_start": hb_start}))
    tmp.rename(ready)
    deadline = hb_start + float(args["max_seconds"])
    samples: list[tuple[float, float, int]] = []
    stop = asyncio.Event()
    everyone = [(c, m) for c, ms in zip(clients, formed, strict=True) for m in ms]

    async def member(i: int, client: KafkaTestClient, m: tuple[str, int, str, str]) -> None:
        group, generation, member_id, instance = m
        request = client.heartbeat_request(
            group, generation, member_id, group_instance_id=instance, version=4
        )
        next_send = hb_start + HEARTBEAT_EVERY_S * i / len(everyone)
        while not stop.is_set():
            await sleep_until(next_send)
            sent, t0 = time.time(), time.perf_counter()
            reply = await client.request(request, timeout=60)
            samples.append((sent, time.perf_counter() - t0, int(reply.error_code)))
            # the next one when the interval is up, never two in flight (as a consumer)
            next_send = max(next_send + HEARTBEAT_EVERY_S, time.time())

    async def watch() -> None:
        while not done.exists() and time.time() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        stop.set()

    await asyncio.gather(watch(), *(member(i, c, m) for i, (c, m) in enumerate(everyone)))
    for c in clients:
        with contextlib.suppress(Exception):
            await c.close()
    return {"hb_start": hb_start, "members": len(everyone), "samples": samples}


async def _storm_worker(args: dict[str, Any]) -> dict[str, Any]:
    """Wait for the members, let them heartbeat alone for `calm` s, then run `storms` storms
    of `clients` SASL_SSL clients authenticating at once, `gap` s apart."""
    port, mechanism = int(args["port"]), args["mechanism"]
    ready, done = Path(args["ready_file"]), Path(args["done_file"])
    ctx = client_context(args["cafile"])

    async def one(name: str) -> tuple[KafkaTestClient, float]:
        client = await KafkaTestClient.connect("127.0.0.1", port, name, ssl=ctx)
        try:
            await scram_authenticate(client, mechanism, USER, PASSWORD)
        except BaseException:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        return client, time.time()

    try:
        # one authentication first: the salted password is computed once for the process, so
        # the storm reaches the node as a burst, as from 200 machines (see (d) in bench/security.py)
        warm, _ = await one("storm-warm-up")
        await warm.close()
        limit = time.monotonic() + 120
        while not ready.exists():
            if time.monotonic() > limit:
                raise TimeoutError("the members never got ready")
            await asyncio.sleep(0.05)
        hb_start = float(json.loads(ready.read_text())["hb_start"])
        next_storm = hb_start + float(args["calm"])
        storms: list[dict[str, Any]] = []
        for s in range(int(args["storms"])):
            await sleep_until(next_storm)
            begin = time.time()
            got = await asyncio.gather(
                *(one(f"storm-{s}-{i}") for i in range(int(args["clients"]))),
                return_exceptions=True,
            )
            ok = [g for g in got if isinstance(g, tuple)]
            failed = Counter(type(g).__name__ for g in got if isinstance(g, BaseException))
            end = max([t for _, t in ok], default=time.time())
            times = sorted(t - begin for _, t in ok)
            await asyncio.gather(*(c.close() for c, _ in ok), return_exceptions=True)
            storms.append(
                {
                    "start": begin,
                    "end": end,
                    "authenticated": len(ok),
                    "failed": dict(failed),
                    "p50_s": times[len(times) // 2] if times else None,
                    "last_s": times[-1] if times else None,
                }
            )
            next_storm = time.time() + float(args["gap"])
    finally:
        done.write_text("done")
    return {"storms": storms}


def _summary(rtts: list[float]) -> dict[str, Any]:
    rtts = sorted(rtts)
    if not rtts:
        return {"heartbeats": 0, "p50_ms": math.nan, "p99_ms": math.nan, "max_ms": math.nan}
    return {
        "heartbeats": len(rtts),
        "p50_ms": 1000 * rtts[len(rtts) // 2],
        "p99_ms": 1000 * rtts[min(len(rtts) - 1, math.ceil(0.99 * len(rtts)) - 1)],
        "max_ms": 1000 * rtts[-1],
    }


def storm_window(
    port: int,
    cafile: Path,
    workdir: Path,
    *,
    groups: int,
    per_group: int = MEMBERS_PER_GROUP,
    calm: float,
    storms: int,
    clients: int = STORM_CLIENTS,
    gap: float = 1.0,
    member_mechanism: str = HB_MECHANISM,
    storm_mechanism: str = STORM_MECHANISM,
    prefix: str = "storm-members",
    node_pid: int | None = None,
    admin_url: str | None = None,
) -> dict[str, Any]:
    """Members heartbeating over SASL_SSL (one process) through `storms` authentication storms
    (another process); heartbeat round trips without and during the storms, and every error.
    With `node_pid`, the node's CPU (cores) without and during the storms too; with
    `admin_url`, its event-loop lag readings over the whole run (/metrics)."""
    workdir.mkdir(parents=True, exist_ok=True)
    ready, done = workdir / f"{prefix}.ready", workdir / f"{prefix}.done"
    for f in (ready, done):
        f.unlink(missing_ok=True)
    security = {"cafile": str(cafile), "mechanism": member_mechanism, "user": USER,
                "password": PASSWORD}  # fmt: skip
    common: dict[str, Any] = {"port": port, "ready_file": str(ready), "done_file": str(done)}
    members_args: dict[str, Any] = {"kind": "members", "security": security, "groups": groups,
                                    "per_group": per_group, "prefix": prefix,
                                    "max_seconds": calm + 90}  # fmt: skip
    storm_args: dict[str, Any] = {"kind": "storm", "cafile": str(cafile),
                                  "mechanism": storm_mechanism, "calm": calm, "storms": storms,
                                  "clients": clients, "gap": gap}  # fmt: skip
    sampler = CpuSampler(node_pid) if node_pid else None
    lag0 = loop_lag(admin_url) if admin_url else None
    if sampler is not None:
        sampler.start()
    try:
        members, storm = run_workers(
            "bench.auth_storm", [{**common, **members_args}, {**common, **storm_args}], timeout=180
        )
    finally:
        if sampler is not None:
            sampler.stop = True
            sampler.join(5)
    lag = None
    if admin_url and lag0 is not None:
        lag1 = loop_lag(admin_url)
        lag = {le: lag1[le] - lag0.get(le, 0.0) for le in lag1}
    spans = [(s["start"], s["end"]) for s in storm["storms"]]
    first = spans[0][0] if spans else math.inf
    calm_rtts: list[float] = []
    storm_rtts: list[float] = []
    errors: Counter[int] = Counter()
    for sent, rtt, code in members["samples"]:
        errors[code] += 1
        if any(sent < e and sent + rtt > s for s, e in spans):
            storm_rtts.append(rtt)
        elif sent + rtt < first and sent >= members["hb_start"] + 0.5:
            calm_rtts.append(rtt)
    return {
        "members": members["members"],
        "calm": _summary(calm_rtts),
        "storm": _summary(storm_rtts),
        "errors": {str(k): v for k, v in sorted(errors.items())},
        "storms": storm["storms"],
        "node_cpu": None
        if sampler is None
        else {
            "calm": sampler.cores([(members["hb_start"] + 0.5, first)]),
            "storm": sampler.cores(spans),
        },
        "loop_lag": lag,
    }
