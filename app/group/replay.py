"""replay(record): the one way durable group state changes.

Loading replays every record; live writes replay their offset commits and tombstones once
durable (through `replay_offset`, with the values they encoded rather than decoding them
back). (Live group-metadata writes describe in-memory state that handlers already hold, as
Kafka's classic groups do with replayRecords=false.) Each record type builds only its own part
of a group (see app/group/state.py) and leaves the others as they are.
"""

from __future__ import annotations

from app.group.records import (
    OffsetValue,
    Record,
    RecordType,
    decode_group_key,
    decode_offset_key,
    decode_offset_value,
    decode_registration_value,
)
from app.group.state import Group, Registration


def replay(groups: dict[str, Group], record: Record) -> None:
    if record.type is RecordType.OFFSET_COMMIT:
        _replay_offset(groups, record)
    elif record.type is RecordType.GROUP_METADATA:
        _replay_group(groups, record)
    elif record.type is RecordType.STATIC_REGISTRATION:
        _replay_registration(groups, record)


def drop_if_unused(groups: dict[str, Group], group: Group) -> None:
    """Forget a group that a failed first join left behind with nothing in it."""
    if group.is_unused():
        groups.pop(group.group_id, None)


def _replay_offset(groups: dict[str, Group], record: Record) -> None:
    group_id, topic, partition = decode_offset_key(record.key)
    value = None if record.value is None else decode_offset_value(record.value)
    replay_offset(groups, group_id, topic, partition, value)


def replay_offset(
    groups: dict[str, Group], group_id: str, topic: str, partition: int, value: OffsetValue | None
) -> None:
    """An OFFSET_COMMIT record's replay from its decoded key and value (None: a tombstone). A
    live commit's completion passes the value it encoded, which decoding gives back
    (tests/unit/test_record_codec.py): decoding it again was a tenth of a commit's core."""
    group = groups.get(group_id)
    if value is None:
        if group is not None:
            group.offsets.pop((topic, partition), None)
            # a group that only existed for its offsets goes with the last of them, as it
            # would after compaction dropped every record of it; one a group metadata record
            # (every one the core writes names its protocol type) or a registration made
            # stays with that record
            if group.protocol_type is None:
                drop_if_unused(groups, group)
        return
    if group is None:
        group = groups[group_id] = Group(group_id)
    group.offsets[(topic, partition)] = value


def _replay_group(groups: dict[str, Group], record: Record) -> None:
    group_id = decode_group_key(record.key)
    old = groups.get(group_id)
    if record.value is None:
        # only offsets outlive the group's tombstone
        if old is not None and old.offsets:
            groups[group_id] = Group(group_id, offsets=old.offsets)
        else:
            groups.pop(group_id, None)
        return
    group = Group.from_value(group_id, record.value)
    if old is not None:  # the parts other records built stay as they are
        group.offsets = old.offsets
        group.registration = old.registration
    groups[group_id] = group


def _replay_registration(groups: dict[str, Group], record: Record) -> None:
    group_id = decode_group_key(record.key)
    group = groups.get(group_id)
    if group is None:
        if record.value is None:
            return
        group = groups[group_id] = Group(group_id)
    if record.value is None:
        if group.registration is not None:  # closed; its timing fields stay as they were
            group.registration.registered = {}
            group.registration.batch = ()
        return
    group.registration = Registration.from_value(decode_registration_value(record.value))
