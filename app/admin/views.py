"""The JSON documents the admin service answers, built from the core's read-only views."""

from __future__ import annotations

import base64
from typing import Any

from app.group.consumer_protocol import decode_assignment, decode_subscription
from app.group.records import OFFSET_SOURCE_MEMBER, OFFSET_SOURCE_RESET, OFFSET_SOURCE_UPSTREAM
from app.group.timeline import TimelineMark
from app.group.view import OffsetView

_SOURCES = {
    OFFSET_SOURCE_MEMBER: "member",
    OFFSET_SOURCE_RESET: "reset",
    OFFSET_SOURCE_UPSTREAM: "upstream",
}


def _bytes_view(data: bytes) -> dict[str, Any]:
    return {"size": len(data), "base64": base64.b64encode(data).decode()}


def subscription_view(protocol_type: str | None, data: bytes) -> dict[str, Any]:
    if protocol_type == "consumer" and data:
        try:
            s = decode_subscription(data)
        except Exception:  # opaque bytes that are not what they claim: show them raw
            return _bytes_view(data)
        return {
            "version": s.version,
            "topics": list(s.topics),
            "owned_partitions": [
                {"topic": t, "partitions": list(p)} for t, p in s.owned_partitions
            ],
            "generation_id": s.generation_id,
            "rack_id": s.rack_id,
            "user_data_size": len(s.user_data or b""),
        }
    return _bytes_view(data)


def assignment_view(protocol_type: str | None, data: bytes) -> dict[str, Any]:
    if protocol_type == "consumer" and data:
        try:
            a = decode_assignment(data)
        except Exception:
            return _bytes_view(data)
        return {
            "version": a.version,
            "partitions": [{"topic": t, "partitions": list(p)} for t, p in a.partitions],
            "user_data_size": len(a.user_data or b""),
        }
    return _bytes_view(data)


def mark_view(m: TimelineMark) -> dict[str, Any]:
    return {
        "offset": m.offset,
        "at_ms": m.at_ms,
        "kind": m.kind,
        "generation": m.generation,
        "reason": m.reason,
        "duration_ms": m.duration_ms,
        "members": m.members,
        "members_in": list(m.members_in),
        "members_out": list(m.members_out),
        "partitions_moved": m.partitions_moved,
    }


def offsets_view(offsets: tuple[OffsetView, ...]) -> list[dict[str, Any]]:
    return [
        {
            "topic": o.topic,
            "partition": o.partition,
            "offset": o.offset,
            "leader_epoch": o.leader_epoch,
            "metadata": o.metadata,
            "commit_timestamp_ms": o.commit_timestamp_ms,
            "source": _SOURCES.get(o.source, str(o.source)),
            "origin": o.origin or None,
        }
        for o in offsets
    ]
