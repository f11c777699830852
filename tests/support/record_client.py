"""A consumer (or a producer) of real records in its own process, for the gateway's client tests
(tests/gateway/test_clients.py): the Python twin of tests/js/records.js and
tests/support/RecordClient.java, with the same command line and the same JSON lines.

usage: python -m tests.support.record_client CLIENT consume BOOTSTRAP TOPIC GROUP NAME INSTANCE
           SESSION_TIMEOUT_MS
       python -m tests.support.record_client CLIENT produce BOOTSTRAP TOPIC START COUNT
CLIENT is kafka-python, aiokafka or confluent; INSTANCE is the group.instance.id, or "-" for a
dynamic member.

A consumer subscribes to TOPIC in GROUP (auto commit off, auto.offset.reset earliest) and after
every poll that returned records commits the offsets after them, synchronously; a commit that
fails is retried after the next poll (the offsets of partitions revoked meanwhile are dropped:
their next owner reads those records again). Events, one JSON object a line on stdout:
  {"event": "ready"}
  {"event": "assigned"|"revoked", "partitions": [p, ...], "generation": g (or null)}
  {"event": "records", "records": [[partition, offset, value], ...]}
  {"event": "committed", "offsets": {"p": next offset, ...}}
  {"event": "commit_error", "error": "..."}      (retried)
  {"event": "closed"}                          after `quit` on stdin (or its end)
  {"event": "error", "error": "..."}           fatal: the process exits 1
A producer sends COUNT records, key str(i), value "record-<i>" for i in START..START+COUNT-1,
with acks=all, prints {"event": "produced", "count": COUNT} and exits 0 (1 on any failure).
"""

from __future__ import annotations

import asyncio
import json
import queue
import sys
import threading
import time
from typing import Any


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def stdin_lines() -> queue.Queue[str]:
    q: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in sys.stdin:
            q.put(line.strip())
        q.put("quit")

    threading.Thread(target=pump, daemon=True).start()
    return q


def quitting(commands: queue.Queue[str]) -> bool:
    try:
        return commands.get_nowait() == "quit"
    except queue.Empty:
        return False


def _consumer_settings(a: list[str]) -> tuple[str, str, dict[str, Any]]:
    """(bootstrap, topic, the consumer's settings) from the command line: kafka-python and
    aiokafka name them alike."""
    bootstrap, topic, group, name, instance, session_ms = a
    return (
        bootstrap,
        topic,
        {
            "group_id": group,
            "group_instance_id": None if instance == "-" else instance,
            "client_id": name,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
            "session_timeout_ms": int(session_ms),
            "heartbeat_interval_ms": 1000,
            "fetch_max_wait_ms": 200,
            "retry_backoff_ms": 100,
            "request_timeout_ms": 15000,
        },
    )


def took(batches: Any, pending: dict[int, int]) -> None:
    """Report a poll's records (kafka-python's and aiokafka's {partition: [record]}) and move
    each partition's offset to commit past them."""
    got = [[r.partition, r.offset, r.value.decode()] for rs in batches.values() for r in rs]
    if got:
        emit("records", records=got)
        for p, o, _ in got:
            pending[p] = max(pending.get(p, 0), o + 1)


# --- kafka-python ------------------------------------------------------------------------------


def kafka_python_consume(a: list[str]) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.errors import KafkaError

    bootstrap, topic, settings = _consumer_settings(a)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), **settings)
    pending: dict[int, int] = {}

    def generation() -> int | None:
        try:
            return int(consumer._coordinator._generation.generation_id)
        except Exception:  # private API: diagnostics only
            return None

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            for tp in revoked:
                pending.pop(tp.partition, None)
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        def on_partitions_assigned(self, new: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in new), generation=generation())

    consumer.subscribe([topic], listener=Listener())
    commands = stdin_lines()
    emit("ready")
    while not quitting(commands):
        try:
            # a long poll makes kafka-python 3.0's join/poll-timer race rare (tests/support/
            # consumer.py says more)
            batches = consumer.poll(timeout_ms=500)
        except KafkaError as e:  # e.g. ECONNREFUSED while the coordinator restarts
            if not e.retriable:
                raise
            emit("poll_error", error=repr(e))
            time.sleep(0.2)
            continue
        took(batches, pending)
        if pending:
            try:
                consumer.commit(
                    {
                        TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                        for p, o in pending.items()
                    }
                )
                emit("committed", offsets={str(p): o for p, o in pending.items()})
                pending.clear()
            except Exception as e:
                emit("commit_error", error=repr(e))
                time.sleep(0.2)
    consumer.close()
    emit("closed")


def kafka_python_produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", linger_ms=5)
    futures = [
        producer.send(topic, key=str(i).encode(), value=f"record-{i}".encode())
        for i in range(start, start + count)
    ]
    producer.flush(60)
    for f in futures:
        f.get(timeout=60)
    producer.close(10)


# --- aiokafka ----------------------------------------------------------------------------------


