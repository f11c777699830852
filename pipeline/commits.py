"""Offset commits in one pass over Arrow batches: per batch and partition, partial aggregates.

The audit's commit figures (activity per partition, offsets checked for monotonicity, the
violations) are a sequence per committed partition in log order. A log exported by
`coordinator export` is in log order within each file, so each Arrow batch of commits holds a
contiguous stretch of the log: a batch is decoded, its rows sorted by partition and position
(numpy, on the batch alone), and each partition's stretch folded into one *partial* row with
its sums and the first and last commit of the stretch. The partials are then grouped by
partition and each joined to the one before it in the partition's log order (the delta
across a batch boundary) and summed (`combine_partials`, numpy again).
That holds when a partition's stretches do not interleave: the join reports when they do
(or when a partition's commits sit in two log partitions, or a group's metadata does), and
the audit then runs the window over every commit instead.

The generation as of each commit (the group's latest metadata record before it in the log)
is found per batch too, from the groups' metadata intervals handed to every task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from app.group.records import OFFSET_SOURCE_RESET, OFFSET_SOURCE_UPSTREAM
from pipeline.decode import _be, _binary_parts, _signed, offset_value_layout

SOURCE_RESET = OFFSET_SOURCE_RESET  # an admin's reset (OffsetValue v1)
SOURCE_UPSTREAM = OFFSET_SOURCE_UPSTREAM  # imported from the upstream cluster (gateway, v2)
# the sources that may move a position whatever the generation: never a violation
ANY_GENERATION = (SOURCE_RESET, SOURCE_UPSTREAM)
# commits folded at once when the workers read the row groups: a worker holds the row groups,
# keys and values and a dozen numpy columns of them, and larger folds leave fewer partials to
# join; this one keeps a worker's memory bounded (the measurements: bench/README_audit.md)
FOLD_ROWS = 400_000
# the input columns the fold reads (scan.READ_COLUMNS' names)
FOLD_COLUMNS = ["partition", "offset", "record_type", "key", "value"]

# the groups' metadata intervals each task receives: [m_from, m_to) of one group's log
INTERVAL_SCHEMA = pa.schema(
    [
        ("m_group", pa.string()),
        ("m_part", pa.int32()),
        ("m_from", pa.int64()),
        ("m_to", pa.int64()),
        ("m_gen", pa.int32()),
        ("m_inc", pa.int32()),
    ]
)

PARTIAL_SCHEMA = pa.schema(
    [
        ("group_id", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("log_partition", pa.int32()),
        # over the decoded commits (`ok`) of the stretch, in log order
        ("decoded", pa.int64()),
        ("first_lo", pa.int64()),
        ("last_lo", pa.int64()),
        ("first_tombstone", pa.bool_()),
        ("first_co", pa.int64()),
        ("first_source", pa.int16()),
        ("first_gen", pa.int32()),
        ("first_inc", pa.int32()),
        ("last_tombstone", pa.bool_()),
        ("last_co", pa.int64()),
        ("last_gen", pa.int32()),
        ("last_inc", pa.int32()),
        ("live_first_lo", pa.int64()),
        ("live_first_co", pa.int64()),
        ("live_last_lo", pa.int64()),
        ("live_last_co", pa.int64()),
        ("commits", pa.int64()),
        ("member_commits", pa.int64()),
        ("resets", pa.int64()),
        ("imports", pa.int64()),
        ("tombstones", pa.int64()),
        ("first_commit_ms", pa.int64()),
        ("last_commit_ms", pa.int64()),
        ("min_offset", pa.int64()),
        ("max_offset", pa.int64()),
        ("offset_advance", pa.int64()),
        ("offset_rewound", pa.int64()),
        ("regressions", pa.int64()),
        ("violations", pa.int64()),
        ("checked", pa.int64()),
        ("generations", pa.list_(pa.int32())),
        # records of the stretch an invariant reports: violations and records that do not decode
        ("flagged", pa.int64()),
    ]
)


def _generations(
    intervals: pa.Table, groups: pa.Array, seg: Any, parts: Any, offsets: Any
) -> tuple[Any, Any]:
    """(generation, incarnation) of each commit (`groups[seg]` its group): the group's metadata
    interval holding it in the same log partition, (-1, 0) where none does."""
    import numpy as np

    n = len(offsets)
    gen = np.full(n, -1, np.int32)
    inc = np.zeros(n, np.int32)
    if not n or not intervals.num_rows:
        return gen, inc
    # groups as codes into the intervals' (sorted) group column; -1: no metadata at all
    g_int = np.asarray(intervals["g"])
    code = pc.index_in(groups, value_set=intervals["m_group"].unique()).fill_null(-1)
    code = np.asarray(code, np.int64)[seg]
    m_from = np.asarray(intervals["m_from"])
    # each commit's interval: the last one of its group starting before it (m_from < offset,
    # as the join's condition), found by binary search on (group, offset) packed in one int64
    # when the offsets fit in 40 bits (and by a merge sort otherwise)
    if (
        offsets.min() >= 0
        and m_from.min() >= 0
        and max(int(offsets.max()), int(m_from.max())) < 1 << 40
        and len(g_int) < 1 << 22
    ):
        hit = np.searchsorted((g_int << 40) | m_from, (code << 40) | offsets, side="left") - 1
    else:
        keys_g = np.concatenate([code, g_int])
        keys_o = np.concatenate([offsets, m_from])
        # at an equal offset the commit sorts first, so it sees the interval before
        is_interval = np.concatenate([np.zeros(n, np.int8), np.ones(len(g_int), np.int8)])
        order = np.lexsort((is_interval, keys_o, keys_g))
        marks = np.where(is_interval[order] == 1, order - n, -1)
        last = np.maximum.accumulate(marks)
        pos = np.empty(n + len(g_int), np.int64)
        pos[order] = last
        hit = pos[:n]
    ok = (hit >= 0) & (code >= 0)
    idx = np.where(ok, hit, 0)
    ok &= g_int[idx] == code
    m_to = np.asarray(intervals["m_to"].fill_null(np.iinfo(np.int64).max))
    ok &= offsets < m_to[idx]
    ok &= np.asarray(intervals["m_part"])[idx] == parts
    gen = np.where(ok, np.asarray(intervals["m_gen"])[idx], -1).astype(np.int32)
    inc = np.where(ok, np.asarray(intervals["m_inc"])[idx], 0).astype(np.int32)
    return gen, inc


def prepare_intervals(intervals: pa.Table) -> pa.Table:
    """INTERVAL_SCHEMA rows sorted by group and offset, with `g`, the group's code."""
    t = intervals.sort_by([("m_group", "ascending"), ("m_from", "ascending")])
    groups = t["m_group"].unique()
    return t.append_column("g", pc.index_in(t["m_group"], value_set=groups).cast(pa.int64()))


