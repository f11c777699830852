"""The audit's per-group tables, from one Python pass over each group's records.

Everything the audit says about a group's membership (its records in log order, generations
and the partitions they moved, static replacements and fenced member ids, pre-registered
scale-ups, and the invariants checked within one group) is a function of that group's
GROUP_METADATA and STATIC_REGISTRATION records alone, a few hundred rows at most. Spark groups
the records by group (`group_key`) and hands whole groups to `audit_groups` (`mapInArrow`),
which decodes them with the coordinator's own decoders and returns one row per output row of
any table, each table a struct column of PASS_SCHEMA (the others null). The audit caches that
once and writes each table as a filter of it, or (a local OUT) each task writes its rows of
the tables itself and hands back only what later stages read: one query and one shuffle of
the group records for what was ~40 Spark jobs of joins and windows over a few thousand rows.

The rules are those of the Spark SQL they replace, kept literally where a log could tell them
apart: joins on log positions (a position held twice joins twice), SQL's three-valued
comparisons (a null never equals anything), windows ordered by (log partition, log offset).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from functools import reduce
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.group.records import RecordType
from pipeline.decode import (
    INPUT_COLUMNS,
    decode_group_rows,
    decode_registration_rows,
)

_STR, _I16, _I32, _I64, _BOOL = pa.string(), pa.int16(), pa.int32(), pa.int64(), pa.bool_()

GROUP_RECORD_SCHEMA = pa.schema(
    [
        ("group_id", _STR),
        ("log_partition", _I32),
        ("log_offset", _I64),
        ("append_time_ms", _I64),
        ("in_history", _BOOL),
        ("value_version", _I16),
        ("protocol_type", _STR),
        ("generation", _I32),
        ("protocol_name", _STR),
        ("leader", _STR),
        ("leader_instance", _STR),
        ("leader_in_members", _BOOL),
        ("state_timestamp_ms", _I64),
        ("rebalance_reason", _STR),
        ("rebalance_started_ms", _I64),
        ("skip_assignment", _BOOL),
        ("members", _I32),
        ("static_members", _I32),
        ("dynamic_members", _I32),
        ("incarnation", _I64),
        ("prev_offset", _I64),
        ("prev_generation", _I32),
        ("next_offset", _I64),
        ("next_generation", _I32),
        ("rn_in_gen", _I32),
        ("kind", _STR),  # rebalance (first record of a generation), same_generation, tombstone
    ]
)

GENERATION_SCHEMA = pa.schema(
    [
        ("log_partition", _I32),
        ("log_offset", _I64),
        ("group_id", _STR),
        ("incarnation", _I64),
        ("generation", _I32),
        ("prev_generation", _I32),
        ("rebalance_reason", _STR),
        ("rebalance_started_ms", _I64),
        ("join_completed_ms", _I64),
        ("rebalance_ended_ms", _I64),
        ("members", _I32),
        ("static_members", _I32),
        ("dynamic_members", _I32),
        ("leader", _STR),
        ("leader_instance", _STR),
        ("protocol_type", _STR),
        ("protocol_name", _STR),
        ("in_history", _BOOL),
        ("partitions_assigned", _I64),
        ("partitions_moved", _I64),
        ("partitions_new", _I64),
        ("partitions_revoked", _I64),
        ("duration_ms", _I64),
        ("forced", _BOOL),
        ("empty", _BOOL),
    ]
)

STATIC_REPLACEMENT_SCHEMA = pa.schema(
    [
        ("group_id", _STR),
        ("incarnation", _I64),
        ("generation", _I32),
        ("instance_id", _STR),
        ("old_member_id", _STR),
        ("new_member_id", _STR),
        ("leader_replaced", _BOOL),
        ("skip_assignment", _BOOL),
        ("replaced_at_ms", _I64),
        ("log_partition", _I32),
        ("log_offset", _I64),
    ]
)

FENCED_SCHEMA = pa.schema(
    [
        ("group_id", _STR),
        ("instance_id", _STR),
        ("fenced_member_id", _STR),
        ("by_member_id", _STR),
        ("from_generation", _I32),
        ("generation", _I32),
        ("kind", _STR),
        ("at_ms", _I64),
        ("log_partition", _I32),
        ("log_offset", _I64),
    ]
)

SCALE_UP_SCHEMA = pa.schema(
    [
        ("group_id", _STR),
        ("episode", _I64),
        ("log_partition", _I32),
        ("registered_ms", _I64),
        ("instances", pa.list_(_STR)),
        ("expansion_started_ms", _I64),
        ("expansion_timeout_ms", _I32),
        ("opened_offset", _I64),
        ("started_offset", _I64),
        ("closed_offset", _I64),
        ("closed_ms", _I64),
        ("dropped", pa.list_(_STR)),
        ("rebalances", _I64),
        ("generations", pa.list_(pa.field("element", _I32, nullable=False))),
        ("registered", _I32),
        ("joined", _I32),
        ("outcome", _STR),
        ("duration_ms", _I64),
    ]
)

VIOLATION_SCHEMA = pa.schema(
    [
        ("invariant", _STR),
        ("group_id", _STR),
        ("generation", _I32),
        ("log_partition", _I32),
        ("log_offset", _I64),
        ("detail", _STR),
    ]
)

# the invariants checked within a group, and how many rows each checked
GROUP_INVARIANTS = (
    "generation_never_decreases",
    "partition_single_owner",
    "assignment_within_subscription",
    "leader_is_member",
)
CHECKED_SCHEMA = pa.schema([(name, _I64) for name in GROUP_INVARIANTS])

# each group record's stretch of the log (pipeline/commits.py INTERVAL_SCHEMA, before its cast)
INTERVAL_SCHEMA = pa.schema(
    [
        ("m_group", _STR),
        ("m_part", _I32),
        ("m_from", _I64),
        ("m_to", _I64),
        ("m_gen", _I32),
        ("m_inc", _I64),
    ]
)

# the rebalances an admin forced (generations whose reason is "admin: <reason>")
FORCED_SCHEMA = pa.schema(
    [
        ("group_id", _STR),
        ("generation", _I32),
        ("reason", _STR),
        ("rebalance_started_ms", _I64),
        ("rebalance_ended_ms", _I64),
        ("duration_ms", _I64),
        ("members", _I32),
        ("partitions_moved", _I64),
        ("log_partition", _I32),
        ("log_offset", _I64),
    ]
)
_FORCED_PREFIX = "admin: "

# the audit's tables the pass computes, in the order the audit lists them
TABLES: dict[str, pa.Schema] = {
    "group_records": GROUP_RECORD_SCHEMA,
    "generations": GENERATION_SCHEMA,
    "static_replacements": STATIC_REPLACEMENT_SCHEMA,
    # the static replacements of a leader (KIP-814's SkipAssignment rejoins)
    "skip_assignment_rejoins": pa.schema(
        [f for f in STATIC_REPLACEMENT_SCHEMA if f.name != "leader_replaced"]
    ),
    "fenced_instances": FENCED_SCHEMA,
    "scale_ups": SCALE_UP_SCHEMA,
    "forced_rebalances": FORCED_SCHEMA,
}
# one struct column per output; a row carries exactly one of them
OUTPUTS: dict[str, pa.Schema] = {
    **TABLES,
    "violations": VIOLATION_SCHEMA,
    "checked": CHECKED_SCHEMA,
    "intervals": INTERVAL_SCHEMA,
}
PASS_SCHEMA = pa.schema([(name, pa.struct(list(s))) for name, s in OUTPUTS.items()])
# what the pass hands back when it writes its tables itself (`audit_group_batches`)
KEPT_SCHEMA = pa.schema([f for f in PASS_SCHEMA if f.name not in TABLES])

_GROUP_METADATA = RecordType.GROUP_METADATA.value
_STATIC_REGISTRATION = RecordType.STATIC_REGISTRATION.value
PASS_RECORD_TYPES = (_GROUP_METADATA, _STATIC_REGISTRATION)  # the records the pass reads
FLUSH_ROWS = 20_000  # records audited at once (whole groups; pipeline/groups.py docstring)
_MOVE_COUNTS = ("partitions_assigned", "partitions_moved", "partitions_new", "partitions_revoked")

Row = dict[str, Any]


def group_key() -> Any:
    """The Spark column every record of one group shares: the UTF-8 bytes of the group id in
    its key (i16 version, i32 length, bytes), exactly the bytes `decode_group_key` decodes, so
    a key it decodes to a group lands with that group's records. A key it cannot decode lands
    anywhere; its record only ever yields a decoding violation."""
    from pyspark.sql import functions as F

    length = F.conv(F.hex(F.col("key").substr(3, 4)), 16, 10).cast("long")
    return F.col("key").substr(F.lit(7), F.least(length, F.lit(1 << 30)).cast("int"))


def audit_group_batches(
    batches: Iterator[pa.RecordBatch], tables_dir: str | None = None
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over records sorted by `_group` (INPUT_COLUMNS, record_type, _group) ->
    PASS_SCHEMA rows: whole groups are audited FLUSH_ROWS records or more at a time (one call
    per group cost more than the auditing), and a group that may go on in the next batch waits
    for it. What a worker holds is bounded by FLUSH_ROWS plus the largest group.

    With `tables_dir` (a local directory) the task writes its rows of each of TABLES there
    itself, as `<table>/part-<task>.parquet` (a file, maybe empty, per table and task), and
    returns KEPT_SCHEMA rows: a Spark write per table cost 0.4-0.6 CPU-s for a few thousand
    rows (a query, its planning and code, a job), seven of them more than the pass itself."""
    if tables_dir is None:
        yield from _audited(batches)
        return
    from pipeline.written import TaskTables

    files = TaskTables(tables_dir, TABLES)
    try:
        for batch in _audited(batches):
            for name in TABLES:
                col = batch.column(name)
                files.write(name, pa.RecordBatch.from_struct_array(col.filter(pc.is_valid(col))))
            kept = batch.select(KEPT_SCHEMA.names)
            kept = kept.filter(reduce(pc.or_, (pc.is_valid(c) for c in kept.columns)))
            if kept.num_rows:
                yield kept
    finally:
        files.close()


