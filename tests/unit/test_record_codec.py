"""The codecs written out for speed (an offset key and value per commit, a group's members in
its record per rebalance) read and write the same bytes as the generic field-by-field writer
and reader of app/group/records.py."""

from __future__ import annotations

import pytest

from app.group.records import (
    GROUP_VALUE_VERSION,
    KEY_VERSION,
    OFFSET_SOURCE_MEMBER,
    OFFSET_SOURCE_RESET,
    OFFSET_SOURCE_UPSTREAM,
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    _Reader,
    _Writer,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
    encode_group_value,
    encode_offset_value,
    offset_key,
)

KEYS = [
    ("g", "t", 0),
    ("", "", -1),
    ("consumers-ü", "Zähler-📈", 2_147_483_647),
    ("x" * 300, "topic.with-dots_and_underscores", 12),
]
VALUES = [
    OffsetValue(0, -1, "", 0, -1),
    OffsetValue(2**63 - 1, 7, "meta data ✓", 1_764_000_000_000, 1_764_604_800_000),
    OffsetValue(-1, -1, "", 5, -1, OFFSET_SOURCE_RESET),
    OffsetValue(42, 3, "m" * 5000, 1, 2, OFFSET_SOURCE_MEMBER),
    OffsetValue(17, 0, "from-kafka", 9, -1, OFFSET_SOURCE_UPSTREAM, "Zkq1-cluster-ü"),
]


@pytest.mark.parametrize(("group_id", "topic", "partition"), KEYS)
def test_offset_keys_are_the_generic_writers_bytes(
    group_id: str, topic: str, partition: int
) -> None:
    generic = _Writer().i16(KEY_VERSION).str_(group_id).str_(topic).i32(partition).done()
    assert offset_key(group_id, topic, partition) == generic
    r = _Reader(generic)
    r.i16()
    assert decode_offset_key(generic) == (r.req_str(), r.req_str(), r.i32())
    assert decode_offset_key(generic) == (group_id, topic, partition)


@pytest.mark.parametrize("value", VALUES)
def test_offset_values_are_the_generic_writers_bytes(value: OffsetValue) -> None:
    version = 0 if value.source == OFFSET_SOURCE_MEMBER else 2 if value.origin else 1
    w = _Writer().i16(version).i64(value.offset).i32(value.leader_epoch)
    w.str_(value.metadata).i64(value.commit_timestamp).i64(value.expire_timestamp)
    if version:
        w.i16(value.source)
    if version == 2:
        w.str_(value.origin)
    assert encode_offset_value(value) == w.done()
    assert decode_offset_value(encode_offset_value(value)) == value


def test_a_null_string_in_a_key_reads_as_empty_and_a_truncated_key_is_refused() -> None:
    null_group = _Writer().i16(KEY_VERSION).str_(None).str_("t").i32(1).done()
    assert decode_offset_key(null_group) == ("", "t", 1)
    key = offset_key("group", "topic", 3)
    with pytest.raises(ValueError, match="truncated"):
        decode_offset_key(key[:8])  # the group id's length says more bytes than there are


MEMBERS = (
    MemberValue("consumer-1-0c5f", None, "consumer-1", "/10.0.0.1", 300_000, 45_000, b"sub", b""),
    MemberValue("wörker-🚀", "instance-ü", "", "/::1", -1, 0, b"", b"\x00" * 70_000),
    MemberValue("", "", "c", "", 2_147_483_647, -2_147_483_648, b"\xff" * 3, b"assignment"),
)
GROUP_VALUES = [
    GroupMetadataValue("consumer", 7, "range", "consumer-1-0c5f", 123, MEMBERS, "reason", 99, True),
    GroupMetadataValue("", 0, None, None, -1, ()),
    GroupMetadataValue("connect", 2**31 - 1, "sessioned", "", 2**63 - 1, MEMBERS[1:2]),
]


@pytest.mark.parametrize("value", GROUP_VALUES)
def test_group_values_are_the_generic_writers_bytes(value: GroupMetadataValue) -> None:
    w = _Writer().i16(GROUP_VALUE_VERSION)
    w.str_(value.protocol_type).i32(value.generation).str_(value.protocol_name)
    w.str_(value.leader).i64(value.current_state_timestamp).i32(len(value.members))
    for m in value.members:
        w.str_(m.member_id).str_(m.group_instance_id).str_(m.client_id).str_(m.client_host)
        w.i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.bytes_(m.subscription).bytes_(m.assignment)
    w.str_(value.rebalance_reason).i64(value.rebalance_started_ms)
    w.i16(1 if value.skip_assignment else 0)
    assert encode_group_value(value) == w.done()
    assert decode_group_value(encode_group_value(value)) == value