def partial_batch(
    batch: pa.RecordBatch, intervals: pa.Table, record_type: int | None = None
) -> pa.RecordBatch:
    """OFFSET_COMMIT rows (OFFSET_INPUT_COLUMNS) -> PARTIAL_SCHEMA rows, one per committed
    partition and log partition in the batch. With `record_type` the batch holds records of
    any type (and a `record_type` column) and only that type's are folded: the others are
    left out of the sort, where filtering them first copied every key and value (a third of
    the fold's time, for the few records in a thousand that are not commits)."""
    import numpy as np

    n = batch.num_rows
    # the partition's name is the key after its version: its layout is checked and decoded
    # once per distinct name (the same checks as decode.decode_offset_batch)
    # (the whole keys are encoded, then their names: slicing every key first copied them all)
    encoded = batch.column("key").fill_null(b"").dictionary_encode()
    by_name = pc.binary_slice(encoded.dictionary, 2, 1 << 30).dictionary_encode()
    code = np.asarray(by_name.indices, np.int64)[np.asarray(encoded.indices, np.int64)]
    name_ok, gid, topic, partition = _names(by_name.dictionary)
    key_ok = name_ok[code]
    vd, vs, vl, live = _binary_parts(batch.column("value"))
    vok, _, mlen, source, _ = offset_value_layout(vd, vs, vl, live)
    tomb = ~live
    ok = key_ok & (tomb | vok)
    co = _signed(_be(vd, vs + 2, 8, vok), 8)
    ts = _signed(_be(vd, vs + 18 + mlen, 8, vok), 8)

    lp = np.asarray(batch.column("log_partition").fill_null(-1), np.int64)
    lo = np.asarray(batch.column("log_offset").fill_null(-1), np.int64)
    # each stretch: one name in one log partition, records that do not decode first (they
    # only count as flagged), then log order
    if len(by_name.dictionary) < 1 << 30 and (n == 0 or (lp.min() >= -1 and lp.max() < 1 << 31)):
        # (name, log partition, decoded) packed in one int64: a sort on two keys, not four
        order = np.lexsort((lo, (code << 33) | ((lp + 1) << 1) | ok))
    else:
        order = np.lexsort((lo, ok, lp, code))
    if record_type is not None:
        kept = np.asarray(pc.equal(batch.column("record_type"), record_type).fill_null(False))
        order = order[kept[order]]
        n = len(order)
        if not n:  # none of that type
            return pa.RecordBatch.from_pylist([], schema=PARTIAL_SCHEMA)
    code, lp, lo, ok, tomb = code[order], lp[order], lo[order], ok[order], tomb[order]
    co, ts, source = co[order], ts[order], source[order]
    live = ~tomb
    starts = np.flatnonzero(np.concatenate([[True], (code[1:] != code[:-1]) | (lp[1:] != lp[:-1])]))
    seg = np.repeat(np.arange(len(starts), dtype=np.int64), np.diff(np.append(starts, n)))

    # the names of the stretches
    names = pa.array(code[starts])
    gid, topic, partition = gid.take(names), topic.take(names), partition.take(names)
    gen, inc = _generations(intervals, gid, seg, lp, lo)

    nseg = len(starts)

    def per_seg(values: Any, where: Any) -> Any:
        return np.add.reduceat(np.where(where, values, 0).astype(np.int64), starts)

    # the commit before each one in its stretch: only a decoded one follows a decoded one
    same = np.concatenate([[False], (seg[1:] == seg[:-1]) & ok[:-1]]) & ok
    both_live = same & np.concatenate([[False], live[:-1]]) & live
    prev_co = np.concatenate([[0], co[:-1]])
    delta = np.where(both_live, co - prev_co, 0)
    regression = both_live & (delta < 0)
    prev_gen = np.concatenate([[0], gen[:-1]])
    prev_inc = np.concatenate([[0], inc[:-1]])
    free = np.isin(source, ANY_GENERATION)  # a reset or an import: any generation's
    violation = ok & regression & ~free & (gen == prev_gen) & (inc == prev_inc)

    okl = ok & live
    big = np.iinfo(np.int64).max
    small = np.iinfo(np.int64).min

    def first_where(mask: Any) -> Any:  # index of the first row of each stretch in mask
        idx = np.where(mask, np.arange(n), n)
        return np.minimum.reduceat(idx, starts) if n else idx

    def last_where(mask: Any) -> Any:
        idx = np.where(mask, np.arange(n), -1)
        return np.maximum.reduceat(idx, starts) if n else idx

    f_ok, l_ok = first_where(ok), last_where(ok)
    f_live, l_live = first_where(okl), last_where(okl)
    has_ok, has_live = f_ok < n, f_live < n

    def at(values: Any, idx: Any, has: Any, typ: pa.DataType) -> pa.Array:
        return pa.array(values[np.where(has, idx, 0)], typ, mask=~has)

    def reduce(fn: Any, values: Any, mask: Any, empty: int) -> pa.Array:
        r = fn.reduceat(np.where(mask, values, empty), starts)
        return pa.array(r, pa.int64(), mask=r == empty)

    # the distinct generations of each stretch's decoded commits
    gens = _distinct_per_segment(seg[ok], gen[ok], nseg)
    arrays = {
        "group_id": gid,
        "topic": topic,
        "partition": partition,
        "log_partition": pa.array(lp[starts], pa.int32()),
        "decoded": per_seg(1, ok),
        "first_lo": at(lo, f_ok, has_ok, pa.int64()),
        "last_lo": at(lo, l_ok, has_ok, pa.int64()),
        "first_tombstone": at(tomb, f_ok, has_ok, pa.bool_()),
        "first_co": at(co, f_ok, has_ok & live[np.where(has_ok, f_ok, 0)], pa.int64()),
        "first_source": at(source, f_ok, has_ok, pa.int16()),
        "first_gen": at(gen, f_ok, has_ok, pa.int32()),
        "first_inc": at(inc, f_ok, has_ok, pa.int32()),
        "last_tombstone": at(tomb, l_ok, has_ok, pa.bool_()),
        "last_co": at(co, l_ok, has_ok & live[np.where(has_ok, l_ok, 0)], pa.int64()),
        "last_gen": at(gen, l_ok, has_ok, pa.int32()),
        "last_inc": at(inc, l_ok, has_ok, pa.int32()),
        "live_first_lo": at(lo, f_live, has_live, pa.int64()),
        "live_first_co": at(co, f_live, has_live, pa.int64()),
        "live_last_lo": at(lo, l_live, has_live, pa.int64()),
        "live_last_co": at(co, l_live, has_live, pa.int64()),
        "commits": per_seg(1, okl),
        "member_commits": per_seg(1, okl & ~free),
        "resets": per_seg(1, okl & (source == SOURCE_RESET)),
        "imports": per_seg(1, okl & (source == SOURCE_UPSTREAM)),
        "tombstones": per_seg(1, ok & tomb),
        "first_commit_ms": reduce(np.minimum, ts, okl, big),
        "last_commit_ms": reduce(np.maximum, ts, okl, small),
        "min_offset": reduce(np.minimum, co, okl, big),
        "max_offset": reduce(np.maximum, co, okl, small),
        "offset_advance": per_seg(delta, delta > 0),
        "offset_rewound": per_seg(-delta, delta < 0),
        "regressions": per_seg(1, regression),
        "violations": per_seg(1, violation),
        "checked": per_seg(1, both_live),
        "generations": gens,
        "flagged": per_seg(1, violation | ~ok),
    }
    return pa.RecordBatch.from_arrays(
        [
            a if isinstance(a, pa.Array) else pa.array(a, f.type)
            for a, f in zip((arrays[f.name] for f in PARTIAL_SCHEMA), PARTIAL_SCHEMA, strict=True)
        ],
        schema=PARTIAL_SCHEMA,
    )


