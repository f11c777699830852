"""`python -m bench [--smoke] [--only KEY ...] [--out PATH]`: run the figures, write the report.

make bench                       # every figure, rewrites BENCHMARKS.md (tens of minutes)
.venv/bin/python -m bench --only gateway   # one figure: its section of BENCHMARKS.md replaced
.venv/bin/python -m bench --smoke --out /tmp/b.md    # each figure in seconds (CI)
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench.report import (
    PG_DSN,
    ROOT,
    BenchOptions,
    Figure,
    code_version,
    document,
    machine_info,
    merged,
)
from tests.support.postgres import PrivatePostgres

# key -> module with `run(opts) -> Figure | list[Figure]`, in report order
FIGURES = {
    "heartbeats": "bench.heartbeats",
    "rebalance": "bench.rebalance",
    "commits": "bench.commits",
    "load": "bench.load",
    "memory": "bench.memory",
    "tansu": "bench.tansu",
    "kafka": "bench.kafka_peer",
    "hostile": "bench.hostile",
    "security": "bench.security",
    "scaleout": "bench.scaleout",
    "audit": "bench.audit",
    "gateway": "bench.gateway",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: proves the figures work")
    ap.add_argument("--only", nargs="+", choices=list(FIGURES), help="run only these figures")
    ap.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    ap.add_argument(
        "--pg",
        default=PG_DSN,
        help="PostgreSQL admin DSN (default $COORD_BENCH_PG; unset: a private cluster, fsync on)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args(argv)

    started = time.time()
    workdir = Path(tempfile.mkdtemp(prefix="coord-bench-"))
    private_pg = None
    figures: list[Figure] = []
    failed: list[str] = []
    try:
        if not args.pg:
            private_pg = PrivatePostgres(prefix="coord-bench-pg-", fsync=True)
            private_pg.start()
            args.pg = private_pg.dsn()
        opts = BenchOptions(smoke=args.smoke, workdir=workdir, pg_dsn=args.pg)
        for key in args.only or list(FIGURES):
            t0 = time.time()
            print(f"[bench] {key} ...", file=sys.stderr, flush=True)
            try:
                got = importlib.import_module(FIGURES[key]).run(opts)
            except Exception:
                traceback.print_exc()
                failed.append(key)
                continue
            batch = got if isinstance(got, list) else [got]
            for f in batch:
                f.seconds = (time.time() - t0) / len(batch)
                print(f"[bench] {f.title}: {f.verdict}", file=sys.stderr, flush=True)
            figures.extend(batch)
        command = "make bench" if not args.smoke else "python -m bench --smoke"
        if args.only:
            command = command.replace("make bench", "python -m bench")
            command += " --only " + " ".join(args.only)
        if args.only and args.out.exists():  # the other figures stay as they were measured
            text = merged(args.out.read_text(), figures, command, started, code_version())
        else:
            text = document(figures, command, started, machine_info(args.pg))
        args.out.write_text(text)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        if private_pg is not None:
            private_pg.cleanup()
    print(f"[bench] wrote {args.out}", file=sys.stderr)
    if failed:
        print(f"[bench] FAILED figures: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
