"""What the console's group and groups pages show of a group's lag, ownership and upstream side,
shaped for the templates: a value not known reads "unknown" (never a negative number), the lag
history becomes an inline SVG sparkline drawn here (the page refreshes by replacing <main>, so
nothing is drawn by script), and a caller held to its ACLs sees only the partitions of topics
it may DESCRIBE, as the offsets table does."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

UNKNOWN = "unknown"
SPARK_WIDTH, SPARK_HEIGHT, SPARK_PAD = 240, 48, 4
MAX_SPLIT_SHOWN = 20  # groups named in the groups page's split banner


def duration(ms: float) -> str:
    s = max(0.0, ms / 1000)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} days"


def amount(value: Any) -> str:
    """An offset or a lag: the number, or "unknown" for None or a negative value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return UNKNOWN
    return str(value)


def since(ms: int | None) -> str:
    """A commit's age in ms as "12 s ago"."""
    if ms is None or ms < 0:
        return UNKNOWN
    return f"{duration(ms)} ago"


def offset_source(o: dict[str, Any]) -> str:
    source = o.get("source")
    if source == "upstream":
        return f"imported from {o.get('origin') or 'the upstream'}"
    if source == "reset":
        return "reset by an admin"
    if source == "member":
        return "committed by a member"
    return str(source) if source else "—"


def lag_rows(g: dict[str, Any]) -> list[dict[str, Any]]:
    """The lag table's rows; a commit's age falls back on the offsets' own timestamps (known
    without the upstream)."""
    lag = g.get("lag") or {}
    committed_at = {
        (o["topic"], o["partition"]): o.get("commit_timestamp_ms") for o in g.get("offsets", ())
    }
    now_ms = time.time() * 1000
    rows = []
    for p in lag.get("partitions", ()):
        age = p.get("since_commit_ms")
        if age is None:
            at = committed_at.get((p["topic"], p["partition"]))
            age = int(now_ms - at) if at is not None and at > 0 else None
        rows.append({
            "key": f"{p['topic']}-{p['partition']}", "topic": p["topic"],
            "partition": p["partition"], "committed": amount(p.get("committed_offset")),
            "log_end": amount(p.get("log_end_offset")), "lag": amount(p.get("lag")),
            "since": since(age),
        })  # fmt: skip
    return rows


def sparkline(history: list[dict[str, Any]]) -> dict[str, Any]:
    """The lag history as an SVG polyline, x by time over the samples' span, y from 0 to the
    highest lag; one sample is a dot, none a note."""
    width, height, pad = SPARK_WIDTH, SPARK_HEIGHT, SPARK_PAD
    pts = [(int(h["at_ms"]), max(0, int(h["lag"]))) for h in history if h.get("lag") is not None]
    out: dict[str, Any] = {"count": len(pts), "width": width, "height": height, "points": "",
                           "dot": None, "max": 0, "latest": None, "span": ""}  # fmt: skip
    if not pts:
        return out
    first, last = pts[0][0], pts[-1][0]
    top = max(v for _, v in pts) or 1
    span = max(last - first, 1)

    def xy(at: int, v: int) -> tuple[float, float]:
        x = pad + (width - 2 * pad) * ((at - first) / span if len(pts) > 1 else 1.0)
        return round(x, 1), round(height - pad - (height - 2 * pad) * v / top, 1)

    coords = [xy(at, v) for at, v in pts]
    out.update(
        points=" ".join(f"{x},{y}" for x, y in coords),
        dot=coords[-1],
        max=max(v for _, v in pts),
        span=duration(last - first) if len(pts) > 1 else "",
        latest=pts[-1][1],
    )
    return out


def restrict(g: dict[str, Any], allowed: Callable[[str], bool]) -> None:
    """A caller held to its ACLs: partitions of topics it may not DESCRIBE are left out of the
    lag table and the ownership lists; a total that counted them is recomputed from the rows
    left, and the history (of the whole group) is not shown."""
    g["offsets"] = [o for o in g.get("offsets", ()) if allowed(o["topic"])]
    lag = g.get("lag")
    if lag:
        rows = lag.get("partitions", [])
        kept = [p for p in rows if allowed(p["topic"])]
        if len(kept) != len(rows):
            lags = [p["lag"] for p in kept if isinstance(p.get("lag"), int)]
            lag.update(partitions=kept, history=[], hidden=True)
            lag.update(total=sum(lags) if lags else None, max=max(lags) if lags else None)
    own = g.get("ownership")
    if own:
        for key in ("unowned", "doubly_owned"):
            own[key] = [p for p in own.get(key, ()) if allowed(p["topic"])]
        own["unknown_topics"] = [t for t in own.get("unknown_topics", ()) if allowed(t)]


def split_groups(groups: list[dict[str, Any]]) -> dict[str, Any]:
    """The groups page's banner: groups with consumers on the upstream's own coordinator."""
    split = [g for g in groups if (g.get("upstream_members") or 0) > 0]
    return {
        "count": len(split),
        "members": sum(g["upstream_members"] for g in split),
        "shown": [g["group_id"] for g in split[:MAX_SPLIT_SHOWN]],
    }
