"""Small, version-free request and response types the core understands.

`app/kafka` maps every wire version to and from these; the core sees capability flags
(`require_known_member_id`, `supports_skip_assignment`), never version numbers.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum, IntEnum
from typing import Final

from app.group.immutable import immutable


class Error(IntEnum):
    """Kafka error codes used by the coordinator (protocol.md §1.3)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    SECURITY_DISABLED = 54
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115


# `Error.NONE` through Python 3.11's slow enum attribute hook costs 0.25 µs (see
# app/group/state.py): the answer of almost every request reads this constant instead.
NO_ERROR: Final = Error.NONE


# --- JoinGroup -------------------------------------------------------------------------------


@immutable
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int  # v0 has none: the edge passes the session timeout
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's preference order
    client_id: str = ""
    client_host: str = ""
    reason: str | None = None
    require_known_member_id: bool = True  # v4+ without instance id (KIP-394)
    supports_skip_assignment: bool = False  # v9+ (KIP-814)


@immutable
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@immutable
class JoinGroupResponse:
    error: Error
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()


# --- SyncGroup -------------------------------------------------------------------------------


@immutable
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+ only; None = not provided
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()  # (member_id, assignment), leader only


@immutable
class SyncGroupResponse:
    error: Error
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# --- Heartbeat -------------------------------------------------------------------------------


@immutable
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@immutable
class HeartbeatResponse:
    error: Error


# --- LeaveGroup ------------------------------------------------------------------------------


@immutable
class LeaveMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@immutable
class LeaveGroupRequest:
    group_id: str
    members: tuple[LeaveMember, ...]  # v0-v2: one element


@immutable
class LeaveMemberResponse:
    member_id: str
    group_instance_id: str | None
    error: Error


@immutable
class LeaveGroupResponse:
    error: Error
    members: tuple[LeaveMemberResponse, ...] = ()


# --- OffsetCommit ----------------------------------------------------------------------------


@immutable
class OffsetCommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@immutable
class OffsetCommitRequest:
    group_id: str
    generation_id: int  # -1: commit without group membership (simple/admin commit)
    member_id: str
    group_instance_id: str | None
    partitions: tuple[OffsetCommitPartition, ...]
    retention_time_ms: int = -1  # v2-v4 only; -1 = broker default
    # v9+ (KIP-848 era): an unknown group with generation >= 0 answers GROUP_ID_NOT_FOUND
    unknown_group_not_found: bool = False


@immutable
class PartitionResult:
    topic: str
    partition: int
    error: Error


@immutable
class OffsetCommitResponse:
    partitions: tuple[PartitionResult, ...]


# --- OffsetFetch -----------------------------------------------------------------------------


@immutable
class OffsetFetchRequest:
    group_id: str
    partitions: tuple[tuple[str, int], ...] | None  # None = every committed partition (v2+)
    require_stable: bool = False


@immutable
class FetchedOffset:
    topic: str
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str = ""
    error: Error = Error.NONE


@immutable
class OffsetFetchResponse:
    group_id: str
    error: Error
    partitions: tuple[FetchedOffset, ...] = ()


# --- OffsetDelete ----------------------------------------------------------------------------


@immutable
class OffsetDeleteRequest:
    """Delete committed offsets of a group (OffsetDelete, API 47). The core answers an
    `OffsetCommitResponse` (one result per partition, GROUP_SUBSCRIBED_TO_TOPIC where a member
    of an active consumer group subscribes to the topic), or a `DeleteGroupResult` carrying the
    group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP)."""

    group_id: str
    partitions: tuple[tuple[str, int], ...]  # known, authorized partitions only


# --- DescribeGroups / ListGroups / DeleteGroups ------------------------------------------------


@immutable
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@immutable
class DescribedGroup:
    group_id: str
    error: Error
    state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[DescribedMember, ...] = ()


@immutable
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@immutable
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()
    types_filter: tuple[str, ...] = ()


@immutable
class ListGroupsResponse:
    error: Error
    groups: tuple[ListedGroup, ...] = field(default_factory=tuple)


@immutable
class DeleteGroupResult:
    group_id: str
    error: Error


# --- admin operations (no Kafka API: the project's own) ----------------------------------------


class AdminOutcome(Enum):
    """What an admin operation did, as a code the admin API maps to an HTTP status."""

    DONE = "done"
    INVALID = "invalid"  # the request itself is wrong
    NO_SUCH_GROUP = "no_such_group"
    GROUP_EMPTY = "group_empty"  # nothing to rebalance
    NOT_REGISTERED = "not_registered"
    NOT_WRITTEN = "not_written"  # the append failed: retriable


@immutable
class AdminResult:
    error: Error  # the Kafka error an equivalent Kafka request would get
    message: str = ""
    outcome: AdminOutcome = AdminOutcome.DONE
