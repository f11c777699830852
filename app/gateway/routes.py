"""Which requests the gateway answers and which it relays, and at which versions.

Group APIs, ApiVersions, the SASL exchange and the ACL and SCRAM APIs (our authorizer and our
users) are the coordinator's, on every port. FindCoordinator is ours for groups and relayed for
transactions. Every other API the upstream advertises is relayed to the port's broker; the
replies that name brokers are rewritten (app/gateway/rewrite.py). Produce and Fetch are
advertised below KIP-951's versions (Produce v10, Fetch v16), whose replies carry broker
endpoints in tagged fields. The transactional offset APIs (AddOffsetsToTxn, TxnOffsetCommit)
are not advertised: offsets live here, so they cannot commit atomically with an upstream
transaction, and a client that checks ApiVersions refuses sendOffsetsToTransaction with its own
clear error. KIP-848's and KIP-932's group APIs are not advertised either (the upstream's own
coordinator must never see a group that goes through the gateway).
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Mapping
from typing import Final

from kio.index import load_request_schema


class Route(enum.Enum):
    LOCAL = "local"  # the coordinator answers
    API_VERSIONS = "api_versions"  # ours, with the upstream's ranges for relayed APIs
    FIND_COORDINATOR = "find_coordinator"  # ours for groups, relayed for transactions
    RELAY = "relay"  # to the broker, reply as it comes
    METADATA = "metadata"  # relayed, brokers rewritten, topics learnt
    DESCRIBE_CLUSTER = "describe_cluster"  # relayed, brokers rewritten


PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
API_VERSIONS: Final = 18
DESCRIBE_CLUSTER: Final = 60

LOCAL_APIS: Final = frozenset(
    {
        8,  # OffsetCommit
        9,  # OffsetFetch
        11,  # JoinGroup
        12,  # Heartbeat
        13,  # LeaveGroup
        14,  # SyncGroup
        15,  # DescribeGroups
        16,  # ListGroups
        17,  # SaslHandshake
        29,  # DescribeAcls
        30,  # CreateAcls
        31,  # DeleteAcls
        36,  # SaslAuthenticate
        42,  # DeleteGroups
        47,  # OffsetDelete
        50,  # DescribeUserScramCredentials
        51,  # AlterUserScramCredentials
    }
)
NOT_ADVERTISED: Final = frozenset(
    {
        25,  # AddOffsetsToTxn
        28,  # TxnOffsetCommit
        68,  # ConsumerGroupHeartbeat (KIP-848)
        69,  # ConsumerGroupDescribe
        76,  # ShareGroupHeartbeat (KIP-932)
        77,  # ShareGroupDescribe
        78,  # ShareFetch
        79,  # ShareAcknowledge
        83,  # InitializeShareGroupState
        84,  # ReadShareGroupState
        85,  # WriteShareGroupState
        86,  # DeleteShareGroupState
        87,  # ReadShareGroupStateSummary
        90,  # DescribeShareGroupOffsets
        91,  # AlterShareGroupOffsets
        92,  # DeleteShareGroupOffsets
        88,  # StreamsGroupHeartbeat (KIP-1071, advertised by Kafka 4.1+)
        89,  # StreamsGroupDescribe
        93,  # StreamsGroupTopologyDescriptionUpdate
    }
)
# the newest version relayed, where it is not the upstream's own
CAPS: Final[Mapping[int, int]] = {
    PRODUCE: 9,
    FETCH: 15,
    METADATA: 13,  # the newest our codec rewrites
    FIND_COORDINATOR: 6,
    DESCRIBE_CLUSTER: 2,
}
# what ApiVersions advertises for relayed APIs while the upstream's own ranges are unknown (it
# has been unreachable since the start): Apache Kafka 4.0's ranges, capped. A client keeps an
# answer for its connection's life; without these it would never relay on that connection. An
# older upstream refuses a version it lacks by closing the connection; the client's next one
# gets the upstream's real ranges.
BASELINE: Final[Mapping[int, tuple[int, int]]] = {
    PRODUCE: (3, 12),
    FETCH: (4, 17),
    2: (1, 10),  # ListOffsets
    METADATA: (0, 13),
    FIND_COORDINATOR: (0, 6),
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    26: (0, 5),  # EndTxn
    32: (1, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    37: (0, 3),  # CreatePartitions
    44: (0, 1),  # IncrementalAlterConfigs
    DESCRIBE_CLUSTER: (0, 1),
}
_ROUTES: Final[Mapping[int, Route]] = {
    **{key: Route.LOCAL for key in LOCAL_APIS},
    API_VERSIONS: Route.API_VERSIONS,
    FIND_COORDINATOR: Route.FIND_COORDINATOR,
    METADATA: Route.METADATA,
    DESCRIBE_CLUSTER: Route.DESCRIBE_CLUSTER,
}


def route(api_key: int) -> Route | None:
    """How a request of `api_key` is served; None: it is not served through the gateway."""
    if api_key in NOT_ADVERTISED:
        return None
    return _ROUTES.get(api_key, Route.RELAY)


def advertised(
    local: Mapping[int, tuple[int, int]],
    upstream: Mapping[int, tuple[int, int]],
    relayable: frozenset[int] | None = None,
    caps: Mapping[int, int] | None = None,
) -> dict[int, tuple[int, int]]:
    """ApiVersions through the gateway: ours for what we answer, FindCoordinator at the
    versions both sides speak, the upstream's (capped) for what is relayed; with `relayable`
    (the authorizer on), only those relayed APIs, below their `caps`."""
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in local.items():
        if route(key) in (Route.LOCAL, Route.API_VERSIONS):
            out[key] = (lo, hi)
    for key, (lo, hi) in upstream.items():
        r = route(key)
        if r is None or r in (Route.LOCAL, Route.API_VERSIONS):
            continue
        if relayable is not None and key not in relayable:
            continue
        hi = min(hi, CAPS.get(key, hi), (caps or {}).get(key, hi))
        if r is Route.FIND_COORDINATOR and key in local:
            lo, hi = max(lo, local[key][0]), min(hi, local[key][1])
        if lo <= hi:
            out[key] = (lo, hi)
    return dict(sorted(out.items()))


class Malformed(ValueError):
    """A request the gateway had to read and could not."""


_HEADER: Final = struct.Struct(">hhih")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 28:
            raise Malformed("truncated varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def body_offset(frame: bytes, flexible: bool) -> int:
    """Where the body of a request frame starts (after the v1 or v2 header)."""
    if len(frame) < _HEADER.size:
        raise Malformed("request header truncated")
    (client_id_len,) = _INT16.unpack_from(frame, 8)
    pos: int = 10 + max(int(client_id_len), 0)
    if flexible:
        count, pos = _uvarint(frame, pos)
        for _ in range(count):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    if pos > len(frame):
        raise Malformed("request header truncated")
    return pos


def _skip_string(frame: bytes, pos: int, flexible: bool, api: str) -> int:
    """Past a nullable string at `pos`: compact (flexible versions) or int16-sized."""
    if flexible:
        n, pos = _uvarint(frame, pos)
        return pos + max(n - 1, 0)
    if pos + 2 > len(frame):
        raise Malformed(f"{api} body truncated")
    (n,) = _INT16.unpack_from(frame, pos)
    return pos + 2 + max(int(n), 0)


def _string(frame: bytes, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n, pos = _uvarint(frame, pos)
        n -= 1
    else:
        if pos + 2 > len(frame):
            raise Malformed("string truncated")
        (n,) = _INT16.unpack_from(frame, pos)
        pos += 2
    if n < 0:
        return None, pos
    if pos + n > len(frame):
        raise Malformed("string truncated")
    try:
        return frame[pos : pos + n].decode(), pos + n
    except UnicodeDecodeError:
        raise Malformed("a string is not UTF-8") from None


def _count(frame: bytes, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length (-1: null) at `pos`, and where its elements start."""
    if flexible:
        n, pos = _uvarint(frame, pos)
        return n - 1, pos
    if pos + 4 > len(frame):
        raise Malformed("array truncated")
    return int(_INT32.unpack_from(frame, pos)[0]), pos + 4


