"""Benchmark of `coordinator audit` on a large generated log (not a test).

    .venv/bin/python bench/audit_bench.py --records 10000000            # generate, then audit
    .venv/bin/python bench/audit_bench.py --input /tmp/bench/gen10m     # reuse a generated log

For each master (local[1], local[2] by default) it runs, as separate processes:
- the floor: a Spark scan of the same Parquet (count and total value bytes) in a session with
  the audit's settings — what reading the input alone costs on this machine right now — run
  twice, with the audit's JIT setting (C1 only on local masters) and with the JVM's default
  JIT (both with Spark's classes from the class archive, as the audit), whichever is faster
  (the default: a long scan is what C2 is for);
- the audit itself (`coordinator audit`, report included),
sampling the resident memory of the whole process tree (Python driver, JVM, Python workers)
every 0.2 s. The machine is shared and noisy: compare the ratio audit / floor, and local[1]
against local[2] measured in the same run, rather than the bare seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable

FLOOR = """
import sys, time
from pipeline import class_archive
from pipeline.inputs import read_log
from pipeline.spark import build_session
from pyspark.sql import functions as F
# "default": the JVM's own JIT instead of the audit's (pipeline/spark.py); the same classes
default = {"spark.driver.extraJavaOptions": class_archive.java_options()}
jit = default if sys.argv[3] == "default" else {}
spark = build_session(sys.argv[1], app_name="audit-floor", extra_conf=jit)
spark.range(1).count()  # the session and its first job are not part of the floor
t = time.monotonic()
r = read_log(spark, sys.argv[2]).agg(F.count("*"), F.sum(F.length("value"))).collect()[0]
print(f"FLOOR rows={r[0]} seconds={time.monotonic() - t:.3f}")
spark.stop()
"""


def _children(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, ValueError, IndexError):
        return 0


class Measured:
    wall_s: float
    peak_mib: int
    cpu_s: float  # CPU time of the whole tree: what the job cost, whatever the contention
    load: tuple[float, float]  # 1-minute load average before and after
    out: str
    err: str


def run_measured(cmd: list[str]) -> Measured:
    """Run `cmd`, sampling the RSS and CPU time of its process tree every 0.2 s."""
    m = Measured()
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak = 0
    cpu: dict[int, int] = {}
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.2):
            pids = _children(proc.pid)
            peak = max(peak, sum(_rss_kb(p) for p in pids))
            for p in pids:
                cpu[p] = max(cpu.get(p, 0), _cpu_ticks(p))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out, err = proc.communicate()
    done.set()
    t.join()
    m.wall_s = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}):\n{err[-4000:]}")
    m.peak_mib, m.out, m.err = peak // 1024, out, err
    m.cpu_s = sum(cpu.values()) / os.sysconf("SC_CLK_TCK")
    m.load = (load0, os.getloadavg()[0])
    return m


def generate(src: Path, records: int, workers: int = 2) -> float | None:
    """Generate a log of about `records` records into `src` unless one is there; its seconds."""
    if (src / "manifest.json").exists():
        return None
    t = time.monotonic()
    subprocess.run(
        [
            PY,
            "-m",
            "pipeline.generate",
            "--out",
            str(src),
            "--records",
            str(records),
            "--workers",
            str(workers),
        ],
        cwd=ROOT,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.monotonic() - t


def input_rows(src: Path) -> int:
    manifest = json.loads((src / "manifest.json").read_text())
    return int(manifest["log_rows"]) + int(manifest["history_rows"])


def measure(
    src: Path, master: str, dest: Path, driver_memory: str = "4g", report: bool = True
) -> dict[str, Any]:
    """The floor scan, then the audit, of `src` on `master`, as two processes."""
    rows = input_rows(src)
    floors = {}
    for jit in ("audit", "default"):
        floor = run_measured([PY, "-c", FLOOR, master, str(src), jit])
        m = re.search(r"FLOOR rows=(\d+) seconds=([\d.]+)", floor.out)
        assert m and int(m.group(1)) == rows, floor.out
        floors[jit] = (float(m.group(2)), floor)
    floor_s, floor = min(floors.values(), key=lambda f: f[0])
    shutil.rmtree(dest, ignore_errors=True)
    audit = run_measured(
        [
            PY,
            "-m",
            "cli.main",
            "audit",
            "--input",
            str(src),
            "--out",
            str(dest),
            "--master",
            master,
            "--driver-memory",
            driver_memory,
            *([] if report else ["--no-report"]),
        ]
    )
    dest.with_name(f"{dest.name}.stderr").write_text(audit.err)  # the audit's progress log
    m = re.search(r"audited (\d+) records in ([\d.]+) s", audit.out)
    assert m, audit.out
    audit_s = float(m.group(2))
    stages = {
        g.group(1): float(g.group(2))
        for g in re.finditer(r"\] (.+?) done in ([\d.]+) s", audit.err)
    }
    return {
        "master": master,
        "records": rows,
        "wall_s": round(audit.wall_s, 1),
        "audit_s": round(audit_s, 1),
        "records_per_s": round(rows / audit_s),
        "cpu_s": round(audit.cpu_s, 1),
        "peak_rss_mib": audit.peak_mib,
        "floor_scan_s": round(floor_s, 2),
        "floor_scan_by_jit_s": {jit: round(f[0], 2) for jit, f in floors.items()},
        "floor_peak_rss_mib": floor.peak_mib,
        "audit_over_floor": round(audit_s / floor_s, 1),
        "load_before_after": [round(x, 1) for x in audit.load],
        "violations": sum(1 for line in audit.out.splitlines() if "VIOLATED" in line),
        "stages_s": stages,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=10_000_000)
    p.add_argument("--input", type=Path, default=None, help="a generated log to reuse")
    p.add_argument("--work", type=Path, default=Path("/tmp/audit-bench"))
    p.add_argument("--masters", default="local[1],local[2]")
    p.add_argument("--driver-memory", default="4g")
    p.add_argument("--workers", type=int, default=2, help="generator processes")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    a = p.parse_args()

    a.work.mkdir(parents=True, exist_ok=True)
    gen_s = None
    src = a.input
    if src is None:
        src = a.work / f"gen-{a.records}"
        gen_s = generate(src, a.records, a.workers)
    manifest = json.loads((src / "manifest.json").read_text())
    rows = manifest["log_rows"] + manifest["history_rows"]
    print(
        f"input {src}: {rows:,} records ({manifest['log_rows']:,} log, "
        f"{manifest['history_rows']:,} history)"
        + (f", generated in {gen_s:.0f} s" if gen_s else ""),
        flush=True,
    )
    results = []
    for master in a.masters.split(","):
        dest = a.work / f"audit-{master.replace('[', '').replace(']', '')}"
        r = measure(src, master, dest, a.driver_memory)
        results.append(r)
        print(json.dumps(r), flush=True)
    print()
    print(
        "| master | records | wall (process) | audit | records/s | CPU (tree) | "
        "peak RSS (tree) | floor scan | audit / floor | load avg before/after |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['master']} | {r['records']:,} | {r['wall_s']} s | {r['audit_s']} s | "
            f"{r['records_per_s']:,} | {r['cpu_s']} s | {r['peak_rss_mib']:,} MiB | "
            f"{r['floor_scan_s']} s | {r['audit_over_floor']}x | "
            f"{r['load_before_after'][0]} / {r['load_before_after'][1]} |"
        )
    by_master = {r["master"]: r for r in results}
    if "local[1]" in by_master and "local[2]" in by_master:
        base, top = by_master["local[1]"], by_master["local[2]"]
        print(
            f"\nspeed-up {base['master']} -> {top['master']}: "
            f"{base['audit_s'] / top['audit_s']:.2f}x (audit), "
            f"{base['floor_scan_s'] / top['floor_scan_s']:.2f}x (floor scan)"
        )
    if a.json:
        a.json.write_text(
            json.dumps({"input": str(src), "generated_s": gen_s, "results": results}, indent=2)
            + "\n"
        )


if __name__ == "__main__":
    main()
