"""The console's lag, ownership and upstream sections as rendered from described groups in the
shapes AdminService returns (gateway mode's among them, which the node tests cannot form
without an upstream Kafka), read in a real headless Chromium (tests/support/browser.py)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from api.ui import STATES, group_context, templates, views
from tests.support.browser import chromium

NOW = int(time.time() * 1000)
HOSTILE = "<img src=x onerror=alert(1)>"


def described(**changes: Any) -> dict[str, Any]:
    """A Stable group in gateway mode: two members' assignments both hold t-1, one live
    consumer of it on the upstream's own coordinator, an imported offset."""
    g: dict[str, Any] = {
        "group_id": "orders-app", "state": "Stable", "generation": 4, "protocol_type": "consumer",
        "protocol_name": "range", "rebalance_reason": None, "leader": None, "members": [],
        "registered_static_members": [],
        "offsets": [
            {"topic": "t", "partition": 0, "offset": 10, "leader_epoch": 0, "metadata": "",
             "commit_timestamp_ms": NOW - 5_000, "source": "upstream", "origin": "kafka-prod"},
            {"topic": "t", "partition": 2, "offset": -1, "leader_epoch": -1, "metadata": "",
             "commit_timestamp_ms": NOW - 5_000, "source": "reset", "origin": None},
        ],
        "lag": {
            "known": True, "refreshed_ms": NOW - 1_000, "problem": None, "total": 100, "max": 100,
            "partitions": [
                {"topic": "t", "partition": 0, "committed_offset": 10, "log_end_offset": 110,
                 "lag": 100, "since_commit_ms": 12_000},
                {"topic": "t", "partition": 1, "committed_offset": None, "log_end_offset": 50,
                 "lag": None, "since_commit_ms": None},
                {"topic": "t", "partition": 2, "committed_offset": -1, "log_end_offset": None,
                 "lag": None, "since_commit_ms": 3_000},
            ],
            "history": [{"at_ms": NOW - 30_000 * (4 - i), "lag": v}
                        for i, v in enumerate((0, 40, 250, 90, 100))],
        },
        "ownership": {"generation": 4, "unowned": [],
                      "doubly_owned": [{"topic": "t", "partition": 1}], "unknown_topics": []},
        "upstream": {"offsets": "import", "import_refused": None,
                     "live_members_upstream": ["consumer-1-" + HOSTILE]},
    }  # fmt: skip
    g.update(changes)
    return g


def render(name: str, **context: Any) -> str:
    html: str = templates.get_template(name).render(
        fragment=False, refresh_ms=2000, path="/ui/groups", caller=None, **context
    )
    return html


def group_html(g: dict[str, Any]) -> str:
    return render("group.html", **group_context(g, []))


def groups_html(rows: list[dict[str, Any]]) -> str:
    return render("groups.html", groups=rows, total=len(rows), state="", q="", states=STATES,
                  max_rows=500, split=views.split_groups(rows))  # fmt: skip


def row(group_id: str, **flags: Any) -> dict[str, Any]:
    return {"group_id": group_id, "state": "Stable", "protocol_type": "consumer",
            "protocol_name": "range", "generation": 1, "members": 2, "static_members": 0,
            "state_since_ms": NOW, "log_partition": 0, **flags}  # fmt: skip


