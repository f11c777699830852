"""Fixtures for the real-client end-to-end tests: one `coordinator serve` process per test on a
fresh SQLite database under tmp_path, and a factory for consumer processes. Every child
process is killed at teardown. When a test fails, the report gets the coordinator log tail,
every consumer's events and stderr, and the group records found in the event log.

Debugging knobs (environment): E2E_VERBOSE=1 prints those diagnostics after every test (use
with -s); E2E_CLIENT_LOG sets the client libraries' log levels (e.g. DEBUG, or
"INFO,kafka.coordinator=DEBUG"); E2E_RDKAFKA_DEBUG sets librdkafka's `debug` (e.g. cgrp)."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from tests.support.consumers import PARTITIONS, TOPIC, Consumers
from tests.support.nodes import CoordinatorProcess

COORD_ENV = {
    "COORD_TOPICS": f"{TOPIC}:{PARTITIONS},other:2",  # topics must exist before subscribing
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",  # a new group forms 0.3 s after its first join
    "COORD_MIN_SESSION_TIMEOUT_MS": "1000",  # the tests may use short sessions
    "COORD_LOG_LEVEL": "INFO",
}


class E2E(Consumers):
    """What a test gets: its own coordinator, a consumer factory and diagnostics."""

    def __init__(self, tmp_path: Path) -> None:
        db_url = f"sqlite+aiosqlite:///{tmp_path}/coordinator.db"
        super().__init__(tmp_path, CoordinatorProcess(db_url, tmp_path, dict(COORD_ENV)))

    def teardown(self) -> None:
        self.kill_consumers()
        self.coord.kill()


@pytest.fixture
def e2e(tmp_path: Path) -> Iterator[E2E]:
    env = E2E(tmp_path)
    env.coord.start()
    try:
        yield env
    finally:
        env.teardown()
        if os.environ.get("E2E_VERBOSE"):  # run with -s to see everything that happened
            for title, text in env.diagnostics():
                print(f"===== {title}\n{text}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and report.when in ("setup", "call"):
        env = getattr(item, "funcargs", {}).get("e2e")
        if isinstance(env, E2E):
            for title, text in env.diagnostics():
                report.sections.append((title, text))
    return report