def _audited(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    pending: list[pa.RecordBatch] = []
    rows, threshold = 0, FLUSH_ROWS
    for batch in batches:
        pending.append(batch)
        rows += batch.num_rows
        if rows < threshold:
            continue
        t = pa.Table.from_batches(pending).combine_chunks()
        last = t["_group"][-1]
        # the rows of the last group: a suffix (nulls sort first, so a null last key means
        # every key is null, and nothing is known to be whole yet)
        tail = pc.equal(t["_group"], last) if last.is_valid else pc.is_null(t["_group"])
        done = t.filter(pc.invert(tail))
        if done.num_rows:
            yield from audit_groups(done).to_batches()
        kept = t.filter(tail)
        pending, rows = kept.to_batches(), kept.num_rows
        # a group larger than FLUSH_ROWS is not copied again for every batch it spans
        threshold = max(FLUSH_ROWS, 2 * rows)
    if rows:
        yield from audit_groups(pa.Table.from_batches(pending)).to_batches()


def audit_groups(table: pa.Table) -> pa.Table:
    """Whole groups' records (INPUT_COLUMNS + record_type; any number of groups) ->
    PASS_SCHEMA."""
    cols = table.to_pydict()
    types = cols["record_type"]

    def rows_of(record_type: int) -> dict[str, list[Any]]:
        picked = [i for i, t in enumerate(types) if t == record_type]
        return {c: [cols[c][i] for i in picked] for c in INPUT_COLUMNS}

    out = _Out()
    members = decode_group_rows(rows_of(_GROUP_METADATA))
    registrations = decode_registration_rows(rows_of(_STATIC_REGISTRATION))
    for m in members:  # every record decodes, consumer-protocol bytes included
        if m["decode_error"] is not None or m["protocol_error"] is not None:
            member = "?" if m["member_id"] is None else m["member_id"]
            why = m["decode_error"] or f"member {member}: {m['protocol_error']}"
            out.violation("records_decode", m, f"group metadata: {why}", m["generation"])
    for r in registrations:
        if r["decode_error"] is not None:
            out.violation("records_decode", r, f"static registration: {r['decode_error']}")
    by_group: dict[str, tuple[list[Row], list[Row]]] = defaultdict(lambda: ([], []))
    for m in members:
        if m["group_id"] is not None:
            by_group[m["group_id"]][0].append(m)
    for r in registrations:
        if r["decode_error"] is None:
            by_group[r["group_id"]][1].append(r)
    for group_id, (group_members, group_registrations) in by_group.items():
        _audit_group(group_id, group_members, group_registrations, out)
    return out.table()


class _Out:
    def __init__(self) -> None:
        self.rows: dict[str, list[Row]] = {name: [] for name in OUTPUTS}

    def violation(self, invariant: str, at: Row, detail: str, generation: Any = None) -> None:
        self.rows["violations"].append(
            {
                "invariant": invariant,
                "group_id": at["group_id"],
                "generation": generation,
                "log_partition": at["log_partition"],
                "log_offset": at["log_offset"],
                "detail": detail,
            }
        )

    def table(self) -> pa.Table:
        # the tables that are a filter of another one (Spark's, where `forced` and
        # `leader_replaced` are true)
        self.rows["skip_assignment_rejoins"] = [
            {k: v for k, v in r.items() if k != "leader_replaced"}
            for r in self.rows["static_replacements"]
            if r["leader_replaced"]
        ]
        self.rows["forced_rebalances"] = [
            {k: g[k] for k in FORCED_SCHEMA.names if k in g}
            | {"reason": g["rebalance_reason"][len(_FORCED_PREFIX) :]}
            for g in self.rows["generations"]
            if g["forced"]
        ]
        total = sum(len(rows) for rows in self.rows.values())
        columns, before = [], 0
        for name, rows in self.rows.items():
            typ = PASS_SCHEMA.field(name).type
            after = total - before - len(rows)
            parts = [pa.nulls(before, typ), pa.array(rows, typ), pa.nulls(after, typ)]
            columns.append(pa.concat_arrays(parts))
            before += len(rows)
        return pa.Table.from_arrays(columns, schema=PASS_SCHEMA)


def _position(r: Row) -> tuple[Any, ...]:
    """Log order, a null sorting first (as Spark's ascending order)."""
    lp, lo = r["log_partition"], r["log_offset"]
    return (lp is not None, lp or 0, lo is not None, lo or 0)


def _eq(a: Any, b: Any) -> bool | None:
    """SQL's `=`: null when either side is."""
    return None if a is None or b is None else a == b


def _known(v: Any) -> Any:
    return v if v is not None and v >= 0 else None  # -1: not recorded


def _audit_group(group_id: str, members: list[Row], registrations: list[Row], out: _Out) -> None:
    records = sorted((m for m in members if m["member_index"] <= 0), key=_position)
    live, kept = _sequence(records)
    out.rows["group_records"].extend(kept)
    for i, r in enumerate(kept):  # each record's stretch of the log, for the commits
        tombstone = r["kind"] == "tombstone"
        out.rows["intervals"].append(
            {
                "m_group": group_id,
                "m_part": r["log_partition"],
                "m_from": r["log_offset"],
                "m_to": kept[i + 1]["log_offset"] if i + 1 < len(kept) else None,
                "m_gen": -1 if tombstone else r["generation"],
                "m_inc": r["incarnation"] + tombstone,
            }
        )
    # each live member with its record's place in the sequence (a join on log position)
    at: dict[tuple[Any, Any], list[Row]] = defaultdict(list)
    for r in live:
        at[(r["log_partition"], r["log_offset"])].append(r)
    enriched = [
        {
            **m,
            **{k: r[k] for k in ("incarnation", "prev_offset", "next_offset", "next_generation")},
            "rn_in_gen": r["rn_in_gen"],
            "owner": m["instance_id"] if m["instance_id"] is not None else m["member_id"],
        }
        for m in members
        if m["member_index"] >= 0 and m["decode_error"] is None
        for r in at.get((m["log_partition"], m["log_offset"]), ())
    ]
    owned = [(m, tp["topic"], tp["partition"]) for m in enriched for tp in m["assigned"] or ()]
    gens = _generations(live, owned)
    out.rows["generations"].extend(gens)
    _static_identity(enriched, out)
    out.rows["scale_ups"].extend(_scale_ups(group_id, registrations, gens))
    out.rows["checked"].append(_invariants(group_id, live, enriched, owned, out))


def _sequence(records: list[Row]) -> tuple[list[Row], list[Row]]:
    """The live records with their incarnation, neighbours and place in their generation, and
    the group_records rows (live and tombstones) in log order."""
    incarnation, kept, live = 0, [], []
    by_incarnation: dict[int, list[Row]] = defaultdict(list)
    in_generation: dict[tuple[int, Any], int] = defaultdict(int)
    for r in records:
        if r["tombstone"]:
            kept.append(
                {
                    **{k: r[k] for k in ("group_id", "log_partition", "log_offset")},
                    **{k: r[k] for k in ("append_time_ms", "in_history")},
                    "incarnation": incarnation,
                    "kind": "tombstone",
                }
            )
            incarnation += 1  # the records after it are the next incarnation
            continue
        if r["decode_error"] is not None:
            continue
        row = {f: r.get(f) for f in GROUP_RECORD_SCHEMA.names}
        row["incarnation"] = incarnation
        key = (incarnation, r["generation"])
        in_generation[key] += 1
        row["rn_in_gen"] = in_generation[key]
        row["kind"] = "rebalance" if row["rn_in_gen"] == 1 else "same_generation"
        by_incarnation[incarnation].append(row)
        kept.append(row)
        live.append(row)
    for seq in by_incarnation.values():
        for before, after in pairwise(seq):
            after["prev_offset"] = before["log_offset"]
            after["prev_generation"] = before["generation"]
            before["next_offset"] = after["log_offset"]
            before["next_generation"] = after["generation"]
    return live, kept


def _generations(live: list[Row], owned: list[tuple[Row, str, int]]) -> list[Row]:
    """One row per generation (its first record), with the partitions it assigned, moved,
    newly assigned and revoked against the last record of the generation before."""
    # (log partition, record before, record, topic, partition) -> owners: the generation's
    # first record and the previous generation's last record, facing each other
    cur: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    prev: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
    for m, topic, partition in owned:
        lp = m["log_partition"]
        if m["rn_in_gen"] == 1:
            cur[(lp, m["prev_offset"], m["log_offset"], topic, partition)].append(m["owner"])
        nxt = m["next_generation"]
        if nxt is not None and _eq(nxt, m["generation"]) is False:
            prev[(lp, m["log_offset"], m["next_offset"], topic, partition)].append(m["owner"])
    moves: dict[tuple[Any, Any], list[int]] = defaultdict(lambda: [0, 0, 0, 0])

    def count(key: tuple[Any, ...], owner: Any, prev_owner: Any) -> None:
        has, had = owner is not None, prev_owner is not None
        m = moves[(key[0], key[2])]
        m[0] += has
        m[1] += has and had and owner != prev_owner
        m[2] += has and not had
        m[3] += had and not has

    def joins(key: tuple[Any, ...], other: dict[tuple[Any, ...], list[Any]]) -> bool:
        return None not in key and key in other

    for key, owners in cur.items():  # a full outer join: null keys never match
        for owner in owners:
            for prev_owner in prev[key] if joins(key, prev) else (None,):
                count(key, owner, prev_owner)
    for key, prev_owners in prev.items():
        if not joins(key, cur):
            for prev_owner in prev_owners:
                count(key, None, prev_owner)
    gens = []
    for r in live:
        if r["kind"] != "rebalance":
            continue
        started, reason = _known(r["rebalance_started_ms"]), r["rebalance_reason"]
        moved = moves.get((r["log_partition"], r["log_offset"]), (0, 0, 0, 0))
        gens.append(
            {
                **{k: r[k] for k in ("log_partition", "log_offset", "group_id", "incarnation")},
                **{k: r[k] for k in ("generation", "prev_generation", "rebalance_reason")},
                "rebalance_started_ms": started,
                "join_completed_ms": _known(r["state_timestamp_ms"]),
                "rebalance_ended_ms": r["append_time_ms"],
                **{k: r[k] for k in ("members", "static_members", "dynamic_members", "leader")},
                **{k: r[k] for k in ("leader_instance", "protocol_type", "protocol_name")},
                "in_history": r["in_history"],
                **dict(zip(_MOVE_COUNTS, moved, strict=True)),
                "duration_ms": None if started is None else r["append_time_ms"] - started,
                "forced": reason is not None and reason.startswith(_FORCED_PREFIX),
                "empty": _eq(r["members"], 0),
            }
        )
    return gens


def _static_identity(enriched: list[Row], out: _Out) -> None:
    """Member ids replaced for a group.instance.id against the record before: in place (same
    generation: a static restart absorbed, a SkipAssignment rejoin when it was the leader) or
    across a rebalance; each fences the old member id."""
    static = [m for m in enriched if m["instance_id"] is not None]
    before: dict[tuple[Any, Any, str], list[Row]] = defaultdict(list)
    for m in static:
        before[(m["log_partition"], m["log_offset"], m["instance_id"])].append(m)
    for m in static:
        if m["prev_offset"] is None:
            continue
        for old in before.get((m["log_partition"], m["prev_offset"], m["instance_id"]), ()):
            if _eq(m["member_id"], old["member_id"]) is not False:
                continue
            common = {"group_id": m["group_id"], "instance_id": m["instance_id"]}
            at = {"log_partition": m["log_partition"], "log_offset": m["log_offset"]}
            ids = {"fenced_member_id": old["member_id"], "by_member_id": m["member_id"]}
            same = _eq(m["generation"], old["generation"])
            if same:
                leader_replaced = _eq(old["leader"], old["member_id"])
                out.rows["static_replacements"].append(
                    {
                        **common,
                        "incarnation": m["incarnation"],
                        "generation": m["generation"],
                        "old_member_id": old["member_id"],
                        "new_member_id": m["member_id"],
                        "leader_replaced": leader_replaced,
                        "skip_assignment": m["skip_assignment"] if leader_replaced else None,
                        "replaced_at_ms": m["append_time_ms"],
                        **at,
                    }
                )
            if same is not None:
                out.rows["fenced_instances"].append(
                    {
                        **common,
                        **ids,
                        "from_generation": m["generation"] if same else old["generation"],
                        "generation": m["generation"],
                        "kind": "replaced_in_place" if same else "replaced_across_rebalance",
                        "at_ms": m["append_time_ms"],
                        **at,
                    }
                )


def _scale_ups(group_id: str, registrations: list[Row], gens: list[Row]) -> list[Row]:
    """Pre-registered scale-ups: an episode opens with a registration expecting instances and
    closes with one expecting none (or a tombstone); the rebalances between its expansion's
    start and its close."""
    episodes: dict[int, list[tuple[Row, bool]]] = {}
    episode, closed_before = 0, True
    for r in sorted(registrations, key=_position):
        is_close = bool(r["tombstone"] or len(r["expected"]) == 0)
        episode += not is_close and closed_before
        closed_before = is_close
        if episode:
            episodes.setdefault(episode, []).append((r, is_close))
    rows = []
    for n, regs in episodes.items():
        opened = [r for r, is_close in regs if not is_close]
        closes = [r for r, is_close in regs if is_close]
        started = [r for r in opened if _known(r["expansion_started_ms"]) is not None]
        instances = sorted({i for r, _ in regs for i in r["expected"] or ()})
        dropped = sorted({i for r, _ in regs for i in r["dropped"] or ()})
        started_offset = _min(r["log_offset"] for r in started)
        closed_offset = _min(r["log_offset"] for r in closes)
        closed_ms = _min(r["append_time_ms"] for r in closes)
        expansion_started = _max(_known(r["expansion_started_ms"]) for r, _ in regs)
        during = (
            sorted(
                g["generation"]
                for g in gens
                if g["log_offset"] > started_offset
                and (closed_offset is None or g["log_offset"] < closed_offset)
            )
            if started_offset is not None
            else []
        )
        joined = len(set(instances) - set(dropped))
        outcome = (
            "open"
            if closed_offset is None
            else "completed"
            if not dropped
            else "none_joined"
            if joined == 0
            else "partial"
        )
        rows.append(
            {
                "group_id": group_id,
                "episode": n,
                "log_partition": regs[0][0]["log_partition"],
                "registered_ms": _min(r["registered_ms"] for r in opened),
                "instances": instances,
                "expansion_started_ms": expansion_started,
                "expansion_timeout_ms": _max(r["expansion_timeout_ms"] for r, _ in regs),
                "opened_offset": _min(r["log_offset"] for r, _ in regs),
                "started_offset": started_offset,
                "closed_offset": closed_offset,
                "closed_ms": closed_ms,
                "dropped": dropped,
                "rebalances": len(during),
                "generations": during or None,
                "registered": len(instances),
                "joined": joined,
                "outcome": outcome,
                "duration_ms": (
                    None
                    if closed_ms is None or expansion_started is None
                    else closed_ms - expansion_started
                ),
            }
        )
    return rows


def _invariants(
    group_id: str,
    live: list[Row],
    enriched: list[Row],
    owned: list[tuple[Row, str, int]],
    out: _Out,
) -> Row:
    """The invariants checked within the group: violations into `out`; the rows checked."""
    checked = dict.fromkeys(GROUP_INVARIANTS, 0)
    for r in live:
        if r["prev_generation"] is not None:
            checked["generation_never_decreases"] += 1
            if r["generation"] < r["prev_generation"]:
                out.violation(
                    "generation_never_decreases",
                    r,
                    f"generation {r['generation']} follows generation {r['prev_generation']} "
                    f"(record before at offset {r['prev_offset']})",
                    r["generation"],
                )
        if r["members"] > 0:
            checked["leader_is_member"] += 1
            if r["leader_in_members"] is False:
                leader = "null" if r["leader"] is None else r["leader"]
                out.violation(
                    "leader_is_member",
                    r,
                    f"leader {leader} is not among the {r['members']} members",
                    r["generation"],
                )
    # one owner per partition and generation
    owners: dict[tuple[Any, ...], list[Any]] = {}
    for m, topic, partition in owned:
        key = (m["incarnation"], m["generation"], topic, partition)
        lp, lo = m["log_partition"], m["log_offset"]
        seen = owners.get(key)
        if seen is None:
            seen = owners[key] = [set(), lp, lo]
        if m["owner"] is not None:
            seen[0].add(m["owner"])
        if lp is not None and (seen[1] is None or lp < seen[1]):
            seen[1] = lp
        if lo is not None and (seen[2] is None or lo < seen[2]):
            seen[2] = lo
    checked["partition_single_owner"] = len(owners)
    for (_, generation, topic, partition), (names, lp, lo) in owners.items():
        if len(names) > 1:
            at = {"group_id": group_id, "log_partition": lp, "log_offset": lo}
            out.violation(
                "partition_single_owner",
                at,
                f"{topic}-{partition} owned by {', '.join(sorted(names))}",
                generation,
            )
    # assignments within subscriptions (consumer protocol)
    for m in enriched:
        if m["protocol_type"] != "consumer" or m["subscribed"] is None or m["assigned"] is None:
            continue
        checked["assignment_within_subscription"] += 1
        subscribed = set(m["subscribed"])
        extra = [
            t for t in dict.fromkeys(tp["topic"] for tp in m["assigned"]) if t not in subscribed
        ]
        if extra:
            member = "null" if m["member_id"] is None else m["member_id"]
            instance = "-" if m["instance_id"] is None else m["instance_id"]
            out.violation(
                "assignment_within_subscription",
                m,
                f"member {member} (instance {instance}) assigned {', '.join(extra)} but "
                f"subscribed to [{', '.join(m['subscribed'])}]",
                m["generation"],
            )
    return checked


def _min(values: Iterable[Any]) -> Any:
    return min((v for v in values if v is not None), default=None)


def _max(values: Iterable[Any]) -> Any:
    return max((v for v in values if v is not None), default=None)