def _distinct_per_segment(seg: Any, values: Any, nseg: int) -> pa.ListArray:
    """The distinct int32 `values` of each of `nseg` segments (`seg`: each value's), sorted."""
    import numpy as np

    pairs = (seg.astype(np.int64) << 32) | (values.astype(np.int64) & 0xFFFFFFFF)
    if len(pairs) > 1:  # runs of one pair (a stretch's commits in one generation) once each
        pairs = pairs[np.concatenate([[True], pairs[1:] != pairs[:-1]])]
    pairs = np.unique(pairs)
    counts = np.bincount(pairs >> 32, minlength=nseg)
    return pa.ListArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(counts)]), pa.int32()),
        pa.array((pairs & 0xFFFFFFFF).astype(np.uint32).view(np.int32), pa.int32()),
    )


def _names(names: pa.Array) -> tuple[Any, pa.Array, pa.Array, pa.Array]:
    """Per distinct key after its version (str group | str topic | i32 partition): whether it
    decodes, and its group_id, topic and partition (empty names and partition 0 where it does
    not, as decode.decode_offset_batch)."""
    import numpy as np

    from pipeline.decode import _strings

    d, s, length, _ = _binary_parts(names)
    ok = length >= 4
    glen = _signed(_be(d, s, 4, ok), 4).astype(np.int64)
    ok &= (glen >= 0) & (length >= 8 + glen)
    glen = np.where(ok, glen, 0)
    tlen = _signed(_be(d, s + 4 + glen, 4, ok), 4).astype(np.int64)
    ok &= (tlen >= 0) & (length >= 12 + glen + tlen)
    tlen = np.where(ok, tlen, 0)
    glen = np.where(ok, glen, 0)
    partition = _signed(_be(d, s + 8 + glen + tlen, 4, ok), 4)
    return (
        ok,
        _strings(d, s + 4, glen),
        _strings(d, s + 8 + glen, tlen),
        pa.array(partition, pa.int32()),
    )


