"""The chaos suite (issue 3): real coordinator processes, real clients, injected faults.

Registers the `chaos` marker, gives each test a `chaos` factory whose runs are torn down
(every child process SIGKILLed, the private PostgreSQL stopped) whatever happens, puts the
timeline, node logs, consumer events and the PostgreSQL log of a failed run into the pytest
report, and prints every run's counts in the terminal summary. Nothing here skips: missing
PostgreSQL binaries fail the test.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

from tests.chaos.scenario import ChaosRun, Config

_SUMMARIES: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "chaos: fault-injection runs with real coordinator processes (tests/chaos)"
    )


@pytest.fixture
def chaos(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[Config], ChaosRun]]:
    runs: list[ChaosRun] = []

    def make(cfg: Config) -> ChaosRun:
        run = ChaosRun(cfg, tmp_path)
        runs.append(run)
        request.node.chaos_runs = runs
        return run

    try:
        yield make
    finally:
        for run in runs:
            run.teardown()
            if run.summary:
                _SUMMARIES.append(run.summary)
        failed = getattr(request.node, "chaos_failed", False)
        for run in runs:
            if not failed:
                run.cleanup_files()  # keep a failed run's PostgreSQL directory for inspection


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and report.when in ("setup", "call"):
        item.chaos_failed = True  # type: ignore[attr-defined]
        for run in getattr(item, "chaos_runs", []):
            for title, text in run.diagnostics():
                report.sections.append((f"{run.cfg.name}: {title}", text))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _SUMMARIES:
        terminalreporter.section("chaos counts")
        for line in _SUMMARIES:
            terminalreporter.write_line(line)
