"""The storage suite on PostgreSQL: a fresh database for this module on the test run's server
(tests/conftest.py), tables truncated between tests."""

from __future__ import annotations

import pytest
from sqlalchemy import make_url

from tests.storage.conftest import pg_truncate, pg_url
from tests.storage.suite import EventLogSuite

pytestmark = pytest.mark.postgres


class TestPostgresEventLog(EventLogSuite):
    @pytest.fixture
    async def url(self, pg_database: str) -> str:
        await pg_truncate(pg_database)
        return pg_database

    @pytest.fixture
    def unreachable_url(self, pg_admin_dsn: str) -> str:
        url = make_url(pg_url(pg_admin_dsn, "nowhere")).set(port=1)
        return url.render_as_string(hide_password=False)
