"""The operator console in a real headless Chromium (tests/support/browser.py), against nodes
whose groups were formed by real kafka-python consumers.

Screenshots of every page go to artifacts/console/ (ignored; the README shows two of them).
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium
from tests.support.consumers import ConsumerProcess, Consumers
from tests.support.kafka_client import KafkaTestClient
from tests.support.nodes import ROOT, CoordinatorProcess, postgres_nodes

pytestmark = [pytest.mark.integration]

TOKEN = "console-secret"
SHOTS = ROOT / "artifacts" / "console"
ENV = {
    "COORD_TOPICS": "orders:6",
    "COORD_INITIAL_REBALANCE_DELAY_MS": "300",
    "COORD_MIN_SESSION_TIMEOUT_MS": "1000",
    "COORD_ADMIN_TOKEN": TOKEN,
}
GROUP = "billing"


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def api(node: CoordinatorProcess, path: str) -> Any:
    req = urllib.request.Request(
        node.admin_url + path, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


LANDED = re.compile(r"/ui/(groups|cluster)")


def log_in(page: Any, node: CoordinatorProcess, path: str = "/ui") -> None:
    page.goto(node.admin_url + path)
    page.wait_for_url("**/ui/login**")
    page.fill("input[name=token]", TOKEN)
    page.click("#login button[type=submit]")
    # the login page's own URL names the next page (?next=/ui/groups): wait until we left it,
    # or the script's navigation after the login lands in the middle of the caller's goto
    page.wait_for_url(lambda url: "/ui/login" not in url and bool(LANDED.search(url)))
    page.wait_for_selector("main h1")


Billing = tuple[CoordinatorProcess, list[ConsumerProcess], Consumers]


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[Billing]:
    """A node with group `billing`: two static and one dynamic kafka-python consumer on
    `orders` (6 partitions), Stable, offsets committed."""
    node = CoordinatorProcess(f"sqlite+aiosqlite:///{tmp_path}/c.db", tmp_path, dict(ENV))
    node.start()
    env = Consumers(tmp_path, node)
    try:
        members = [
            env.consumer("kafka-python", GROUP, f"billing-{i}", "orders",
                         instance=f"billing-{i}" if i < 2 else None)
            for i in range(3)
        ]  # fmt: skip

        def balanced() -> bool:
            owned = sorted(p for m in members for p in m.owned)
            return owned == list(range(6)) and all(m.owned for m in members)

        env.wait(balanced, "billing balanced over three consumers", 60)
        members[0].commit(42)
        yield node, members, env
    finally:
        env.kill_consumers()
        node.kill()


def generation_seen(m: ConsumerProcess) -> int:
    return int(m.snapshot("assigned")[-1]["generation"])


def test_console_shows_groups_members_and_a_forced_rebalance(
    billing: Billing,
) -> None:
    node, members, env = billing
    gen = generation_seen(members[0])
    with chromium() as browser:
        page = browser.new_page()
        log_in(page, node)
        # the groups page: state, protocol, generation, members, static share
        row = page.locator("#groups tr[data-group=billing]")
        row.wait_for()
        cells = row.locator("td").all_inner_texts()
        assert cells[1:6] == ["Stable", "consumer / range", str(gen), "3", "2 of 3"], cells
        shot(page, "groups")

        page.click("#groups a:text-is('billing')")
        page.wait_for_selector("#members")
        # every member with its client id and the partitions the consumer itself reports
        for m in members:
            r = page.locator(f"#members tr[data-client='{m.name}']")
            assignment = r.locator("td.assignment").inner_text()
            assert assignment == "orders: " + ", ".join(map(str, sorted(m.owned))), assignment
        assert page.locator("#offsets").inner_text().count("42") >= 1
        shot(page, "group")

        # force a rebalance from the page (with its confirmation step)
        page.fill("form[data-action=rebalance] input[name=reason]", "console test")
        page.click("form[data-action=rebalance] button[type=submit]")
        assert "Force a rebalance of billing" in page.locator("#confirm-text").inner_text()
        page.click("#confirm-ok")
        done(page, "rebalance")
        # the clients see the new generation...
        env.wait(lambda: all(generation_seen(m) == gen + 1 for m in members),
                 "every consumer in the next generation", 30)  # fmt: skip
        # ...and the page, refreshing itself, shows it with a timeline mark and its reason
        page.wait_for_function(
            f"document.querySelector('#group-generation').textContent.trim() === '{gen + 1}'",
            timeout=15_000,
        )
        mark = page.locator("#timeline tbody tr").first
        mark.wait_for()
        assert "admin: console test" in mark.locator("td.reason").inner_text()
        shot(page, "group-after-rebalance")
    marks = api(node, "/groups/billing/timeline")
    assert [m["generation"] for m in marks if m["kind"] == "rebalance"][-1] == gen + 1
    assert marks[-1]["reason"] == "admin: console test"


def test_console_error_states(
    billing: Billing,
) -> None:
    node, _members, _env = billing
    with chromium() as browser:
        page = browser.new_page()
        page.goto(node.admin_url + "/ui/groups")
        page.wait_for_url("**/ui/login**")
        page.fill("input[name=token]", "wrong")
        page.click("#login button[type=submit]")
        page.wait_for_selector("#login-status:text('Wrong token')")
        log_in(page, node)
        response = page.goto(node.admin_url + "/ui/groups/no-such-group")
        assert response is not None and response.status == 404
        assert page.locator("h1").inner_text() == "Unknown group"
        page.goto(node.admin_url + "/ui/groups?q=zzz")
        assert "No groups match this filter" in page.locator("main").inner_text()
        # keyboard: the first tab stop skips to the content
        page.goto(node.admin_url + "/ui/groups")
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        # a phone-sized screen still shows the group table (scrolling sideways)
        page.set_viewport_size({"width": 390, "height": 844})
        assert page.locator("#groups").is_visible()
        shot(page, "groups-phone")


@pytest.fixture
def pg_pair(pg_admin_dsn: str, tmp_path: Path) -> Iterator[list[CoordinatorProcess]]:
    env = {**ENV, "COORD_LEASE_TTL_MS": "3000"}
    with postgres_nodes(pg_admin_dsn, tmp_path, env, prefix="console") as nodes:
        yield nodes


def test_cluster_page_shows_a_failover(pg_pair: list[CoordinatorProcess]) -> None:
    first, second = pg_pair
    with chromium() as browser:
        page = browser.new_page()
        log_in(page, second, "/ui/cluster")
        page.wait_for_selector("#partitions")
        page.wait_for_function("document.querySelectorAll('#nodes tbody tr').length === 2",
                               timeout=20_000)  # fmt: skip
        owners = page.locator("#partitions tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.owner)"
        )
        assert "1" in owners, owners  # node 1 holds some partitions
        shot(page, "cluster-before-failover")
        first.kill()
        # the page refreshes itself: node 1 leaves the node list, its partitions move to node 2
        page.wait_for_function(
            "[...document.querySelectorAll('#partitions tbody tr')].every("
            "r => r.dataset.owner === '2') && "
            "document.querySelectorAll('#nodes tbody tr').length === 1",
            timeout=40_000,
        )
        shot(page, "cluster-after-failover")


def post(node: CoordinatorProcess, path: str, body: Any) -> Any:
    req = urllib.request.Request(
        node.admin_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def confirm(page: Any, form: str) -> None:
    page.click(f"form[data-action={form}] button[type=submit]")
    page.click("#confirm-ok")
    done(page, form)


def done(page: Any, action: str) -> None:
    """Until the page says this action is done (an earlier one's message does not count)."""
    page.wait_for_selector(f"#action-status.ok:text-is('Done: {action}.')")


IDLE_OFFSETS = {"offsets": [{"topic": "orders", "partition": 0, "offset": 9}]}


def test_console_actions_register_withdraw_reset_delete(billing: Billing) -> None:
    node, _members, _env = billing
    post(
        node,
        "/groups/idle/offsets",
        {"offsets": [{"topic": "orders", "partition": 0, "offset": 9}]},
    )
    with chromium() as browser:
        page = browser.new_page()
        log_in(page, node)
        # pre-register a static member of billing, then withdraw it
        page.goto(node.admin_url + "/ui/groups/billing")
        page.fill("form[data-action=register] input[name=ids]", "billing-9")
        confirm(page, "register")
        assert api(node, "/groups/billing")["registered_static_members"] == ["billing-9"]
        page.locator("#registrations li:has-text('billing-9')").wait_for()
        page.click("#registrations button[data-instance=billing-9]")
        page.click("#confirm-ok")
        done(page, "remove")
        assert api(node, "/groups/billing")["registered_static_members"] == []
        # an Empty group: reset its offsets, then delete it
        page.goto(node.admin_url + "/ui/groups/idle")
        page.fill("form[data-action=offsets] input[name=offsets]", "orders:0=3, orders:1=4")
        confirm(page, "offsets")
        assert {(o["partition"], o["offset"]) for o in api(node, "/groups/idle/offsets")} == {
            (0, 3),
            (1, 4),
        }
        page.click("form[data-action=delete] button[type=submit]")
        page.click("#confirm-ok")
        page.wait_for_url("**/ui/groups")
        assert "idle" not in [g["group_id"] for g in api(node, "/groups")]


# ==== a group whose leader's assignment leaves a partition out ================================


def _str16(s: str) -> bytes:
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0: the topics, no user data."""
    return struct.pack(">hi", 0, len(topics)) + b"".join(map(_str16, topics)) + b"\xff" * 4


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0 of one topic."""
    parts = b"".join(struct.pack(">i", p) for p in partitions)
    return (
        struct.pack(">hi", 0, 1)
        + _str16(topic)
        + struct.pack(">i", len(partitions))
        + parts
        + b"\xff" * 4
    )


class CustomGroup:
    """One static consumer member speaking raw frames (tests/support/kafka_client.py), leader
    of its group, whose SyncGroup carries the test's own assignment (a custom assignor's),
    commits `commits` and heartbeats until the test is done; in a thread of its own, since
    the test drives the browser through Playwright's synchronous API."""

    def __init__(self, node: CoordinatorProcess, group: str, topic: str, owned: list[int],
                 commits: dict[tuple[str, int], int]) -> None:  # fmt: skip
        self.node, self.group, self.topic, self.owned, self.commits = (
            node, group, topic, owned, commits
        )  # fmt: skip
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"group-{group}", daemon=True)

    def __enter__(self) -> CustomGroup:
        self.thread.start()
        if not self.ready.wait(20) or self.error is not None:
            self.stop.set()
            raise AssertionError(f"group {self.group} did not form: {self.error!r}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)

    def _run(self) -> None:
        try:
            asyncio.run(self._member())
        except BaseException as e:  # seen by __enter__ (or lost once the test has its group)
            self.error = e
            self.ready.set()

    async def _member(self) -> None:
        c = await KafkaTestClient.connect(*self.node.address, client_id="custom-assignor")
        try:
            instance = f"{self.group}-0"
            join = await c.join_group(
                self.group, group_instance_id=instance, session_timeout_ms=30_000,
                protocols=[("range", subscription(self.topic))],
            )  # fmt: skip
            assert join.error_code == 0 and join.leader == join.member_id, join
            gen, me = join.generation_id, join.member_id
            sync = await c.sync_group(
                self.group, gen, me, group_instance_id=instance,
                assignments={me: assignment(self.topic, self.owned)},
            )  # fmt: skip
            assert sync.error_code == 0, sync
            done = await c.offset_commit(
                self.group, self.commits, generation_id=gen, member_id=me,
                group_instance_id=instance,
            )  # fmt: skip
            assert all(p.error_code == 0 for t in done.topics for p in t.partitions), done
            self.ready.set()
            while not self.stop.is_set():
                await asyncio.sleep(0.5)
                beat = await c.heartbeat(self.group, gen, me, group_instance_id=instance)
                assert beat.error_code == 0, beat
        finally:
            await c.close()


def wait_for(what: str, pred: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := pred()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return got


def test_console_flags_a_partition_the_assignor_left_out(tmp_path: Path) -> None:
    """Without the gateway: a Stable group whose leader assigned t-0 and t-1 of t's three
    partitions. The ownership watch flags t-2 on the groups page; the group page lists it, and
    reads lag as unknown (no upstream, no log-end offsets) with the reason."""
    env = {**ENV, "COORD_TOPICS": "t:3", "COORD_OWNERSHIP_CHECK_INTERVAL_MS": "200"}
    node = CoordinatorProcess(f"sqlite+aiosqlite:///{tmp_path}/c.db", tmp_path, env)
    node.start()
    try:
        with CustomGroup(node, "skewed", "t", [0, 1], {("t", 0): 7}), chromium() as browser:
            # the REST API first: what the pages must agree with
            described = api(node, "/groups/skewed")
            assert described["state"] == "Stable"
            assert described["ownership"]["unowned"] == [{"topic": "t", "partition": 2}]
            assert described["ownership"]["doubly_owned"] == []
            assert described["upstream"] is None
            lag = described["lag"]
            assert lag["known"] is False and lag["total"] is None and lag["problem"]
            assert [(p["topic"], p["partition"], p["committed_offset"], p["lag"])
                    for p in lag["partitions"]] == [("t", 0, 7, None)]  # fmt: skip
            # the groups row's flag comes from the periodic watch (every 200 ms here)
            row = wait_for(
                "the ownership watch to flag skewed",
                lambda: next((g for g in api(node, "/groups") if g["group_id"] == "skewed"
                              and g["unowned_partitions"]), None),
            )  # fmt: skip
            assert (row["unowned_partitions"], row["doubly_owned_partitions"]) == (1, 0)
            assert (row["upstream_members"], row["lag"]) == (0, None)

            page = browser.new_page()
            log_in(page, node)
            tr = page.locator("#groups tr[data-group=skewed]")
            flag = tr.locator("td.flags span.flag-unowned")
            flag.wait_for(timeout=10_000)
            assert "1 unowned" in flag.inner_text()
            assert tr.locator("span.flag-doubly, span.flag-upstream").count() == 0
            assert tr.locator("td.lag").inner_text() == "unknown"
            assert page.locator("#split-banner").count() == 0
            shot(page, "groups-unowned")

            page.click("#groups a:text-is('skewed')")
            page.wait_for_selector("#unowned")
            assert "warning" in (page.get_attribute("#unowned", "class") or "")
            items = page.locator("#unowned li").evaluate_all(
                "items => items.map(li => li.dataset.partition)"
            )
            assert items == ["t-2"], items
            assert page.locator('#unowned li[data-partition="t-2"]').inner_text() == "t-2"
            assert page.locator("#doubly-owned, #upstream-banner").count() == 0
            total = page.locator("#lag-total").inner_text()
            assert "unknown" in total and "no upstream" in total, total
            r = page.locator('#lag tr[data-partition="t-0"]')
            assert r.locator("td.committed").inner_text() == "7"
            assert r.locator("td.log-end").inner_text() == "unknown"
            assert r.locator("td.lag").inner_text() == "unknown"
            assert re.fullmatch(r"\d+ s ago", r.locator("td.since").inner_text())
            assert page.get_attribute("#lag-sparkline", "data-points") == "0"
            assert "no samples yet" in page.locator("#lag-sparkline").text_content()
            assert "committed by a member" in page.locator("#offsets").inner_text()
            shot(page, "group-unowned")
    finally:
        node.kill()
