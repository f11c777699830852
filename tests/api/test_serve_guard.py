"""Secure by default: a node whose admin API is reachable from other machines does not start
without COORD_ADMIN_TOKEN (unless COORD_ADMIN_ALLOW_INSECURE=true); the token is no
`coordinator serve` flag (it would show in `ps`); the start-up line masks the database
password."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings
from cli.serve import admin_exposure_problem, is_loopback, shown_database_url
from tests.support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def problem(**kw: Any) -> str | None:
    return admin_exposure_problem(Settings(**kw))


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "127.3.4.5", "localhost", "LOCALHOST", "::1", "[::1]"]
)
def test_loopback_needs_no_token(host: str) -> None:
    assert problem(admin_listen=f"{host}:8080") is None
    assert is_loopback(host.strip("[]"))


@pytest.mark.parametrize("host", ["0.0.0.0", "", "[::]", "10.0.0.7", "node1", "192.168.1.2"])
def test_anything_else_needs_a_token_or_the_explicit_opt_out(host: str) -> None:
    message = problem(admin_listen=f"{host}:8080")
    assert message is not None and "COORD_ADMIN_TOKEN" in message
    assert "COORD_ADMIN_ALLOW_INSECURE" in message and ":8080" in message
    assert problem(admin_listen=f"{host}:8080", admin_token="t") is None
    assert problem(admin_listen=f"{host}:8080", admin_allow_insecure=True) is None


def test_other_admin_settings_that_cannot_work() -> None:
    assert "together" in (problem(admin_ssl_certfile="c.pem") or "")
    assert "COORD_ADVERTISED_ADMIN_URL" in (problem(advertised_admin_url="node1:8080") or "")


def test_the_database_password_is_masked() -> None:
    shown = shown_database_url("postgresql+asyncpg://coord:s3cr3t@db:5432/coordinator")
    assert "s3cr3t" not in shown and shown.startswith("postgresql+asyncpg://coord:***@db:5432/")
    assert (
        shown_database_url("sqlite+aiosqlite:///./data/c.db") == "sqlite+aiosqlite:///./data/c.db"
    )
    assert "secret" not in shown_database_url("::not a url secret::")


def run_serve(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("COORD_")}
    base.update(
        COORD_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/c.db",
        COORD_KAFKA_LISTEN=f"127.0.0.1:{free_port()}",
        **env,
    )
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "serve", *args],
        cwd=ROOT,
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_refuses_a_public_admin_listener_without_a_token(tmp_path: Path) -> None:
    port = free_port()
    res = run_serve(tmp_path, COORD_ADMIN_LISTEN=f"0.0.0.0:{port}")
    assert res.returncode != 0
    assert "refusing to start" in res.stderr and "COORD_ADMIN_TOKEN" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "c.db").exists()  # it stopped before touching the database
    # the token is no flag
    res = run_serve(tmp_path, "--admin-token", "x", COORD_ADMIN_LISTEN=f"127.0.0.1:{port}")
    assert res.returncode == 2 and "--admin-token" in res.stderr, res.stderr
