"""Offset APIs: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47), every wire version <->
the internal types of `app.group.messages`, in the shape of `group_apis.py` (protocol.md §8, §11.3).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from app.group.messages import (
    NO_ERROR,
    DeleteGroupResult,
    Error,
    FetchedOffset,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    PartitionResult,
)
from app.kafka.codec import build, group_by_topic, ms, response_class
from app.kafka.context import Api, DirectReply, Pending, RequestContext, serve_call
from app.kafka.group_apis import authorize_group, in_slices, read_or, require_group_id
from app.kafka.group_replies import offset_commit_body, offset_fetch_body
from app.kafka.hot_group import OFFSET_COMMIT_HOT, OffsetCommitWire
from app.security.acl import OP_READ, RESOURCE_TOPIC, AclOperation, ResourceType
from app.service import CoordinatorError, CoordinatorService

if TYPE_CHECKING:
    from app.group.coordinator import GroupCoordinator

OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
OFFSET_DELETE: Final = 47


def is_known_partition(topics: Mapping[str, int], topic: str, partition: int) -> bool:
    count = topics.get(topic)
    return count is not None and 0 <= partition < count


def _fetch_offsets(req: OffsetFetchRequest, core: GroupCoordinator, now: int) -> Any:
    return core.offset_fetch(req)


# --- OffsetCommit (8) ------------------------------------------------------------------------


def _everything(topic: str) -> bool:
    return True


def wire_offset_commit(req: Any) -> OffsetCommitWire:
    """kio's OffsetCommit entity, as app/kafka/hot_group.py's `read_offset_commit` reads it."""
    version = int(req.__version__)
    return OffsetCommitWire(
        version,
        req.group_id,
        req.generation_id_or_member_epoch,
        req.member_id,
        req.group_instance_id if version >= 7 else None,
        ms(req.retention_time) if version <= 4 else -1,
        tuple(
            (
                t.name,
                tuple(
                    (
                        p.partition_index,
                        p.committed_offset,
                        p.committed_leader_epoch if version >= 6 else -1,
                        p.committed_metadata,
                    )
                    for p in t.partitions
                ),
            )
            for t in req.topics
        ),
    )


def _as_wire(req: Any) -> OffsetCommitWire:
    # kio's entity, or what app/kafka/hot_group.py read
    return req if isinstance(req, OffsetCommitWire) else wire_offset_commit(req)


def decode_offset_commit(
    req: Any, topics: Mapping[str, int], readable: Callable[[str], bool] = _everything
) -> tuple[OffsetCommitRequest, tuple[PartitionResult, ...]]:
    """The internal request (known, authorized partitions only) and the partitions refused at
    the edge: TOPIC_AUTHORIZATION_FAILED where the principal may not READ the topic."""
    wire = _as_wire(req)
    accepted: list[OffsetCommitPartition] = []
    refused: list[PartitionResult] = []
    for name, partitions in wire.topics:
        allowed = readable(name)
        for partition, offset, leader_epoch, metadata in partitions:
            if not allowed:
                refused.append(PartitionResult(name, partition, Error.TOPIC_AUTHORIZATION_FAILED))
            elif not is_known_partition(topics, name, partition):
                # protocol.md §8.2 (KafkaApis): unknown topic/partition answered per partition
                refused.append(PartitionResult(name, partition, Error.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                accepted.append(
                    OffsetCommitPartition(name, partition, offset, leader_epoch, metadata)
                )
    internal = OffsetCommitRequest(
        group_id=wire.group_id,
        generation_id=wire.generation_id,
        member_id=wire.member_id,
        group_instance_id=wire.group_instance_id,
        partitions=tuple(accepted),
        retention_time_ms=wire.retention_time_ms,
        unknown_group_not_found=wire.version >= 9,
    )
    return internal, tuple(refused)


def encode_offset_commit(partitions: Sequence[PartitionResult], version: int) -> bytes:
    """The reply body, packed with struct (app/kafka/group_replies.py: kio's bytes)."""
    return offset_commit_body(partitions, version)


def _commit_results_in_request_order(
    wire: OffsetCommitWire, results: Mapping[tuple[str, int], Error]
) -> list[PartitionResult]:
    return [
        PartitionResult(name, p[0], results.get((name, p[0]), Error.UNKNOWN_SERVER_ERROR))
        for name, partitions in wire.topics
        for p in partitions
    ]


class OffsetCommitCall:
    """An OffsetCommit from the edge's checks to its reply, as a WriteCall
    (app/kafka/context.py) and for `handle_offset_commit`. Constructing it schedules the
    write; `future` is None when nothing reached the core (every partition refused at the
    edge, or the group not served here)."""

    __slots__ = ("future", "partitions", "results", "wire")

    def __init__(
        self,
        service: CoordinatorService,
        wire: OffsetCommitWire,
        _version: int = 0,  # unused: the wire carries its version (WriteStarter's shape)
        into: DirectReply | None = None,
        readable: Callable[[str], bool] = _everything,
    ) -> None:
        internal, refused = decode_offset_commit(wire, service.topics, readable)
        self.wire = wire
        self.results = {(r.topic, r.partition): r.error for r in refused}
        self.partitions = internal.partitions
        self.future: Pending | None = None
        if internal.partitions:
            try:
                self.future = service.schedule_write(
                    "OffsetCommit",
                    internal.group_id,
                    lambda core, h, now: core.offset_commit(h, internal, now),
                    creates_group=True,
                    into=into,
                )
            except CoordinatorError as e:
                self.failed(e.error)

    def failed(self, error: Error) -> None:
        """The group's error for every partition that reached the core; partitions refused at
        the edge keep their own."""
        self.results.update({(p.topic, p.partition): error for p in self.partitions})

    def answered(self, resp: Any) -> None:
        self.results.update({(r.topic, r.partition): r.error for r in resp.partitions})

    def settle(self, fut: Pending) -> None:
        """`future`'s outcome: a CoordinatorError answers with its error every partition that
        reached the core (those refused at the edge keep their own); any other exception (or
        the cancellation) is raised, for the caller's UNKNOWN_SERVER_ERROR reply."""
        exc = fut.exception()
        if exc is None:
            self.answered(fut.result())
        elif isinstance(exc, CoordinatorError):
            self.failed(exc.error)
        else:
            raise exc

    def reply(self, version: int) -> bytes:
        results = _commit_results_in_request_order(self.wire, self.results)
        return encode_offset_commit(results, version)


async def handle_offset_commit(ctx: RequestContext, req: Any) -> Any:
    wire = _as_wire(req)
    authorize_group(ctx, OP_READ, wire.group_id)
    call = OffsetCommitCall(
        ctx.service, wire, readable=lambda topic: ctx.allowed(OP_READ, RESOURCE_TOPIC, topic)
    )
    return await serve_call(call, ctx.api_version)


def offset_commit_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    wire = _as_wire(req)
    results = {(name, p[0]): error for name, partitions in wire.topics for p in partitions}
    return encode_offset_commit(_commit_results_in_request_order(wire, results), ctx.api_version)


# --- OffsetFetch (9) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetFetchQuery:
    """One group of an OffsetFetch: what the service is asked, and what the client asked."""

    request: OffsetFetchRequest  # known partitions only
    requested: tuple[tuple[str, int], ...] | None  # request order; None = all committed


def _requested_partitions(topics: Any) -> tuple[tuple[str, int], ...] | None:
    if topics is None:
        return None
    # repeated partitions are answered once (dict keeps the first position)
    return tuple(dict.fromkeys((t.name, p) for t in topics for p in t.partition_indexes))


def decode_offset_fetch(req: Any, topics: Mapping[str, int]) -> list[OffsetFetchQuery]:
    version = int(req.__version__)
    require_stable = bool(req.require_stable) if version >= 7 else False
    if version >= 8:
        # a group named twice is answered once, with what its first mention asked
        firsts: dict[str, Any] = {}
        for g in req.groups:
            firsts.setdefault(g.group_id, g)
        groups = [(g.group_id, _requested_partitions(g.topics)) for g in firsts.values()]
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
    query: OffsetFetchQuery,
    resp: OffsetFetchResponse,
    topics: Mapping[str, int],
    describable: Callable[[str], bool] = _everything,
) -> OffsetFetchResponse:
    """Put the service's answer back into request order, adding edge-refused partitions.
    Topics the principal may not DESCRIBE: TOPIC_AUTHORIZATION_FAILED where the request named
    them, left out of an all-partitions answer (Kafka's KafkaApis does both)."""
    if query.requested is None:
        if resp.error != NO_ERROR:
            return resp
        kept = tuple(p for p in resp.partitions if describable(p.topic))
        return OffsetFetchResponse(resp.group_id, resp.error, kept)
    if resp.error != NO_ERROR:
        # v0-1 carry the group error on every requested partition (no top-level field)
        parts = tuple(FetchedOffset(t, p, error=resp.error) for t, p in query.requested)
        return OffsetFetchResponse(resp.group_id, resp.error, parts)
    by_key = {(p.topic, p.partition): p for p in resp.partitions}
    merged = []
    for t, p in query.requested:
        found = by_key.get((t, p))
        if not describable(t):
            merged.append(FetchedOffset(t, p, error=Error.TOPIC_AUTHORIZATION_FAILED))
        elif found is not None:
            merged.append(found)
        elif not is_known_partition(topics, t, p):
            merged.append(FetchedOffset(t, p, error=Error.UNKNOWN_TOPIC_OR_PARTITION))
        else:
            merged.append(FetchedOffset(t, p))  # nothing committed
    return OffsetFetchResponse(resp.group_id, resp.error, tuple(merged))


