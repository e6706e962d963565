"""A one-column backfill of a 1M-row, 10-column table (issue 55, point 2): its diff's rows and its
merge, as ratios to a read of the table — optionally beside another checkout's code, alternating.

The table: ``id`` and 9 value columns, 1,000,000 rows (``--rows``), of one of two shapes:

* ``mixed``: three int64, three float64 and three short text columns (~90 MB on disk);
* ``text``: nine columns of random hex text, 10 characters each (~95 MB, incompressible).

Branch ``backfill`` adds an int32 ``label`` to every row (``add_columns``: a column-only change,
one new column file per fragment); ``main`` then ingests 100 rows and edits one cell. Measured,
each implementation in its own processes, rounds alternating (``--baseline DIR``: a checkout
whose ``trimerge`` is put first on ``PYTHONPATH`` for the baseline runs):

* ``read``: ``to_table()`` of the table at ``backfill``, opened anew (what ``rows()`` opens);
* ``rows(columns="changed")`` and ``rows(columns="all")`` of ``diff("main...backfill")``: the first
  call in a process (after one read, which warms what every step uses), and a second call; and,
  in one process per implementation, each step 7 times interleaved (medians);
* the merge of ``backfill`` into a fresh copy of ``main``: seconds and the process's peak RSS
  (``VmHWM``), beside the peak of a process that only imports and opens the repository.

Goals (issue 55): "changed" ≤ 0.5× a read, "all" ≤ 1.3×, merge peak < 450 MB on both shapes.
Run: ``python benchmarks/bench_backfill_rows.py [--shape mixed|text] [--baseline /path/to/old]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[3])
from common import own_peak_rss_mb
import trimerge
path, what = sys.argv[1], sys.argv[2]
repo = trimerge.Repository.open(path)
import lance, polars, pyarrow
out = {"trimerge": os.path.dirname(trimerge.__file__)}
if what == "open":  # the import baseline: interpreter, pylance, pyarrow, polars, the repository
    repo.resolve("main")
elif what == "merge":
    from trimerge.merge import merge
    dest = "m" + sys.argv[4]
    repo.branches.create(dest, from_ref="main")
    t0 = time.perf_counter()
    result = merge("backfill", dest, repo=repo)
    out["seconds"] = time.perf_counter() - t0
    assert result.status == "merged", result.status
else:
    from trimerge.diff import diff
    def table_diff():
        return diff("main...backfill", repo=repo).tables["t"]
    steps = {"read": lambda: repo.dataset("t", ref="backfill").to_table(),
             "changed": lambda: table_diff().rows(columns="changed"),
             "all": lambda: table_diff().rows(columns="all")}
    steps["read"]()  # warm the metadata caches every step uses alike
    if what == "loop":  # a notebook's: each step 7 times in one process, interleaved; medians
        import statistics
        times = {name: [] for name in steps}
        for _ in range(7):
            for name, fn in steps.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        out.update({name: statistics.median(t) for name, t in times.items()})
    else:
        for name in ("seconds", "again"):  # the first call in a process, and a second one
            t0 = time.perf_counter()
            result = steps[what]()
            out[name] = time.perf_counter() - t0
        out["rows"] = result.num_rows
out["peak_mb"] = own_peak_rss_mb()
print("RESULT " + json.dumps(out))
"""


def value_columns(n: int, shape: str, rng: np.random.Generator, start: int = 0) -> dict[str, pa.Array]:
    if shape == "text":  # 10 random hex digits a value: no encoding or compression shrinks them much
        out = {}
        for i in range(9):
            digits = rng.bytes(5 * n).hex()
            out[f"t{i}"] = pa.array([digits[j * 10:(j + 1) * 10] for j in range(n)])
        return out
    cols: dict[str, pa.Array] = {}
    for i in range(3):
        cols[f"i{i}"] = pa.array(rng.integers(0, 1 << 40, n), pa.int64())
        cols[f"f{i}"] = pa.array(rng.random(n))
        cols[f"s{i}"] = pa.array([f"v{i}-{j}" for j in range(start, start + n)])
    return cols


