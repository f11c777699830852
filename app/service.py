"""The facade the Kafka edge (app/kafka) and the admin API (api/) call.

It speaks only the version-free types of `app.group.messages`; `app.runtime` implements it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from app.group.messages import (
    DeleteGroupResult,
    DescribedGroup,
    Error,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)


@dataclass(frozen=True, slots=True)
class Broker:
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class ClusterView:
    """What Metadata answers: live nodes and the topic registry."""

    cluster_id: str
    controller_id: int
    brokers: tuple[Broker, ...]
    topics: dict[str, int]  # topic name -> partition count


@dataclass(frozen=True, slots=True)
class CoordinatorLookup:
    error: Error
    broker: Broker | None = None
    message: str | None = None


class CoordinatorService(Protocol):
    """One node's view of the group coordinator."""

    node_id: int

    def cluster(self) -> ClusterView: ...

    def find_coordinator(self, key: str, key_type: int) -> CoordinatorLookup: ...

    async def join_group(self, req: JoinGroupRequest) -> JoinGroupResponse: ...

    async def sync_group(self, req: SyncGroupRequest) -> SyncGroupResponse: ...

    async def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResponse: ...

    async def leave_group(self, req: LeaveGroupRequest) -> LeaveGroupResponse: ...

    async def offset_commit(self, req: OffsetCommitRequest) -> OffsetCommitResponse: ...

    async def offset_fetch(self, req: OffsetFetchRequest) -> OffsetFetchResponse: ...

    async def describe_groups(self, group_ids: list[str]) -> list[DescribedGroup]: ...

    async def list_groups(self, req: ListGroupsRequest) -> ListGroupsResponse: ...

    async def delete_groups(self, group_ids: list[str]) -> list[DeleteGroupResult]: ...