def _skip_tags(frame: bytes, pos: int) -> int:
    count, pos = _uvarint(frame, pos)
    for _ in range(count):
        _, pos = _uvarint(frame, pos)
        size, pos = _uvarint(frame, pos)
        pos += size
    return pos


def produce_topics(frame: bytes, version: int) -> tuple[str | None, int, list[str]]:
    """(transactional id, acks, topic names) of a Produce request (v3-v9), its record batches
    stepped over, not read."""
    flexible = version >= 9
    pos = body_offset(frame, flexible)
    transactional_id = None
    if version >= 3:
        transactional_id, pos = _string(frame, pos, flexible)
    if pos + 6 > len(frame):
        raise Malformed("Produce body truncated")
    acks = int(_INT16.unpack_from(frame, pos)[0])
    topics: list[str] = []
    n, pos = _count(frame, pos + 6, flexible)
    for _ in range(max(n, 0)):
        name, pos = _string(frame, pos, flexible)
        if name is None:
            raise Malformed("a Produce topic has no name")
        topics.append(name)
        partitions, pos = _count(frame, pos, flexible)
        for _ in range(max(partitions, 0)):
            size, pos = _count(frame, pos + 4, flexible)  # index, then the records' size
            pos += max(size, 0)
            if flexible:
                pos = _skip_tags(frame, pos)
        if flexible:
            pos = _skip_tags(frame, pos)
        if pos > len(frame):
            raise Malformed("Produce body truncated")
    return transactional_id, acks, topics


def produce_acks(frame: bytes, version: int) -> int:
    """The acks of a Produce request (0: the broker sends no reply)."""
    flexible = version >= 9
    pos = body_offset(frame, flexible)
    pos = _skip_string(frame, pos, flexible, "Produce")  # transactional_id
    if pos + 2 > len(frame):
        raise Malformed("Produce body truncated")
    return int(_INT16.unpack_from(frame, pos)[0])


def find_coordinator_key_type(frame: bytes, version: int) -> int:
    """FindCoordinator's key type: 0 (group) before v1; v1+: after the key (v1-3) or first
    (v4+, batched)."""
    if version == 0:
        return 0
    flexible = version >= 3
    pos = body_offset(frame, flexible)
    if version < 4:
        pos = _skip_string(frame, pos, flexible, "FindCoordinator")  # the key
    if pos + 1 > len(frame):
        raise Malformed("FindCoordinator body truncated")
    return frame[pos]


@functools.cache
def api_name(api_key: int) -> str:
    """Kafka's name of an API, relayed ones included (the node's table knows only its own)."""
    for version in range(0, 20):
        try:
            return str(load_request_schema(api_key, version).__name__).removesuffix("Request")
        except Exception:
            continue
    return f"api#{api_key}"
