"""Decoding the event log's binary records inside Spark.

Offset commits are the bulk of a log and have a fixed layout, so they are decoded by Spark SQL
expressions on the JVM (no Python round trip). Group metadata and static-registration values
are nested (members, consumer-protocol subscriptions and assignments): they are decoded by the
project's own decoders (`app.group.records`, `app.group.consumer_protocol`) in the group pass's
Python workers (pipeline/groups.py), so what the audit reads is exactly what the coordinator
replays.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from app.group.consumer_protocol import decode_assignment, decode_subscription
from app.group.records import decode_group_key, decode_group_value, decode_registration_value

# ==== group metadata: one row per (record, member); a record without members has one row ====

ASSIGNED = pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))

MEMBER_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("append_time_ms", pa.int64()),
        ("in_history", pa.bool_()),
        ("tombstone", pa.bool_()),
        ("decode_error", pa.string()),
        ("value_version", pa.int16()),
        ("protocol_type", pa.string()),
        ("generation", pa.int32()),
        ("protocol_name", pa.string()),
        ("leader", pa.string()),
        ("leader_instance", pa.string()),
        ("leader_in_members", pa.bool_()),
        ("state_timestamp_ms", pa.int64()),
        ("rebalance_reason", pa.string()),
        ("rebalance_started_ms", pa.int64()),
        ("skip_assignment", pa.bool_()),  # null: record older than v2, unknown
        ("members", pa.int32()),
        ("static_members", pa.int32()),
        ("dynamic_members", pa.int32()),
        ("member_index", pa.int32()),  # -1: no member on this row
        ("member_id", pa.string()),
        ("instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("session_timeout_ms", pa.int32()),
        ("rebalance_timeout_ms", pa.int32()),
        ("subscribed", pa.list_(pa.string())),
        ("assigned", ASSIGNED),
        ("protocol_error", pa.string()),  # consumer-protocol bytes that do not decode
    ]
)

INPUT_COLUMNS = ["log_partition", "log_offset", "append_time_ms", "in_history", "key", "value"]
# what the offset-commit decoders read (they never look at `in_history`)
OFFSET_INPUT_COLUMNS = ["log_partition", "log_offset", "append_time_ms", "key", "value"]


def _version(value: bytes) -> int | None:
    return struct.unpack_from(">h", value)[0] if len(value) >= 2 else None


def _group_id(key: bytes) -> tuple[str | None, str | None]:
    try:
        return decode_group_key(key), None
    except Exception as e:  # a corrupt key: keep the row, say why
        return None, f"key: {type(e).__name__}: {e}"


def _consumer_bytes(
    subscription: bytes, assignment: bytes
) -> tuple[list[str] | None, list[dict[str, Any]] | None, str | None]:
    errors = []
    subscribed: list[str] | None = None
    assigned: list[dict[str, Any]] | None = None
    try:
        subscribed = list(decode_subscription(subscription).topics) if subscription else []
    except Exception as e:
        errors.append(f"subscription: {type(e).__name__}: {e}")
    try:
        # an empty assignment is "nothing assigned" (e.g. the leader gave this member none)
        assigned = (
            [
                {"topic": t, "partition": p}
                for t, parts in decode_assignment(assignment).partitions
                for p in parts
            ]
            if assignment
            else []
        )
    except Exception as e:
        errors.append(f"assignment: {type(e).__name__}: {e}")
    return subscribed, assigned, "; ".join(errors) or None


def decode_group_rows(rows: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Columns of GROUP_METADATA log rows -> MEMBER_SCHEMA rows (every field), one per record
    and member; a record without members (or that does not decode) has one, member_index -1."""
    out: list[dict[str, Any]] = []
    base_cols = ("log_partition", "log_offset", "append_time_ms", "in_history")
    n = len(rows["key"])
    # the same subscription and assignment bytes come back record after record (a group's
    # members keep their subscription; a generation's later records repeat its assignments):
    # each distinct pair is decoded once a batch (a pure function of the bytes)
    consumer_bytes: dict[tuple[bytes, bytes], Any] = {}
    for i in range(n):
        base = {c: rows[c][i] for c in base_cols}
        group_id, key_error = _group_id(rows["key"][i])
        value = rows["value"][i]
        record: dict[str, Any] = {**_NO_RECORD, **base, "group_id": group_id}
        record["tombstone"] = value is None
        member_rows: list[dict[str, Any]] = []
        if key_error is not None:
            record["decode_error"] = key_error
        elif value is not None:
            try:
                v = decode_group_value(value)
            except Exception as e:
                record["decode_error"] = f"value: {type(e).__name__}: {e}"
            else:
                version = _version(value)
                static = sum(1 for m in v.members if m.group_instance_id is not None)
                leader_instance = next(
                    (m.group_instance_id for m in v.members if m.member_id == v.leader), None
                )
                record.update(
                    value_version=version,
                    protocol_type=v.protocol_type,
                    generation=v.generation,
                    protocol_name=v.protocol_name,
                    leader=v.leader,
                    leader_instance=leader_instance,
                    leader_in_members=any(m.member_id == v.leader for m in v.members),
                    state_timestamp_ms=v.current_state_timestamp,
                    rebalance_reason=v.rebalance_reason,
                    rebalance_started_ms=v.rebalance_started_ms,
                    skip_assignment=v.skip_assignment if (version or 0) >= 2 else None,
                    members=len(v.members),
                    static_members=static,
                    dynamic_members=len(v.members) - static,
                )
                consumer = v.protocol_type == "consumer"
                for j, m in enumerate(v.members):
                    subscribed, assigned, perr = None, None, None
                    if consumer:
                        pair = (m.subscription, m.assignment)
                        decoded = consumer_bytes.get(pair)
                        if decoded is None:
                            decoded = consumer_bytes[pair] = _consumer_bytes(*pair)
                        subscribed, assigned, perr = decoded
                    member_rows.append(
                        {
                            "member_index": j,
                            "member_id": m.member_id,
                            "instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "session_timeout_ms": m.session_timeout_ms,
                            "rebalance_timeout_ms": m.rebalance_timeout_ms,
                            "subscribed": subscribed,
                            "assigned": assigned,
                            "protocol_error": perr,
                        }
                    )
        # the record's fields on each of its rows, then the row's member fields
        out.extend({**record, **m} for m in member_rows or [_NO_MEMBER])
    return out


