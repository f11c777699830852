"""The core's tunables: Kafka's group.* and offsets.* broker settings.

Their defaults are written here, once: the core is pure and the offline audit builds it with
no node settings, so `Settings` (app/config.py) takes these as the defaults of its
COORD_* namesakes, and a node's CoreConfig is derived from its Settings (`core_config`).
"""

from __future__ import annotations

from dataclasses import dataclass

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000  # protocol.md §1.4, hard-coded in Kafka


@dataclass(frozen=True, slots=True)
class CoreConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000
    # Kafka's default is 2147483647; a bound here also bounds what one group's members and
    # registrations can make a node hold (README: Limits and hostile clients)
    group_max_size: int = 10_000
    max_pending_members: int = 10_000  # per group; this project's bound (protocol.md §4.2)
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    # fixed, as in Kafka (protocol.md §1.4): no setting
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
