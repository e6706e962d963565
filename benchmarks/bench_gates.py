"""Merge gates and blame (issue 31), side by side in one run:

1. **Checks on a merge's result**: a ``--rows``-row table (default 4M; id, a, b, c), a branch that
   updated 0.1% of it merged into branches gated by two checks (``SELECT * FROM t WHERE a < 0``,
   ``SELECT * FROM t WHERE b > 2``) and into branches no check gates; best of ``--repeat`` each
   (target: with checks ≤ 1.5× without). Gated twice: with dest known to pass the checks (``check
   run`` recorded it, as every gated merge does for its result: row-local checks run on the rows
   the merge wrote, issue 44.3) and with nothing recorded (every check on the whole result, as
   before). Also the two checks alone on the result.
2. **Blame of 100 rows** in a table of ``--rows`` rows with ``--commits`` commits of history
   (default 1,000 commits of 10-row upserts; target < 0.5 s), beside reading those 100 rows.
3. **Whole-table row blame** of ``--blame-rows`` rows (default 1M; 20 commits of history, 1% and
   0.1% of rows updated in each: ``--whole-shares``) vs reading the table (target ≤ 2×).

Blame is timed as ``repo.blame`` runs it (``auto``: the first-parent chain answered from its
fragments' row images where that reads less, :mod:`trimerge.lineage.gates.blame_images`) and with
``method="exact"`` (keyed lookups only, the reference), alternating, and checked to agree.

Run: ``python benchmarks/bench_gates.py`` (``--quick`` for small sizes; ``--skip-merge``,
``--skip-blame``, ``--skip-whole``). Not part of CI.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

from common import best_of, fresh_dir, print_table

CHECKS = {"no_negative_a": "SELECT * FROM t WHERE a < 0", "b_in_range": "SELECT * FROM t WHERE b > 2"}


def table(n: int, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({"id": np.arange(n, dtype=np.int64), "a": rng.integers(0, 1000, n),
                     "b": rng.random(n), "c": pa.array([f"row {i}" for i in range(n)])})


def bench_merge(n: int, repeat: int) -> list[dict]:
    """Per kind (plain / gated, dest known to pass / gated, nothing recorded) and shape:
    ``one-sided`` (only the source changed: the result is the source's table version, the merge
    itself is metadata) and ``two-sided`` (dest changed another 0.1% of rows, in another column: a
    three-way merge of the table)."""
    import trimerge
    from trimerge.lineage.gates.checkpasses import FOLDER
    from trimerge.merge import merge

    repo = trimerge.Repository.init(str(fresh_dir(f"gates-merge-{n}")))
    t = table(n)
    repo.create_table("t", t, ["id"])
    shapes, kinds = ("one", "two"), ("plain", "cold", "gated")
    gated = [f"{k}_{s}_{i}" for k in ("cold", "gated") for s in shapes for i in range(repeat)]
    for name, sql in CHECKS.items():
        repo.checks.add(name, "t", sql, gates=gated)
    rng = np.random.default_rng(7)
    picked = rng.choice(n, 2 * max(1, n // 1000), replace=False)
    src, dst = np.sort(picked[: len(picked) // 2]), np.sort(picked[len(picked) // 2:])
    rows = t.take(pa.array(dst))
    dest_change = rows.set_column(3, "c", pa.array([v + "!" for v in rows.column("c").to_pylist()]))
    for s in shapes:
        for i in range(repeat):
            for kind in kinds:
                repo.branches.create(f"{kind}_{s}_{i}")
                if s == "two":
                    repo.upsert("t", dest_change, branch=f"{kind}_{s}_{i}")
    repo.branches.create("feat")
    rows = t.take(pa.array(src))
    repo.upsert("t", rows.set_column(1, "a", pa.array(rows.column("a").to_numpy() + 1)), branch="feat")

    def forget() -> None:  # no record of any passing check: every check reads the whole result
        repo.docs.backend.delete_tree(FOLDER)

    times: dict[str, list[float]] = {}
    scopes: set[str] = set()
    for s in shapes:
        for i in range(repeat):  # alternate, so load on the shared machine hits every kind alike
            for kind in kinds:
                dest = f"{kind}_{s}_{i}"
                if kind == "cold":
                    forget()
                elif kind == "gated":
                    forget()
                    assert all(r.passed for r in repo.checks.run(dest))  # dest known to pass
                t0 = time.perf_counter()
                r = merge("feat", dest, repo=repo)
                times.setdefault(f"{kind}_{s}", []).append(time.perf_counter() - t0)
                assert r.status == "merged" and len(r.checks) == (0 if kind == "plain" else 2), (kind, r.checks)
                assert all(c.passed for c in r.checks)
                scopes |= {f"{kind}: {c.scope.split(' since')[0]}" for c in r.checks}
    assert scopes == {"cold: table", "gated: rows written"}, scopes
    checks_alone, _ = best_of(lambda: repo.checks.run("gated_two_0"), repeat)
    ds = repo.open_table_version(repo.resolve("gated_two_0").tables["t"])
    floor, _ = best_of(lambda: (ds.to_table(columns=["id", "a"]), ds.to_table(columns=["id", "b"])), repeat)
    best = {k: min(v) for k, v in times.items()}
    out = []
    for s, what in (("two", "both sides changed 0.1%"), ("one", "only the source changed 0.1%")):
        plain, cold, warm = best[f"plain_{s}"], best[f"cold_{s}"], best[f"gated_{s}"]
        out += [{"what": f"merge into {n:,} rows, {what}, no checks", "seconds": plain, "ratio": 1.0},
                {"what": "  gated by two checks, dest known to pass", "seconds": warm, "ratio": warm / plain},
                {"what": "  gated by two checks, nothing recorded", "seconds": cold, "ratio": cold / plain}]
    plain = best["plain_two"]
    out += [{"what": "the two checks alone on a result", "seconds": checks_alone, "ratio": checks_alone / plain},
            {"what": "Lance reading what they need (id+a, id+b)", "seconds": floor, "ratio": floor / plain}]
    return out


def bench_blame(n: int, commits: int, repeat: int) -> list[dict]:
    import trimerge

    repo = trimerge.Repository.init(str(fresh_dir(f"gates-blame-{n}-{commits}")))
    t = table(n, seed=9)
    repo.create_table("t", t, ["id"])
    rng = np.random.default_rng(11)
    hot = rng.choice(n, 500, replace=False)  # the rows the history keeps changing
    t0 = time.perf_counter()
    for i in range(commits):
        ids = np.sort(rng.choice(hot, 10, replace=False))
        rows = t.take(pa.array(ids))
        repo.upsert("t", rows.set_column(1, "a", pa.array(np.full(len(ids), i, np.int64))), message=f"edit {i}")
    built = time.perf_counter() - t0
    asked = np.sort(np.concatenate([rng.choice(hot, 50, replace=False), rng.choice(n, 50, replace=False)]))
    where = f"id IN ({', '.join(map(str, asked.tolist()))})"
    timed = blame_methods(repo, repeat, lambda: repo.read("t", filter=where), where=where)
    assert timed["auto"][1].num_rows == len(set(asked.tolist()))
    reading = timed["read"][0]
    print(f"(history of {commits} commits built in {built:.1f} s)", file=sys.stderr)
    return [{"what": f"blame of 100 rows, {n:,}-row table, {commits:,} commits", "seconds": timed["auto"][0],
             "ratio": timed["auto"][0] / reading},
            {"what": "  the same, exact walk (keyed lookups only)", "seconds": timed["exact"][0],
             "ratio": timed["exact"][0] / reading},
            {"what": "reading those 100 rows", "seconds": reading, "ratio": 1.0}]


def blame_methods(repo, repeat: int, read, **kw) -> dict:
    """method (and ``read``: the baseline) -> (best seconds, result) of blaming table t, all
    alternating so load on the shared machine hits them alike; the methods must agree."""
    from trimerge.lineage.gates.blame import blame

    runs = {"read": read, "auto": lambda: blame(repo, "t", **kw), "exact": lambda: blame(repo, "t", method="exact", **kw)}
    best: dict = {}
    for _ in range(repeat):
        for name, fn in runs.items():
            seconds, out = best_of(fn, 1)
            best.setdefault(f"{name} all", []).append(seconds)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, out)
    assert best["auto"][1].equals(best["exact"][1]), "blame methods disagree"
    return best


def medians(timed: dict, name: str) -> str:
    """``name``'s median over the alternating runs, the ratio of medians to reading, and the
    ratio within each pair (load on a shared machine hits a pair alike, not a whole run)."""
    import statistics

    mine, reads = timed[f"{name} all"], timed["read all"]
    pairs = sorted(m / r for m, r in zip(mine, reads))
    return (f"median {statistics.median(mine):.3f} s vs {statistics.median(reads):.3f} s: "
            f"{statistics.median(mine) / statistics.median(reads):.2f}x; per pair {pairs[0]:.2f}-{pairs[-1]:.2f}x "
            f"(median {statistics.median(pairs):.2f}x)")


def bench_whole(n: int, commits: int, repeat: int, share: float = 0.01) -> list[dict]:
    import trimerge

    repo = trimerge.Repository.init(str(fresh_dir(f"gates-whole-{n}-{share}")))
    t = table(n, seed=13)
    repo.create_table("t", t, ["id"])
    rng = np.random.default_rng(17)
    for i in range(commits):
        ids = np.sort(rng.choice(n, max(1, int(n * share)), replace=False))
        rows = t.take(pa.array(ids))
        repo.upsert("t", rows.set_column(2, "b", pa.array(rng.random(len(ids)))), message=f"edit {i}")
    timed = blame_methods(repo, repeat, lambda: repo.read("t"))
    reading = timed["read"][0]
    assert timed["auto"][1].num_rows == n
    print(f"whole-table blame, {share:.1%} x {commits}: {medians(timed, 'auto')}; exact walk {medians(timed, 'exact')}",
          file=sys.stderr)
    return [{"what": f"whole-table row blame, {n:,} rows, {commits} commits of {share:.1%}", "seconds": timed["auto"][0],
             "ratio": timed["auto"][0] / reading},
            {"what": "  the same, exact walk (keyed lookups only)", "seconds": timed["exact"][0],
             "ratio": timed["exact"][0] / reading},
            {"what": "reading the table", "seconds": reading, "ratio": 1.0}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--blame-rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--whole-shares", default="0.01,0.001", help="rows each of the 20 commits updates")
    ap.add_argument("--quick", action="store_true", help="200k rows, 100 commits, 100k rows")
    ap.add_argument("--skip-merge", action="store_true")
    ap.add_argument("--skip-blame", action="store_true")
    ap.add_argument("--skip-whole", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.commits, args.blame_rows = 200_000, 100, 100_000
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores", file=sys.stderr)
    rows: list[dict] = []
    if not args.skip_merge:
        rows += bench_merge(args.rows, args.repeat)
    if not args.skip_blame:
        rows += bench_blame(args.rows, args.commits, args.repeat)
    if not args.skip_whole:
        for share in args.whole_shares.split(","):
            rows += bench_whole(args.blame_rows, 20, args.repeat, float(share))
    print_table(rows, ["what", "seconds", "ratio"])


if __name__ == "__main__":
    main()
