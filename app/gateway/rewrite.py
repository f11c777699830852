"""The replies the gateway rewrites: those that carry upstream broker addresses.

Metadata, DescribeCluster and FindCoordinator (transactions) name brokers by id, host and
port; a client must be sent to the gateway port of each broker instead (app/gateway/
addresses.py). Only these replies are decoded (kio); every other relayed reply passes through as
the broker wrote it. KIP-951's endpoints in Produce and Fetch replies are avoided by advertising
those APIs below the versions that carry them (app/gateway/routes.py).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable, Sequence
from typing import Any, Final

from kio.serial import entity_reader

from app.kafka.codec import (
    build,
    element_class,
    encode_body,
    frame_response,
    has_field,
    response_class,
    response_header_flexible,
)
from app.kafka.tagged import strip_unknown_tags

_CORRELATION: Final = struct.Struct(">i")

# broker id -> its (host, port) at the gateway, None when it cannot be placed
Place = Callable[[int], tuple[str, int] | None]


def decode(frame: bytes, api_key: int, version: int) -> tuple[int, bool, Any]:
    """(correlation id, flexible header, body) of a reply frame (size prefix included)."""
    cls = response_class(api_key, version)
    flexible = response_header_flexible(cls)
    (correlation_id,) = _CORRELATION.unpack_from(frame, 4)
    data = frame[4:]
    try:
        _, offset = entity_reader(cls.__header_schema__)(data, 0)
        body, _ = entity_reader(cls)(data, offset)
    except KeyError:  # a tagged field kio does not know: skipped, as the protocol says
        data = strip_unknown_tags(cls, data)
        _, offset = entity_reader(cls.__header_schema__)(data, 0)
        body, _ = entity_reader(cls)(data, offset)
    return correlation_id, flexible, body


def encode(correlation_id: int, flexible: bool, body: Any) -> bytes:
    return frame_response(correlation_id, flexible, encode_body(body))


def _brokers(
    cls: type[Any], brokers: Any, place: Place, coordinators: Sequence[tuple[int, str, int]]
) -> tuple[Any, ...]:
    broker_cls = element_class(cls, "brokers")
    # Metadata's brokers have a node_id, DescribeCluster's a broker_id (`build` would drop
    # the other name silently: every coordinator entry broker 0)
    key = "node_id" if has_field(broker_cls, "node_id") else "broker_id"
    out = []
    for b in brokers:
        at = place(int(getattr(b, key)))
        if at is not None:
            out.append(dataclasses.replace(b, host=at[0], port=at[1]))
    out += [build(broker_cls, host=h, port=p, rack=None, **{key: n}) for n, h, p in coordinators]
    return tuple(out)


def brokers(body: Any, place: Place, coordinators: Sequence[tuple[int, str, int]]) -> Any:
    """A Metadata or DescribeCluster reply with each broker at its gateway address (brokers
    that cannot be placed are left out: the node logged them) and the coordinator nodes beside
    them (a client drops a broker that Metadata does not list, its group coordinator too:
    librdkafka then waits for a coordinator for ever)."""
    return dataclasses.replace(
        body, brokers=_brokers(type(body), body.brokers, place, coordinators)
    )


def find_coordinator(body: Any, version: int, place: Place) -> Any:
    """A transaction coordinator's address at the gateway; one that cannot be placed is
    COORDINATOR_NOT_AVAILABLE (15), which clients retry."""

    def moved(entry: Any) -> Any:
        if int(entry.error_code) != 0:
            return entry
        at = place(int(entry.node_id))
        if at is None:
            return dataclasses.replace(
                entry, error_code=type(entry.error_code)(15), node_id=-1, host="", port=-1
            )
        return dataclasses.replace(entry, host=at[0], port=at[1])

    if version >= 4:
        return dataclasses.replace(body, coordinators=tuple(moved(c) for c in body.coordinators))
    return moved(body)
