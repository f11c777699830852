"""What a benchmark figure reports, and how BENCHMARKS.md is written.

Every figure is a ratio against a floor (or a peer) measured in the same run: absolute numbers
drift on a shared 2-core machine, ratios much less.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app import compiled

ROOT = Path(__file__).resolve().parents[1]
# an admin DSN of a server to use; unset, `python -m bench` starts a private cluster of its own
PG_DSN = os.environ.get("COORD_BENCH_PG", "")


@dataclass
class BenchOptions:
    smoke: bool  # a short run that proves every figure still works (CI); numbers mean little
    workdir: Path  # scratch space, removed after the run
    pg_dsn: str = PG_DSN  # admin DSN; figures create and drop their own databases


@dataclass
class Figure:
    key: str  # short name used by --only
    title: str
    goal: str  # the goal the issue sets, in words
    columns: list[str]
    rows: list[list[str]]
    verdict: str  # where we stand against the goal, e.g. "52% of the echo floor: goal met"
    method: str = ""  # how it was measured (a paragraph)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0  # wall time the figure took

    def markdown(self) -> str:
        out = [f"## {self.title}", "", f"**Goal:** {self.goal}  "]
        out += [f"**Result:** {self.verdict}", ""]
        out.append("| " + " | ".join(self.columns) + " |")
        out.append("|" + "---|" * len(self.columns))
        out.extend("| " + " | ".join(str(c) for c in row) + " |" for row in self.rows)
        out.append("")
        if self.method:
            out += [self.method, ""]
        out += [f"- {n}" for n in self.notes]
        if self.notes:
            out.append("")
        out.append(f"_({self.seconds:.0f} s)_")
        out.append("")
        return "\n".join(out)


# ---- numbers ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence: the smallest value with
    at least q% of the values at or below it."""
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q * len(s) / 100) - 1))
    return s[k]


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_ms(x: float) -> str:
    return f"{x:.1f} ms" if x < 100 else f"{x:.0f} ms"


def fmt_pct(x: float) -> str:
    return f"{100 * x:.0f}%"


# ---- the document -------------------------------------------------------------------------------


def code_version() -> str:
    """HEAD and whether the measured code (app/, storage/, api/) differs from it."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "app", "storage", "api"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    n = len(dirty.splitlines())
    return head + (f" + {n} uncommitted file(s) in app/ storage/ api/" if n else " (clean)")


def _pg_version(dsn: str) -> str:
    import asyncpg

    async def v() -> str:
        c = await asyncpg.connect(dsn)
        try:
            return str(await c.fetchval("SHOW server_version"))
        finally:
            await c.close()

    with contextlib.suppress(Exception):
        return asyncio.run(v())
    return "unreachable"


def machine_info(pg_dsn: str = PG_DSN) -> list[tuple[str, str]]:
    cpu = platform.processor() or "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError, ValueError, IndexError):
        kb = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
        mem = f"{kb / 1024 / 1024:.1f} GiB"
    loops = "asyncio"
    with contextlib.suppress(ImportError):
        import uvloop

        loops = f"uvloop {uvloop.__version__}"
    return [
        ("CPU", f"{os.cpu_count()} x {cpu}"),
        ("memory", mem),
        ("kernel", platform.release()),
        ("Python", platform.python_version()),
        ("event loop", loops),
        ("hot path", compiled.STATUS),  # what the nodes run: they import this checkout's app
        ("SQLite", sqlite3.sqlite_version),
        ("PostgreSQL", _pg_version(pg_dsn)),
        ("code", code_version()),
    ]


def document(
    figures: Sequence[Figure], command: str, started: float, info: list[tuple[str, str]]
) -> str:
    when = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(started))
    out = [
        "# Benchmarks",
        "",
        "Every figure is measured next to a floor or a peer **in the same run** on the same",
        "machine, and reported as a ratio to it: absolute numbers on this shared 2-core machine",
        "drift from run to run, ratios much less. Goals are the ones issues 6 and 12 set; they are",
        "ambitious on purpose, and each figure says where we stand.",
        "",
        f"Generated by `{command}` on {when} "
        f"({time.time() - started:.0f} s). Do not edit by hand: `make bench` rewrites this file.",
        "",
        "| machine | |",
        "|---|---|",
    ]
    out += [f"| {k} | {v} |" for k, v in info]
    out += ["", "| figure | result |", "|---|---|"]
    out += [f"| {f.title} | {f.verdict} |" for f in figures]
    out.append("")
    out += [f.markdown() for f in figures]
    return "\n".join(out)


def _number(title: str) -> str:
    """A figure's number ("6b." of "6b. Apache Kafka beside us: …"): what identifies its section
    across runs, whatever its title says after it."""
    return title.split(" ", 1)[0]


def merged(
    existing: str, figures: Sequence[Figure], command: str, started: float, code: str
) -> str:
    """`existing` (a BENCHMARKS.md) with only `figures` replaced (`--only`): each one's section
    and its summary row in place (matched by the figure's number), a figure it did not have at
    the end; the other figures, the machine table and the first run's line untouched, and one
    `Updated by` line per figure saying which run measured it last."""
    head, _, body = existing.partition("\n## ")
    sections = ["## " + s for s in body.split("\n## ")] if body else []
    if sections and not sections[-1].endswith("\n"):
        sections[-1] += "\n"
    lines = head.rstrip("\n").split("\n")
    when = time.strftime("%Y-%m-%d %H:%M %Z", time.localtime(started))
    for f in figures:
        num = _number(f.title)
        text = f.markdown()
        at = next((i for i, s in enumerate(sections) if _number(s[3:]) == num), None)
        if at is None:
            sections.append(text)
        else:
            sections[at] = text
        row = f"| {f.title} | {f.verdict} |"
        at = next((i for i, li in enumerate(lines) if li.startswith(f"| {num} ")), None)
        if at is None:
            last = max(i for i, li in enumerate(lines) if li.startswith("|"))
            lines.insert(last + 1, row)
        else:
            lines[at] = row
        note = f"Updated by `{command}` on {when} (code {code}): figure {num}"
        at = next(
            (i for i, li in enumerate(lines) if li.startswith("Updated by `") and
             li.endswith(f": figure {num}")),
            None,
        )  # fmt: skip
        if at is not None:
            lines[at] = note
        else:  # after the "Generated by" paragraph, before the machine table
            gen = next((i for i, li in enumerate(lines) if li.startswith("Generated by")), None)
            table = next(i for i, li in enumerate(lines) if li.startswith("| machine"))
            lines.insert(table - 1 if gen is not None else table, "")
            lines.insert(table, note)
    head = "\n".join(lines) + "\n"
    return head + "\n" + "\n".join(s.rstrip("\n") + "\n" for s in sections)
