"""End-to-end environment of the admin tests: a `coordinator serve` process with its admin API
(tests/support/nodes.py), real consumer processes (tests/support/consumers.py), and the event
log."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx

from tests.support.consumers import ConsumerProcess, Consumers
from tests.support.eventlog import generations
from tests.support.nodes import CoordinatorProcess

COORD_ENV = {
    "COORD_TOPICS": "t6:6,wide:8,grow:2",
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
    "COORD_LOG_LEVEL": "INFO",
    "COORD_LEASE_TTL_MS": "30000",  # a loaded CI box must not stall a renewal into a zombie
    "COORD_COMPACTION_INTERVAL_MS": "3600000",  # generations are counted in the raw log
}

# kafka-python refreshes metadata every 5 min by default: a short age lets a kafka-python group
# leader notice partitions added by `PATCH /topics/{name}` within seconds, as librdkafka does
# with the topic.metadata.refresh.interval.ms the consumer driver sets
METADATA_MAX_AGE_MS = int(os.environ.get("E2E_METADATA_MAX_AGE_MS", "1000"))


class Env(Consumers):
    """The session's coordinator process, the consumers of a test, admin calls and log
    reading."""

    def __init__(self, tmp_path: Path, coord: CoordinatorProcess) -> None:
        super().__init__(tmp_path, coord, metadata_max_age_ms=METADATA_MAX_AGE_MS)
        self.http = httpx.Client(timeout=30)

    def teardown(self) -> None:
        """Kills this test's consumers (the coordinator is the session's)."""
        self.kill_consumers()
        self.http.close()

    # --- admin API -------------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        r = self.http.request(method, self.coord.admin_url + path, json=body)
        assert r.status_code == expect, (method, path, r.status_code, r.text)
        return r.json() if r.content else None

    def describe(self, group: str) -> dict[str, Any]:
        r = self.http.get(f"{self.coord.admin_url}/groups/{group}")
        return r.json() if r.status_code == 200 else {}

    # --- waiting ---------------------------------------------------------------------------

    def wait_stable(
        self,
        group: str,
        members: Iterable[ConsumerProcess],
        topic: str,
        partitions: int,
        timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Until describe says Stable with exactly these members, their decoded assignments
        partition the topic, and each consumer's callbacks agree with describe."""
        members = list(members)

        def done() -> dict[str, Any] | None:
            for m in members:
                m.check_alive()
            g = self.describe(group)
            if g.get("state") != "Stable" or len(g["members"]) != len(members):
                return None
            assigned = assignments(g, topic)
            if set(assigned) != {m.name for m in members}:
                return None
            if sorted(p for ps in assigned.values() for p in ps) != list(range(partitions)):
                return None
            if any(assigned[m.name] != m.owned for m in members):
                return None
            return g

        stable: dict[str, Any] = self.wait(
            done, f"group {group} Stable over {[m.name for m in members]}", timeout
        )
        return stable

    # --- the event log ---------------------------------------------------------------------

    def generations(self, group: str) -> list[int]:
        return generations(self.coord.db_path, group)


def assignments(g: dict[str, Any], topic: str) -> dict[str, frozenset[int]]:
    """client_id -> partitions of `topic` in describe's decoded assignments."""
    out = {}
    for m in g.get("members", []):
        parts: set[int] = set()
        for tp in (m.get("assignment") or {}).get("partitions", []):
            if tp["topic"] == topic:
                parts |= set(tp["partitions"])
        out[m["client_id"]] = frozenset(parts)
    return out


def sleep_watching(members: Iterable[ConsumerProcess], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for m in members:
            m.check_alive()
        time.sleep(0.1)
