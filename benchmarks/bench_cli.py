"""Wall time of CLI verbs on a small repository (100 rows), beside ``python -c pass``: metadata
verbs, and the data verbs ``read`` and ``diff`` (issue 42: they start in at most 0.6 s).

Run: ``python benchmarks/bench_cli.py``. Each verb runs 9 times as a fresh process; medians.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time

import pyarrow as pa

from common import fresh_dir, print_table

import trimerge

VERBS = [["--version"], ["--help"], ["log"], ["log", "-n", "3"], ["rev-parse", "main~2"],
         ["merge-base", "main", "dev"], ["branch", "list"], ["tag", "list"], ["commit", "list"],
         ["commit", "show", "main"], ["switch", "dev"], ["switch", "main"],
         ["read", "t"], ["read", "t", "--format", "json"], ["read", "t", "--limit", "3"],
         ["diff", "main", "main~1"], ["diff", "main", "dev"], ["diff", "main", "dev", "--json"]]


def wall(argv: list[str], repeat: int = 9) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    root = fresh_dir("cli-bench") / "repo"
    repo = trimerge.Repository.init(root)
    repo.create_table("t", pa.table({"id": pa.array(range(100), pa.int64()), "v": range(100)}), "id")
    repo.branches.create("dev")
    for i in range(20):
        repo.upsert("t", pa.table({"id": pa.array([i], pa.int64()), "v": [-i]}), branch="dev" if i % 2 else "main")
    repo.tags.create("v1")
    exe = shutil.which("trimerge") or sys.exit("trimerge is not installed (pip install -e .)")
    rows = [{"command": "python -c pass", "median": f"{wall([sys.executable, '-c', 'pass']) * 1000:.0f} ms"}]
    for verb in VERBS:
        rows.append({"command": "trimerge " + " ".join(verb),
                     "median": f"{wall([exe, '-C', str(root), *verb]) * 1000:.0f} ms"})
    print_table(rows, ["command", "median"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
