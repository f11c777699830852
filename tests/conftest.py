"""Fixtures every suite shares.

`pg_admin_dsn` is the PostgreSQL server of this test run: the one `COORD_TEST_PG_DSN` names, or
else a private cluster started on first use (initdb into a temp dir, a free port on 127.0.0.1,
trust auth) and stopped when the run ends. Tests create and drop their own databases on it.
Nothing is skipped without it: missing binaries or an unreachable server fail the test loudly
(`make deps` installs the binaries; `make test` runs it first).

`apache_kafka_broker` is Apache Kafka 4.0's own broker (tests/support/kafka_broker.py), started
once per run on first use, its group coordinator warmed up, with DIFF_TOPIC created: the oracle
of the differential suite and the second server of the SDK's tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.kafka_broker import (
    DIFF_TOPIC,
    DIFF_TOPIC_PARTITIONS,
    BrokerUnavailable,
    KafkaBroker,
    wait_for_coordinator,
)
from tests.support.postgres import PrivatePostgres, check_reachable


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
    broker = KafkaBroker(tmp_path_factory.mktemp("apache-kafka"), initial_rebalance_delay_ms=300)
    try:
        broker.start()
        broker.create_topic(DIFF_TOPIC, DIFF_TOPIC_PARTITIONS)
        wait_for_coordinator(broker.address)
    except BrokerUnavailable as e:
        broker.stop()
        pytest.fail(f"Apache Kafka's broker is needed here: {e}", pytrace=False)
    try:
        yield broker
    finally:
        broker.stop()
