"""report.md and PNG plots from the audit tables.

Everything shown is aggregated by Spark first (time buckets, histograms, top-N lists): the
driver only collects a few hundred rows, whatever the size of the log.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

MAX_BUCKETS = 60
TOP = 15

_NICE_MS = [
    1_000,
    2_000,
    5_000,
    10_000,
    15_000,
    30_000,
    60_000,
    120_000,
    300_000,
    600_000,
    900_000,
    1_800_000,
    3_600_000,
    7_200_000,
    21_600_000,
    43_200_000,
    86_400_000,
]


def bucket_width_ms(span_ms: int, buckets: int = MAX_BUCKETS) -> int:
    """The smallest "nice" width that cuts `span_ms` into at most `buckets` buckets."""
    want = max(span_ms / buckets, 1)
    for w in _NICE_MS:
        if w >= want:
            return w
    return int(math.ceil(want / 86_400_000) * 86_400_000)


def _fmt_ms(ms: Any) -> str:
    if ms is None:
        return "-"
    ms = float(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    if ms < 7_200_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:.1f} h"


def _ts(ms: Any) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _n(x: Any) -> str:
    return "-" if x is None else f"{int(x):,}"


def _md_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


class _Tables:
    def __init__(self, spark: Any, out: str) -> None:
        self.spark = spark
        self.out = out.rstrip("/")

    def __call__(self, name: str) -> Any:
        return self.spark.read.parquet(f"{self.out}/tables/{name}")


def write_report(spark: Any, out_dir: str, result: Any) -> Path:
    """OUT/report.md and OUT/*.png. Needs a local (or mounted) OUT directory."""
    import matplotlib

    matplotlib.use("Agg")
    from pyspark.sql import functions as F

    out = Path(out_dir)
    t = _Tables(spark, out_dir)
    gens, repl = t("generations"), t("static_replacements")

    # ---- headline numbers (one aggregate row each) ----------------------------------------
    g = gens.agg(
        F.count("*").alias("rebalances"),
        F.countDistinct("group_id").alias("groups"),
        F.sum(F.col("empty").cast("int")).alias("emptied"),
        F.sum("duration_ms").alias("time_ms"),
        F.expr("percentile_approx(duration_ms, 0.5)").alias("p50"),
        F.expr("percentile_approx(duration_ms, 0.95)").alias("p95"),
        F.max("duration_ms").alias("max_ms"),
        F.sum("partitions_moved").alias("moved"),
        F.sum("partitions_assigned").alias("assigned"),
        F.sum(F.col("forced").cast("int")).alias("forced"),
        F.min("rebalance_ended_ms").alias("t0"),
        F.max("rebalance_ended_ms").alias("t1"),
        F.sum(F.col("rebalance_started_ms").isNull().cast("int")).alias("no_start"),
    ).collect()[0]
    r = repl.agg(
        F.count("*").alias("absorbed"),
        F.sum(F.col("leader_replaced").cast("int")).alias("leader"),
        F.sum((F.col("skip_assignment") == F.lit(True)).cast("int")).alias("skip_yes"),
        F.sum((F.col("skip_assignment") == F.lit(False)).cast("int")).alias("skip_no"),
        F.sum((F.col("leader_replaced") & F.col("skip_assignment").isNull()).cast("int")).alias(
            "skip_unknown"
        ),
        F.min("replaced_at_ms").alias("t0"),
        F.max("replaced_at_ms").alias("t1"),
    ).collect()[0]
    fenced = {
        row["kind"]: row["count"] for row in t("fenced_instances").groupBy("kind").count().collect()
    }
    s = (
        t("scale_ups")
        .agg(
            F.count("*").alias("n"),
            F.sum("registered").alias("registered"),
            F.sum("joined").alias("joined"),
            F.sum("rebalances").alias("rebalances"),
            F.sum((F.col("outcome") == "completed").cast("int")).alias("completed"),
        )
        .collect()[0]
    )
    c = (
        t("commit_activity")
        .agg(
            F.sum("commits").alias("commits"),
            F.count("*").alias("partitions"),
            F.countDistinct("group_id").alias("groups"),
            F.sum("resets").alias("resets"),
            F.sum("offset_advance").alias("advance"),
            F.sum("regressions").alias("regressions"),
        )
        .collect()[0]
    )
    inputs = t("input_summary").collect()

    # ---- plots ------------------------------------------------------------------------------
    lo = min(x for x in (g["t0"], r["t0"]) if x is not None) if g["t0"] or r["t0"] else 0
    hi = max(x for x in (g["t1"], r["t1"]) if x is not None) if g["t1"] or r["t1"] else 0
    width = bucket_width_ms(max(hi - lo, 1))

    def bucket(col: str) -> Any:
        return F.floor((F.col(col) - F.lit(lo)) / width).cast("long")

    reason_buckets = (
        gens.groupBy(
            bucket("rebalance_ended_ms").alias("b"),
            F.when(F.col("forced"), "forced (admin)")
            .otherwise(F.coalesce("rebalance_reason", F.lit("(not recorded)")))
            .alias("reason"),
        )
        .count()
        .collect()
    )
    absorbed_buckets = {
        row["b"]: row["count"]
        for row in repl.groupBy(bucket("replaced_at_ms").alias("b")).count().collect()
    }
    top_groups = (
        t("group_summary")
        .filter(F.col("time_in_rebalance_ms") > 0)
        .orderBy(F.desc("time_in_rebalance_ms"), "group_id")
        .limit(20)
        .collect()
    )
    moved_hist = (
        # a group's first generation has nothing to move from: leave it out
        gens.filter(~F.col("empty") & F.col("prev_generation").isNotNull())
        .groupBy("partitions_moved")
        .count()
        .orderBy("partitions_moved")
        .limit(500)
        .collect()
    )
    write_plots(out, reason_buckets, absorbed_buckets, lo, width, top_groups, moved_hist)

    # ---- report.md ----------------------------------------------------------------------------
    inv = result.invariants
    bad = [i for i in inv if not i["ok"]]
    lines = ["# Rebalance audit", ""]
    log_rows = sum(x["records"] for x in inputs if not x["in_history"])
    hist_rows = sum(x["records"] for x in inputs if x["in_history"])
    lines += [
        f"Input `{result.input_dir}`: **{result.input_rows:,} records** "
        f"({log_rows:,} in the log, {hist_rows:,} in the compaction history), "
        f"{_n(g['groups'])} groups with generations, "
        f"from {_ts(lo)} to {_ts(hi)} UTC. Audit took {result.seconds:.1f} s.",
        "",
    ]
    if bad:
        total = sum(int(i["violations"]) for i in bad)
        lines += [
            f"**Verdict: {len(bad)} invariant(s) violated, {total:,} violation(s)** — "
            "see [Invariants](#invariants).",
            "",
        ]
    else:
        lines += [f"**Verdict: all {len(inv)} invariants hold.**", ""]
    rebalances = int(g["rebalances"] or 0)
    absorbed = int(r["absorbed"] or 0)
    lines += [
        "## Overview",
        "",
        _md_table(
            ["what", "value"],
            [
                ["rebalances (generations written)", _n(rebalances)],
                ["… that emptied the group", _n(g["emptied"])],
                ["… forced by an admin", _n(g["forced"])],
                ["time groups spent rebalancing (sum)", _fmt_ms(g["time_ms"])],
                [
                    "rebalance duration median / p95 / max",
                    f"{_fmt_ms(g['p50'])} / {_fmt_ms(g['p95'])} / {_fmt_ms(g['max_ms'])}",
                ],
                [
                    "partitions moved (owner changed vs previous generation)",
                    f"{_n(g['moved'])} of {_n(g['assigned'])} assigned",
                ],
                ["static restarts absorbed without a rebalance", _n(absorbed)],
                [
                    "… of which the leader (SkipAssignment yes / no / unknown)",
                    f"{_n(r['leader'])} ({_n(r['skip_yes'])} / {_n(r['skip_no'])} / "
                    f"{_n(r['skip_unknown'])})",
                ],
                [
                    "member ids fenced by a static replacement (in place / across a rebalance)",
                    f"{_n(fenced.get('replaced_in_place', 0))} / "
                    f"{_n(fenced.get('replaced_across_rebalance', 0))}",
                ],
                ["pre-registered scale-ups (completed)", f"{_n(s['n'])} ({_n(s['completed'])})"],
                [
                    "… instances registered / joined / rebalances taken",
                    f"{_n(s['registered'])} / {_n(s['joined'])} / {_n(s['rebalances'])}",
                ],
                [
                    "offset commits (partitions, groups)",
                    f"{_n(c['commits'])} ({_n(c['partitions'])}, {_n(c['groups'])})",
                ],
                ["offset resets; offsets advanced by", f"{_n(c['resets'])}; {_n(c['advance'])}"],
            ],
        ),
        "",
    ]
    if rebalances:
        share = absorbed / (absorbed + rebalances)
        lines += [
            f"Static membership absorbed **{absorbed:,}** restarts that would each have cost a "
            f"rebalance without it: {share:.0%} of all membership changes left every partition "
            "where it was.",
            "",
        ]
    if g["no_start"]:
        lines += [
            f"{_n(g['no_start'])} generation(s) come from records older than value v1 (no "
            "rebalance start): their duration is unknown and left out of the sums.",
            "",
        ]
    lines += [
        "## Plots",
        "",
        "![rebalances over time](rebalances_over_time.png)",
        "",
        "![time in rebalance per group](time_in_rebalance_per_group.png)",
        "",
        "![partitions moved per rebalance](partitions_moved_per_rebalance.png)",
        "",
        "![static restarts absorbed](static_restarts_absorbed.png)",
        "",
        "## Invariants",
        "",
        _md_table(
            ["invariant", "checked", "violations", "status"],
            [
                [
                    f"`{i['invariant']}`: {i['description']}",
                    _n(i["checked"]),
                    _n(i["violations"]),
                    "ok" if i["ok"] else "**VIOLATED**",
                ]
                for i in inv
            ],
        ),
        "",
    ]
    for i in bad:
        lines += [
            f"Examples of `{i['invariant']}` ({int(i['violations']):,} in all, table "
            "`invariant_violations`):",
            "",
        ]
        lines += [f"- {e}" for e in i["examples"]] + [""]

    reasons = t("rebalance_reasons").orderBy(F.desc("rebalances")).limit(TOP).collect()
    lines += [
        "## Why groups rebalanced",
        "",
        _md_table(
            [
                "reason",
                "rebalances",
                "groups",
                "time in rebalance",
                "median duration",
                "partitions moved",
                "emptied the group",
            ],
            [
                [
                    x["reason"],
                    _n(x["rebalances"]),
                    _n(x["groups"]),
                    _fmt_ms(x["total_duration_ms"]),
                    _fmt_ms(x["median_duration_ms"]),
                    _n(x["partitions_moved"]),
                    _n(x["emptied_group"]),
                ]
                for x in reasons
            ],
        ),
        "",
        f"## Groups that spent the most time rebalancing (top {TOP})",
        "",
        _md_table(
            [
                "group",
                "rebalances",
                "time in rebalance",
                "longest",
                "partitions moved",
                "static restarts absorbed",
                "forced",
                "scale-ups",
                "commits",
                "violations",
            ],
            [
                [
                    x["group_id"],
                    _n(x["rebalances"]),
                    _fmt_ms(x["time_in_rebalance_ms"]),
                    _fmt_ms(x["longest_rebalance_ms"]),
                    _n(x["partitions_moved"]),
                    _n(x["static_restarts_absorbed"]),
                    _n(x["forced_rebalances"]),
                    _n(x["scale_ups"]),
                    _n(x["commits"]),
                    _n(x["violations"]),
                ]
                for x in top_groups[:TOP]
            ],
        ),
        "",
    ]
    forced = t("forced_rebalances").orderBy(F.desc("rebalance_ended_ms")).limit(TOP).collect()
    lines += [f"## Forced rebalances (latest {TOP} of {_n(g['forced'])})", ""]
    lines += [
        _md_table(
            ["group", "generation", "reason", "ended", "duration", "members", "moved"],
            [
                [
                    x["group_id"],
                    x["generation"],
                    x["reason"],
                    _ts(x["rebalance_ended_ms"]),
                    _fmt_ms(x["duration_ms"]),
                    x["members"],
                    x["partitions_moved"],
                ]
                for x in forced
            ],
        )
        if forced
        else "None."
    ]
    scale = t("scale_ups").orderBy(F.desc("registered_ms")).limit(TOP).collect()
    lines += ["", f"## Pre-registered scale-ups (latest {TOP} of {_n(s['n'])})", ""]
    lines += [
        _md_table(
            [
                "group",
                "registered",
                "instances",
                "joined",
                "dropped",
                "rebalances",
                "generations",
                "expansion took",
                "outcome",
            ],
            [
                [
                    x["group_id"],
                    _ts(x["registered_ms"]),
                    len(x["instances"]),
                    x["joined"],
                    ", ".join(x["dropped"]) or "-",
                    x["rebalances"],
                    ", ".join(str(v) for v in (x["generations"] or [])) or "-",
                    _fmt_ms(x["duration_ms"]),
                    x["outcome"],
                ]
                for x in scale
            ],
        )
        if scale
        else "None."
    ]
    busiest = t("commit_activity").orderBy(F.desc("commits")).limit(TOP).collect()
    rewound = (
        t("commit_activity")
        .filter(F.col("regressions") > 0)
        .orderBy(F.desc("regressions"))
        .limit(TOP)
        .collect()
    )
    commit_cols = [
        "group",
        "partition",
        "commits",
        "resets",
        "first → last offset",
        "advanced",
        "rewound",
        "regressions (violations)",
        "generations",
    ]

    def commit_row(x: Any) -> list[Any]:
        return [
            x["group_id"],
            f"{x['topic']}-{x['partition']}",
            _n(x["commits"]),
            _n(x["resets"]),
            f"{_n(x['first_offset'])} → {_n(x['last_offset'])}",
            _n(x["offset_advance"]),
            _n(x["offset_rewound"]),
            f"{_n(x['regressions'])} ({_n(x['violations'])})",
            _n(x["generations"]),
        ]

    lines += [
        "",
        f"## Commit activity: busiest partitions (top {TOP} of {_n(c['partitions'])})",
        "",
        _md_table(commit_cols, [commit_row(x) for x in busiest]) if busiest else "None.",
        "",
        "Partitions whose committed offset ever went backwards "
        f"({_n(c['regressions'])} regressions in all; resets and new generations allowed):",
        "",
        _md_table(commit_cols, [commit_row(x) for x in rewound]) if rewound else "None.",
        "",
        "## What the log can and cannot say",
        "",
        "- *Rebalance start and reason* come from GroupMetadataValue v1; *end* is the append "
        "time of the generation's first record (the leader's assignment made durable).",
        "- *SkipAssignment* is recorded since GroupMetadataValue v2 (set on the record that "
        "persists a static leader's replacement answered with SkipAssignment); older records "
        "count as unknown.",
        "- *Fenced instances* are the member ids a static replacement fenced, read from "
        "consecutive records of a group.instance.id. Requests refused with FENCED_INSTANCE_ID "
        "are not logged (the hot path writes nothing for them). A change of member id across a "
        "rebalance can also be a member that expired and rejoined before the next generation.",
        "- *Resets* are commits with OffsetValue v1 `source` = reset: generation -1, no member, "
        "group Empty (the admin API; Kafka's protocol cannot tell a group-less client from it).",
        "- A rebalance that never reached a durable generation (a failover or failed write in "
        "the middle) left no record and is not counted.",
        "",
        "## Tables",
        "",
        _md_table(
            ["table", "rows"],
            [[f"`tables/{k}`", _n(v)] for k, v in sorted(result.tables.items())],
        ),
        "",
    ]
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path


# ==== plots ==========================================================================


def _time_axis(lo: int, width: int, n: int) -> list[Any]:  # datetimes, for matplotlib
    return [datetime.fromtimestamp((lo + i * width) / 1000, UTC) for i in range(n)]


def _plot_rebalances(rows: list[Any], lo: int, width: int) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    if not rows:
        return _empty(fig, ax, "no rebalances in the log")
    totals: dict[str, int] = {}
    for x in rows:
        totals[x["reason"]] = totals.get(x["reason"], 0) + x["count"]
    keep = sorted(totals, key=lambda k: -totals[k])[:6]
    n = max(x["b"] for x in rows) + 1
    series = {k: [0] * n for k in [*keep, "other"]}
    for x in rows:
        series[x["reason"] if x["reason"] in keep else "other"][x["b"]] += x["count"]
    xs = _time_axis(lo, width, n)
    bottom = [0] * n
    bar_w = width / 86_400_000 * 0.9
    for name, ys in series.items():
        if any(ys):
            ax.bar(xs, ys, width=bar_w, bottom=bottom, label=name, align="edge")
            bottom = [a + b for a, b in zip(bottom, ys, strict=True)]
    ax.set_title(f"Rebalances over time, by reason ({_fmt_ms(width)} buckets)")
    ax.set_ylabel("rebalances")
    ax.legend(fontsize=8, loc="upper left")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def write_plots(
    out: Path,
    reason_buckets: list[Any],
    absorbed_buckets: dict[int, int],
    lo: int,
    width: int,
    top_groups: list[Any],
    moved_hist: list[Any],
) -> None:
    import matplotlib.pyplot as plt

    # group ids and rebalance reasons are client and operator text: "$" must not start TeX
    with plt.rc_context({"text.parse_math": False}):
        plots = {
            "rebalances_over_time.png": _plot_rebalances(reason_buckets, lo, width),
            "time_in_rebalance_per_group.png": _plot_time_per_group(top_groups),
            "partitions_moved_per_rebalance.png": _plot_moved(moved_hist),
            "static_restarts_absorbed.png": _plot_absorbed(
                reason_buckets, absorbed_buckets, lo, width
            ),
        }
        for name, fig in plots.items():
            fig.savefig(out / name, dpi=110)
            plt.close(fig)


def _plot_time_per_group(rows: list[Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, max(3.0, 0.35 * len(rows) + 1.2)))
    if not rows:
        return _empty(fig, ax, "no rebalance with a known duration")
    names = [x["group_id"] for x in rows][::-1]
    secs = [x["time_in_rebalance_ms"] / 1000 for x in rows][::-1]
    counts = [x["rebalances"] for x in rows][::-1]
    bars = ax.barh(names, secs, color="#c0504d")
    for b, k in zip(bars, counts, strict=True):
        ax.text(
            b.get_width(),
            b.get_y() + b.get_height() / 2,
            f" {k} rebalances",
            va="center",
            fontsize=8,
        )
    ax.set_xlabel("seconds spent rebalancing (sum over the log)")
    ax.set_title(f"Time in rebalance per group (top {len(rows)})")
    fig.tight_layout()
    return fig


def _plot_moved(rows: list[Any]) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    if not rows:
        return _empty(fig, ax, "no rebalance with members")
    xs = [x["partitions_moved"] for x in rows]
    ys = [x["count"] for x in rows]
    ax.bar(xs, ys, color="#4f81bd", width=0.8 if len(xs) < 200 else 1.0)
    total = sum(ys)
    zero = sum(y for x, y in zip(xs, ys, strict=True) if x == 0)
    ax.set_title(
        f"Partitions moved per rebalance ({total:,} rebalances after a group's first; "
        f"{zero / total:.0%} moved none)"
    )
    ax.set_xlabel("partitions whose owner changed vs the previous generation")
    ax.set_ylabel("rebalances")
    fig.tight_layout()
    return fig


def _plot_absorbed(rows: list[Any], absorbed: dict[int, int], lo: int, width: int) -> Any:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4.5))
    if not rows and not absorbed:
        return _empty(fig, ax, "no rebalance and no static restart")
    n = max([x["b"] for x in rows] + list(absorbed) + [0]) + 1
    reb = [0] * n
    for x in rows:
        reb[x["b"]] += x["count"]
    ab = [absorbed.get(i, 0) for i in range(n)]
    xs = _time_axis(lo, width, n)

    def cum(v: list[int]) -> list[int]:
        out, s = [], 0
        for y in v:
            s += y
            out.append(s)
        return out

    ax.plot(
        xs,
        cum(ab),
        label=f"static restarts absorbed, no rebalance ({sum(ab):,})",
        color="#9bbb59",
        lw=2.5,
    )
    ax.plot(xs, cum(reb), label=f"rebalances ({sum(reb):,})", color="#c0504d", lw=2)
    ax.fill_between(xs, cum(ab), alpha=0.2, color="#9bbb59")
    ax.set_title("Static restarts absorbed vs rebalances (cumulative)")
    ax.set_ylabel("count")
    ax.legend(loc="upper left")
    fig.autofmt_xdate()
    fig.tight_layout()
    return fig


def _empty(fig: Any, ax: Any, text: str) -> Any:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig
