"""Figure 9: `coordinator audit` (PySpark) against a plain Spark scan of the same Parquet.

For each size (1M and 10M records; 20k in --smoke) and master (local[1], local[2]; local[2]
only in --smoke) two processes run back to back (bench/audit_bench.py): the floor, a scan of the
input (count and total value bytes) in a session with the audit's settings, and the audit itself
(`coordinator audit`, report included). The audit's time is its own clock (session up, tables
written, report excluded), the floor's a scan after a warm-up job: both without the JVM start.
Generated inputs are cached in $AUDIT_BENCH_CACHE (default /tmp/audit-bench-cache): a 10M-record
log takes ~2 minutes to generate.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.audit_bench import generate, measure
from bench.report import BenchOptions, Figure, fmt_rate

KEY = "audit"
CACHE = Path(os.environ.get("AUDIT_BENCH_CACHE", "/tmp/audit-bench-cache"))
GOAL_S, GOAL_RATIO = 60.0, 8.0
# the stages the audit logs, in the order it runs them, with a short name for the notes; a
# stage run beside others (Audit.beside) overlaps them
STAGES = {
    "one pass over every record (counts, offsets seen)": "one pass over every record",
    "input summary (every record in log + history)": "input summary (beside the group pass)",
    "group pass: records decoded and audited per group (members, generations, ...)": ("group pass"),
    # an export read by Spark's scan (not a local directory)
    "reading + group pass: records decoded and audited per group (members, generations, ...)": (
        "read + group pass"
    ),
    "group records, generations, static identity, scale-ups": "group pass's tables written",
    "rebalance reasons": "reasons",
    "duplicate log positions: offset bitmaps": "duplicate bitmaps (beside)",
    "offset commits (generation as of the log, movement)": "offset commits (beside)",
    "invariants": "invariants",
    "per-group summary": "per group (after the invariants)",
    "report and plots": "report (not in the audit time)",
}


def _label(records: int) -> str:
    return f"{records / 1e6:.0f}M" if records >= 1_000_000 else f"{records / 1e3:.0f}k"


def run(opts: BenchOptions) -> Figure:
    sizes = [20_000] if opts.smoke else [1_000_000, 10_000_000]
    masters = ["local[2]"] if opts.smoke else ["local[1]", "local[2]"]
    results: list[dict[str, Any]] = []
    generated: dict[int, float] = {}
    for size in sizes:
        src = (opts.workdir if opts.smoke else CACHE) / f"gen-{size}"
        src.parent.mkdir(parents=True, exist_ok=True)
        gen_s = generate(src, size)
        if gen_s is not None:
            generated[size] = gen_s
        for master in masters:
            dest = opts.workdir / f"audit-{size}-{master.replace('[', '').replace(']', '')}"
            # smoke: no report and plots (seconds of matplotlib that prove nothing here)
            r = measure(src, master, dest, "2g" if opts.smoke else "4g", report=not opts.smoke)
            r["size"] = size
            results.append(r)
    rows = [
        [
            f"{r['records']:,}",
            r["master"],
            f"{r['audit_s']:.1f} s",
            f"{r['floor_scan_s']:.2f} s",
            f"{r['audit_over_floor']:.1f}x",
            fmt_rate(r["records_per_s"]),
            f"{r['cpu_s']:.0f} s",
            f"{r['peak_rss_mib']:,} MiB",
        ]
        for r in results
    ]
    by = {(r["size"], r["master"]): r for r in results}
    top = by[(sizes[-1], "local[2]")]
    met = top["audit_s"] <= GOAL_S and top["audit_s"] <= GOAL_RATIO * top["floor_scan_s"]
    verdict = (
        f"{_label(sizes[-1])} records on local[2]: {top['audit_s']:.1f} s = "
        f"{top['audit_over_floor']:.1f}x the plain-scan floor ({top['floor_scan_s']:.2f} s); "
        f"goal ≤ {GOAL_S:.0f} s and ≤ {GOAL_RATIO:.0f}x: {'met' if met else 'not met'}"
        + (" (smoke: 20k records, numbers mean little)" if opts.smoke else "")
    )
    notes = []
    for size in sizes:
        one, two = by.get((size, "local[1]")), by.get((size, "local[2]"))
        if one and two:
            notes.append(
                f"{_label(size)}: local[1] -> local[2] speeds the audit up "
                f"{one['audit_s'] / two['audit_s']:.2f}x (the floor scan "
                f"{one['floor_scan_s'] / two['floor_scan_s']:.2f}x)"
            )
    if len(sizes) > 1:
        small, big = sizes[0], sizes[-1]
        for master in masters:
            a, b = by[(small, master)], by[(big, master)]
            notes.append(
                f"{master}: {big // small}x the records take "
                f"{b['audit_s'] / a['audit_s']:.1f}x the audit time "
                f"({fmt_rate(a['records_per_s'])} -> {fmt_rate(b['records_per_s'])} records/s)"
            )
    jits = top.get("floor_scan_by_jit_s")
    if jits:
        notes.append(
            f"floor scan at {_label(sizes[-1])} on local[2] by JIT: "
            + ", ".join(f"{k} {v:.2f} s" for k, v in jits.items())
        )
    stages = top.get("stages_s", {})
    if stages:
        notes.append(
            f"stages at {_label(sizes[-1])} on local[2]: "
            + ", ".join(f"{short} {stages[s]:.1f} s" for s, short in STAGES.items() if s in stages)
        )
    notes.append(
        "load average (1 min) before/after each audit: "
        + ", ".join(
            f"{_label(r['size'])} {r['master']} {r['load_before_after'][0]}/"
            f"{r['load_before_after'][1]}"
            for r in results
        )
    )
    if generated:
        notes.append(
            "inputs generated in this run: "
            + ", ".join(f"{_label(k)} in {v:.0f} s" for k, v in generated.items())
        )
    return Figure(
        key=KEY,
        title="9. Audit: 10M records on local[2] vs a plain scan",
        goal=f"≤ {GOAL_S:.0f} s and ≤ {GOAL_RATIO:.0f}x the plain-scan floor at 10M on local[2]",
        columns=[
            "records",
            "master",
            "audit",
            "floor scan",
            "audit / floor",
            "records/s",
            "CPU (tree)",
            "peak RSS (tree)",
        ],
        rows=rows,
        verdict=verdict,
        method=(
            "Input: `python -m pipeline.generate` (simulated consumers through the real "
            "GroupCoordinator; log.parquet + history.parquet as `coordinator export` writes "
            "them; almost all records are offset commits). Per size and master, three processes "
            "back to back: the floor, a Spark scan of the same Parquet (count and total value "
            "bytes) after a warm-up job, once in a session with the audit's settings and once "
            "with the JVM's default JIT (the audit's local sessions run C1 only), the faster of "
            "the two, both mapping Spark's classes from the archive `make install` built "
            "(pipeline/class_archive.py), as the audit does; and `coordinator audit --master M "
            "--driver-memory 4g` (report included), "
            "whose own clock (session up, all tables written) is the audit time. CPU and peak "
            "RSS are the whole process tree (driver JVM, Python driver and workers), sampled "
            "every 0.2 s. The machine is shared: read the ratios, not the bare seconds. The "
            "audit reads a local export in its Python workers, one task per row group: one pass "
            "for the counts, offset bitmaps and the records other than commits, one that folds "
            "each batch's commits per partition into partial rows, grouped by partition and "
            "joined in log order by more Python tasks; the group records are decoded and "
            "audited whole groups at a time in one more Python pass. To a local OUT the tasks "
            "write the tables they compute (the group pass's, commit_activity) and the driver "
            "sums the input summary and the per-group summary; see bench/README_audit.md."
        ),
        notes=notes,
    )
