"""Our ACLs on relayed requests, checked before the upstream sees a byte of them.

As Kafka's KafkaApis authorizes: Produce needs TOPIC WRITE (and TRANSACTIONAL_ID WRITE for a
transactional one), Fetch TOPIC READ (topics named by id are named through the upstream's
Metadata), ListOffsets and OffsetForLeaderEpoch TOPIC DESCRIBE, Metadata lists only the topics
the principal may DESCRIBE and creates none it may not CREATE, and the topic, config and
transaction APIs check what Kafka checks. A resource the principal may not touch gets that API's
own authorization error; the others go upstream in a request without it, and the denied answers
join the upstream's reply. A request whose every resource is denied never leaves the node.

The common case costs no decoding: a Produce is walked for its topic names only (its record
batches are not read), and a request whose resources are all allowed goes upstream as it came.
Only a request with a denied resource is decoded and written again (kio), with its reply.
With the authorizer on, only the APIs below are relayed (`AUTHORIZED`); the rest are not
advertised (routes.advertised), so the gateway's own upstream principal is never lent to a
request whose check we do not make.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from kio.serial import entity_reader

from app.gateway import rewrite
from app.gateway.routes import Malformed, body_offset, produce_topics
from app.kafka.apis import DEFAULT_DECODE_LIMITS, DecodeLimits
from app.kafka.bounded import check_request
from app.kafka.codec import (
    build,
    element_class,
    encode_body,
    field_infos,
    request_class,
    response_class,
    response_header_flexible,
)
from app.kafka.tagged import strip_unknown_tags
from app.security.acl import CLUSTER_NAME, AclOperation, ResourceType

Op = AclOperation
TOPIC: Final = ResourceType.TOPIC
CLUSTER: Final = ResourceType.CLUSTER
GROUP: Final = ResourceType.GROUP
TRANSACTIONAL_ID: Final = ResourceType.TRANSACTIONAL_ID

TOPIC_AUTHORIZATION_FAILED: Final = 29
GROUP_AUTHORIZATION_FAILED: Final = 30
CLUSTER_AUTHORIZATION_FAILED: Final = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED: Final = 53
OPERATION_NOT_ATTEMPTED: Final = 55
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
UNKNOWN_TOPIC_ID: Final = 100
# a checked relayed request may name this many times COORD_MAX_REQUEST_ELEMENTS (a consumer's
# Fetch names every partition it is assigned)
RELAYED_ELEMENTS_FACTOR: Final = 10
_ERROR_OF: Final = {
    TOPIC: TOPIC_AUTHORIZATION_FAILED,
    GROUP: GROUP_AUTHORIZATION_FAILED,
    CLUSTER: CLUSTER_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID: TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}


class Decider(Protocol):
    """The node's SecurityManager, as far as relayed requests need it."""

    def authorize(
        self,
        principal: str,
        host: str,
        op: AclOperation,
        rtype: ResourceType,
        name: str,
        *,
        log_denial: bool = True,
    ) -> bool: ...

    def authorize_any(
        self, principal: str, host: str, op: AclOperation, rtype: ResourceType
    ) -> bool: ...

    def authorized_operations(
        self, principal: str, host: str, rtype: ResourceType, name: str
    ) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Caller:
    """Who sent the request, and what names topic ids (the upstream's Metadata)."""

    decider: Decider
    principal: str
    host: str
    topic_names: Mapping[Any, str]
    limits: DecodeLimits = DEFAULT_DECODE_LIMITS

    def may(self, op: AclOperation, rtype: ResourceType, name: str, *, log: bool = True) -> bool:
        return self.decider.authorize(self.principal, self.host, op, rtype, name, log_denial=log)

    def operations(self, rtype: ResourceType, name: str) -> int:
        return self.decider.authorized_operations(self.principal, self.host, rtype, name)


Edit = Callable[[Any], Any]  # a decoded upstream reply -> the reply the client gets


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    """What becomes of a request a check touched: `frame` goes upstream and `edit` is applied to
    its reply; or, with `frame` None, `reply` is the whole answer (None: no answer, acks=0)."""

    frame: bytes | None
    edit: Edit | None = None
    reply: bytes | None = None


