"""Golden bytes of everything this release persists, so a log written by it stays readable by
the next: every record type's key and value in every version the code writes or reads
(app/group/records.py), and the two encodings stored beside the log (the nodes table's
`listeners`, the acls table's `binding_key`).

tests/golden/golden_records.txt holds one encoding a line: `KIND VERSION CASE HEX`, KIND being
`<record type number>:<name>:key|value` for log records. The tests read that checked-in file
and never write it: each golden value decodes to the fields CASES gives it, and encoding those
fields gives the golden bytes back for every version the code still writes (v0 and v1 of a
group's value are read only: only their golden bytes keep them readable).

The file was generated once, by hand, with `.venv/bin/python -m tests.unit.test_golden_records`
(current versions by the encoders; the read-only versions by `legacy_group_value`, the layout of
each version as records.py documents it). Regenerate it only to ADD lines, for a new case, a
record type or a version: the lines already there are what older logs hold, and must stay.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from app.group.records import (
    GROUP_VALUE_VERSION,
    KEY_VERSION,
    OFFSET_SOURCE_RESET,
    OFFSET_SOURCE_UPSTREAM,
    OFFSET_VALUE_VERSION,
    REGISTRATION_VALUE_VERSION,
    TOPIC_VALUE_VERSION,
    GroupMetadataValue,
    MemberValue,
    OffsetValue,
    Record,
    RecordType,
    RegistrationValue,
    TopicValue,
    _Writer,
    decode_group_key,
    decode_group_value,
    decode_offset_key,
    decode_offset_value,
    decode_registration_value,
    decode_topic_key,
    decode_topic_value,
    group_record,
    offset_record,
    registration_record,
    topic_record,
)
from app.security.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from storage.sql.cluster import decode_listeners, encode_listeners
from storage.sql.security import binding_key

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "golden_records.txt"
T = 1_764_000_000_000  # 2025-11-24, a fixed time: the bytes must not depend on the clock

# consumer-protocol bytes as a Kafka consumer sends them (tests/support/consumer_bytes.py)
SUB_V1 = bytes.fromhex(
    "00010000000200066f726465727300087061796d656e7473ffffffff0000000100066f72646572730000000100000000"
)
SUB_V0 = bytes.fromhex("00000000000100066f7264657273ffffffff")
ASSIGN_A = bytes.fromhex(
    "00000000000200066f726465727300000002000000000000000100087061796d656e74730000000100000002ffffffff"
)
ASSIGN_B = bytes.fromhex("00000000000100066f72646572730000000100000002ffffffff")

STATIC = MemberValue(
    "m-a-1", "instance-ä", "client-1", "/10.0.0.1", 60_000, 45_000, SUB_V1, ASSIGN_A
)
DYNAMIC = MemberValue("m-b-2", None, "client-📈", "/[::1]", 30_000, 10_000, SUB_V1, ASSIGN_B)
STABLE = GroupMetadataValue(
    "consumer", 7, "range", "m-a-1", T, (STATIC, DYNAMIC), "member m-b-2 joined", T - 2_000
)
SKIPPED = GroupMetadataValue(
    "consumer", 3, "cooperative-sticky", "m-s-9", T, (replace(STATIC, member_id="m-s-9"),),
    "static leader rejoined", T - 500, skip_assignment=True,
)  # fmt: skip
EMPTY = GroupMetadataValue("consumer", 8, None, None, T + 1, (), "member m-a-1 left", T)
STABLE_V0 = replace(STABLE, rebalance_reason=None, rebalance_started_ms=-1)
OLD_MEMBER = MemberValue("m-c", None, "", "", -1, 6_000, SUB_V0, b"")
OLD = GroupMetadataValue("", 2, "roundrobin", "m-c", -1, (OLD_MEMBER,))
COMMIT = OffsetValue(42, 7, "meta ✓", T, -1)
EXPIRING = OffsetValue(2**63 - 1, -1, "", T, T + 86_400_000)
RESET = OffsetValue(0, -1, "reset", T, -1, OFFSET_SOURCE_RESET)
IMPORTED = OffsetValue(120, 4, "upstream ✓", T, -1, OFFSET_SOURCE_UPSTREAM, "Zkq1-cluster-ü")
OPEN = RegistrationValue(("i-1", "i-ü"), 30_000, T, -1)
EXPANDING = RegistrationValue(("i-1",), 30_000, T, T + 10)
CLOSED = RegistrationValue((), 30_000, T, -1, ("i-2", "i-3"))
LISTENERS = {"PLAINTEXT": ("127.0.0.1", 9092), "SASL_SSL": ("::1", 9094)}
ACL = AclBinding(
    ResourceType.GROUP, "orders-ü", PatternType.PREFIXED, "User:alice", "*",
    AclOperation.READ, AclPermissionType.ALLOW,
)  # fmt: skip


class Case(NamedTuple):
    kind: str
    version: int | None  # None: not a versioned record
    name: str
    fields: Any


CASES = (
    Case("1:GROUP_METADATA:key", 0, "ascii", "my-group"),
    Case("1:GROUP_METADATA:key", 0, "unicode", "gruppe-ü-组-📈"),
    Case("1:GROUP_METADATA:key", 0, "empty", ""),
    Case("1:GROUP_METADATA:value", 2, "stable-static-and-dynamic", STABLE),
    Case("1:GROUP_METADATA:value", 2, "skip-assignment", SKIPPED),
    Case("1:GROUP_METADATA:value", 2, "empty", EMPTY),
    Case("1:GROUP_METADATA:value", 1, "stable", STABLE),
    Case("1:GROUP_METADATA:value", 0, "stable", STABLE_V0),
    Case("1:GROUP_METADATA:value", 0, "no-protocol-type-no-timestamp", OLD),
    Case("2:OFFSET_COMMIT:key", 0, "ascii", ("my-group", "orders", 3)),
    Case("2:OFFSET_COMMIT:key", 0, "unicode-max-partition", ("组-📈", "Zähler", 2**31 - 1)),
    Case("2:OFFSET_COMMIT:value", 0, "member-commit", COMMIT),
    Case("2:OFFSET_COMMIT:value", 0, "expiring-no-metadata", EXPIRING),
    Case("2:OFFSET_COMMIT:value", 1, "reset", RESET),
    Case("2:OFFSET_COMMIT:value", 2, "imported", IMPORTED),
    Case("3:TOPIC:key", 0, "ascii", "orders"),
    Case("3:TOPIC:value", 0, "six", TopicValue(6)),
    Case("4:STATIC_REGISTRATION:key", 0, "ascii", "my-group"),
    Case("4:STATIC_REGISTRATION:value", 0, "open", OPEN),
    Case("4:STATIC_REGISTRATION:value", 0, "expanding", EXPANDING),
    Case("4:STATIC_REGISTRATION:value", 0, "closed-with-dropped", CLOSED),
    Case("nodes.listeners", None, "ipv4-and-ipv6", LISTENERS),
    Case("acls.binding_key", None, "prefixed-group-read", ACL),
)

# the highest version of each record part; a reader reads every version up to it
VALUE_VERSIONS = {
    RecordType.GROUP_METADATA: GROUP_VALUE_VERSION,
    RecordType.OFFSET_COMMIT: OFFSET_VALUE_VERSION,
    RecordType.TOPIC: TOPIC_VALUE_VERSION,
    RecordType.STATIC_REGISTRATION: REGISTRATION_VALUE_VERSION,
}
# the versions this release reads and no longer writes
READ_ONLY = {("1:GROUP_METADATA:value", 0), ("1:GROUP_METADATA:value", 1)}
WRITTEN = [c for c in CASES if (c.kind, c.version) not in READ_ONLY]


def case_id(c: Case) -> str:
    return f"{c.kind}-v{c.version}-{c.name}"


def _record(make: Callable[[Any], Record], number: int, part: str) -> Callable[[Any], bytes]:
    """The key or value of the record `make` builds, whose type must be the golden number
    (log_records.record_type stores it)."""

    def encode(fields: Any) -> bytes:
        record = make(fields)
        assert int(record.type) == number
        body = record.key if part == "key" else record.value
        assert body is not None
        return body

    return encode


# kind -> (encode, decode)
CODECS: dict[str, tuple[Callable[[Any], bytes], Callable[[bytes], Any]]] = {
    "1:GROUP_METADATA:key": (_record(lambda g: group_record(g, None), 1, "key"), decode_group_key),
    "1:GROUP_METADATA:value": (_record(lambda v: group_record("g", v), 1, "value"),
                               decode_group_value),
    "2:OFFSET_COMMIT:key": (_record(lambda k: offset_record(k[0], k[1], k[2], None), 2, "key"),
                            decode_offset_key),
    "2:OFFSET_COMMIT:value": (_record(lambda v: offset_record("g", "t", 0, v), 2, "value"),
                              decode_offset_value),
    "3:TOPIC:key": (_record(lambda n: topic_record(n, None), 3, "key"), decode_topic_key),
    "3:TOPIC:value": (_record(lambda v: topic_record("t", v), 3, "value"), decode_topic_value),
    # a registration's key is its group's key, and replay decodes it so
    "4:STATIC_REGISTRATION:key": (_record(lambda g: registration_record(g, None), 4, "key"),
                                  decode_group_key),
    "4:STATIC_REGISTRATION:value": (_record(lambda v: registration_record("g", v), 4, "value"),
                                    decode_registration_value),
    "nodes.listeners": (lambda v: str(encode_listeners(v)).encode(),
                        lambda b: decode_listeners(b.decode())),
    "acls.binding_key": (binding_key, lambda b: None),  # a digest: compared, never decoded
}  # fmt: skip


def legacy_group_value(v: GroupMetadataValue, version: int) -> bytes:
    """A group value in a version below the current one: its fields, field by field."""
    w = _Writer().i16(version).str_(v.protocol_type).i32(v.generation).str_(v.protocol_name)
    w.str_(v.leader).i64(v.current_state_timestamp).i32(len(v.members))
    for m in v.members:
        w.str_(m.member_id).str_(m.group_instance_id).str_(m.client_id).str_(m.client_host)
        w.i32(m.rebalance_timeout_ms).i32(m.session_timeout_ms)
        w.bytes_(m.subscription).bytes_(m.assignment)
    if version >= 1:
        w.str_(v.rebalance_reason).i64(v.rebalance_started_ms)
    return w.done()


def generate(case: Case) -> bytes:
    if (case.kind, case.version) in READ_ONLY:
        return legacy_group_value(case.fields, case.version or 0)
    return CODECS[case.kind][0](case.fields)


Golden = dict[tuple[str, str, str], bytes]


def line_key(c: Case) -> tuple[str, str, str]:
    """A case's identity in the file: kind, version column ("-": not versioned), name."""
    return c.kind, "-" if c.version is None else str(c.version), c.name


