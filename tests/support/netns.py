"""A private network on this machine for real network partitions (root only): a bridge in this
namespace with the service addresses (PostgreSQL, the upstream brokers), and one network
namespace per gateway node joined to it by a veth pair. Every address is one the test made.

A cut routes a node's packets to the address into a veth pair of its own namespace that leads
nowhere (a permanent neighbour entry, so no ARP fails; the far end neither owns the address nor
forwards): they vanish without an error to the sender, so connections made, and those being
made, hang as on a real partition (no reset, no refusal, no EINVAL as a blackhole route gives
local senders) until the route goes and retransmission resumes them. A flapping link is the
node's veth going down and up, and a congested one a `tc` token bucket on it (this machine's
kernel has no netem).

    with Lab() as lab:
        pg = lab.service_address(2)          # bind PostgreSQL here
        ns = lab.namespace()                 # ns.address: bind the node here
        cmd = [*ns.exec_prefix, "python", ...]
        ns.cut(pg); ...; ns.heal()
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

import pytest

SINK = "cvsink"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {r.stderr.strip()}")
    return r


def require_capabilities() -> None:
    """Fail loudly (never skip) when this run cannot make namespaces, veths and qdiscs."""
    missing = [t for t in ("ip", "tc") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"network partition tests need {missing} (iproute2) on PATH")
    if os.geteuid() != 0:
        pytest.fail("network partition tests need root (ip netns, veth pairs, tc netem)")
    probe = f"cvprobe{secrets.token_hex(3)}"
    r = ip("netns", "add", probe, check=False)
    if r.returncode != 0:
        pytest.fail(f"`ip netns add` refused here ({r.stderr.strip()}): CAP_SYS_ADMIN needed")
    ip("netns", "del", probe, check=False)


def _free_subnet() -> str:
    """A 10.213.N.0/24 no interface of this namespace uses (parallel test workers each make one)."""
    used = ip("-o", "-4", "addr", "show").stdout
    for _ in range(200):
        prefix = f"10.213.{secrets.randbelow(250) + 1}"
        if f" {prefix}." not in used:
            return prefix
    raise RuntimeError("no free 10.213.N.0/24 subnet")


@dataclass
class Namespace:
    name: str
    address: str  # the node's own address, inside the namespace
    device: str  # its end of the veth pair
    sink_mac: str = ""  # the far end of the namespace's sink veth
    cuts: set[str] = field(default_factory=set)
    throttled: bool = False

    @property
    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def cut(self, *addresses: str) -> None:
        """Drop, silently, every packet this namespace sends to `addresses` (both directions
        fail: no reply leaves, no handshake completes)."""
        for a in addresses:
            ip("-n", self.name, "neigh", "replace", a, "lladdr", self.sink_mac, "dev",
               SINK, "nud", "permanent")  # fmt: skip
            ip("-n", self.name, "route", "add", f"{a}/32", "dev", SINK)
            self.cuts.add(a)

    def heal(self) -> None:
        for a in sorted(self.cuts):
            ip("-n", self.name, "route", "del", f"{a}/32", "dev", SINK, check=False)
            ip("-n", self.name, "neigh", "del", a, "dev", SINK, check=False)
        self.cuts.clear()
        self.clear_throttle()
        ip("-n", self.name, "link", "set", self.device, "up", check=False)

    def throttle(self, rate_kbit: int, latency_ms: int) -> None:
        """A congested link: what this namespace sends leaves at `rate_kbit`, and a packet that
        would queue longer than `latency_ms` is dropped (tbf; this kernel has no netem)."""
        self._tc("qdisc", "replace", "dev", self.device, "root", "tbf", "rate", f"{rate_kbit}kbit",
                 "burst", "16kbit", "latency", f"{latency_ms}ms")  # fmt: skip
        self.throttled = True

    def link(self, up: bool) -> None:
        """The namespace's end of its veth down (every packet both ways lost) or up again."""
        ip("-n", self.name, "link", "set", self.device, "up" if up else "down")

    def clear_throttle(self) -> None:
        if self.throttled:
            self._tc("qdisc", "del", "dev", self.device, "root", check=False)
            self.throttled = False

    def _tc(self, *args: str, check: bool = True) -> None:
        cmd = [*self.exec_prefix, "tc", *args]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {r.stderr.strip()}")


class Lab:
    """The bridge and its namespaces; everything is deleted on close."""

    def __init__(self) -> None:
        require_capabilities()
        self.token = secrets.token_hex(2)
        self.prefix = _free_subnet()
        self.bridge = f"cvb{self.token}"
        self.namespaces: list[Namespace] = []
        self.services: list[str] = []
        ip("link", "add", "name", self.bridge, "type", "bridge")
        try:
            ip("addr", "add", f"{self.prefix}.1/24", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
        except RuntimeError:
            self.close()
            raise

    @property
    def root_address(self) -> str:
        """Where this namespace's processes (the clients, the test) come from."""
        return f"{self.prefix}.1"

    def service_address(self, i: int) -> str:
        """A further address of this namespace on the bridge (2..9), for one service."""
        assert 2 <= i <= 9
        address = f"{self.prefix}.{i}"
        if address not in self.services:
            ip("addr", "add", f"{address}/24", "dev", self.bridge)
            self.services.append(address)
        return address

    def namespace(self) -> Namespace:
        k = len(self.namespaces) + 1
        name = f"cvn{self.token}{k}"
        outer, inner = f"cv{self.token}{k}a", f"cv{self.token}{k}b"
        address = f"{self.prefix}.{10 + k}"
        ip("netns", "add", name)
        ns = Namespace(name, address, inner)
        self.namespaces.append(ns)
        ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", name)
        ip("link", "set", outer, "master", self.bridge, "up")
        ip("-n", name, "addr", "add", f"{address}/24", "dev", inner)
        ip("-n", name, "link", "set", inner, "up")
        ip("-n", name, "link", "set", "lo", "up")
        # the sink: what a cut routes into (Namespace.cut)
        ip("-n", name, "link", "add", SINK, "type", "veth", "peer", "name", f"{SINK}-far")
        ip("-n", name, "link", "set", SINK, "up")
        ip("-n", name, "link", "set", f"{SINK}-far", "up")
        shown = ip("-n", name, "-o", "link", "show", f"{SINK}-far").stdout.split()
        ns.sink_mac = shown[shown.index("link/ether") + 1]
        return ns

    def close(self) -> None:
        for ns in self.namespaces:
            ip("netns", "del", ns.name, check=False)  # takes its veth pair with it
        ip("link", "del", self.bridge, check=False)

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
