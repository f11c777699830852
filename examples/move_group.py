"""Move a consumer group from Apache Kafka's own coordinator to the gateway and back, and show
its positions at each step.

    make kafka                                          # shell 1: Apache Kafka on 19092
    COORD_UPSTREAM_BOOTSTRAP=127.0.0.1:19092 make run   # shell 2: the gateway on 9092
    .venv/bin/python examples/move_group.py             # shell 3

1. 300 records go to the topic `demo`; a consumer of group `demo-move` reads 100 of them from
   the brokers directly, commits and leaves.
2. The same group id through the gateway: its first positions are the upstream's commits (the
   import), so it reads records 100.. and none twice; it reads 100 more, commits and leaves.
3. `coordinator groups export demo-move --to-upstream` writes the gateway's positions back.
4. The group on the brokers directly again: it resumes at the gateway's positions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition


def produce(bootstrap: str, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, key=str(i).encode(), value=f"record-{i}".encode())
    p.flush(30)


def read(bootstrap: str, group: str, topic: str, n: int) -> dict[int, tuple[int, int]]:
    """Read `n` records as a member of `group`, committing each; per partition (first offset
    read, next position)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.subscribe([topic])
    seen: dict[int, tuple[int, int]] = {}
    deadline = time.monotonic() + 60
    got = 0
    while got < n and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None or msg.error():
            continue
        partition, offset = msg.partition(), msg.offset()
        assert partition is not None and offset is not None  # a record, not an event
        first = seen.get(partition, (offset, 0))[0]
        seen[partition] = (first, offset + 1)
        c.commit(message=msg, asynchronous=False)
        got += 1
    c.close()
    return dict(sorted(seen.items()))


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    tps = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    c.close()
    return {tp.partition: tp.offset for tp in tps if tp.offset >= 0}  # -1001: none


def admin(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=10) as r:
        return json.loads(r.read())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--brokers", default="127.0.0.1:19092")
    ap.add_argument("--gateway", default="127.0.0.1:9092")
    ap.add_argument("--admin-url", default="http://127.0.0.1:8080")
    ap.add_argument("--topic", default="demo")
    ap.add_argument("--partitions", type=int, default=6)
    args = ap.parse_args()
    group = f"demo-move-{uuid.uuid4().hex[:6]}"
    produce(args.brokers, args.topic, 300)

    print(f"1. {group} on the brokers directly: (first read, next position) per partition")
    print("  ", read(args.brokers, group, args.topic, 100))
    print("   upstream commits:", committed(args.brokers, group, args.topic, args.partitions))

    print("2. the same group through the gateway: it starts at those commits")
    print("  ", read(args.gateway, group, args.topic, 100))
    offsets = admin(args.admin_url, f"/groups/{group}")["offsets"]
    print("   gateway commits:", {o["partition"]: o["offset"] for o in offsets})

    print("3. coordinator groups export --to-upstream")
    time.sleep(1)  # the last member's LeaveGroup: the group is Empty here
    cmd = [sys.executable, "-m", "cli.main", "groups", "export", group, "--to-upstream"]
    out = subprocess.run([*cmd, "--url", args.admin_url], capture_output=True, text=True)
    print("  ", (out.stdout or out.stderr).strip())
    print("   upstream commits:", committed(args.brokers, group, args.topic, args.partitions))

    print("4. back on the brokers directly: it resumes at the gateway's positions")
    print("  ", read(args.brokers, group, args.topic, 100))


if __name__ == "__main__":
    main()