# per committed partition, its stretches joined (`combine_partials`): audit.py's per-partition
# columns, and `_interleaved`, the stretches that could not be joined end to end
COMBINED_SCHEMA = pa.schema(
    [
        *(PARTIAL_SCHEMA.field(name) for name in ("group_id", "topic", "partition")),
        *(
            (name, pa.int64())
            for name in [
                "commits",
                "member_commits",
                "resets",
                "imports",
                "tombstones",
                "first_commit_ms",
                "last_commit_ms",
                "first_offset",
                "last_offset",
                "min_offset",
                "max_offset",
                "offset_advance",
                "offset_rewound",
                "regressions",
                "violations",
                "generations",
                "_decoded",
                "_checked",
                "_flagged",
                "_interleaved",
            ]
        ),
    ]
)

_PARTITION_KEYS = ["group_id", "topic", "partition"]
# the commit_activity table: the partitions with a decoded commit, without the counts
ACTIVITY_SCHEMA = pa.schema([f for f in COMBINED_SCHEMA if not f.name.startswith("_")])
# what a task of `combine_partials` returns when it writes commit_activity itself
COMBINE_COUNTS_SCHEMA = pa.schema(
    [("_flagged", pa.int64()), ("_checked", pa.int64()), ("_interleaved", pa.int64())]
)


