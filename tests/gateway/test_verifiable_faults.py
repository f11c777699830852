"""Kafka's VerifiableProducer and VerifiableConsumers through gateway nodes on PostgreSQL while
the nodes, the database and the network fail (verify_stack.py builds the stage): every acked
record consumed, commits never back, nothing skipped past a commit, no partition owned twice
(tests/support/verifiable.py checks the tools' events), and what each fault adds:

- kill -9 of the coordinating node, of each node in turn, of all nodes at once: static members
  keep their generation across a failover (nothing is rebalanced; the log replays it);
- PostgreSQL stopped and started again;
- a node cut from PostgreSQL while its clients still reach it: it stops answering as the
  group's coordinator before another node can take the lease (a probe asks both all along);
- a node cut from its clients, a node cut from the upstream, a flapping and congested link.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.verify_stack import (
    PARTITIONS,
    TTL_MS,
    Probe,
    Stack,
    lab,  # noqa: F401 - fixtures
    lab_broker,  # noqa: F401
    lab_namespaces,  # noqa: F401
    lab_postgres,  # noqa: F401
    leases_taken,
    make_stack,
)
from tests.support.java import java_build  # noqa: F401 - a fixture
from tests.support.kafka_broker import KafkaBroker
from tests.support.netns import Lab, Namespace
from tests.support.nodes import CoordinatorProcess
from tests.support.postgres import PrivatePostgres
from tests.support.verifiable import (
    Tool,
    assignments_since,
    consumer,
    finish,
    producer,
    rejoined,
    settled,
    verdict,
    wait,
)

pytestmark = pytest.mark.timeout(420)
HEAVY = pytest.mark.verify  # make verify only; the coordinator kill and the cut from
# PostgreSQL run in make test too

RECORDS = 4000
RATE = 200  # records a second: about 20 s of producing, while the faults happen


@pytest.fixture
def stack(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    java_build: None,  # noqa: F811
    lab: Lab,  # noqa: F811
    lab_postgres: PrivatePostgres,  # noqa: F811
    lab_broker: KafkaBroker,  # noqa: F811
    lab_namespaces: list[Namespace],  # noqa: F811
) -> Iterator[Stack]:
    count = getattr(request, "param", 2)
    yield from make_stack(request, tmp_path, lab, lab_postgres, lab_broker, lab_namespaces, count)


class Run:
    """Three members of one group (static or dynamic) and a producer, through the stack."""

    def __init__(self, stack: Stack, tmp_path: Path, name: str, *, static: bool) -> None:
        self.stack = stack
        self.group = f"{stack.topic}-{name}"
        self.members = [
            consumer(
                tmp_path,
                f"m{i}",
                stack.bootstrap,
                stack.topic,
                self.group,
                instance=f"m{i}" if static else None,
                session_timeout_ms=30_000 if static else 10_000,
            )
            for i in range(3)
        ]
        self.producer = producer(tmp_path, stack.bootstrap, stack.topic, RECORDS, RATE)

    def __enter__(self) -> Run:
        for c in self.members:
            c.start()
        self.wait_settled(90)
        self.producer.start()
        time.sleep(3)
        return self

    def __exit__(self, *exc: object) -> None:
        for t in (self.producer, *self.members):
            t.kill()

    @property
    def tools(self) -> list[Tool]:
        return [self.producer, *self.members]

    def wait_settled(self, timeout: float) -> None:
        view = self.stack.view(self.group)
        wait(settled(view, self.members, PARTITIONS), timeout, "the group settled", self.members)

    def generation(self) -> int:
        view = self.stack.view(self.group)
        wait(lambda: view() is not None, 60, "a node describes the group", self.members)
        g = view()
        assert g is not None
        return int(g["generation"])

    def finish_and_check(self, stale_window: tuple[float, float] | None = None) -> float:
        stopping = finish(self.producer, self.members, RECORDS, timeout=180, lossy=True)
        verdict(self.producer, self.members, self.stack.context(), stale_window=stale_window)
        return stopping

    def assert_nobody_moved(
        self, since: float, until: float, why: str, but: Tool | None = None
    ) -> None:
        """No member (but `but`, bounced on purpose) saw its assignment change."""
        for c in self.members:
            moved = [e for e in assignments_since(c, since) if e.at < until]
            assert c is but or not moved, (
                f"{c.name} rebalanced by {why}: {moved}\n{self.stack.context()}"
            )

    def bounce(self) -> Tool:
        """kill -9 of a member (the seed's pick) and its restart with the same instance id: its
        new JVM asks for its committed positions, so a commit the failover lost shows."""
        c = self.stack.rng.choice(self.members)
        since = time.time()
        c.kill()
        c.start()
        wait(rejoined(c, since), 90, f"{c.name} got its partitions back", self.members)
        return c

    def wait_taken_over(self, by: list[CoordinatorProcess], since: float) -> None:
        wait(
            lambda: any(leases_taken(n, self.group, since) for n in by),
            TTL_MS / 1000 + 30,
            f"{' or '.join(n.name for n in by)} took the group's lease over",
            self.members,
        )

    def stalled(self, start: float, end: float, at_least: float = 2.0) -> bool:
        """Whether no member read a record for `at_least` seconds within [start, end]: the
        fault was felt."""
        times = sorted(
            e.at for c in self.members for e in c.named("record_data") if start <= e.at <= end
        )
        edges = [start, *times, end]
        return any(b - a >= at_least for a, b in itertools.pairwise(edges))


@pytest.mark.parametrize("stack", [2], indirect=True)
def test_kill_9_of_the_coordinating_node_moves_no_static_member(
    stack: Stack, tmp_path: Path
) -> None:
    with Run(stack, tmp_path, "kill-coordinator", static=True) as run:
        generation = run.generation()
        victim = stack.coordinator(run.group)
        survivors = [n for n in stack.nodes if n is not victim]
        killed_at = time.time()
        victim.kill()
        run.wait_taken_over(survivors, killed_at)
        bounced = run.bounce()  # its positions, from the survivor's replay of the log
        victim.start()  # back as a follower
        stopping = run.finish_and_check()
        run.assert_nobody_moved(killed_at, stopping, f"the kill of {victim.name}", but=bounced)
        assert run.generation() == generation


@HEAVY
@pytest.mark.parametrize("stack", [3], indirect=True)
def test_each_node_killed_in_turn_then_all_at_once(stack: Stack, tmp_path: Path) -> None:
    with Run(stack, tmp_path, "kill-each", static=True) as run:
        generation = run.generation()
        started = time.time()
        for node in stack.rng.sample(stack.nodes, len(stack.nodes)):
            node.kill()
            time.sleep(stack.rng.uniform(1, TTL_MS / 1000 + 2))
            node.start()
        all_killed_at = time.time()
        for node in stack.nodes:  # all at once, then all back
            node.kill()
        time.sleep(stack.rng.uniform(0.5, 3))
        for node in stack.nodes:
            node.start(wait_ready=False)
        run.wait_taken_over(stack.nodes, all_killed_at)
        bounced = run.bounce()
        stopping = run.finish_and_check()
        run.assert_nobody_moved(started, stopping, "node kills", but=bounced)
        assert run.generation() == generation


@HEAVY
@pytest.mark.parametrize("stack", [2], indirect=True)
def test_postgres_stopped_and_started_again(stack: Stack, tmp_path: Path) -> None:
    with Run(stack, tmp_path, "pg-restart", static=False) as run:
        stack.postgres.restart("immediate", down_s=stack.rng.uniform(3, 8))
        run.finish_and_check()
        felt = [n for n in stack.nodes if "lease round failed" in n.log_text()]
        assert felt, f"no node noticed the database go\n{stack.context()}"


@pytest.mark.parametrize("stack", [2], indirect=True)
@pytest.mark.parametrize(
    "bounce",
    # during the cut, the restarted member finds its coordinator through the cut node (the
    # node its records come through), which must name the node taking over
    ["during-cut", pytest.param("after-heal", marks=HEAVY)],
)
def test_a_node_cut_from_postgres_stops_coordinating_before_its_lease_is_taken(
    bounce: str, stack: Stack, tmp_path: Path
) -> None:
    with Run(stack, tmp_path, "cut-pg", static=True) as run:
        generation = run.generation()
        zombie = stack.coordinator(run.group)
        other = next(n for n in stack.nodes if n is not zombie)
        assert zombie.node_id is not None and other.node_id is not None
        probe = Probe(stack.nodes, run.group)
        probe.start()
        time.sleep(1.5)
        cut_at = time.time()
        stack.namespace_of(zombie).cut(stack.lab.service_address(2))
        run.wait_taken_over([other], cut_at)

        def bounce_one() -> Tool:  # its positions then come from the new coordinator
            try:
                return run.bounce()
            except AssertionError as e:
                seen = [stack.placement(n) for n in stack.nodes]
                raise AssertionError(f"{e}\nplacements {seen}\nnamed {probe.named[-8:]}") from e

        bounced = bounce_one() if bounce == "during-cut" else None
        time.sleep(max(cut_at + TTL_MS / 1000 * 3 + stack.rng.uniform(0, 3) - time.time(), 0))
        stack.namespace_of(zombie).heal()
        healed_at = time.time()
        if bounced is None:
            bounced = bounce_one()
        stopping = run.finish_and_check()
        probe.stop()
        before = [a for a in probe.answered(zombie.node_id, cut_at - 1.5) if a[1] < cut_at]
        assert before, f"{zombie.name} was not answering as coordinator before the cut"
        assert not [a for a in probe.answered(other.node_id, 0) if a[1] < cut_at]
        took_over = probe.answered(other.node_id, cut_at)
        assert took_over, f"{other.name} never answered as coordinator\n{stack.context()}"
        assert probe.answered(zombie.node_id, healed_at) or probe.answered(
            other.node_id, healed_at
        ), "the probe heard nothing after the heal"
        first_other = min(sent for sent, _, _ in took_over)
        # until the zombie takes the group's lease again (after the heal, by a handover),
        # nothing it answers as the group's coordinator may come after the other's first answer
        regained = min(leases_taken(zombie, run.group, cut_at), default=float("inf"))
        late = [got for _, got, _ in probe.answered(zombie.node_id, first_other) if got < regained]
        assert not late, (
            f"{zombie.name}, cut from the database at {cut_at:.2f}, answered as coordinator "
            f"{len(late)} times after {other.name} did ({first_other - cut_at:.2f} s after the "
            f"cut), the last {max(late) - cut_at:.2f} s after it\n{stack.context()}"
        )
        # nor does it send clients back to itself while it cannot know who holds the lease
        misled = [at for at, asked, named in probe.named if asked == named == zombie.node_id]
        misled = [at for at in misled if first_other < at < regained]
        assert not misled, (
            f"{zombie.name}, cut from the database, named itself the coordinator "
            f"{len(misled)} times after {other.name} took over"
        )
        # it names the node taking over: a client asks only the node it fetches through
        redirected = [
            at
            for at, asked, named in probe.named
            if (asked, named) == (zombie.node_id, other.node_id)
        ]
        assert [at for at in redirected if cut_at < at < healed_at], (
            f"{zombie.name}, cut from the database, never named {other.name} during the cut"
        )
        assert first_other < healed_at, "the takeover waited for the cut to heal"
        run.assert_nobody_moved(cut_at, stopping, f"{zombie.name}'s cut", but=bounced)
        assert run.generation() == generation


@HEAVY
@pytest.mark.parametrize("stack", [2], indirect=True)
@pytest.mark.parametrize("cut", ["clients", "upstream"])
def test_a_node_cut_from_its_clients_or_the_upstream_loses_nothing(
    cut: str, stack: Stack, tmp_path: Path
) -> None:
    with Run(stack, tmp_path, f"cut-{cut}", static=False) as run:
        # the clients' coordinator, or the node their records go through
        victim = stack.coordinator(run.group) if cut == "clients" else stack.data_node()
        ns = stack.namespace_of(victim)
        cut_at = time.time()
        ns.cut(stack.lab.root_address if cut == "clients" else stack.lab.service_address(3))
        time.sleep(stack.rng.uniform(8, 15))
        ns.heal()
        healed_at = time.time()
        # cut from their coordinator past their 10 s session, members may be expired without
        # knowing it (verifiable.check's stale owners); cut from the upstream, they are not
        stale = (cut_at, healed_at + 15) if cut == "clients" else None
        run.finish_and_check(stale_window=stale)
        assert run.stalled(cut_at, healed_at), f"cut from {cut}, {victim.name} went unnoticed"


@HEAVY
@pytest.mark.parametrize("stack", [2], indirect=True)
def test_a_flapping_link_loses_nothing(stack: Stack, tmp_path: Path) -> None:
    with Run(stack, tmp_path, "flap", static=True) as run:
        generation = run.generation()
        victim = stack.coordinator(run.group)
        started = time.time()
        ns = stack.namespace_of(victim)
        for _ in range(3):  # down, up, congested, clear
            ns.link(up=False)
            time.sleep(stack.rng.uniform(0.5, 2.5))
            ns.link(up=True)
            ns.throttle(rate_kbit=stack.rng.choice([64, 256, 1024]), latency_ms=50)
            time.sleep(stack.rng.uniform(3, 6))
            ns.clear_throttle()
            time.sleep(stack.rng.uniform(1, 3))
        stopping = run.finish_and_check()
        run.assert_nobody_moved(started, stopping, "the flapping link")
        assert run.generation() == generation
