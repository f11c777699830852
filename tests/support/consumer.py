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
from collections.abc import Coroutine
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


class Driver:
    """One client library's consumer behind the command loop. The loop and the commit logic
    are the same for every client; a subclass connects, subscribes and implements the steps
    (async: aiokafka's are; kafka-python's and confluent's never suspend)."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a

    # --- the steps ------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect and, unless --no-subscribe, subscribe to the topic."""

    async def poll(self) -> None:
        """One poll of the subscribed consumer (callbacks run in it)."""

    async def idle(self) -> None:
        """A short wait of a consumer that does not subscribe."""
        time.sleep(0.1)

    def assigned(self) -> list[int]:
        raise NotImplementedError

    def member(self) -> dict[str, Any]:
        """Member id (and generation where the client tells): diagnostics of the events."""
        return {}

    async def attempt(self, partitions: list[int], offset: int) -> list[tuple[int, str]]:
        """Commit `offset` for `partitions`; the partitions that failed, with their error (it
        raises when the request failed as a whole)."""
        raise NotImplementedError

    async def poll_briefly(self) -> None:
        """A short poll between commit retries (it finishes the rebalance in progress)."""

    async def committed(self, partitions: list[int]) -> dict[int, int | None]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    # --- the command loop -----------------------------------------------------------------

    async def run(self) -> None:
        await self.start()
        commands = stdin_commands()
        emit("ready")
        while True:
            await (self.idle() if self.a.no_subscribe else self.poll())
            try:
                cmd = commands.get_nowait()
            except queue.Empty:
                continue
            verb, _, arg = cmd.partition(" ")
            try:
                if verb == "commit":
                    await self.commit(int(arg))
                elif verb == "committed":
                    offsets = await self.committed(wanted(arg, self.assigned()))
                    emit("offsets", offsets=offsets)
                elif verb == "close":
                    await self.close()
                    emit("closed")
                    return
            except Exception as e:
                emit("error", cmd=cmd, error=repr(e))

    async def commit(self, offset: int) -> None:
        """One `commit OFFSET` command (see --commit-errors)."""
        if self.a.commit_errors == "report":
            mine = self.assigned()
            if not mine:
                emit("commit_skipped", offset=offset, reason="nothing assigned")
                return
            info = self.member()  # the generation the commit is sent with
            try:
                failed = await self.attempt(mine, offset)
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
            mine = self.assigned()
            try:
                failed = await self.attempt(mine, offset)
                if failed:
                    raise RuntimeError(f"partition errors {failed}")
                break
            except Exception as e:
                if not rebalancing(e) or time.monotonic() > deadline:
                    raise
                emit("commit_retry", error=repr(e))
                await self.poll_briefly()
        emit("committed", partitions=mine, offset=offset, **self.member())


def run_sync(coro: Coroutine[Any, Any, None]) -> None:
    """Runs the command loop of a synchronous client: as none of its steps suspends, the
    coroutine runs to its end on its first step, without an event loop."""
    try:
        coro.send(None)
    except StopIteration:
        return
    coro.close()
    raise RuntimeError("a synchronous client's step suspended")


class KafkaPython(Driver):
    async def start(self) -> None:
        from kafka import KafkaConsumer
        from kafka.consumer.subscription_state import ConsumerRebalanceListener
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
        from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

        a = self.a
        strategies = {
            "range": RangePartitionAssignor,
            "roundrobin": RoundRobinPartitionAssignor,
            "sticky": StickyPartitionAssignor,
            "cooperative-sticky": CooperativeStickyAssignor,
        }
        optional = {}
        if a.metadata_max_age_ms is not None:
            optional["metadata_max_age_ms"] = a.metadata_max_age_ms
        self.consumer = consumer = KafkaConsumer(
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
        self.tps: set[Any] = set()
        # kafka-python 3.0.12 races its JoinGroup/SyncGroup task against poll()'s timer
        # (coordinator/base.py join_group_async): when the task completes just as a poll times
        # out, the next poll finds it done, drops its result and sends a NEW JoinGroup; from a
        # static leader that rejoined into a stable group this is (as in Kafka) a leader
        # rejoin, i.e. a full rebalance. The longer the poll (1 s by default), the rarer that
        # window; commands then wait up to one poll.
        self.poll_ms = 1000 if a.poll_ms is None else a.poll_ms
        tps, member = self.tps, self.member

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                tps.difference_update(revoked)
                emit("revoked", partitions=parts(revoked), all=parts(tps), **member())

            def on_partitions_assigned(self, new: Any) -> None:
                tps.update(new)
                emit("assigned", partitions=parts(new), all=parts(tps), **member())

        if not a.no_subscribe:
            consumer.subscribe([a.topic], listener=Listener())

    async def poll(self) -> None:
        from kafka.errors import KafkaError

        try:
            self.consumer.poll(timeout_ms=self.poll_ms)
        except KafkaError as e:
            # kafka-python 3.0 lets e.g. KafkaConnectionError('111 ECONNREFUSED') escape
            # poll() while the coordinator is down; an application retries the poll
            if not e.retriable or self.a.poll_errors == "fail":
                raise
            emit("poll_error", error=repr(e))
            time.sleep(0.1)

    def assigned(self) -> list[int]:
        return parts(self.tps)

    def member(self) -> dict[str, Any]:
        try:
            g = self.consumer._coordinator._generation
            return {"member": g.member_id, "generation": g.generation_id}
        except Exception:  # private API: diagnostics only
            return {}

    async def attempt(self, partitions: list[int], offset: int) -> list[tuple[int, str]]:
        from kafka import OffsetAndMetadata, TopicPartition

        topic = self.a.topic
        self.consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(offset, "", -1) for p in partitions}
        )
        return []

    async def poll_briefly(self) -> None:
        self.consumer.poll(timeout_ms=200)

    async def committed(self, partitions: list[int]) -> dict[int, int | None]:
        from kafka import TopicPartition

        tps = [TopicPartition(self.a.topic, p) for p in partitions]
        return {tp.partition: norm(self.consumer.committed(tp)) for tp in tps}

    async def close(self) -> None:
        self.consumer.close()


