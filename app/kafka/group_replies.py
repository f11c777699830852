"""JoinGroup, SyncGroup and OffsetCommit reply bodies packed with `struct`, beside kio.

A rebalance of N members sends 2N of these replies in one burst, and kio's pure-Python writer
(build the versioned entity, validate every field, walk the schema) cost more than the
coordinator's own work for them. These functions write the very bytes kio writes for
every version the node serves (JoinGroup v0-9, SyncGroup v0-5, OffsetCommit v2-9), from the
internal responses; tests/protocol/test_group_replies.py holds them to kio's encoding byte for
byte, version by version, over generated responses.

Layouts (Kafka's JoinGroupResponse.json / SyncGroupResponse.json):
- JoinGroup: [throttle_time_ms v2+] error_code generation_id [protocol_type v7+, nullable]
  protocol_name (nullable v7+) leader [skip_assignment v9+] member_id
  members[member_id, group_instance_id v5+ (nullable), metadata]; flexible (compact lengths,
  tagged fields after each member and the body) from v6.
- SyncGroup: [throttle_time_ms v1+] error_code [protocol_type, protocol_name v5+, nullable]
  assignment; flexible from v4.
- OffsetCommit: [throttle_time_ms v3+] topics[name, partitions[partition_index, error_code]];
  flexible from v8.
- DescribeGroups: [throttle_time_ms v1+] groups[error_code, error_message (nullable) v6+,
  group_id, group_state, protocol_type, protocol_data, members[member_id,
  group_instance_id v4+ (nullable), client_id, client_host, member_metadata,
  member_assignment], authorized_operations v3+]; flexible from v5.
- OffsetFetch: [throttle_time_ms v3+] topics[name, partitions[partition_index, committed_offset,
  committed_leader_epoch v5+, metadata, error_code]] [error_code v2+]; flexible from v6; from v8
  groups[group_id, topics, error_code] instead.
- ListGroups: [throttle_time_ms v1+] error_code groups[group_id, protocol_type,
  group_state v4+, group_type v5+]; flexible from v3.
- DeleteGroups: throttle_time_ms results[group_id, error_code]; flexible from v2.

DescribeGroups and ListGroups are written a group at a time, so that a reply of thousands of
groups is encoded in the slices it is served in: kio wrote one in a single piece (9,999 described
groups took about 120 ms of one loop turn, 100,000 listed groups about 900 ms).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from kio.schema.errors import ErrorCode

from app.group.messages import (
    DeleteGroupResult,
    DescribedGroup,
    FetchedOffset,
    JoinGroupMember,
    JoinGroupResponse,
    ListedGroup,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupResponse,
)
from app.kafka.codec import group_by_topic, uvarint

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_ERROR: Final = struct.Struct(">h")
_THROTTLE_ERROR: Final = struct.Struct(">ih")
_I32_I16: Final = struct.Struct(">ih")
_ERROR_GEN: Final = struct.Struct(">hi")
_PARTITION_OFFSET: Final = struct.Struct(">iq")
_PARTITION_OFFSET_EPOCH: Final = struct.Struct(">iqi")
_THROTTLE_ERROR_GEN: Final = struct.Struct(">ihi")
_NULL16: Final = _I16.pack(-1)
_BYTE: Final = tuple(bytes((i,)) for i in range(0x80))

# kio writes an error code it does not know as UNKNOWN_SERVER_ERROR (app/kafka/codec.py)
_CODES: Final[dict[int, int]] = {int(c): int(c) for c in ErrorCode}


def _code(error: int) -> int:
    return _CODES.get(error, -1)


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def _nullable_string(s: str | None) -> bytes:
    return _NULL16 if s is None else _string(s)


def _compact_string(s: str) -> bytes:
    b = s.encode()
    n = len(b) + 1
    return (_BYTE[n] if n < 0x80 else uvarint(n)) + b


def _compact_nullable_string(s: str | None) -> bytes:
    return b"\x00" if s is None else _compact_string(s)


def _compact_bytes(b: bytes) -> bytes:
    n = len(b) + 1
    return (_BYTE[n] if n < 0x80 else uvarint(n)) + b


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


# --- JoinGroup (11) --------------------------------------------------------------------------


def _members_legacy(members: tuple[JoinGroupMember, ...], with_instance: bool) -> bytes:
    parts = [_I32.pack(len(members))]
    append = parts.append
    pack_i16, pack_i32 = _I16.pack, _I32.pack
    for m in members:
        mid = m.member_id.encode()
        append(pack_i16(len(mid)))
        append(mid)
        if with_instance:
            append(_nullable_string(m.group_instance_id))
        append(pack_i32(len(m.metadata)))
        append(m.metadata)
    return b"".join(parts)


def _members_compact(members: tuple[JoinGroupMember, ...]) -> bytes:
    parts = [uvarint(len(members) + 1)]
    append = parts.append
    byte = _BYTE
    for m in members:
        mid = m.member_id.encode()
        n = len(mid) + 1
        append(byte[n] if n < 0x80 else uvarint(n))
        append(mid)
        instance_id = m.group_instance_id
        append(b"\x00" if instance_id is None else _compact_string(instance_id))
        meta = m.metadata
        n = len(meta) + 1
        append(byte[n] if n < 0x80 else uvarint(n))
        append(meta)
        append(b"\x00")  # the member's tagged fields
    return b"".join(parts)


# The fields before member_id are the same for every member answered in one join completion:
# the last ones written are kept with the values they were written from.
_last_head: tuple[tuple[object, ...], bytes] = ((), b"")


def _flexible_head(resp: JoinGroupResponse, version: int) -> bytes:
    global _last_head
    key = (
        version,
        resp.error,
        resp.generation_id,
        resp.protocol_type,
        resp.protocol_name,
        resp.leader,
        resp.skip_assignment,
    )
    if _last_head[0] == key:
        return _last_head[1]
    parts = [_THROTTLE_ERROR_GEN.pack(0, _code(resp.error), resp.generation_id)]
    if version >= 7:
        parts.append(_compact_nullable_string(resp.protocol_type))
        parts.append(_compact_nullable_string(resp.protocol_name))
    else:  # non-nullable before v7 (KIP-559)
        parts.append(_compact_string(resp.protocol_name or ""))
    parts.append(_compact_string(resp.leader))
    if version >= 9:
        parts.append(b"\x01" if resp.skip_assignment else b"\x00")
    head = b"".join(parts)
    _last_head = (key, head)
    return head


def join_group_body(resp: JoinGroupResponse, version: int) -> bytes:
    """The JoinGroupResponse body of `version` (0-9): kio's bytes for `encode_join_group`."""
    if version >= 6:
        members = _members_compact(resp.members) if resp.members else b"\x01"
        # the body ends with its (empty) tagged fields
        return _flexible_head(resp, version) + _compact_string(resp.member_id) + members + b"\x00"
    error = _code(resp.error)
    head = (
        _THROTTLE_ERROR_GEN.pack(0, error, resp.generation_id)
        if version >= 2
        else _ERROR_GEN.pack(error, resp.generation_id)
    )
    return b"".join(
        (
            head,
            _string(resp.protocol_name or ""),
            _string(resp.leader),
            _string(resp.member_id),
            _members_legacy(resp.members, version >= 5),
        )
    )


