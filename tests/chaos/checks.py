"""Reading the event log after a chaos run and checking the invariants of issue 3 against it.

Every check returns a list of human-readable violations (empty = holds), so one run reports
all that went wrong, with enough context to find the records.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from sqlalchemy import select

from app.group.consumer_protocol import decode_assignment
from app.group.records import (
    GroupMetadataValue,
    RecordType,
    decode_group_key,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
)
from storage.log import EventLog, LeaseRow
from storage.sql.tables import log_history, log_records, partition_leases

METADATA_PARTITION = -1


class LoggedRecord(NamedTuple):
    """A record of the log as appended: still in log_records (`live`) or moved to the history
    table by compaction. Together they are everything ever appended (COORD_ARCHIVE_HISTORY)."""

    partition: int
    offset: int
    type: RecordType
    key: bytes
    value: bytes | None  # None = tombstone
    epoch: int
    append_time_ms: int
    node_id: int
    live: bool


@dataclass(frozen=True)
class LogSnapshot:
    records: dict[int, list[LoggedRecord]]  # partition -> every appended record, offset order
    leases: list[LeaseRow]

    def all(self) -> Iterable[LoggedRecord]:
        for p in sorted(self.records):
            yield from self.records[p]

    def count(self) -> int:
        return sum(len(v) for v in self.records.values())

    def live_count(self) -> int:
        return sum(1 for r in self.all() if r.live)


def read_log(url: str) -> LogSnapshot:
    """log_records and log_history as of one commit point, merged per partition by offset."""

    async def go() -> LogSnapshot:
        log = await EventLog.open(url)
        try:
            async with log.snapshot() as conn:
                out: dict[int, list[LoggedRecord]] = collections.defaultdict(list)
                for table, live in ((log_records, True), (log_history, False)):
                    c = table.c
                    rows = await conn.execute(
                        select(
                            c.partition, c.offset, c.record_type, c.key, c.value, c.epoch,
                            c.append_time_ms, c.node_id,
                        )
                    )  # fmt: skip
                    for p, o, t, k, v, e, a, n in rows:
                        out[p].append(
                            LoggedRecord(p, o, RecordType(t), bytes(k),
                                         None if v is None else bytes(v), e, a, n, live)
                        )  # fmt: skip
                L = partition_leases.c
                leases = [
                    LeaseRow(*r)
                    for r in await conn.execute(
                        select(L.partition, L.owner_node_id, L.epoch, L.expires_at_ms)
                    )
                ]
            for recs in out.values():
                recs.sort(key=lambda r: r.offset)
            return LogSnapshot(dict(out), leases)
        finally:
            await log.close()

    return asyncio.run(go())


def read_leases(url: str) -> list[LeaseRow]:
    async def go() -> list[LeaseRow]:
        log = await EventLog.open(url)
        try:
            return await log.leases()
        finally:
            await log.close()

    return asyncio.run(go())


def duplicate_offset_violations(snap: LogSnapshot) -> list[str]:
    """An offset is appended once: never twice, and never both live and archived."""
    out = []
    for p, recs in snap.records.items():
        for a, b in itertools.pairwise(recs):
            if a.offset == b.offset:
                out.append(f"partition {p}: offset {a.offset} stored twice ({a} / {b})")
    return out


# --- fencing -------------------------------------------------------------------------------------


def epoch_violations(snap: LogSnapshot) -> list[str]:
    """Per partition, epochs never decrease with the offset, and one epoch is one node's."""
    out = []
    for p, recs in snap.records.items():
        top: LoggedRecord | None = None
        writers: dict[int, int] = {}
        for r in recs:
            if top is not None and r.epoch < top.epoch:
                out.append(
                    f"partition {p}: offset {r.offset} written at epoch {r.epoch} by node "
                    f"{r.node_id} after offset {top.offset} at epoch {top.epoch} by node "
                    f"{top.node_id} (a superseded epoch's write was accepted)"
                )
            if top is None or r.epoch >= top.epoch:
                top = r
            w = writers.setdefault(r.epoch, r.node_id)
            if w != r.node_id:
                out.append(
                    f"partition {p}: epoch {r.epoch} written by nodes {w} and {r.node_id} "
                    f"(offset {r.offset})"
                )
    return out


@dataclass(frozen=True)
class LostLease:
    """A paused node's lease that another node took while it was stopped."""

    node_id: int
    partition: int
    epoch: int
    taken_at_epoch: int
    observed_taken_ms: int  # wall clock when the test saw the takeover (before SIGCONT)


def zombie_write_violations(snap: LogSnapshot, lost: Iterable[LostLease]) -> list[str]:
    """No record of a lost (partition, epoch) appended by the zombie after the takeover was
    observed (such a record would also need an epoch below a later record's to be caught by
    epoch_violations, which it may not be if the new owner had not written yet)."""
    out = []
    for ll in lost:
        for r in snap.records.get(ll.partition, []):
            if (
                r.epoch == ll.epoch
                and r.node_id == ll.node_id
                and r.append_time_ms >= ll.observed_taken_ms
            ):
                out.append(
                    f"partition {ll.partition}: node {ll.node_id} appended offset {r.offset} at "
                    f"its lost epoch {ll.epoch} at {r.append_time_ms}, after epoch "
                    f"{ll.taken_at_epoch} was observed taken at {ll.observed_taken_ms}"
                )
    return out