def read_golden() -> Golden:
    out: Golden = {}
    for line in GOLDEN.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            kind, version, name, hexed = line.split()
            assert (kind, version, name) not in out, f"{line[:60]}... twice in {GOLDEN}"
            out[kind, version, name] = bytes.fromhex(hexed)
    return out


@pytest.fixture(scope="module")
def golden() -> Golden:
    return read_golden()


def test_the_golden_file_holds_every_case_and_every_version(golden: Golden) -> None:
    """Each case has its line, and each record type's key and value has golden bytes in every
    version up to the highest the code knows: a new version or a new type needs its line."""
    assert sorted(golden) == sorted(line_key(c) for c in CASES)
    covered = {(c.kind, c.version) for c in CASES}
    for t in RecordType:
        assert {(f"{t.value}:{t.name}:key", v) for v in range(KEY_VERSION + 1)} <= covered
        assert {(f"{t.value}:{t.name}:value", v) for v in range(VALUE_VERSIONS[t] + 1)} <= covered


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_golden_bytes_decode_to_their_fields(golden: Golden, case: Case) -> None:
    data = golden[line_key(case)]
    if case.version is not None:  # keys and values start with their int16 version
        assert int.from_bytes(data[:2], "big", signed=True) == case.version
    if case.kind != "acls.binding_key":  # a digest: its bytes are compared below
        assert CODECS[case.kind][1](data) == case.fields


@pytest.mark.parametrize("case", WRITTEN, ids=case_id)
def test_encoding_the_fields_gives_the_golden_bytes(golden: Golden, case: Case) -> None:
    assert CODECS[case.kind][0](case.fields).hex() == golden[line_key(case)].hex()


def main() -> None:
    """Append to GOLDEN the cases it lacks (by hand; see the module's docstring). The lines
    already there are never rewritten."""
    header = "# KIND VERSION CASE HEX, written by tests/unit/test_golden_records.py: append only\n"
    have = read_golden() if GOLDEN.exists() else {}
    text = GOLDEN.read_text() if GOLDEN.exists() else header
    added = [c for c in CASES if line_key(c) not in have]
    for c in added:
        text += f"{' '.join(line_key(c)[:2])} {c.name} {generate(c).hex()}\n"
    GOLDEN.write_text(text)
    print(f"{GOLDEN}: {len(added)} lines added", file=sys.stderr)


if __name__ == "__main__":
    main()
