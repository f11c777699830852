"""The node's compactor on real traffic: the log shrinks, history keeps the rest, a restart
replays to the same answers."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from tests.runtime.node_fixture import running_node

GROUP = "g-compact"


async def count(n: object, table: str) -> int:
    async with n.log.engine.connect() as conn:  # type: ignore[attr-defined]
        return int((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())


async def test_compaction_keeps_answers_and_archives_superseded_commits(tmp_path: Path) -> None:
    async with running_node(tmp_path) as n:
        c = await n.client()
        for offset in range(1, 21):
            commit = await c.offset_commit(GROUP, {("t1", 0): offset, ("t1", 1): offset * 10})
            assert all(p.error_code == 0 for t in commit.topics for p in t.partitions)
        before = await count(n, "log_records")
        removed = await n.node.compact()
        assert removed >= 38  # 2 keys x 19 superseded commits
        assert await count(n, "log_records") == before - removed
        assert await count(n, "log_history") == removed
        fetch = await c.offset_fetch(GROUP, [("t1", 0), ("t1", 1)])
        assert sorted(p.committed_offset for t in fetch.groups[0].topics for p in t.partitions) == [
            20,
            200,
        ]
        await c.close()

    async with running_node(tmp_path) as n:  # restart on the compacted log
        c = await n.client()
        fetch = await c.offset_fetch(GROUP, [("t1", 0), ("t1", 1)])
        assert sorted(p.committed_offset for t in fetch.groups[0].topics for p in t.partitions) == [
            20,
            200,
        ]
        await c.close()


async def test_export_writes_log_and_history_as_one_consistent_parquet_snapshot(
    tmp_path: Path,
) -> None:
    import pyarrow.parquet as pq

    from app.group.records import RecordType, decode_offset_key, decode_offset_value
    from storage.export import export

    async with running_node(tmp_path) as n:
        c = await n.client()
        for offset in range(1, 6):
            await c.offset_commit(GROUP, {("t1", 0): offset})
        await n.node.compact()
        await c.offset_commit(GROUP, {("t1", 0): 6})
        manifest = await export(n.log, tmp_path / "export")
        await c.close()

    log = pq.read_table(tmp_path / "export" / "log.parquet").to_pylist()
    history = pq.read_table(tmp_path / "export" / "history.parquet").to_pylist()
    assert manifest.log_rows == len(log) and manifest.history_rows == len(history)
    commits = sorted(
        (r["offset"], decode_offset_value(r["value"]).offset)
        for r in log + history
        if r["record_type"] == RecordType.OFFSET_COMMIT
        and decode_offset_key(r["key"]) == (GROUP, "t1", 0)
    )
    # every commit ever made is in exactly one of the two files
    assert [v for _, v in commits] == [1, 2, 3, 4, 5, 6]
    assert len({o for o, _ in commits}) == 6
    assert {r["offset"] for r in history}.isdisjoint(
        {r["offset"] for r in log if r["partition"] == history[0]["partition"]}
    )


async def test_an_export_that_dies_midway_leaves_no_manifest_of_mixed_files(
    tmp_path: Path,
) -> None:
    import json

    import pytest

    import storage.export as ex

    out = tmp_path / "export"
    async with running_node(tmp_path) as n:
        c = await n.client()
        await c.offset_commit(GROUP, {("t1", 0): 1})
        first = await ex.export(n.log, out)
        old_log = (out / "log.parquet").read_bytes()
        await c.offset_commit(GROUP, {("t1", 0): 2})
        real_dump = ex._dump
        calls = 0

        async def dies_on_history(*args: object, **kw: object) -> object:
            nonlocal calls
            calls += 1
            if calls == 2:
                raise OSError("disk full")
            return await real_dump(*args, **kw)  # type: ignore[arg-type]

        mp = pytest.MonkeyPatch()
        mp.setattr(ex, "_dump", dies_on_history)
        with pytest.raises(Exception, match="disk full"):
            await ex.export(n.log, out)
        mp.undo()
        # no manifest: nobody reads the new log file beside the old manifest's numbers
        assert not (out / "manifest.json").exists()
        assert (out / "log.parquet").read_bytes() == old_log  # the new one never replaced it
        second = await ex.export(n.log, out)
        await c.close()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["log_rows"] == second.log_rows == first.log_rows + 1
    assert not list(out.glob(".*.tmp"))
