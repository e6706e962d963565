"""Diff benchmark: trimerge vs the full-join diffs a user would otherwise write (polars, DuckDB).

TPC-H lineitem (SF1: 6M rows, 16 columns, key l_orderkey + l_linenumber) in a repository; a branch
updates 0.1% of rows (1-3 columns each), deletes 0.05% and inserts 0.05%. Measured side by side:

* same lineage: ``diff main feature`` right after the edits;
* across lineages: feature's changes replayed onto main (a merge), then both change again;
* the floor: reading just the changed rows from both sides;
* scaling: the same change count on a 4x larger table, and 10x the change count.

Run: ``python benchmarks/bench_diff.py`` (``--quick`` for a 1M-row smoke run). Exits non-zero if
any engine's result differs from trimerge's.
"""

from __future__ import annotations

import argparse
import sys

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from common import KEY, best_of, delete_predicate, fresh_dir, lineitem, print_table, random_edits  # noqa: F401

import trimerge
from trimerge.diff import diff


def build(name: str, table: pa.Table, fracs=(0.001, 0.0005, 0.0005), seed: int = 1):
    """A repository with ``table`` on main and random edits on branch feature."""
    path = fresh_dir(name)
    repo = trimerge.Repository.init(path)
    repo.create_table("lineitem", table, primary_key=KEY)
    repo.branches.create("feature", from_ref="main")
    upd, dele, ins = random_edits(table, np.random.default_rng(seed), *fracs)
    with repo.transaction(branch="feature", message="edits") as tx:
        tx.upsert("lineitem", upd)
        tx.delete_keys("lineitem", dele)
        tx.append("lineitem", ins)
    return repo, (upd.num_rows, dele.num_rows, ins.num_rows)


def merge_and_diverge(repo, table: pa.Table, seed: int = 2):
    """Replay feature's changes onto main (a merge: main's table stays on main's lineage), then
    change both branches again, so main and feature live on different Lance branches."""
    fb = repo.read("lineitem", ref="feature")
    d = diff("main", "feature", repo=repo).tables["lineitem"].rows()
    changed_keys = d.filter(pa.compute.not_equal(d.column("change"), "delete")).select(KEY)
    deleted_keys = d.filter(pa.compute.equal(d.column("change"), "delete")).select(KEY)
    upserts = pl.from_arrow(fb).join(pl.from_arrow(changed_keys), on=KEY, how="semi").to_arrow()
    with repo.transaction(branch="main", message="merge feature") as tx:
        tx.upsert("lineitem", upserts)
        tx.delete_keys("lineitem", deleted_keys)
        tx.add_parent(repo.resolve("feature").id)
    rng = np.random.default_rng(seed)
    for branch, offset in (("main", 10_000_000), ("feature", 20_000_000)):
        current = repo.read("lineitem", ref=branch)
        upd, dele, ins = random_edits(current, rng, 0.001, 0.0005, 0.0005, key_offset=offset)
        with repo.transaction(branch=branch, message="more edits") as tx:
            tx.upsert("lineitem", upd)
            tx.delete_keys("lineitem", dele)
            tx.append("lineitem", ins)


def trimerge_diff(repo_path, a="main", b="feature"):
    repo = trimerge.Repository.open(repo_path, read_only=True)
    return diff(a, b, repo=repo).tables["lineitem"].rows()


def polars_diff(repo, a="main", b="feature"):
    left = pl.from_arrow(repo.read("lineitem", ref=a)).with_columns(pl.lit(True).alias("_in_a"))
    right = pl.from_arrow(repo.read("lineitem", ref=b)).with_columns(pl.lit(True).alias("_in_b"))
    values = [c for c in left.columns if c not in KEY and not c.startswith("_in")]
    j = left.join(right, on=KEY, how="full", coalesce=True, suffix="_r")
    differs = pl.any_horizontal([~pl.col(c).eq_missing(pl.col(f"{c}_r")) for c in values])
    j = j.filter(pl.col("_in_a").is_null() | pl.col("_in_b").is_null() | differs)
    return j.select(*KEY, pl.when(pl.col("_in_a").is_null()).then(pl.lit("insert"))
                    .when(pl.col("_in_b").is_null()).then(pl.lit("delete")).otherwise(pl.lit("update")).alias("change"))


def duckdb_diff(repo, a="main", b="feature"):
    con = duckdb.connect()
    con.register("ta", repo.dataset("lineitem", ref=a))
    con.register("tb", repo.dataset("lineitem", ref=b))
    values = [c for c in repo.schema("lineitem", ref=a).names if c not in KEY]
    cond = " OR ".join(f"ta.{c} IS DISTINCT FROM tb.{c}" for c in values)
    sql = f"""
        SELECT coalesce(ta.l_orderkey, tb.l_orderkey) AS l_orderkey,
               coalesce(ta.l_linenumber, tb.l_linenumber) AS l_linenumber,
               CASE WHEN ta.l_orderkey IS NULL THEN 'insert' WHEN tb.l_orderkey IS NULL THEN 'delete'
                    ELSE 'update' END AS change
        FROM ta FULL OUTER JOIN tb ON ta.l_orderkey = tb.l_orderkey AND ta.l_linenumber = tb.l_linenumber
        WHERE ta.l_orderkey IS NULL OR tb.l_orderkey IS NULL OR {cond}"""
    return con.execute(sql).to_arrow_table()


