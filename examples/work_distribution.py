"""Split named jobs across worker processes with the membership SDK.

    make run                                            # terminal 1: a coordinator on :9092
    .venv/bin/python examples/work_distribution.py      # terminal 2: three workers, 12 jobs

Each worker is a static member (group.instance.id = its name): kill one and start it again
within the session timeout (10 s) and it gets the same jobs back while the others carry on
untouched. Run one worker per terminal with `--worker NAME` to try exactly that.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from membership import WorkDistributor

JOBS = [f"job-{n:02d}" for n in range(12)]


async def worker(name: str, args: argparse.Namespace) -> None:
    def changed(jobs: frozenset[str], generation: int) -> None:
        shown = ", ".join(sorted(jobs)) or "(none)"
        print(f"[{name}] generation {generation}: {shown}", flush=True)

    async with WorkDistributor(
        args.bootstrap, args.group, JOBS, group_instance_id=name, on_change=changed
    ) as work:
        while True:
            # the real work: each job this worker holds, with the generation as fencing token
            await asyncio.sleep(2)
            if work.items and args.verbose:
                print(f"[{name}] working on {len(work.items)} jobs (token {work.generation})")


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--group", default="example-jobs")
    ap.add_argument("--worker", action="append", help="run only these workers (repeatable)")
    ap.add_argument("--seconds", type=float, help="stop after this long (default: Ctrl-C)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    names = args.worker or ["worker-a", "worker-b", "worker-c"]
    tasks = [asyncio.ensure_future(worker(n, args)) for n in names]
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
