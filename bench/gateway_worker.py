"""The clients of figure 11 (bench/gateway.py), one OS process each:
`python -m bench.gateway_worker ARGS_JSON OUT_JSON`. Only the standard library and
confluent-kafka are imported: a worker starts in a fraction of a second, so a run's clients are
warm together (bench.common's workers import the node's packages too).

Every worker connects, moves one record, says it is warm (a file in the run's sync directory)
and waits for the run's start instant (the `go` file the figure writes once all are warm); then
it runs its window and writes its result."""

from __future__ import annotations

import json
import struct
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RECORD = 1024  # value bytes
SAMPLE = 8  # the latency run times every SAMPLE-th record


def worker(a: dict[str, Any]) -> dict[str, Any]:
    mode = a["mode"]
    if mode == "produce":
        return _produce(a)
    if mode == "fetch":
        return _fetch(a)
    if mode == "latency":
        return _latency(a)
    raise ValueError(mode)


def _ready_then_wait(a: dict[str, Any], meanwhile: Callable[[], None] | None = None) -> float:
    """Say this worker is warm (a file in the run's sync directory), then wait for the run's
    start instant (the `go` file the figure writes once every worker is warm), calling
    `meanwhile` in the wait (a consumer keeps draining: the window starts in steady state).
    Returns how late this worker saw the start."""
    sync = Path(a["sync"])
    (sync / f"ready-{a['index']}").touch()
    go = sync / "go"
    while not go.exists():
        if meanwhile is not None:
            meanwhile()
        else:
            time.sleep(0.005)
    start = float(go.read_text())
    late = max(0.0, time.time() - start)
    time.sleep(max(0.0, start - time.time()))
    return late


def _producer_conf(a: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": a["bootstrap"],
        "acks": "all",
        "linger.ms": 5,
        "compression.type": "none",
        "queue.buffering.max.messages": 20000,
        "enable.idempotence": False,
        "client.id": f"bench-gw-{uuid.uuid4().hex[:6]}",
        **extra,
    }


def _warm_producers(ps: Sequence[Any], topic: str, value: bytes) -> None:
    for p in ps:
        p.produce(topic, value)
    for p in ps:
        if p.flush(30) != 0:
            raise RuntimeError("warm-up record not delivered in 30 s")


def _produce(a: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Producer

    value = bytes(RECORD)
    ps = [Producer(_producer_conf(a)) for _ in range(a["clients"])]
    _warm_producers(ps, a["topic"], value)
    acked = [0]  # bytes acknowledged by the window's end
    errors = [0]
    end = float("inf")

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
        elif time.time() <= end:
            acked[0] += RECORD

    late = _ready_then_wait(a)
    end = time.time() + a["window"]
    budget = [a["max_records"]] * len(ps)
    topic = a["topic"]
    while time.time() < end and any(budget):
        for i, p in enumerate(ps):
            n = min(200, budget[i])
            for _ in range(n):
                try:
                    p.produce(topic, value, on_delivery=done)
                except BufferError:
                    break
                budget[i] -= 1
            p.poll(0 if n else 0.001)
    for p in ps:
        p.flush(60)
    return {"bytes": acked[0], "errors": errors[0], "late": late}


def _fetch(a: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    topic = a["topic"]
    cs = []
    for parts in a["assignments"]:
        c = Consumer(
            {
                "bootstrap.servers": a["bootstrap"],
                "group.id": f"bench-gw-{uuid.uuid4().hex[:8]}",  # never joined: assign() only
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                # a partition at its end is sought back to 0: a fetch long-polled there would
                # hold the broker connection's one fetch in flight for its default 500 ms
                "fetch.wait.max.ms": 10,
                "client.id": f"bench-gw-{uuid.uuid4().hex[:6]}",
            }
        )
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        cs.append(c)
    try:
        deadline = time.monotonic() + 30
        for c in cs:  # warm-up: connected, fetching
            while True:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("warm-up: no record consumed in 30 s")
        timeout = 0.05 if len(cs) == 1 else 0.0
        counts = [0, 0]  # value bytes, errors

        def drain() -> None:
            idle = True
            for c in cs:
                for m in c.consume(2000, timeout):
                    e = m.error()
                    if e is None:
                        counts[0] += len(m.value() or b"")
                        idle = False
                    elif e.code() == KafkaError._PARTITION_EOF:
                        c.seek(TopicPartition(topic, m.partition() or 0, 0))
                    else:
                        counts[1] += 1
            if idle and timeout == 0.0:
                time.sleep(0.0005)

        late = _ready_then_wait(a, drain)
        counts[:] = [0, 0]
        end = time.time() + a["window"]
        while time.time() < end:
            drain()
        return {"bytes": counts[0], "errors": counts[1], "late": late}
    finally:
        for c in cs:
            c.close()


def _latency(a: dict[str, Any]) -> dict[str, Any]:
    """One producer paced at `rate` records/s for the window; every SAMPLE-th record carries its
    index as key and a delivery callback that takes its latency (produce() -> delivery report):
    a callback per record would cost the client as much CPU as the pacing itself."""
    from confluent_kafka import Producer

    value = bytes(RECORD)
    p = Producer(_producer_conf(a))
    _warm_producers([p], a["topic"], value)
    rate, window = a["rate"], a["window"]
    sent: dict[int, float] = {}
    lat: list[float] = []
    errors = [0]

    def done(err: Any, msg: Any) -> None:
        if err is not None:
            errors[0] += 1
            return
        lat.append(time.perf_counter() - sent[struct.unpack(">Q", msg.key())[0]])

    late = _ready_then_wait(a)
    t0 = time.perf_counter()
    i = 0
    topic = a["topic"]
    while True:
        now = time.perf_counter()
        if now - t0 >= window:
            break
        due = int((now - t0) * rate) + 1
        while i < due:
            try:
                if i % SAMPLE == 0:
                    sent[i] = time.perf_counter()
                    p.produce(topic, value, key=struct.pack(">Q", i), on_delivery=done)
                else:
                    p.produce(topic, value)
            except BufferError:
                p.poll(0.001)
                continue
            i += 1
        # delivery reports served at once; back for the next record at its due time
        p.poll(max(0.0, min(0.001, t0 + (i / rate) - time.perf_counter())))
    p.flush(60)
    lat.sort()
    return {"lat": lat, "sent": i, "errors": errors[0], "late": late}


if __name__ == "__main__":
    result = worker(json.loads(sys.argv[1]))
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)