def floor(repo, rows: pa.Table, a="main", b="feature"):
    """Read exactly the changed rows of both sides (by key, from pre-computed row ids), as fast as
    pylance allows: ids sorted and read in 1,024-row slices on four threads (what the engine does)."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = []
    for ref in (a, b):
        ds = repo.dataset("lineitem", ref=ref)
        keyed = pl.from_arrow(ds.to_table(columns=KEY, with_row_id=True))
        ids = keyed.join(pl.from_arrow(rows.select(KEY)), on=KEY, how="semi")["_rowid"].sort().to_arrow()
        jobs += [(ds, ids.slice(i, 1024)) for i in range(0, len(ids), 1024)]

    def read():
        with ThreadPoolExecutor(4) as pool:
            return list(pool.map(lambda job: job[0]._take_rows(job[1]), jobs))

    return best_of(read)[0]


def keyset(t) -> set:
    t = t.to_arrow() if isinstance(t, pl.DataFrame) else t
    return set(zip(t.column("l_orderkey").to_pylist(), t.column("l_linenumber").to_pylist(), t.column("change").to_pylist()))


def compare(label: str, repo, repeat: int, with_peers: bool = True) -> list[dict]:
    t_ours, ours = best_of(lambda: trimerge_diff(repo.path), repeat)
    rows = [{"scenario": label, "engine": "trimerge", "seconds": t_ours, "rows": ours.num_rows}]
    ok = True
    if with_peers:
        t_pl, res_pl = best_of(lambda: polars_diff(repo), repeat)
        t_dd, res_dd = best_of(lambda: duckdb_diff(repo), repeat)
        expected = keyset(ours)
        for name, t, res in (("polars", t_pl, res_pl), ("duckdb", t_dd, res_dd)):
            same = keyset(res) == expected
            ok &= same
            rows.append({"scenario": label, "engine": name, "seconds": t, "rows": len(res), "same": same})
    rows.append({"scenario": label, "engine": "floor (read changed rows)", "seconds": floor(repo, ours)})
    if with_peers:
        best_peer = min(t_pl, t_dd)
        for r in rows:
            r["ratio"] = best_peer / r["seconds"]
    rows[0]["ok"] = ok
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1M rows, no scaling runs")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-scaling", action="store_true")
    args = ap.parse_args()

    table = lineitem(1)
    if args.quick:
        table = table.slice(0, 1_000_000)
    print(f"lineitem: {table.num_rows:,} rows, {table.num_columns} columns")
    repo, counts = build("diff-base", table)
    print(f"feature: {counts[0]} updated, {counts[1]} deleted, {counts[2]} inserted")
    results = compare("same lineage (0.1%)", repo, args.repeat)
    merge_and_diverge(repo, table)
    results += compare("across lineages", repo, args.repeat)
    print_table(results, ["scenario", "engine", "seconds", "ratio", "rows", "same"], )
    sys.stdout.flush()
    base_time = results[0]["seconds"]
    base_floor = results[3]["seconds"]
    if not (args.quick or args.no_scaling):
        n = table.num_rows
        big = pa.concat_tables([table] + [
            table.set_column(0, "l_orderkey", pa.compute.add(table.column(0), pa.scalar((i + 1) * 10 ** 8, pa.int64())))
            .cast(table.schema) for i in range(3)])
        big_repo, _ = build("diff-4x", big, fracs=(0.001 / 4, 0.0005 / 4, 0.0005 / 4))
        r = compare("4x table, same change count", big_repo, args.repeat, with_peers=False)
        r[0]["vs base"] = r[0]["seconds"] / base_time
        r[1]["vs base"] = r[1]["seconds"] / base_floor
        results += r
        del big, big_repo
        ten_repo, _ = build("diff-10x", table, fracs=(0.01, 0.005, 0.005))
        r = compare("10x change count", ten_repo, args.repeat, with_peers=False)
        r[0]["vs base"] = r[0]["seconds"] / base_time
        r[1]["vs base"] = r[1]["seconds"] / base_floor
        results += r
        print(f"(base table {n:,} rows)")
    print()
    print_table(results, ["scenario", "engine", "seconds", "ratio", "rows", "same", "vs base"])
    ok = all(r.get("same", True) for r in results)
    if not ok:
        print("RESULTS DIFFER", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