# --- one request, decoded -------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class _Request:
    api_key: int
    version: int
    frame: bytes
    header_end: int
    body: Any

    @classmethod
    def decode(cls, frame: bytes, api_key: int, version: int, limits: DecodeLimits) -> _Request:
        """The request as kio reads it, once the bounded walk (app/kafka/bounded.py) passed:
        kio's native reader reserves memory from the counts a frame claims."""
        schema = request_class(api_key, version)
        try:
            if check_request(
                schema,
                frame,
                max_elements=limits.max_request_elements * RELAYED_ELEMENTS_FACTOR,
                max_client_id=limits.max_client_id_bytes,
            ):
                frame = strip_unknown_tags(schema, frame)
            header_end = body_offset(frame, int(schema.__header_schema__.__version__) >= 2)
            body, _ = entity_reader(schema)(frame, header_end)
        except Malformed:
            raise
        except Exception as e:
            raise Malformed(f"undecodable body: {e!r}") from None
        return cls(api_key, version, frame, header_end, body)

    def with_body(self, **changes: Any) -> bytes:
        """The request frame (no size prefix) with its body changed, its header as it came."""
        body = dataclasses.replace(self.body, **changes)
        return self.frame[: self.header_end] + encode_body(body)

    def answer(self, **values: Any) -> bytes:
        """A reply of the request's API and version, made here."""
        cls = response_class(self.api_key, self.version)
        correlation_id = int.from_bytes(self.frame[4:8], "big", signed=True)
        body = build(cls, **values)
        return rewrite.encode(correlation_id, response_header_flexible(cls), body)

    def reply_class(self) -> type[Any]:
        return response_class(self.api_key, self.version)


# --- resources in arrays: the denied ones out of the request, their answers into the reply ------

_INDEX: Final = ("partition_index", "index", "partition")
_REQUEST_PARTITIONS: Final = ("partition_data", "partitions", "partition_indexes")
_REPLY_PARTITIONS: Final = ("partition_responses", "partitions", "results_by_partition")
_IDENTITY: Final = ("name", "topic", "topic_id", "resource_type", "resource_name")
_STRING_IDENTITY: Final = ("name", "transactional_id", "key")


def _first(cls: type[Any], names: tuple[str, ...]) -> str | None:
    have = {info.name for info in field_infos(cls)}
    return next((n for n in names if n in have), None)


def _partition_indexes(element: Any) -> list[int]:
    field = next((n for n in _REQUEST_PARTITIONS if hasattr(element, n)), None)
    if field is None:
        return []
    out = []
    for p in getattr(element, field) or ():
        if isinstance(p, int):
            out.append(int(p))
        else:
            index = next(n for n in _INDEX if hasattr(p, n))
            out.append(int(getattr(p, index)))
    return out


def _answer_for(reply_element: type[Any], element: Any, code: int) -> Any:
    """The reply's entry for a request's `element` that failed with `code`."""
    values: dict[str, Any] = {}
    if isinstance(element, str):
        key = _first(reply_element, _STRING_IDENTITY)
        if key is not None:
            values[key] = element
    else:
        for name in _IDENTITY:
            if hasattr(element, name) and _first(reply_element, (name,)):
                values[name] = getattr(element, name)
    error = _first(reply_element, ("error_code",))
    if error is not None:
        values[error] = code
        return build(reply_element, **values)
    partitions = _first(reply_element, _REPLY_PARTITIONS)
    if partitions is not None:
        cls = element_class(reply_element, partitions)
        index = _first(cls, _INDEX)
        error = _first(cls, ("error_code", "partition_error_code"))
        assert index is not None and error is not None
        extra: dict[str, Any] = {}
        if _first(cls, ("records",)):
            extra["records"] = b""  # as Kafka: empty, not null (librdkafka refuses a null set)
        values[partitions] = tuple(
            build(cls, **{index: i, error: code}, **extra) for i in _partition_indexes(element)
        )
    return build(reply_element, **values)


Resource = Callable[[Any, "Caller"], tuple[ResourceType, str] | None]  # None: an unknown id


