"""Property: the diff between any two commits equals a full keyed comparison of both snapshots.

Random tables (nulls, strings, NaN floats, timestamps, lists, structs, single and composite keys)
and random edit scripts on two branches (inserts, deletes, updates of random columns, no-op
rewrites, key re-inserts, compaction, added columns, rows copied across branches through upserts)."""

from __future__ import annotations

import datetime as dt
import itertools
import os

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.diff import diff
from diffref import engine_rows, reference_diff

UTC = dt.timezone.utc
#: Random histories per run: 15 by default (about 13 s on 2 cores, 33 s at 30; tests/test_diff_differential.py
#: checks every plan against a brute-force diff on 20 more), 30 per unit of TRIMERGE_LONG_TESTS.
LONG = int(os.environ.get("TRIMERGE_LONG_TESTS", "0") or 0)
FULL_COMPARISON_EXAMPLES = 30 * LONG if LONG else 15
SCHEMA = pa.schema([
    ("k1", pa.int64()), ("k2", pa.string()),
    ("i", pa.int64()), ("s", pa.string()), ("f", pa.float64()),
    ("ts", pa.timestamp("us", tz="UTC")), ("l", pa.list_(pa.int64())),
    ("st", pa.struct([("a", pa.int64()), ("b", pa.string())])),
])
VALUE_COLUMNS = ["i", "s", "f", "ts", "l", "st"]

values = {
    "i": st.none() | st.integers(-5, 5),
    "s": st.none() | st.text(alphabet="abc", max_size=3),
    "f": st.none() | st.sampled_from([0.0, 1.5, -2.25, float("nan"), 1e300]),
    "ts": st.none() | st.datetimes(min_value=dt.datetime(2020, 1, 1), max_value=dt.datetime(2021, 1, 1),
                                   timezones=st.just(UTC)).map(lambda d: d.replace(microsecond=0)),
    "l": st.none() | st.lists(st.none() | st.integers(0, 3), max_size=3),
    "st": st.none() | st.fixed_dictionaries({"a": st.none() | st.integers(0, 2), "b": st.none() | st.text("xy", max_size=2)}),
}


def make_rows(draw, keys, composite):
    rows = []
    for k in keys:
        row = {"k1": k, "k2": f"g{k % 3}" if composite else "x"}
        for c in VALUE_COLUMNS:
            row[c] = draw(values[c])
        rows.append(row)
    return rows


def table_of(rows, schema):
    return pa.Table.from_pylist(rows, schema=schema)


def key_predicate(keys, composite):
    if composite:
        return " OR ".join(f"(k1 = {k} AND k2 = 'g{k % 3}')" for k in keys)
    return "k1 IN (" + ",".join(str(k) for k in keys) + ")"


def apply_random_op(draw, repo, branch, composite, next_key, deleted):
    current = repo.read("t", ref=branch)
    schema = current.schema
    live = sorted(current.column("k1").to_pylist())
    op = draw(st.sampled_from(["insert", "delete", "update", "noop", "reinsert", "compact", "addcol", "copy", "recreate"]))
    extra_cols = [c for c in schema.names if c not in SCHEMA.names]

    def full_rows(keys):
        rows = make_rows(draw, keys, composite)
        for r in rows:
            for c in extra_cols:
                r[c] = draw(st.none() | st.integers(0, 9))
        return rows

    if op == "insert":
        keys = list(range(next_key[0], next_key[0] + draw(st.integers(1, 4))))
        next_key[0] += len(keys)
        repo.append("t", table_of(full_rows(keys), schema), branch=branch)
    elif op == "delete" and live:
        keys = draw(st.lists(st.sampled_from(live), min_size=1, max_size=3, unique=True))
        repo.delete("t", key_predicate(keys, composite), branch=branch)
        deleted.update(keys)
    elif op == "update" and live:
        keys = draw(st.lists(st.sampled_from(live), min_size=1, max_size=4, unique=True))
        old = {r["k1"]: r for r in current.to_pylist()}
        rows = []
        for k in keys:
            r = dict(old[k])
            for c in draw(st.lists(st.sampled_from(VALUE_COLUMNS + extra_cols), min_size=1, max_size=3, unique=True)):
                r[c] = draw(values[c]) if c in values else draw(st.none() | st.integers(0, 9))
            rows.append(r)
        repo.upsert("t", table_of(rows, schema), branch=branch)
    elif op == "noop":
        repo.overwrite("t", current, branch=branch)  # same values, every row rewritten
    elif op == "reinsert" and deleted - set(live):
        k = draw(st.sampled_from(sorted(deleted - set(live))))
        repo.append("t", table_of(full_rows([k]), schema), branch=branch)
    elif op == "compact":
        repo.compact("t", branch=branch)
    elif op == "addcol" and len(extra_cols) < 1:
        repo.add_columns("t", pa.field(f"x_{branch.replace('/', '_')}", pa.int64()), branch=branch)
    elif op == "recreate":  # a new dataset under the same name: compared in full
        with repo.transaction(branch=branch) as tx:
            tx.drop_table("t")
            tx.create_table("t", current, primary_key=["k1", "k2"])
    elif op == "copy":
        other = "main" if branch != "main" else "feature"
        theirs = repo.read("t", ref=other)
        if theirs.schema.names == schema.names and theirs.num_rows:
            picked = draw(st.lists(st.integers(0, theirs.num_rows - 1), min_size=1, max_size=3, unique=True))
            repo.upsert("t", theirs.take(picked), branch=branch)


