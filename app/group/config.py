"""The core's tunables: Kafka's group.* and offsets.* broker settings."""

from __future__ import annotations

from dataclasses import dataclass

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # protocol.md §1.4, hard-coded in Kafka


@dataclass(frozen=True, slots=True)
class CoreConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2_147_483_647
    max_pending_members: int = 10_000  # per group; this project's bound (protocol.md §4.2)
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