class Confluent(Driver):
    async def start(self) -> None:
        from confluent_kafka import Consumer

        a = self.a
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
            conf.update(
                {"statistics.interval.ms": 1000, "stats_cb": on_stats, "error_cb": on_error}
            )
        self.consumer = consumer = Consumer(conf)
        self.partitions: set[int] = set()
        self.poll_s = 0.1 if a.poll_ms is None else a.poll_ms / 1000
        cooperative = a.strategy == "cooperative-sticky"
        owned, member = self.partitions, self.member

        def on_assign(c: Any, new: Any) -> None:
            owned.update(tp.partition for tp in new)
            if cooperative:
                c.incremental_assign(new)
            emit("assigned", partitions=parts(new), all=sorted(owned), **member())

        def on_revoke(c: Any, revoked: Any) -> None:
            owned.difference_update(tp.partition for tp in revoked)
            if cooperative:
                c.incremental_unassign(revoked)
            emit("revoked", partitions=parts(revoked), all=sorted(owned), **member())

        if not a.no_subscribe:
            consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke)

    async def poll(self) -> None:
        msg = self.consumer.poll(self.poll_s)
        if msg is not None and msg.error() is not None:
            emit("client_error", error=str(msg.error()))

    def assigned(self) -> list[int]:
        return sorted(self.partitions)

    def member(self) -> dict[str, Any]:
        try:
            return {"member": self.consumer.memberid()}
        except Exception:
            return {}

    async def attempt(self, partitions: list[int], offset: int) -> list[tuple[int, str]]:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.a.topic, p, offset) for p in partitions]
        done = self.consumer.commit(offsets=tps, asynchronous=False) or []
        return [(tp.partition, str(tp.error)) for tp in done if tp.error is not None]

    async def poll_briefly(self) -> None:
        self.consumer.poll(0.2)

    async def committed(self, partitions: list[int]) -> dict[int, int | None]:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.a.topic, p) for p in partitions]
        got = self.consumer.committed(tps, timeout=10)
        return {tp.partition: norm(tp.offset) for tp in got}

    async def close(self) -> None:
        self.consumer.close()


def on_stats(raw: str) -> None:
    """librdkafka's statistics (--stats): the consumer group's part, as an event."""
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


class Aiokafka(Driver):
    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
        from aiokafka.coordinator.assignors.range import RangePartitionAssignor
        from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        a = self.a
        strategies = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor}
        self.consumer = consumer = AIOKafkaConsumer(
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
        self.tps: set[Any] = set()
        self.poll_ms = 100 if a.poll_ms is None else a.poll_ms
        tps, member = self.tps, self.member

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                tps.difference_update(revoked)
                emit("revoked", partitions=parts(revoked), all=parts(tps), **member())

            async def on_partitions_assigned(self, new: Any) -> None:
                tps.update(new)
                emit("assigned", partitions=parts(new), all=parts(tps), **member())

        await consumer.start()
        if not a.no_subscribe:
            consumer.subscribe([a.topic], listener=Listener())

    async def poll(self) -> None:
        from aiokafka.errors import KafkaError as AioKafkaError

        try:
            await self.consumer.getmany(timeout_ms=self.poll_ms)
        except AioKafkaError as e:
            if not getattr(e, "retriable", False) or self.a.poll_errors == "fail":
                raise
            emit("poll_error", error=repr(e))
            await asyncio.sleep(0.1)

    async def idle(self) -> None:
        await asyncio.sleep(0.1)

    def assigned(self) -> list[int]:
        return parts(self.tps)

    def member(self) -> dict[str, Any]:
        try:
            c = self.consumer._coordinator
            return {"member": c.member_id, "generation": c.generation}
        except Exception:  # private API: diagnostics only
            return {}

    async def attempt(self, partitions: list[int], offset: int) -> list[tuple[int, str]]:
        from aiokafka import TopicPartition

        await self.consumer.commit({TopicPartition(self.a.topic, p): offset for p in partitions})
        return []

    async def poll_briefly(self) -> None:
        await self.consumer.getmany(timeout_ms=200)

    async def committed(self, partitions: list[int]) -> dict[int, int | None]:
        from aiokafka import TopicPartition

        tps = [TopicPartition(self.a.topic, p) for p in partitions]
        return {tp.partition: norm(await self.consumer.committed(tp)) for tp in tps}

    async def close(self) -> None:
        await self.consumer.stop()


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
        if a.client == "aiokafka":
            asyncio.run(Aiokafka(a).run())
        else:
            run_sync({"kafka-python": KafkaPython, "confluent": Confluent}[a.client](a).run())
    except Exception as e:  # report, then fail the process
        emit("error", error=repr(e))
        raise


if __name__ == "__main__":
    main()
