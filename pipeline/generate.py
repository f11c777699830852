"""Large, realistic event logs for the audit, driven through the real pure state machine.

Simulated consumers (the classic consumer protocol: two-step dynamic joins, static members,
leader-side range assignment sorted by group.instance.id, heartbeats, periodic commits) talk to
one `GroupCoordinator` per log partition on a fake clock, exactly as tests/unit/context.py does,
and every record the coordinator asks to append is appended. Operators add weather: static
restarts (absorbed without a rebalance, SkipAssignment for v9 leaders), outages longer than the
session timeout, dynamic restarts, scale-ups with and without pre-registration, scale-downs,
forced rebalances, shutdowns with an offset reset, group deletions and node failovers (the
partition is reloaded from its compacted log at a new epoch); some groups move in through the
gateway, their first positions imported from the upstream cluster's committed offsets. The
consumers and their coordinator are pipeline/simulation.py; the weather and the export are here.

Output is the `coordinator export` format: log.parquet (newest record per key), history.parquet
(superseded records, as compaction would have moved them) and manifest.json.

    python -m pipeline.generate --out /tmp/audit-in --records 1000000 --workers 2
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from app.group.messages import OffsetCommitPartition, OffsetCommitRequest
from app.group.records import TopicValue, topic_record
from app.runtime.placement import partition_for
from pipeline.simulation import (
    SESSION_MS,
    START_MS,
    TOPIC_PARTITION,
    Client,
    GroupSim,
    SimulatedPartition,
)
from storage.export import HISTORY_SCHEMA, LOG_SCHEMA

# the share of groups that move in through the gateway, and the cluster id they come from
MOVED_IN = 0.25
UPSTREAM_CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


class PartitionSim(SimulatedPartition):
    """One log partition's groups under the operators' weather (restarts, outages, scale-ups
    and downs, forced rebalances, shutdowns and resets, deletions), groups moving in through
    the gateway, and node failovers."""

    def __init__(
        self,
        partition: int,
        groups: list[GroupSim],
        seed: int,
        budget: int,
        sink: Callable[[list[tuple[Any, ...]]], None],
    ) -> None:
        super().__init__(partition, groups, seed, budget, sink)
        # the gateway's draws are its own: the weather's stay those of a log without imports
        self.gateway = random.Random(f"gateway:{seed}")

    def run(self) -> None:
        for g in self.groups:
            moved_in = self.gateway.random() < MOVED_IN
            self.at(self.rng.randint(0, 20_000), partial(self._start_group, g, moved_in))
            self.at(self.rng.randint(60_000, 400_000), partial(self._weather, g))
        self.at(self.rng.randint(1_800_000, 7_200_000), self._failover)
        while self.appended < self.budget and self.events:
            t = self.events[0][0]
            deadline = self.core.next_deadline()
            if deadline is not None and deadline <= t:
                self.now = max(self.now, deadline)
                self.apply(self.core.poll_timers(self.now))
                continue
            _, _, fn = heapq.heappop(self.events)
            self.now = max(self.now, t)
            fn()
        self.flush()

    # ---- operators ---------------------------------------------------------------------------

    def _start_group(self, g: GroupSim, moved_in: bool = False) -> None:
        if moved_in:
            self._import_offsets(g)
        for _ in range(self.rng.randint(2, 6)):
            self.at(self.rng.randint(0, 1_500), partial(self._launch, self._spawn(g)))

    def _import_offsets(self, g: GroupSim) -> None:
        """The group moves in through the gateway before its members join: the upstream
        cluster's committed offsets (most of its partitions have one) become its positions."""
        parts = tuple(
            OffsetCommitPartition(t, p, self.gateway.randint(0, 50_000))
            for t, n in sorted(g.topics.items())
            for p in range(n)
            if self.gateway.random() < 0.8
        )
        # handle 0: nobody waits for the answer (the partitions written)
        self.apply(self.core.import_offsets(0, g.group_id, UPSTREAM_CLUSTER, parts, self.now))
        for p in parts:
            g.committed[(p.topic, p.partition)] = p.offset

    def _live(self, g: GroupSim) -> list[Client]:
        return [c for c in g.clients if c.alive]

    def _weather(self, g: GroupSim) -> None:
        self.at(int(self.rng.expovariate(1 / 180_000)) + 20_000, lambda: self._weather(g))
        live = self._live(g)
        if g.deleted:
            g.deleted = False
            self._start_group(g)
            return
        if not live:
            return self._after_shutdown(g)
        static = [c for c in live if c.instance_id is not None]
        dynamic = [c for c in live if c.instance_id is None]
        r = self.rng.random()
        if r < 0.40 and static:  # rolling restart of static members: no rebalance
            for i, c in enumerate(self.rng.sample(static, self.rng.randint(1, len(static)))):
                self.at(i * 4_000, partial(self._restart, c, self.rng.randint(500, 4_000)))
        elif r < 0.47 and static:  # a static member is down longer than its session
            self._restart(self.rng.choice(static), SESSION_MS + self.rng.randint(2_000, 20_000))
        elif r < 0.60 and dynamic:  # dynamic restart: leave + join
            self._restart(self.rng.choice(dynamic), self.rng.randint(500, 3_000))
        elif r < 0.68:  # pre-registered scale-up of static members
            k = self.rng.randint(1, 4)
            ids = [f"{g.group_id}-i{g.next_instance + i}" for i in range(k)]
            g.next_instance += k
            h = self._new_handle(live[0], "admin")
            self.apply(self.core.register_static_members(h, g.group_id, ids, 20_000, self.now))
            late = self.rng.random() < 0.15  # one of them never comes
            for i, inst in enumerate(ids):
                if late and i == len(ids) - 1:
                    continue
                c = self._spawn(g, inst, static=True)
                self.at(5_000 + i * self.rng.randint(300, 3_000), partial(self._launch, c))
        elif r < 0.74:  # scale-up without registration: members trickle in
            for i in range(self.rng.randint(1, 3)):
                c = self._spawn(g)
                self.at(i * self.rng.randint(500, 6_000), partial(self._launch, c))
        elif r < 0.82 and len(live) > 2:  # scale-down
            c = self.rng.choice(live)
            self._stop(c, leave=True)
        elif r < 0.89:
            reason = self.rng.choice(
                [
                    "rolling config change",
                    "rebalance after topic expansion",
                    "operator request",
                    "skewed lag",
                ]
            )
            h = self._new_handle(live[0], "admin")
            self.apply(self.core.force_rebalance(h, g.group_id, reason, self.now))
        elif r < 0.93:  # shutdown: everybody leaves; the weather resets offsets, restarts
            for c in live:
                self._stop(c, leave=True)
        # else: a quiet period

    def _after_shutdown(self, g: GroupSim) -> None:
        group = self.core.groups.get(g.group_id)
        empty = group is not None and not group.members
        if empty and g.committed and self.rng.random() < 0.6:
            # kafka-consumer-groups --reset-offsets: rewind through the admin path
            parts = tuple(
                OffsetCommitPartition(t, p, max(o - self.rng.randint(0, 5_000), 0))
                for (t, p), o in sorted(g.committed.items())
            )
            req = OffsetCommitRequest(g.group_id, -1, "", None, parts)
            h = self._new_handle(Client(g, "admin", None, False), "admin")
            self.apply(self.core.offset_commit(h, req, self.now))
            for p in parts:
                g.committed[(p.topic, p.partition)] = p.offset
        elif empty and self.rng.random() < 0.3:
            h = self._new_handle(Client(g, "admin", None, False), "admin")
            self.apply(self.core.delete_group(h, g.group_id, self.now))
            g.committed.clear()
            g.position.clear()
            g.deleted = True
            return
        self._start_group(g)

    def _failover(self) -> None:
        """Another node takes the partition: it loads the compacted log at a new epoch."""
        self.at(self.rng.randint(1_800_000, 7_200_000), self._failover)
        self.apply(self.core.unload(self.now))
        self.core = self._new_core()
        for _, rec in sorted(self.latest.values(), key=lambda x: x[0]):
            self.core.replay(rec)
        self.epoch += 1
        self.node_id = 1 + (self.node_id % 3)
        self.now += self.rng.randint(1_000, 5_000)  # the takeover is not instant
        self.apply(self.core.on_loaded(self.now))
        self.waiting.clear()  # parked requests were answered NOT_COORDINATOR by unload
        for g in self.groups:
            for c in self._live(g):
                if c.state in ("joining", "syncing"):
                    self._rejoin_later(c)


