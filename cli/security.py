"""`coordinator users|acls`: SCRAM credentials and ACLs, straight in the database.

These commands need no running node: they migrate the database (as `coordinator migrate`
does) and change it directly, so the first super user can be created before any node starts.
Nodes see a change within a second (they poll the security change counter). This is one of
the CLI's two paths (docs/operations.md): credentials and bindings are rows of the shared store,
not state of any node's core, while groups and topics are changed through a running node's
admin API (cli/admin.py). The same operations are served by /users and /acls once nodes run.

A password is read from stdin when stdin is not a terminal (one line, its newline stripped),
otherwise from a hidden prompt asked twice; it is never a command-line argument, so it shows
neither in `ps` nor in a shell's history. No command prints a password, salt or key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from app.config import read_setting
from app.security.acl import (
    CLUSTER_NAME,
    SUPPORTED,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from app.security.audit import audit, audit_log
from app.security.sasl import (
    MIN_ITERATIONS,
    SCRAM_MECHANISMS,
    CredentialRejected,
    check_iterations,
    check_user_name,
    make_credential,
)

if TYPE_CHECKING:
    from storage.log import EventLog

T = TypeVar("T")
E = TypeVar("E", bound=IntEnum)

console = Console()
err = Console(stderr=True)

users_cli = typer.Typer(
    no_args_is_help=True,
    help="SCRAM users (SASL credentials), in the database: set, list, delete.",
)
acls_cli = typer.Typer(
    no_args_is_help=True, help="ACLs (COORD_AUTHORIZER=acl), in the database: add, list, remove."
)

# the audit trail's "who" and "where" for a change made from this command
AUDIT_PRINCIPAL = "cli"
AUDIT_SOURCE = "local"


DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url", help="the node's database (COORD_DATABASE_URL)", show_default=False
    ),
]
Json = Annotated[bool, typer.Option("--json", help="print JSON instead of a table")]


def fail(message: str, code: int) -> typer.Exit:
    err.print(f"[red]{escape(message)}[/red]")
    return typer.Exit(code)


def _database_url(override: str | None) -> str:
    if override:
        return override
    try:
        # only this setting: a bad other one must not stop an operator from creating a user
        url: str = read_setting("database_url")
        return url
    except ValueError as e:
        raise fail(f"invalid COORD_DATABASE_URL: {e}", 2) from e


def with_log(database_url: str | None, work: Callable[[EventLog], Awaitable[T]]) -> T:
    """Migrate the database (`coordinator migrate`'s helper), open it, run `work`, close it."""
    from storage.errors import StorageError
    from storage.log import EventLog
    from storage.migrate import upgrade

    url = _database_url(database_url)

    async def run() -> T:
        log = await EventLog.open(url)
        try:
            return await work(log)
        finally:
            await log.close()

    try:
        upgrade(url)
        return asyncio.run(run())
    except StorageError as e:
        raise fail(f"database error: {type(e).__name__}: {e}", 1) from e


def _audit_to_stderr() -> None:
    """Each change is one JSON line on the audit logger; here it goes to stderr."""
    if not audit_log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        audit_log.addHandler(handler)
        audit_log.setLevel(logging.INFO)
        audit_log.propagate = False


def _audit(action: str, resource: str, **detail: Any) -> None:
    _audit_to_stderr()
    audit(
        action,
        "success",
        principal=AUDIT_PRINCIPAL,
        source=AUDIT_SOURCE,
        resource=resource,
        **detail,
    )


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    table = Table(title=escape(title))
    for c in columns:
        table.add_column(c)
    for row in rows:
        table.add_row(*(escape(str(cell)) for cell in row))
    console.print(table)


# --- users -------------------------------------------------------------------------------------


def _mechanisms(given: list[str] | None) -> list[str]:
    if not given:
        return list(SCRAM_MECHANISMS)  # Kafka users usually get both
    out: list[str] = []
    for m in given:
        name = m.strip().upper()
        if name not in SCRAM_MECHANISMS:
            raise fail(f"--mechanism {m}: not one of {', '.join(SCRAM_MECHANISMS)}", 2)
        if name not in out:
            out.append(name)
    return out


Mechanisms = Annotated[
    list[str] | None,
    typer.Option(
        "--mechanism",
        "-m",
        help="SCRAM-SHA-256 or SCRAM-SHA-512; repeat for both (default: both)",
        show_default=False,
    ),
]


def read_password() -> str:
    """One line of stdin (newline stripped) when stdin is not a terminal, else a hidden
    prompt with confirmation."""
    if sys.stdin is None or not sys.stdin.isatty():
        raw = sys.stdin.buffer.readline() if sys.stdin is not None else b""
        try:
            password = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise fail("the password on stdin is not UTF-8", 2) from e
        password = password.removesuffix("\n").removesuffix("\r")
    else:
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=True)
    if not password:
        raise fail("the password is empty", 2)
    return password


