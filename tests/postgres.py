"""The shared PostgreSQL server the storage suite and node tests use (python-svc machines:
127.0.0.1:5432, trust auth, database `test`). It is part of the project machine: a test that
needs it fails loudly when it is unreachable, in CI and out, rather than being skipped."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

PG_ADMIN_DSN = os.environ.get("COORD_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def postgres_unreachable(reason: str) -> NoReturn:
    pytest.fail(
        f"PostgreSQL is required but unreachable at {PG_ADMIN_DSN} ({reason}); start it or "
        "point COORD_TEST_PG_DSN at a server",
        pytrace=False,
    )
