"""Ports for the servers tests start, and often restart on the same port."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path

_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free TCP port on 127.0.0.1 below the kernel's ephemeral range.

    A port from bind(0) is an ephemeral one: once its server is killed, any client's next
    outgoing connection may be given that same number as its local port, and the server then
    cannot restart on it (EADDRINUSE; seen in the chaos suite). Below the range the kernel
    never hands it out by itself. Never the same port twice in one process, and under xdist
    never one another worker may hand out (a port is often free again between a node's kill
    and its restart): each worker draws from its own band of the range, so one worker's
    port never falls inside another's block either."""
    start, end = _band()
    rng = random.SystemRandom()
    for _ in range(500 if end - start > 1_000 else 0):
        port = rng.randrange(start, end)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # an unusual range setting: fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _band() -> tuple[int, int]:
    """This worker's ports: [start, end), a contiguous slice of 10000..the ephemeral range."""
    low = _ephemeral_low()
    worker, workers = _xdist_worker()
    width = max(0, low - 10_000) // workers
    return 10_000 + worker * width, 10_000 + (worker + 1) * width


def _xdist_worker() -> tuple[int, int]:
    """(this worker's index, the number of workers); (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if not name.startswith("gw") or count < 2:
        return 0, 1
    return int(name[2:]) % count, count


def free_port_block(n: int) -> int:
    """The first of `n` consecutive free ports (a gateway node's listener and its port per
    upstream broker), none handed out before; the rules of `free_port` for the first."""
    start, end = _band()
    rng = random.SystemRandom()
    for _ in range(2000):
        first = rng.randrange(start, end - n)
        block = range(first, first + n)
        if any(p in _handed_out for p in block):
            continue
        if all(_bindable(p) for p in block):
            _handed_out.update(block)
            return first
    raise RuntimeError(f"no {n} consecutive free ports in {start}..{end}")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