@users_cli.command("set")
def users_set(
    name: Annotated[str, typer.Argument(help="the user name (principal User:NAME)")],
    mechanism: Mechanisms = None,
    iterations: Annotated[
        int, typer.Option(help="PBKDF2 iterations, 4096 to 16384")
    ] = MIN_ITERATIONS,
    database_url: DatabaseUrl = None,
) -> None:
    """Create or replace a user's SCRAM credentials. The password is read from stdin (one
    line) or, on a terminal, from a hidden prompt; never from the command line."""
    mechanisms = _mechanisms(mechanism)
    try:
        check_user_name(name)
        for m in mechanisms:
            check_iterations(m, iterations)
    except CredentialRejected as e:
        raise fail(str(e), 2) from e
    password = read_password()
    try:
        credentials = [make_credential(name, m, password, iterations) for m in mechanisms]
    except CredentialRejected as e:
        raise fail(str(e), 2) from e
    del password

    async def store(log: EventLog) -> None:
        await log.upsert_scram_credentials(credentials)

    with_log(database_url, store)
    for m in mechanisms:
        _audit(
            "AlterUserScramCredentials",
            f"USER:{name}",
            mechanism=m,
            iterations=iterations,
            operation="upsert",
        )
    typer.echo(
        f"set {' and '.join(mechanisms)} credentials of user {name!r} ({iterations} iterations)"
    )


@users_cli.command("list")
def users_list(database_url: DatabaseUrl = None, as_json: Json = False) -> None:
    """The users with SCRAM credentials: name, mechanism, iterations (no salts, no keys)."""

    async def load(log: EventLog) -> list[tuple[str, str, int]]:
        return [(c.user, c.mechanism, c.iterations) for c in await log.scram_credentials()]

    rows = with_log(database_url, load)
    if as_json:
        typer.echo(
            json.dumps([{"user": u, "mechanism": m, "iterations": i} for u, m, i in rows], indent=2)
        )
        return
    print_table("SCRAM users", ["user", "mechanism", "iterations"], rows)


