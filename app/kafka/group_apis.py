"""Group-plane APIs: every wire version <-> the internal types of `app.group.messages`.

Each API has `decode_*` (kio request -> internal request), `encode_*` (internal response -> kio
response of the request's version), a `handle_*` that hands the core method to run to the
service (`schedule_write` / `schedule_read`), and an `*_error` builder for the reply when the
group is not served here (`CoordinatorError`) or the handler failed (protocol.md §11.3).
"""

from __future__ import annotations

import asyncio
import functools
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from app.group.messages import (
    DeleteGroupResult,
    DescribedGroup,
    Error,
    FetchedOffset,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMember,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.kafka.codec import INT32_MIN, build, group_by_topic, ms, response_class
from app.kafka.context import Api, RequestContext
from app.service import CoordinatorError

if TYPE_CHECKING:
    from app.group.coordinator import GroupCoordinator

T = TypeVar("T")

OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
DELETE_GROUPS: Final = 42


def is_known_partition(topics: Mapping[str, int], topic: str, partition: int) -> bool:
    count = topics.get(topic)
    return count is not None and 0 <= partition < count


def _require_group_id(group_id: str) -> None:
    if not group_id:
        raise CoordinatorError(Error.INVALID_GROUP_ID)


def _read_or(
    ctx: RequestContext,
    group_id: str,
    op: Callable[[GroupCoordinator, int], T],
    on_error: Callable[[Error], T],
) -> T:
    """A read of one group of a multi-group request: a group not served here gets its error."""
    try:
        return ctx.service.schedule_read(group_id, op)
    except CoordinatorError as e:
        return on_error(e.error)


def _fetch_offsets(req: OffsetFetchRequest, core: GroupCoordinator, now: int) -> Any:
    return core.offset_fetch(req)


def _describe_group(group_id: str, core: GroupCoordinator, now: int) -> Any:
    return core.describe_group(group_id)


# --- JoinGroup (11) --------------------------------------------------------------------------


def decode_join_group(req: Any, client_id: str = "", client_host: str = "") -> JoinGroupRequest:
    version = int(req.__version__)
    instance_id: str | None = req.group_instance_id if version >= 5 else None
    session_timeout_ms = ms(req.session_timeout)
    return JoinGroupRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        group_instance_id=instance_id,
        session_timeout_ms=session_timeout_ms,
        # protocol.md §2.5: v0 has no rebalance timeout, the session timeout stands in for it
        rebalance_timeout_ms=ms(req.rebalance_timeout) if version >= 1 else session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in req.protocols),
        client_id=client_id,
        client_host=client_host,
        reason=req.reason if version >= 8 else None,
        require_known_member_id=version >= 4 and instance_id is None,  # KIP-394
        supports_skip_assignment=version >= 9,  # KIP-814
    )


def encode_join_group(resp: JoinGroupResponse, version: int) -> Any:
    protocol_name = resp.protocol_name
    if protocol_name is None and version < 7:
        protocol_name = ""  # non-nullable before v7 (KIP-559)
    return build(
        response_class(JOIN_GROUP, version),
        error_code=resp.error,
        generation_id=resp.generation_id,
        protocol_type=resp.protocol_type,
        protocol_name=protocol_name,
        leader=resp.leader,
        skip_assignment=resp.skip_assignment,
        member_id=resp.member_id,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in resp.members
        ],
    )


async def handle_join_group(ctx: RequestContext, req: Any) -> Any:
    internal = decode_join_group(req, ctx.client_id, ctx.client_host)
    _require_group_id(internal.group_id)
    resp = await ctx.service.schedule_write(
        "JoinGroup", internal.group_id, lambda core, h, now: core.join_group(h, internal, now)
    )
    return encode_join_group(resp, ctx.api_version)


def join_group_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    # as Kafka: an error reply carries the member id the request named
    return encode_join_group(JoinGroupResponse(error, member_id=req.member_id), ctx.api_version)


# --- SyncGroup (14) --------------------------------------------------------------------------


