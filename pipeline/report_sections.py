"""report.md's sections, each from the few rows the report gathered (`ReportData`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.report_format import fmt_ms, md_table, num, ts

TOP = 15


@dataclass
class ReportData:
    """What report.md shows, gathered by Spark: one aggregate row per table for the headline
    numbers, and a top-N list of rows per table for the rest."""

    result: Any  # the AuditResult
    inputs: list[Any]  # input_summary's rows
    generations: Any  # the headline row of generations
    replacements: Any  # of static_replacements
    fenced: dict[str, int]  # fenced_instances per kind
    scale_ups: Any  # of scale_ups
    commits: Any  # of commit_activity
    lo: int  # the first and last time shown
    hi: int
    reasons: list[Any]  # rebalance_reasons, most rebalances first
    top_groups: list[Any]  # group_summary, most time in rebalance first
    forced: list[Any]  # forced_rebalances, latest first
    latest_scale_ups: list[Any]
    busiest: list[Any]  # commit_activity, most commits first
    rewound: list[Any]  # commit_activity with regressions, most first


def report_lines(d: ReportData) -> list[str]:
    """report.md, line by line."""
    sections = (
        _verdict,
        _overview,
        _plots_and_invariants,
        _reasons_and_groups,
        _forced,
        _scale_ups,
        _commit_activity,
    )
    return [line for section in sections for line in section(d)]


def _verdict(d: ReportData) -> list[str]:
    """The title, what was read, and the verdict."""
    result, g, inputs = d.result, d.generations, d.inputs
    lo, hi = d.lo, d.hi
    inv = result.invariants
    bad = [i for i in inv if not i["ok"]]
    lines = ["# Rebalance audit", ""]
    log_rows = sum(x["records"] for x in inputs if not x["in_history"])
    hist_rows = sum(x["records"] for x in inputs if x["in_history"])
    lines += [
        f"Input `{result.input_dir}`: **{result.input_rows:,} records** "
        f"({log_rows:,} in the log, {hist_rows:,} in the compaction history), "
        f"{num(g['groups'])} groups with generations, "
        f"from {ts(lo)} to {ts(hi)} UTC. Audit took {result.seconds:.1f} s.",
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
    return lines


def _overview(d: ReportData) -> list[str]:
    """The headline numbers; the share of changes static membership absorbed."""
    g, r, fenced, s, c = d.generations, d.replacements, d.fenced, d.scale_ups, d.commits
    lines: list[str] = []
    rebalances = int(g["rebalances"] or 0)
    absorbed = int(r["absorbed"] or 0)
    lines += [
        "## Overview",
        "",
        md_table(
            ["what", "value"],
            [
                ["rebalances (generations written)", num(rebalances)],
                ["… that emptied the group", num(g["emptied"])],
                ["… forced by an admin", num(g["forced"])],
                ["time groups spent rebalancing (sum)", fmt_ms(g["time_ms"])],
                [
                    "rebalance duration median / p95 / max",
                    f"{fmt_ms(g['p50'])} / {fmt_ms(g['p95'])} / {fmt_ms(g['max_ms'])}",
                ],
                [
                    "partitions moved (owner changed vs previous generation)",
                    f"{num(g['moved'])} of {num(g['assigned'])} assigned",
                ],
                ["static restarts absorbed without a rebalance", num(absorbed)],
                [
                    "… of which the leader (SkipAssignment yes / no / unknown)",
                    f"{num(r['leader'])} ({num(r['skip_yes'])} / {num(r['skip_no'])} / "
                    f"{num(r['skip_unknown'])})",
                ],
                [
                    "member ids fenced by a static replacement (in place / across a rebalance)",
                    f"{num(fenced.get('replaced_in_place', 0))} / "
                    f"{num(fenced.get('replaced_across_rebalance', 0))}",
                ],
                ["pre-registered scale-ups (completed)", f"{num(s['n'])} ({num(s['completed'])})"],
                [
                    "… instances registered / joined / rebalances taken",
                    f"{num(s['registered'])} / {num(s['joined'])} / {num(s['rebalances'])}",
                ],
                [
                    "offset commits (partitions, groups)",
                    f"{num(c['commits'])} ({num(c['partitions'])}, {num(c['groups'])})",
                ],
                [
                    "offset resets / imports (gateway); offsets advanced by",
                    f"{num(c['resets'])} / {num(c['imports'])}; {num(c['advance'])}",
                ],
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
            f"{num(g['no_start'])} generation(s) come from records older than value v1 (no "
            "rebalance start): their duration is unknown and left out of the sums.",
            "",
        ]
    return lines


def _plots_and_invariants(d: ReportData) -> list[str]:
    """The plots, then every invariant and the examples of those violated."""
    inv = d.result.invariants
    bad = [i for i in inv if not i["ok"]]
    lines: list[str] = []
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
        md_table(
            ["invariant", "checked", "violations", "status"],
            [
                [
                    f"`{i['invariant']}`: {i['description']}",
                    num(i["checked"]),
                    num(i["violations"]),
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
    return lines


def _reasons_and_groups(d: ReportData) -> list[str]:
    """Rebalances per reason; the groups that spent the most time rebalancing."""
    reasons, top_groups = d.reasons, d.top_groups
    lines: list[str] = []
    lines += [
        "## Why groups rebalanced",
        "",
        md_table(
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
                    num(x["rebalances"]),
                    num(x["groups"]),
                    fmt_ms(x["total_duration_ms"]),
                    fmt_ms(x["median_duration_ms"]),
                    num(x["partitions_moved"]),
                    num(x["emptied_group"]),
                ]
                for x in reasons
            ],
        ),
        "",
        f"## Groups that spent the most time rebalancing (top {TOP})",
        "",
        md_table(
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
                    num(x["rebalances"]),
                    fmt_ms(x["time_in_rebalance_ms"]),
                    fmt_ms(x["longest_rebalance_ms"]),
                    num(x["partitions_moved"]),
                    num(x["static_restarts_absorbed"]),
                    num(x["forced_rebalances"]),
                    num(x["scale_ups"]),
                    num(x["commits"]),
                    num(x["violations"]),
                ]
                for x in top_groups[:TOP]
            ],
        ),
        "",
    ]
    return lines


def _forced(d: ReportData) -> list[str]:
    """The latest forced rebalances."""
    g, forced = d.generations, d.forced
    lines: list[str] = []
    lines += [f"## Forced rebalances (latest {TOP} of {num(g['forced'])})", ""]
    lines += [
        md_table(
            ["group", "generation", "reason", "ended", "duration", "members", "moved"],
            [
                [
                    x["group_id"],
                    x["generation"],
                    x["reason"],
                    ts(x["rebalance_ended_ms"]),
                    fmt_ms(x["duration_ms"]),
                    x["members"],
                    x["partitions_moved"],
                ]
                for x in forced
            ],
        )
        if forced
        else "None."
    ]
    return lines


def _scale_ups(d: ReportData) -> list[str]:
    """The latest pre-registered scale-ups."""
    s, scale = d.scale_ups, d.latest_scale_ups
    lines: list[str] = []
    lines += ["", f"## Pre-registered scale-ups (latest {TOP} of {num(s['n'])})", ""]
    lines += [
        md_table(
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
                    ts(x["registered_ms"]),
                    len(x["instances"]),
                    x["joined"],
                    ", ".join(x["dropped"]) or "-",
                    x["rebalances"],
                    ", ".join(str(v) for v in (x["generations"] or [])) or "-",
                    fmt_ms(x["duration_ms"]),
                    x["outcome"],
                ]
                for x in scale
            ],
        )
        if scale
        else "None."
    ]
    return lines


def _commit_activity(d: ReportData) -> list[str]:
    """The busiest partitions and those whose committed offset went backwards; what the log
    can and cannot say; the tables."""
    c, busiest, rewound, result = d.commits, d.busiest, d.rewound, d.result
    commit_cols = [
        "group",
        "partition",
        "commits",
        "resets",
        "imports",
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
            num(x["commits"]),
            num(x["resets"]),
            num(x["imports"]),
            f"{num(x['first_offset'])} → {num(x['last_offset'])}",
            num(x["offset_advance"]),
            num(x["offset_rewound"]),
            f"{num(x['regressions'])} ({num(x['violations'])})",
            num(x["generations"]),
        ]

    lines: list[str] = []
    lines += [
        "",
        f"## Commit activity: busiest partitions (top {TOP} of {num(c['partitions'])})",
        "",
        md_table(commit_cols, [commit_row(x) for x in busiest]) if busiest else "None.",
        "",
        "Partitions whose committed offset ever went backwards "
        f"({num(c['regressions'])} regressions in all; resets, imports and new generations "
        "allowed):",
        "",
        md_table(commit_cols, [commit_row(x) for x in rewound]) if rewound else "None.",
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
        "- *Imports* are commits with OffsetValue v2 `source` = upstream: positions taken from "
        "the upstream cluster's own committed offsets when the group moved in (gateway mode; "
        "`origin` names the upstream cluster). Like a reset, an import may move a position "
        "back in any generation.",
        "- A rebalance that never reached a durable generation (a failover or failed write in "
        "the middle) left no record and is not counted.",
        "",
        "## Tables",
        "",
        md_table(
            ["table", "rows"],
            [[f"`tables/{k}`", num(v)] for k, v in sorted(result.tables.items())],
        ),
        "",
    ]
    return lines
