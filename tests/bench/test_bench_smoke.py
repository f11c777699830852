"""`python -m bench --smoke`: every figure runs end to end on tiny sizes and reports a ratio.

No thresholds (timings are noise at these sizes); what must hold is that each figure ran
against a real node and its floor, and that the report says where it stands.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from bench.__main__ import FIGURES

ROOT = Path(__file__).resolve().parents[2]


# Parts run at once (about 6.5 min in a row, under 4 this way). Smoke sizes assert no speed, so
# sharing the cores costs nothing they check; the scale-out figure's wait for an even split of
# the leases (60 s) is far above what sharing costs it. The audit figure, Spark's JVM twice over
# 20k records, runs alone after them: beside them it was the longest part (217 s), alone 43 s.
PARTS: tuple[list[str], ...] = (
    ["commits", "load", "kafka", "rebalance"],
    ["security", "tansu", "gateway", "heartbeats"],
    ["scaleout", "hostile", "memory"],
)
AUDIT_PARTS: tuple[list[str], ...] = (["audit"],)


def test_every_figure_is_smoked_somewhere() -> None:
    keys = [key for part in (*PARTS, *AUDIT_PARTS) for key in part]
    assert sorted(keys) == sorted(FIGURES), "a figure is in no part, or in two"


def test_every_figure_runs_and_reports_a_ratio(tmp_path: Path, pg_admin_dsn: str) -> None:
    smoke(PARTS, tmp_path, pg_admin_dsn)


def test_the_audit_figure_runs_and_reports_a_ratio(tmp_path: Path, pg_admin_dsn: str) -> None:
    smoke(AUDIT_PARTS, tmp_path, pg_admin_dsn)


def smoke(parts: tuple[list[str], ...], tmp_path: Path, pg_admin_dsn: str) -> None:
    """`python -m bench --smoke` of each part at once; every figure's section reports one."""
    bench = [sys.executable, "-m", "bench", "--smoke"]
    outs: list[Path] = []
    runs = []
    for part in parts:
        out = tmp_path / f"BENCHMARKS-{len(outs)}.md"
        outs.append(out)
        runs.append(
            subprocess.Popen(
                [*bench, "--only", *part, "--out", str(out), "--pg", pg_admin_dsn],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for part, run in zip(parts, runs, strict=True):
        _, stderr = run.communicate(timeout=480)
        assert run.returncode == 0, f"{part}:\n{stderr[-6000:]}"
    sections: list[str] = []
    for out in outs:
        doc = out.read_text()
        assert "| CPU |" in doc and "python -m bench --smoke" in doc
        sections += re.split(r"^## ", doc, flags=re.M)[1:]
    assert len(sections) >= sum(len(part) for part in parts), sections
    for section in sections:
        title = section.splitlines()[0]
        result = re.search(r"\*\*Result:\*\* (.+)", section)
        assert result and re.search(r"\d", result.group(1)), f"{title}: no figure in {result}"
        table = [ln for ln in section.splitlines() if ln.startswith("| ")]
        assert len(table) >= 2, f"{title}: no table rows"
        assert not any("nan" in ln.lower().split("|") for ln in table), title