def decode_sync_group(req: Any) -> SyncGroupRequest:
    version = int(req.__version__)
    return SyncGroupRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if version >= 3 else None,
        protocol_type=req.protocol_type if version >= 5 else None,
        protocol_name=req.protocol_name if version >= 5 else None,
        assignments=tuple((a.member_id, a.assignment) for a in req.assignments),
    )


def encode_sync_group(resp: SyncGroupResponse, version: int) -> Any:
    return build(
        response_class(SYNC_GROUP, version),
        error_code=resp.error,
        protocol_type=resp.protocol_type,
        protocol_name=resp.protocol_name,
        assignment=resp.assignment,
    )


async def handle_sync_group(ctx: RequestContext, req: Any) -> Any:
    internal = decode_sync_group(req)
    if ctx.api_version >= 5 and (internal.protocol_type is None or internal.protocol_name is None):
        # protocol.md §6.1 (KafkaApis): v5+ must carry both; answered before the coordinator
        return encode_sync_group(
            SyncGroupResponse(error=Error.INCONSISTENT_GROUP_PROTOCOL), ctx.api_version
        )
    _require_group_id(internal.group_id)
    resp = await ctx.service.schedule_write(
        "SyncGroup",
        internal.group_id,
        lambda core, h, now: core.sync_group(h, internal, now),
        # protocol.md §10.4: a loading coordinator answers REBALANCE_IN_PROGRESS to SyncGroup
        Error.REBALANCE_IN_PROGRESS,
    )
    return encode_sync_group(resp, ctx.api_version)


def sync_group_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_sync_group(SyncGroupResponse(error=error), ctx.api_version)


# --- Heartbeat (12) --------------------------------------------------------------------------
# Hot path: the response body is packed by hand (v0 error; v1-3 throttle + error; v4 + no tags).

_HB_V0 = struct.Struct(">h")
_HB_V1 = struct.Struct(">ih")


def encode_heartbeat_body(error: Error, version: int) -> bytes:
    if version == 0:
        return _HB_V0.pack(error)
    if version < 4:
        return _HB_V1.pack(0, error)
    return _HB_V1.pack(0, error) + b"\x00"


def decode_heartbeat(req: Any) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if int(req.__version__) >= 3 else None,
    )


def handle_heartbeat(ctx: RequestContext, req: Any) -> bytes:
    internal = decode_heartbeat(req)
    _require_group_id(internal.group_id)
    resp = ctx.service.schedule_read(
        internal.group_id,
        lambda core, now: core.heartbeat(internal, now),
        Error.NONE,  # protocol.md §10.4: a heartbeat while loading is answered NONE
    )
    return encode_heartbeat_body(resp.error, ctx.api_version)


def heartbeat_error(ctx: RequestContext, req: Any, error: Error) -> bytes:
    return encode_heartbeat_body(error, ctx.api_version)


# --- LeaveGroup (13) -------------------------------------------------------------------------


def decode_leave_group(req: Any) -> LeaveGroupRequest:
    version = int(req.__version__)
    if version < 3:
        # protocol.md §7.3: v0-2 name one member; normalized to a one-element batch
        return LeaveGroupRequest(group_id=req.group_id, members=(LeaveMember(req.member_id),))
    return LeaveGroupRequest(
        group_id=req.group_id,
        members=tuple(
            LeaveMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                reason=m.reason if version >= 5 else None,
            )
            for m in req.members
        ),
    )


def encode_leave_group(resp: LeaveGroupResponse, version: int) -> Any:
    cls = response_class(LEAVE_GROUP, version)
    if version < 3:
        # protocol.md §7.3: v0-2 have no per-member errors; surface the first member failure
        error = resp.error
        if error == Error.NONE:
            error = next((m.error for m in resp.members if m.error != Error.NONE), Error.NONE)
        return build(cls, error_code=error)
    return build(
        cls,
        error_code=resp.error,
        members=[
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "error_code": m.error,
            }
            for m in resp.members
        ],
    )


async def handle_leave_group(ctx: RequestContext, req: Any) -> Any:
    internal = decode_leave_group(req)
    _require_group_id(internal.group_id)
    resp = await ctx.service.schedule_write(
        "LeaveGroup", internal.group_id, lambda core, h, now: core.leave_group(h, internal, now)
    )
    return encode_leave_group(resp, ctx.api_version)


