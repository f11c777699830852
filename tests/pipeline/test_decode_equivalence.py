"""The audit's offset-commit decoders (numpy over Arrow batches, and Spark expressions) give the
rows the reference codec (app.group.records, pure Python) gives, on a generated log with every
record type and version the generator writes and on records cut short; and an audit with either
decoder writes the same tables."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.group.records import (
    OffsetValue,
    RecordType,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
    decode_registration_value,
    offset_record,
)
from pipeline import decode
from pipeline.audit import read_log, run_audit
from pipeline.decode import INPUT_COLUMNS, OFFSET_INPUT_COLUMNS, OFFSET_SCHEMA, decode_offsets
from pipeline.generate import generate

COLUMNS = [f.name for f in OFFSET_SCHEMA]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen") / "export"
    generate(out, records=30_000, groups=12, log_partitions=2, workers=1, seed=3)
    return out


def _reference(key: bytes, value: bytes | None) -> dict[str, Any] | None:
    """What app.group.records reads from an offset commit; None where it cannot."""
    try:
        group, topic, partition = decode_offset_key(key)
    except Exception:
        return None
    row: dict[str, Any] = {"group_id": group, "topic": topic, "partition": partition}
    if value is None:
        return row | {"tombstone": True, "committed_offset": None, "source": None, "origin": None}
    try:
        v = decode_offset_value(value)
    except Exception:
        return None
    return row | {
        "tombstone": False,
        "value_version": struct.unpack_from(">h", value)[0],
        "committed_offset": v.offset,
        "leader_epoch": v.leader_epoch,
        "commit_timestamp_ms": v.commit_timestamp,
        "expire_timestamp_ms": v.expire_timestamp,
        "source": v.source,
        "origin": v.origin,
    }


def _decoded(spark: Any, rows: Any, method: str) -> dict[tuple[int, int], dict[str, Any]]:
    out = decode_offsets(rows.select(*INPUT_COLUMNS), method).collect()
    return {(r["log_partition"], r["log_offset"]): r.asDict() for r in out}


def test_generated_log_has_every_record_type_and_version(generated: Path) -> None:
    seen: set[tuple[int, int | None]] = set()
    for name in ("log.parquet", "history.parquet"):
        t = pq.read_table(generated / name, columns=["record_type", "value"])
        for rt, value in zip(
            t.column("record_type").to_pylist(), t.column("value").to_pylist(), strict=True
        ):
            version = struct.unpack_from(">h", value)[0] if value else None
            seen.add((rt, version))
    types = {rt for rt, _ in seen}
    assert types == {t.value for t in RecordType}
    offsets = {v for rt, v in seen if rt == RecordType.OFFSET_COMMIT.value}
    assert {0, 1, 2} <= offsets  # member commits (v0), resets (v1), imports (v2)
    groups = {v for rt, v in seen if rt == RecordType.GROUP_METADATA.value}
    assert groups - {None}  # the generator writes the current group value version


def test_decoders_match_the_reference_codec_on_a_generated_log(spark: Any, generated: Path) -> None:
    from pyspark.sql import functions as F

    recs = read_log(spark, str(generated))
    commits = recs.filter(F.col("record_type") == RecordType.OFFSET_COMMIT.value)
    raw = {(r["log_partition"], r["log_offset"]): r for r in commits.collect()}
    arrow, sql = _decoded(spark, commits, "arrow"), _decoded(spark, commits, "sql")
    assert arrow == sql
    assert len(sql) == len(raw) > 20_000
    for pos, r in raw.items():
        ref = _reference(r["key"], r["value"])
        assert ref is not None, pos  # the generator writes only records that decode
        got = sql[pos]
        assert got["key_ok"] and got["value_ok"]
        assert {k: got[k] for k in ref} == ref, pos
    # group metadata and registrations are decoded by app.group.records itself, in workers
    others = recs.filter(F.col("record_type") != RecordType.OFFSET_COMMIT.value).collect()
    for r in others:
        if r["value"] is not None and r["record_type"] == RecordType.GROUP_METADATA.value:
            decode_group_value(r["value"])
        if r["value"] is not None and r["record_type"] == RecordType.STATIC_REGISTRATION.value:
            decode_registration_value(r["value"])


def test_decoders_give_the_same_values_when_asked_for_fewer_columns(
    spark: Any, generated: Path
) -> None:
    from pyspark.sql import functions as F

    commits = read_log(spark, str(generated)).filter(
        F.col("record_type") == RecordType.OFFSET_COMMIT.value
    )
    cols = ["log_partition", "log_offset", "topic", "committed_offset", "source", "value_ok"]
    for method in ("arrow", "sql"):
        full = _decoded(spark, commits, method)
        fewer = decode_offsets(commits.select(*OFFSET_INPUT_COLUMNS), method, cols).collect()
        assert fewer and all(r.asDict() == {c: full[r[0], r[1]][c] for c in cols} for r in fewer)
        assert len(fewer) == len(full)


def test_decoders_agree_on_records_cut_short(spark: Any) -> None:
    rng = random.Random(5)
    rows: dict[str, list[Any]] = {c: [] for c in INPUT_COLUMNS}
    raw: dict[int, tuple[bytes | None, bytes | None]] = {}
    for i in range(2_000):
        source = rng.choice([0, 1, 2])  # v0, v1, and v2 with an origin for imports
        value = (
            None
            if i % 7 == 0
            else OffsetValue(
                rng.randint(-(2**63), 2**63 - 1),
                rng.randint(-(2**31), 2**31 - 1),
                "m" * rng.randint(0, 20) + "é" * rng.randint(0, 3),
                rng.randint(-1, 2**45),
                rng.choice([-1, 5]),
                source,
                "cluster-" + "ü" * rng.randint(0, 4) if source == 2 else "",
            )
        )
        rec = offset_record("g" * rng.randint(0, 9) + "ü", f"t{i % 5}", rng.randint(0, 99), value)
        key, body = rec.key, rec.value
        if i % 11 == 0 and body:
            body = body[: rng.randint(0, len(body) - 1)]
        if i % 13 == 0:
            key = key[: rng.randint(0, len(key) - 1)]
        if i % 17 == 0 and body:
            # a negative metadata length (a null string)
            body = body[:14] + struct.pack(">i", -1) + body[18:]
        v2 = body is not None and len(body) >= 18 and body[:2] == b"\x00\x02"
        if i % 19 == 0 and body and v2 and len(body) >= 40 + body[17]:
            # a v2 value whose origin claims more bytes than follow, or a negative length
            at = 36 + body[17]  # the metadata is shorter than 256 bytes
            olen = -1 if i % 2 else 1_000
            body = body[:at] + struct.pack(">i", olen) + body[at + 4 :]
        if i == 3:
            key = None  # a key the export should never hold: reads as empty
        raw[i] = (key, body)
        for c, v in zip(INPUT_COLUMNS, [i % 3, i, 1_000 + i, i % 2 == 0, key, body], strict=True):
            rows[c].append(v)
    schema = pa.schema(
        [
            ("log_partition", pa.int32()),
            ("log_offset", pa.int64()),
            ("append_time_ms", pa.int64()),
            ("in_history", pa.bool_()),
            ("key", pa.binary()),
            ("value", pa.binary()),
        ]
    )
    df = spark.createDataFrame(pa.Table.from_pydict(rows, schema=schema).to_pandas())
    arrow, sql = _decoded(spark, df, "arrow"), _decoded(spark, df, "sql")
    assert arrow == sql
    assert sum(not r["key_ok"] or not r["value_ok"] for r in sql.values()) > 200
    # what both decode is what the reference codec reads, v2's origin included
    for (_, i), got in sql.items():
        if got["key_ok"] and got["value_ok"]:
            raw_key, raw_value = raw[i]
            ref = None if raw_key is None else _reference(raw_key, raw_value)
            assert ref is not None and {k: got[k] for k in ref} == ref, i
    assert {r["origin"] for r in sql.values() if r["value_ok"]} >= {"", "cluster-", "cluster-üü"}


def test_an_audit_writes_the_same_tables_with_either_decoder(
    spark: Any, generated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = {}
    for method in ("arrow", "sql"):
        monkeypatch.setattr(decode, "OFFSET_DECODER", method)
        result = run_audit(spark, str(generated), str(tmp_path / method), report=False)
        assert result.violations == 0
        tables[method] = result.tables
    assert tables["arrow"] == tables["sql"]
    for name in tables["sql"]:
        a = spark.read.parquet(str(tmp_path / "arrow" / "tables" / name))
        s = spark.read.parquet(str(tmp_path / "sql" / "tables" / name))
        assert a.schema == s.schema, name
        # the same multiset of rows (a few thousand at most here): one collect per side costs
        # a fraction of two exceptAll shuffles
        assert sorted(map(repr, a.collect())) == sorted(map(repr, s.collect())), name
