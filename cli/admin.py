"""`coordinator groups|topics|cluster`: the admin REST API from a terminal.

One of the CLI's two paths (docs/operations.md): groups, topics and the cluster view live in
the running nodes' cores, and a change must go through the owning node's core (written, then
answered, fenced by its lease), so these commands are HTTP clients of a node and never open
the store. Users and ACLs, which must exist before any node runs, are cli/security.py's.

Readable tables by default, `--json` for scripts, a non-zero exit with the server's message on
errors. Credentials: the bearer token (COORD_ADMIN_TOKEN), or HTTP Basic as a SCRAM user
(`--user`/COORD_ADMIN_USER, the password from COORD_ADMIN_PASSWORD or a hidden prompt, never
an argument). Redirects to the node that owns a group are followed by hand, and only to the
node pointed at or to an admin URL that node lists in GET /cluster/nodes: the credentials never
go to any other host.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote, urlencode

import httpx
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

console = Console()
err = Console(stderr=True)

Url = Annotated[
    str,
    typer.Option("--url", envvar="COORD_ADMIN_URL", help="admin API of any node (COORD_ADMIN_URL)"),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar="COORD_ADMIN_TOKEN",
        help="bearer token; prefer COORD_ADMIN_TOKEN (a flag shows in ps)",
    ),
]
User = Annotated[
    str | None,
    typer.Option(
        "--user",
        envvar="COORD_ADMIN_USER",
        help="HTTP Basic as this SCRAM user (COORD_ADMIN_USER); the password from "
        "COORD_ADMIN_PASSWORD or a prompt",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="print the raw JSON answer")]
DEFAULT_URL = os.environ.get("COORD_ADMIN_URL", "http://127.0.0.1:8080")

groups_cli = typer.Typer(help="Consumer groups: list, describe, register, rebalance, …")
topics_cli = typer.Typer(help="The topic registry clients see in Metadata.")


MAX_REDIRECTS = 5
MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass(frozen=True)
class Credentials:
    """What every request carries: a bearer token or a Basic user (the user wins)."""

    token: str | None = None
    user: str | None = None
    password: str | None = None

    def headers(self) -> dict[str, str]:
        if self.user is not None:
            pair = f"{self.user}:{self.password or ''}".encode()
            return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        return {}


def credentials(token: str | None, user: str | None = None) -> Credentials:
    if not user:
        return Credentials(token=token)
    password = os.environ.get("COORD_ADMIN_PASSWORD")
    if password is None:
        password = typer.prompt(f"password of {user}", hide_input=True, err=True)
    return Credentials(user=user, password=password)


def seg(value: str) -> str:
    """One URL path segment: a group id may hold '/', '%', '?' or '#'."""
    return quote(value, safe="")


def origin(url: httpx.URL) -> tuple[str, str, int]:
    port = url.port or (443 if url.scheme == "https" else 80)
    return url.scheme, url.host.lower(), port


def shown(url: httpx.URL | str) -> str:
    """A URL to print: without any user or password it may hold."""
    try:
        u = httpx.URL(str(url))
        return str(u.copy_with(userinfo=b"")) if u.userinfo else str(u)
    except (httpx.InvalidURL, TypeError):
        return str(url)


def listed_admin_origins(
    client: httpx.Client, start: httpx.URL, headers: dict[str, str]
) -> set[tuple[str, str, int]]:
    """The admin URLs of the nodes the first node lists (GET /cluster/nodes)."""
    r = client.get(start.join("/cluster/nodes"), headers=headers)
    try:
        nodes = r.json() if r.status_code == 200 else []
    except ValueError:
        return set()
    out = set()
    for n in nodes if isinstance(nodes, list) else []:
        url = n.get("admin_url") if isinstance(n, dict) else None
        if isinstance(url, str) and url:
            try:
                out.add(origin(httpx.URL(url)))
            except (httpx.InvalidURL, TypeError):
                continue
    return out


def call(method: str, url: str, path: str, auth: Credentials | str | None, body: Any = None) -> Any:
    """One admin call; a 307/308 to the node that owns the group is followed by hand, and only
    to an admin URL the node pointed at lists: the credentials go nowhere else."""
    creds = auth if isinstance(auth, Credentials) else Credentials(token=auth)
    auth_headers = creds.headers()
    headers = dict(auth_headers)
    if method in MUTATIONS:
        headers["Content-Type"] = "application/json"  # the API refuses mutations without it
    target = url.rstrip("/") + path
    try:
        with httpx.Client(follow_redirects=False, timeout=30) as client:
            start = httpx.URL(target)
            trusted = {origin(start)}
            listed: set[tuple[str, str, int]] | None = None
            for _ in range(MAX_REDIRECTS + 1):
                content = json.dumps(body).encode() if body is not None else None
                r = client.request(method, target, content=content, headers=headers)
                location = r.headers.get("location")
                if r.status_code not in (307, 308) or not location:
                    break
                nxt = r.url.join(location)
                if origin(nxt) not in trusted:
                    if listed is None:
                        listed = listed_admin_origins(client, start, auth_headers)
                    if origin(nxt) not in listed:
                        err.print(
                            f"[red]refusing to follow the redirect to {escape(shown(nxt))}: it "
                            f"is not an admin URL that {escape(shown(start.join('/')))} lists in "
                            "/cluster/nodes, so the credentials are not sent there[/red]"
                        )
                        raise typer.Exit(1)
                    trusted.add(origin(nxt))
                target = str(nxt)
            else:
                err.print(f"[red]too many redirects (last: {escape(shown(target))})[/red]")
                raise typer.Exit(1)
    except httpx.HTTPError as e:
        err.print(f"[red]cannot reach {escape(shown(target))}: {escape(str(e))}[/red]")
        raise typer.Exit(2) from e
    except httpx.InvalidURL as e:
        err.print(f"[red]cannot reach {escape(shown(target))}: {escape(str(e))}[/red]")
        raise typer.Exit(2) from e
    if r.status_code >= 400:
        try:
            detail = r.json().get("detail", r.text)
        except ValueError:
            detail = r.text
        err.print(f"[red]error {r.status_code}: {escape(str(detail))}[/red]")
        raise typer.Exit(1)
    return r.json() if r.content else None


def show(data: Any, as_json: bool, title: str, columns: list[str]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    rows = data if isinstance(data, list) else [data]
    table = Table(title=escape(title))
    for c in columns:
        table.add_column(c)
    for row in rows:
        table.add_row(*("" if row.get(c) is None else escape(str(row.get(c))) for c in columns))
    console.print(table)


@groups_cli.command("list")
def groups_list(
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
    state: Annotated[str | None, typer.Option(help="only groups in this state")] = None,
) -> None:
    path = "/groups" + (f"?{urlencode({'state': state})}" if state else "")
    show(
        call("GET", url, path, credentials(token, user)),
        as_json,
        "groups",
        ["group_id", "state", "protocol_type", "generation", "members"],
    )


@groups_cli.command("describe")
def groups_describe(
    group_id: str,
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
) -> None:
    g = call("GET", url, f"/groups/{seg(group_id)}", credentials(token, user))
    if as_json:
        typer.echo(json.dumps(g, indent=2))
        return
    console.print(
        f"[bold]{escape(g['group_id'])}[/bold]  state={g['state']}  "
        f"generation={g['generation']}  "
        f"protocol={escape(str(g['protocol_type']))}/{escape(str(g['protocol_name']))}  "
        f"leader={escape(str(g['leader']))}"
    )
    if g.get("registered_static_members"):
        joined = ", ".join(g["registered_static_members"])
        console.print(f"registered, not yet joined: {escape(joined)}")
    table = Table(title="members")
    for c in ("member_id", "group_instance_id", "client_id", "host", "assignment"):
        table.add_column(c)
    for m in g["members"]:
        a = m.get("assignment") or {}
        parts = a.get("partitions")
        assigned = (
            ", ".join(f"{p['topic']}{p['partitions']}" for p in parts)
            if parts is not None
            else f"{a.get('size', 0)} bytes"
        )
        cells = (m["member_id"], m["group_instance_id"] or "", m["client_id"], m["client_host"])
        table.add_row(*(escape(c) for c in cells), escape(assigned))
    console.print(table)
    lag = g.get("lag") or {}
    if lag.get("known") and lag.get("partitions"):
        columns = ["topic", "partition", "committed_offset", "log_end_offset", "lag"]
        show(lag["partitions"], False, "committed offsets and lag", columns)
    else:  # no upstream (lag unknown): the offsets alone
        show(g["offsets"], False, "committed offsets", ["topic", "partition", "offset"])
    owned = g.get("ownership") or {}
    for what in ("unowned", "doubly_owned"):
        if owned.get(what):
            listed = ", ".join(f"{p['topic']}-{p['partition']}" for p in owned[what])
            console.print(f"[red]{what.replace('_', ' ')} partitions: {escape(listed)}[/red]")
    upstream = g.get("upstream") or {}
    if upstream.get("live_members_upstream"):
        members = ", ".join(upstream["live_members_upstream"])
        console.print(f"[red]live members on the upstream's coordinator: {escape(members)}[/red]")
    if upstream.get("import_refused"):
        console.print(f"[red]import waiting: {escape(upstream['import_refused'])}[/red]")


@groups_cli.command("register")
def groups_register(
    group_id: str,
    instance_ids: Annotated[list[str], typer.Argument(help="group.instance.id values")],
    expansion_timeout_ms: Annotated[int, typer.Option(help="wait for the batch")] = 60_000,
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
) -> None:
    """Pre-register static members so their scale-up costs one rebalance."""
    body = {"group_instance_ids": instance_ids, "expansion_timeout_ms": expansion_timeout_ms}
    g = call("POST", url, f"/groups/{seg(group_id)}/static-members", credentials(token, user), body)
    if as_json:
        typer.echo(json.dumps(g, indent=2))
    else:
        ids = ", ".join(g["registered_static_members"])
        console.print(f"registered for {escape(group_id)}: {escape(ids)}")


@groups_cli.command("rebalance")
def groups_rebalance(
    group_id: str,
    reason: Annotated[str, typer.Option()] = "requested by operator",
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
) -> None:
    r = call(
        "POST",
        url,
        f"/groups/{seg(group_id)}/rebalance",
        credentials(token, user),
        {"reason": reason},
    )
    typer.echo(json.dumps(r, indent=2) if as_json else f"{group_id}: {r['result']}")


@groups_cli.command("remove-member")
def groups_remove_member(
    group_id: str,
    group_instance_id: str,
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
) -> None:
    """Remove a static member (or withdraw its registration); the group rebalances."""
    call(
        "DELETE",
        url,
        f"/groups/{seg(group_id)}/static-members/{seg(group_instance_id)}",
        credentials(token, user),
    )
    typer.echo(f"removed {group_instance_id} from {group_id}")


@groups_cli.command("delete")
def groups_delete(
    group_id: str, url: Url = DEFAULT_URL, token: Token = None, user: User = None
) -> None:
    call("DELETE", url, f"/groups/{seg(group_id)}", credentials(token, user))
    typer.echo(f"deleted {group_id}")


@groups_cli.command("offsets")
def groups_offsets(
    group_id: str,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="topic:partition=offset (only for an Empty group)"),
    ] = None,
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
) -> None:
    if set_:
        offsets = []
        for item in set_:
            try:
                tp, offset = item.split("=")
                topic, partition = tp.rsplit(":", 1)
                offsets.append({"topic": topic, "partition": int(partition), "offset": int(offset)})
            except ValueError as e:
                err.print(f"[red]--set {escape(repr(item))} is not topic:partition=offset[/red]")
                raise typer.Exit(2) from e
        data = call(
            "POST",
            url,
            f"/groups/{seg(group_id)}/offsets",
            credentials(token, user),
            {"offsets": offsets},
        )
    else:
        data = call("GET", url, f"/groups/{seg(group_id)}/offsets", credentials(token, user))
    show(data, as_json, f"offsets of {group_id}", ["topic", "partition", "offset", "metadata"])


@topics_cli.command("list")
def topics_list(
    url: Url = DEFAULT_URL, token: Token = None, user: User = None, as_json: Json = False
) -> None:
    data = call("GET", url, "/topics", credentials(token, user))
    rows = [{"topic": t, "partitions": n} for t, n in data.items()]
    show(data if as_json else rows, as_json, "topics", ["topic", "partitions"])


@topics_cli.command("create")
def topics_create(
    name: str, partitions: int, url: Url = DEFAULT_URL, token: Token = None, user: User = None
) -> None:
    call("POST", url, "/topics", credentials(token, user), {"name": name, "partitions": partitions})
    typer.echo(f"created {name} with {partitions} partitions")


@topics_cli.command("alter")
def topics_alter(
    name: str,
    partitions: Annotated[int, typer.Option(help="new count (grow only)")],
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
) -> None:
    call("PATCH", url, f"/topics/{seg(name)}", credentials(token, user), {"partitions": partitions})
    typer.echo(f"{name} now has {partitions} partitions")


def cluster_command(
    url: Url = DEFAULT_URL, token: Token = None, user: User = None, as_json: Json = False
) -> None:
    """Nodes, log partitions, owners, epochs and loading state."""
    data = call("GET", url, "/cluster", credentials(token, user))
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    show(data["nodes"], False, "nodes", ["node_id", "host", "port", "admin_url", "partitions"])
    show(
        data["partitions"],
        False,
        "log partitions",
        ["partition", "owner", "epoch", "state", "records_loaded", "load_ms"],
    )
