"""Group ids that are hard on URLs and terminals: "%", "/", Rich markup. Each call acts on the
group it names, on the node that owns it, and the CLI prints it as it is."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import httpx

from tests.api.helpers import Api, close_all, form_group, run_cli, two_nodes
from tests.api.test_auth_errors_redirect import owned_group, settled


def url_of(group_id: str) -> str:
    return "/groups/" + quote(group_id, safe="")


async def test_a_group_id_with_slash_or_percent_is_one_group(api: Api) -> None:
    ids = ["x/offsets", "a%61", "a%2Fb", "x[/]"]
    groups = [await form_group(api.kafka_port, g, ["i0"]) for g in ids]
    try:
        for g in ids:
            r = await api.http.get(url_of(g), headers=api.auth())
            assert r.status_code == 200, (g, r.text)
            assert r.json()["group_id"] == g
            r = await api.http.get(url_of(g) + "/offsets", headers=api.auth())
            assert r.status_code == 200 and r.json() == []
        # "x/offsets" sent with a plain slash is the offsets of a group "x", which does not exist
        assert (await api.http.get("/groups/x/offsets", headers=api.auth())).status_code == 404
    finally:
        for members in groups:
            await close_all(members)


async def test_the_cli_quotes_ids_and_prints_markup_as_text(api: Api) -> None:
    members = await form_group(api.kafka_port, "x[/]", ["inst[/bold]"])
    try:
        r = await run_cli("groups", "describe", "x[/]", url=api.url, token=api.token)
        assert r.code == 0, r.stderr
        assert "x[/]" in r.stdout and "inst[/bold]" in r.stdout
        r = await run_cli("groups", "describe", "no[/]such", url=api.url, token=api.token)
        assert r.code == 1 and "no[/]such" in r.stderr
    finally:
        await close_all(members)


async def test_a_redirect_does_not_decode_the_group_id_twice(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b):
        await settled(a, b)
        weird = owned_group(b, "a%61")  # "a%61-<n>", owned by node b
        plain = weird.replace("%61", "a")  # what a second decoding would make of it
        body = {"offsets": [{"topic": "t6", "partition": 1, "offset": 5}]}
        async with httpx.AsyncClient(timeout=30, follow_redirects=True) as http:
            r = await http.post(a.url + url_of(weird) + "/offsets", json=body)
            assert r.status_code == 200, r.text
            r = await http.get(a.url + url_of(weird))
            assert r.status_code == 200, r.text
            assert r.json()["group_id"] == weird != plain
            assert (await http.get(b.url + url_of(plain))).status_code == 404
        r = await run_cli("groups", "describe", weird, url=a.url)
        assert r.code == 0 and weird in r.stdout, r.stderr
