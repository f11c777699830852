"""Fixtures of the admin-surface tests (tests/api): a real node with its admin app on uvicorn."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.e2e import COORD_ENV, Env
from tests.api.helpers import Api, served_node
from tests.support.nodes import CoordinatorProcess


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[Api]:
    async with served_node(tmp_path) as a:
        yield a


@pytest.fixture
async def secured(tmp_path: Path) -> AsyncIterator[Api]:
    """A node whose admin API needs `Authorization: Bearer s3cret` (its client sends none),
    with a security manager (HTTP Basic, /acls, /users) and no authorizer."""
    async with served_node(tmp_path, token="s3cret", security=True) as a:
        a.http.headers.pop("Authorization", None)
        yield a


@pytest.fixture(autouse=True)
def no_exception_escapes_the_app(caplog: pytest.LogCaptureFixture) -> object:
    """uvicorn logs "Exception in ASGI application" for anything the app let escape, even when
    a response had already been sent; no test of the admin surface may cause one."""
    yield None
    escaped = [
        r.getMessage()
        for r in caplog.get_records("call")
        if r.name.startswith("uvicorn") and r.levelno >= logging.ERROR
    ]
    assert not escaped, escaped


@pytest.fixture(scope="session")
def coordinator_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    """One `coordinator serve` process for the end-to-end tests of the session (each test uses
    its own groups; starting a node costs seconds on a busy CI box)."""
    workdir = tmp_path_factory.mktemp("e2e-coordinator")
    proc = CoordinatorProcess(
        f"sqlite+aiosqlite:///{workdir}/coordinator.db", workdir, dict(COORD_ENV)
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.kill()


@pytest.fixture
def e2e(tmp_path: Path, coordinator_process: CoordinatorProcess) -> Iterator[Env]:
    """The shared coordinator (restarted if a test left it dead) and this test's consumers,
    all killed at the end. Their kafka-python metadata age is short (see e2e.py)."""
    if coordinator_process.proc is None or coordinator_process.proc.poll() is not None:
        coordinator_process.start()
    env = Env(tmp_path, coordinator_process)
    try:
        yield env
    finally:
        env.teardown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    """A failed end-to-end test reports the coordinator log, every consumer's events and
    stderr, and the group records of the event log."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        env = getattr(item, "funcargs", {}).get("e2e")
        if isinstance(env, Env):
            for title, text in env.diagnostics():
                report.sections.append((title, text))