def encode_offset_fetch(responses: Sequence[OffsetFetchResponse], version: int) -> bytes:
    # v2-v7: Kafka sends the group error at top level only; we also repeat it on each
    # requested partition (merge_offset_fetch), because aiokafka reads only those and would
    # otherwise take a retriable error (NOT_COORDINATOR, loading) for "nothing committed" and
    # reset its position. A request may name 10,000 partitions: packed, not kio (100 ms of one
    # loop turn for those).
    return offset_fetch_body(responses, version)


async def handle_offset_fetch(ctx: RequestContext, req: Any) -> Any:
    topics = ctx.service.topics
    queries = decode_offset_fetch(req, topics)
    waiting: dict[str, Error] = {}
    upstream = ctx.service.upstream
    if upstream is not None:
        # gateway mode: a group seen the first time moves in first, for a caller that may act
        # as its member (READ, as JoinGroup and OffsetCommit need): a DESCRIBE-only monitor
        # reads what is here and writes nothing
        movers = [
            g
            for g in dict.fromkeys(q.request.group_id for q in queries)
            if ctx.allowed(AclOperation.READ, ResourceType.GROUP, g, log_denial=False)
        ]
        if len(movers) == 1:  # the common case: no task to make
            errors = [await upstream.before_offset_fetch(movers[0])]
        else:
            errors = await asyncio.gather(*(upstream.before_offset_fetch(g) for g in movers))
        waiting = {g: e for g, e in zip(movers, errors, strict=True) if e is not None}

    def fetch(q: OffsetFetchQuery) -> OffsetFetchResponse:
        group_id = q.request.group_id
        if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
            return OffsetFetchResponse(group_id, Error.GROUP_AUTHORIZATION_FAILED)
        if group_id in waiting:
            return OffsetFetchResponse(group_id, waiting[group_id])
        fetched: OffsetFetchResponse = read_or(
            ctx,
            group_id,
            functools.partial(_fetch_offsets, q.request),
            functools.partial(OffsetFetchResponse, group_id),
        )
        return fetched

    def describable(topic: str) -> bool:
        return ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, topic, log_denial=False)

    answers = await in_slices(queries, fetch)
    merged = [
        merge_offset_fetch(q, a, topics, describable) for q, a in zip(queries, answers, strict=True)
    ]
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


