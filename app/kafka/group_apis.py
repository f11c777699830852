"""Group-plane APIs: every wire version <-> the internal types of `app.group.messages`.

Each API has `decode_*` (kio request -> internal request), `encode_*` (internal response -> kio
response of the request's version), a `handle_*` that hands the core method to run to the
service (`schedule_write` / `schedule_read`), and an `*_error` builder for the reply when the
group is not served here (`CoordinatorError`) or the handler failed (protocol.md §11.3).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from app.group.messages import (
    NO_ERROR,
    DeleteGroupResult,
    DescribedGroup,
    Error,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    LeaveMember,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from app.group.state import DEAD
from app.kafka.codec import INT32_MIN, build, ms, response_class
from app.kafka.context import Api, DirectReply, Pending, RequestContext, serve_call
from app.kafka.group_replies import (
    delete_groups_body,
    describe_groups_body,
    described_group_entry,
    join_group_body,
    list_groups_body,
    listed_group_entry,
    sync_group_body,
)
from app.kafka.hot import HEARTBEAT_HOT, HEARTBEAT_MAX_VERSION
from app.kafka.hot import encode_heartbeat_body as encode_heartbeat_body
from app.kafka.hot_group import JOIN_GROUP_HOT, SYNC_GROUP_HOT
from app.security.acl import CLUSTER_NAME, OP_READ, RESOURCE_GROUP, AclOperation, ResourceType
from app.service import CoordinatorError, CoordinatorService

if TYPE_CHECKING:
    from app.group.coordinator import GroupCoordinator

T = TypeVar("T")
U = TypeVar("U")

JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
DELETE_GROUPS: Final = 42


# Requests naming many groups or topics are served this many names per turn of the loop, so
# one of them never holds the loop for long (README: Limits and hostile clients).
SLICE: Final = 500


class SliceLane:
    """Requests served in slices take turns node-wide: one slice of one of them per turn of the
    loop, whichever connection sent it. Thirty connections each naming 9,999 groups then cost a
    turn one slice, not thirty, and the heartbeats read in that turn are not queued behind
    them (with a bare `asyncio.sleep(0)` each such request ran a slice every turn)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._scheduled = False

    def turn(self) -> asyncio.Future[None]:
        """Done when the caller may run its next slice."""
        fut = self.loop.create_future()
        self._waiting.append(fut)
        if not self._scheduled:
            self._scheduled = True
            self.loop.call_soon(self._release)
        return fut

    def _release(self) -> None:
        self._scheduled = False
        while self._waiting:
            fut = self._waiting.popleft()
            if not fut.done():  # a cancelled waiter (its connection went away) is passed over
                fut.set_result(None)
                break
        if self._waiting:
            self._scheduled = True
            self.loop.call_soon(self._release)


_lane: SliceLane | None = None


def next_slice() -> asyncio.Future[None]:
    """Await before every slice but the first: the turn the running loop's lane gives."""
    global _lane
    loop = asyncio.get_running_loop()
    if _lane is None or _lane.loop is not loop:
        _lane = SliceLane(loop)
    return _lane.turn()


async def in_slices(items: Iterable[U], fn: Callable[[U], T]) -> list[T]:
    """`fn` over `items`, a SLICE of them per turn of the lane."""
    out: list[T] = []
    for i, item in enumerate(items):
        if i and i % SLICE == 0:
            await next_slice()
        out.append(fn(item))
    return out


def require_group_id(group_id: str) -> None:
    if not group_id:
        raise CoordinatorError(Error.INVALID_GROUP_ID)


def authorize_group(ctx: RequestContext, op: AclOperation, group_id: str) -> None:
    """Kafka's check before a group request reaches the coordinator: GROUP_AUTHORIZATION_FAILED
    in the API's own error shape when the principal may not do `op` on the group."""
    if not ctx.allowed(op, RESOURCE_GROUP, group_id):
        raise CoordinatorError(Error.GROUP_AUTHORIZATION_FAILED)