@users_cli.command("delete")
def users_delete(
    name: Annotated[str, typer.Argument(help="the user name")],
    mechanism: Annotated[
        list[str] | None,
        typer.Option(
            "--mechanism", "-m", help="only this mechanism (default: all)", show_default=False
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete a user's SCRAM credentials (all of them, or those of --mechanism)."""
    mechanisms = _mechanisms(mechanism)

    async def delete(log: EventLog) -> int:
        return await log.delete_scram_credentials([(name, m) for m in mechanisms])

    deleted = with_log(database_url, delete)
    if not deleted:
        raise fail(f"user {name!r} has no {' or '.join(mechanisms)} credential", 1)
    _audit(
        "AlterUserScramCredentials",
        f"USER:{name}",
        mechanisms=mechanisms,
        operation="delete",
        deleted=deleted,
    )
    typer.echo(f"deleted {deleted} credential{'s' if deleted != 1 else ''} of user {name!r}")


# --- ACLs --------------------------------------------------------------------------------------


def parse_enum(kind: type[E], option: str, value: str, allowed: Sequence[E]) -> E:
    """An enum member by name, case-insensitive, '-' for '_' (describe-configs)."""
    name = value.strip().upper().replace("-", "_")
    for member in allowed:
        if member.name == name:
            return member
    names = ", ".join(m.name for m in allowed)
    raise fail(f"{option} {value}: not one of {names}", 2)


_OPERATIONS = [op for op in AclOperation if op not in (AclOperation.UNKNOWN, AclOperation.ANY)]
_RESOURCE_TYPES = list(SUPPORTED)

Principal = Annotated[
    str | None, typer.Option(help="User:NAME (User:* for everyone)", show_default=False)
]
Operation = Annotated[
    str | None,
    typer.Option(help="READ, DESCRIBE, DELETE, ALL, … (Kafka's AclOperation)", show_default=False),
]
RType = Annotated[
    str | None,
    typer.Option(
        "--resource-type", help="GROUP, TOPIC, CLUSTER or TRANSACTIONAL_ID", show_default=False
    ),
]
RName = Annotated[
    str | None,
    typer.Option("--resource-name", help="the group, topic or prefix", show_default=False),
]
Host = Annotated[str | None, typer.Option(help="a client address (* for any)", show_default=False)]


def _binding_row(b: AclBinding) -> list[str]:
    return [
        b.principal,
        b.host,
        b.operation.name,
        b.permission.name,
        b.resource_type.name,
        b.resource_name,
        b.pattern_type.name,
    ]


_ACL_COLUMNS = [
    "principal",
    "host",
    "operation",
    "permission",
    "resource_type",
    "resource_name",
    "pattern_type",
]


def show_bindings(title: str, bindings: Sequence[AclBinding], as_json: bool) -> None:
    rows = [_binding_row(b) for b in bindings]
    if as_json:
        typer.echo(json.dumps([dict(zip(_ACL_COLUMNS, r, strict=True)) for r in rows], indent=2))
    else:
        print_table(title, _ACL_COLUMNS, rows)


def _acl_resource(b: AclBinding) -> str:
    return f"{b.resource_type.name}:{b.pattern_type.name}:{b.resource_name}"


def _audit_acl(action: str, b: AclBinding) -> None:
    _audit(
        action,
        _acl_resource(b),
        acl_principal=b.principal,
        acl_host=b.host,
        operation=b.operation.name,
        permission=b.permission.name,
    )


@acls_cli.command("add")
def acls_add(
    principal: Annotated[str, typer.Option(help="User:NAME (User:* for everyone)")],
    operation: Annotated[str, typer.Option(help="READ, DESCRIBE, DELETE, ALL, …")],
    resource_type: Annotated[
        str, typer.Option("--resource-type", help="GROUP, TOPIC, CLUSTER or TRANSACTIONAL_ID")
    ],
    resource_name: RName = None,
    pattern: Annotated[
        str, typer.Option("--pattern", "--pattern-type", help="LITERAL or PREFIXED")
    ] = "LITERAL",
    host: Annotated[str, typer.Option(help="a client address (* for any)")] = "*",
    deny: Annotated[bool, typer.Option("--deny", help="a DENY binding (default ALLOW)")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Add an ALLOW (or --deny) binding; adding one that exists changes nothing."""
    rtype = parse_enum(ResourceType, "--resource-type", resource_type, _RESOURCE_TYPES)
    if resource_name is None:
        if rtype != ResourceType.CLUSTER:
            raise fail("--resource-name is required (the group, topic or prefix)", 2)
        resource_name = CLUSTER_NAME
    binding = AclBinding(
        rtype,
        resource_name,
        parse_enum(PatternType, "--pattern", pattern, [PatternType.LITERAL, PatternType.PREFIXED]),
        principal,
        host,
        parse_enum(AclOperation, "--operation", operation, _OPERATIONS),
        AclPermissionType.DENY if deny else AclPermissionType.ALLOW,
    )
    if (why := binding.check()) is not None:
        raise fail(f"invalid ACL: {why}", 2)

    async def create(log: EventLog) -> None:
        await log.create_acls([binding])

    with_log(database_url, create)
    _audit_acl("CreateAcls", binding)
    show_bindings("added", [binding], False)


def _filter(
    principal: str | None,
    operation: str | None,
    resource_type: str | None,
    resource_name: str | None,
    pattern: str | None,
    host: str | None,
    permission: str | None,
) -> AclBindingFilter:
    f = AclBindingFilter(
        resource_type=ResourceType.ANY
        if resource_type is None
        else parse_enum(ResourceType, "--resource-type", resource_type, _RESOURCE_TYPES),
        resource_name=resource_name,
        pattern_type=PatternType.ANY
        if pattern is None
        else parse_enum(
            PatternType,
            "--pattern",
            pattern,
            [PatternType.ANY, PatternType.MATCH, PatternType.LITERAL, PatternType.PREFIXED],
        ),
        principal=principal,
        host=host,
        operation=AclOperation.ANY
        if operation is None
        else parse_enum(AclOperation, "--operation", operation, list(AclOperation)[1:]),
        permission=AclPermissionType.ANY
        if permission is None
        else parse_enum(
            AclPermissionType,
            "--permission",
            permission,
            [AclPermissionType.ANY, AclPermissionType.ALLOW, AclPermissionType.DENY],
        ),
    )
    if (why := f.check()) is not None:
        raise fail(f"invalid filter: {why}", 2)
    return f


FilterPattern = Annotated[
    str | None,
    typer.Option(
        "--pattern",
        "--pattern-type",
        help="LITERAL, PREFIXED, ANY, or MATCH (the bindings that apply to --resource-name)",
        show_default=False,
    ),
]
Permission = Annotated[str | None, typer.Option(help="ALLOW or DENY", show_default=False)]


@acls_cli.command("list")
def acls_list(
    principal: Principal = None,
    operation: Operation = None,
    resource_type: RType = None,
    resource_name: RName = None,
    pattern: FilterPattern = None,
    host: Host = None,
    permission: Permission = None,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """The stored bindings; each option given narrows the list."""
    f = _filter(principal, operation, resource_type, resource_name, pattern, host, permission)

    async def load(log: EventLog) -> list[AclBinding]:
        return [b for b in await log.acl_bindings() if f.matches(b)]

    show_bindings("ACLs", with_log(database_url, load), as_json)


@acls_cli.command("remove")
def acls_remove(
    principal: Principal = None,
    operation: Operation = None,
    resource_type: RType = None,
    resource_name: RName = None,
    pattern: FilterPattern = None,
    host: Host = None,
    permission: Permission = None,
    remove_all: Annotated[
        bool, typer.Option("--all", help="with no other option: remove every binding")
    ] = False,
    database_url: DatabaseUrl = None,
    as_json: Json = False,
) -> None:
    """Remove the bindings the options match (at least one option, or --all) and print them."""
    given = (principal, operation, resource_type, resource_name, pattern, host, permission)
    if all(v is None for v in given) and not remove_all:
        raise fail("name what to remove (--principal, --resource-name, …) or pass --all", 2)
    f = _filter(*given)

    async def delete(log: EventLog) -> list[AclBinding]:
        (removed,) = await log.delete_acls([f])
        return removed

    removed = with_log(database_url, delete)
    for b in removed:
        _audit_acl("DeleteAcls", b)
    show_bindings(f"removed {len(removed)}", removed, as_json)
