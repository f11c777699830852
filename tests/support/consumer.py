"""A real Kafka consumer in its own process, driven over stdin, reporting JSON lines on stdout.

usage: python -m tests.support.consumer CLIENT BOOTSTRAP GROUP TOPIC [--instance ID]
           [--strategy NAME] [--session-timeout-ms MS] [--heartbeat-interval-ms MS]
           [--client-id ID] [--no-subscribe] [--commit-errors retry|report] [--poll-ms MS]
           [--poll-errors retry|fail] [--request-timeout-ms MS] [--metadata-max-age-ms MS]
           [--reconnect-backoff-max-ms MS] [--stats] [--debug CONTEXTS]
CLIENT is kafka-python, aiokafka or confluent; BOOTSTRAP one host:port or several, comma
separated. Commands on stdin (one per line):
  commit OFFSET         commit OFFSET for every partition currently assigned (synchronously)
  committed [P,P,...]   print the committed offsets of the given partitions (default: assigned)
  close                 leave cleanly (dynamic members send LeaveGroup) and exit
Events: {"event": "ready"|"assigned"|"revoked"|"committed"|"offsets"|"closed"|"error", "t": unix
time, ...} plus diagnostics: "commit_retry" (a commit hit REBALANCE_IN_PROGRESS: poll, retry for
up to 30 s), "poll_error" (poll raised a retriable error, e.g. while the coordinator is down:
poll again) and, for confluent, "client_error" (an error event from poll() or, with --stats,
the error callback) and "stats" (with --stats: librdkafka's consumer-group statistics, every
second).
A failing command reports {"event": "error", "cmd": ...} and the process keeps running; an
unexpected exception outside a command reports "error" (without "cmd") and exits non-zero.
With --commit-errors report, a commit is tried once: "commit_skipped" when nothing is assigned,
"commit_failed" (with the member and generation it was sent with) when it fails, "committed"
for the partitions that succeeded.
With --no-subscribe the consumer never joins the group: it only answers `committed P,...`
(OffsetFetch), which is how a fresh process reads a group's offsets without a rebalance.
Offsets are reported as int, or null when nothing is committed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def stdin_commands() -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("close")

    threading.Thread(target=pump, daemon=True).start()
    return q


def parts(tps: Any) -> list[int]:
    return sorted(tp.partition for tp in tps)


def norm(offset: Any) -> int | None:
    """None / -1 / librdkafka's OFFSET_INVALID (-1001) all mean "nothing committed"."""
    return None if offset is None or offset < 0 else int(offset)


REBALANCE_RETRY_S = 30.0


def rebalancing(e: Exception) -> bool:
    """The commit failed only because this member is between JoinGroup and SyncGroup (e.g. a
    cooperative member whose partitions do not change gets no callback in the 2nd phase):
    a real application polls to finish the rebalance and retries."""
    text = f"{type(e).__name__} {e}"
    return "RebalanceInProgress" in text or "REBALANCE_IN_PROGRESS" in text


def wanted(arg: str, assigned: list[int]) -> list[int]:
    return [int(p) for p in arg.split(",") if p] if arg else assigned


# A commit attempt: it commits the offset for the partitions given and returns those that
# failed, with their error (it raises when the request failed as a whole).
Attempt = Callable[[list[int], int], Awaitable[list[tuple[int, str]]]]


async def commit(
    a: argparse.Namespace,
    offset: int,
    assigned: Callable[[], list[int]],
    attempt: Attempt,
    poll: Callable[[], Awaitable[None]],
    member: Callable[[], dict[str, Any]],
) -> None:
    """One `commit OFFSET` command, the same for every client (see --commit-errors)."""
    if a.commit_errors == "report":
        mine = assigned()
        if not mine:
            emit("commit_skipped", offset=offset, reason="nothing assigned")
            return
        info = member()  # the generation the commit is sent with
        try:
            failed = await attempt(mine, offset)
        except Exception as e:  # CommitFailedError after a rebalance, timeouts, ...
            emit("commit_failed", offset=offset, error=repr(e), **info)
            return
        if failed:
            emit("commit_failed", offset=offset, error=repr(failed), **info)
        ok = sorted(set(mine) - {p for p, _ in failed})
        if ok:
            emit("committed", partitions=ok, offset=offset, **info)
        return
    deadline = time.monotonic() + REBALANCE_RETRY_S
    while True:
        mine = assigned()
        try:
            failed = await attempt(mine, offset)
            if failed:
                raise RuntimeError(f"partition errors {failed}")
            break
        except Exception as e:
            if not rebalancing(e) or time.monotonic() > deadline:
                raise
            emit("commit_retry", error=repr(e))
            await poll()
    emit("committed", partitions=mine, offset=offset, **member())


