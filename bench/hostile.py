"""Figure 7: Heartbeat p99 of well-behaved members with and without hostile connections.

1,000 members (one-member static groups, each heartbeating every 100 ms over 10 connections)
heartbeat for a window alone, then for a window while 50 connections run the attack mix of
`tests/support/hostile.py` (frames that used to abort the node, fuzzed frames, requests naming
9,999 groups or one topic 9,999 times, 32 KB client ids, generation -1 commits to new group ids,
1 MB group ids, 1 GiB frame sizes, slow senders, pipeliners behind a parked join, connection
floods). Members and attackers run in processes of their own; the node's resident memory is
sampled throughout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import node, rss_bytes
from bench.report import ROOT, BenchOptions, Figure

GOAL_RATIO = 2.0


def _spawn(role: str, address: str, out: Path, **kw: object) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "tests.support.hostile", role, address, f"--out={out}"]
    args += [f"--{k}={v}" for k, v in kw.items()]
    return subprocess.Popen(args, cwd=ROOT)


def _window(
    pid: int, address: str, workdir: Path, name: str, groups: int, seconds: float, attackers: int
) -> tuple[dict[str, Any], dict[str, Any] | None, float]:
    members_out = workdir / f"{name}-members.json"
    attack_out = workdir / f"{name}-attack.json"
    members = _spawn("members", address, members_out, groups=groups, seconds=seconds)
    time.sleep(min(8.0, seconds / 3))  # groups formed, heartbeats steady
    attack = None
    if attackers:
        attack = _spawn("attack", address, attack_out, connections=attackers, seconds=seconds / 2)
    peak = rss_bytes(pid)
    while members.poll() is None or (attack is not None and attack.poll() is None):
        peak = max(peak, rss_bytes(pid))
        time.sleep(0.2)
    if members.returncode != 0 or (attack is not None and attack.returncode != 0):
        raise RuntimeError(f"{name}: a load process failed")
    outcomes = json.loads(attack_out.read_text()) if attack is not None else None
    return json.loads(members_out.read_text()), outcomes, peak


def run(opts: BenchOptions) -> Figure:
    groups = 100 if opts.smoke else 1000
    attackers = 10 if opts.smoke else 50
    seconds = 12.0 if opts.smoke else 40.0
    started = time.time()
    with node(
        opts,
        "hostile",
        COORD_INITIAL_REBALANCE_DELAY_MS="0",
        COORD_FRAME_DEADLINE_MS="2000",
        COORD_MAX_CONNECTIONS_PER_IP="2000",
        COORD_TOPICS="t1:3",
    ) as n:
        assert n.proc is not None
        pid = n.proc.pid
        rss0 = rss_bytes(pid)
        calm, _, calm_peak = _window(pid, n.bootstrap, opts.workdir, "calm", groups, seconds, 0)
        storm, outcomes, storm_peak = _window(
            pid, n.bootstrap, opts.workdir, "storm", groups, seconds, attackers
        )
        alive = n.running
        rss1 = rss_bytes(pid) if alive else 0
    ratio = storm["p99_ms"] / calm["p99_ms"]
    rows = [
        [
            "members alone",
            f"{calm['heartbeats']:,}",
            f"{calm['p50_ms']:.1f}",
            f"{calm['p99_ms']:.1f}",
            f"{calm['max_ms']:.0f}",
            _errors(calm),
            f"{calm_peak / 2**20:.0f}",
        ],
        [
            f"with {attackers} hostile connections",
            f"{storm['heartbeats']:,}",
            f"{storm['p50_ms']:.1f}",
            f"{storm['p99_ms']:.1f}",
            f"{storm['max_ms']:.0f}",
            _errors(storm),
            f"{storm_peak / 2**20:.0f}",
        ],
    ]
    verdict = (
        f"p99 {storm['p99_ms']:.0f} ms under attack vs {calm['p99_ms']:.0f} ms alone = "
        f"{ratio:.1f}x: goal ({GOAL_RATIO:.0f}x) {'met' if ratio <= GOAL_RATIO else 'not met'}; "
        f"{'under' if storm['p99_ms'] < 250 else 'over'} the 250 ms bound; node "
        f"{'alive' if alive else 'DEAD'}, RSS {rss0 / 2**20:.0f} MB at start, "
        f"{storm_peak / 2**20:.0f} MB at the peak, {rss1 / 2**20:.0f} MB after"
    )
    notes = [
        f"{name}: " + ", ".join(f"{k} {v}" for k, v in sorted(got.items()))
        for name, got in (outcomes or {}).items()
    ]
    return Figure(
        key="hostile",
        title="7. Heartbeats of well-behaved members under the attack mix",
        goal=f"Heartbeat p99 of {groups:,} members with {attackers} hostile connections "
        f"≤ {GOAL_RATIO:.0f}x without them, and under 250 ms; the node's RSS growth",
        columns=["window", "heartbeats", "p50 ms", "p99 ms", "max ms", "errors", "peak RSS MB"],
        rows=rows,
        verdict=verdict,
        method=__doc__ or "",
        notes=["What each attack got back (per attempt: closed, answered, open):", *notes],
        seconds=time.time() - started,
    )


def _errors(got: dict[str, Any]) -> str:
    bad = {k: v for k, v in got["errors"].items() if k != "0"}
    return ", ".join(f"{k}: {v}" for k, v in bad.items()) or "none"
