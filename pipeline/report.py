"""report.md and PNG plots from the audit tables.

Everything shown is aggregated by Spark first (time buckets, histograms, top-N lists): the
driver only collects a few hundred rows, whatever the size of the log. The sections of
report.md are pipeline/report_sections.py, the plots pipeline/plots.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.plots import write_plots
from pipeline.report_format import bucket_width_ms
from pipeline.report_sections import TOP, ReportData, report_lines


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

    out = Path(out_dir)
    t = _Tables(spark, out_dir)
    g, r, fenced, s, c, inputs = _headlines(t)
    lo, hi, top_groups = _plots(out, t, g, r)
    reasons, forced, scale, busiest, rewound = _listed(t)
    data = ReportData(
        result=result,
        inputs=inputs,
        generations=g,
        replacements=r,
        fenced=fenced,
        scale_ups=s,
        commits=c,
        lo=lo,
        hi=hi,
        reasons=reasons,
        top_groups=top_groups,
        forced=forced,
        latest_scale_ups=scale,
        busiest=busiest,
        rewound=rewound,
    )
    path = out / "report.md"
    path.write_text("\n".join(report_lines(data)))
    return path


def _headlines(t: _Tables) -> tuple[Any, Any, dict[str, int], Any, Any, list[Any]]:
    """One aggregate row each of generations, static_replacements, scale_ups and
    commit_activity; the fenced instances per kind; input_summary's rows."""
    from pyspark.sql import functions as F

    gens, repl = t("generations"), t("static_replacements")
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
            F.sum("imports").alias("imports"),
            F.sum("offset_advance").alias("advance"),
            F.sum("regressions").alias("regressions"),
        )
        .collect()[0]
    )
    inputs = t("input_summary").collect()
    return g, r, fenced, s, c, inputs


def _plots(out: Path, t: _Tables, g: Any, r: Any) -> tuple[int, int, list[Any]]:
    """The plots, from time buckets and histograms; the time shown (`g` and `r`: the headline
    rows of generations and static_replacements) and the groups that spent the most time
    rebalancing."""
    from pyspark.sql import functions as F

    gens, repl = t("generations"), t("static_replacements")
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
    return lo, hi, top_groups


def _listed(t: _Tables) -> tuple[list[Any], ...]:
    """The report's top-N lists: rebalance reasons, forced rebalances, scale-ups, the busiest
    and the rewound partitions."""
    from pyspark.sql import functions as F

    reasons = t("rebalance_reasons").orderBy(F.desc("rebalances")).limit(TOP).collect()
    forced = t("forced_rebalances").orderBy(F.desc("rebalance_ended_ms")).limit(TOP).collect()
    scale = t("scale_ups").orderBy(F.desc("registered_ms")).limit(TOP).collect()
    busiest = t("commit_activity").orderBy(F.desc("commits")).limit(TOP).collect()
    rewound = (
        t("commit_activity")
        .filter(F.col("regressions") > 0)
        .orderBy(F.desc("regressions"))
        .limit(TOP)
        .collect()
    )
    return reasons, forced, scale, busiest, rewound
