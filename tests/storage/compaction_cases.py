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
    RegistrationValue,
    group_record,
    offset_record,
    registration_record,
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
registration = st.builds(
    lambda g, expected, t: registration_record(
        g, RegistrationValue(tuple(expected), 60_000, t, -1)
    ),
    st.sampled_from(GROUPS),
    st.lists(st.sampled_from(["i1", "i2", "i3"]), max_size=2, unique=True),
    st.integers(0, 5),
)
# a group's end as the core writes it (DeleteGroups, expiry): its registration's tombstone, then
# the group's
group_end = st.sampled_from(GROUPS).map(
    lambda g: [registration_record(g, None), group_record(g, None)]
)
# histories with registrations: each step one record, or a group's end
histories_with_registrations = st.lists(
    st.one_of(
        *(s.map(lambda r: [r]) for s in (commit, offset_delete, group_meta, registration)),
        group_end,
    ),
    min_size=1,
    max_size=30,
).map(lambda steps: [r for step in steps for r in step])


# a history the search once found failing, tried first on every run: a group whose metadata
# record has generation 0 and no members, its last offset tombstoned (the log's last row,
# which compaction always keeps, is another group's)
FOUND_FAILING = [
    offset_record("g0", "t0", 0, OffsetValue(0, -1, "", 1, -1)),
    group_record("g0", GroupMetadataValue("consumer", 0, None, None, 5, ())),
    offset_record("g0", "t0", 0, None),
    offset_record("g1", "t0", 0, None),
]


def compacted(records: list[Record]) -> list[Record]:
    """What full compaction leaves of a log once its tombstones are old enough (design.md
    §8.4): the newest record of each key, in log order, tombstones dropped; the log's last row
    always stays."""
    newest = {(r.type, r.key): i for i, r in enumerate(records)}
    kept = [
        r for i, r in enumerate(records) if newest[(r.type, r.key)] == i and r.value is not None
    ]
    if records and (not kept or kept[-1] is not records[-1]):
        kept.append(records[-1])
    return kept


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
            None if (reg := g.registration) is None else (reg.record(gid), list(reg.registered)),
        )
        for gid, g in sorted(core.groups.items())
    }
