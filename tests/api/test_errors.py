"""The admin service's outcomes and their HTTP answers: every outcome class has its status in
api/errors.py's one table, and app/admin speaks no HTTP."""

from __future__ import annotations

import ast
from pathlib import Path

import app.admin.errors as outcomes
from api.errors import STATUS, status_of
from app.admin import (
    AdminError,
    Conflict,
    InvalidGroupId,
    InvalidRequest,
    NotFound,
    TooLarge,
    Unavailable,
)

ADMIN = Path(outcomes.__file__).parent
HTTP_MODULES = ("httpx", "fastapi", "starlette", "uvicorn", "api")


def test_every_outcome_has_its_status() -> None:
    classes = {
        c
        for c in vars(outcomes).values()
        if isinstance(c, type) and issubclass(c, AdminError) and c is not AdminError
    }
    assert classes == set(STATUS)
    assert [status_of(c("x")) for c in (InvalidRequest, NotFound, Conflict, TooLarge)] == [
        422,
        404,
        409,
        413,
    ]
    assert status_of(Unavailable("x")) == 503
    assert status_of(InvalidGroupId("x")) == 400  # the most specific class wins


def test_the_admin_service_imports_nothing_of_http() -> None:
    found = []
    for path in sorted(ADMIN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            found += [f"{path.name}: {n}" for n in names if n.split(".")[0] in HTTP_MODULES]
    assert found == []
