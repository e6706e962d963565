"""A two-table referential check on a small merge (issue 51.3), side by side in one run.

``stocks`` has ``--rows`` rows (default 1M; id, symbol, px, note) over ``--companies`` symbols
(default 10k) of a ``companies`` table; the check on stocks is the issue's
``SELECT s.* FROM stocks s LEFT JOIN companies c USING (symbol) WHERE c.symbol IS NULL``. A branch
changes 0.1% of stocks (half re-pointed at other symbols, half new rows, a few of them naming
companies the same branch adds) and is merged into branches the check gates and into branches
no check gates; best of ``--repeat`` each, alternating so load on the shared machine hits both
alike. Two shapes, as ``bench_gates.py``: ``one-sided`` (only the source changed: the merge
itself is metadata) and ``two-sided`` (dest changed another 0.1% of stocks, in another column).
Also the check alone on a result (``check run``) and DuckDB's floor: the same join over the two
tables' Lance scans. A multi-table check runs on the whole result (a row's verdict depends on the
other table), so the cost it adds is about one scan of stocks.symbol joined with companies.

Run: ``python benchmarks/bench_checks_multitable.py`` (``--rows 4000000`` for the issue's size;
``--quick``: 200k rows). Not part of CI.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

from common import best_of, fresh_dir, print_table

KNOWN = "SELECT s.* FROM stocks s LEFT JOIN companies c USING (symbol) WHERE c.symbol IS NULL"


def symbols(ids) -> pa.Array:
    return pa.array([f"S{i:06d}" for i in ids], pa.string())


def bench(n: int, companies: int, repeat: int) -> list[dict]:
    import trimerge
    from trimerge.merge import merge

    rng = np.random.default_rng(3)
    repo = trimerge.Repository.init(str(fresh_dir(f"checks-multitable-{n}")))
    repo.create_table("companies", pa.table({"symbol": symbols(range(companies)),
                                             "name": pa.array([f"company {i}" for i in range(companies)])}), "symbol")
    sym = rng.integers(0, companies, n)
    stocks = pa.table({"id": np.arange(n, dtype=np.int64), "symbol": symbols(sym), "px": rng.random(n),
                       "note": pa.array([f"row {i}" for i in range(n)])})
    repo.create_table("stocks", stocks, "id")
    shapes, kinds = ("one", "two"), ("plain", "gated")
    gated = [f"gated_{s}_{i}" for s in shapes for i in range(repeat)]
    repo.checks.add("known_symbol", "stocks", KNOWN, gates=gated)
    change = max(2, n // 1000)
    picked = rng.choice(n, 2 * change, replace=False)
    src, dst = np.sort(picked[:change // 2]), np.sort(picked[change:])
    rows = stocks.take(pa.array(dst))
    dest_change = rows.set_column(3, "note", pa.array([v + "!" for v in rows.column("note").to_pylist()]))
    for s in shapes:
        for i in range(repeat):
            for kind in kinds:
                repo.branches.create(f"{kind}_{s}_{i}")
                if s == "two":
                    repo.upsert("stocks", dest_change, branch=f"{kind}_{s}_{i}")
    repo.branches.create("feat")
    moved = stocks.take(pa.array(src))
    moved = moved.set_column(1, "symbol", symbols(rng.integers(0, companies, len(src))))
    new_ids = np.arange(n, n + change - len(src), dtype=np.int64)
    listed = [companies + i for i in range(10)]  # new companies, added on the branch with their stocks
    new_sym = np.where(np.arange(len(new_ids)) < 10, companies + np.arange(len(new_ids)) % 10,
                       rng.integers(0, companies, len(new_ids)))
    added = pa.table({"id": new_ids, "symbol": symbols(new_sym), "px": rng.random(len(new_ids)),
                      "note": pa.array(["new"] * len(new_ids))})
    repo.upsert("companies", pa.table({"symbol": symbols(listed), "name": pa.array(["new"] * len(listed))}),
                branch="feat")
    repo.upsert("stocks", pa.concat_tables([moved, added]), branch="feat")

    times: dict[str, list[float]] = {}
    for s in shapes:
        for i in range(repeat):
            for kind in kinds:
                t0 = time.perf_counter()
                r = merge("feat", f"{kind}_{s}_{i}", repo=repo)
                times.setdefault(f"{kind}_{s}", []).append(time.perf_counter() - t0)
                assert r.status == "merged" and len(r.checks) == (0 if kind == "plain" else 1), (kind, r.checks)
                assert all(c.passed and c.scope == "whole result: stocks, companies" for c in r.checks), r.checks
    alone, results = best_of(lambda: repo.checks.run("gated_two_0"), repeat)
    assert [x.passed for x in results] == [True]
    floor = duck_join(repo, "gated_two_0", repeat)
    best = {k: min(v) for k, v in times.items()}
    out = []
    for s, what in (("two", "both sides changed 0.1%"), ("one", "only the source changed 0.1%")):
        plain, gated_s = best[f"plain_{s}"], best[f"gated_{s}"]
        out += [{"what": f"merge into {n:,} stocks, {what}, ungated", "seconds": plain, "ratio": 1.0},
                {"what": "  gated by the two-table referential check", "seconds": gated_s, "ratio": gated_s / plain}]
    plain = best["plain_two"]
    out += [{"what": "the check alone on a result (check run)", "seconds": alone, "ratio": alone / plain},
            {"what": "DuckDB's anti-join on the two Lance scans", "seconds": floor, "ratio": floor / plain}]
    return out


def duck_join(repo, ref: str, repeat: int) -> float:
    """Best seconds of the check's query alone on one open DuckDB connection (opening one costs
    40-150 ms; checks keep one database per process)."""
    import duckdb

    tables = repo.resolve(ref).tables
    con = duckdb.connect(config={"enable_external_access": False, "threads": 2})
    try:
        con.register("stocks", repo.open_table_version(tables["stocks"]))
        con.register("companies", repo.open_table_version(tables["companies"]))
        seconds, found = best_of(lambda: con.sql(f"SELECT count(*) FROM ({KNOWN})").fetchall()[0][0], repeat)
        assert found == 0
        return seconds
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--companies", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="200k rows")
    args = ap.parse_args()
    if args.quick:
        args.rows = 200_000
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores", file=sys.stderr)
    print_table(bench(args.rows, args.companies, args.repeat), ["what", "seconds", "ratio"])


if __name__ == "__main__":
    main()
