"""Schemathesis over the admin API's OpenAPI schema: no input, valid or not, gets a 5xx.

The server is a real `coordinator serve` process (tests/support/nodes.py) with a bearer
token; every operation is fuzzed with schema-valid (positive) and schema-violating (negative)
requests, bounded to 50 examples per operation and mode, then once more without the token.
A group with members and committed offsets, a registration and a topic exist beforehand, so
generated ids sometimes hit real objects (the fixed ones are explicit examples)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from api.app import create_app
from tests.api.helpers import form_group
from tests.support.nodes import CoordinatorProcess

TOKEN = "fuzz-token"
SCHEMA = schemathesis.openapi.from_dict(create_app(None, TOKEN).openapi())  # type: ignore[arg-type]
OPERATIONS = {op.label: op for op in (r.ok() for r in SCHEMA.get_all_operations())}  # type: ignore[union-attr]
EXAMPLES = 50
# for the whole module, counted in requests, not in seconds that a loaded machine stretches:
# about a minute's worth (its 23 operations made 1,606 in 48 s on 2026-12-02)
REQUEST_BUDGET = 2_000


@pytest.fixture(scope="module")
def coord(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    tmp: Path = tmp_path_factory.mktemp("schemathesis")
    proc = CoordinatorProcess(
        f"sqlite+aiosqlite:///{tmp}/coordinator.db",
        tmp,
        {
            "COORD_ADMIN_TOKEN": TOKEN,
            "COORD_TOPICS": "t6:6,t1:3",
            "COORD_LOG_LEVEL": "INFO",
            "COORD_LEASE_TTL_MS": "30000",  # a loaded CI box must not stall a renewal
            "COORD_INITIAL_REBALANCE_DELAY_MS": "200",
        },
    )
    proc.start()
    try:
        asyncio.run(_seed(proc))
        yield proc
    finally:
        proc.kill()


async def _seed(proc: CoordinatorProcess) -> None:
    """A Stable group with committed offsets and a pending registration, left running."""
    import httpx

    members = await form_group(proc.kafka_port, "g", ["s1", None])
    m = members[0]
    await m.client.offset_commit(
        "g",
        {("t6", 0): 5},
        generation_id=m.generation,
        member_id=m.member_id,
        group_instance_id="s1",
    )
    for member in members:
        await member.client.close()  # static s1 stays a member until its session expires
    async with httpx.AsyncClient(
        base_url=proc.admin_url, headers={"Authorization": f"Bearer {TOKEN}"}
    ) as http:
        r = await http.post("/groups/g/static-members", json={"group_instance_ids": ["new-1"]})
        assert r.status_code == 200, r.text


SENT: list[int] = []  # the status of every request the module made
SESSION = requests.Session()  # keep-alive: the time goes to examples, not TCP handshakes


def fuzz(
    coord: CoordinatorProcess, label: str, mode: GenerationMode, token: bool, examples: int
) -> None:
    op = OPERATIONS[label]
    headers = {"Authorization": f"Bearer {TOKEN}"} if token else {}
    seen: list[int] = []

    @hypothesis.settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=op.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case[Any]) -> None:
        response = case.call(base_url=coord.admin_url, session=SESSION, headers=headers, timeout=10)
        seen.append(response.status_code)
        SENT.append(response.status_code)
        case.validate_response(response, checks=[not_a_server_error])
        assert response.status_code < 500, (case.as_curl_command(), response.text)
        if response.status_code >= 400:
            body = response.json()
            assert isinstance(body.get("detail"), str) and body["detail"], body

    try:
        run()
    except hypothesis.errors.Unsatisfiable:
        # no parameters or body to break: a negative case cannot exist
        assert mode is GenerationMode.NEGATIVE and not op.body and not list(op.iter_parameters())
        return
    assert seen, f"no request was made for {label}"


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_no_server_errors(coord: CoordinatorProcess, label: str) -> None:
    fuzz(coord, label, GenerationMode.POSITIVE, token=True, examples=EXAMPLES)
    fuzz(coord, label, GenerationMode.NEGATIVE, token=True, examples=EXAMPLES // 2)
    fuzz(coord, label, GenerationMode.POSITIVE, token=False, examples=5)
    assert len(SENT) <= REQUEST_BUDGET, f"the schemathesis run made {len(SENT)} requests"


def test_the_seeded_group_survived(coord: CoordinatorProcess) -> None:
    """The node is still healthy after the fuzzing (nothing crashed it)."""
    import urllib.request

    with urllib.request.urlopen(coord.admin_url + "/healthz", timeout=5) as r:
        assert r.status == 200
    assert coord.proc is not None and coord.proc.poll() is None