# --- SyncGroup (14) --------------------------------------------------------------------------


_last_sync_head: tuple[tuple[object, ...], bytes] = ((), b"")


def sync_group_body(resp: SyncGroupResponse, version: int) -> bytes:
    """The SyncGroupResponse body of `version` (0-5): kio's bytes for `encode_sync_group`."""
    global _last_sync_head
    assignment = resp.assignment
    if version >= 4:
        # as for JoinGroup: the fields before the assignment are the same for every member
        key = (version, resp.error, resp.protocol_type, resp.protocol_name)
        if _last_sync_head[0] == key:
            head = _last_sync_head[1]
        else:
            head = _THROTTLE_ERROR.pack(0, _code(resp.error))
            if version >= 5:
                head += _compact_nullable_string(resp.protocol_type) + _compact_nullable_string(
                    resp.protocol_name
                )
            _last_sync_head = (key, head)
        return head + _compact_bytes(assignment) + b"\x00"
    error = _code(resp.error)
    head = _THROTTLE_ERROR.pack(0, error) if version >= 1 else _ERROR.pack(error)
    return head + _I32.pack(len(assignment)) + assignment


# --- OffsetCommit (8) ------------------------------------------------------------------------


def offset_commit_body(partitions: Sequence[PartitionResult], version: int) -> bytes:
    """The OffsetCommitResponse body of `version` (2-9): kio's bytes for the partitions'
    results, grouped by topic in first-seen order (the request's)."""
    by_topic = group_by_topic((p.topic, p) for p in partitions)
    pack = _I32_I16.pack
    flexible = version >= 8
    out = [_I32.pack(0)] if version >= 3 else []  # throttle_time_ms
    append = out.append
    if flexible:
        append(uvarint(len(by_topic) + 1))
        for name, parts in by_topic.items():
            append(_compact_string(name))
            append(uvarint(len(parts) + 1))
            for p in parts:
                append(pack(p.partition, _code(p.error)))
                append(b"\x00")  # the partition's tagged fields
            append(b"\x00")  # the topic's
        append(b"\x00")  # the body's
    else:
        append(_I32.pack(len(by_topic)))
        for name, parts in by_topic.items():
            append(_string(name))
            append(_I32.pack(len(parts)))
            for p in parts:
                append(pack(p.partition, _code(p.error)))
    return b"".join(out)


