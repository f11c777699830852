"""Each scenario runs against Apache Kafka's broker, then against our node; the transcripts must
agree step by step, field by field, except where DIFFERENCES names a step and says why.

A named difference is asserted too: when the two sides come to agree on it, the test fails until
the entry is removed, so the list is always the true list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from tests.differential.scenarios import (
    SUB,
    TOPIC,
    Run,
    Scenario,
    Target,
    assignments_for,
    heartbeat_version,
    join,
    join_all,
    leave_version,
    sync_version,
)

GROUP_APIS = (8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47)

# (scenario, step) -> why our node answers differently on purpose
DIFFERENCES: dict[tuple[str, str], str] = {
    ("api-versions", "ApiVersions of key 8"): (
        "OffsetCommit v10 not served (Apache Kafka 4.4 serves 2-10): v10 names topics by id only "
        "(KIP-848), and the node's topics have no ids (all-zero in Metadata); clients negotiate v9"
    ),
    ("api-versions", "ApiVersions of key 9"): (
        "OffsetFetch v10 not served (Apache Kafka 4.4 serves 1-10): topic ids only (KIP-848), as "
        "OffsetCommit v10"
    ),
    ("api-versions", "ApiVersions of key 42"): (
        "DeleteGroups v3 not served (Apache Kafka 4.4 serves 0-3): it adds a per-group error "
        "message to the reply, which the protocol library (kio 0.6.5) has no schema for; "
        "clients negotiate v2, whose replies agree"
    ),
}

SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str) -> Callable[[Scenario], Scenario]:
    def register(fn: Scenario) -> Scenario:
        SCENARIOS[name] = fn
        return fn

    return register


async def transcript(target: Target, play: Scenario) -> dict[str, Any]:
    run = Run(target)
    try:
        await play(run)
    finally:
        await run.close()
    return run.transcript()


# --- the scenarios ----------------------------------------------------------------------------


@scenario("api-versions")
async def api_versions(run: Run) -> None:
    c = await run.client()
    reply = await c.api_versions()
    ranges = {int(k.api_key): (k.min_version, k.max_version) for k in reply.api_keys}
    for key in GROUP_APIS:
        run.record(f"ApiVersions of key {key}", ranges.get(key))


def _join_sync(v: int) -> Scenario:
    async def play(run: Run) -> None:
        g = f"join-sync-v{v}"
        a, b = await run.client(), await run.client()
        ja, jb = await join_all(
            join(run, a, "A joins", g, who="A", version=v),
            join(run, b, "B joins", g, who="B", version=v),
        )
        plan = assignments_for([ja.member_id, jb.member_id])
        sv, hv = sync_version(v), heartbeat_version(v)
        sa, sb = await asyncio.gather(
            a.sync_group(g, ja.generation_id, ja.member_id, assignments=plan, version=sv),
            b.sync_group(g, jb.generation_id, jb.member_id, version=sv),
        )
        run.record("A syncs (leader)", sa)
        run.record("B syncs", sb)
        run.record("A heartbeats", await a.heartbeat(g, ja.generation_id, ja.member_id, version=hv))
        run.record("B heartbeats", await b.heartbeat(g, jb.generation_id, jb.member_id, version=hv))
        rejoin_b = asyncio.ensure_future(
            join(run, b, "B rejoins", g, who="B", version=v, member_id=jb.member_id, record=False)
        )
        await asyncio.sleep(0.3)
        run.record(
            "A heartbeats in the rebalance",
            await a.heartbeat(g, ja.generation_id, ja.member_id, version=hv),
        )
        ja2 = await join(run, a, "A rejoins", g, who="A", version=v, member_id=ja.member_id)
        run.record("B rejoins", await rejoin_b)
        sa, sb = await asyncio.gather(
            a.sync_group(g, ja2.generation_id, ja.member_id, assignments=plan, version=sv),
            b.sync_group(g, ja2.generation_id, jb.member_id, version=sv),
        )
        run.record("A syncs generation 2", sa)
        run.record("B syncs generation 2", sb)
        run.record("A leaves", await a.leave_group(g, ja.member_id, version=leave_version(v)))
        run.record(
            "B heartbeats after A left",
            await b.heartbeat(g, ja2.generation_id, jb.member_id, version=hv),
        )
        await join(run, b, "B rejoins alone", g, who="B", version=v, member_id=jb.member_id)
        run.record("B leaves", await b.leave_group(g, jb.member_id, version=leave_version(v)))
        run.record("describe the empty group", await describe(a, g))

    return play


for _v in range(2, 10):
    scenario(f"join-sync-v{_v}")(_join_sync(_v))


async def describe(c: Any, *groups: str, version: int = 5) -> Any:
    return await c.request(
        c.build_request(15, version, groups=list(groups), include_authorized_operations=False)
    )


def _static(v: int) -> Scenario:
    async def play(run: Run) -> None:
        g = f"static-v{v}"
        sv, hv = sync_version(v), heartbeat_version(v)
        leader, follower = await run.client(), await run.client()
        jl, jf = await join_all(
            join(run, leader, "L joins", g, who="L", version=v, instance="inst-l"),
            join(run, follower, "F joins", g, who="F", version=v, instance="inst-f"),
        )
        plan = assignments_for([jl.member_id, jf.member_id])
        run.record(
            "L syncs",
            (await asyncio.gather(
                leader.sync_group(g, jl.generation_id, jl.member_id, assignments=plan,
                                  group_instance_id="inst-l", version=sv),
                follower.sync_group(g, jf.generation_id, jf.member_id, group_instance_id="inst-f",
                                    version=sv),
            ))[0],
        )  # fmt: skip
        follower2 = await run.client()
        jf2 = await join(run, follower2, "F restarts", g, who="F2", version=v, instance="inst-f")
        run.record(
            "old F heartbeats",
            await follower.heartbeat(
                g, jf.generation_id, jf.member_id, group_instance_id="inst-f", version=hv
            ),
        )
        run.record(
            "old F syncs",
            await follower.sync_group(
                g, jf.generation_id, jf.member_id, group_instance_id="inst-f", version=sv
            ),
        )
        run.record(
            "old F commits",
            await follower.offset_commit(g, {(TOPIC, 0): 5}, generation_id=jf.generation_id,
                                         member_id=jf.member_id, group_instance_id="inst-f"),
        )  # fmt: skip
        run.record(
            "F2 syncs",
            await follower2.sync_group(
                g, jf2.generation_id, jf2.member_id, group_instance_id="inst-f", version=sv
            ),
        )
        leader2 = await run.client()
        rejoin = asyncio.ensure_future(
            join(
                run, leader2, "L restarts", g, who="L2", version=v, instance="inst-l", record=False
            )
        )
        await asyncio.sleep(0.5)
        hb = await follower2.heartbeat(
            g, jf2.generation_id, jf2.member_id, group_instance_id="inst-f", version=hv
        )
        run.record("F2 heartbeats while L restarts", hb)
        gen = jf2.generation_id
        if hb.error_code == ErrorCode.rebalance_in_progress:
            jf3 = await join(run, follower2, "F2 rejoins", g, who="F2", version=v,
                             member_id=jf2.member_id, instance="inst-f")  # fmt: skip
            gen = jf3.generation_id
        jl2 = run.record("L restarts", await rejoin)
        gen = jl2.generation_id
        plan2 = (
            {}
            if getattr(jl2, "skip_assignment", False)
            else assignments_for([jl2.member_id, jf2.member_id])
        )
        sl2 = leader2.sync_group(
            g, gen, jl2.member_id, assignments=plan2, group_instance_id="inst-l", version=sv
        )
        if hb.error_code == ErrorCode.rebalance_in_progress:
            sl, _ = await asyncio.gather(
                sl2,
                follower2.sync_group(g, gen, jf2.member_id, group_instance_id="inst-f", version=sv),
            )
        else:
            sl = await sl2
        run.record("L2 syncs", sl)
        run.record(
            "old L heartbeats",
            await leader.heartbeat(
                g, jl.generation_id, jl.member_id, group_instance_id="inst-l", version=hv
            ),
        )
        run.record(
            "F2 heartbeats after",
            await follower2.heartbeat(
                g, gen, jf2.member_id, group_instance_id="inst-f", version=hv
            ),
        )
        run.record("describe the group", await describe(leader2, g))

    return play


for _v in (5, 7, 9):
    scenario(f"static-v{_v}")(_static(_v))


@scenario("leave-by-instance-id")
async def leave_by_instance_id(run: Run) -> None:
    g = "leave-by-instance"
    a, b, d = await run.client(), await run.client(), await run.client()
    ja, jb, jd = await join_all(
        join(run, a, "A joins", g, who="A", version=9, instance="inst-a"),
        join(run, b, "B joins", g, who="B", version=9, instance="inst-b"),
        join(run, d, "D joins", g, who="D", version=9),
    )
    plan = assignments_for([ja.member_id, jb.member_id, jd.member_id])
    await asyncio.gather(
        a.sync_group(
            g, ja.generation_id, ja.member_id, assignments=plan, group_instance_id="inst-a"
        ),
        b.sync_group(g, jb.generation_id, jb.member_id, group_instance_id="inst-b"),
        d.sync_group(g, jd.generation_id, jd.member_id),
    )
    run.record(
        "leave a batch",
        await a.leave_group(
            g,
            members=[("", "inst-b"), ("wrong-member-id", "inst-a"), ("", "inst-unknown"),
                     (jd.member_id, None), ("unknown-member", None)],
            reason="scaling down",
        ),
    )  # fmt: skip
    run.record(
        "A heartbeats",
        await a.heartbeat(g, ja.generation_id, ja.member_id, group_instance_id="inst-a"),
    )
    run.record("describe while rebalancing", await describe(a, g))
    await join(
        run, a, "A rejoins", g, who="A", version=9, member_id=ja.member_id, instance="inst-a"
    )
    run.record(
        "leave v3 by instance id", await a.leave_group(g, members=[("", "inst-a")], version=3)
    )
    run.record("describe after", await describe(a, g))


def _offsets(commit_version: int) -> Scenario:
    async def play(run: Run) -> None:
        g = f"offsets-v{commit_version}"
        c = await run.client()
        offsets = {(TOPIC, 0): 10 + commit_version, (TOPIC, 1): 20 + commit_version}
        run.record(
            "commit", await c.offset_commit(g, offsets, metadata="m", version=commit_version)
        )
        run.record(
            "commit an unknown topic",
            await c.offset_commit(g, {("no-such-topic", 0): 1}, version=commit_version),
        )
        for fv in range(1, 10):
            run.record(
                f"fetch v{fv}",
                await c.offset_fetch(g, [(TOPIC, 0), (TOPIC, 1), (TOPIC, 3)], version=fv),
            )
            if fv >= 2:
                run.record(f"fetch all v{fv}", await c.offset_fetch(g, None, version=fv))
        run.record("fetch an unknown group", await c.offset_fetch("no-such-group", None, version=8))
        run.record(
            "fetch two groups",
            await c.offset_fetch(g, groups={g: None, "no-such-group": [(TOPIC, 0)]}, version=8),
        )

    return play


for _v in range(2, 10):
    scenario(f"offsets-v{_v}")(_offsets(_v))


@scenario("describe-list-delete")
async def describe_list_delete(run: Run) -> None:
    c = await run.client()
    stable = "dld-stable"
    j = await join(run, c, "join", stable, who="S", version=9)
    await c.sync_group(
        stable, j.generation_id, j.member_id, assignments=assignments_for([j.member_id])
    )
    await c.offset_commit("dld-offsets-only", {(TOPIC, 0): 7})
    gone = await run.client()
    jg = await join(run, gone, "join the group that empties", "dld-emptied", who="E", version=9)
    await gone.sync_group(
        "dld-emptied", jg.generation_id, jg.member_id, assignments={jg.member_id: b""}
    )
    await gone.leave_group("dld-emptied", jg.member_id)
    groups = ["dld-stable", "dld-offsets-only", "dld-emptied", "dld-unknown"]
    for v in range(0, 7):
        run.record(f"describe v{v}", await describe(c, *groups, version=v))
    for v in range(0, 6):
        kw: dict[str, Any] = {}
        if v >= 4:
            kw["states_filter"] = ["Stable", "Empty"]
        if v >= 5:
            kw["types_filter"] = ["classic"]
        reply = await c.request(c.build_request(16, v, **kw))
        mine = sorted(
            (g for g in reply.groups if g.group_id.startswith("dld-")), key=lambda g: g.group_id
        )
        run.record(f"list v{v}", (reply.error_code, mine))
    reply = await c.request(c.build_request(16, 4, states_filter=["Empty"]))
    run.record(
        "list Empty", sorted(g.group_id for g in reply.groups if g.group_id.startswith("dld-"))
    )
    run.record(
        "delete",
        await c.request(
            c.build_request(42, 2, groups_names=["dld-stable", "dld-offsets-only", "dld-unknown"])
        ),
    )
    run.record("delete v0", await c.request(c.build_request(42, 0, groups_names=["dld-emptied"])))
    run.record("fetch the deleted group's offsets", await c.offset_fetch("dld-offsets-only", None))
    run.record("describe the deleted", await describe(c, "dld-emptied"))


@scenario("errors")
async def errors(run: Run) -> None:
    c = await run.client()
    g = "errors"
    run.record("session timeout too short", await c.join_group(g, session_timeout_ms=1000))
    run.record("session timeout too long", await c.join_group(g, session_timeout_ms=3_600_000))
    run.record("empty group id", await c.join_group(""))
    run.record("heartbeat an unknown group", await c.heartbeat("errors-unknown", 1, "nobody"))
    run.record("sync an unknown group", await c.sync_group("errors-unknown", 1, "nobody"))
    run.record("leave an unknown group", await c.leave_group("errors-unknown", "nobody"))
    j = await join(run, c, "join", g, who="A", version=9)
    run.record(
        "sync with a wrong generation",
        await c.sync_group(g, j.generation_id + 1, j.member_id, assignments={j.member_id: b""}),
    )
    run.record(
        "sync with another protocol name",
        await c.sync_group(g, j.generation_id, j.member_id, protocol_name="roundrobin"),
    )
    run.record(
        "sync with another protocol type",
        await c.sync_group(g, j.generation_id, j.member_id, protocol_type="connect"),
    )
    run.record("sync with an unknown member", await c.sync_group(g, j.generation_id, "nobody"))
    run.record(
        "sync",
        await c.sync_group(
            g, j.generation_id, j.member_id, assignments=assignments_for([j.member_id])
        ),
    )
    other = await run.client()
    run.record(
        "join with another protocol type", await other.join_group(g, protocol_type="connect")
    )
    run.record(
        "join with no common protocol",
        await other.join_group(g, protocols=[("sticky", SUB)]),
    )
    run.record("join with an unknown member id", await other.join_group(g, "diff-client-unknown"))
    run.record(
        "heartbeat with a wrong generation", await c.heartbeat(g, j.generation_id + 5, j.member_id)
    )
    run.record("heartbeat with an unknown member", await c.heartbeat(g, j.generation_id, "nobody"))
    run.record(
        "commit with a wrong generation",
        await c.offset_commit(
            g, {(TOPIC, 0): 1}, generation_id=j.generation_id + 1, member_id=j.member_id
        ),
    )
    run.record(
        "commit with an unknown member",
        await c.offset_commit(
            g, {(TOPIC, 0): 1}, generation_id=j.generation_id, member_id="nobody"
        ),
    )
    run.record("commit as a simple consumer", await c.offset_commit(g, {(TOPIC, 0): 1}))
    run.record(
        "commit as the member",
        await c.offset_commit(
            g, {(TOPIC, 0): 3}, generation_id=j.generation_id, member_id=j.member_id
        ),
    )
    run.record("fetch stable", await c.offset_fetch(g, [(TOPIC, 0)], require_stable=True))
    run.record("leave with an unknown member", await c.leave_group(g, "nobody", version=0))
    run.record(
        "delete a non-empty group", await c.request(c.build_request(42, 2, groups_names=[g]))
    )
    run.record("leave", await c.leave_group(g, j.member_id))
    run.record(
        "commit for an old generation once Empty",
        await c.offset_commit(
            g, {(TOPIC, 0): 4}, generation_id=j.generation_id, member_id=j.member_id
        ),
    )


def batches() -> dict[str, list[str]]:
    """Scenarios that share nothing play at once: each join-sync version waits about 10 s for
    its second rebalance on both servers (a session timeout), so the eight wait together."""
    join_sync = [n for n in SCENARIOS if n.startswith("join-sync-")]
    out: dict[str, list[str]] = {f"{join_sync[0]}..{join_sync[-1][-2:]}": join_sync}
    out.update({n: [n] for n in SCENARIOS if n not in join_sync})
    return out


def compare(name: str, theirs: dict[str, Any], ours: dict[str, Any]) -> list[str]:
    """What is wrong with scenario `name`'s transcripts: unexplained or stale differences."""
    if sorted(ours) != sorted(theirs):
        return [f"{name}: the scenario took other steps"]
    differing = {step: (theirs[step], ours[step]) for step in theirs if theirs[step] != ours[step]}
    expected = {step for (scn, step) in DIFFERENCES if scn == name}
    problems = [
        f"{name} / {step}:\n  Apache Kafka: {k}\n  coordinator:  {o}"
        for step, (k, o) in differing.items()
        if step not in expected
    ]
    agreed = expected - set(differing)
    if agreed:
        problems.append(f"{name}: both sides agree now on {agreed}: remove them from DIFFERENCES")
    return problems


# after every @scenario above: the parametrization reads the filled registry
@pytest.mark.parametrize("batch", list(batches().values()), ids=list(batches()))
async def test_agrees_with_apache_kafka(
    batch: list[str], apache_kafka: Target, coordinator: Target
) -> None:
    # the two clusters share nothing, and neither do the scenarios of a batch: all run at once
    transcripts = await asyncio.gather(
        *(transcript(t, SCENARIOS[name]) for name in batch for t in (apache_kafka, coordinator))
    )
    problems = [
        problem
        for i, name in enumerate(batch)
        for problem in compare(name, transcripts[2 * i], transcripts[2 * i + 1])
    ]
    assert not problems, "\n".join(problems)