def build(rows: int, shape: str) -> str:
    import trimerge

    path = str(fresh_dir(f"backfill-rows-{shape}-{rows}") / "repo")
    rng = np.random.default_rng(7)
    repo = trimerge.Repository.init(path)
    repo.create_table("t", pa.table({"id": pa.array(np.arange(rows), pa.int64()), **value_columns(rows, shape, rng)}),
                      primary_key="id")
    repo.branches.create("backfill", from_ref="main")
    repo.add_columns("t", pa.table({"id": pa.array(np.arange(rows), pa.int64()),
                                    "label": pa.array(rng.integers(0, 100, rows), pa.int32())}), branch="backfill")
    new = pa.table({"id": pa.array(np.arange(rows, rows + 100), pa.int64()),
                    **value_columns(100, shape, rng, start=rows)})
    repo.upsert("t", new)
    first = [f for f in new.schema.names if f != "id"][0]
    repo.update("t", pa.table({"id": pa.array([5], pa.int64()), first: new.column(first).slice(0, 1)}))
    return path


def run(path: str, what: str, tree: str | None, tag: str) -> dict:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    # cwd: the benchmarks folder, so that the checkout the benchmark runs from is not first on the path
    proc = subprocess.run([sys.executable, "-c", CHILD, path, what, HERE, tag], capture_output=True, text=True,
                          env=env, cwd=HERE)
    if proc.returncode:
        sys.exit(f"{what} failed:\n{proc.stderr[-3000:]}")
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--shape", choices=["mixed", "text"], default="mixed")
    ap.add_argument("--repeat", type=int, default=5, help="rounds (medians are reported)")
    ap.add_argument("--baseline", help="a checkout whose trimerge is measured beside this one, alternating")
    args = ap.parse_args()
    t0 = time.perf_counter()
    path = build(args.rows, args.shape)
    print(f"{args.rows:,} rows ({args.shape}) built in {time.perf_counter() - t0:.1f} s", flush=True)
    trees = {"this": None, **({"baseline": args.baseline} if args.baseline else {})}
    runs: dict[tuple[str, str], list[dict]] = {}
    for i in range(args.repeat):
        for name, tree in trees.items():
            for what in ("open", "read", "changed", "all", "merge"):
                r = run(path, what, tree, f"{name}{i}")
                runs.setdefault((name, what), []).append(r)
            print(f"  round {i} {name}: " + ", ".join(f"{w} {runs[(name, w)][-1].get('seconds', 0):.3f} s / "
                                                     f"{runs[(name, w)][-1]['peak_mb']:.0f} MB"
                                                     for w in ("read", "changed", "all", "merge")), flush=True)
    out = []
    for name in trees:
        med = {w: statistics.median(r.get("seconds", 0.0) for r in runs[(name, w)])
               for w in ("read", "changed", "all", "merge")}
        again = {w: statistics.median(r["again"] for r in runs[(name, w)]) for w in ("read", "changed", "all")}
        peak = {w: statistics.median(r["peak_mb"] for r in runs[(name, w)]) for w in ("open", "merge")}
        out.append({"code": name, "read s": med["read"], "changed s": med["changed"], "all s": med["all"],
                    "changed/read": med["changed"] / med["read"], "all/read": med["all"] / med["read"],
                    "again": f"{again['changed'] / again['read']:.2f} / {again['all'] / again['read']:.2f}",
                    "merge s": med["merge"], "merge peak MB": peak["merge"], "open peak MB": peak["open"]})
    print_table(out, ["code", "read s", "changed s", "all s", "changed/read", "all/read", "again", "merge s",
                      "merge peak MB", "open peak MB"])
    for name, tree in trees.items():  # one process per implementation, each step 7 times, interleaved
        r = run(path, "loop", tree, f"{name}-loop")
        print(f"{name}, in one process (medians of 7): changed/read {r['changed'] / r['read']:.2f}, "
              f"all/read {r['all'] / r['read']:.2f} (read {r['read']:.3f} s)")
    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
    print(f"(medians of {args.repeat} rounds, implementations alternating, each step's first call in a fresh "
          f"process; 'again': changed/read and all/read of a second call in the same process; load average "
          f"{' '.join(load)}; goals: changed/read <= 0.5, all/read <= 1.3, merge peak < 450 MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