def _join_stretches(
    partials: list[pa.RecordBatch], keys: list[str]
) -> tuple[dict[str, Any], Any, pa.Table, Any]:
    """Partials (PARTIAL_SCHEMA, in any order) joined per `keys` in log order (`first_lo`):
    the sums, and the step from each stretch's last decoded commit to the next one's first.
    Returns PARTIAL_SCHEMA's columns per key, the stretches of each key that start before the
    one before them ends or sit in another log partition (then the sums are not the
    sequence's), the partials sorted, and each one's key. At least one partial has a row."""
    import numpy as np

    t = pa.Table.from_batches(partials, PARTIAL_SCHEMA)
    order = pc.sort_indices(
        t, [(k, "ascending") for k in [*keys, "first_lo"]], null_placement="at_start"
    )
    t = t.take(order).combine_chunks()
    cols = {name: t.column(name).combine_chunks() for name in t.column_names}
    n = t.num_rows
    new = np.zeros(n, bool)
    new[0] = True
    for k in keys:
        col = cols[k]
        new[1:] |= np.asarray(pc.fill_null(pc.not_equal(col.slice(1), col.slice(0, n - 1)), True))
    starts = np.flatnonzero(new)
    seg = np.cumsum(new) - 1
    nseg = len(starts)
    idx = np.arange(n)

    def arr(name: str, fill: Any = 0) -> Any:
        return np.asarray(cols[name].fill_null(fill))

    def valid(name: str) -> Any:
        return np.asarray(cols[name].is_valid())

    has = valid("first_lo")  # null first_lo (no decoded commit) sorts first in its partition
    # each partial with the one before it in its partition, both with a decoded commit
    pair = np.zeros(n, bool)
    pair[1:] = (seg[1:] == seg[:-1]) & has[1:] & has[:-1]

    def prev(values: Any) -> Any:
        return np.concatenate([values[:1], values[:-1]])

    lp = arr("log_partition", -1)
    apart = pair & ((prev(arr("last_lo")) >= arr("first_lo")) | (prev(lp) != lp))
    interleaved = np.bincount(seg[apart], minlength=nseg)

    last_tomb = arr("last_tombstone", True)
    first_tomb = arr("first_tombstone", True)
    step = pair & ~prev(last_tomb) & ~first_tomb
    delta = np.where(step, arr("first_co") - prev(arr("last_co")), 0)
    step_violation = (
        step
        & (delta < 0)
        & ~np.isin(arr("first_source"), ANY_GENERATION)
        & (arr("first_gen") == prev(arr("last_gen")))
        & (arr("first_inc") == prev(arr("last_inc")))
    )

    def total(name: str, extra: Any = 0) -> Any:
        return np.add.reduceat(arr(name) + extra, starts)

    def pick(mask: Any, last: bool) -> tuple[Any, Any]:  # row of each segment, whether any
        if last:
            at = np.maximum.reduceat(np.where(mask, idx, -1), starts)
            return np.maximum(at, 0), at >= 0
        at = np.minimum.reduceat(np.where(mask, idx, n), starts)
        return np.minimum(at, n - 1), at < n

    def take(name: str, rows: Any, ok: Any) -> pa.Array:
        col = cols[name].take(pa.array(rows))
        return pc.if_else(pa.array(ok), col, pa.nulls(nseg, col.type))

    def extreme(name: str, fn: Any, empty: int) -> pa.Array:
        r = fn.reduceat(np.where(valid(name), arr(name), empty), starts)
        return pa.array(r, pa.int64(), mask=r == empty)

    # the distinct generations of each partition's partials
    gens = cols["generations"]
    lengths = np.asarray(pc.list_value_length(gens).fill_null(0))
    flat = np.asarray(pc.list_flatten(gens), np.int64)
    joined: dict[str, Any] = {
        **{k: cols[k].take(pa.array(starts)) for k in [*keys, "log_partition"]},
        "decoded": total("decoded"),
        "commits": total("commits"),
        "member_commits": total("member_commits"),
        "resets": total("resets"),
        "imports": total("imports"),
        "tombstones": total("tombstones"),
        "offset_advance": total("offset_advance", np.where(delta > 0, delta, 0)),
        "offset_rewound": total("offset_rewound", np.where(delta < 0, -delta, 0)),
        "regressions": total("regressions", delta < 0),
        "violations": total("violations", step_violation),
        "checked": total("checked", step),
        "flagged": total("flagged", step_violation),
        "first_commit_ms": extreme("first_commit_ms", np.minimum, np.iinfo(np.int64).max),
        "last_commit_ms": extreme("last_commit_ms", np.maximum, np.iinfo(np.int64).min),
        "min_offset": extreme("min_offset", np.minimum, np.iinfo(np.int64).max),
        "max_offset": extreme("max_offset", np.maximum, np.iinfo(np.int64).min),
        "generations": _distinct_per_segment(np.repeat(seg, lengths), flat, nseg),
    }
    # the rest are a stretch's first or last (live) commit: the value of its row
    rows_of = {
        "first": pick(has, last=False),
        "last": pick(has, last=True),
        "live_first": pick(valid("live_first_lo"), last=False),
        "live_last": pick(valid("live_last_lo"), last=True),
    }
    for name in PARTIAL_SCHEMA.names:
        if name not in joined:
            joined[name] = take(name, *rows_of[name.rsplit("_", 1)[0]])
    return joined, interleaved, t, seg


