"""What the figures read off the processes they measure: CPU time, the machine's load, a node's
event-loop lag (Linux /proc and the node's /metrics)."""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
import urllib.request
from pathlib import Path


def process_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_jiffies() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    vals = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = vals[3] + vals[4]  # idle + iowait
    total = sum(vals[:8])  # guest time is already counted in user
    return total - idle, total


class CpuWindow(threading.Thread):
    """Reads a server's CPU time and the machine's at the window's two ends."""

    def __init__(self, pid: int, t0: float, t1: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.t0, self.t1 = pid, t0, t1
        self.server = float("nan")  # cores
        self.machine = float("nan")  # cores busy (all processes)

    def run(self) -> None:
        time.sleep(max(0.0, self.t0 - time.time()))
        s0, (m0, tot0), w0 = process_cpu(self.pid), machine_jiffies(), time.time()
        time.sleep(max(0.0, self.t1 - time.time()))
        s1, (m1, tot1), w1 = process_cpu(self.pid), machine_jiffies(), time.time()
        self.server = (s1 - s0) / (w1 - w0)
        self.machine = (m1 - m0) / max(1, tot1 - tot0) * (os.cpu_count() or 1)


class CpuSampler(threading.Thread):
    """(wall time, CPU seconds) of a process every 50 ms; `cores(spans)` its CPU over spans."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, float]] = []
        self.stop = False

    def run(self) -> None:
        while not self.stop:
            with contextlib.suppress(OSError):
                self.samples.append((time.time(), process_cpu(self.pid)))
            time.sleep(0.05)

    def cores(self, spans: list[tuple[float, float]]) -> float:
        used = elapsed = 0.0
        for begin, end in spans:
            inside = [c for c in self.samples if begin <= c[0] <= end]
            before = [c for c in self.samples if c[0] < begin][-1:]
            after = [c for c in self.samples if c[0] > end][:1]
            pts = before + inside + after  # the samples around the span: it is often < 0.1 s
            if len(pts) >= 2:
                used += pts[-1][1] - pts[0][1]
                elapsed += pts[-1][0] - pts[0][0]
        return used / elapsed if elapsed else math.nan


def loop_lag(admin_url: str) -> dict[str, float]:
    """The node's event-loop lag histogram (cumulative counts by upper bound, seconds)."""
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    prefix = "coordinator_event_loop_lag_seconds_bucket{"
    return {
        line.split('le="', 1)[1].split('"', 1)[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(prefix)
    }


def lag_text(lag: dict[str, float] | None) -> str:
    """'N readings, M over 10 ms, the largest ≤ X ms' of a loop-lag histogram delta."""
    if not lag:
        return "no loop-lag readings"
    bounds = sorted((float(le), n) for le, n in lag.items())
    total = bounds[-1][1]
    over10 = total - dict(bounds).get(0.01, total)
    largest = next((le for le, n in bounds if n >= total), math.inf)
    top = "?" if math.isinf(largest) else f"{1000 * largest:g} ms"
    return f"{total:.0f} readings, {over10:.0f} over 10 ms, the largest ≤ {top}"