def leave_group_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_leave_group(LeaveGroupResponse(error=error), ctx.api_version)


# --- OffsetCommit (8) ------------------------------------------------------------------------


def decode_offset_commit(
    req: Any, topics: Mapping[str, int]
) -> tuple[OffsetCommitRequest, tuple[PartitionResult, ...]]:
    """The internal request (known partitions only) and the partitions refused at the edge."""
    version = int(req.__version__)
    accepted: list[OffsetCommitPartition] = []
    refused: list[PartitionResult] = []
    for topic in req.topics:
        for p in topic.partitions:
            if not is_known_partition(topics, topic.name, p.partition_index):
                # protocol.md §8.2 (KafkaApis): unknown topic/partition answered per partition
                refused.append(
                    PartitionResult(topic.name, p.partition_index, Error.UNKNOWN_TOPIC_OR_PARTITION)
                )
                continue
            accepted.append(
                OffsetCommitPartition(
                    topic=topic.name,
                    partition=p.partition_index,
                    offset=p.committed_offset,
                    leader_epoch=p.committed_leader_epoch if version >= 6 else -1,
                    metadata=p.committed_metadata,
                )
            )
    internal = OffsetCommitRequest(
        group_id=req.group_id,
        generation_id=req.generation_id_or_member_epoch,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if version >= 7 else None,
        partitions=tuple(accepted),
        retention_time_ms=ms(req.retention_time) if version <= 4 else -1,
        unknown_group_not_found=version >= 9,
    )
    return internal, tuple(refused)


def encode_offset_commit(partitions: Sequence[PartitionResult], version: int) -> Any:
    by_topic = group_by_topic((p.topic, p) for p in partitions)
    return build(
        response_class(OFFSET_COMMIT, version),
        topics=[
            {
                "name": name,
                "partitions": [
                    {"partition_index": p.partition, "error_code": p.error} for p in parts
                ],
            }
            for name, parts in by_topic.items()
        ],
    )


def _commit_results_in_request_order(
    req: Any, results: Mapping[tuple[str, int], Error]
) -> list[PartitionResult]:
    return [
        PartitionResult(
            t.name,
            p.partition_index,
            results.get((t.name, p.partition_index), Error.UNKNOWN_SERVER_ERROR),
        )
        for t in req.topics
        for p in t.partitions
    ]


async def handle_offset_commit(ctx: RequestContext, req: Any) -> Any:
    internal, refused = decode_offset_commit(req, ctx.service.cluster().topics)
    results = {(r.topic, r.partition): r.error for r in refused}
    if internal.partitions:
        try:
            resp = await ctx.service.schedule_write(
                "OffsetCommit",
                internal.group_id,
                lambda core, h, now: core.offset_commit(h, internal, now),
            )
        except CoordinatorError as e:
            # partitions refused at the edge keep their own error; the rest get the group's
            results.update({(p.topic, p.partition): e.error for p in internal.partitions})
        else:
            results.update({(r.topic, r.partition): r.error for r in resp.partitions})
    return encode_offset_commit(_commit_results_in_request_order(req, results), ctx.api_version)


def offset_commit_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    results = {(t.name, p.partition_index): error for t in req.topics for p in t.partitions}
    return encode_offset_commit(_commit_results_in_request_order(req, results), ctx.api_version)


# --- OffsetFetch (9) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetFetchQuery:
    """One group of an OffsetFetch: what the service is asked, and what the client asked."""

    request: OffsetFetchRequest  # known partitions only
    requested: tuple[tuple[str, int], ...] | None  # request order; None = all committed


def _requested_partitions(topics: Any) -> tuple[tuple[str, int], ...] | None:
    if topics is None:
        return None
    return tuple((t.name, p) for t in topics for p in t.partition_indexes)


