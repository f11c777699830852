"""Pre-registration end-to-end (issue 4): a Stable group of 4 static confluent-kafka consumers
(group.instance.id) scales to 8.

- with the 4 newcomers registered through the API, starting them one by one within the
  expansion timeout costs exactly one new generation (counted in the event log: the group's
  GROUP_METADATA records, decoded);
- the same scale-up without registration costs more than one;
- the registration survives a SIGKILL of the coordinator in the middle of the scale-up.
"""

from __future__ import annotations

import confluent_kafka  # noqa: F401  - a missing client library must fail the suite, not skip it
import pytest

from tests.api.e2e import Env, sleep_watching
from tests.support.consumers import ConsumerProcess

pytestmark = [pytest.mark.integration]

TOPIC, PARTITIONS = "wide", 8
SPACING_S = 1.0  # between two newcomers (after the previous one's process is up)
EXPANSION_TIMEOUT_MS = 60_000


def start_group(e2e: Env, group: str) -> tuple[list[ConsumerProcess], int]:
    """4 static members, Stable; returns them and the last generation in the log."""
    old = [
        e2e.consumer("confluent", group, f"{group}-{i}", topic=TOPIC, instance=f"{group}-{i}")
        for i in range(4)
    ]
    g = e2e.wait_stable(group, old, TOPIC, PARTITIONS, timeout=90)
    gens = e2e.generations(group)
    assert gens and gens[-1] == g["generation"]
    return old, g["generation"]


def start_newcomers(
    e2e: Env, group: str, indexes: range, watch: list[ConsumerProcess]
) -> list[ConsumerProcess]:
    """One by one: each starts once the previous process is up, plus SPACING_S."""
    started = []
    for i in indexes:
        c = e2e.consumer("confluent", group, f"{group}-{i}", topic=TOPIC, instance=f"{group}-{i}")
        c.wait_event("ready", 60)
        started.append(c)
        sleep_watching(watch + started, SPACING_S)
    return started


def new_generations(e2e: Env, group: str, before: int) -> list[int]:
    return sorted({g for g in e2e.generations(group) if g > before})


def register(e2e: Env, group: str, ids: list[str]) -> None:
    g = e2e.api(
        "POST",
        f"/groups/{group}/static-members",
        {"group_instance_ids": ids, "expansion_timeout_ms": EXPANSION_TIMEOUT_MS},
    )
    assert g["registered_static_members"] == ids


def test_registered_scale_up_is_one_generation_and_unregistered_is_more(e2e: Env) -> None:
    # registered: 4 → 8 in one rebalance
    old, gen = start_group(e2e, "reg")
    newcomers = [f"reg-{i}" for i in range(4, 8)]
    register(e2e, "reg", newcomers)
    assert e2e.describe("reg")["registered_static_members"] == newcomers
    new = start_newcomers(e2e, "reg", range(4, 8), old)
    g = e2e.wait_stable("reg", old + new, TOPIC, PARTITIONS, timeout=90)
    assert new_generations(e2e, "reg", gen) == [gen + 1], "exactly one new generation"
    assert g["generation"] == gen + 1
    assert g["registered_static_members"] == [], "the registration closed with the scale-up"
    assert sorted(m["group_instance_id"] for m in g["members"]) == [f"reg-{i}" for i in range(8)]
    for c in old + new:
        c.kill()  # free the CPU for the next group

    # the same scale-up without registration: a rebalance per arrival (more than one)
    old, gen = start_group(e2e, "unreg")
    new = start_newcomers(e2e, "unreg", range(4, 8), old)
    g = e2e.wait_stable("unreg", old + new, TOPIC, PARTITIONS, timeout=90)
    gens = new_generations(e2e, "unreg", gen)
    assert len(gens) > 1, f"without registration the scale-up took generations {gens}"
    assert g["generation"] == gens[-1]


def test_registration_survives_a_coordinator_restart_mid_scale_up(e2e: Env) -> None:
    old, gen = start_group(e2e, "crash")
    newcomers = [f"crash-{i}" for i in range(4, 8)]
    register(e2e, "crash", newcomers)
    first = start_newcomers(e2e, "crash", range(4, 6), old)
    # the first two are in: the join phase is held for the other two
    g = e2e.describe("crash")
    assert g["state"] == "PreparingRebalance", g
    assert g["registered_static_members"] == ["crash-6", "crash-7"], g

    e2e.coord.restart()  # SIGKILL, then the same database and ports
    g = e2e.describe("crash")
    # restored from the log (the newcomers that had joined may be back already)
    assert {"crash-6", "crash-7"} <= set(g["registered_static_members"]) <= set(newcomers), g
    rest = start_newcomers(e2e, "crash", range(6, 8), old + first)
    everyone = old + first + rest
    g = e2e.wait_stable("crash", everyone, TOPIC, PARTITIONS, timeout=120)
    assert new_generations(e2e, "crash", gen) == [gen + 1], (
        "the scale-up interrupted by the restart still cost one generation"
    )
    assert g["registered_static_members"] == []
    assert sorted(m["group_instance_id"] for m in g["members"]) == [f"crash-{i}" for i in range(8)]