# --- DescribeGroups (15) ---------------------------------------------------------------------


def described_group_entry(
    group: DescribedGroup, error: int, message: str | None, operations: int, version: int
) -> bytes:
    """One group of a DescribeGroupsResponse of `version` (0-6): `error` and `message` as the
    edge answers them (v6 names a missing group), `operations` the authorized-operations bits."""
    parts: list[bytes] = [_ERROR.pack(_code(error))]
    append = parts.append
    if version >= 5:
        if version >= 6:
            append(_compact_nullable_string(message))
        append(_compact_string(group.group_id))
        append(_compact_string(group.state))
        append(_compact_string(group.protocol_type))
        append(_compact_string(group.protocol_data))
        append(uvarint(len(group.members) + 1))
        for m in group.members:
            append(_compact_string(m.member_id))
            append(_compact_nullable_string(m.group_instance_id))
            append(_compact_string(m.client_id))
            append(_compact_string(m.client_host))
            append(_compact_bytes(m.metadata))
            append(_compact_bytes(m.assignment))
            append(b"\x00")  # the member's tagged fields
        append(_I32.pack(operations))
        append(b"\x00")  # the group's
        return b"".join(parts)
    append(_string(group.group_id))
    append(_string(group.state))
    append(_string(group.protocol_type))
    append(_string(group.protocol_data))
    append(_I32.pack(len(group.members)))
    for m in group.members:
        append(_string(m.member_id))
        if version >= 4:
            append(_nullable_string(m.group_instance_id))
        append(_string(m.client_id))
        append(_string(m.client_host))
        append(_bytes(m.metadata))
        append(_bytes(m.assignment))
    if version >= 3:
        append(_I32.pack(operations))
    return b"".join(parts)


def describe_groups_body(entries: Sequence[bytes], version: int) -> bytes:
    """The DescribeGroupsResponse body of `version` (0-6) around its groups' entries
    (`described_group_entry`)."""
    if version >= 5:
        return b"".join((_I32.pack(0), uvarint(len(entries) + 1), *entries, b"\x00"))
    count = _I32.pack(len(entries))
    return b"".join((_I32.pack(0), count, *entries) if version >= 1 else (count, *entries))


# --- ListGroups (16) -------------------------------------------------------------------------


