"""The group records of a node's SQLite event log, read directly (the file stays shared with
the running node: read-only, with a busy timeout)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from app.group.consumer_protocol import decode_assignment
from app.group.records import GroupMetadataValue, decode_group_key, decode_group_value


@dataclass(frozen=True)
class GroupRecord:
    partition: int
    offset: int
    value: GroupMetadataValue | None  # None = tombstone

    @property
    def generation(self) -> int:
        return -1 if self.value is None else self.value.generation

    def assignments(self) -> dict[str, frozenset[int]]:
        """client_id -> partitions (of every topic) assigned in this record."""
        out: dict[str, frozenset[int]] = {}
        if self.value is None:
            return out
        for m in self.value.members:
            ps: set[int] = set()
            if m.assignment:
                for _topic, parts in decode_assignment(m.assignment).partitions:
                    ps |= set(parts)
            out[m.client_id] = frozenset(ps)
        return out

    def instances(self) -> dict[str, str]:
        """group_instance_id -> member_id."""
        if self.value is None:
            return {}
        return {m.group_instance_id: m.member_id for m in self.value.members if m.group_instance_id}


def group_records(db_path: Path, group: str) -> list[GroupRecord]:
    """Every GROUP_METADATA record of `group` in log order (the group lives in one partition)."""
    con = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    try:
        rows = con.execute(
            'SELECT "partition", "offset", key, value FROM log_records '
            'WHERE record_type = 1 ORDER BY "partition", "offset"'
        ).fetchall()
    finally:
        con.close()
    out = []
    for part, off, key, value in rows:
        if decode_group_key(bytes(key)) != group:
            continue
        out.append(GroupRecord(part, off, None if value is None else decode_group_value(value)))
    return out


def generations(db_path: Path, group: str) -> list[int]:
    """Generations of the group's metadata records in log order; asserts they never decrease."""
    gens = [r.generation for r in group_records(db_path, group) if r.value is not None]
    assert gens == sorted(gens), f"generation went backwards in the log of {group}: {gens}"
    return gens
