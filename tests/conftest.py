"""Fixtures every suite shares.

`pg_admin_dsn` is the PostgreSQL server of this test run: the one `COORD_TEST_PG_DSN` names, or
else a private cluster started on first use (initdb into a temp dir, a free port on 127.0.0.1,
trust auth) and stopped when the run ends. Tests create and drop their own databases on it.
Nothing is skipped without it: missing binaries or an unreachable server fail the test loudly
(`make deps` installs the binaries; `make test` runs it first).

`apache_kafka_broker` is Apache Kafka 4.4's own broker (tests/support/kafka_broker.py), started
once per run on first use, its group coordinator warmed up, with DIFF_TOPIC created: the oracle
of the differential suite and the second server of the SDK's tests.

`make test` runs in four phases: every test neither `serial` nor `timed` on three xdist workers
(most of them wait on clients, timers and processes, not on the CPU), a module at a time (the
Spark suites together), against the compiled hot path (app/compiled.py); the unit, protocol,
runtime and fuzz suites again with COORD_PURE_PYTHON=1, with the `pure_python` tests that
patch the hot path's internals; the `timed` modules (TIMED) in two lanes; the `serial` ones
(SERIAL) one at a time. Each entry of TIMED and SERIAL says why its module is there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings
from xdist.scheduler import LoadFileScheduling

from app import compiled
from tests.support.kafka_broker import (
    DIFF_TOPIC,
    DIFF_TOPIC_PARTITIONS,
    KafkaBroker,
    running,
    wait_for_coordinator,
)
from tests.support.postgres import PrivatePostgres, check_reachable

# Under pytest, this Hypothesis (6.170) prints a failing example's arguments empty (`x=,`, even
# for integers); the blob `@reproduce_failure` takes replays it, on CI's fresh machine too, which
# has no example database
settings.register_profile("coordinator", print_blob=True)
settings.load_profile("coordinator")

# module -> why it must not share the machine with another test: these run one at a time
SERIAL = {
    # beside the parallel phase, its security figure refused to measure ("the machine was too
    # busy"), and it added 2.7 min to that phase against 3.5 min alone
    "tests/bench/test_bench_smoke.py": "runs every benchmark figure, several processes at once",
    "tests/protocol/test_hostile_live.py": "bounds the well-behaved members' heartbeat p99",
    "tests/protocol/test_auth_storm.py": "bounds the members' heartbeat p99 under a storm",
}

# module -> why it needs a quiet machine. These use little CPU and wait on timers (leases,
# sessions, fault schedules) that a machine saturated by the parallel phase would stretch:
# they run after it, in two lanes at once, the chaos suite in one and the others in the other
TIMED = {
    "tests/chaos/test_chaos.py": "kills and pauses nodes and PostgreSQL on a timed schedule",
    "tests/runtime/test_storage_faults.py": "times leases against a stopped PostgreSQL",
    "tests/runtime/test_clock_steps.py": "times leases against stepped clocks",
    "tests/sdk/test_membership_e2e.py": "worker restarts must beat a session timeout",
    "tests/integration/test_acl_propagation.py": "an ACL must reach the other node within 3 s",
    # who leads is who joins first: 0.1 s apart, which a saturated machine can reorder
    "tests/differential/test_differential.py": "its scenarios order two members' joins in time",
    "tests/api/test_admin_loop.py": "bounds a heartbeat's round trip during an admin call",
}
CHAOS_LANE = "tests/chaos/test_chaos.py"


# the modules that take longest go to the workers first, so none is the last one running
LONGEST_FIRST = (
    "tests/pipeline/",  # Spark audits, minutes in all
    "tests/deploy/test_install.py",  # a node pip-installed into a fresh venv: minutes of waiting
    "tests/differential/test_consumer_groups_side_by_side.py",
    "tests/integration/test_real_clients.py",
    "tests/fuzz/",
    "tests/api/test_cli_security.py",
    "tests/api/test_cli.py",
    "tests/integration/test_security.py",
)


def _module(nodeid: str) -> str:
    return nodeid.partition("::")[0]


def _start_rank(item: pytest.Item) -> int:
    path = _module(item.nodeid)
    return next((i for i, p in enumerate(LONGEST_FIRST) if path.startswith(p)), len(LONGEST_FIRST))


def pytest_configure(config: pytest.Config) -> None:
    # `make install` builds the compiled hot path: a suite that found it missing or stale would
    # test the interpreted one only, while the node runs the other
    if not compiled.active() and not compiled.pure_requested():
        raise pytest.UsageError(
            f"the compiled build is not in use ({compiled.STATUS}); run `make install`, or "
            f"set {compiled.PURE_ENV}=1 to test the interpreted source"
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if compiled.active() and item.get_closest_marker("pure_python"):
        pytest.fail(
            f"this test patches a compiled module, which only the interpreted source allows: "
            f"run it with {compiled.PURE_ENV}=1 (make test's pure-Python phase does)",
            pytrace=False,
        )


# the suites make test runs again interpreted (the Makefile's PURE_SUITES): the only place a
# `pure_python` test runs
PURE_SUITES = ("tests/unit/", "tests/protocol/", "tests/runtime/", "tests/fuzz/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        module = _module(item.nodeid)
        if module in SERIAL:
            item.add_marker(pytest.mark.serial)
        if module in TIMED:
            item.add_marker(pytest.mark.timed)
        if item.get_closest_marker("pure_python") and (
            module in SERIAL or module in TIMED or not module.startswith(PURE_SUITES)
        ):
            raise pytest.UsageError(
                f"{item.nodeid} is marked pure_python but make test's interpreted phase does "
                f"not run it: it runs {' '.join(PURE_SUITES)}, without the serial and timed "
                "modules"
            )
    items.sort(key=_start_rank)  # stable


class _ModuleScheduling(LoadFileScheduling):
    """xdist's unit of work is a module, so its fixtures are built once; the Spark suites are
    one unit: a second SparkSession would warm up a second JVM (the first audit in a JVM takes
    several times the next one). The timed modules but the chaos suite are one unit too: the
    chaos suite's lane, and the other one's (one Apache Kafka broker for the SDK's and the
    differential suite's tests)."""

    def _split_scope(self, nodeid: str) -> str:
        path = _module(nodeid)
        if path.startswith("tests/pipeline/"):
            return "tests/pipeline/"
        if path in TIMED and path != CHAOS_LANE:
            return "timed"
        return path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    return _ModuleScheduling(config, log) if config.getoption("dist") == "loadfile" else None


@pytest.fixture(scope="session")
def pg_admin_dsn() -> Iterator[str]:
    if dsn := os.environ.get("COORD_TEST_PG_DSN"):
        try:
            check_reachable(dsn)
        except RuntimeError as e:
            pytest.fail(f"{e}; start it or unset COORD_TEST_PG_DSN", pytrace=False)
        yield dsn
        return
    try:
        pg = PrivatePostgres(prefix="coord-test-pg-")
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        pg.start()
        yield pg.dsn("postgres")
    finally:
        pg.cleanup()


@pytest.fixture(scope="session")
def apache_kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    def ready(broker: KafkaBroker) -> None:
        broker.create_topic(DIFF_TOPIC, DIFF_TOPIC_PARTITIONS)
        wait_for_coordinator(broker.address)

    broker = KafkaBroker(tmp_path_factory.mktemp("apache-kafka"), initial_rebalance_delay_ms=300)
    with running(broker, "Apache Kafka's broker is needed here", then=ready):
        yield broker