@pytest.mark.integration
def test_group_page_lag_ownership_and_upstream_sections() -> None:
    with chromium() as browser:
        page = browser.new_page()
        page.set_content(group_html(described()))
        cells = {
            r: page.locator(f'#lag tr[data-partition="t-{r}"] td').all_inner_texts()[2:]
            for r in (0, 1, 2)
        }
        assert cells[0] == ["10", "110", "100", "12 s ago"], cells
        assert cells[1] == ["unknown", "50", "unknown", "unknown"], cells
        assert cells[2] == ["unknown", "unknown", "unknown", "3 s ago"], cells  # never "-1"
        total = page.locator("#lag-total").inner_text()
        assert "100" in total and "unknown" not in total, total
        spark = page.locator("#lag-sparkline")
        assert spark.get_attribute("data-points") == "5"
        assert len(spark.locator("polyline").get_attribute("points").split()) == 5
        assert "no samples yet" not in spark.text_content()
        # ownership: only the non-empty list shows
        assert page.locator("#unowned").count() == 0
        assert page.locator("#doubly-owned li").all_inner_texts() == ["t-1"]
        assert page.locator('#doubly-owned.warning li[data-partition="t-1"]').count() == 1
        # the split group's banner, its member id escaped (text, not an element)
        banner = page.locator("#upstream-banner").inner_text()
        assert "1 consumer of this group is on the upstream's own coordinator" in banner
        assert "both halves consume every partition" in banner and HOSTILE in banner
        assert page.locator("#upstream-banner img").count() == 0
        offsets = page.locator("#offsets tr[data-partition='t-0'] td.source").inner_text()
        assert offsets == "imported from kafka-prod"

        # one sample: a dot, no line; none: the note
        one = described(lag={**described()["lag"], "history": [{"at_ms": NOW, "lag": 7}]})
        page.set_content(group_html(one))
        assert page.get_attribute("#lag-sparkline", "data-points") == "1"
        assert page.locator("#lag-sparkline circle").count() == 1
        assert page.locator("#lag-sparkline polyline").count() == 0
        refused = "the group has live members on the upstream's coordinator"
        none = described(
            lag={**described()["lag"], "history": [], "known": False, "total": None,
                 "problem": "upstream unreachable: connection refused"},
            ownership=None,
            upstream={"offsets": "import", "import_refused": refused,
                      "live_members_upstream": []},
        )  # fmt: skip
        page.set_content(group_html(none))
        assert page.get_attribute("#lag-sparkline", "data-points") == "0"
        assert "no samples yet" in page.locator("#lag-sparkline").text_content()
        total = page.locator("#lag-total").inner_text()
        assert "unknown" in total and "connection refused" in total, total
        banner = page.locator("#upstream-banner").inner_text()
        assert refused in banner and "consumers of this group" not in banner
        assert page.locator("#unowned, #doubly-owned").count() == 0

        # no upstream problem at all: no banner
        page.set_content(group_html(described(upstream=None)))
        assert page.locator("#upstream-banner").count() == 0


@pytest.mark.integration
def test_groups_page_flags_and_split_banner() -> None:
    rows = [
        row("calm", lag=0, unowned_partitions=0, doubly_owned_partitions=0, upstream_members=0),
        row("split", lag=1234, unowned_partitions=2, doubly_owned_partitions=3,
            upstream_members=4),
        row("older-peer"),  # a row from a node that does not send the new keys
    ]  # fmt: skip
    with chromium() as browser:
        page = browser.new_page()
        page.set_content(groups_html(rows))
        calm, split, older = (page.locator(f"#groups tr[data-group='{g}']")
                              for g in ("calm", "split", "older-peer"))  # fmt: skip
        assert calm.locator("td.lag").inner_text() == "0"
        assert calm.locator("td.flags span").count() == 0
        assert split.locator("td.lag").inner_text() == "1234"
        assert split.locator("span.flag-unowned").inner_text() == "2 unowned"
        assert split.locator("span.flag-doubly").inner_text() == "3 doubly owned"
        assert split.locator("span.flag-upstream").inner_text() == "4 upstream members"
        assert older.locator("td.lag").inner_text() == "unknown"
        assert older.locator("td.flags span").count() == 0
        banner = page.locator("#split-banner")
        assert "1 group has consumers on the upstream's own coordinator" in banner.inner_text()
        assert banner.locator("a").all_inner_texts() == ["split"]
        page.set_content(groups_html(rows[:1] + rows[2:]))
        assert page.locator("#split-banner").count() == 0


def test_a_caller_held_to_its_acls_sees_only_the_topics_it_may_describe() -> None:
    g = described()
    g["lag"]["partitions"].append(
        {"topic": "secret", "partition": 0, "committed_offset": 1, "log_end_offset": 9,
         "lag": 8, "since_commit_ms": 1}
    )  # fmt: skip
    g["lag"]["total"] = 108
    g["ownership"]["unowned"] = [{"topic": "secret", "partition": 3}]
    views.restrict(g, lambda topic: topic != "secret")
    assert [p["topic"] for p in g["lag"]["partitions"]] == ["t", "t", "t"]
    assert (g["lag"]["total"], g["lag"]["max"], g["lag"]["history"]) == (100, 100, [])
    assert g["ownership"]["unowned"] == []
    html = group_html(g)
    assert "secret" not in html and "The history is not shown" in html


def test_unknown_values_are_never_negative_numbers() -> None:
    assert [views.amount(v) for v in (None, -1, 0, 5, True, "3")] == [
        "unknown", "unknown", "0", "5", "unknown", "unknown"
    ]  # fmt: skip
    assert views.since(None) == views.since(-5) == "unknown"
    assert views.since(12_000) == "12 s ago"
    assert views.sparkline([])["count"] == 0
    line = views.sparkline([{"at_ms": 0, "lag": 5}, {"at_ms": 30_000, "lag": 0}])
    assert line["points"] == "4.0,4.0 236.0,44.0"
