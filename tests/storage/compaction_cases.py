"""Generated histories for compaction tests: records as the core writes them."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from app.group.config import CoreConfig
from app.group.coordinator import GroupCoordinator
from app.group.records import (
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    group_record,
    offset_record,
)

GROUPS = ["g0", "g1", "g2"]
TOPICS = ["t0", "t1"]


def _member(i: int, gen: int) -> MemberValue:
    return MemberValue(
        f"m{i}-{gen}",
        f"i{i}" if i % 2 else None,
        "client",
        "/127.0.0.1",
        30000,
        10000,
        b"sub%d" % i,
        b"assign%d-%d" % (i, gen),
    )


commit = st.builds(
    lambda g, t, p, o: offset_record(g, t, p, OffsetValue(o, -1, "", 1, -1)),
    st.sampled_from(GROUPS),
    st.sampled_from(TOPICS),
    st.integers(0, 2),
    st.integers(0, 10**6),
)
offset_delete = st.builds(
    lambda g, t, p: offset_record(g, t, p, None),
    st.sampled_from(GROUPS),
    st.sampled_from(TOPICS),
    st.integers(0, 2),
)
group_meta = st.builds(
    lambda g, gen, n: group_record(
        g,
        GroupMetadataValue(
            "consumer",
            gen,
            "range" if n else None,
            f"m0-{gen}" if n else None,
            5,
            tuple(_member(i, gen) for i in range(n)),
        ),
    ),
    st.sampled_from(GROUPS),
    st.integers(0, 50),
    st.integers(0, 3),
)
group_delete = st.builds(lambda g: group_record(g, None), st.sampled_from(GROUPS))
histories = st.lists(
    st.one_of(commit, commit, offset_delete, group_meta, group_meta, group_delete),
    min_size=1,
    max_size=60,
)


# a history the search once found failing, tried first on every run: a group whose metadata
# record has generation 0 and no members, its last offset tombstoned (the log's last row,
# which compaction always keeps, is another group's)
FOUND_FAILING = [
    offset_record("g0", "t0", 0, OffsetValue(0, -1, "", 1, -1)),
    group_record("g0", GroupMetadataValue("consumer", 0, None, None, 5, ())),
    offset_record("g0", "t0", 0, None),
    offset_record("g1", "t0", 0, None),
]


def replayed_state(records: list[Record]) -> dict[str, Any]:
    core = GroupCoordinator(CoreConfig(), lambda prefix: prefix)
    for r in records:
        core.replay(r)
    return {
        gid: (
            g.state.value,
            g.generation,
            g.protocol_type,
            g.protocol_name,
            g.leader_id,
            [(m.member_id, m.group_instance_id, m.assignment) for m in g.members.values()],
            sorted((tp, v) for tp, v in g.offsets.items()),
        )
        for gid, g in sorted(core.groups.items())
    }
