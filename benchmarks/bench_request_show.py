"""``request show`` on a 0.1% change of a 4M-row table, beside what it contains (issue 51): the
three-dot diff with its first rows, plus the dry-run merge — the two a reviewer would otherwise run.

Run: ``python benchmarks/bench_request_show.py [--rows 4000000] [--share 0.001] [--repeat 5]``. The
source branch updates ``share`` of the rows (one column), main updates as many others (so the
dry run is a real three-way merge). The two ways alternate, each on a repository opened anew;
medians, and the ratio of each pair.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

import trimerge
from trimerge.diff import diff
from trimerge.merge import merge
from trimerge.review.view import ROWS_PER_TABLE


def build(root, rows: int, share: float) -> None:
    repo = trimerge.Repository.init(root)
    ids = np.arange(rows, dtype=np.int64)
    rng = np.random.default_rng(51)
    repo.create_table("t", pa.table({"id": ids, "a": rng.random(rows), "b": rng.random(rows), "c": rng.random(rows)}),
                      primary_key="id")
    repo.branches.create("feat", "main")
    changed = rng.choice(rows, 2 * int(rows * share), replace=False).astype(np.int64)
    half = len(changed) // 2
    repo.upsert("t", pa.table({"id": changed[:half], "a": np.full(half, -1.0), "b": np.zeros(half), "c": np.zeros(half)}),
                branch="feat")
    repo.update("t", pa.table({"id": changed[half:], "c": np.full(len(changed) - half, -2.0)}))
    repo.requests.create("feat", "main", title="the change", actor="dev")


def show(root) -> None:
    repo = trimerge.Repository.open(root)
    view = repo.requests.show(1)
    assert view.mergeable, view.why
    view.diff_json()


def separately(root) -> None:
    repo = trimerge.Repository.open(root)
    d = diff("main...feat", repo=repo)
    for table in d.tables.values():
        table.counts  # noqa: B018 - what the view prints per table
        table.rows().slice(0, ROWS_PER_TABLE)
    result = merge("feat", "main", repo=repo, dry_run=True)
    assert not result.has_conflicts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--share", type=float, default=0.001)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = fresh_dir("request-show") / "repo"
    build(root, args.rows, args.share)
    times: dict[str, list[float]] = {"request show": [], "diff + dry-run merge": []}
    for _ in range(args.repeat):
        for name, fn in (("request show", show), ("diff + dry-run merge", separately)):
            started = time.perf_counter()
            fn(root)
            times[name].append(time.perf_counter() - started)
    ratios = [s / d for s, d in zip(times["request show"], times["diff + dry-run merge"])]
    print_table([{"what": k, "median s": round(statistics.median(v), 3), "runs": " ".join(f"{x:.2f}" for x in v)}
                 for k, v in times.items()], ["what", "median s", "runs"])
    print(f"ratio request show / (diff + dry-run merge): median {statistics.median(ratios):.2f}, "
          f"pairs {' '.join(f'{r:.2f}' for r in ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
