"""One consumer-group round per client library over a secured listener.

`round_trip(client, bootstrap, group, topic, security)` subscribes, waits for its assignment,
commits offset COMMITTED on every assigned partition, reads the commits back and closes. It
returns the assigned partitions and what was read back, or raises what the client raised (an
authentication or authorization failure included).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

COMMITTED = 7
DEADLINE_S = 30.0


@dataclass(frozen=True)
class Security:
    protocol: str  # SASL_SSL | SSL | SASL_PLAINTEXT | PLAINTEXT
    cafile: str | None = None
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    certfile: str | None = None  # a client certificate (SSL principal)
    keyfile: str | None = None


class ClientError(Exception):
    """What the client reported: `code` is the Kafka error code when there is one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def round_trip(
    client: str, bootstrap: str, group: str, topic: str, security: Security
) -> tuple[set[int], dict[int, int | None]]:
    if client == "confluent":
        return _confluent(bootstrap, group, topic, security)
    if client == "kafka-python":
        return _kafka_python(bootstrap, group, topic, security)
    if client == "aiokafka":
        return asyncio.run(_aiokafka(bootstrap, group, topic, security))
    raise ValueError(client)


def confluent_config(bootstrap: str, security: Security) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "security.protocol": security.protocol,
    }
    if security.cafile:
        config["ssl.ca.location"] = security.cafile
    if security.mechanism:
        config.update(
            {
                "sasl.mechanisms": security.mechanism,
                "sasl.username": security.username,
                "sasl.password": security.password,
            }
        )
    if security.certfile:
        config["ssl.certificate.location"] = security.certfile
        config["ssl.key.location"] = security.keyfile
    return config


def _confluent(
    bootstrap: str, group: str, topic: str, security: Security
) -> tuple[set[int], dict[int, int | None]]:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    errors: list[Any] = []
    config = confluent_config(bootstrap, security)
    config.update(
        {
            "group.id": group,
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "error_cb": errors.append,
        }
    )
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        assigned: list[Any] = []
        while not assigned:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                errors.append(msg.error())
            fatal = [e for e in errors if _fatal_confluent(e)]
            if fatal:
                raise ClientError(str(fatal[0]), fatal[0].code())
            if time.monotonic() > deadline:
                raise ClientError(f"no assignment within {DEADLINE_S}s; errors {errors}")
            assigned = consumer.assignment()
        tps = [TopicPartition(topic, tp.partition, COMMITTED) for tp in assigned]
        try:
            consumer.commit(offsets=tps, asynchronous=False)
        except KafkaException as e:
            raise ClientError(str(e), e.args[0].code()) from e
        back = consumer.committed([TopicPartition(topic, tp.partition) for tp in assigned], 10)
        return {tp.partition for tp in assigned}, {
            tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in back
        }
    finally:
        consumer.close()


def _fatal_confluent(error: Any) -> bool:
    from confluent_kafka import KafkaError

    return error.code() in (
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError._SSL,
    )


def _kafka_python(
    bootstrap: str, group: str, topic: str, security: Security
) -> tuple[set[int], dict[int, int | None]]:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.cafile:
        options["ssl_cafile"] = security.cafile
        options["ssl_check_hostname"] = True
    if security.mechanism:
        options.update(
            sasl_mechanism=security.mechanism,
            sasl_plain_username=security.username,
            sasl_plain_password=security.password,
        )
    if security.certfile:
        options.update(ssl_certfile=security.certfile, ssl_keyfile=security.keyfile)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        # a failed authentication is retried with backoff until this runs out
        bootstrap_timeout_ms=8000,
        reconnect_backoff_max_ms=2000,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **options,
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + DEADLINE_S
        while not consumer.assignment():
            consumer.poll(200)
            if time.monotonic() > deadline:
                raise ClientError(f"no assignment within {DEADLINE_S}s")
        assigned = sorted(consumer.assignment())
        consumer.commit({tp: OffsetAndMetadata(COMMITTED, "", -1) for tp in assigned})
        back = {
            tp.partition: consumer.committed(TopicPartition(topic, tp.partition)) for tp in assigned
        }
        return {tp.partition for tp in assigned}, back
    finally:
        consumer.close()


async def _aiokafka(
    bootstrap: str, group: str, topic: str, security: Security
) -> tuple[set[int], dict[int, int | None]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.helpers import create_ssl_context

    options: dict[str, Any] = {"security_protocol": security.protocol}
    if security.cafile:
        options["ssl_context"] = create_ssl_context(
            cafile=security.cafile, certfile=security.certfile, keyfile=security.keyfile
        )
    if security.mechanism:
        options.update(
            sasl_mechanism=security.mechanism,
            sasl_plain_username=security.username,
            sasl_plain_password=security.password,
        )
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
        **options,
    )
    await consumer.start()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not consumer.assignment():
            await consumer.getmany(timeout_ms=200)
            if time.monotonic() > deadline:
                raise ClientError(f"no assignment within {DEADLINE_S}s")
        assigned = sorted(consumer.assignment())
        await consumer.commit({tp: COMMITTED for tp in assigned})
        back = {
            tp.partition: await consumer.committed(TopicPartition(topic, tp.partition))
            for tp in assigned
        }
        return {tp.partition for tp in assigned}, back
    finally:
        await consumer.stop()
