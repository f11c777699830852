"""End-to-end environment of the admin tests: a `coordinator serve` process with its admin API
(tests/integration/harness.py CoordinatorProcess), real consumer processes, and the event log."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx

from tests.integration.harness import (
    ConsumerProcess,
    CoordinatorProcess,
    Hub,
    generations,
    group_records,
)

WRAPPER = Path(__file__).resolve().with_name("consumer_wrapper.py")

COORD_ENV = {
    "COORD_TOPICS": "t6:6,wide:8,grow:2",
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
    "COORD_LOG_LEVEL": "INFO",
    "COORD_LEASE_TTL_MS": "30000",  # a loaded CI box must not stall a renewal into a zombie
    "COORD_COMPACTION_INTERVAL_MS": "3600000",  # generations are counted in the raw log
}


class Env:
    """A coordinator process, the consumers of a test, admin calls and log reading."""

    def __init__(self, tmp_path: Path, coord: CoordinatorProcess) -> None:
        self.tmp_path = tmp_path
        self.hub = Hub()
        self.coord = coord
        self.consumers: list[ConsumerProcess] = []
        self.groups: set[str] = set()
        self.http = httpx.Client(timeout=30)

    # --- processes -------------------------------------------------------------------------

    def consumer(
        self, client: str, group: str, name: str, topic: str = "t6", **kw: Any
    ) -> ConsumerProcess:
        self.groups.add(group)
        kw.setdefault("heartbeat_interval_ms", 500)
        kw.setdefault("session_timeout_ms", 10_000)
        c = ConsumerProcess(
            self.hub, self.tmp_path, client, self.coord.bootstrap, group, topic, name, **kw
        )
        self.consumers.append(c)
        return c

    def teardown(self) -> None:
        """Kills this test's consumers (the coordinator is the session's)."""
        for c in self.consumers:
            with contextlib.suppress(Exception):  # keep killing the others
                c.kill()
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

    def wait(self, pred: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        return self.hub.wait_until(pred, timeout, what)

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

        return self.wait(
            done,
            f"group {group} Stable over {[m.name for m in members]}",  # type: ignore[no-any-return]
            timeout,
        )

    # --- the event log ---------------------------------------------------------------------

    def generations(self, group: str) -> list[int]:
        return generations(self.coord.db_path, group)

    def diagnostics(self) -> list[tuple[str, str]]:
        out = [("coordinator log", self.coord.logs(tail=12000))]
        for c in self.consumers:
            out.append((f"consumer {c.name}", c.describe()))
        for g in sorted(self.groups):
            try:
                lines = [
                    f"p{r.partition}@{r.offset} gen={r.generation} "
                    + (
                        "TOMBSTONE"
                        if r.value is None
                        else f"assign={ {k: sorted(v) for k, v in r.assignments().items()} } "
                        f"instances={sorted(r.instances())}"
                    )
                    for r in group_records(self.coord.db_path, g)
                ]
            except Exception as e:
                lines = [f"cannot read the log: {e!r}"]
            out.append((f"event log of group {g}", "\n".join(lines)))
        return out


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
