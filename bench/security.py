"""Figure 8: what security costs, measured against PLAINTEXT and TLS in the same run. The loads
of (a) and (b) run from bench/secured_loads.py, (c) from bench/auth_rate.py, (d) from
bench/auth_storm.py; the node and its SCRAM clients are bench/secure_node.py's.

Method. One `coordinator serve` (SQLite) with SASL_SSL, SSL, SASL_PLAINTEXT and PLAINTEXT
listeners (tests/support/secure.py: trustme certificates, ECDSA P-256; COORD_AUTHORIZER=acl;
COORD_SSL_CLIENT_AUTH=none, as a SASL_SSL-only deployment sets it). User `bench` is made by
`coordinator users set` (SCRAM-SHA-256 and SCRAM-SHA-512, 4096 iterations) and the same ACLs
(READ on every group and topic) are given to User:bench and to User:ANONYMOUS, the PLAINTEXT
principal: both listeners go through the same authorizer, so the ratios are TLS and SASL alone.

(a) Heartbeats. Figure 1's load (bench/heartbeats.py's Stable groups of 10 static members and
pre-encoded Heartbeat v4 frames; bench/generators.py's closed-loop `HeartbeatLoad` over
`worker_processes()` processes, 2%-wide latency buckets) on connections opened by
KafkaTestClient over PLAINTEXT, or over SASL_SSL (TLS 1.3, SaslHandshake, SCRAM-SHA-256) and
then handed to the load protocol. The two listeners alternate, the order flipped each round;
the ratio is the median of the per-round ratios.

(b) Commits. Figure 3's committers (bench/generators.py's `run_committers`: groups of 10
members, each committing its own partition with its generation in a closed loop, read back with
OffsetFetch) with their client class connecting over SASL_SSL (SCRAM-SHA-256) or PLAINTEXT;
fresh groups each window, listeners alternating.

(c) Authentications/s. C connectors spread over the worker processes, each in a closed loop:
TCP connect, full TLS handshake (no session resumption), SaslHandshake v1, two
SaslAuthenticate v2 (the SCRAM exchange, the server's signature checked), close. A connector
caches the salted password per (salt, iterations), as the node keeps stored keys rather than
passwords, so PBKDF2 runs once per process and not per connection: the load generators measure
the node, not their own hashing (a real client pays ~2 ms of PBKDF2 per connection on top).
Floor: the same connectors against a minimal asyncio (uvloop) TLS echo server in a process of
its own, with the node's server context (app.security.tls.server_context, same certificate
and key): TCP connect, TLS handshake, one 4-byte echo (so the server has finished its side),
close. The node runs handshakes and SCRAM steps on its 2 security threads; the echo server
runs its handshakes on its event loop.

(d) Authentication storm. M members (groups of 10 static members, session timeout 10 s) on
connections of their own, authenticated over SASL_SSL (SCRAM-SHA-256), heartbeat every 100 ms
(one in flight per member, sends spread over the interval) in one process; another process
waits until they have heartbeated alone for a while, then runs storms: 200 clients connect
to the SASL_SSL listener and authenticate with SCRAM-SHA-512 at once (asyncio.gather), stay
connected until the last one is through, then close. The storm's clients share (c)'s salted
password cache (filled by one authentication before the first storm): 200 real clients hash
on 200 machines in parallel and reach the node together, where one Python process hashing 200
times in turn (2.4 ms each) would spread the storm over half a second. A heartbeat whose round
trip overlaps a storm (first connect to last authentication) counts as "during the storm";
the ones sent before the first storm are the "without storm" baseline. Any heartbeat error
(REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, a fenced instance) would mean the storm made the
node lose a member. Node CPU is sampled every 50 ms and read over the same spans.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from typing import Any

from bench import heartbeats as hb
from bench.auth_rate import AuthWindow, auth_window, tls_echo_server
from bench.auth_storm import (
    MEMBER_SESSION_MS,
    MEMBERS_PER_GROUP,
    STORM_BOUND_MS,
    STORM_CLIENTS,
    STORM_MECHANISM,
    TOPIC,
    storm_window,
)
from bench.common import run_async
from bench.generators import COMMIT_MEMBERS, COMMIT_TOPIC
from bench.probes import lag_text
from bench.report import BenchOptions, Figure, fmt_ms, fmt_pct, fmt_rate, median
from bench.secure_node import secure_bench_node
from bench.secured_loads import CommitWindow, commit_window, heartbeat_window


def _errors_of(*counters: dict[Any, int]) -> str:
    total: Counter[str] = Counter()
    for c in counters:
        total.update({str(k): v for k, v in c.items()})
    return ", ".join(f"{k} x{v}" for k, v in sorted(total.items())) or "0"


def _method() -> str:
    paragraphs = (__doc__ or "").strip().split("\n\n")[1:]
    return "\n\n".join(p.replace("\n", " ") for p in paragraphs)


def run(opts: BenchOptions) -> Figure:
    smoke = opts.smoke
    hb_groups = 10 if smoke else 100
    commit_groups = 10 if smoke else 100
    window = 1.5 if smoke else 6.0
    warmup = 0.3 if smoke else 1.0
    hb_rounds = 1 if smoke else 3
    commit_rounds = 1 if smoke else 2
    auth_rounds = 1 if smoke else 3
    connectors = 16 if smoke else 32
    storm_groups = 2 if smoke else 10
    storms = 1 if smoke else 5
    calm = 2.0 if smoke else 5.0
    workdir = opts.workdir / "security"
    started = time.time()
    hb_w: dict[str, list[hb.Window]] = {"PLAINTEXT": [], "SASL_SSL": []}
    cm_w: dict[str, list[CommitWindow]] = {"PLAINTEXT": [], "SASL_SSL": []}
    auth_w: dict[str, list[AuthWindow]] = {"echo": [], "SCRAM-SHA-256": [], "SCRAM-SHA-512": []}
    with secure_bench_node(
        workdir,
        COORD_TOPICS=f"{hb.TOPIC}:{hb.MEMBERS_PER_GROUP},{COMMIT_TOPIC}:"
        f"{COMMIT_MEMBERS},{TOPIC}:10",
        COORD_INITIAL_REBALANCE_DELAY_MS="300",
        COORD_LOG_PARTITIONS="16",
        COORD_SSL_CLIENT_AUTH="none",
    ) as s:
        sec: dict[str, dict[str, str] | None] = {"PLAINTEXT": None, "SASL_SSL": s.security()}
        # (a) heartbeats
        frames, _ = run_async(hb.form_groups(s.port("PLAINTEXT"), hb_groups))
        frames_file = workdir / "heartbeat-frames.json"
        frames_file.write_text(json.dumps([[f.hex() for f in conn] for conn in frames]))
        order = ["PLAINTEXT", "SASL_SSL"]
        for r in range(hb_rounds):
            for proto in order if r % 2 == 0 else order[::-1]:
                hb_w[proto].append(
                    heartbeat_window(
                        s.port(proto), s.pid, sec[proto], frames_file, hb_groups, window, warmup
                    )
                )
        # (b) commits
        for r in range(commit_rounds):
            for proto in order if r % 2 == 0 else order[::-1]:
                cm_w[proto].append(
                    commit_window(
                        s.port(proto), s.pid, sec[proto], f"sec-commits-{proto.lower()}-{r}",
                        commit_groups, window, warmup, workdir / f"ready-{proto}-{r}",
                    )
                )  # fmt: skip
        # (c) authentications/s against the bare TLS handshake floor
        with tls_echo_server(s.certfile, s.keyfile) as (echo_port, echo_pid):
            targets = ["echo", "SCRAM-SHA-256", "SCRAM-SHA-512"]
            for r in range(auth_rounds):
                for t in targets if r % 2 == 0 else targets[::-1]:
                    if t == "echo":
                        w = auth_window("echo", echo_port, echo_pid, s.cafile, "", connectors,
                                         window, warmup)  # fmt: skip
                    else:
                        w = auth_window("node", s.port("SASL_SSL"), s.pid, s.cafile, t,
                                         connectors, window, warmup)  # fmt: skip
                    auth_w[t].append(w)
        # (d) the storm
        storm = storm_window(
            s.port("SASL_SSL"), s.cafile, workdir, groups=storm_groups, calm=calm, storms=storms,
            node_pid=s.pid, admin_url=s.node.admin_url,
        )  # fmt: skip
        alive = s.node.running

    # ---- the table ----
    def ratio(of: dict[str, list[Any]], what: str) -> list[float]:
        if not all(b.rate > 0 for b in of["PLAINTEXT"]):
            # a floor of nothing is no floor: say so rather than divide by it
            raise RuntimeError(
                f"the PLAINTEXT {what} floor measured nothing in a window "
                f"({[b.rate for b in of['PLAINTEXT']]}/s, errors "
                f"{[b.errors for b in of['PLAINTEXT']]})"
            )
        pairs = zip(of["SASL_SSL"], of["PLAINTEXT"], strict=True)
        return [a.rate / b.rate for a, b in pairs]

    def med(ws: list[Any], attr: str) -> float:
        return median([getattr(w, attr) for w in ws])

    hb_r, cm_r = median(ratio(hb_w, "heartbeat")), median(ratio(cm_w, "commit"))
    if not all(e.rate > 0 for e in auth_w["echo"]):
        # a floor of nothing is no floor: say so rather than divide by it
        raise RuntimeError(
            "the TLS handshake floor completed no handshake in a window "
            f"({[e.rate for e in auth_w['echo']]}/s, errors "
            f"{[e.errors for e in auth_w['echo']]})"
        )
    auth_r = {
        m: median([a.rate / e.rate for a, e in zip(auth_w[m], auth_w["echo"], strict=True)])
        for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
    }
    calm_p99, storm_p99 = storm["calm"]["p99_ms"], storm["storm"]["p99_ms"]
    storm_ratio = storm_p99 / calm_p99
    members = storm["members"]
    n_storms = len(storm["storms"])
    authenticated = sum(x["authenticated"] for x in storm["storms"])
    attempted = STORM_CLIENTS * len(storm["storms"])
    hb_errors = {k: v for k, v in storm["errors"].items() if k != "0"}

    def hb_cell(ws: list[hb.Window]) -> str:
        return (f"{fmt_rate(med(ws, 'rate'))}/s, p50 {fmt_ms(1e3 * med(ws, 'p50'))}, "
                f"p99 {fmt_ms(1e3 * med(ws, 'p99'))}")  # fmt: skip

    def cm_cell(ws: list[CommitWindow]) -> str:
        return f"{fmt_rate(med(ws, 'rate'))}/s, p50 {fmt_ms(med(ws, 'p50'))}, " \
               f"p99 {fmt_ms(med(ws, 'p99'))}"  # fmt: skip

    def auth_cell(ws: list[AuthWindow]) -> str:
        return (f"{fmt_rate(med(ws, 'rate'))}/s, p50 {fmt_ms(1e3 * med(ws, 'p50'))}, "
                f"p99 {fmt_ms(1e3 * med(ws, 'p99'))}")  # fmt: skip

    def cpu(a: list[Any], b: list[Any], attr: str = "server_cpu") -> str:
        return f"{fmt_pct(med(a, attr))} / {fmt_pct(med(b, attr))}"

    hb_errs = _errors_of(*(w.errors for ws in hb_w.values() for w in ws))
    cm_errs = _errors_of(*(w.errors for ws in cm_w.values() for w in ws))
    verified = sum(w.verified for ws in cm_w.values() for w in ws)
    committers = sum(w.committers for ws in cm_w.values() for w in ws)
    rows = [
        [
            f"(a) Heartbeats/s, {hb_groups * hb.MEMBERS_PER_GROUP} members over {hb_groups} "
            "connections",
            f"PLAINTEXT: {hb_cell(hb_w['PLAINTEXT'])}",
            f"SASL_SSL: {hb_cell(hb_w['SASL_SSL'])}",
            fmt_pct(hb_r),
            cpu(hb_w["PLAINTEXT"], hb_w["SASL_SSL"]),
            hb_errs,
        ],
        [
            f"(b) OffsetCommits/s, {commit_groups * COMMIT_MEMBERS} committers over "
            f"{commit_groups} connections",
            f"PLAINTEXT: {cm_cell(cm_w['PLAINTEXT'])}",
            f"SASL_SSL: {cm_cell(cm_w['SASL_SSL'])}",
            fmt_pct(cm_r),
            cpu(cm_w["PLAINTEXT"], cm_w["SASL_SSL"], "node_cpu"),
            f"{cm_errs}; read back {verified}/{committers}",
        ],
    ]
    for m in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        rows.append(
            [
                f"(c) {m} authentications/s (TLS + SASL), {connectors} connectors",
                f"bare TLS handshakes, asyncio echo: {auth_cell(auth_w['echo'])}",
                f"node SASL_SSL: {auth_cell(auth_w[m])}",
                fmt_pct(auth_r[m]),
                cpu(auth_w["echo"], auth_w[m]),
                _errors_of(*(w.errors for w in auth_w[m] + auth_w["echo"])),
            ]
        )
    rows.append(
        [
            f"(d) Heartbeat p99, {members} SASL_SSL members, {n_storms} "
            f"storm{'s' if n_storms != 1 else ''} of {STORM_CLIENTS} {STORM_MECHANISM} clients",
            f"without storm: p99 {fmt_ms(calm_p99)} (p50 {fmt_ms(storm['calm']['p50_ms'])}, "
            f"{storm['calm']['heartbeats']:,} heartbeats)",
            f"during storms: p99 {fmt_ms(storm_p99)} (p50 {fmt_ms(storm['storm']['p50_ms'])}, "
            f"max {fmt_ms(storm['storm']['max_ms'])}, {storm['storm']['heartbeats']:,} "
            "heartbeats)",
            f"{storm_ratio:.1f}x",
            f"{fmt_pct(storm['node_cpu']['calm'])} / {fmt_pct(storm['node_cpu']['storm'])}",
            f"{authenticated}/{attempted} authenticated; heartbeat errors {_errors_of(hb_errors)}",
        ]
    )
    bound = "under" if storm_p99 <= STORM_BOUND_MS else "OVER"
    verdict = (
        f"SASL_SSL/PLAINTEXT: heartbeats {fmt_pct(hb_r)}, commits {fmt_pct(cm_r)}; "
        f"SCRAM-SHA-256 {fmt_rate(med(auth_w['SCRAM-SHA-256'], 'rate'))} auth/s = "
        f"{fmt_pct(auth_r['SCRAM-SHA-256'])} and SCRAM-SHA-512 "
        f"{fmt_rate(med(auth_w['SCRAM-SHA-512'], 'rate'))} auth/s = "
        f"{fmt_pct(auth_r['SCRAM-SHA-512'])} of bare TLS handshakes "
        f"({fmt_rate(med(auth_w['echo'], 'rate'))}/s); storm: member Heartbeat p99 "
        f"{fmt_ms(storm_p99)} vs {fmt_ms(calm_p99)} without = {storm_ratio:.1f}x, {bound} the "
        f"{STORM_BOUND_MS:.0f} ms bound, {authenticated}/{attempted} authenticated, "
        f"{'no heartbeat errors' if not hb_errors else 'heartbeat errors ' + str(hb_errors)}"
        f"{'' if alive else '; node DEAD'}"
    )
    notes = [
        f"{hb_rounds} heartbeat round(s) and {commit_rounds} commit round(s) of {window:g} s "
        f"windows after {warmup:g} s warm-up, PLAINTEXT and SASL_SSL alternating; "
        f"{auth_rounds} round(s) of authentication windows (echo floor, SCRAM-SHA-256, "
        "SCRAM-SHA-512, order flipped each round); medians shown. Node CPU: cores (100% = one) "
        "over the window, all its threads (the security threads included).",
        "per round, heartbeats/s SASL_SSL / PLAINTEXT (machine busy, cores of 2, the node "
        "and its load generators included): "
        + ", ".join(
            f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} ({fmt_pct(a.rate / b.rate)}; "
            f"{a.machine_cpu:.2f} / {b.machine_cpu:.2f})"
            for a, b in zip(hb_w["SASL_SSL"], hb_w["PLAINTEXT"], strict=True)
        ),
        "per round, commits/s SASL_SSL / PLAINTEXT: "
        + ", ".join(
            f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} ({fmt_pct(a.rate / b.rate)})"
            for a, b in zip(cm_w["SASL_SSL"], cm_w["PLAINTEXT"], strict=True)
        ),
        "authentication windows, medians in cores, server / load generators / the rest (kernel "
        "networking: connect, TLS, close for every authentication; other processes) "
        f"(machine {os.cpu_count()} cores): "
        + ", ".join(
            f"{t} {med(ws, 'server_cpu'):.2f} / {med(ws, 'loadgen_cpu'):.2f} / "
            f"{max(0.0, med(ws, 'machine_cpu') - med(ws, 'server_cpu') - med(ws, 'loadgen_cpu')):.2f}"  # noqa: E501
            for t, ws in auth_w.items()
        )
        + ": the connectors share the machine with the server; per round, auth/s "
        "SCRAM-SHA-256 / SCRAM-SHA-512 / echo: "
        + ", ".join(
            f"{fmt_rate(a.rate)} / {fmt_rate(b.rate)} / {fmt_rate(e.rate)}"
            for a, b, e in zip(
                auth_w["SCRAM-SHA-256"], auth_w["SCRAM-SHA-512"], auth_w["echo"], strict=True
            )
        )
        + ".",
        "storms: "
        + "; ".join(
            f"{x['authenticated']}/{STORM_CLIENTS} authenticated in {1e3 * (x['end'] - x['start']):.0f} ms"  # noqa: E501
            + (f" (failed: {x['failed']})" if x["failed"] else "")
            for x in storm["storms"]
        )
        + f"; members: {storm_groups} groups of {MEMBERS_PER_GROUP} static members, one "
        f"SASL_SSL connection per group, session timeout {MEMBER_SESSION_MS // 1000} s. "
        "The node's event-loop lag, read every 50 ms by its listener (/metrics), over the "
        f"whole storm run (formation, baseline, storms, gaps): {lag_text(storm['loop_lag'])}.",
        "Audit lines (one per authentication) are off in this run, as every figure runs its "
        "node at COORD_LOG_LEVEL=WARNING.",
    ]
    return Figure(
        key="security",
        title="8. Security: SASL_SSL vs PLAINTEXT, SCRAM authentications/s, an authentication "
        "storm",
        goal="issue 12 asks for the ratios (heartbeats/s and commits/s over SASL_SSL vs "
        "PLAINTEXT, SCRAM authentications/s) and sets one bound: an authenticated member's "
        f"Heartbeat p99 ≤ {STORM_BOUND_MS:.0f} ms while {STORM_CLIENTS} clients authenticate "
        "at once",
        columns=[
            "measure",
            "baseline (same run)",
            "secured",
            "ratio",
            "server CPU (baseline / secured)",
            "errors",
        ],
        rows=rows,
        verdict=verdict,
        method=_method(),
        notes=notes,
        seconds=time.time() - started,
    )
