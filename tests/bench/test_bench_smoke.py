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


def test_every_figure_runs_and_reports_a_ratio(tmp_path: Path, pg_admin_dsn: str) -> None:
    out = tmp_path / "BENCHMARKS.md"
    run = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out), "--pg", pg_admin_dsn],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert run.returncode == 0, run.stderr[-6000:]
    doc = out.read_text()
    assert "| CPU |" in doc and "python -m bench --smoke" in doc
    sections = re.split(r"^## ", doc, flags=re.M)[1:]
    assert len(sections) >= len(FIGURES), doc
    for section in sections:
        title = section.splitlines()[0]
        result = re.search(r"\*\*Result:\*\* (.+)", section)
        assert result and re.search(r"\d", result.group(1)), f"{title}: no figure in {result}"
        table = [ln for ln in section.splitlines() if ln.startswith("| ")]
        assert len(table) >= 2, f"{title}: no table rows"
        assert not any("nan" in ln.lower().split("|") for ln in table), title
