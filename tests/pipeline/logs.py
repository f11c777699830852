"""Hand-built event logs with known answers, in the `coordinator export` format.

`known_log()` holds one group per scenario; the `bad-*` groups are deliberately corrupted, each
in one way, so one audit run checks every table and every invariant: clean groups must come
out with exactly the numbers below and no violation, corrupted ones must be flagged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from app.group.records import (
    OFFSET_SOURCE_RESET,
    OFFSET_SOURCE_UPSTREAM,
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    RecordType,
    RegistrationValue,
    group_record,
    offset_record,
    registration_record,
)
from storage.export import HISTORY_SCHEMA, LOG_SCHEMA
from tests.support.consumer_bytes import assignment, subscription


def member(
    mid: str, instance: str | None, topics: tuple[str, ...], **assigned: list[int]
) -> MemberValue:
    return MemberValue(
        mid,
        instance,
        f"client-{mid}",
        "/10.0.0.1",
        30_000,
        10_000,
        subscription(topics),
        assignment(assigned) if assigned else b"",
    )


@dataclass
class LogBuilder:
    partition: int = 0
    rows: list[dict[str, object]] = field(default_factory=list)
    history: set[int] = field(default_factory=set)  # offsets moved to history.parquet

    def add(
        self, rtype: int, key: bytes, value: bytes | None, at: int, in_history: bool = False
    ) -> int:
        offset = len(self.rows)
        self.rows.append(
            {
                "partition": self.partition,
                "offset": offset,
                "record_type": rtype,
                "key": key,
                "value": value,
                "epoch": 1,
                "node_id": 1,
                "append_time_ms": at,
            }
        )
        if in_history:
            self.history.add(offset)
        return offset

    def group(
        self,
        gid: str,
        at: int,
        generation: int,
        members: list[MemberValue],
        leader: str | None,
        reason: str | None = None,
        started: int = -1,
        skip: bool = False,
        in_history: bool = False,
    ) -> int:
        v = GroupMetadataValue(
            "consumer",
            generation,
            "range" if members else None,
            leader,
            at - 100,
            tuple(members),
            reason,
            started,
            skip,
        )
        r = group_record(gid, v)
        return self.add(r.type, r.key, r.value, at, in_history)

    def tombstone(self, gid: str, at: int) -> int:
        r = group_record(gid, None)
        return self.add(r.type, r.key, None, at)

    def commit(
        self, gid: str, topic: str, p: int, offset: int, at: int, source: int = 0, origin: str = ""
    ) -> int:
        r = offset_record(gid, topic, p, OffsetValue(offset, -1, "", at, -1, source, origin))
        return self.add(r.type, r.key, r.value, at)

    def imported(self, gid: str, topic: str, p: int, offset: int, at: int) -> int:
        """An offset imported from the upstream cluster (gateway mode): OffsetValue v2."""
        return self.commit(gid, topic, p, offset, at, OFFSET_SOURCE_UPSTREAM, "cluster-x")

    def registration(
        self,
        gid: str,
        at: int,
        expected: tuple[str, ...],
        started: int = -1,
        dropped: tuple[str, ...] = (),
        registered: int | None = None,
    ) -> int:
        v = RegistrationValue(
            expected, 20_000, at if registered is None else registered, started, dropped
        )
        r = registration_record(gid, v)
        return self.add(r.type, r.key, r.value, at)

    def write(
        self,
        out: Path,
        duplicate_into_history: int | None = None,
        row_group_size: int | None = None,
        history_order: Callable[[dict[str, Any]], Any] | None = None,
    ) -> Path:
        """`row_group_size`: rows per Parquet row group (pyarrow's default: all in one);
        `history_order`: a sort key for the history file's rows (default: log order)."""
        out.mkdir(parents=True, exist_ok=True)
        log = [r for r in self.rows if r["offset"] not in self.history]
        hist = [dict(r, compacted_at_ms=999_999) for r in self.rows if r["offset"] in self.history]
        if duplicate_into_history is not None:
            hist.append(dict(self.rows[duplicate_into_history], compacted_at_ms=999_999))
        if history_order is not None:
            hist.sort(key=history_order)
        for rows, schema, name in ((log, LOG_SCHEMA, "log"), (hist, HISTORY_SCHEMA, "history")):
            table = pa.Table.from_pylist(rows, schema=schema)
            pq.write_table(table, out / f"{name}.parquet", row_group_size=row_group_size)
        return out


T = 1_000_000  # all times are T + something


def known_log(out: Path, duplicate: bool = True, **write: Any) -> Path:
    """`duplicate`: one commit also in the history (a position held twice); `write`: as
    LogBuilder.write."""
    b = LogBuilder()
    # -- g-basic: a dynamic and a static member, a static restart, a third member moves 3
    b.group(
        "g-basic",
        T + 10_000,
        1,
        [member("a-1", None, ("t0",), t0=[0, 1, 2]), member("b-1", "i-b", ("t0",), t0=[3, 4, 5])],
        "a-1",
        "member joined",
        T + 7_000,
        in_history=True,
    )
    b.group(
        "g-basic",
        T + 20_000,
        1,
        [member("a-1", None, ("t0",), t0=[0, 1, 2]), member("b-2", "i-b", ("t0",), t0=[3, 4, 5])],
        "a-1",
        "member joined",
        T + 7_000,
        in_history=True,
    )
    b.group(
        "g-basic",
        T + 30_000,
        2,
        [
            member("a-1", None, ("t0",), t0=[0, 1]),
            member("b-2", "i-b", ("t0",), t0=[2, 3]),
            member("c-1", None, ("t0",), t0=[4, 5]),
        ],
        "a-1",
        "member joined",
        T + 28_000,
    )
    # -- g-leader: the static leader rejoins twice without a rebalance (SkipAssignment once)
    lf = ("t1",)
    b.group(
        "g-leader",
        T + 10_000,
        5,
        [member("l-1", "i-l", lf, t1=[0]), member("f-1", "i-f", lf, t1=[1])],
        "l-1",
        "member joined",
        T + 9_000,
    )
    b.group(
        "g-leader",
        T + 12_000,
        5,
        [member("l-2", "i-l", lf, t1=[0]), member("f-1", "i-f", lf, t1=[1])],
        "l-2",
        "member joined",
        T + 9_000,
        skip=True,
    )
    b.group(
        "g-leader",
        T + 14_000,
        5,
        [member("l-2", "i-l", lf, t1=[0]), member("f-2", "i-f", lf, t1=[1])],
        "l-2",
        "member joined",
        T + 9_000,
    )
    b.group(
        "g-leader",
        T + 16_000,
        5,
        [member("l-3", "i-l", lf, t1=[0]), member("f-2", "i-f", lf, t1=[1])],
        "l-3",
        "member joined",
        T + 9_000,
    )
    b.group(
        "g-leader",
        T + 20_000,
        6,
        [member("l-4", "i-l", lf, t1=[0]), member("f-2", "i-f", lf, t1=[1])],
        "l-4",
        "static member replaced during sync",
        T + 18_500,
    )
    # -- g-forced: an admin-forced rebalance, then the group empties; commits and resets
    b.group(
        "g-forced",
        T + 10_000,
        1,
        [member("x-1", None, ("t2",), t2=[0, 1])],
        "x-1",
        "member joined",
        T + 8_000,
    )
    b.commit("g-forced", "t2", 0, 100, T + 11_000)
    b.commit("g-forced", "t2", 0, 150, T + 12_000)
    b.group(
        "g-forced",
        T + 20_000,
        2,
        [member("x-1", None, ("t2",), t2=[0, 1])],
        "x-1",
        "admin: rolling config change",
        T + 19_000,
    )
    b.commit("g-forced", "t2", 0, 140, T + 21_000)  # lower, but a new generation
    b.group("g-forced", T + 25_000, 3, [], None, "member removed", T + 24_000)
    b.commit("g-forced", "t2", 0, 50, T + 26_000, OFFSET_SOURCE_RESET)
    b.commit("g-forced", "t2", 0, 30, T + 27_000, OFFSET_SOURCE_RESET)
    # -- g-scale: two static instances pre-registered join in one rebalance; a second
    #    registration never sees its instance
    b.group(
        "g-scale",
        T + 10_000,
        1,
        [member("s1-1", "i-1", ("t3",), t3=[0, 1, 2, 3])],
        "s1-1",
        "member joined",
        T + 9_000,
    )
    b.registration("g-scale", T + 11_000, ("i-2", "i-3"))
    b.registration("g-scale", T + 12_000, ("i-2", "i-3"), started=T + 12_000, registered=T + 11_000)
    b.group(
        "g-scale",
        T + 15_000,
        2,
        [
            member("s1-1", "i-1", ("t3",), t3=[0, 1]),
            member("s2-1", "i-2", ("t3",), t3=[2]),
            member("s3-1", "i-3", ("t3",), t3=[3]),
        ],
        "s1-1",
        "member joined",
        T + 12_000,
    )
    b.registration("g-scale", T + 15_001, (), registered=T + 11_000)
    b.registration("g-scale", T + 30_000, ("i-4",))
    b.registration("g-scale", T + 50_000, (), dropped=("i-4",), registered=T + 30_000)
    # -- g-deleted: deleted and re-created: generation 1 after 3 is not a decrease
    b.group(
        "g-deleted",
        T + 10_000,
        3,
        [member("d-1", None, ("t7",), t7=[0])],
        "d-1",
        "member joined",
        T + 9_000,
    )
    b.tombstone("g-deleted", T + 11_000)
    b.group(
        "g-deleted",
        T + 12_000,
        1,
        [member("d-2", None, ("t7",), t7=[0])],
        "d-2",
        "member joined",
        T + 11_500,
    )
    # -- g-import: moved in through the gateway: the upstream cluster's offsets imported
    #    (OffsetValue v2) before its member joins, and t13-0's once more in generation 1,
    #    backwards: like a reset, an import may move a position in any generation
    b.imported("g-import", "t13", 0, 500, T + 10_000)
    b.imported("g-import", "t13", 1, 40, T + 10_000)
    b.group(
        "g-import",
        T + 12_000,
        1,
        [member("im-1", None, ("t13",), t13=[0, 1])],
        "im-1",
        "member joined",
        T + 11_000,
    )
    b.commit("g-import", "t13", 0, 520, T + 13_000)
    b.commit("g-import", "t13", 1, 45, T + 13_000)
    b.imported("g-import", "t13", 0, 300, T + 14_000)  # 520 -> 300 in generation 1: allowed
    b.commit("g-import", "t13", 0, 310, T + 15_000)
    # ---- corrupted groups: each must be flagged by exactly its invariant -----------------
    b.group("bad-gen", T + 10_000, 4, [member("g-1", None, ("t8",), t8=[0])], "g-1")
    b.group("bad-gen", T + 11_000, 3, [member("g-1", None, ("t8",), t8=[0])], "g-1")
    b.group(
        "bad-owner",
        T + 10_000,
        1,
        [member("p-1", None, ("t4",), t4=[0, 1]), member("q-1", None, ("t4",), t4=[1, 2])],
        "p-1",
    )
    b.group("bad-subs", T + 10_000, 1, [member("r-1", None, ("t5",), t5=[0], t6=[0])], "r-1")
    b.group("bad-commit", T + 10_000, 1, [member("k-1", None, ("t9",), t9=[0])], "k-1")
    b.commit("bad-commit", "t9", 0, 100, T + 11_000)
    b.commit("bad-commit", "t9", 0, 90, T + 12_000)  # backwards in generation 1
    b.commit("bad-commit", "t9", 0, 80, T + 13_000, OFFSET_SOURCE_RESET)  # a reset: allowed
    b.group("bad-leader", T + 10_000, 1, [member("m-1", None, ("t10",), t10=[0])], "ghost")
    # records that do not decode
    good = group_record("bad-bytes", GroupMetadataValue("consumer", 1, "range", "z", 1, ()))
    assert good.value is not None
    b.add(RecordType.GROUP_METADATA, good.key, good.value[:9], T + 10_000)
    garbled = member("y-1", None, ("t11",))
    garbled = MemberValue(
        garbled.member_id,
        None,
        "c",
        "h",
        1,
        1,
        garbled.subscription,
        b"\x00\x00\x00\x00\x00\x09oops",
    )
    b.group("bad-bytes2", T + 10_000, 1, [garbled], "y-1")
    c = offset_record("bad-bytes3", "t", 0, OffsetValue(1, -1, "", 1, -1))
    assert c.value is not None
    b.add(RecordType.OFFSET_COMMIT, c.key, c.value[:12], T + 10_000)
    b.add(9, b"\x00\x00mystery", b"?", T + 10_000)
    dup = b.commit("dup", "t12", 0, 5, T + 10_000)
    return b.write(out, duplicate_into_history=dup if duplicate else None, **write)