@dataclasses.dataclass(frozen=True, slots=True)
class Entries:
    """An API whose request names its resources in one array and whose reply answers each."""

    request: str
    reply: str
    op: AclOperation
    resource: Resource

    def check(
        self, req: _Request, caller: Caller, *, all_or_nothing: bool = False, keep: bool = False
    ) -> Verdict | None:
        """None when every resource is allowed. Else the request without the denied ones and
        an edit adding their answers, or (none allowed, unless `keep`; any denied, with
        `all_or_nothing`) the whole reply made here."""
        allowed: list[Any] = []
        denied: list[tuple[Any, int]] = []
        for element in getattr(req.body, self.request) or ():
            code = self.refusal(element, caller)
            if code is None:
                allowed.append(element)
            else:
                denied.append((element, code))
        if not denied:
            return None
        element_cls = element_class(req.reply_class(), self.reply)
        answers = tuple(_answer_for(element_cls, e, code) for e, code in denied)
        if all_or_nothing:
            answers += tuple(_answer_for(element_cls, e, OPERATION_NOT_ATTEMPTED) for e in allowed)
            return Verdict(None, reply=req.answer(**{self.reply: answers}))
        if not allowed and not keep:
            return Verdict(None, reply=req.answer(**{self.reply: answers}))
        field = self.reply

        def edit(body: Any) -> Any:
            return dataclasses.replace(body, **{field: tuple(getattr(body, field)) + answers})

        return Verdict(req.with_body(**{self.request: tuple(allowed)}), edit)

    def refusal(self, element: Any, caller: Caller) -> int | None:
        resource = self.resource(element, caller)
        if resource is None:
            return UNKNOWN_TOPIC_ID
        rtype, name = resource
        if caller.may(self.op, rtype, name):
            return None
        return _ERROR_OF.get(rtype, CLUSTER_AUTHORIZATION_FAILED)


def _topic(element: Any, caller: Caller) -> tuple[ResourceType, str] | None:
    if isinstance(element, str):
        return TOPIC, element
    name = getattr(element, "name", None) or getattr(element, "topic", None)
    if name:
        return TOPIC, str(name)
    topic_id = getattr(element, "topic_id", None)
    known = caller.topic_names.get(topic_id) if topic_id is not None else None
    return None if known is None else (TOPIC, known)


def _config_resource(element: Any, caller: Caller) -> tuple[ResourceType, str]:
    kind = int(element.resource_type)
    if kind == 2:
        return TOPIC, str(element.resource_name)
    if kind == 32:
        return GROUP, str(element.resource_name)
    return CLUSTER, CLUSTER_NAME  # brokers, broker loggers, client metrics


def _transactional_id(element: Any, caller: Caller) -> tuple[ResourceType, str]:
    return TRANSACTIONAL_ID, str(element)


# --- the APIs --------------------------------------------------------------------------------

Check = Callable[[bytes, int, Caller], "Verdict | None"]


def _entries(api_key: int, spec: Entries | Callable[[int], Entries]) -> Check:
    def check(frame: bytes, version: int, caller: Caller) -> Verdict | None:
        entries = spec if isinstance(spec, Entries) else spec(version)
        return entries.check(_Request.decode(frame, api_key, version, caller.limits), caller)

    return check


_PRODUCE: Final = Entries("topic_data", "responses", Op.WRITE, _topic)


