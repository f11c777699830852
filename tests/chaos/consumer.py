"""A real Kafka consumer for the chaos suite, in its own process, driven over stdin and reporting
JSON lines on stdout (adapted from tests/integration/consumer_proc.py, trimmed to what the chaos
scenarios need and extended with librdkafka's consumer-group statistics).

usage: consumer.py CLIENT BOOTSTRAP GROUP TOPIC [--instance ID] [--session-timeout-ms MS]
                   [--heartbeat-interval-ms MS] [--client-id ID]
CLIENT is kafka-python or confluent. Commands on stdin, one per line:
  commit OFFSET   commit OFFSET for every partition currently assigned (synchronously)
  close           leave (dynamic members send LeaveGroup; static members do not) and exit
Events: {"event": "ready"|"assigned"|"revoked"|"committed"|"commit_failed"|"stats"|
         "client_error"|"closed"|"error", "t": unix time, ...}
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
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


def run_kafka_python(a: argparse.Namespace) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    consumer = KafkaConsumer(
        bootstrap_servers=a.bootstrap.split(","),
        group_id=a.group,
        group_instance_id=a.instance,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=a.session_timeout_ms,
        heartbeat_interval_ms=a.heartbeat_interval_ms,
        max_poll_interval_ms=300000,
        partition_assignment_strategy=[RangePartitionAssignor],
        request_timeout_ms=20000,
        fetch_max_wait_ms=200,
        retry_backoff_ms=100,
        client_id=a.client_id,
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

    consumer.subscribe([a.topic], listener=Listener())
    commands = stdin_commands()
    emit("ready")
    while True:
        consumer.poll(timeout_ms=100)
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            continue
        verb, _, arg = cmd.partition(" ")
        if verb == "commit":
            mine = sorted(assigned, key=lambda tp: tp.partition)
            if not mine:
                emit("commit_skipped", offset=int(arg), reason="nothing assigned")
                continue
            info = member()  # the generation the commit is sent with
            try:
                consumer.commit({tp: OffsetAndMetadata(int(arg), "", -1) for tp in mine})
            except Exception as e:  # CommitFailedError after a rebalance, timeouts, ...
                emit("commit_failed", offset=int(arg), error=repr(e), **info)
            else:
                emit("committed", partitions=parts(mine), offset=int(arg), **info)
        elif verb == "close":
            consumer.close()
            emit("closed")
            return


def run_confluent(a: argparse.Namespace) -> None:
    from confluent_kafka import Consumer, TopicPartition

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

    conf: dict[str, Any] = {
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": a.session_timeout_ms,
        "heartbeat.interval.ms": a.heartbeat_interval_ms,
        "partition.assignment.strategy": "range",
        "client.id": a.client_id,
        "topic.metadata.refresh.interval.ms": 2000,
        "statistics.interval.ms": 1000,
        "stats_cb": on_stats,
        "error_cb": on_error,
        "reconnect.backoff.ms": 100,
        "reconnect.backoff.max.ms": 500,
    }
    if a.instance:
        conf["group.instance.id"] = a.instance
    if a.debug:
        conf["debug"] = a.debug  # librdkafka's own log, to stderr
    consumer = Consumer(conf)
    assigned: set[int] = set()

    def member() -> dict[str, Any]:
        try:
            return {"member": consumer.memberid()}
        except Exception:
            return {}

    def on_assign(c: Any, new: Any) -> None:
        assigned.update(tp.partition for tp in new)
        emit("assigned", partitions=parts(new), all=sorted(assigned), **member())

    def on_revoke(c: Any, revoked: Any) -> None:
        assigned.difference_update(tp.partition for tp in revoked)
        emit("revoked", partitions=parts(revoked), all=sorted(assigned), **member())

    consumer.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke)
    commands = stdin_commands()
    emit("ready")
    while True:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is not None:
            emit("client_error", error=str(msg.error()))
        try:
            cmd = commands.get_nowait()
        except queue.Empty:
            continue
        verb, _, arg = cmd.partition(" ")
        if verb == "commit":
            mine = sorted(assigned)
            if not mine:
                emit("commit_skipped", offset=int(arg), reason="nothing assigned")
                continue
            tps = [TopicPartition(a.topic, p, int(arg)) for p in mine]
            info = member()
            try:
                done = consumer.commit(offsets=tps, asynchronous=False) or []
                failed = [(tp.partition, str(tp.error)) for tp in done if tp.error is not None]
            except Exception as e:
                emit("commit_failed", offset=int(arg), error=repr(e), **info)
                continue
            ok = [tp.partition for tp in done if tp.error is None]
            if failed:
                emit("commit_failed", offset=int(arg), error=repr(failed), **info)
            if ok:
                emit("committed", partitions=sorted(ok), offset=int(arg), **info)
        elif verb == "close":
            consumer.close()
            emit("closed")
            return


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("client", choices=["kafka-python", "confluent"])
    p.add_argument("bootstrap")
    p.add_argument("group")
    p.add_argument("topic")
    p.add_argument("--instance", default=None)
    p.add_argument("--session-timeout-ms", type=int, default=15000)
    p.add_argument("--heartbeat-interval-ms", type=int, default=1000)
    p.add_argument("--client-id", default="chaos-consumer")
    p.add_argument("--debug", default="", help="librdkafka debug contexts, e.g. cgrp")
    a = p.parse_args()
    a.instance = a.instance or None
    try:
        {"kafka-python": run_kafka_python, "confluent": run_confluent}[a.client](a)
    except Exception as e:  # report, then fail the process
        emit("error", error=repr(e))
        raise


if __name__ == "__main__":
    main()
