"""Issue 3's chaos suite: failover must lose no acknowledged commit, keep static groups'
generations, never let a generation go back or a partition have two owners, and never accept
a write from a superseded lease epoch.

The fault schedule is seeded (printed; rerun one with CHAOS_SEED=...). CHAOS_ROUNDS_A and
CHAOS_ROUNDS_B override the number of rounds.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from tests.chaos.scenario import ChaosRun, Config

pytestmark = pytest.mark.chaos


def run_scenario(run: ChaosRun) -> None:
    run.setup()
    run.wait_baseline()
    run.run_rounds()
    run.settle_and_stop_load()
    run.verify()
    assert not run.violations, f"{len(run.violations)} violations:\n" + "\n".join(run.violations)


def test_three_nodes_on_postgres_survive_kills_pauses_and_database_restarts(
    chaos: Callable[[Config], ChaosRun],
) -> None:
    run = chaos(
        Config(
            name="A: 3 nodes on PostgreSQL",
            backend="postgres",
            nodes=3,
            rounds=int(os.environ.get("CHAOS_ROUNDS_A", "9")),
            faults=("kill", "stop", "pg_restart"),
        )
    )
    run_scenario(run)
    assert run.counts.kills and run.counts.stops and run.counts.pg_restarts


def test_two_nodes_on_one_sqlite_file_survive_kills(
    chaos: Callable[[Config], ChaosRun],
) -> None:
    run = chaos(
        Config(
            name="B: 2 nodes on one SQLite file",
            backend="sqlite",
            nodes=2,
            rounds=int(os.environ.get("CHAOS_ROUNDS_B", "4")),
            faults=("kill",),
            protocol_groups=16,
            static_members=2,
            dynamic_members=2,
            budget_s=200,
        )
    )
    run_scenario(run)
    assert run.counts.kills == run.cfg.rounds
