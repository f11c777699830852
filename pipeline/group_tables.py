"""The group pass's outputs (pipeline/groups.py): the per-group tables' schemas, the
invariants checked within a group, each group record's stretch of the log, and the pass's
own schema (one struct column per output)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from app.group.records import RecordType

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

# the records the pass reads
PASS_RECORD_TYPES = (RecordType.GROUP_METADATA.value, RecordType.STATIC_REGISTRATION.value)

# the reason of a rebalance an admin forced starts with it
FORCED_PREFIX = "admin: "

Row = dict[str, Any]


class PassRows:
    """The rows of every output of one batch of groups, as they are found."""

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
            | {"reason": g["rebalance_reason"][len(FORCED_PREFIX) :]}
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
