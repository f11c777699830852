"""`coordinator groups import|export`: moving groups in from the upstream cluster and back out
(gateway mode), through the admin API of any node (the owning node answers, as for every
group command)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from cli.admin import (
    DEFAULT_URL,
    Json,
    Token,
    Url,
    User,
    call,
    console,
    credentials,
    err,
    groups_cli,
    seg,
)

DryRun = Annotated[bool, typer.Option("--dry-run", help="show what it would do, change nothing")]
All = Annotated[bool, typer.Option("--all", help="every group (see the command's help)")]


def _targets(groups: list[str], all_: bool, listing: list[str]) -> list[str]:
    if groups and all_:
        err.print("[red]name groups or give --all, not both[/red]")
        raise typer.Exit(2)
    if not groups and not all_:
        err.print("[red]name at least one group, or give --all[/red]")
        raise typer.Exit(2)
    return listing if all_ else groups


def _each(action: str, url: str, auth: Any, groups: list[str], dry_run: bool) -> list[Any]:
    """POST /groups/{id}/{action} for each group; a refusal is reported and the rest go on."""
    out: list[Any] = []
    failed = 0
    query = "?dry_run=true" if dry_run else ""
    for g in groups:
        try:
            out.append(call("POST", url, f"/groups/{seg(g)}/{action}{query}", auth))
        except typer.Exit:
            failed += 1  # `call` printed the server's reason
            out.append({"group_id": g, "failed": True})
    if failed:
        err.print(f"[red]{failed} of {len(groups)} group(s) not done[/red]")
    return out


def _finish(reports: list[Any], as_json: bool, show: Callable[[dict[str, Any]], None]) -> None:
    """Print the reports (JSON, or `show` each done one); exit 1 if any group was not done."""
    if as_json:
        typer.echo(json.dumps(reports, indent=2))
    else:
        for r in reports:
            if not r.get("failed"):
                show(r)
    if any(r.get("failed") for r in reports):
        raise typer.Exit(1)


@groups_cli.command("import")
def groups_import(
    groups: Annotated[list[str] | None, typer.Argument(help="group ids")] = None,
    all_: All = False,
    dry_run: DryRun = False,
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
) -> None:
    """Take groups' committed offsets from the upstream cluster where they have none here
    (--all: every group the upstream knows). Refused for a group with live members upstream."""
    auth = credentials(token, user)
    listing = call("GET", url, "/cluster/upstream-groups", auth) if all_ else []
    reports = _each("import", url, auth, _targets(groups or [], all_, listing), dry_run)
    _finish(reports, as_json, _show_import)


def _show_import(r: dict[str, Any]) -> None:
    head = "would import" if r["dry_run"] else "imported"
    if r["refused"]:
        console.print(f"[red]{escape(r['group_id'])}: refused: {escape(r['refused'])}[/red]")
        return
    table = Table(title=f"{escape(r['group_id'])}: {head} (upstream {r['upstream_state']})")
    for c in ("topic", "partition", "upstream_offset", "offset_here", "action"):
        table.add_column(c)
    for o in r["offsets"]:
        here = "" if o["offset_here"] is None else str(o["offset_here"])
        table.add_row(escape(o["topic"]), str(o["partition"]), str(o["upstream_offset"]), here,
                      o["action"])  # fmt: skip
    console.print(table)
    if not r["offsets"]:
        console.print(f"{escape(r['group_id'])}: the upstream has no committed offsets for it")


@groups_cli.command("export")
def groups_export(
    groups: Annotated[list[str] | None, typer.Argument(help="group ids")] = None,
    all_: All = False,
    to_upstream: Annotated[
        bool, typer.Option("--to-upstream", help="write them to the upstream (required)")
    ] = False,
    dry_run: DryRun = False,
    url: Url = DEFAULT_URL,
    token: Token = None,
    user: User = None,
    as_json: Json = False,
) -> None:
    """Write groups' committed offsets back to the upstream cluster, so their consumers can
    be pointed at the brokers again (--all: every Empty group here). Refused for a group that
    still has members here."""
    if not to_upstream:
        err.print("[red]say where: --to-upstream (the only destination)[/red]")
        raise typer.Exit(2)
    auth = credentials(token, user)
    listing = []
    if all_:
        listing = [g["group_id"] for g in call("GET", url, "/groups?state=empty", auth)]
    reports = _each("export", url, auth, _targets(groups or [], all_, listing), dry_run)
    _finish(reports, as_json, _show_export)


def _show_export(r: dict[str, Any]) -> None:
    verb = "would write" if r["dry_run"] else "wrote"
    console.print(f"{escape(r['group_id'])}: {verb} {len(r['offsets'])} offset(s) to the upstream")
