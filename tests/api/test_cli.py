"""The real `coordinator groups|topics|cluster` console script (a subprocess, COORD_ADMIN_URL)
against a running node: readable tables, parseable --json, clear errors with non-zero exits."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from tests.api.helpers import (
    ROOT,
    Api,
    CliResult,
    close_all,
    form_group,
    free_port,
    run_cli,
    served_node,
)


def ok(res: CliResult) -> str:
    assert res.code == 0, f"exit {res.code}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    return res.stdout


def failed(res: CliResult, code: int, *needles: str) -> str:
    assert res.code == code, f"exit {res.code}\nstdout:\n{res.stdout}\nstderr:\n{res.stderr}"
    assert "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in res.stderr, (n, res.stderr)
    return res.stderr


def table_rows(text: str) -> list[list[str]]:
    """Cells of a rich table's body/header lines (│-separated)."""
    return [
        [c.strip() for c in line.strip().strip("│┃").split("│" if "│" in line else "┃")]
        for line in text.splitlines()
        if line.strip().startswith(("│", "┃"))
    ]


async def test_cli_groups(api: Api) -> None:
    url = api.url
    # members that never heartbeat: long timeouts, the CLI calls take a while on a busy box
    members = await form_group(
        api.kafka_port,
        "billing",
        ["billing-1", None],
        session_timeout_ms=600_000,
        rebalance_timeout_ms=600_000,
    )
    m = members[0]
    await m.client.offset_commit(
        "billing",
        {("t6", 0): 12},
        generation_id=m.generation,
        member_id=m.member_id,
        group_instance_id="billing-1",
    )

    # phase 1, independent calls at once (each is a fresh Python process)
    ghosts = [
        ("groups", "describe", "ghost"),
        ("groups", "offsets", "ghost"),
        ("groups", "rebalance", "ghost"),
        ("groups", "delete", "ghost"),
        ("groups", "remove-member", "ghost", "x"),
    ]
    (
        listed,
        listed_json,
        stable_json,
        described,
        described_json,
        register_member,
        delete_busy,
        set_busy,
        set_idle,
        bad_set,
        unknown_topic,
        *ghosted,
    ) = await asyncio.gather(
        run_cli("groups", "list", url=url),
        run_cli("groups", "list", "--json", url=url),
        run_cli("groups", "list", "--state", "Stable", "--json", url=url),
        run_cli("groups", "describe", "billing", url=url),
        run_cli("groups", "describe", "billing", "--json", url=url),
        run_cli("groups", "register", "billing", "billing-1", url=url),
        run_cli("groups", "delete", "billing", url=url),
        run_cli("groups", "offsets", "billing", "--set", "t6:0=1", url=url),
        run_cli(
            "groups", "offsets", "idle", "--set", "t6:0=10", "--set", "t6:5=20", "--json", url=url
        ),
        run_cli("groups", "offsets", "idle", "--set", "t6-0=1", url=url),
        run_cli("groups", "offsets", "other", "--set", "nope:0=1", url=url),
        *(run_cli(*args, url=url) for args in ghosts),
    )
    rows = table_rows(ok(listed))
    assert rows[0] == ["group_id", "state", "protocol_type", "generation", "members"]
    assert ["billing", "Stable", "consumer", "1", "2"] in rows[1:]
    assert "billing" in [g["group_id"] for g in json.loads(ok(listed_json))]
    assert [g["group_id"] for g in json.loads(ok(stable_json))] == ["billing"]
    text = ok(described)
    assert "billing  state=Stable  generation=1  protocol=consumer/range" in text
    rows = table_rows(text)
    assert rows[0] == ["member_id", "group_instance_id", "client_id", "host", "assignment"]
    by_instance = {r[1]: r for r in rows[1:] if len(r) == 5 and r[3] == "/127.0.0.1"}
    assert by_instance["billing-1"][4] in ("t6[0, 1, 2]", "t6[3, 4, 5]")
    assert by_instance["billing-1"][2] == "billing-c0"
    assert ["topic", "partition", "offset"] in rows and ["t6", "0", "12"] in rows
    g = json.loads(ok(described_json))
    assert g == (await api.http.get("/groups/billing")).json()
    failed(register_member, 1, "error 422", "already members", "billing-1")
    failed(delete_busy, 1, "error 409", "members")
    failed(set_busy, 1, "error 409", "only when Empty")
    assert [(o["topic"], o["partition"], o["offset"]) for o in json.loads(ok(set_idle))] == [
        ("t6", 0, 10),
        ("t6", 5, 20),
    ]
    failed(bad_set, 2, "not topic:partition=offset")
    failed(unknown_topic, 1, "error 422", "unknown topic partition nope-0")
    for res in ghosted:  # unknown group: each command says so and exits 1
        failed(res, 1, "error 404", "'ghost'")

    # phase 2, in order
    res = await run_cli(
        "groups",
        "register",
        "billing",
        "billing-3",
        "billing-4",
        "--expansion-timeout-ms",
        "5000",
        url=url,
    )
    assert ok(res).strip() == "registered for billing: billing-3, billing-4"
    res = await run_cli("groups", "register", "billing", "billing-5", "--json", url=url)
    assert json.loads(ok(res))["registered_static_members"] == [
        "billing-3",
        "billing-4",
        "billing-5",
    ]
    res = await run_cli("groups", "remove-member", "billing", "billing-5", url=url)
    assert ok(res).strip() == "removed billing-5 from billing"
    described, offsets_table, rebalanced = await asyncio.gather(
        run_cli("groups", "describe", "billing", url=url),
        run_cli("groups", "offsets", "idle", url=url),
        run_cli("groups", "rebalance", "billing", "--reason", "deploy 42", url=url),
    )
    assert "registered, not yet joined: billing-3, billing-4" in ok(described)
    assert table_rows(ok(offsets_table)) == [
        ["topic", "partition", "offset", "metadata"],
        ["t6", "0", "10", ""],
        ["t6", "5", "20", ""],
    ]
    assert ok(rebalanced).strip() == "billing: rebalance started"
    g = (await api.http.get("/groups/billing")).json()
    assert (g["state"], g["rebalance_reason"]) == ("PreparingRebalance", "admin: deploy 42")
    again, removed, deleted = await asyncio.gather(
        run_cli("groups", "rebalance", "billing", "--json", url=url),
        run_cli("groups", "remove-member", "billing", "billing-1", url=url),
        run_cli("groups", "delete", "idle", url=url),
    )
    assert json.loads(ok(again)) == {"group_id": "billing", "result": "already rebalancing"}
    assert ok(removed).strip() == "removed billing-1 from billing"
    assert "billing-1" not in [
        x["group_instance_id"] for x in (await api.http.get("/groups/billing")).json()["members"]
    ]
    assert ok(deleted).strip() == "deleted idle"
    assert (await api.http.get("/groups/idle")).status_code == 404
    await close_all(members)