def check_row_ids(repo, td, a, b):
    """The row ids the diff carries (used by merges to rewrite rows) point at the rows with those keys."""
    rows = td.rows_with_row_ids()
    for side, ref, ids in (("before", a, "_before_rowid"), ("after", b, "_after_rowid")):
        present = rows.filter(pa.compute.is_valid(rows.column(ids)))
        if not present.num_rows:
            continue
        got = repo.dataset("t", ref=ref)._take_rows(present.column(ids).to_pylist(), columns=["k1", "k2"])
        assert got.to_pylist() == present.select(["k1", "k2"]).to_pylist(), side


@pytest.mark.slow
@settings(max_examples=FULL_COMPARISON_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), composite=st.booleans(), n_main=st.integers(0, 4), n_feature=st.integers(1, 5))
def test_diff_matches_full_comparison(tmp_path_factory, data, composite, n_main, n_feature):
    draw = data.draw
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("r") / "repo")
    base_keys = list(range(draw(st.integers(0, 12))))
    # Several appends: several fragments.
    chunks = [base_keys[i:i + 4] for i in range(0, len(base_keys), 4)] or [[]]
    repo.create_table("t", table_of(make_rows(draw, chunks[0], composite), SCHEMA), primary_key=["k1", "k2"])
    for chunk in chunks[1:]:
        repo.append("t", table_of(make_rows(draw, chunk, composite), SCHEMA))
    repo.branches.create("feature", from_ref="main")
    next_key = [100]
    deleted: set[int] = set()
    order = draw(st.permutations(["main"] * n_main + ["feature"] * n_feature))
    for branch in order:
        apply_random_op(draw, repo, branch, composite, next_key, deleted)

    commits = {c.id: c for b in ("main", "feature") for c in repo.log(b)}
    with_t = [c for c in commits.values() if "t" in c.tables]
    pairs = [("main", "feature"), ("feature", "main")]
    pairs += [(a.id, b.id) for a, b in itertools.combinations(with_t, 2)][:12]
    for a, b in pairs:
        d = diff(a, b, repo=repo)
        td = d.tables["t"]
        got = engine_rows(td.rows(), ["k1", "k2"]) if td.status != "unchanged" else {}
        want = reference_diff(repo.read("t", ref=a), repo.read("t", ref=b), ["k1", "k2"])
        assert got == want, f"{td.plan} {a[:8]}..{b[:8]}"
        assert td.counts.rows_changed == len(want)
        if td.status != "unchanged":
            check_row_ids(repo, td, a, b)
        if (a, b) in pairs[:2] and td.status != "unchanged":
            # A budget of one byte spills every candidate to disk: same rows, streamed by bucket.
            spilled = diff(a, b, repo=repo, memory_budget=1).tables["t"]
            streamed = list(spilled.iter_batches(max_rows=3))
            got = engine_rows(pa.Table.from_batches(streamed, schema=td.rows().schema), ["k1", "k2"])
            assert got == want, f"spilled {spilled.plan}"
            assert spilled.counts.rows_changed == len(want)
            assert spilled.spilled == (spilled.plan.rows_planned > 0)
            check_row_ids(repo, spilled, a, b)
    three = diff("main...feature", repo=repo).tables["t"]
    base = repo.merge_base("main", "feature")
    want = reference_diff(repo.read("t", ref=base.id), repo.read("t", ref="feature"), ["k1", "k2"])
    got = engine_rows(three.rows(), ["k1", "k2"]) if three.status != "unchanged" else {}
    assert got == want
