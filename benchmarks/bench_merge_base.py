"""Merge-base benchmark: trimerge vs networkx vs git on synthetic merge-heavy histories.

Each history has several long-lived branches that merge into each other every few commits.
For its last ``--tail`` commits the branches split into two groups that only merge within
their group, so the two query tips (one per group) have their merge bases a few hundred
generations below them. The tail is generated from its own seed, so the part of the graph a
merge-base query needs is the same for every history size and only the history below it grows.

Reports the median time of ``merge_bases`` and of ``networkx.lowest_common_ancestor`` (which
walks all ancestors) over a few calls, and of ``git merge-base --all`` on the same history (imported with ``git fast-import``, commit-graph written as ``git gc`` would;
includes process start-up). Exits 1 if our bases differ from git's; with ``--strict`` also if a
performance check fails.

    python benchmarks/bench_merge_base.py [--sizes 20000,200000]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

from trimerge.lineage.history.graph import DictGraph, merge_bases

GIT_ENV = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
MAX_SCALE_RATIO = 1.5
MIN_NX_SPEEDUP = 100.0


def synthetic_history(
    size: int, *, seed: int, tail: int, n_branches: int = 4, merge_prob: float = 0.3
) -> tuple[list[tuple[int, ...]], int, int]:
    """Parent-index lists of a ``size``-commit history and the two query tips."""
    parents: list[tuple[int, ...]] = [()]
    tips = [0] * n_branches
    everyone = list(range(n_branches))
    half = n_branches // 2
    groups = [everyone[:half], everyone[half:]]

    def commit(branch: int, partners: list[int], rng: random.Random) -> None:
        ps = [tips[branch]]
        if rng.random() < merge_prob:
            other = tips[rng.choice(partners)]
            if other != ps[0]:
                ps.append(other)
        parents.append(tuple(ps))
        tips[branch] = len(parents) - 1

    rng = random.Random(seed)
    while len(parents) < size - tail:
        commit(rng.randrange(n_branches), everyone, rng)
    # Same tail for every size: the work a query needs must not depend on history size.
    tail_rng = random.Random(seed + 1)
    while len(parents) < size:
        branch = tail_rng.randrange(n_branches)
        commit(branch, groups[branch >= half], tail_rng)
    return parents, tips[0], tips[half]


class CountingGraph:
    """Records the distinct commits an algorithm looked at."""

    def __init__(self, inner: DictGraph) -> None:
        self.inner = inner
        self.touched: set[str] = set()

    def parents(self, commit_id: str) -> tuple[str, ...]:
        self.touched.add(commit_id)
        return self.inner.parents(commit_id)

    def generation(self, commit_id: str) -> int:
        self.touched.add(commit_id)
        return self.inner.generation(commit_id)

    def created_at(self, commit_id: str) -> float:
        return self.inner.created_at(commit_id)


def median_seconds(fn: Callable[[], object], runs: int) -> float:
    # Like timeit: a full collection over the freshly built multi-million-object graphs would
    # otherwise land inside some timed calls and swamp a millisecond-scale measurement.
    gc.collect()
    gc.disable()
    try:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return statistics.median(times)


def build_git_repo(path: Path, parents: list[tuple[int, ...]], branch_tips: list[int]) -> list[str]:
    """Import the history with ``git fast-import``; returns the sha of every commit index."""
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=GIT_ENV)
    chunks = []
    for i, ps in enumerate(parents):
        message = f"c{i}"
        chunks.append(
            f"commit refs/heads/build\nmark :{i + 1}\ncommitter b <b@example.com> {1600000000 + i} +0000\n"
            f"data {len(message)}\n{message}\n"
        )
        if ps:
            chunks.append(f"from :{ps[0] + 1}\n")
            chunks.extend(f"merge :{p + 1}\n" for p in ps[1:])
        chunks.append("\n")
    for k, tip in enumerate(branch_tips):
        chunks.append(f"reset refs/heads/b{k}\nfrom :{tip + 1}\n\n")
    marks = path / "marks"
    subprocess.run(
        ["git", "-C", str(path), "fast-import", "--quiet", f"--export-marks={marks}"],
        input="".join(chunks).encode(),
        check=True,
        env=GIT_ENV,
    )
    subprocess.run(["git", "-C", str(path), "commit-graph", "write", "--reachable"], check=True, env=GIT_ENV)
    sha = [""] * len(parents)
    for line in marks.read_text().splitlines():
        mark, value = line.split()
        sha[int(mark[1:]) - 1] = value
    return sha


def name(i: int) -> str:
    return f"c{i:07d}"


@dataclass
class Case:
    """One history size: the graph, the query and everything measured on it."""

    size: int
    graph: DictGraph
    a: str
    b: str
    ours: list[str]
    touched: int
    depth: int | None
    t_nx: float
    nx_in_bases: bool
    t_git: float = float("nan")
    git_bases: set[str] | None = None
    t_ours: float = float("nan")


def prepare(size: int, args: argparse.Namespace) -> Case:
    """Build one history and measure everything except our own timing."""
    parents, tip_a, tip_b = synthetic_history(size, seed=args.seed, tail=args.tail)
    graph = DictGraph({name(i): tuple(name(p) for p in ps) for i, ps in enumerate(parents)})
    a, b = name(tip_a), name(tip_b)
    ours = merge_bases(graph, a, b)
    counting = CountingGraph(graph)
    merge_bases(counting, a, b)
    depth = graph.generation(a) - min(graph.generation(c) for c in ours) if ours else None

    dag = nx.DiGraph()
    dag.add_nodes_from(name(i) for i in range(len(parents)))
    dag.add_edges_from((name(p), name(i)) for i, ps in enumerate(parents) for p in ps)  # parent -> child
    nx_lca = nx.lowest_common_ancestor(dag, a, b)
    t_nx = median_seconds(lambda: nx.lowest_common_ancestor(dag, a, b), args.nx_runs)
    del dag

    case = Case(size, graph, a, b, ours, len(counting.touched), depth, t_nx, nx_lca in ours)
    if shutil.which("git"):
        with tempfile.TemporaryDirectory() as tmp:
            sha = build_git_repo(Path(tmp), parents, [tip_a, tip_b])
            index = {s: i for i, s in enumerate(sha)}
            cmd = ["git", "-C", tmp, "merge-base", "--all", sha[tip_a], sha[tip_b]]

            def git_merge_base() -> subprocess.CompletedProcess[str]:
                return subprocess.run(cmd, capture_output=True, text=True, check=True, env=GIT_ENV)

            case.git_bases = {name(index[line]) for line in git_merge_base().stdout.split()}
            case.t_git = median_seconds(git_merge_base, args.git_runs)
    return case


def time_ours(cases: list[Case], runs: int) -> None:
    """Median time of merge_bases per case, interleaving the sizes round by round so that load
    from other processes on the machine hits every size alike."""
    times: list[list[float]] = [[] for _ in cases]
    gc.collect()
    gc.disable()
    try:
        for _ in range(runs):
            for case, bucket in zip(cases, times):
                start = time.perf_counter()
                merge_bases(case.graph, case.a, case.b)
                bucket.append(time.perf_counter() - start)
    finally:
        gc.enable()
    for case, bucket in zip(cases, times):
        case.t_ours = statistics.median(bucket)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="20000,200000", help="comma-separated history sizes")
    parser.add_argument("--tail", type=int, default=1000, help="commits since the two query branches diverged")
    parser.add_argument("--runs", type=int, default=31, help="timed merge_bases calls per size (median)")
    parser.add_argument("--nx-runs", type=int, default=3, help="timed networkx calls per size (median)")
    parser.add_argument("--git-runs", type=int, default=7, help="timed git merge-base calls per size (median)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--strict", action="store_true", help="exit non-zero when a performance check fails")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    cases = []
    for size in sizes:
        print(f"building and measuring {size} commits ...", file=sys.stderr, flush=True)
        cases.append(prepare(size, args))
    time_ours(cases, args.runs)

    print(f"\n{'history':>8}  {'engine':<34} {'seconds':>10}  {'ratio to ours':>13}")
    for c in cases:
        for engine, seconds in (
            ("trimerge merge_bases", c.t_ours),
            ("networkx lowest_common_ancestor", c.t_nx),
            ("git merge-base --all (subprocess)", c.t_git),
        ):
            print(f"{c.size:>8}  {engine:<34} {seconds:>10.5f}  {seconds / c.t_ours:>13.1f}")

    print()
    mismatch = False
    for c in cases:
        print(
            f"{c.size:>8} commits: {len(c.ours)} merge base(s), {c.depth} generations below tip A; "
            f"merge_bases touched {c.touched} commits; networkx answer is one of them: {c.nx_in_bases}"
        )
        if c.git_bases is None:
            print("          git not found: answer not cross-checked")
        elif set(c.ours) != c.git_bases:
            mismatch = True
            print(f"          MISMATCH with git: ours {sorted(c.ours)} vs git {sorted(c.git_bases)}")
        else:
            print("          same bases as git merge-base --all")

    checks = []
    if len(cases) >= 2:
        small, large = cases[0], cases[-1]
        scale = large.t_ours / small.t_ours
        checks.append((f"time({large.size})/time({small.size}) = {scale:.2f} <= {MAX_SCALE_RATIO}", scale <= MAX_SCALE_RATIO))
    # networkx walks every ancestor, so the gap is what matters on the largest history; the
    # smaller sizes are shown for reference only.
    for c in cases[:-1]:
        print(f"[info] networkx/ours at {c.size} = {c.t_nx / c.t_ours:.0f}")
    largest = cases[-1]
    speedup = largest.t_nx / largest.t_ours
    checks.append((f"networkx/ours at {largest.size} = {speedup:.0f} >= {MIN_NX_SPEEDUP:.0f}", speedup >= MIN_NX_SPEEDUP))
    for text, ok in checks:
        print(f"[{'PASS' if ok else 'FAIL'}] {text}")
    print(f"[{'FAIL' if mismatch else 'PASS'}] merge bases equal git's")

    if mismatch:
        return 1
    if args.strict and not all(ok for _, ok in checks):
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