def decode_offset_fetch(req: Any, topics: Mapping[str, int]) -> list[OffsetFetchQuery]:
    version = int(req.__version__)
    require_stable = bool(req.require_stable) if version >= 7 else False
    if version >= 8:
        groups = [(g.group_id, _requested_partitions(g.topics)) for g in req.groups]
    else:
        groups = [(req.group_id, _requested_partitions(req.topics))]
    queries = []
    for group_id, requested in groups:
        known = (
            None
            if requested is None
            else tuple(tp for tp in requested if is_known_partition(topics, *tp))
        )
        queries.append(
            OffsetFetchQuery(OffsetFetchRequest(group_id, known, require_stable), requested)
        )
    return queries


def merge_offset_fetch(
    query: OffsetFetchQuery, resp: OffsetFetchResponse, topics: Mapping[str, int]
) -> OffsetFetchResponse:
    """Put the service's answer back into request order, adding edge-refused partitions."""
    if query.requested is None:
        return resp
    if resp.error != Error.NONE:
        # v0-1 carry the group error on every requested partition (no top-level field)
        parts = tuple(FetchedOffset(t, p, error=resp.error) for t, p in query.requested)
        return OffsetFetchResponse(resp.group_id, resp.error, parts)
    by_key = {(p.topic, p.partition): p for p in resp.partitions}
    merged = []
    for t, p in query.requested:
        found = by_key.get((t, p))
        if found is not None:
            merged.append(found)
        elif not is_known_partition(topics, t, p):
            merged.append(FetchedOffset(t, p, error=Error.UNKNOWN_TOPIC_OR_PARTITION))
        else:
            merged.append(FetchedOffset(t, p))  # nothing committed
    return OffsetFetchResponse(resp.group_id, resp.error, tuple(merged))


def _fetch_topics(resp: OffsetFetchResponse, version: int) -> list[dict[str, Any]]:
    if resp.error != Error.NONE and version >= 8:
        return []  # the error travels at group level
    # v2-v7: Kafka sends the group error at top level only; we also repeat it on each
    # requested partition, because aiokafka reads only those and would otherwise take a
    # retriable error (NOT_COORDINATOR, loading) for "nothing committed" and reset its position
    by_topic = group_by_topic((p.topic, p) for p in resp.partitions)
    return [
        {
            "name": name,
            "partitions": [
                {
                    "partition_index": p.partition,
                    "committed_offset": p.offset,
                    "committed_leader_epoch": p.leader_epoch,
                    "metadata": p.metadata,
                    "error_code": p.error,
                }
                for p in parts
            ],
        }
        for name, parts in by_topic.items()
    ]


def encode_offset_fetch(responses: Sequence[OffsetFetchResponse], version: int) -> Any:
    cls = response_class(OFFSET_FETCH, version)
    if version >= 8:
        return build(
            cls,
            groups=[
                {"group_id": r.group_id, "topics": _fetch_topics(r, version), "error_code": r.error}
                for r in responses
            ],
        )
    (resp,) = responses
    return build(cls, topics=_fetch_topics(resp, version), error_code=resp.error)


def handle_offset_fetch(ctx: RequestContext, req: Any) -> Any:
    topics = ctx.service.cluster().topics
    queries = decode_offset_fetch(req, topics)
    answers = [
        _read_or(
            ctx,
            q.request.group_id,
            functools.partial(_fetch_offsets, q.request),
            functools.partial(OffsetFetchResponse, q.request.group_id),
        )
        for q in queries
    ]
    merged = [merge_offset_fetch(q, a, topics) for q, a in zip(queries, answers, strict=True)]
    return encode_offset_fetch(merged, ctx.api_version)


def offset_fetch_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    queries = decode_offset_fetch(req, {})
    return encode_offset_fetch(
        [
            merge_offset_fetch(q, OffsetFetchResponse(q.request.group_id, error), {})
            for q in queries
        ],
        ctx.api_version,
    )


# --- DescribeGroups (15) ---------------------------------------------------------------------


