"""Elect one leader among processes with the membership SDK; the leader stamps what it does
with its fencing token (the group generation).

    make run                                            # terminal 1: a coordinator on :9092
    .venv/bin/python examples/leader_election.py        # terminal 2: three candidates

After a few seconds the leader steps down (LeaveGroup) and another is elected with a higher
token. Run one candidate per terminal with `--candidate NAME` and kill the leader to see the
same after its session timeout (6 s here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from membership import LeaderElection


async def candidate(name: str, args: argparse.Namespace, step_down_after: float | None) -> None:
    election = LeaderElection(
        args.bootstrap,
        args.group,
        group_instance_id=name,
        session_timeout_ms=6000,
        on_elected=lambda token: print(f"[{name}] elected, fencing token {token}", flush=True),
        on_demoted=lambda: print(f"[{name}] no longer leader", flush=True),
    )
    async with election:
        led_since: float | None = None
        while True:
            await asyncio.sleep(0.5)
            if not election.is_leader:
                led_since = None
                continue
            # what a leader does, stamped with its token so stale leaders can be refused
            print(f"[{name}] leading: write with token {election.fencing_token}", flush=True)
            loop_time = asyncio.get_running_loop().time()
            led_since = led_since or loop_time
            if step_down_after is not None and loop_time - led_since > step_down_after:
                print(f"[{name}] stepping down", flush=True)
                await election.close(leave=True)
                return


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--group", default="example-election")
    ap.add_argument("--candidate", action="append", help="run only these (repeatable)")
    ap.add_argument("--seconds", type=float, help="stop after this long (default: Ctrl-C)")
    args = ap.parse_args()
    names = args.candidate or ["node-a", "node-b", "node-c"]
    # with the three demo candidates, each leader steps down after 3 s of leading
    step_down = None if args.candidate else 3.0
    tasks = [asyncio.ensure_future(candidate(n, args, step_down)) for n in names]
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), args.seconds)
    except TimeoutError:
        pass
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
