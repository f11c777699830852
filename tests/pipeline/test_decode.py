"""The vectorised offset-commit decoder agrees with app.group.records on every record, and
flags (instead of misreading) records shorter than their layout."""

from __future__ import annotations

import random

import pyarrow as pa

from app.group.records import (
    OffsetValue,
    decode_offset_key,
    decode_offset_value,
    offset_record,
)
from pipeline.decode import decode_offset_batch

SCHEMA = pa.schema(
    [
        ("log_partition", pa.int32()),
        ("log_offset", pa.int64()),
        ("append_time_ms", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
    ]
)


def test_offset_decoder_matches_the_records_module() -> None:
    rng = random.Random(1)
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for i in range(3000):
        group = "g" * rng.randint(0, 20) + str(i)
        topic = "tópic" + str(rng.randint(0, 9))  # multi-byte UTF-8
        value = (
            None
            if i % 7 == 0
            else OffsetValue(
                rng.randint(-1, 2**62),
                rng.randint(-1, 9),
                "m" * rng.randint(0, 30),
                rng.randint(0, 2**45),
                rng.choice([-1, 5]),
                rng.choice([0, 0, 1]),
            )
        )
        r = offset_record(group, topic, rng.randint(0, 2**31 - 1), value)
        key, body = r.key, r.value
        if i % 11 == 0 and body:
            body = body[: rng.randint(0, len(body) - 1)]  # truncated value
        if i % 13 == 0:
            key = key[: rng.randint(0, len(key) - 1)]  # truncated key
        keys.append(key)
        values.append(body)
    n = len(keys)
    batch = pa.RecordBatch.from_pydict(
        {
            "log_partition": [0] * n,
            "log_offset": list(range(n)),
            "append_time_ms": [1] * n,
            "key": keys,
            "value": values,
        },
        schema=SCHEMA,
    )
    rows = decode_offset_batch(batch.slice(5, n - 10)).to_pylist()  # a slice: non-zero offset
    flagged = 0
    for row, key, body in zip(rows, keys[5:], values[5:], strict=False):
        try:
            g, t, p = decode_offset_key(key)
            key_ok = len(key) >= 14 + len(g.encode()) + len(t.encode())
        except Exception:
            key_ok = False
        assert row["key_ok"] is key_ok
        if key_ok:
            assert (row["group_id"], row["topic"], row["partition"]) == (g, t, p)
        if body is None:
            assert row["tombstone"] and row["value_ok"] and row["committed_offset"] is None
            continue
        try:
            v = decode_offset_value(body)
            value_ok = len(body) >= 34 + len(v.metadata.encode()) + (2 if body[1] >= 1 else 0)
        except Exception:
            value_ok = False
        assert row["value_ok"] is value_ok
        if value_ok:
            assert (
                row["committed_offset"],
                row["leader_epoch"],
                row["commit_timestamp_ms"],
                row["expire_timestamp_ms"],
                row["source"],
            ) == (
                v.offset,
                v.leader_epoch,
                v.commit_timestamp,
                v.expire_timestamp,
                v.source,
            )
        else:
            flagged += 1
    assert flagged > 100
