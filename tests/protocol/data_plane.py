"""Requests of the data plane this node answers without data (ListOffsets, Fetch, Produce)."""

from __future__ import annotations

from typing import Any

from tests.support.kafka_client import KafkaTestClient


def list_offsets_request(version: int) -> Any:
    """Earliest of t1:0, latest of t1:2, and two partitions that do not exist."""
    return KafkaTestClient.build_request(
        2,
        version,
        replica_id=-1,
        isolation_level=0,
        topics=[
            {
                "name": "t1",
                "partitions": [
                    {"partition_index": 0, "timestamp": -2, "current_leader_epoch": -1},
                    {"partition_index": 2, "timestamp": -1, "current_leader_epoch": -1},
                    {"partition_index": 3, "timestamp": -1, "current_leader_epoch": -1},
                ],
            },
            {
                "name": "nope",
                "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}],
            },
        ],
    )


def fetch_request(version: int, max_wait_ms: int, topic: str = "t1", min_bytes: int = 1) -> Any:
    return KafkaTestClient.build_request(
        1,
        version,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        forgotten_topics_data=[],
        topics=[
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "fetch_offset": 0,
                        "partition_max_bytes": 1 << 20,
                        "current_leader_epoch": -1,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                    }
                    for p in (0, 2)
                ],
            }
        ],
    )


def produce_request(version: int, acks: int) -> Any:
    return KafkaTestClient.build_request(
        0,
        version,
        transactional_id=None,
        acks=acks,
        timeout=1000,
        topic_data=[
            {
                "name": "t1",
                "partition_data": [{"index": 0, "records": b"x"}, {"index": 1, "records": None}],
            }
        ],
    )