def merge_partials(partials: list[pa.RecordBatch]) -> pa.RecordBatch:
    """A task's partials (PARTIAL_SCHEMA, of any of its batches, in any order) joined per
    committed partition and log partition as `combine_partials` joins them, so that it joins
    one partial per partition and task instead of one per batch (161k partials -> 105k at 10M
    records). A partition whose stretches interleave here keeps them all, so that the
    combine finds them; merged stretches only grow, so no interleaving is hidden."""
    partials = [p for p in partials if p.num_rows] or partials[:1]
    if len(partials) == 1:  # one batch: one partial per partition already
        return partials[0]
    joined, interleaved, t, seg = _join_stretches(partials, [*_PARTITION_KEYS, "log_partition"])
    apart = interleaved > 0
    merged = pa.Table.from_arrays(
        [pa.array(joined[f.name], f.type) for f in PARTIAL_SCHEMA], schema=PARTIAL_SCHEMA
    ).filter(pa.array(~apart))
    kept = t.filter(pa.array(apart[seg]))
    return pa.concat_tables([merged, kept]).combine_chunks().to_batches()[0]


def combine_partials(
    batches: Iterator[pa.RecordBatch], tables_dir: str | None = None
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: the partials of a set of committed partitions (all of each one's,
    whichever task folded them) -> COMBINED_SCHEMA, one row per partition. With `tables_dir`
    (a local directory: pipeline/written.py) the task writes its rows of commit_activity
    there itself and returns one COMBINE_COUNTS_SCHEMA row."""
    import numpy as np

    partials = [b for b in batches if b.num_rows]
    combined = pa.RecordBatch.from_pylist([], schema=COMBINED_SCHEMA)
    if partials:
        joined, interleaved, _, _ = _join_stretches(partials, _PARTITION_KEYS)
        joined |= {
            "first_offset": joined["live_first_co"],
            "last_offset": joined["live_last_co"],
            "generations": pc.list_value_length(joined["generations"]).cast(pa.int64()),
            "_decoded": joined["decoded"],
            "_checked": joined["checked"],
            "_flagged": joined["flagged"],
            "_interleaved": interleaved.astype(np.int64),
        }
        combined = pa.RecordBatch.from_arrays(
            [pa.array(joined[f.name], f.type) for f in COMBINED_SCHEMA], schema=COMBINED_SCHEMA
        )
    if tables_dir is None:
        if combined.num_rows:
            yield combined
        return
    from pipeline.written import TaskTables

    files = TaskTables(tables_dir, {"commit_activity": ACTIVITY_SCHEMA})
    try:
        activity = combined.filter(pc.greater(combined["_decoded"], 0))
        files.write("commit_activity", activity.select(ACTIVITY_SCHEMA.names))
    finally:
        files.close()
    yield pa.RecordBatch.from_pylist(
        [{name: int(pc.sum(combined[name]).as_py() or 0) for name in COMBINE_COUNTS_SCHEMA.names}],
        schema=COMBINE_COUNTS_SCHEMA,
    )


def partial_batches(
    batches: Iterator[pa.RecordBatch], intervals: pa.Table, merge: bool = True
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body: OFFSET_COMMIT rows -> PARTIAL_SCHEMA rows (`merge`: joined per
    partition over the task's batches)."""
    partials = [partial_batch(batch, intervals) for batch in batches if batch.num_rows]
    if merge and partials:
        yield merge_partials(partials)
    else:
        yield from partials


def partial_row_groups(
    tasks: Iterator[pa.RecordBatch],
    intervals: pa.Table,
    record_type: int,
    fold_rows: int = FOLD_ROWS,
    merge: bool = True,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow body over scan.TASK_SCHEMA rows: each row group's offset commits, read by
    the worker itself (handing the keys and values from the JVM's scan to Python through
    Arrow costs more than the whole fold) -> partials."""
    from pipeline.scan import read_row_groups

    # consecutive row groups of a task are one stretch of the log: folded together up to
    # `fold_rows`, a partition's commits make fewer partials for the JVM to join
    pending: list[pa.Table] = []
    folded: list[pa.RecordBatch] = []
    rows = 0
    for t, _ in read_row_groups(tasks, FOLD_COLUMNS):
        pending.append(t)
        rows += t.num_rows
        if rows >= fold_rows:
            folded.append(_fold(pending, intervals, record_type))
            pending, rows = [], 0
    if rows:
        folded.append(_fold(pending, intervals, record_type))
    if merge and folded:
        yield merge_partials(folded)
    else:
        yield from folded


def _fold(tables: list[pa.Table], intervals: pa.Table, record_type: int) -> pa.RecordBatch:
    batch = pa.concat_tables(tables).combine_chunks().to_batches()[0]
    return partial_batch(batch, intervals, record_type)
