"""What the log stores: envelopes of (record type, key, value) that storage does not interpret.

A record type is a number to storage. Callers append anything shaped like an Envelope (the
core's Records, whose type is an IntEnum, fit as they are); what comes back carries the type as
a plain int, or as the caller's own member for it when the log was opened with `record_types`
(EventLog.open). A number nobody named comes back as it is: storage never fails on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol


class EnvelopeLike(Protocol):
    """What append accepts: any (type, key, value) with these fields."""

    @property
    def type(self) -> int: ...
    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes | None: ...


class Envelope(NamedTuple):
    type: int
    key: bytes
    value: bytes | None  # None = tombstone


class StoredRecord(NamedTuple):
    """An envelope as stored. A NamedTuple, not a dataclass: replay builds a million of these
    and tuple construction is ~3x cheaper than a frozen dataclass's __init__."""

    partition: int
    offset: int
    type: int
    key: bytes
    value: bytes | None  # None = tombstone
    epoch: int
    append_time_ms: int
    node_id: int

    def record(self) -> Envelope:
        """The envelope as its writer appended it (what a replay consumes)."""
        return Envelope(self.type, self.key, self.value)


class LatestRecords(NamedTuple):
    scanned: int  # rows read
    records: list[Envelope]  # the newest per key, in offset order


@dataclass(frozen=True, slots=True)
class AppendBatch:
    """Envelopes one writer appends to one partition, claiming the lease at `epoch`."""

    partition: int
    epoch: int
    node_id: int
    records: Sequence[EnvelopeLike]


# number -> what a read returns for it (the caller's int subclass member)
TypeNames = Mapping[int, int]


def type_names(record_types: Iterable[int]) -> dict[int, int]:
    """{number: member} of the caller's record types (e.g. an IntEnum class)."""
    return {int(t): t for t in record_types}