def run_sync(coro: Coroutine[Any, Any, None]) -> None:
    """Runs `commit` for a synchronous client: its attempt and poll never suspend, so the
    coroutine finishes on its first step, without an event loop."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("a synchronous client's command suspended")


def run_kafka_python(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.errors import KafkaError

    strategies = {
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
        "sticky": StickyPartitionAssignor,
        "cooperative-sticky": CooperativeStickyAssignor,
    }
    optional = {}
    if a.metadata_max_age_ms is not None:
        optional["metadata_max_age_ms"] = a.metadata_max_age_ms
    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap.split(","),
        group_id=a.group,
        group_instance_id=a.instance,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_interval_ms,
        max_poll_interval_ms=300000,
        partition_assignment_strategy=[strategies[a.strategy]],
        request_timeout_ms=a.request_timeout_ms,
        fetch_max_wait_ms=200,
        retry_backoff_ms=100,
        client_id=a.client_id,
        **optional,
    )
    assigned: set[Any] = set()

    def member() -> dict[str, Any]:
        try:
            g = consumer._coordinator._generation
            return {"member": g.member_id, "generation": g.generation_id}
        except Exception:  # private API: diagnostics only
            return {}

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            assigned.difference_update(revoked)
            emit("revoked", partitions=parts(revoked), all=parts(assigned), **member())

        def on_partitions_assigned(self, new: Any) -> None:
            assigned.update(new)
            emit("assigned", partitions=parts(new), all=parts(assigned), **member())

    async def attempt(mine: list[int], offset: int) -> list[tuple[int, str]]:
        offsets = {TopicPartition(a.topic, p): OffsetAndMetadata(offset, "", -1) for p in mine}
        consumer.commit(offsets)
        return []

    async def poll_briefly() -> None:
        consumer.poll(timeout_ms=200)

    if not a.no_subscribe:
        consumer.subscribe([a.topic], listener=Listener())
    commands = stdin_commands()
    emit("ready")
    # kafka-python 3.0.12 races its JoinGroup/SyncGroup task against poll()'s timer
    # (coordinator/base.py join_group_async): when the task completes just as a poll times out,
    # the next poll finds it done, drops its result and sends a NEW JoinGroup; from a static
    # leader that rejoined into a stable group this is (as in Kafka) a leader rejoin, i.e. a
    # full rebalance. The longer the poll (1 s by default), the rarer that window; commands then
    # wait up to one poll.
    poll_ms = 1000 if a.poll_ms is None else a.poll_ms
    while True:
        if a.no_subscribe:
            try:
                cmd = commands.get(timeout=0.1)
            except queue.Empty:
                continue
        else:
            try:
                consumer.poll(timeout_ms=poll_ms)
            except KafkaError as e:
                # kafka-python 3.0 lets e.g. KafkaConnectionError('111 ECONNREFUSED') escape
                # poll() while the coordinator is down; an application retries the poll
                if not e.retriable or a.poll_errors == "fail":
                    raise
                emit("poll_error", error=repr(e))
                time.sleep(0.1)
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                continue
        verb, _, arg = cmd.partition(" ")
        try:
            if verb == "commit":
                run_sync(
                    commit(a, int(arg), lambda: parts(assigned), attempt, poll_briefly, member)
                )
            elif verb == "committed":
                tps = [TopicPartition(a.topic, p) for p in wanted(arg, parts(assigned))]
                emit("offsets", offsets={tp.partition: norm(consumer.committed(tp)) for tp in tps})
            elif verb == "close":
                consumer.close()
                emit("closed")
                return
        except Exception as e:
            emit("error", cmd=cmd, error=repr(e))


def run_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": a.session_timeout_ms,
        "heartbeat.interval.ms": a.heartbeat_interval_ms,
        "partition.assignment.strategy": a.strategy,
        "client.id": a.client_id,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    if a.instance:
        conf["group.instance.id"] = a.instance
    if a.debug:  # e.g. "cgrp" or "cgrp,protocol": librdkafka's own log, to stderr
        conf["debug"] = a.debug
    if a.reconnect_backoff_max_ms is not None:
        conf["reconnect.backoff.ms"] = min(100, a.reconnect_backoff_max_ms)
        conf["reconnect.backoff.max.ms"] = a.reconnect_backoff_max_ms
    if a.stats:

        def on_stats(raw: str) -> None:
            try:
                cgrp = json.loads(raw).get("cgrp") or {}
            except ValueError:
                return
            emit(
                "stats",
                state=cgrp.get("state"),
                join_state=cgrp.get("join_state"),
                rebalance_cnt=cgrp.get("rebalance_cnt"),
                rebalance_reason=cgrp.get("rebalance_reason"),
                assignment_size=cgrp.get("assignment_size"),
            )

        def on_error(err: Any) -> None:
            emit("client_error", error=str(err))

        conf.update({"statistics.interval.ms": 1000, "stats_cb": on_stats, "error_cb": on_error})
    consumer = Consumer(conf)
    assigned: set[int] = set()
    cooperative = a.strategy == "cooperative-sticky"

    def member() -> dict[str, Any]:
        try:
            return {"member": consumer.memberid()}
        except Exception:
            return {}

    def on_assign(c: Any, new: Any) -> None:
        assigned.update(tp.partition for tp in new)
        if cooperative:
            c.incremental_assign(new)
        emit("assigned", partitions=parts(new), all=sorted(assigned), **member())

    def on_revoke(c: Any, revoked: Any) -> None:
        assigned.difference_update(tp.partition for tp in revoked)
        if cooperative:
            c.incremental_unassign(revoked)
        emit("revoked", partitions=parts(revoked), all=sorted(assigned), **member())

    async def attempt(mine: list[int], offset: int) -> list[tuple[int, str]]:
        tps = [TopicPartition(a.topic, p, offset) for p in mine]
        done = consumer.commit(offsets=tps, asynchronous=False) or []
        return [(tp.partition, str(tp.error)) for tp in done if tp.error is not None]

    async def poll_briefly() -> None:
        consumer.poll(0.2)

    if not a.no_subscribe:
        consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke)
    commands = stdin_commands()
    emit("ready")
    poll_s = 0.1 if a.poll_ms is None else a.poll_ms / 1000
    while True:
        if a.no_subscribe:
            try:
                cmd = commands.get(timeout=0.1)
            except queue.Empty:
                continue
        else:
            msg = consumer.poll(poll_s)
            if msg is not None and msg.error() is not None:
                emit("client_error", error=str(msg.error()))
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                continue
        verb, _, arg = cmd.partition(" ")
        try:
            if verb == "commit":
                run_sync(
                    commit(a, int(arg), lambda: sorted(assigned), attempt, poll_briefly, member)
                )
            elif verb == "committed":
                tps = [TopicPartition(a.topic, p) for p in wanted(arg, sorted(assigned))]
                got = consumer.committed(tps, timeout=10)
                emit("offsets", offsets={tp.partition: norm(tp.offset) for tp in got})
            elif verb == "close":
                consumer.close()
                emit("closed")
                return
        except Exception as e:
            emit("error", cmd=cmd, error=repr(e))


def run_aiokafka(a: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor
    from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from aiokafka.errors import KafkaError as AioKafkaError

    strategies = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
    poll_ms = 100 if a.poll_ms is None else a.poll_ms

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=a.bootstrap,
            group_id=a.group,
            group_instance_id=a.instance,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=a.session_timeout_ms,
            heartbeat_interval_ms=a.heartbeat_interval_ms,
            partition_assignment_strategy=(strategies[a.strategy],),
            client_id=a.client_id,
            fetch_max_wait_ms=200,
        )
        assigned: set[Any] = set()

        def member() -> dict[str, Any]:
            try:
                c = consumer._coordinator
                return {"member": c.member_id, "generation": c.generation}
            except Exception:  # private API: diagnostics only
                return {}

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                assigned.difference_update(revoked)
                emit("revoked", partitions=parts(revoked), all=parts(assigned), **member())

            async def on_partitions_assigned(self, new: Any) -> None:
                assigned.update(new)
                emit("assigned", partitions=parts(new), all=parts(assigned), **member())

        async def attempt(mine: list[int], offset: int) -> list[tuple[int, str]]:
            await consumer.commit({TopicPartition(a.topic, p): offset for p in mine})
            return []

        async def poll_briefly() -> None:
            await consumer.getmany(timeout_ms=200)

        await consumer.start()
        if not a.no_subscribe:
            consumer.subscribe([a.topic], listener=Listener())
        commands = stdin_commands()
        emit("ready")
        while True:
            if a.no_subscribe:
                await asyncio.sleep(0.1)
            else:
                try:
                    await consumer.getmany(timeout_ms=poll_ms)
                except AioKafkaError as e:
                    if not getattr(e, "retriable", False) or a.poll_errors == "fail":
                        raise
                    emit("poll_error", error=repr(e))
                    await asyncio.sleep(0.1)
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                continue
            verb, _, arg = cmd.partition(" ")
            try:
                if verb == "commit":
                    await commit(
                        a, int(arg), lambda: parts(assigned), attempt, poll_briefly, member
                    )
                elif verb == "committed":
                    tps = [TopicPartition(a.topic, p) for p in wanted(arg, parts(assigned))]
                    got = {tp.partition: norm(await consumer.committed(tp)) for tp in tps}
                    emit("offsets", offsets=got)
                elif verb == "close":
                    await consumer.stop()
                    emit("closed")
                    return
            except Exception as e:
                emit("error", cmd=cmd, error=repr(e))

    asyncio.run(main())


# Client library logs go to stderr (the harness keeps a file per consumer). kafka-python's
# join/sync requests and responses (logger kafka.coordinator) are logged at DEBUG: they show
# who led, with which member list, and why a member rejoined. The consumer/heartbeat children
# log need_rejoin / every heartbeat at DEBUG, hence INFO for them.
DEFAULT_LOG = (
    "INFO,kafka.coordinator=DEBUG,kafka.coordinator.consumer=INFO,kafka.coordinator.heartbeat=INFO"
)


def setup_logging(spec: str) -> None:
    """spec: comma-separated LEVEL (root) or LOGGER=LEVEL entries, e.g. E2E_CLIENT_LOG=DEBUG."""
    fmt = "%(asctime)s %(levelname)s %(name)s: %(message)s"
    logging.basicConfig(stream=sys.stderr, format=fmt)
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, _, level = item.rpartition("=")
        logging.getLogger(name or None).setLevel(level.upper())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("client", choices=["kafka-python", "aiokafka", "confluent"])
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--instance", default=None)
    p.add_argument("--strategy", default="range")
    p.add_argument("--session-timeout-ms", type=int, default=10000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    p.add_argument("--client-id", default="consumer")
    p.add_argument("--no-subscribe", action="store_true")
    p.add_argument("--commit-errors", choices=["retry", "report"], default="retry")
    p.add_argument("--poll-ms", type=int, default=None, help="default 1000 (kafka-python), 100")
    p.add_argument(
        "--poll-errors",
        choices=["retry", "fail"],
        default="retry",
        help="a retriable error escaping poll(): poll again, or fail the process",
    )
    p.add_argument("--request-timeout-ms", type=int, default=30000, help="kafka-python")
    p.add_argument("--metadata-max-age-ms", type=int, default=None, help="kafka-python")
    p.add_argument("--reconnect-backoff-max-ms", type=int, default=None, help="librdkafka")
    p.add_argument("--stats", action="store_true", help="librdkafka group statistics, errors")
    p.add_argument(
        "--debug",
        default=os.environ.get("E2E_RDKAFKA_DEBUG", ""),
        help="librdkafka debug contexts, e.g. cgrp (default: $E2E_RDKAFKA_DEBUG)",
    )
    a = p.parse_args()
    a.instance = a.instance or None
    setup_logging(os.environ.get("E2E_CLIENT_LOG", DEFAULT_LOG))
    try:
        {"kafka-python": run_kafka_python, "aiokafka": run_aiokafka, "confluent": run_confluent}[
            a.client
        ](a)
    except Exception as e:  # report, then fail the process
        emit("error", error=repr(e))
        raise


if __name__ == "__main__":
    main()
