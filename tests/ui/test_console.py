"""The operator console in a real headless Chromium (tests/support/browser.py), against nodes
whose groups were formed by real kafka-python consumers.

Screenshots of every page go to artifacts/console/ (ignored; the README shows two of them).
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import chromium
from tests.support.consumers import ConsumerProcess, Consumers
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
