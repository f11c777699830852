"""`python -m tests.support.fetch_deps`: fetch what the client tests drive, into ignored folders
(`make deps`, so `make test` on a fresh machine has them before the first test runs):

- tests/java: Apache Kafka's consumer and kafka-consumer-groups, built with Maven;
- tests/broker: Apache Kafka's broker jars (the differential suite's oracle);
- tests/js: kafkajs, `npm ci` from its lock file;
- tests/go: franz-go and Sarama, `go mod download` from go.mod and go.sum (the consumers are
  built on first use, tests/support/go.py).

Each step does nothing when it is up to date. The test fixtures call the same functions, so a
run without `make deps` still fetches on first use; a missing tool fails either way.
"""

from __future__ import annotations

import sys
import time

from tests.support.go import download as download_go_modules
from tests.support.java import build as build_java_clients
from tests.support.js import ensure_node_modules
from tests.support.kafka_broker import ensure_jars as fetch_broker_jars


def main() -> int:
    steps = (
        ("tests/java (kafka-clients, kafka-tools)", build_java_clients),
        ("tests/broker (kafka_2.13)", fetch_broker_jars),
        ("tests/js (kafkajs)", ensure_node_modules),
        ("tests/go (franz-go, sarama)", download_go_modules),
    )
    for name, step in steps:
        started = time.monotonic()
        try:
            step()
        except BaseException as e:  # pytest.fail raises an Exception subclass of BaseException
            print(f"[deps] {name}: FAILED\n{e}", file=sys.stderr)
            return 1
        print(f"[deps] {name}: ready ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
