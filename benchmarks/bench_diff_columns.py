"""Rows of a column-only diff (issue 44, point 2): ``TableDiff.rows(columns="all")`` and
``rows(columns="changed")`` of a backfill, beside reading both sides' rows with pylance.

The table of ``bench_columns.py`` (30,000 rows: id, title, 3 KB body, 64-float embedding); the
``backfill`` branch adds an int32 ``label`` to every row (a column-only change). Medians of 5,
side by side in one run. Goals: ``"all"`` ≤ 1.2× reading both sides; ``"changed"`` ≤ ½ reading
the table. Run: ``cd benchmarks && python bench_diff_columns.py [--profile]``.
"""

from __future__ import annotations

import statistics
import sys
import time

from bench_columns import labels, setup
from common import fresh_dir, own_peak_rss_mb

REPEAT = 5  # medians of 5


def main() -> None:
    import trimerge
    from trimerge.diff import diff

    path = str(fresh_dir("diff-columns") / "repo")
    setup(path)
    repo = trimerge.Repository.open(path)
    repo.add_columns("docs", labels(), branch="backfill")

    def table_diff():
        return diff("main...backfill", repo=repo).tables["docs"]

    probe = table_diff()
    sides = [probe.before_snapshot.ds, probe.after_snapshot.ds]  # each side's dataset at its version

    def read_both() -> int:
        return sum(ds.to_table().num_rows for ds in sides)

    def read_both_fresh() -> int:  # each side's dataset opened anew, as a diff opens it
        td = table_diff()
        return sum(s.ds.to_table().num_rows for s in (td.before_snapshot, td.after_snapshot))

    def read_one() -> int:
        return sides[1].to_table().num_rows

    if "--profile" in sys.argv:
        import cProfile
        import pstats

        td = table_diff()
        cProfile.runctx("td.rows(columns='all')", globals(), {"td": td}, "/tmp/rows_all.prof")
        pstats.Stats("/tmp/rows_all.prof").sort_stats("cumulative").print_stats(40)
        return
    rows_all = table_diff().rows(columns="all")
    assert rows_all.num_rows == 30_000, rows_all.num_rows
    steps = {
        "read both sides (pylance to_table x2)": read_both,
        "read both sides, datasets opened anew": read_both_fresh,
        "read one side (pylance to_table)": read_one,
        'rows(columns="all")': lambda: table_diff().rows(columns="all"),
        'rows(columns="changed")': lambda: table_diff().rows(columns="changed"),
        "diff() alone (resolve refs, plan)": lambda: table_diff().candidate_plan,
    }
    # Interleaved (one run of each step per round), so load on a shared machine hits all alike.
    runs: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(REPEAT):
        for name, fn in steps.items():
            t0 = time.perf_counter()
            fn()
            runs[name].append(time.perf_counter() - t0)
    results = {name: statistics.median(r) for name, r in runs.items()}
    both, one = results["read both sides (pylance to_table x2)"], results["read one side (pylance to_table)"]
    for name, seconds in results.items():
        print(f"{name:42s} {seconds:7.3f} s")
    all_, changed = results['rows(columns="all")'], results['rows(columns="changed")']
    fresh = results["read both sides, datasets opened anew"]
    print(f'"all" / reading both sides: {all_ / both:.2f}x (opened anew: {all_ / fresh:.2f}x; goal <= 1.2x)')
    print(f'"changed" / reading one side: {changed / one:.2f}x (goal <= 0.5x)')
    print(f"peak RSS {own_peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
