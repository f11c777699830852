"""Start consumers on the `demo` topic that `make run` registers, to watch a group form (and to
look at it in the console).

    make run                                        # terminal 1: a node on :9092, /ui on :8080
    .venv/bin/python examples/consumers.py          # terminal 2: three consumers, group "demo-app"

Each consumer is a confluent-kafka (librdkafka) Consumer in a thread of its own, printing its
assignment whenever it changes. `--static` gives them group.instance.ids (KIP-345).
"""

from __future__ import annotations

import argparse
import threading
import time

from confluent_kafka import Consumer

PRINTING = threading.Lock()


def run(name: str, args: argparse.Namespace, stop: threading.Event) -> None:
    conf = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": name,
        "enable.auto.commit": False,
        "session.timeout.ms": 10000,
    }
    if args.static:
        conf["group.instance.id"] = name
    c = Consumer(conf)

    def assigned(_c: Consumer, parts: list) -> None:  # type: ignore[type-arg]
        shown = ", ".join(f"{p.topic}:{p.partition}" for p in parts) or "nothing"
        with PRINTING:  # one whole line per event, whichever thread prints
            print(f"[{name}] assigned {shown}", flush=True)

    c.subscribe([args.topic], on_assign=assigned)
    try:
        while not stop.is_set():
            c.poll(0.5)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--group", default="demo-app")
    ap.add_argument("--topic", default="demo")
    ap.add_argument("-n", type=int, default=3, help="how many consumers")
    ap.add_argument("--static", action="store_true")
    ap.add_argument("--seconds", type=float, help="stop after this long (default: Ctrl-C)")
    args = ap.parse_args()
    stop = threading.Event()
    threads = [
        threading.Thread(target=run, args=(f"consumer-{i + 1}", args, stop), daemon=True)
        for i in range(args.n)
    ]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + args.seconds if args.seconds else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    stop.set()
    for t in threads:
        t.join(15)


if __name__ == "__main__":
    main()
