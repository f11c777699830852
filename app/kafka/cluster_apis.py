"""Cluster and data-plane APIs of a node that coordinates groups but stores no messages.

Metadata, DescribeCluster and FindCoordinator describe this node; ListOffsets, Fetch and Produce
exist only because real clients refuse to consume without them (see clients.md §2): partitions
are always empty, fetches long-poll and return nothing, produces are refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Final

from kio.schema.errors import ErrorCode

from app.group.messages import Error
from app.kafka.codec import (
    INT32_MIN,
    build,
    element_class,
    encode_body,
    ms,
    response_class,
    with_array,
)
from app.kafka.context import NO_RESPONSE, Api, HandlerResult, RequestContext
from app.kafka.group_apis import SLICE, next_slice
from app.kafka.offset_apis import is_known_partition
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from app.service import CoordinatorLookup

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
DESCRIBE_CLUSTER: Final = 60

# Upper bound on how long a Fetch is held, whatever the client asks (kafkajs asks 5 s).
FETCH_MAX_WAIT_CAP_MS: Final = 30_000
PRODUCE_REFUSED_MESSAGE: Final = "this node is a group coordinator and stores no messages"

# --- Metadata (3) ----------------------------------------------------------------------------


def _topic_entry(name: str, partitions: int, node_id: int, operations: int) -> dict[str, Any]:
    return {
        "error_code": Error.NONE,
        "name": name,
        "topic_id": None,  # all-zero: a real id makes librdkafka switch to topic-id Fetch v13+
        "is_internal": False,
        "partitions": [
            {
                "error_code": Error.NONE,
                "partition_index": i,
                "leader_id": node_id,
                # -1: no leader epoch, so clients skip OffsetForLeaderEpoch validation
                "leader_epoch": -1,
                "replica_nodes": [node_id],
                "isr_nodes": [node_id],
                "offline_replicas": [],
            }
            for i in range(partitions)
        ],
        "topic_authorized_operations": operations,
    }


def _wants(req: Any, name: str) -> bool:
    return bool(getattr(req, name, False))


async def handle_metadata(ctx: RequestContext, req: Any) -> HandlerResult:
    version = ctx.api_version
    view = ctx.service.cluster()
    node_id = ctx.service.node_id
    requested = req.topics
    cls = response_class(METADATA, version)
    topic_cls = element_class(cls, "topics")
    # each topic is written in the slice it is looked up in: a request may name 10,000 topics
    # (or the node know as many), and kio wrote such a reply in one piece (70 ms of one turn)
    entries: list[bytes] = []
    topic_ops = _wants(req, "include_topic_authorized_operations")

    def add(**entry: Any) -> None:
        entries.append(encode_body(build(topic_cls, **entry)))

    def operations(name: str) -> int:
        return ctx.operations(ResourceType.TOPIC, name) if topic_ops else INT32_MIN

    def describable(name: str, log_denial: bool = True) -> bool:
        return ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name, log_denial=log_denial)

    # v0: an empty list means every topic; v1+: null means every topic, [] means none.
    if requested is None or (version == 0 and not requested):
        # as Kafka: every topic the principal may DESCRIBE, silently leaving out the rest
        for i, (name, n) in enumerate(sorted(view.topics.items())):
            if i and i % SLICE == 0:
                await next_slice()
            if describable(name, log_denial=False):
                add(**_topic_entry(name, n, node_id, operations(name)))
    else:
        seen: set[Any] = set()
        for i, topic in enumerate(requested):
            if i and i % SLICE == 0:
                await next_slice()  # a slice of names per turn of the lane
            name = topic.name
            key = name if name is not None else topic.topic_id
            if key in seen:
                continue  # as Kafka: a topic named twice is answered once
            seen.add(key)
            if name is None:  # v10+ lookup by topic id: we hand out no ids
                add(
                    error_code=ErrorCode.unknown_topic_id,
                    name=None if version >= 12 else "",
                    topic_id=topic.topic_id,
                    topic_authorized_operations=INT32_MIN,
                )
            elif not describable(name):
                add(
                    error_code=Error.TOPIC_AUTHORIZATION_FAILED,
                    name=name,
                    topic_authorized_operations=INT32_MIN,
                )
            elif name in view.topics:
                add(**_topic_entry(name, view.topics[name], node_id, operations(name)))
            else:
                # no auto-creation: the registry must know a topic before consumers use it
                add(
                    error_code=Error.UNKNOWN_TOPIC_OR_PARTITION,
                    name=name,
                    topic_authorized_operations=INT32_MIN,
                )
    empty = build(
        cls,
        brokers=[
            {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": None}
            for b in (broker.on(ctx.listener) for broker in view.brokers)
            if b is not None  # as Kafka: a node without this listener is not listed
        ],
        cluster_id=view.cluster_id,
        controller_id=view.controller_id,
        topics=[],
        cluster_authorized_operations=(
            ctx.operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if _wants(req, "include_cluster_authorized_operations")
            else INT32_MIN
        ),
        error_code=Error.NONE,
    )
    return with_array(cls, encode_body(empty), "topics", entries)


# --- DescribeCluster (60) -------------------------------------------------------------------

ENDPOINT_BROKERS: Final = 1  # KIP-919: 1 = brokers, 2 = controllers
ENDPOINT_CONTROLLERS: Final = 2


def _describe_cluster_error(ctx: RequestContext, error: Error, message: str | None) -> Any:
    return build(
        response_class(DESCRIBE_CLUSTER, ctx.api_version),
        error_code=error,
        error_message=message,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id="",
        controller_id=-1,
        brokers=[],
        cluster_authorized_operations=INT32_MIN,
    )


def handle_describe_cluster(ctx: RequestContext, req: Any) -> HandlerResult:
    """Kafka's handleDescribeCluster on a broker endpoint: the live nodes at the addresses of
    the listener the request came in on, the cluster id and the controller id; a request for
    controllers (KIP-919, v1+) is refused with MISMATCHED_ENDPOINT_TYPE, an unknown endpoint
    type with UNSUPPORTED_ENDPOINT_TYPE (INVALID_REQUEST at v0, as Kafka)."""
    version = ctx.api_version
    endpoint = int(getattr(req, "endpoint_type", ENDPOINT_BROKERS))
    if endpoint not in (ENDPOINT_BROKERS, ENDPOINT_CONTROLLERS):
        error = Error.UNSUPPORTED_ENDPOINT_TYPE if version >= 1 else Error.INVALID_REQUEST
        return _describe_cluster_error(ctx, error, f"Unsupported endpoint type {endpoint}")
    if endpoint != ENDPOINT_BROKERS:
        error = Error.MISMATCHED_ENDPOINT_TYPE if version >= 1 else Error.INVALID_REQUEST
        return _describe_cluster_error(
            ctx,
            error,
            "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER",
        )
    operations = INT32_MIN  # the schema's default: not asked
    if _wants(req, "include_cluster_authorized_operations"):
        # as Kafka: 0 for a principal that may not DESCRIBE the cluster
        operations = (
            ctx.operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
            else 0
        )
    view = ctx.service.cluster()
    return build(
        response_class(DESCRIBE_CLUSTER, version),
        error_code=Error.NONE,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=view.cluster_id,
        controller_id=view.controller_id,
        brokers=[
            # every listed node is live: none is fenced (v2's include_fenced_brokers adds none)
            {
                "broker_id": b.node_id,
                "host": b.host,
                "port": b.port,
                "rack": None,
                "is_fenced": False,
            }
            for b in (broker.on(ctx.listener) for broker in view.brokers)
            if b is not None  # as Kafka: a node without this listener is not listed
        ],
        cluster_authorized_operations=operations,
    )


def describe_cluster_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return _describe_cluster_error(ctx, error, None)


# --- FindCoordinator (10) --------------------------------------------------------------------


def _coordinator(key: str, lookup: CoordinatorLookup, listener: str) -> dict[str, Any]:
    broker = lookup.broker.on(listener) if lookup.broker and lookup.error == Error.NONE else None
    error = lookup.error
    if error == Error.NONE and broker is None:
        error = Error.COORDINATOR_NOT_AVAILABLE  # the owner has no such listener
    return {
        "key": key,
        "error_code": error,
        "error_message": lookup.message,
        "node_id": broker.node_id if broker else -1,
        "host": broker.host if broker else "",
        "port": broker.port if broker else -1,
    }


def encode_find_coordinator(
    results: list[tuple[str, CoordinatorLookup]], version: int, listener: str = "PLAINTEXT"
) -> Any:
    cls = response_class(FIND_COORDINATOR, version)
    if version >= 4:  # KIP-699: batched keys
        return build(cls, coordinators=[_coordinator(k, lk, listener) for k, lk in results])
    ((key, lookup),) = results
    return build(cls, **_coordinator(key, lookup, listener))


def _keys(req: Any) -> tuple[list[str], int]:
    version = int(req.__version__)
    if version >= 4:
        return list(req.coordinator_keys), int(req.key_type)
    return [req.key], int(req.key_type) if version >= 1 else 0


GROUP_KEY: Final = 0


def _find(ctx: RequestContext, key: str, key_type: int) -> CoordinatorLookup:
    if key_type == GROUP_KEY and not ctx.allowed(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return CoordinatorLookup(Error.GROUP_AUTHORIZATION_FAILED)
    return ctx.service.find_coordinator(key, key_type)


def handle_find_coordinator(ctx: RequestContext, req: Any) -> HandlerResult:
    keys, key_type = _keys(req)
    results = [(k, _find(ctx, k, key_type)) for k in keys]
    return encode_find_coordinator(results, ctx.api_version, ctx.listener)


def find_coordinator_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    keys, _ = _keys(req)
    return encode_find_coordinator(
        [(k, CoordinatorLookup(error=error)) for k in keys], ctx.api_version, ctx.listener
    )


# --- ListOffsets (2) -------------------------------------------------------------------------


# ListOffsets' special timestamps: LATEST (-1), EARLIEST (-2), EARLIEST_LOCAL (-4)
_EMPTY_LOG_AT_ZERO: Final = frozenset({-1, -2, -4})


def _list_offsets(ctx: RequestContext, req: Any, error: Error | None) -> HandlerResult:
    topics: Mapping[str, int] = {} if error is not None else ctx.service.topics

    def partition(name: str, index: int, timestamp: int) -> dict[str, Any]:
        err = error
        if err is None:
            if not ctx.allowed(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                err = Error.TOPIC_AUTHORIZATION_FAILED
            elif is_known_partition(topics, name, index):
                err = Error.NONE
            else:
                err = Error.UNKNOWN_TOPIC_OR_PARTITION
        # every log is empty, as Apache Kafka answers for one: earliest, latest and earliest-local
        # are offset 0; a timestamp, max-timestamp and latest-tiered find no record (-1). No epoch:
        # Metadata reports none either, so clients skip KIP-320's validation
        found = err == Error.NONE and timestamp in _EMPTY_LOG_AT_ZERO
        return {
            "partition_index": index,
            "error_code": err,
            "timestamp": -1,
            "offset": 0 if found else -1,
            "leader_epoch": -1,
        }

    return build(
        response_class(LIST_OFFSETS, ctx.api_version),
        topics=[
            {
                "name": t.name,
                "partitions": [
                    partition(t.name, p.partition_index, p.timestamp) for p in t.partitions
                ],
            }
            for t in req.topics
        ],
    )


def handle_list_offsets(ctx: RequestContext, req: Any) -> HandlerResult:
    return _list_offsets(ctx, req, None)


def list_offsets_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return _list_offsets(ctx, req, error)


# --- Fetch (1) -------------------------------------------------------------------------------


def _fetch_response(
    ctx: RequestContext,
    req: Any,
    errors: dict[tuple[str, int], Error],
    top_error: Error = Error.NONE,
) -> HandlerResult:
    return build(
        response_class(FETCH, ctx.api_version),
        error_code=top_error,
        session_id=0,  # no fetch sessions: clients keep sending full fetches
        responses=[
            {
                "topic": t.topic,
                "partitions": [
                    {
                        "partition_index": p.partition,
                        "error_code": errors.get((t.topic, p.partition), Error.NONE),
                        "high_watermark": 0,
                        "last_stable_offset": 0,
                        "log_start_offset": 0,
                        "aborted_transactions": None,
                        "preferred_read_replica": -1,
                        # empty bytes, never null: kafka-python crashes on MemoryRecords(None)
                        "records": b"",
                    }
                    for p in t.partitions
                ],
            }
            for t in req.topics
        ],
    )


async def handle_fetch(ctx: RequestContext, req: Any) -> HandlerResult:
    topics = ctx.service.topics
    errors: dict[tuple[str, int], Error] = {}
    for t in req.topics:
        readable = ctx.allowed(AclOperation.READ, ResourceType.TOPIC, t.topic)
        for p in t.partitions:
            if not readable:
                errors[(t.topic, p.partition)] = Error.TOPIC_AUTHORIZATION_FAILED
            elif not is_known_partition(topics, t.topic, p.partition):
                errors[(t.topic, p.partition)] = Error.UNKNOWN_TOPIC_OR_PARTITION
    wait_ms = min(ms(req.max_wait), FETCH_MAX_WAIT_CAP_MS)
    # Long-poll like a broker with no new data (otherwise clients spin); errors and
    # min_bytes <= 0 answer at once, and a closed connection ends the wait.
    if wait_ms > 0 and req.min_bytes > 0 and not errors:
        if ctx.closed is None:
            await asyncio.sleep(wait_ms / 1000)
        else:
            await asyncio.wait([ctx.closed], timeout=wait_ms / 1000)
    return _fetch_response(ctx, req, errors)


def fetch_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    if ctx.api_version >= 7:
        return build(response_class(FETCH, ctx.api_version), error_code=error, session_id=0)
    errors = {(t.topic, p.partition): error for t in req.topics for p in t.partitions}
    return _fetch_response(ctx, req, errors)


# --- Produce (0) -----------------------------------------------------------------------------


def handle_produce(ctx: RequestContext, req: Any) -> HandlerResult:
    if req.acks == 0:
        return NO_RESPONSE  # acks=0: the client reads no reply, sending one desyncs it
    return produce_error(ctx, req, Error.POLICY_VIOLATION)


def produce_error(ctx: RequestContext, req: Any, error: Error) -> HandlerResult:
    return build(
        response_class(PRODUCE, ctx.api_version),
        responses=[
            {
                "name": t.name,
                "partition_responses": [
                    {
                        "index": p.index,
                        "error_code": error,
                        "base_offset": -1,
                        "log_append_time": None,
                        "log_start_offset": -1,
                        "record_errors": [],
                        "error_message": PRODUCE_REFUSED_MESSAGE,
                    }
                    for p in t.partition_data
                ],
            }
            for t in req.topic_data
        ],
    )


APIS: Final[tuple[Api, ...]] = (
    Api(PRODUCE, "Produce", 3, 9, handle_produce, produce_error),
    Api(FETCH, "Fetch", 4, 12, handle_fetch, fetch_error),
    Api(LIST_OFFSETS, "ListOffsets", 1, 11, handle_list_offsets, list_offsets_error),
    Api(METADATA, "Metadata", 0, 13, handle_metadata, None),
    Api(FIND_COORDINATOR, "FindCoordinator", 0, 6, handle_find_coordinator, find_coordinator_error),
    Api(DESCRIBE_CLUSTER, "DescribeCluster", 0, 2, handle_describe_cluster, describe_cluster_error),
)
