"""What a handler returns: replies, and writes whose continuation says what to finish once the
append is durable (or has failed). Continuations are plain data: the runtime holds them while
the append runs and hands each back to `GroupCoordinator.on_write_complete`."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from app.group.immutable import immutable
from app.group.messages import (
    AdminResult,
    DeleteGroupResult,
    Error,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    PartitionResult,
    SyncGroupResponse,
)
from app.group.records import OffsetValue, Record

Reply = (
    AdminResult
    | JoinGroupResponse
    | SyncGroupResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | DeleteGroupResult
)


class AppendFailure(Enum):
    """Why an append failed, in storage terms; mapped to Kafka errors per
    protocol.md §6.4 / §8.2."""

    NOT_OWNER = "not_owner"  # fenced: another node holds the partition (NOT_LEADER_OR_FOLLOWER)
    STORAGE = "storage"  # the database failed (KAFKA_STORAGE_ERROR)
    TIMEOUT = "timeout"  # REQUEST_TIMED_OUT
    TOO_LARGE = "too_large"  # MESSAGE_TOO_LARGE / RECORD_LIST_TOO_LARGE


def group_write_error(f: AppendFailure) -> Error:
    return {
        AppendFailure.NOT_OWNER: Error.NOT_COORDINATOR,
        AppendFailure.STORAGE: Error.NOT_COORDINATOR,
        AppendFailure.TIMEOUT: Error.COORDINATOR_NOT_AVAILABLE,  # Java's mapping
        AppendFailure.TOO_LARGE: Error.UNKNOWN_SERVER_ERROR,
    }[f]


def offset_write_error(f: AppendFailure) -> Error:
    return {
        AppendFailure.NOT_OWNER: Error.NOT_COORDINATOR,
        AppendFailure.STORAGE: Error.NOT_COORDINATOR,
        AppendFailure.TIMEOUT: Error.COORDINATOR_NOT_AVAILABLE,
        AppendFailure.TOO_LARGE: Error.INVALID_COMMIT_OFFSET_SIZE,
    }[f]


# --- continuations: what to do once a write is durable (or failed) ---------------------------


@immutable
class StaticReplaceDone:
    group_id: str
    handle: int
    instance_id: str
    old_member_id: str
    new_member_id: str
    # what the written record holds for the member (durable once the write succeeds)
    protocols: tuple[tuple[str, bytes], ...]
    rebalance_timeout_ms: int
    session_timeout_ms: int
    leader_before: str | None
    supports_skip_assignment: bool


@immutable
class SyncDone:
    group_id: str
    generation: int
    assignments: dict[str, bytes]


@immutable
class OffsetsDone:
    group_id: str
    handle: int | None  # None: an admin/internal commit nobody waits on
    results: tuple[PartitionResult, ...]  # errors decided before the write
    written: tuple[tuple[str, int], ...]
    values: tuple[OffsetValue | None, ...]  # what the records of `written` hold (None: deleted)


@immutable
class TombstonesDone:
    """DeleteGroups or retention expiry: replay the tombstones, then drop a dead group."""

    group_id: str
    handle: int | None
    records: tuple[Record, ...]
    kills_group: bool
    # restored if the write fails: the group was never deleted (Empty timestamp drives
    # protocol.md §8.4)
    state_timestamp_before: int | None = None


@immutable
class LogOnly:
    what: str


@immutable
class AdminDone:
    """A registration change; on failure it is undone (`added` removed, `removed` restored)."""

    group_id: str
    handle: int
    what: str
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


Continuation = StaticReplaceDone | SyncDone | OffsetsDone | TombstonesDone | LogOnly | AdminDone


@dataclass(slots=True)
class Write:
    records: list[Record]
    continuation: Continuation


@dataclass(slots=True)
class Result:
    replies: list[tuple[int, Reply]] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)

    def reply(self, handle: int, response: Reply) -> None:
        self.replies.append((handle, response))

    def extend(self, other: Result) -> None:
        self.replies.extend(other.replies)
        self.writes.extend(other.writes)
