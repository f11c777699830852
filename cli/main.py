"""The `coordinator` command.

The commands that need the node (uvicorn, kio: ~2 s), the event log or the audit import them
when they run, so `coordinator groups ...` starts in a fraction of a second.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from app.config import Settings, shown_database_url
from cli import moves  # noqa: F401 - registers `groups import|export` on groups_cli
from cli.admin import cluster_command, groups_cli, topics_cli
from cli.certs import certs_cli
from cli.security import acls_cli, users_cli

cli = typer.Typer(no_args_is_help=True, add_completion=False, help="The `coordinator` command.")


def _settings(**overrides: Any) -> Settings:
    """Environment (COORD_*) first, then any flag given on the command line."""
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValueError as e:
        typer.echo(f"invalid settings: {e}", err=True)
        raise typer.Exit(2) from e


def _run(coro: Any) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)


Opt = typer.Option


@cli.command()
def serve(
    database_url: Annotated[str | None, Opt(help="COORD_DATABASE_URL")] = None,
    node_id: Annotated[int | None, Opt(help="COORD_NODE_ID")] = None,
    kafka_listen: Annotated[str | None, Opt(help="COORD_KAFKA_LISTEN host:port")] = None,
    advertised_listener: Annotated[str | None, Opt(help="COORD_ADVERTISED_LISTENER")] = None,
    admin_listen: Annotated[str | None, Opt(help="COORD_ADMIN_LISTEN host:port")] = None,
    initial_rebalance_delay_ms: Annotated[int | None, Opt()] = None,
    min_session_timeout_ms: Annotated[int | None, Opt()] = None,
    max_session_timeout_ms: Annotated[int | None, Opt()] = None,
    group_max_size: Annotated[int | None, Opt()] = None,
    topics: Annotated[str | None, Opt(help="COORD_TOPICS name:partitions,…")] = None,
    log_partitions: Annotated[int | None, Opt()] = None,
    offsets_retention_ms: Annotated[int | None, Opt()] = None,
    max_frame_bytes: Annotated[int | None, Opt()] = None,
    max_connections: Annotated[int | None, Opt()] = None,
    max_connections_per_ip: Annotated[int | None, Opt()] = None,
    connections_max_idle_ms: Annotated[int | None, Opt()] = None,
    frame_deadline_ms: Annotated[int | None, Opt()] = None,
    max_inflight_requests: Annotated[int | None, Opt()] = None,
    max_queued_reply_bytes: Annotated[int | None, Opt()] = None,
    max_client_id_bytes: Annotated[int | None, Opt()] = None,
    max_request_elements: Annotated[int | None, Opt()] = None,
    max_groups: Annotated[int | None, Opt()] = None,
    max_group_id_length: Annotated[int | None, Opt()] = None,
    max_pending_members: Annotated[int | None, Opt()] = None,
    max_record_bytes: Annotated[int | None, Opt()] = None,
    max_queued_records: Annotated[int | None, Opt()] = None,
    lease_ttl_ms: Annotated[int | None, Opt()] = None,
    log_level: Annotated[str | None, Opt(help="COORD_LOG_LEVEL")] = None,
    tombstone_retention_ms: Annotated[int | None, Opt()] = None,
    archive_history: Annotated[bool | None, Opt()] = None,
    history_retention_ms: Annotated[int | None, Opt()] = None,
    compaction_interval_ms: Annotated[int | None, Opt()] = None,
    upstream_bootstrap: Annotated[
        str | None, Opt(help="COORD_UPSTREAM_BOOTSTRAP host:port,… (gateway mode)")
    ] = None,
    upstream_security_protocol: Annotated[str | None, Opt()] = None,
    upstream_sasl_mechanism: Annotated[str | None, Opt()] = None,
    upstream_sasl_username: Annotated[str | None, Opt()] = None,
    upstream_ssl_cafile: Annotated[str | None, Opt()] = None,
    upstream_ssl_certfile: Annotated[str | None, Opt()] = None,
    upstream_ssl_keyfile: Annotated[str | None, Opt()] = None,
    upstream_metadata_refresh_ms: Annotated[int | None, Opt()] = None,
    gateway_broker_id_base: Annotated[int | None, Opt()] = None,
    gateway_broker_ports: Annotated[int | None, Opt()] = None,
    gateway_coordinator_id_base: Annotated[int | None, Opt()] = None,
    upstream_offsets: Annotated[
        str | None, Opt(help="COORD_UPSTREAM_OFFSETS import|mirror|off (gateway mode)")
    ] = None,
    upstream_mirror_interval_ms: Annotated[int | None, Opt()] = None,
    upstream_lag_refresh_ms: Annotated[int | None, Opt()] = None,
    upstream_check_interval_ms: Annotated[int | None, Opt()] = None,
    lag_max_partitions: Annotated[int | None, Opt()] = None,
    group_metrics_max_groups: Annotated[int | None, Opt()] = None,
    ownership_check_interval_ms: Annotated[int | None, Opt()] = None,
) -> None:
    """Run a coordinator node (migrates the database first); a gateway in front of a Kafka
    cluster with --upstream-bootstrap (its password: COORD_UPSTREAM_SASL_PASSWORD only)."""
    settings = _settings(**{k: v for k, v in locals().items()})
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from cli.serve import serve as run_node

    _run(run_node(settings))


@cli.command()
def migrate(
    database_url: Annotated[str | None, Opt(help="COORD_DATABASE_URL")] = None,
) -> None:
    """Create or upgrade the event-log schema (Alembic) and exit."""
    settings = _settings(database_url=database_url)
    from storage.migrate import upgrade

    upgrade(settings.database_url)
    typer.echo(f"database at head: {shown_database_url(settings.database_url)}")


@cli.command()
def export(
    out: Annotated[Path, Opt(help="directory for log.parquet, history.parquet, manifest.json")],
    database_url: Annotated[str | None, Opt(help="COORD_DATABASE_URL")] = None,
) -> None:
    """Write the event log and its compaction history as Parquet (one consistent snapshot)."""
    settings = _settings(database_url=database_url)

    async def run() -> None:
        from storage.export import export as export_log
        from storage.log import EventLog

        event_log = await EventLog.open(settings.database_url)
        try:
            m = await export_log(event_log, out)
        finally:
            await event_log.close()
        typer.echo(f"exported {m.log_rows} log and {m.history_rows} history records to {out}")

    _run(run())


AUDIT_MODULES = ("pyspark", "pandas", "matplotlib")


@cli.command()
def audit(
    input_dir: Annotated[str, Opt("--input", help="a `coordinator export` directory")],
    out: Annotated[str, Opt(help="directory for tables/, report.md and the plots")],
    master: Annotated[str, Opt(help="Spark master URL")] = "local[*]",
    shuffle_partitions: Annotated[int | None, Opt(help="default 8 on local masters")] = None,
    driver_memory: Annotated[str | None, Opt(help="e.g. 4g (spark.driver.memory)")] = None,
    examples: Annotated[int, Opt(help="examples kept per violated invariant")] = 5,
    report: Annotated[bool, Opt(help="write report.md and the PNG plots")] = True,
    fail_on_violation: Annotated[bool, Opt(help="exit 1 if an invariant is violated")] = False,
) -> None:
    """Audit an exported log with Spark: rebalances, static membership, commits, invariants."""
    # a node's install leaves them out (pyproject.toml's `audit` extra)
    missing = [m for m in AUDIT_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        typer.echo(
            f"coordinator audit needs the audit extra ({', '.join(missing)} not installed): "
            "pip install 'coordinator[audit]'",
            err=True,
        )
        raise typer.Exit(2)
    from pipeline.main import audit_main

    result = audit_main(input_dir, out, master, shuffle_partitions, driver_memory, examples, report)
    for inv in result.invariants:
        status = "ok" if inv["ok"] else f"VIOLATED ({inv['violations']})"
        typer.echo(f"{inv['invariant']}: {status}")
    typer.echo(f"audited {result.input_rows} records in {result.seconds:.1f} s -> {out}")
    if fail_on_violation and result.violations:
        raise typer.Exit(1)


# the admin API's commands (cli/admin.py), listed after the node's own
cli.add_typer(groups_cli, name="groups")
cli.add_typer(topics_cli, name="topics")
cli.command("cluster")(cluster_command)
cli.add_typer(certs_cli, name="certs")  # a private CA and TLS certificates (cli/certs.py)
# credentials and ACLs, straight in the database (cli/security.py)
cli.add_typer(users_cli, name="users")
cli.add_typer(acls_cli, name="acls")


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