def _produce(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    transactional_id, acks, topics = produce_topics(frame, version)
    refused = transactional_id is not None and not caller.may(
        Op.WRITE, TRANSACTIONAL_ID, transactional_id
    )
    if not refused and all(caller.may(Op.WRITE, TOPIC, t) for t in topics):
        return None  # the usual case: relayed as it came, its batches never read
    req = _Request.decode(frame, 0, version, caller.limits)
    if refused:
        element_cls = element_class(req.reply_class(), "responses")
        answers = tuple(
            _answer_for(element_cls, t, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
            for t in req.body.topic_data
        )
        verdict = Verdict(None, reply=req.answer(responses=answers))
    else:
        verdict = _PRODUCE.check(req, caller) or Verdict(frame)
    if acks == 0 and verdict.frame is None:
        return Verdict(None)  # the client waits for no reply
    return verdict


_FETCH: Final = Entries("topics", "responses", Op.READ, _topic)


def _fetch(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    req = _Request.decode(frame, 1, version, caller.limits)
    # an incremental fetch goes upstream even when emptied: its session's epoch moves on
    incremental = version >= 7 and int(req.body.session_id) != 0
    return _FETCH.check(req, caller, keep=incremental)


def _metadata(frame: bytes, version: int, caller: Caller) -> Verdict:
    req = _Request.decode(frame, 3, version, caller.limits)
    requested = req.body.topics
    # every topic: a null list, or in v0 an empty one (so a v0 list emptied of its denied
    # topics asks for every topic: the reply keeps only the named ones)
    every = requested is None or (version == 0 and not requested)
    denied: list[Any] = []
    kept: list[Any] = []
    named: set[str] = set()
    for t in requested or ():
        resource = _topic(t, caller)
        if resource is None or not caller.may(Op.DESCRIBE, TOPIC, resource[1]):
            denied.append(t)
        else:
            kept.append(t)
            named.add(resource[1])
    creating = bool(getattr(req.body, "allow_auto_topic_creation", False))
    may_create = caller.may(Op.CREATE, CLUSTER, CLUSTER_NAME, log=False)
    no_create = set()
    if creating and not may_create:
        no_create = {str(t.name) for t in kept if not caller.may(Op.CREATE, TOPIC, str(t.name))}
    changes: dict[str, Any] = {}
    if denied:
        changes["topics"] = tuple(kept)
    if no_create:
        changes["allow_auto_topic_creation"] = False
    topic_ops = bool(getattr(req.body, "include_topic_authorized_operations", False))
    cluster_ops = bool(getattr(req.body, "include_cluster_authorized_operations", False))
    reply_cls = req.reply_class()
    topic_cls = element_class(reply_cls, "topics")

    def edit(body: Any) -> Any:
        topics = []
        for t in body.topics:
            name = str(t.name) if t.name is not None else None
            if name is None:
                continue
            if every:
                if not caller.may(Op.DESCRIBE, TOPIC, name, log=False):
                    continue  # all topics asked for: the ones it may not see are left out
            elif name not in named:
                continue  # not asked for (or asked for and denied: answered below)
            if name in no_create and int(t.error_code) == UNKNOWN_TOPIC_OR_PARTITION:
                t = dataclasses.replace(
                    t, error_code=type(t.error_code)(TOPIC_AUTHORIZATION_FAILED)
                )
            elif topic_ops and int(t.error_code) == 0:
                t = dataclasses.replace(
                    t, topic_authorized_operations=caller.operations(TOPIC, name)
                )
            topics.append(t)
        for t in denied:
            code = TOPIC_AUTHORIZATION_FAILED if t.name is not None else UNKNOWN_TOPIC_ID
            topics.append(_metadata_topic(topic_cls, t, code))
        out = dataclasses.replace(body, topics=tuple(topics))
        if cluster_ops and _first(reply_cls, ("cluster_authorized_operations",)):
            out = dataclasses.replace(
                out, cluster_authorized_operations=caller.operations(CLUSTER, CLUSTER_NAME)
            )
        return out

    return Verdict(req.with_body(**changes) if changes else frame, edit)


def _metadata_topic(cls: type[Any], requested: Any, code: int) -> Any:
    values: dict[str, Any] = {"name": requested.name, "error_code": code}
    if getattr(requested, "topic_id", None) is not None:
        values["topic_id"] = requested.topic_id
    return build(cls, **values)


def _describe_cluster(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    req = _Request.decode(frame, 60, version, caller.limits)
    if not req.body.include_cluster_authorized_operations:
        return None
    bits = caller.operations(CLUSTER, CLUSTER_NAME)
    return Verdict(
        frame, lambda body: dataclasses.replace(body, cluster_authorized_operations=bits)
    )


def _single(api_key: int, rtype: ResourceType, op: AclOperation, field: str) -> Check:
    """An API with one resource named by `field` and one error code in its reply."""

    def check(frame: bytes, version: int, caller: Caller) -> Verdict | None:
        req = _Request.decode(frame, api_key, version, caller.limits)
        name = getattr(req.body, field)
        if caller.may(op, rtype, str(name)):
            return None
        return Verdict(None, reply=req.answer(error_code=_ERROR_OF[rtype]))

    return check


def _init_producer_id(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    req = _Request.decode(frame, 22, version, caller.limits)
    transactional_id = req.body.transactional_id
    if transactional_id is not None:
        if caller.may(Op.WRITE, TRANSACTIONAL_ID, str(transactional_id)):
            return None
        code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif caller.may(Op.IDEMPOTENT_WRITE, CLUSTER, CLUSTER_NAME, log=False) or (
        caller.decider.authorize_any(caller.principal, caller.host, Op.WRITE, TOPIC)
    ):
        return None  # an idempotent producer: WRITE on any topic will do (KIP-679)
    else:
        code = CLUSTER_AUTHORIZATION_FAILED
    return Verdict(None, reply=req.answer(error_code=code, producer_id=-1, producer_epoch=-1))


def _add_partitions_to_txn(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    req = _Request.decode(frame, 24, version, caller.limits)
    entries = Entries("v3_and_below_topics", "results_by_topic_v3_and_below", Op.WRITE, _topic)
    transactional_id = str(req.body.v3_and_below_transactional_id)
    if caller.may(Op.WRITE, TRANSACTIONAL_ID, transactional_id):
        return entries.check(req, caller, all_or_nothing=True)  # Kafka adds none then
    element_cls = element_class(req.reply_class(), entries.reply)
    answers = tuple(
        _answer_for(element_cls, t, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        for t in req.body.v3_and_below_topics
    )
    return Verdict(None, reply=req.answer(results_by_topic_v3_and_below=answers))


def _find_coordinator(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    """Transactions' coordinators (a group's is answered here, before any check)."""
    req = _Request.decode(frame, 10, version, caller.limits)
    if version >= 4:
        return Entries("coordinator_keys", "coordinators", Op.DESCRIBE, _transactional_id).check(
            req, caller
        )
    if caller.may(Op.DESCRIBE, TRANSACTIONAL_ID, str(req.body.key)):
        return None
    return Verdict(
        None,
        reply=req.answer(error_code=TRANSACTIONAL_ID_AUTHORIZATION_FAILED, node_id=-1, port=-1),
    )


def _create_topics(frame: bytes, version: int, caller: Caller) -> Verdict | None:
    if caller.may(Op.CREATE, CLUSTER, CLUSTER_NAME, log=False):
        return None
    return Entries("topics", "topics", Op.CREATE, _topic).check(
        _Request.decode(frame, 19, version, caller.limits), caller
    )


def _delete_topics(version: int) -> Entries:
    return Entries("topics" if version >= 6 else "topic_names", "responses", Op.DELETE, _topic)


CHECKS: Final[Mapping[int, Check]] = {
    0: _produce,
    1: _fetch,
    2: _entries(2, Entries("topics", "topics", Op.DESCRIBE, _topic)),
    3: _metadata,
    10: _find_coordinator,
    19: _create_topics,
    20: _entries(20, _delete_topics),
    21: _entries(21, Entries("topics", "topics", Op.DELETE, _topic)),
    22: _init_producer_id,
    23: _entries(23, Entries("topics", "topics", Op.DESCRIBE, _topic)),
    24: _add_partitions_to_txn,
    26: _single(26, TRANSACTIONAL_ID, Op.WRITE, "transactional_id"),
    32: _entries(32, Entries("resources", "results", Op.DESCRIBE_CONFIGS, _config_resource)),
    33: _entries(33, Entries("resources", "responses", Op.ALTER_CONFIGS, _config_resource)),
    37: _entries(37, Entries("topics", "results", Op.ALTER, _topic)),
    44: _entries(44, Entries("resources", "responses", Op.ALTER_CONFIGS, _config_resource)),
    60: _describe_cluster,
    61: _entries(61, Entries("topics", "topics", Op.READ, _topic)),
    75: _entries(75, Entries("topics", "topics", Op.DESCRIBE, _topic)),
}
# APIs Kafka checks nothing for (the client's telemetry): relayed with the authorizer on too
UNCHECKED: Final = frozenset({71, 72})
AUTHORIZED: Final = frozenset(CHECKS) | UNCHECKED
# the newest version whose shape a check knows, where it is not the relay's cap
CAPS: Final[Mapping[int, int]] = {24: 3}  # AddPartitionsToTxn v4+ is between brokers


def check(frame: bytes, api_key: int, version: int, caller: Caller) -> Verdict | None:
    """None: relay the request as it came. Raises Malformed for a request it cannot read."""
    found = CHECKS.get(api_key)
    if found is None:
        return None
    cap = CAPS.get(api_key)
    if cap is not None and version > cap:
        raise Malformed(f"v{version} is not relayed with the authorizer on (at most v{cap})")
    return found(frame, version, caller)
