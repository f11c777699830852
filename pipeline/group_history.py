"""One group's history from its decoded records: the records in log order and their
incarnations, the generations and the partitions they moved, static replacements and fenced
member ids, pre-registered scale-ups, and the invariants checked within the group.

The rules are those of the Spark SQL they replace, kept literally where a log could tell them
apart: joins on log positions (a position held twice joins twice), SQL's three-valued
comparisons (a null never equals anything), windows ordered by (log partition, log offset).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

from pipeline.group_tables import (
    FORCED_PREFIX,
    GROUP_INVARIANTS,
    GROUP_RECORD_SCHEMA,
    PassRows,
    Row,
)

_MOVE_COUNTS = ("partitions_assigned", "partitions_moved", "partitions_new", "partitions_revoked")


def _position(r: Row) -> tuple[Any, ...]:
    """Log order, a null sorting first (as Spark's ascending order)."""
    lp, lo = r["log_partition"], r["log_offset"]
    return (lp is not None, lp or 0, lo is not None, lo or 0)


def _eq(a: Any, b: Any) -> bool | None:
    """SQL's `=`: null when either side is."""
    return None if a is None or b is None else a == b


def _known(v: Any) -> Any:
    return v if v is not None and v >= 0 else None  # -1: not recorded


def audit_group(group_id: str, members: list[Row], registrations: list[Row], out: PassRows) -> None:
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
                "forced": reason is not None and reason.startswith(FORCED_PREFIX),
                "empty": _eq(r["members"], 0),
            }
        )
    return gens


def _static_identity(enriched: list[Row], out: PassRows) -> None:
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
    out: PassRows,
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