# ==== workers and output ========================================================================


def _group_names(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    kinds = [
        "billing",
        "orders",
        "payments",
        "search-index",
        "fraud",
        "ledger",
        "emails",
        "analytics",
        "inventory",
        "shipping",
        "audit",
        "pricing",
    ]
    return [f"{rng.choice(kinds)}-{i:05d}" for i in range(n)]


def _topics_for(name: str, seed: int) -> dict[str, int]:
    rng = random.Random(f"{seed}:{name}")
    base = name.rsplit("-", 1)[0]
    topics = {f"{base}.events": rng.choice([6, 12, 16, 24, 32, 48])}
    if rng.random() < 0.3:
        topics[f"{base}.retries"] = rng.choice([1, 2, 3])
    return topics


def _simulate(args: tuple[list[int], int, int, int, int, str]) -> tuple[str, str, int, int]:
    """Worker: simulate the given log partitions; write their log/history parts."""
    partitions, n_groups, log_partitions, records, seed, tmp = args
    names = _group_names(n_groups, seed)
    by_part: dict[int, list[str]] = {}
    for name in names:
        by_part.setdefault(partition_for(name, log_partitions), []).append(name)
    total_groups = len(names)
    log_path = Path(tmp) / f"log-{partitions[0]:05d}.parquet"
    hist_path = Path(tmp) / f"history-{partitions[0]:05d}.parquet"
    n_log = n_hist = 0
    with (
        pq.ParquetWriter(log_path, LOG_SCHEMA, compression="zstd") as lw,
        pq.ParquetWriter(hist_path, HISTORY_SCHEMA, compression="zstd") as hw,
    ):
        for part in partitions:
            groups = [GroupSim(n, _topics_for(n, seed)) for n in by_part.get(part, [])]
            if not groups:
                continue
            budget = records * len(groups) // total_groups
            chunks: list[pa.RecordBatch] = []

            def sink(rows: list[tuple[Any, ...]], chunks: list[pa.RecordBatch] = chunks) -> None:
                cols = list(zip(*rows, strict=True))
                chunks.append(
                    pa.RecordBatch.from_arrays(
                        [pa.array(c, type=f.type) for c, f in zip(cols, LOG_SCHEMA, strict=True)],
                        schema=LOG_SCHEMA,
                    )
                )

            t0 = time.monotonic()
            sim = PartitionSim(part, groups, seed * 1000 + part, budget, sink)
            sim.run()
            keep = {off for off, _ in sim.latest.values()}
            end = sim.now
            for batch in chunks:
                offsets = batch.column(1).to_pylist()
                mask = pa.array([o in keep for o in offsets])
                live = batch.filter(mask)
                old = batch.filter(pa.compute.invert(mask))
                if live.num_rows:
                    lw.write_batch(live)
                    n_log += live.num_rows
                if old.num_rows:
                    hw.write_batch(
                        old.append_column(
                            "compacted_at_ms", pa.array([end] * old.num_rows, pa.int64())
                        )
                    )
                    n_hist += old.num_rows
            print(
                f"[generate] partition {part}: {len(groups)} groups, {sim.appended:,} records, "
                f"{(sim.now - START_MS) / 3_600_000:.1f} h simulated, "
                f"{time.monotonic() - t0:.1f} s",
                file=sys.stderr,
                flush=True,
            )
    return str(log_path), str(hist_path), n_log, n_hist


def generate(
    out: Path,
    records: int = 1_000_000,
    groups: int | None = None,
    log_partitions: int = 16,
    workers: int = 1,
    seed: int = 7,
) -> dict[str, Any]:
    """Write OUT/log.parquet, history.parquet and manifest.json; return the manifest."""
    t0 = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    groups = groups or max(4, min(2_000, records // 5_000))
    tmp = tempfile.mkdtemp(prefix="gen-", dir=out)
    parts = list(range(log_partitions))
    shards = [parts[i::workers] for i in range(workers)]
    jobs = [(s, groups, log_partitions, records, seed, tmp) for s in shards if s]
    if workers > 1:
        with get_context("fork").Pool(workers) as pool:
            results = pool.map(_simulate, jobs)
    else:
        results = [_simulate(j) for j in jobs]
    # one file per table, in (partition, offset) order like `coordinator export`
    log_files = sorted(r[0] for r in results)
    topics: dict[str, int] = {}
    for name in _group_names(groups, seed):
        topics.update(_topics_for(name, seed))
    end_offsets: dict[int, int] = {}
    with pq.ParquetWriter(out / "log.parquet", LOG_SCHEMA, compression="zstd") as w:
        rows = []
        for i, (name, n) in enumerate(sorted(topics.items())):
            rec = topic_record(name, TopicValue(n))
            rows.append((TOPIC_PARTITION, i, int(rec.type), rec.key, rec.value, 1, 1, START_MS))
        end_offsets[TOPIC_PARTITION] = len(rows)
        cols = list(zip(*rows, strict=True))
        w.write_table(
            pa.Table.from_arrays(
                [pa.array(c, type=f.type) for c, f in zip(cols, LOG_SCHEMA, strict=True)],
                schema=LOG_SCHEMA,
            )
        )
        _merge(w, log_files, end_offsets)
    with pq.ParquetWriter(out / "history.parquet", HISTORY_SCHEMA, compression="zstd") as w:
        _merge(w, sorted(r[1] for r in results), end_offsets)
    for f in [*log_files, *(r[1] for r in results)]:
        os.unlink(f)
    os.rmdir(tmp)
    n_log = sum(r[2] for r in results) + len(topics)
    n_hist = sum(r[3] for r in results)
    manifest = {
        "exported_at_ms": int(time.time() * 1000),
        "log_rows": n_log,
        "history_rows": n_hist,
        "end_offsets": {str(k): v for k, v in sorted(end_offsets.items())},
        "files": {"log": "log.parquet", "history": "history.parquet"},
        "generated": {
            "records": n_log + n_hist,
            "groups": groups,
            "log_partitions": log_partitions,
            "seed": seed,
            "seconds": round(time.monotonic() - t0, 1),
        },
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def _merge(writer: pq.ParquetWriter, files: list[str], end_offsets: dict[int, int]) -> None:
    """Append worker files to one table in (partition, offset) order, a row group at a time."""
    tables = [pq.ParquetFile(f) for f in files]
    # each worker file holds whole partitions in increasing order; interleave by partition
    groups: list[tuple[int, int, int]] = []  # (partition, file index, row group)
    for i, pf in enumerate(tables):
        for rg in range(pf.num_row_groups):
            stats = pf.metadata.row_group(rg).column(0).statistics
            groups.append((int(stats.min) if stats is not None else 0, i, rg))
    for _, i, rg in sorted(groups):
        t = tables[i].read_row_group(rg)
        t = t.sort_by([("partition", "ascending"), ("offset", "ascending")])
        writer.write_table(t)
        parts = t.column("partition").to_pylist()
        offs = t.column("offset").to_pylist()
        for p, o in zip(parts, offs, strict=True):
            if o + 1 > end_offsets.get(p, 0):
                end_offsets[p] = o + 1


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--records", type=int, default=1_000_000, help="records to generate (about)")
    p.add_argument("--groups", type=int, default=None, help="default: records / 5000")
    p.add_argument("--log-partitions", type=int, default=16)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    m = generate(a.out, a.records, a.groups, a.log_partitions, a.workers, a.seed)
    print(
        json.dumps(m["generated"] | {"log_rows": m["log_rows"], "history_rows": m["history_rows"]})
    )


if __name__ == "__main__":
    main()