async def aiokafka_consume(a: list[str]) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    bootstrap, topic, settings = _consumer_settings(a)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **settings)
    pending: dict[int, int] = {}

    def generation() -> int | None:
        try:
            return int(consumer._coordinator.generation)
        except Exception:  # private API: diagnostics only
            return None

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            for tp in revoked:
                pending.pop(tp.partition, None)
            emit("revoked", partitions=sorted(tp.partition for tp in revoked))

        async def on_partitions_assigned(self, new: Any) -> None:
            emit("assigned", partitions=sorted(tp.partition for tp in new), generation=generation())

    await consumer.start()
    consumer.subscribe([topic], listener=Listener())
    commands = stdin_lines()
    emit("ready")
    while not quitting(commands):
        try:
            batches = await consumer.getmany(timeout_ms=200)
        except KafkaError as e:
            if not getattr(e, "retriable", False):
                raise
            emit("poll_error", error=repr(e))
            await asyncio.sleep(0.2)
            continue
        took(batches, pending)
        if pending:
            try:
                await consumer.commit({TopicPartition(topic, p): o for p, o in pending.items()})
                emit("committed", offsets={str(p): o for p, o in pending.items()})
                pending.clear()
            except Exception as e:
                emit("commit_error", error=repr(e))
                await asyncio.sleep(0.2)
    await consumer.stop()
    emit("closed")


async def aiokafka_produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, key=str(i).encode(), value=f"record-{i}".encode())
            for i in range(start, start + count)
        ]
        await asyncio.wait_for(asyncio.gather(*futures), 60)
    finally:
        await producer.stop()


# --- confluent-kafka ---------------------------------------------------------------------------


def confluent_consume(a: list[str]) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    bootstrap, topic, group, name, instance, session_ms = a
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": int(session_ms),
        "heartbeat.interval.ms": 1000,
        "fetch.wait.max.ms": 200,
    }
    if instance != "-":
        conf["group.instance.id"] = instance
    consumer = Consumer(conf)
    pending: dict[int, int] = {}

    def on_assign(_c: Any, new: Any) -> None:
        emit("assigned", partitions=sorted(tp.partition for tp in new), generation=None)

    def on_revoke(_c: Any, revoked: Any) -> None:
        for tp in revoked:
            pending.pop(tp.partition, None)
        emit("revoked", partitions=sorted(tp.partition for tp in revoked))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    commands = stdin_lines()
    emit("ready")
    while not quitting(commands):
        got: list[tuple[int, int, str]] = []
        for msg in consumer.consume(num_messages=500, timeout=0.2):
            if msg.error() is not None:
                emit("client_error", error=str(msg.error()))
                continue
            got.append(
                (int(msg.partition() or 0), int(msg.offset() or 0), (msg.value() or b"").decode())
            )
        if got:
            emit("records", records=got)
            for p, o, _ in got:
                pending[p] = max(pending.get(p, 0), o + 1)
        if pending:
            tps = [TopicPartition(topic, p, o) for p, o in pending.items()]
            try:
                done = consumer.commit(offsets=tps, asynchronous=False) or []
                failed = [str(tp.error) for tp in done if tp.error is not None]
                if failed:
                    raise RuntimeError(f"partition errors {failed}")
                emit("committed", offsets={str(p): o for p, o in pending.items()})
                pending.clear()
            except (KafkaException, RuntimeError) as e:
                emit("commit_error", error=repr(e))
                time.sleep(0.2)
    consumer.close()
    emit("closed")


def confluent_produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    failures: list[Any] = []
    for i in range(start, start + count):
        producer.produce(
            topic,
            key=str(i).encode(),
            value=f"record-{i}".encode(),
            on_delivery=lambda err, _msg: failures.append(str(err)) if err else None,
        )
    if producer.flush(60) != 0:
        raise RuntimeError("records still unsent after 60 s")
    if failures:
        raise RuntimeError(f"{len(failures)} records failed, e.g. {failures[:3]}")


def main() -> None:
    client, mode, *rest = sys.argv[1:]
    try:
        if mode == "consume":
            if client == "kafka-python":
                kafka_python_consume(rest)
            elif client == "aiokafka":
                asyncio.run(aiokafka_consume(rest))
            elif client == "confluent":
                confluent_consume(rest)
            else:
                raise SystemExit(f"unknown client {client}")
        elif mode == "produce":
            bootstrap, topic, start, count = rest
            args = (bootstrap, topic, int(start), int(count))
            if client == "kafka-python":
                kafka_python_produce(*args)
            elif client == "aiokafka":
                asyncio.run(aiokafka_produce(*args))
            elif client == "confluent":
                confluent_produce(*args)
            else:
                raise SystemExit(f"unknown client {client}")
            emit("produced", count=int(count))
        else:
            raise SystemExit(f"unknown mode {mode}")
    except Exception as e:
        emit("error", error=repr(e))
        sys.exit(1)


if __name__ == "__main__":
    main()
