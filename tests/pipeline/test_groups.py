"""The group pass (pipeline/groups.py): each group audited whole, however Spark cuts its records
into batches, and a record whose key does not decode never joins a group's tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from app.group.records import group_key
from pipeline import group_tables, groups
from pipeline.decode import INPUT_COLUMNS
from tests.pipeline.logs import known_log


def group_records(tmp_path: Path) -> pa.Table:
    """The known log's group metadata and registrations, as the group pass receives them."""
    export = known_log(tmp_path / "export")
    parts = []
    for name, in_history in (("log", False), ("history", True)):
        t = pq.read_table(export / f"{name}.parquet")
        types = pa.array(group_tables.PASS_RECORD_TYPES, t["record_type"].type)
        t = t.filter(pc.is_in(t["record_type"], types))
        t = t.rename_columns(["log_partition" if c == "partition" else c for c in t.column_names])
        t = t.rename_columns(["log_offset" if c == "offset" else c for c in t.column_names])
        t = t.append_column("in_history", pa.array([in_history] * t.num_rows))
        parts.append(t.select([*INPUT_COLUMNS, "record_type"]))
    t = pa.concat_tables(parts)
    # the group key as Spark computes it (`group_key`): the bytes after the key's length
    t = t.append_column("_group", pc.binary_slice(t["key"], 6, 1 << 30))
    return t.sort_by([("_group", "ascending"), ("log_offset", "descending")])


def rows(table: pa.Table) -> dict[str, list[Any]]:
    """Each output's rows, sorted, as the audit writes them."""
    out = {}
    for name in group_tables.OUTPUTS:
        col = table[name]
        out[name] = sorted(
            (repr(sorted(r.items())) for r in col.filter(pc.is_valid(col)).to_pylist()),
        )
    return out


@pytest.mark.parametrize("batch_rows", [1, 3, 7])
def test_a_group_cut_across_batches_is_audited_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int
) -> None:
    t = group_records(tmp_path)
    whole = groups.audit_groups(t)
    monkeypatch.setattr(groups, "FLUSH_ROWS", 2)  # flushes between most batches
    batches = t.to_batches(max_chunksize=batch_rows)
    assert len(batches) >= 5
    cut = pa.Table.from_batches(list(groups.audit_group_batches(iter(batches))))
    assert rows(cut) == rows(whole)
    gens = cut["generations"].filter(pc.is_valid(cut["generations"])).to_pylist()
    basic = sorted(g["generation"] for g in gens if g["group_id"] == "g-basic")
    assert basic == [1, 2]  # not a generation per piece of the group
    scale = [s for s in cut["scale_ups"].to_pylist() if s and s["group_id"] == "g-scale"]
    assert len(scale) == 2


def test_a_key_that_does_not_decode_is_only_a_violation(tmp_path: Path) -> None:
    t = group_records(tmp_path)
    basic = t.filter(pc.equal(t["_group"], b"g-basic"))
    # a record whose key claims more bytes than it has: Spark's group key (the bytes there)
    # is g-basic's, so it lands with g-basic's records, but its key does not decode
    good = group_key("g-basic")
    truncated = good[:2] + (len("g-basic") + 5).to_bytes(4, "big") + good[6:]
    bad = basic.slice(0, 1).set_column(
        INPUT_COLUMNS.index("key"), "key", pa.array([truncated], pa.binary())
    )
    with_bad = groups.audit_groups(pa.concat_tables([basic, bad]))
    alone = rows(groups.audit_groups(basic))
    got = rows(with_bad)
    assert {k: v for k, v in got.items() if k != "violations"} == {
        k: v for k, v in alone.items() if k != "violations"
    }
    (violation,) = [v for v in with_bad["violations"].to_pylist() if v]
    assert violation["invariant"] == "records_decode" and violation["group_id"] is None
    assert violation["detail"].startswith("group metadata: key:")


def test_spark_groups_records_by_the_group_id_their_key_decodes_to(spark: Any) -> None:
    good = group_key("g-1")
    keys = [
        good,
        b"\x00\x05" + good[2:],  # another key version: the same group
        good + b"trailing",  # bytes after the id: decode_group_key reads the same group
        good[:6],  # the length says 3, no bytes follow: does not decode
        None,
    ]
    df = spark.createDataFrame(pa.table({"key": pa.array(keys, pa.binary())}))
    got = [r[0] for r in df.select(groups.group_key().alias("g")).collect()]
    assert got[:3] == [b"g-1"] * 3
    assert got[3] == b"" and got[4] is None
