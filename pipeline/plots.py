"""The report's PNG plots, from rows Spark aggregated (time buckets, histograms, top-N)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.report_format import fmt_ms


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
    ax.set_title(f"Rebalances over time, by reason ({fmt_ms(width)} buckets)")
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