# --- groups --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupRecord:
    group: str
    partition: int
    offset: int
    epoch: int
    node_id: int
    append_time_ms: int
    value: GroupMetadataValue | None  # None = tombstone

    @property
    def generation(self) -> int:
        return -1 if self.value is None else self.value.generation

    def assignments(self) -> dict[str, frozenset[tuple[str, int]]]:
        """owner identity (group instance id, else member id) -> assigned (topic, partition)."""
        out: dict[str, frozenset[tuple[str, int]]] = {}
        if self.value is None:
            return out
        for m in self.value.members:
            tps: set[tuple[str, int]] = set()
            if m.assignment:
                for topic, parts in decode_assignment(m.assignment).partitions:
                    tps.update((topic, p) for p in parts)
            out[m.group_instance_id or m.member_id] = frozenset(tps)
        return out


def group_records(snap: LogSnapshot) -> dict[str, list[GroupRecord]]:
    out: dict[str, list[GroupRecord]] = collections.defaultdict(list)
    for r in snap.all():
        if r.type is RecordType.GROUP_METADATA:
            g = decode_group_key(r.key)
            v = None if r.value is None else decode_group_value(r.value)
            out[g].append(
                GroupRecord(g, r.partition, r.offset, r.epoch, r.node_id, r.append_time_ms, v)
            )
    return out


def generation_violations(groups: dict[str, list[GroupRecord]]) -> list[str]:
    """Per group, in log order, the generation never decreases (a tombstone starts over)."""
    out = []
    for g, recs in groups.items():
        prev: GroupRecord | None = None
        for r in recs:
            if r.value is None:
                prev = None
                continue
            if prev is not None and r.generation < prev.generation:
                out.append(
                    f"group {g}: generation {r.generation} at p{r.partition}@{r.offset} (epoch "
                    f"{r.epoch}, node {r.node_id}) after generation {prev.generation} at "
                    f"p{prev.partition}@{prev.offset} (epoch {prev.epoch}, node {prev.node_id})"
                )
            prev = r
    return out


def double_assignment_violations(groups: dict[str, list[GroupRecord]]) -> list[str]:
    """No topic partition is assigned to two members in one generation: within a record, and
    across the records of one generation (an owner is a static instance id, else a member id)."""
    out = []
    for g, recs in groups.items():
        by_gen: dict[int, dict[tuple[str, int], tuple[str, int]]] = collections.defaultdict(dict)
        for r in recs:
            if r.value is None:
                by_gen.clear()
                continue
            seen: dict[tuple[str, int], str] = {}
            for who, tps in r.assignments().items():
                for tp in tps:
                    if tp in seen and seen[tp] != who:
                        out.append(
                            f"group {g} gen {r.generation} p{r.partition}@{r.offset}: {tp} "
                            f"assigned to {seen[tp]} and {who}"
                        )
                    seen[tp] = who
                    owner = by_gen[r.generation].get(tp)
                    if owner is not None and owner[0] != who:
                        out.append(
                            f"group {g} gen {r.generation}: {tp} assigned to {owner[0]} at "
                            f"offset {owner[1]} and to {who} at p{r.partition}@{r.offset}"
                        )
                    by_gen[r.generation][tp] = (who, r.offset)
    return out


# --- offsets -------------------------------------------------------------------------------------


def offset_records(snap: LogSnapshot) -> dict[tuple[str, str, int], list[int]]:
    """(group, topic, partition) -> committed offsets in log order (tombstones as -1)."""
    out: dict[tuple[str, str, int], list[int]] = collections.defaultdict(list)
    for r in snap.all():
        if r.type is RecordType.OFFSET_COMMIT:
            key = decode_offset_key(r.key)
            out[key].append(-1 if r.value is None else decode_offset_value(r.value).offset)
    return out


def missing_ack_violations(
    acks: Iterable[tuple[str, str, int, int]],
    logged: dict[tuple[str, str, int], list[int]],
    fetched: dict[str, dict[tuple[str, int], int]],
    last_committers: Iterable[tuple[str, str, int, int]] | None = None,
) -> list[str]:
    """Every acknowledged commit (group, topic, partition, offset) is a record of the log, and
    what the cluster answers to OffsetFetch is at least the highest acknowledged offset (offsets
    come from increasing counters, so a smaller answer means an acknowledged commit was lost or
    overwritten by an older one).

    Counters increase per committer only: when a partition moved between real consumers, the
    new owner may still work through older counter values, so for such keys the answer is held
    against `last_committers` (the acks of whoever committed the key last), not every ack."""
    out = []
    acks = list(acks)
    for g, t, p, o in acks:
        if o not in logged.get((g, t, p), ()):
            out.append(f"acknowledged commit {g}/{t}/{p}={o} is not in the log")
    highest: dict[tuple[str, str, int], int] = {}
    overridden = {(g, t, p) for g, t, p, _o in last_committers or ()}
    for g, t, p, o in [a for a in acks if a[:3] not in overridden] + list(last_committers or ()):
        highest[(g, t, p)] = max(highest.get((g, t, p), -1), o)
    for (g, t, p), o in sorted(highest.items()):
        got = fetched.get(g, {}).get((t, p))
        if got is None or got < o:
            out.append(
                f"OffsetFetch {g}/{t}/{p} answers {got}, but {o} was acknowledged "
                f"(log: ...{logged.get((g, t, p), [])[-5:]})"
            )
    return out