async def test_cli_topics_and_cluster(api: Api) -> None:
    url = api.url
    rows = table_rows(ok(await run_cli("topics", "list", url=url)))
    assert rows == [["topic", "partitions"], ["t1", "3"], ["t6", "6"]]
    res = await run_cli("topics", "create", "orders", "4", url=url)
    assert ok(res).strip() == "created orders with 4 partitions"
    res = await run_cli("topics", "alter", "orders", "--partitions", "12", url=url)
    assert ok(res).strip() == "orders now has 12 partitions"
    res = await run_cli("topics", "list", "--json", url=url)
    assert json.loads(ok(res)) == {"orders": 12, "t1": 3, "t6": 6}
    shrink, unknown, again, bad_name, not_int, cluster, cluster_json = await asyncio.gather(
        run_cli("topics", "alter", "orders", "--partitions", "2", url=url),
        run_cli("topics", "alter", "nope", "--partitions", "2", url=url),
        run_cli("topics", "create", "orders", "1", url=url),
        run_cli("topics", "create", "bad name", "1", url=url),
        run_cli("topics", "create", "x", "many", url=url),
        run_cli("cluster", url=url),
        run_cli("cluster", "--json", url=url),
    )
    failed(shrink, 1, "error 422", "only grow")
    failed(unknown, 1, "error 404", "nope")
    failed(again, 1, "error 409", "exists")
    failed(bad_name, 1, "error 422", "name")
    failed(not_int, 2)  # typer: not an int

    text = ok(cluster)
    rows = table_rows(text)
    assert ["node_id", "host", "port", "admin_url", "partitions"] in rows
    assert any(r[0] == "1" and r[3] == url and r[4] == "5" for r in rows)
    assert ["partition", "owner", "epoch", "state", "records_loaded", "load_ms"] in rows
    assert sorted(r[0] for r in rows if len(r) == 6 and r[3] == "active") == [
        "-1",
        "0",
        "1",
        "2",
        "3",
    ]
    c = json.loads(ok(cluster_json))
    assert c["node_id"] == 1 and c["topics"]["orders"] == 12


async def test_cli_errors_bad_token_and_unreachable(tmp_path: Path) -> None:
    async with served_node(tmp_path, token="s3cret") as api:
        url = api.url
        refused = [
            run_cli("groups", "list", url=url),
            run_cli("topics", "list", url=url, token="wrong"),
            run_cli("cluster", url=url, token="s3cret-not"),
        ]
        right, flags, *results = await asyncio.gather(
            run_cli("topics", "list", "--json", url=url, token="s3cret"),
            # flags win over the environment
            run_cli(
                "topics",
                "list",
                "--json",
                "--url",
                url,
                "--token",
                "s3cret",
                url="http://127.0.0.1:9",
                token="wrong",
            ),
            *refused,
        )
        assert json.loads(ok(right)) == {"t1": 3, "t6": 6}
        assert json.loads(ok(flags)) == {"t1": 3, "t6": 6}
        for res in results:
            failed(res, 1, "error 401", "token")
    dead = f"http://127.0.0.1:{free_port()}"
    unreachable = [("groups", "describe", "g"), ("cluster",)]
    results = await asyncio.gather(
        *(run_cli(*args, url=dead) for args in unreachable),
        run_cli("groups", "list", url="not a url"),
    )
    for res in results[:-1]:
        failed(res, 2, "cannot reach", dead)
    failed(results[-1], 2, "cannot reach")


def test_the_admin_commands_load_neither_the_node_nor_the_database_libraries() -> None:
    # each admin command is a process of its own: the node's libraries (the wire codecs, the
    # web server, SQLAlchemy) would add about a second to every call an operator makes
    heavy = {"sqlalchemy", "alembic", "asyncpg", "aiosqlite", "kio", "uvicorn", "fastapi"}
    heavy |= {"starlette", "pyspark"}
    probe = "import sys, cli.main; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert heavy.isdisjoint(out.stdout.split()), sorted(heavy & set(out.stdout.split()))
