"""Fixtures every suite shares.

`pg_admin_dsn` is the PostgreSQL server of this test run: the one `COORD_TEST_PG_DSN` names, or
else a private cluster started on first use (initdb into a temp dir, a free port on 127.0.0.1,
trust auth) and stopped when the run ends. Tests create and drop their own databases on it.
Nothing is skipped without it: missing binaries or an unreachable server fail the test loudly
(`make deps` installs the binaries; `make test` runs it first).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

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