def listed_group_entry(group: ListedGroup, version: int) -> bytes:
    """One group of a ListGroupsResponse of `version` (0-5)."""
    if version >= 3:
        parts = [_compact_string(group.group_id), _compact_string(group.protocol_type)]
        if version >= 4:
            parts.append(_compact_string(group.state))
        if version >= 5:
            parts.append(_compact_string(group.group_type))
        parts.append(b"\x00")  # the group's tagged fields
        return b"".join(parts)
    return _string(group.group_id) + _string(group.protocol_type)


def list_groups_body(error: int, entries: Sequence[bytes], version: int) -> bytes:
    """The ListGroupsResponse body of `version` (0-5) around its groups' entries."""
    head = _THROTTLE_ERROR.pack(0, _code(error)) if version >= 1 else _ERROR.pack(_code(error))
    if version >= 3:
        return b"".join((head, uvarint(len(entries) + 1), *entries, b"\x00"))
    return b"".join((head, _I32.pack(len(entries)), *entries))


# --- DeleteGroups (42) -----------------------------------------------------------------------


def delete_groups_body(results: Sequence[DeleteGroupResult], version: int) -> bytes:
    """The DeleteGroupsResponse body of `version` (0-2)."""
    out = [_I32.pack(0)]  # throttle_time_ms
    append = out.append
    if version >= 2:
        append(uvarint(len(results) + 1))
        for r in results:
            append(_compact_string(r.group_id))
            append(_ERROR.pack(_code(r.error)))
            append(b"\x00")  # the result's tagged fields
        append(b"\x00")  # the body's
    else:
        append(_I32.pack(len(results)))
        for r in results:
            append(_string(r.group_id))
            append(_ERROR.pack(_code(r.error)))
    return b"".join(out)


# --- OffsetFetch (9) -------------------------------------------------------------------------


def _fetched_topics(partitions: Sequence[FetchedOffset], version: int) -> bytes:
    """The topics array of an OffsetFetchResponse (or of one of its groups, v8+)."""
    by_topic = group_by_topic((p.topic, p) for p in partitions)
    flexible = version >= 6
    with_epoch = version >= 5
    pack, pack_epoch, pack_error = _PARTITION_OFFSET.pack, _PARTITION_OFFSET_EPOCH.pack, _ERROR.pack
    out = [uvarint(len(by_topic) + 1) if flexible else _I32.pack(len(by_topic))]
    append = out.append
    for name, parts in by_topic.items():
        append(_compact_string(name) if flexible else _string(name))
        append(uvarint(len(parts) + 1) if flexible else _I32.pack(len(parts)))
        for p in parts:
            if with_epoch:
                append(pack_epoch(p.partition, p.offset, p.leader_epoch))
            else:
                append(pack(p.partition, p.offset))
            append(_compact_string(p.metadata) if flexible else _string(p.metadata))
            append(pack_error(_code(p.error)))
            if flexible:
                append(b"\x00")  # the partition's tagged fields
        if flexible:
            append(b"\x00")  # the topic's
    return b"".join(out)


def offset_fetch_body(responses: Sequence[OffsetFetchResponse], version: int) -> bytes:
    """The OffsetFetchResponse body of `version` (1-9): one group's answer before v8 (its error
    at top level from v2, and repeated on its partitions by the caller), any number from v8 (a
    group in error carries no topics)."""
    throttle = _I32.pack(0)
    if version >= 8:
        out = [throttle, uvarint(len(responses) + 1)]
        for r in responses:
            out.append(_compact_string(r.group_id))
            out.append(_fetched_topics(r.partitions if r.error == 0 else (), version))
            out.append(_ERROR.pack(_code(r.error)))
            out.append(b"\x00")  # the group's tagged fields
        out.append(b"\x00")  # the body's
        return b"".join(out)
    (resp,) = responses
    out = [throttle] if version >= 3 else []
    out.append(_fetched_topics(resp.partitions, version))
    if version >= 2:
        out.append(_ERROR.pack(_code(resp.error)))
    if version >= 6:
        out.append(b"\x00")
    return b"".join(out)
