"""Helpers that cross-check our codec against kafka-python's independent implementation."""

from __future__ import annotations

import itertools
import struct
from typing import Any

from app.kafka.apis import version_table
from app.kafka.context import RequestContext
from tests.support.kafka_client import KafkaTestClient

# correlation ids for kafka-python frames, far from the ones KafkaTestClient hands out
_KP_CORRELATION = itertools.count(1_000_000)


def edge_decode(kp_request: Any, version: int, client_id: str = "kp") -> Any:
    """Encode with kafka-python (header + body), decode with our edge; returns the kio body."""
    kp_request.with_header(correlation_id=11, client_id=client_id)
    frame = bytes(kp_request.encode(version=version, header=True))
    header, body = version_table()[(kp_request.API_KEY, version)].decode(frame)
    assert header.correlation_id == 11
    assert header.client_id == client_id
    return body


def kp_decode(
    kp_response_cls: Any, api_key: int, version: int, result: Any, correlation_id: int = 21
) -> Any:
    """Frame our reply (kio object or hand-packed bytes) and decode it with kafka-python."""
    data = version_table()[(api_key, version)].frame(correlation_id, result)
    decoded = kp_response_cls.decode(data[4:], version=version, header=True)
    assert decoded.header.correlation_id == correlation_id
    return decoded


async def kp_call(
    client: KafkaTestClient, kp_request: Any, version: int, kp_response_cls: Any
) -> Any:
    """Send a request encoded by kafka-python to the node; decode the reply with kafka-python.

    Neither direction goes through kio on the test side, so this checks the real server's
    framing and codec against an independent implementation."""
    corr = next(_KP_CORRELATION)
    kp_request.with_header(correlation_id=corr, client_id=client.client_id)
    frame = bytes(kp_request.encode(version=version, header=True))
    reply = client.expect(corr, None)
    await client.send_raw(struct.pack(">i", len(frame)) + frame)
    after_correlation_id = await reply
    decoded = kp_response_cls.decode(
        struct.pack(">i", corr) + after_correlation_id, version=version, header=True
    )
    assert decoded.header.correlation_id == corr
    return decoded


def ctx(version: int, client_id: str = "cid", client_host: str = "10.0.0.7") -> RequestContext:
    """A context for handlers and error builders that never touch the service."""
    return RequestContext(
        service=None,  # type: ignore[arg-type]
        api_version=version,
        client_id=client_id,
        client_host=client_host,
    )