_MEMBER_FIELDS = (
    "member_index",
    "member_id",
    "instance_id",
    "client_id",
    "client_host",
    "session_timeout_ms",
    "rebalance_timeout_ms",
    "subscribed",
    "assigned",
    "protocol_error",
)
_RECORD_FIELDS = tuple(f.name for f in MEMBER_SCHEMA if f.name not in _MEMBER_FIELDS)
_NO_RECORD: dict[str, Any] = dict.fromkeys(_RECORD_FIELDS)
_NO_MEMBER: dict[str, Any] = {**dict.fromkeys(_MEMBER_FIELDS), "member_index": -1}


# ==== static registrations (admin pre-registration of a scale-up) ============================

REGISTRATION_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("append_time_ms", pa.int64()),
        ("tombstone", pa.bool_()),
        ("decode_error", pa.string()),
        ("expected", pa.list_(pa.string())),
        ("expansion_timeout_ms", pa.int32()),
        ("registered_ms", pa.int64()),
        ("expansion_started_ms", pa.int64()),
        ("dropped", pa.list_(pa.string())),
    ]
)


_NO_REGISTRATION: dict[str, Any] = dict.fromkeys(REGISTRATION_SCHEMA.names)


def decode_registration_rows(rows: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Columns of STATIC_REGISTRATION log rows -> REGISTRATION_SCHEMA rows (every field)."""
    out: list[dict[str, Any]] = []
    for i in range(len(rows["key"])):
        group_id, error = _group_id(rows["key"][i])
        value = rows["value"][i]
        row: dict[str, Any] = {
            **_NO_REGISTRATION,
            "group_id": group_id,
            "log_partition": rows["log_partition"][i],
            "log_offset": rows["log_offset"][i],
            "append_time_ms": rows["append_time_ms"][i],
            "tombstone": value is None,
            "decode_error": error,
        }
        if error is None and value is not None:
            try:
                v = decode_registration_value(value)
            except Exception as e:
                row["decode_error"] = f"value: {type(e).__name__}: {e}"
            else:
                row.update(
                    expected=list(v.expected),
                    expansion_timeout_ms=v.expansion_timeout_ms,
                    registered_ms=v.registered_ms,
                    expansion_started_ms=v.expansion_started_ms,
                    dropped=list(v.dropped),
                )
        out.append(row)
    return out


# ==== offset commits: vectorised over Arrow buffers ============================================
# key   = i16 version | str group | str topic | i32 partition          (str = i32 length + UTF-8)
# value = i16 version | i64 offset | i32 leader epoch | str metadata | i64 commit ts
#         | i64 expire ts | (v1) i16 source | (v2) str origin
# Offset commits are the bulk of a log: they are decoded with numpy over the Arrow buffers of
# a whole batch (no Python loop per record); a record shorter than its layout says is flagged.

OFFSET_SCHEMA = pa.schema(
    [
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("append_time_ms", pa.int64()),
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("tombstone", pa.bool_()),
        ("value_version", pa.int16()),
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("commit_timestamp_ms", pa.int64()),
        ("expire_timestamp_ms", pa.int64()),
        ("source", pa.int16()),
        ("origin", pa.string()),  # v2: the upstream cluster of an import; "" before v2
        ("key_ok", pa.bool_()),
        ("value_ok", pa.bool_()),
    ]
)

_PAD = 16  # zero bytes after the data, so masked-out reads stay in bounds


def _binary_parts(arr: pa.Array) -> tuple[Any, Any, Any, Any]:
    """(data bytes, start of each value, length of each value, valid mask) as numpy arrays."""
    import numpy as np

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    n = len(arr)
    width = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    _, offs_buf, data_buf = arr.buffers()
    offs = np.frombuffer(offs_buf, dtype=width)[arr.offset : arr.offset + n + 1].astype(np.int64)
    data = (
        np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    )
    data = np.concatenate([data[: offs[-1] if n else 0], np.zeros(_PAD, np.uint8)])
    valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return data, offs[:-1], offs[1:] - offs[:-1], valid


def _be(data: Any, pos: Any, nbytes: int, ok: Any) -> Any:
    """Big-endian unsigned ints of `nbytes` at `pos` (0 where not `ok`), as uint64."""
    import numpy as np

    p = np.where(ok, pos, 0)
    # the big-endian word at every byte of the data, one word gathered per value (a third
    # faster than gathering rows of bytes); data ends with _PAD zero bytes, so a word never
    # runs past it
    words = np.ndarray((max(len(data) - nbytes + 1, 0),), f">u{nbytes}", data, 0, (1,))
    v = words[p].astype(np.uint64)
    return np.where(ok, v, np.uint64(0))  # not the bytes at the start of the batch


def _signed(v: Any, nbytes: int) -> Any:
    import numpy as np

    kind = {2: (np.uint16, np.int16), 4: (np.uint32, np.int32), 8: (np.uint64, np.int64)}
    unsigned, signed = kind[nbytes]
    return v.astype(unsigned).view(signed)


def _strings(data: Any, starts: Any, lens: Any) -> pa.Array:
    """A StringArray of data[starts[i] : starts[i] + lens[i]], gathered without a loop."""
    import numpy as np

    lens = lens.astype(np.int64)
    out = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    idx = np.repeat(starts - out[:-1], lens) + np.arange(out[-1], dtype=np.int64)
    return pa.LargeStringArray.from_buffers(
        len(lens), pa.py_buffer(out), pa.py_buffer(np.ascontiguousarray(data[idx]))
    ).cast(pa.string())


def offset_value_layout(vd: Any, vs: Any, vl: Any, live: Any) -> tuple[Any, Any, Any, Any, Any]:
    """Of offset values (`_binary_parts`: data, starts, lengths, valid): whether each holds
    its version's layout, its version, metadata length, source (0 before v1) and origin length
    (0 before v2); the lengths are 0 where the layout does not hold."""
    import numpy as np

    # version(2) offset(8) epoch(4) mlen(4) metadata commit_ts(8) expire_ts(8) [source(2)]
    # [olen(4) origin]
    vok = live & (vl >= 18)
    version = _signed(_be(vd, vs, 2, vok), 2)
    mlen = _signed(_be(vd, vs + 14, 4, vok), 4).astype(np.int64)
    need = 34 + np.where(mlen >= 0, mlen, 0) + np.where(version >= 1, 2, 0)
    vok &= (mlen >= 0) & (vl >= need)
    mlen = np.where(vok, mlen, 0)
    origin = vok & (version >= 2)
    readable = origin & (vl >= 40 + mlen)
    olen = _signed(_be(vd, vs + 36 + mlen, 4, readable), 4).astype(np.int64)
    vok &= ~origin | (readable & (olen >= 0) & (vl >= 40 + mlen + olen))
    mlen = np.where(vok, mlen, 0)
    olen = np.where(vok & origin, olen, 0)
    source = np.where(version >= 1, _signed(_be(vd, vs + 34 + mlen, 2, vok & (version >= 1)), 2), 0)
    return vok, version, mlen, source.astype(np.int16), olen


def decode_offset_batch(batch: pa.RecordBatch, columns: list[str] | None = None) -> pa.RecordBatch:
    """OFFSET_SCHEMA rows, or only `columns` of them."""
    import numpy as np
    import pyarrow.compute as pc

    kd, ks, kl, _ = _binary_parts(batch.column("key"))
    vd, vs, vl, live = _binary_parts(batch.column("value"))
    # key: version(2) glen(4) group topic-len(4) topic partition(4)
    ok = kl >= 6
    glen = _signed(_be(kd, ks + 2, 4, ok), 4).astype(np.int64)
    ok &= (glen >= 0) & (kl >= 10 + glen)
    glen = np.where(ok, glen, 0)
    tlen = _signed(_be(kd, ks + 6 + glen, 4, ok), 4).astype(np.int64)
    ok &= (tlen >= 0) & (kl >= 14 + glen + tlen)
    tlen = np.where(ok, tlen, 0)
    partition = _signed(_be(kd, ks + 10 + glen + tlen, 4, ok), 4)
    vok, version, mlen, source, olen = offset_value_layout(vd, vs, vl, live)
    dead = ~live
    origin = pc.if_else(
        pa.array(dead), pa.nulls(len(dead), pa.string()), _strings(vd, vs + 40 + mlen, olen)
    )

    def col(values: Any, typ: pa.DataType) -> pa.Array:
        return pa.array(values, type=typ, mask=dead)

    out = pa.RecordBatch.from_arrays(
        [
            batch.column("log_partition"),
            batch.column("log_offset"),
            batch.column("append_time_ms"),
            _strings(kd, ks + 6, glen),
            _strings(kd, ks + 10 + glen, tlen),
            pa.array(partition, pa.int32()),
            pa.array(dead),
            col(version, pa.int16()),
            col(_signed(_be(vd, vs + 2, 8, vok), 8), pa.int64()),
            col(_signed(_be(vd, vs + 10, 4, vok), 4), pa.int32()),
            col(_signed(_be(vd, vs + 18 + mlen, 8, vok), 8), pa.int64()),
            col(_signed(_be(vd, vs + 26 + mlen, 8, vok), 8), pa.int64()),
            col(source, pa.int16()),
            origin,
            pa.array(ok),
            pa.array(dead | vok),
        ],
        schema=OFFSET_SCHEMA,
    )
    return out if columns is None else out.select(columns)


def decode_offset_batches(
    batches: Iterator[pa.RecordBatch], columns: list[str] | None = None
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: OFFSET_COMMIT rows (INPUT_COLUMNS) -> OFFSET_SCHEMA rows (`columns`)."""
    for batch in batches:
        if batch.num_rows:
            yield decode_offset_batch(batch, columns)


# ==== offset commits with Spark's own expressions (the audit's decoder) =======================
# The same layout and the same answers as `decode_offset_batch` above, column for column, but
# as Spark SQL expressions: the JVM decodes the bulk of the log in its own scan, with no Python
# worker and no Arrow round trip. A big-endian integer is `conv(hex(substring(...)), 16, ..)`
# (binary cannot be cast to a number); `decode_offset_batch` stays as the reference the tests
# compare it with.


def _sql_int(b: Any, pos: Any, nbytes: int, ok: Any) -> Any:
    """The big-endian signed integer of `nbytes` at 0-based `pos` of binary column `b`, 0 where
    not `ok` (as `_be`/`_signed` do)."""
    from pyspark.sql import functions as F

    raw = F.hex(b.substr(pos + 1, F.lit(nbytes)))
    if nbytes == 8:
        v = F.conv(raw, 16, -10).cast("long")  # a negative base: read as signed 64-bit
    else:
        u = F.conv(raw, 16, 10).cast("long")
        v = F.when(u >= 1 << (8 * nbytes - 1), u - (1 << (8 * nbytes))).otherwise(u)
    return F.when(ok, v).otherwise(F.lit(0).cast("long"))


def decode_offsets_sql(rows: Any) -> Any:
    """OFFSET_COMMIT rows (INPUT_COLUMNS) -> OFFSET_SCHEMA rows, decoded by Spark expressions.

    Each step reads the columns the step before computed (a field's position depends on the
    lengths before it): the plan stays a chain of small projections rather than one expression
    that repeats every length in every field after it."""
    from pyspark.sql import functions as F

    c = F.col
    zero = F.lit(0).cast("long")
    base = [c(n) for n in ("log_partition", "log_offset", "append_time_ms")]
    df = rows.select(
        *base,
        F.coalesce(c("key"), F.lit(bytearray())).alias("key"),  # a null key reads as empty
        c("value"),
    ).select(
        "*",
        F.length("key").cast("long").alias("_kl"),
        c("value").isNotNull().alias("_live"),
        F.coalesce(F.length("value").cast("long"), zero).alias("_vl"),
    )
    # key: version(2) glen(4) group topic-len(4) topic partition(4)
    # value: version(2) offset(8) epoch(4) mlen(4) metadata commit_ts(8) expire_ts(8) [source(2)]
    #        [olen(4) origin]
    df = df.select(
        "*",
        _sql_int(c("key"), F.lit(2), 4, c("_kl") >= 6).alias("_glen"),
        (c("_live") & (c("_vl") >= 18)).alias("_vok1"),
    ).select(
        "*",
        _sql_int(c("value"), F.lit(0), 2, c("_vok1")).alias("_version"),
        _sql_int(c("value"), F.lit(14), 4, c("_vok1")).alias("_mlen"),
    )
    ok = (c("_kl") >= 6) & (c("_glen") >= 0) & (c("_kl") >= c("_glen") + 10)
    need = F.when(c("_mlen") >= 0, c("_mlen")).otherwise(0) + F.when(
        c("_version") >= 1, 36
    ).otherwise(34)
    vok = c("_vok1") & (c("_mlen") >= 0) & (c("_vl") >= need)
    df = df.select("*", ok.alias("_ok1"), vok.alias("_vok2"))
    # v2: the origin's length after the source (as offset_value_layout)
    m = F.when(c("_vok2"), c("_mlen")).otherwise(zero)
    origin = c("_vok2") & (c("_version") >= 2)
    readable = origin & (c("_vl") >= m + 40)
    df = df.select("*", _sql_int(c("value"), m + 36, 4, readable).alias("_olen"))
    vok = c("_vok2") & (
        ~origin | (readable & (c("_olen") >= 0) & (c("_vl") >= m + 40 + c("_olen")))
    )
    df = df.select("*", vok.alias("_vok")).select(
        "*",
        F.when(c("_ok1"), c("_glen")).otherwise(zero).alias("_g"),
        F.when(c("_vok"), c("_mlen")).otherwise(zero).alias("_m"),
        F.when(c("_vok") & (c("_version") >= 2), c("_olen")).otherwise(zero).alias("_o"),
    )
    df = df.select("*", _sql_int(c("key"), c("_g") + 6, 4, c("_ok1")).alias("_tlen"))
    ok = c("_ok1") & (c("_tlen") >= 0) & (c("_kl") >= c("_g") + c("_tlen") + 14)
    df = df.select("*", ok.alias("_ok")).select(
        "*", F.when(c("_ok"), c("_tlen")).otherwise(zero).alias("_t")
    )

    def live_only(col: Any, typ: str) -> Any:
        return F.when(c("_live"), col.cast(typ))

    decoded = {
        "group_id": c("key").substr(F.lit(7), c("_g").cast("int")).cast("string"),
        "topic": c("key").substr((c("_g") + 11).cast("int"), c("_t").cast("int")).cast("string"),
        "partition": _sql_int(c("key"), c("_g") + c("_t") + 10, 4, c("_ok")).cast("int"),
        "tombstone": ~c("_live"),
        "value_version": live_only(c("_version"), "smallint"),
        "committed_offset": live_only(_sql_int(c("value"), F.lit(2), 8, c("_vok")), "long"),
        "leader_epoch": live_only(_sql_int(c("value"), F.lit(10), 4, c("_vok")), "int"),
        "commit_timestamp_ms": live_only(_sql_int(c("value"), c("_m") + 18, 8, c("_vok")), "long"),
        "expire_timestamp_ms": live_only(_sql_int(c("value"), c("_m") + 26, 8, c("_vok")), "long"),
        "source": live_only(
            _sql_int(c("value"), c("_m") + 34, 2, c("_vok") & (c("_version") >= 1)), "smallint"
        ),
        "origin": live_only(
            c("value").substr((c("_m") + 41).cast("int"), c("_o").cast("int")), "string"
        ),
        "key_ok": c("_ok"),
        "value_ok": ~c("_live") | c("_vok"),
    }
    return df.select(
        *(decoded[f.name].alias(f.name) if f.name in decoded else c(f.name) for f in OFFSET_SCHEMA)
    )


# "sql": Spark expressions on the JVM (decode_offsets_sql); "arrow": numpy over Arrow batches
# in Python workers (decode_offset_batches). Both give the same rows (tests/pipeline).
OFFSET_DECODER = os.environ.get("AUDIT_OFFSET_DECODER", "arrow")


def decode_offsets(rows: Any, method: str | None = None, columns: list[str] | None = None) -> Any:
    """OFFSET_COMMIT rows (OFFSET_INPUT_COLUMNS) -> OFFSET_SCHEMA rows, or only `columns` of them:
    fewer columns back from the Python workers are fewer values converted on the way."""
    method = method or OFFSET_DECODER
    if method == "sql":
        df = decode_offsets_sql(rows)
        return df if columns is None else df.select(*columns)
    if method == "arrow":
        from functools import partial

        from pyspark.sql.pandas.types import from_arrow_schema

        names = columns or OFFSET_SCHEMA.names
        schema = pa.schema([OFFSET_SCHEMA.field(c) for c in names])
        return rows.mapInArrow(
            partial(decode_offset_batches, columns=columns), from_arrow_schema(schema)
        )
    raise ValueError(f"unknown offset decoder {method!r} (sql or arrow)")
