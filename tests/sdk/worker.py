"""A worker process on the membership SDK, for the SDK's tests: `python -m tests.sdk.worker
BOOTSTRAP GROUP [options]`. It prints one JSON event per line on stdout and takes commands on
stdin (the protocol of tests/support/consumers.py):

  events   ready, assigned {generation, items, leader, skip, sent, member_id, reason,
           coordinator_changes}, revoked, lost, fatal {error}, left, stats {...}
  commands subscribe ITEM,ITEM...   change this worker's subscription (the group rebalances)
           leave                     LeaveGroup and exit
           stats                     print the member's counters

--mode elect runs a LeaderElection instead: while it leads, it appends
"<token> <instance> <pid> <unix time>" to --token-file every 20 ms, the record the election test
checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from typing import Any

from membership import Assignment, LeaderElection, MembershipError, WorkDistributor


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, "t": time.time(), **fields}) + "\n")
    sys.stdout.flush()


def parse_items(spec: str) -> list[str]:
    """ "a,b,c" or "N" (item-000 .. item-N-1)."""
    if spec.isdigit():
        return [f"item-{i:03d}" for i in range(int(spec))]
    return [s for s in spec.split(",") if s]


async def read_commands(work: WorkDistributor) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := (await reader.readline()).decode().strip():
        cmd, _, arg = line.partition(" ")
        if cmd == "subscribe":
            work.set_subscription(parse_items(arg))
        elif cmd == "leave":
            await work.leave()
            emit("left")
            return
        elif cmd == "stats":
            s = work.member.stats
            emit("stats", joins=s.joins, rebalances_triggered=s.rebalances_triggered,
                 coordinator_changes=s.coordinator_changes, reasons=s.rejoin_reasons)  # fmt: skip


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("bootstrap")
    ap.add_argument("group")
    ap.add_argument("--instance")
    ap.add_argument("--items", default="100")
    ap.add_argument("--strategy", default="sticky")
    ap.add_argument("--mode", choices=("work", "elect"), default="work")
    ap.add_argument("--token-file")
    ap.add_argument("--session-timeout-ms", type=int, default=10_000)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=500)
    ap.add_argument("--client-id", default="sdk-worker")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")  # fmt: skip
    settings: dict[str, Any] = {
        "group_instance_id": args.instance,
        "session_timeout_ms": args.session_timeout_ms,
        "heartbeat_interval_ms": args.heartbeat_interval_ms,
        "client_id": args.client_id,
    }
    election: LeaderElection | None = None
    if args.mode == "elect":
        election = LeaderElection(args.bootstrap, args.group, **settings)
        work = election.work
    else:
        work = WorkDistributor(
            args.bootstrap, args.group, parse_items(args.items), strategy=args.strategy, **settings
        )
    member = work.member

    def assigned(a: Assignment) -> None:
        emit("assigned", generation=a.generation, items=sorted(work.items), leader=a.leader,
             skip=a.skipped_assignment, sent=a.assignments_sent, member_id=a.member_id,
             reason=member.stats.rejoin_reasons[-1] if member.stats.rejoin_reasons else None,
             coordinator_changes=member.stats.coordinator_changes)  # fmt: skip

    # the distributor's own callbacks run first: the event reports the items it decoded
    for name, extra in (("on_assigned", assigned),
                        ("on_revoked", lambda a: emit("revoked", generation=a.generation)),
                        ("on_lost", lambda a: emit("lost", generation=a.generation))):  # fmt: skip
        inner = getattr(member, name)
        setattr(member, name, lambda a, inner=inner, extra=extra: (inner(a), extra(a)))

    await work.start()
    emit("ready", pid=os.getpid())
    commands = asyncio.ensure_future(read_commands(work))
    try:
        if election is not None and args.token_file:
            with open(args.token_file, "a") as out:
                while not member._task.done():  # type: ignore[union-attr]
                    token = election.fencing_token
                    if token is not None:
                        out.write(f"{token} {args.instance} {os.getpid()} {time.time():.3f}\n")
                        out.flush()
                    await asyncio.sleep(0.02)
        await asyncio.wait([commands, member._task], return_when=asyncio.FIRST_COMPLETED)  # type: ignore[list-item]
        await member.wait()
    except MembershipError as e:
        emit("fatal", error=str(e), code=e.error_code)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
