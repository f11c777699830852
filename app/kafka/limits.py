"""What one client can make the Kafka listener hold, and how the loop is shared between
clients (README: Limits and hostile clients)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from app.config import DEFAULTS, Settings
from app.kafka.apis import DecodeLimits


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What one client can make the listener hold (README: Limits and hostile clients).
    Derived from Settings: `from_settings`, and its defaults are Settings' own."""

    max_frame_bytes: int = DEFAULTS.max_frame_bytes  # Kafka: socket.request.max.bytes
    max_connections: int = DEFAULTS.max_connections  # Kafka: max.connections
    max_connections_per_ip: int = DEFAULTS.max_connections_per_ip  # Kafka: max.connections.per.ip
    connections_max_idle_ms: int = DEFAULTS.connections_max_idle_ms  # connections.max.idle.ms
    # a frame begun must be complete within this (slow senders)
    frame_deadline_ms: int = DEFAULTS.frame_deadline_ms
    # Reading pauses while this many requests are unanswered on one connection, or this many
    # reply bytes wait behind an unanswered one (a parked JoinGroup or Fetch), or the
    # transport's write buffer is full (a client that does not read); it resumes at half.
    max_inflight_requests: int = DEFAULTS.max_inflight_requests
    max_queued_reply_bytes: int = DEFAULTS.max_queued_reply_bytes
    decode: DecodeLimits = field(default_factory=DecodeLimits)

    @classmethod
    def from_settings(cls, s: Settings) -> ServerLimits:
        return cls(
            max_frame_bytes=s.max_frame_bytes,
            max_connections=s.max_connections,
            max_connections_per_ip=s.max_connections_per_ip,
            connections_max_idle_ms=s.connections_max_idle_ms,
            frame_deadline_ms=s.frame_deadline_ms,
            max_inflight_requests=s.max_inflight_requests,
            max_queued_reply_bytes=s.max_queued_reply_bytes,
            decode=DecodeLimits(s.max_client_id_bytes, s.max_request_elements),
        )


# A frame this large (a leader's SyncGroup, thousands of partitions or names) costs the loop
# milliseconds to tens of milliseconds: at most one is served per turn of the loop, so small
# requests of every other connection are never queued behind many of them.
HEAVY_FRAME_BYTES: Final = 16 * 1024
# A reply this large is written at once rather than with the loop turn's other replies.
EARLY_WRITE_BYTES: Final = 16 * 1024
# A connection serves frames of one read for this long, then lets the others have the loop.
TURN_SHARE_S: Final = 0.002
# The loop is checked every SHED_CHECK_S; when a check comes SHED_LAG_S late, every connection
# stops reading until one comes less than a quarter of that late.
SHED_CHECK_S: Final = 0.05
SHED_LAG_S: Final = 0.1