# --- OffsetDelete (47) ------------------------------------------------------------------------


def encode_offset_delete(
    error: Error, partitions: Sequence[PartitionResult], version: int = 0
) -> Any:
    by_topic = group_by_topic((p.topic, p) for p in partitions)
    return build(
        response_class(OFFSET_DELETE, version),
        error_code=error,
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


def _delete_results_in_request_order(
    req: Any, results: Mapping[tuple[str, int], Error]
) -> list[PartitionResult]:
    # a partition named twice is answered once
    keys = dict.fromkeys((t.name, p.partition_index) for t in req.topics for p in t.partitions)
    return [PartitionResult(t, p, results.get((t, p), Error.UNKNOWN_SERVER_ERROR)) for t, p in keys]


async def handle_offset_delete(ctx: RequestContext, req: Any) -> Any:
    """Kafka's KafkaApis.handleOffsetDeleteRequest: GROUP DELETE for the request; per topic,
    READ (else TOPIC_AUTHORIZATION_FAILED) and a known topic and partition (else
    UNKNOWN_TOPIC_OR_PARTITION); the rest goes to the group's coordinator, whose group-level
    error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP) answers the whole request."""
    authorize_group(ctx, AclOperation.DELETE, req.group_id)
    require_group_id(req.group_id)
    topics = ctx.service.topics
    results: dict[tuple[str, int], Error] = {}
    accepted: list[tuple[str, int]] = []
    for topic in req.topics:
        readable = ctx.allowed(AclOperation.READ, ResourceType.TOPIC, topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            if not readable:
                results[tp] = Error.TOPIC_AUTHORIZATION_FAILED
            elif not is_known_partition(topics, *tp):
                results[tp] = Error.UNKNOWN_TOPIC_OR_PARTITION
            else:
                accepted.append(tp)
    internal = OffsetDeleteRequest(req.group_id, tuple(dict.fromkeys(accepted)))
    resp = await ctx.service.schedule_write(
        "OffsetDelete",
        internal.group_id,
        lambda core, h, now: core.delete_offsets(h, internal, now),
    )
    if isinstance(resp, DeleteGroupResult):
        return encode_offset_delete(resp.error, (), ctx.api_version)
    results.update({(r.topic, r.partition): r.error for r in resp.partitions})
    return encode_offset_delete(
        NO_ERROR, _delete_results_in_request_order(req, results), ctx.api_version
    )


def offset_delete_error(ctx: RequestContext, req: Any, error: Error) -> Any:
    return encode_offset_delete(error, (), ctx.api_version)


APIS: Final[tuple[Api, ...]] = (
    Api(
        OFFSET_COMMIT,
        "OffsetCommit",
        2,
        9,
        handle_offset_commit,
        offset_commit_error,
        OffsetCommitCall,
        OFFSET_COMMIT_HOT,
    ),
    Api(OFFSET_FETCH, "OffsetFetch", 1, 9, handle_offset_fetch, offset_fetch_error),
    Api(OFFSET_DELETE, "OffsetDelete", 0, 0, handle_offset_delete, offset_delete_error),
)