def encode_describe_groups(groups: Sequence[DescribedGroup], version: int) -> Any:
    return build(
        response_class(DESCRIBE_GROUPS, version),
        groups=[
            {
                "error_code": g.error,
                "group_id": g.group_id,
                "group_state": g.state,
                "protocol_type": g.protocol_type,
                "protocol_data": g.protocol_data,
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in g.members
                ],
                "authorized_operations": INT32_MIN,  # not computed (no ACLs)
            }
            for g in groups
        ],
    )


def handle_describe_groups(ctx: RequestContext, req: Any) -> Any:
    groups = [
        _read_or(
            ctx,
            group_id,
            functools.partial(_describe_group, group_id),
            functools.partial(DescribedGroup, group_id),
        )
        for group_id in req.groups
    ]
    return encode_describe_groups(groups, ctx.api_version)


def describe_groups_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_describe_groups([DescribedGroup(g, error) for g in req.groups], ctx.api_version)


# --- ListGroups (16) -------------------------------------------------------------------------


def decode_list_groups(req: Any) -> ListGroupsRequest:
    version = int(req.__version__)
    return ListGroupsRequest(
        states_filter=tuple(req.states_filter) if version >= 4 else (),
        types_filter=tuple(req.types_filter) if version >= 5 else (),
    )


def encode_list_groups(resp: ListGroupsResponse, version: int) -> Any:
    return build(
        response_class(LIST_GROUPS, version),
        error_code=resp.error,
        groups=[
            {
                "group_id": g.group_id,
                "protocol_type": g.protocol_type,
                "group_state": g.state,
                "group_type": g.group_type,
            }
            for g in resp.groups
        ],
    )


def handle_list_groups(ctx: RequestContext, req: Any) -> Any:
    internal = decode_list_groups(req)
    groups, loading = ctx.service.read_all(
        lambda core: core.list_groups(internal.states_filter, internal.types_filter)
    )
    error = Error.COORDINATOR_LOAD_IN_PROGRESS if loading else Error.NONE
    resp = ListGroupsResponse(error, tuple(groups))
    return encode_list_groups(resp, ctx.api_version)


def list_groups_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_list_groups(ListGroupsResponse(error=error), ctx.api_version)


# --- DeleteGroups (42) -----------------------------------------------------------------------


def encode_delete_groups(results: Sequence[DeleteGroupResult], version: int) -> Any:
    return build(
        response_class(DELETE_GROUPS, version),
        results=[{"group_id": r.group_id, "error_code": r.error} for r in results],
    )


async def handle_delete_groups(ctx: RequestContext, req: Any) -> Any:
    async def delete(group_id: str) -> DeleteGroupResult:
        try:
            result: DeleteGroupResult = await ctx.service.schedule_write(
                "DeleteGroups", group_id, lambda core, h, now: core.delete_group(h, group_id, now)
            )
        except CoordinatorError as e:
            return DeleteGroupResult(group_id, e.error)
        return result

    results = await asyncio.gather(*(delete(g) for g in req.groups_names))
    return encode_delete_groups(results, ctx.api_version)


def delete_groups_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_delete_groups(
        [DeleteGroupResult(g, error) for g in req.groups_names], ctx.api_version
    )


APIS: Final = (
    Api(OFFSET_COMMIT, "OffsetCommit", 2, 9, handle_offset_commit, offset_commit_error),
    Api(OFFSET_FETCH, "OffsetFetch", 1, 9, handle_offset_fetch, offset_fetch_error),
    Api(JOIN_GROUP, "JoinGroup", 0, 9, handle_join_group, join_group_error),
    Api(HEARTBEAT, "Heartbeat", 0, 4, handle_heartbeat, heartbeat_error),
    Api(LEAVE_GROUP, "LeaveGroup", 0, 5, handle_leave_group, leave_group_error),
    Api(SYNC_GROUP, "SyncGroup", 0, 5, handle_sync_group, sync_group_error),
    Api(DESCRIBE_GROUPS, "DescribeGroups", 0, 5, handle_describe_groups, describe_groups_error),
    Api(LIST_GROUPS, "ListGroups", 0, 5, handle_list_groups, list_groups_error),
    Api(DELETE_GROUPS, "DeleteGroups", 0, 2, handle_delete_groups, delete_groups_error),
)