def read_or(
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


def _describe_group(group_id: str, core: GroupCoordinator, now: int) -> Any:
    return core.describe_group(group_id)


# --- JoinGroup (11) --------------------------------------------------------------------------


def decode_join_group(req: Any, client_id: str = "", client_host: str = "") -> JoinGroupRequest:
    version = int(req.__version__)
    instance_id: str | None = req.group_instance_id if version >= 5 else None
    session_timeout_ms = ms(req.session_timeout)
    # positional, in JoinGroupRequest's field order: a frozen dataclass's keyword call costs
    # twice as much, and a rebalance makes one of these per member
    return JoinGroupRequest(
        req.group_id,
        req.member_id,
        instance_id,
        session_timeout_ms,
        # protocol.md §2.5: v0 has no rebalance timeout, the session timeout stands in for it
        ms(req.rebalance_timeout) if version >= 1 else session_timeout_ms,
        req.protocol_type,
        tuple([(p.name, p.metadata) for p in req.protocols]),
        client_id,
        client_host,
        req.reason if version >= 8 else None,
        version >= 4 and instance_id is None,  # require_known_member_id (KIP-394)
        version >= 9,  # supports_skip_assignment (KIP-814)
    )


def encode_join_group(resp: JoinGroupResponse, version: int) -> Any:
    """The reply body, packed with struct (app/kafka/group_replies.py: kio's bytes).

    v1 stays a kio object: the metrics read a hand-packed body's error code after a
    throttle_time_ms from v1 on (`context.reply_error_code`, Heartbeat's layout), and JoinGroup
    v1 has none."""
    if version == 1:
        return kio_join_group(resp, version)
    return join_group_body(resp, version)


def kio_join_group(resp: JoinGroupResponse, version: int) -> Any:
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


class _ResponseCall:
    """A WriteCall (app/kafka/context.py) whose future holds the core's response, or the error
    to answer in the API's shape."""

    __slots__ = ("future", "response")
    future: Pending | None
    response: Any

    def settle(self, fut: Pending) -> None:
        self.response = fut.result()


class JoinGroupCall(_ResponseCall):
    """`handle_join_group` without its context (the connection's path when no ACLs apply)."""

    __slots__ = ()

    def __init__(
        self,
        service: CoordinatorService,
        req: JoinGroupRequest,
        version: int,
        into: DirectReply | None = None,
    ) -> None:
        require_group_id(req.group_id)
        self.response = None
        self.future: Pending | None = service.schedule_write(
            "JoinGroup",
            req.group_id,
            lambda core, h, now: core.join_group(h, req, now),
            creates_group=True,
            into=into,
        )

    def reply(self, version: int) -> Any:
        assert self.response is not None
        return encode_join_group(self.response, version)


async def handle_join_group(ctx: RequestContext, req: Any) -> Any:
    # `req` is kio's entity, or the internal request when app/kafka/hot_group.py read the frame
    internal = (
        req
        if isinstance(req, JoinGroupRequest)
        else decode_join_group(req, ctx.client_id, ctx.client_host)
    )
    authorize_group(ctx, OP_READ, internal.group_id)
    return await serve_call(JoinGroupCall(ctx.service, internal, ctx.api_version), ctx.api_version)


def join_group_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    # as Kafka: an error reply carries the member id the request named
    return encode_join_group(JoinGroupResponse(error, member_id=req.member_id), ctx.api_version)


# --- SyncGroup (14) --------------------------------------------------------------------------


def decode_sync_group(req: Any) -> SyncGroupRequest:
    version = int(req.__version__)
    v5 = version >= 5
    return SyncGroupRequest(  # positional, in field order: see decode_join_group
        req.group_id,
        req.generation_id,
        req.member_id,
        req.group_instance_id if version >= 3 else None,
        req.protocol_type if v5 else None,
        req.protocol_name if v5 else None,
        tuple([(a.member_id, a.assignment) for a in req.assignments]) if req.assignments else (),
    )


def encode_sync_group(resp: SyncGroupResponse, version: int) -> bytes:
    """The reply body, packed with struct (app/kafka/group_replies.py: kio's bytes)."""
    return sync_group_body(resp, version)


def _lacks_protocol(req: SyncGroupRequest, version: int) -> bool:
    # protocol.md §6.1 (KafkaApis): v5+ must carry both; answered before the coordinator
    return version >= 5 and (req.protocol_type is None or req.protocol_name is None)


class SyncGroupCall(_ResponseCall):
    """`handle_sync_group` without its context (the connection's path when no ACLs apply)."""

    __slots__ = ()

    def __init__(
        self,
        service: CoordinatorService,
        req: SyncGroupRequest,
        version: int,
        into: DirectReply | None = None,
    ) -> None:
        self.response = None
        self.future: Pending | None = None
        if _lacks_protocol(req, version):
            self.response = SyncGroupResponse(error=Error.INCONSISTENT_GROUP_PROTOCOL)
            return
        require_group_id(req.group_id)
        self.future = service.schedule_write(
            "SyncGroup",
            req.group_id,
            lambda core, h, now: core.sync_group(h, req, now),
            # protocol.md §10.4: a loading coordinator answers REBALANCE_IN_PROGRESS to SyncGroup
            Error.REBALANCE_IN_PROGRESS,
            into=into,
        )

    def reply(self, version: int) -> bytes:
        assert self.response is not None
        return encode_sync_group(self.response, version)


async def handle_sync_group(ctx: RequestContext, req: Any) -> Any:
    # kio's entity, or the internal request app/kafka/hot_group.py read
    internal = req if isinstance(req, SyncGroupRequest) else decode_sync_group(req)
    if _lacks_protocol(internal, ctx.api_version):  # before the ACL check, as Kafka
        return sync_group_error(ctx, internal, Error.INCONSISTENT_GROUP_PROTOCOL)
    authorize_group(ctx, OP_READ, internal.group_id)
    return await serve_call(SyncGroupCall(ctx.service, internal, ctx.api_version), ctx.api_version)


def sync_group_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_sync_group(SyncGroupResponse(error=error), ctx.api_version)


# --- Heartbeat (12) --------------------------------------------------------------------------
# Its hot path (app/kafka/hot.py) reads the request with `struct` and packs the reply by hand.


def decode_heartbeat(req: Any) -> HeartbeatRequest:
    return HeartbeatRequest(
        group_id=req.group_id,
        generation_id=req.generation_id,
        member_id=req.member_id,
        group_instance_id=req.group_instance_id if int(req.__version__) >= 3 else None,
    )


def handle_heartbeat(ctx: RequestContext, req: Any) -> bytes:
    internal = decode_heartbeat(req)
    authorize_group(ctx, OP_READ, internal.group_id)
    error = ctx.service.heartbeat(
        internal.group_id, internal.generation_id, internal.member_id, internal.group_instance_id
    )
    return encode_heartbeat_body(error, ctx.api_version)


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
        if error == NO_ERROR:
            error = next((m.error for m in resp.members if m.error != NO_ERROR), NO_ERROR)
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
    authorize_group(ctx, OP_READ, internal.group_id)
    require_group_id(internal.group_id)
    resp = await ctx.service.schedule_write(
        "LeaveGroup", internal.group_id, lambda core, h, now: core.leave_group(h, internal, now)
    )
    return encode_leave_group(resp, ctx.api_version)


def leave_group_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_leave_group(LeaveGroupResponse(error=error), ctx.api_version)


# --- DescribeGroups (15) ---------------------------------------------------------------------


def _describe_error(g: DescribedGroup, version: int) -> tuple[Error, str | None]:
    # v6 (KIP-1043) names a group that does not exist; before, it is a Dead group with no error
    if version >= 6 and g.error == NO_ERROR and g.state == DEAD.value:
        return Error.GROUP_ID_NOT_FOUND, f"Group {g.group_id} not found."
    return g.error, None


def _describe_entry(
    g: DescribedGroup, version: int, operations: Callable[[str], int] | None
) -> bytes:
    error, message = _describe_error(g, version)
    ops = operations(g.group_id) if operations is not None and g.error == NO_ERROR else INT32_MIN
    return described_group_entry(g, error, message, ops, version)


def encode_describe_groups(
    groups: Sequence[DescribedGroup],
    version: int,
    operations: Callable[[str], int] | None = None,
) -> bytes:
    return describe_groups_body([_describe_entry(g, version, operations) for g in groups], version)


async def handle_describe_groups(ctx: RequestContext, req: Any) -> bytes:
    version = ctx.api_version
    operations = None
    if getattr(req, "include_authorized_operations", False):
        operations = functools.partial(ctx.operations, ResourceType.GROUP)

    def describe(group_id: str) -> bytes:
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            described = DescribedGroup(group_id, Error.GROUP_AUTHORIZATION_FAILED)
        else:
            described = read_or(
                ctx,
                group_id,
                functools.partial(_describe_group, group_id),
                functools.partial(DescribedGroup, group_id),
            )
        # written in the slice it is described in: the reply is never encoded in one piece
        return _describe_entry(described, version, operations)

    # a group named twice is answered once
    return describe_groups_body(await in_slices(dict.fromkeys(req.groups), describe), version)


def describe_groups_error(ctx: RequestContext, req: Any, error: Error) -> bytes:
    return encode_describe_groups([DescribedGroup(g, error) for g in req.groups], ctx.api_version)


# --- ListGroups (16) -------------------------------------------------------------------------


def decode_list_groups(req: Any) -> ListGroupsRequest:
    version = int(req.__version__)
    return ListGroupsRequest(
        states_filter=tuple(req.states_filter) if version >= 4 else (),
        types_filter=tuple(req.types_filter) if version >= 5 else (),
    )


def encode_list_groups(resp: ListGroupsResponse, version: int) -> bytes:
    entries = [listed_group_entry(g, version) for g in resp.groups]
    return list_groups_body(resp.error, entries, version)


async def handle_list_groups(ctx: RequestContext, req: Any) -> bytes:
    internal = decode_list_groups(req)
    version = ctx.api_version
    groups, loading = ctx.service.read_all(
        lambda core: core.list_groups(internal.states_filter, internal.types_filter)
    )
    # as Kafka: without CLUSTER DESCRIBE, the groups the principal may DESCRIBE
    everyone = ctx.allowed(
        AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, log_denial=False
    )

    def entry(g: ListedGroup) -> bytes:
        if everyone or ctx.allowed(
            AclOperation.DESCRIBE, ResourceType.GROUP, g.group_id, log_denial=False
        ):
            return listed_group_entry(g, version)
        return b""  # left out

    # checked and written a slice per turn: a node may hold COORD_MAX_GROUPS groups
    entries = [e for e in await in_slices(groups, entry) if e]
    error = Error.COORDINATOR_LOAD_IN_PROGRESS if loading else NO_ERROR
    return list_groups_body(error, entries, version)


def list_groups_error(ctx: RequestContext, req: Any, error: Error) -> bytes:
    return list_groups_body(error, [], ctx.api_version)


# --- DeleteGroups (42) -----------------------------------------------------------------------


def encode_delete_groups(results: Sequence[DeleteGroupResult], version: int) -> bytes:
    return delete_groups_body(results, version)


async def handle_delete_groups(ctx: RequestContext, req: Any) -> bytes:
    async def delete(group_id: str) -> DeleteGroupResult:
        if not ctx.allowed(AclOperation.DELETE, ResourceType.GROUP, group_id):
            return DeleteGroupResult(group_id, Error.GROUP_AUTHORIZATION_FAILED)
        try:
            result: DeleteGroupResult = await ctx.service.schedule_write(
                "DeleteGroups", group_id, lambda core, h, now: core.delete_group(h, group_id, now)
            )
        except CoordinatorError as e:
            return DeleteGroupResult(group_id, e.error)
        return result

    results: list[DeleteGroupResult] = []
    names = list(dict.fromkeys(req.groups_names))
    for start in range(0, len(names), SLICE):  # a slice of deletions per turn of the lane
        if start:
            await next_slice()
        results += await asyncio.gather(*(delete(g) for g in names[start : start + SLICE]))
    return encode_delete_groups(results, ctx.api_version)


def delete_groups_error(ctx: RequestContext, req: Any, error: Error) -> bytes:
    return encode_delete_groups(
        [DeleteGroupResult(g, error) for g in req.groups_names], ctx.api_version
    )


APIS: Final[tuple[Api, ...]] = (
    Api(
        JOIN_GROUP,
        "JoinGroup",
        0,
        9,
        handle_join_group,
        join_group_error,
        JoinGroupCall,
        JOIN_GROUP_HOT,
    ),
    Api(
        HEARTBEAT,
        "Heartbeat",
        0,
        HEARTBEAT_MAX_VERSION,
        handle_heartbeat,
        heartbeat_error,
        hot=HEARTBEAT_HOT,
    ),
    Api(LEAVE_GROUP, "LeaveGroup", 0, 5, handle_leave_group, leave_group_error),
    Api(
        SYNC_GROUP,
        "SyncGroup",
        0,
        5,
        handle_sync_group,
        sync_group_error,
        SyncGroupCall,
        SYNC_GROUP_HOT,
    ),
    Api(DESCRIBE_GROUPS, "DescribeGroups", 0, 6, handle_describe_groups, describe_groups_error),
    Api(LIST_GROUPS, "ListGroups", 0, 5, handle_list_groups, list_groups_error),
    Api(DELETE_GROUPS, "DeleteGroups", 0, 2, handle_delete_groups, delete_groups_error),
)
