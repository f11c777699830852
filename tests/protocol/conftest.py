"""Fixtures for protocol tests: the REAL coordinator node.

`node` is `tests.runtime.node_fixture.running_node` (migrated SQLite event log, `CoordinatorNode`
holding its partition leases, every partition loaded) served by the Kafka listener on the
address the node advertises, exactly as `coordinator serve` does.

Per-test settings: `@pytest.mark.node_settings(initial_rebalance_delay_ms=300, ...)`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.runtime.node_fixture import RunningNode, running_node
from tests.support.kafka_client import KafkaTestClient


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0.12 loads its JSON schemas with a deprecated importlib.resources call
    config.addinivalue_line(
        "filterwarnings", "ignore:.*is deprecated. Use files:DeprecationWarning"
    )
    config.addinivalue_line(
        "markers", "node_settings(**kw): Settings overrides for the protocol `node` fixture"
    )


@pytest.fixture
async def node(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunningNode]:
    marker = request.node.get_closest_marker("node_settings")
    overrides = dict(marker.kwargs) if marker is not None else {}
    async with running_node(tmp_path, **overrides) as n:
        yield n


@pytest.fixture
async def client(node: RunningNode) -> AsyncIterator[KafkaTestClient]:
    c = await node.client("proto-test")
    try:
        yield c
    finally:
        await c.close()
