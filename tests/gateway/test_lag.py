"""Lag and unowned partitions through a gateway node: GET /groups/{id}, the console (a real
Chromium), /metrics and kafka-consumer-groups through the gateway agree with the upstream's own
log-end offsets; a group whose leader's assignor leaves a partition out is flagged, and so is a
partition added upstream to a topic it subscribes to."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.gateway.test_clients import (
    PARTITIONS,
    assemble,
    consume_to_end,
    describe_offsets,
    log_ends,
    values,
)
from tests.gateway.test_moves import FAST, workdir
from tests.support.browser import chromium
from tests.support.consumer_bytes import assignment, subscription
from tests.support.java import java_build  # noqa: F401 - a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_client import KafkaTestClient
from tests.support.nodes import CoordinatorProcess
from tests.support.record_clients import RecordGroup, produce

pytestmark = pytest.mark.timeout(300)

N = 150
M = 45


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not after {timeout} s")


def test_lag_agrees_everywhere_with_the_upstreams_log_end_offsets(
    java_build: None,  # noqa: F811 - kafka-consumer-groups
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
    tmp_path: Path,
) -> None:
    node = gateway_factory(**FAST)
    group_id = f"{topic}-lag"
    client_dir = workdir(tmp_path, "c")
    with RecordGroup("confluent", client_dir, node.bootstrap, topic, group_id, static=False) as g:
        assemble(node, g)
        produce("confluent", node.bootstrap, topic, 0, N)
        committed = consume_to_end(g, apache_kafka_broker, topic, values(0, N))
        g.quit()  # Empty from now on: its lag stays visible
    produce("confluent", node.bootstrap, topic, N, M)
    ends = log_ends(apache_kafka_broker, topic)
    want = {p: ends[p] - committed[p] for p in range(PARTITIONS)}
    assert sum(want.values()) == M

    def lag_rows() -> dict[int, dict[str, Any]] | None:
        lag = node.get(f"/groups/{group_id}")["lag"]
        rows = {r["partition"]: r for r in lag["partitions"]}
        if {p: r["log_end_offset"] for p, r in rows.items()} != ends:
            return None
        return rows

    rows = wait_for(lag_rows, 30, "GET /groups/{id} shows the new log-end offsets")
    assert {p: r["committed_offset"] for p, r in rows.items()} == committed
    assert {p: r["lag"] for p, r in rows.items()} == want
    assert all(r["since_commit_ms"] >= 0 for r in rows.values())
    described = node.get(f"/groups/{group_id}")
    assert described["state"] == "Empty"
    assert (described["lag"]["total"], described["lag"]["max"]) == (M, max(want.values()))

    tool = describe_offsets(node, group_id)  # kafka-consumer-groups through the gateway
    assert {p: int(r["LOG-END-OFFSET"]) for p, r in tool.items()} == ends
    assert {p: int(r["CURRENT-OFFSET"]) for p, r in tool.items()} == committed
    assert {p: int(r["LAG"]) for p, r in tool.items()} == want

    series = f'coordinator_group_lag{{group="{group_id}"}}'
    text = wait_for(lambda: t if series in (t := node.metrics_text()) else None, 15, "lag metric")
    assert f'coordinator_group_lag{{group="{group_id}"}} {float(M)}' in text
    assert f'coordinator_group_lag_max{{group="{group_id}"}} {float(max(want.values()))}' in text

    with chromium() as browser:
        page = browser.new_page()
        page.goto(f"{node.admin_url}/ui/groups/{group_id}")
        page.wait_for_selector("#lag")
        for p in range(PARTITIONS):
            row = page.locator(f"#lag tr[data-partition='{topic}-{p}']")
            assert row.locator("td.committed").inner_text().strip() == str(committed[p])
            assert row.locator("td.log-end").inner_text().strip() == str(ends[p])
            assert row.locator("td.lag").inner_text().strip() == str(want[p])
        assert str(M) in page.locator("#lag-total").inner_text()
        assert int(page.locator("#lag-sparkline").get_attribute("data-points") or 0) >= 1
        page.goto(f"{node.admin_url}/ui/groups")
        listed = page.locator(f"tr[data-group='{group_id}'] td.lag")
        assert listed.inner_text().strip() == str(M)


async def _leader_leaving_a_partition_out(
    node: CoordinatorProcess, group_id: str, topic: str, until: Callable[[], bool]
) -> None:
    """One member, a custom assignor: it subscribes to `topic` and assigns itself every
    partition but the last; heartbeats until `until()`."""
    c = await KafkaTestClient.connect(*node.address, client_id="custom-assignor")
    try:
        protocols = [("custom", subscription([topic]))]
        r = await c.join_group(group_id, protocols=protocols)
        r = await c.join_group(group_id, r.member_id, protocols=protocols)
        assert r.error_code == 0, r
        member, generation = r.member_id, r.generation_id
        mine = assignment({topic: list(range(PARTITIONS - 1))})
        s = await c.sync_group(
            group_id, generation, member, assignments={member: mine}, protocol_name="custom"
        )
        assert s.error_code == 0, s
        while not await asyncio.to_thread(until):
            hb = await c.heartbeat(group_id, generation, member)
            assert hb.error_code == 0, hb
            await asyncio.sleep(0.5)
        await c.leave_group(group_id, member)
    finally:
        await c.close()


def test_a_partition_nobody_owns_is_flagged_and_so_is_one_added_upstream(
    gateway_factory: Callable[..., CoordinatorProcess],
    apache_kafka_broker: KafkaBroker,
    topic: str,
) -> None:
    node = gateway_factory(COORD_UPSTREAM_METADATA_REFRESH_MS="500", **FAST)
    group_id = f"{topic}-custom"
    seen: dict[str, Any] = {}

    def unowned() -> list[str]:
        own = node.get(f"/groups/{group_id}").get("ownership") or {}
        return [f"{u['topic']}-{u['partition']}" for u in own.get("unowned", [])]

    def flagged(count: int) -> bool:
        """REST (computed per request), the groups listing and /metrics (the watch's)."""
        want = [f"{topic}-{p}" for p in range(PARTITIONS - 1, PARTITIONS - 1 + count)]
        listed = {g["group_id"]: g for g in node.get("/groups")}
        series = f'coordinator_group_unowned_partitions{{group="{group_id}"}} {float(count)}'
        return (
            unowned() == want
            and listed[group_id]["unowned_partitions"] == count
            and series in node.metrics_text()
        )

    def checks() -> bool:
        if "first" not in seen:
            if flagged(1):
                seen["first"] = True
                admin = AdminClient({"bootstrap.servers": apache_kafka_broker.bootstrap})
                for f in admin.create_partitions([NewPartitions(topic, PARTITIONS + 1)]).values():
                    f.result(30)
            return False
        if flagged(2):
            seen["grown"] = True
            return True
        return False

    deadline = time.monotonic() + 60

    def until() -> bool:
        if time.monotonic() > deadline:
            return True
        return checks()

    asyncio.run(_leader_leaving_a_partition_out(node, group_id, topic, until))
    assert seen.get("grown"), f"not flagged in time: {seen.keys()}"
    wait_for(
        lambda: "coordinator_groups_with_unowned_partitions 0.0" in node.metrics_text(),
        15,
        "the flag cleared once the group left",
    )
    log = node.log_text()
    assert f"group {group_id!r} generation 1: 1 partition(s)" in log
    assert f"group {group_id!r} generation 1: 2 partition(s)" in log
