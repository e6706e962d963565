"""Busy branches: N concurrent single-row merges into one branch on the S3 test server (SeaweedFS),
once as plain racing ``merge`` calls retried on a lost race, once through the merge queue.

Run: ``python benchmarks/bench_queue.py [--merges 100] [--rows 10000] [--local]``. Each of N branches
upserts one row of its own into table t (``--rows`` rows on main) and has an open merge request.

* **racing**: N threads (one repository object each) call ``merge(branch, "main")`` at once; a
  call that loses the race (exit 3, ``ConcurrentWriteError``) waits a little and tries again.
  Latency: from the start to the call that published; one still retrying after ``--deadline``
  seconds (default 600) gives up and is reported unfinished.
* **queue**: N threads enqueue their request at once (``repo.requests.enqueue``); one runner
  (``repo.requests.run_queue``) merges them. Latency: from the enqueue to the merge, as the
  request's events record them.

Both report p50, p90 and p99 latency, throughput (merges per second over the whole run) and lost
changes: every acknowledged row must be readable on main afterwards, and every request merged once.
``--local`` runs the same on a local directory instead of the bucket.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import trimerge  # noqa: E402
from trimerge.lineage.errors import ConcurrentWriteError, StorageError  # noqa: E402
from trimerge.merge import merge  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p)) if values else float("nan")


def build(uri: str, options: dict | None, n: int, rows: int) -> trimerge.Repository:
    repo = trimerge.Repository.init(uri, storage_options=options, actor="setup")
    repo.create_table("t", pa.table({"id": np.arange(rows), "v": [f"row {i}" for i in range(rows)]}),
                      primary_key="id", actor="setup")
    for i in range(n):
        repo.branches.create(f"b{i}", "main")
        repo.upsert("t", pa.table({"id": [rows + i], "v": [f"new {i}"]}), branch=f"b{i}", actor=f"dev{i}")
        repo.requests.create(f"b{i}", title=f"row {i}", actor=f"dev{i}")
    return repo


def racing(uri: str, options: dict | None, n: int, deadline: float) -> tuple[list[float], float, int, int]:
    """Every branch merged by its own thread at once, retried on a lost race; a thread still
    trying after ``deadline`` seconds gives up (counted as unfinished, not lost: never acknowledged)."""
    latencies: list[float] = []
    retries = Counter()
    barrier = threading.Barrier(n)
    lock = threading.Lock()
    unfinished = []

    def one(i: int) -> None:
        repo = trimerge.Repository.open(uri, storage_options=options, lock_timeout=deadline)
        barrier.wait()
        started = time.perf_counter()
        delay = 0.01
        while True:
            if time.perf_counter() - started > deadline:
                unfinished.append(i)
                return
            try:
                merge(f"b{i}", "main", repo=repo, actor=f"dev{i}")
                break
            except (ConcurrentWriteError, StorageError):  # a lost race, or the store timing out under it
                retries[i] += 1
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)
        with lock:
            latencies.append(time.perf_counter() - started)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies, time.perf_counter() - t0, sum(retries.values()), len(unfinished)


def queued(uri: str, options: dict | None, n: int) -> tuple[list[float], float]:
    """Every request enqueued by its own thread at once, merged by one runner."""
    repo = trimerge.Repository.open(uri, storage_options=options)
    barrier = threading.Barrier(n + 1)

    def one(i: int) -> None:
        mine = trimerge.Repository.open(uri, storage_options=options)
        barrier.wait()
        mine.requests.enqueue(i + 1, actor=f"dev{i}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    report = repo.requests.run_queue("main", actor="runner")
    while len(report.merged) < n:  # requests enqueued after the runner's first look
        for t in threads:
            t.join()
        more = repo.requests.run_queue("main", actor="runner")
        report.merged += more.merged
        if not more.merged:
            break
    took = time.perf_counter() - t0
    latencies = []
    for r in repo.requests.list():
        at = {e.kind: e.at for e in r.events}
        latencies.append((at["merged"] - at["enqueued"]).total_seconds())
    return latencies, took


def lost(uri: str, options: dict | None, acknowledged: list[int], rows: int, requests: bool) -> int:
    """Acknowledged changes not readable on main (and, for the queue, requests not merged exactly once)."""
    repo = trimerge.Repository.open(uri, storage_options=options)
    have = set(repo.read("t", columns=["id"]).column("id").to_pylist())
    missing = sum(1 for i in acknowledged if rows + i not in have)
    n = len(acknowledged)
    if requests:
        by_request = Counter(c.metadata.get("request.id") for c in repo.log("main", first_parent=True))
        missing += sum(1 for i in range(n) if by_request.get(str(i + 1)) != 1)
        missing += sum(1 for r in repo.requests.list() if r.state != "merged")
    return missing


def merged_sources(uri: str, options: dict | None) -> set[str]:
    repo = trimerge.Repository.open(uri, storage_options=options, read_only=True)
    return {c.metadata.get("merge.source", "") for c in repo.log("main", first_parent=True)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--merges", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--local", action="store_true", help="a local directory instead of the S3 test server")
    parser.add_argument("--deadline", type=float, default=600.0,
                        help="seconds a racing merge keeps retrying before it gives up (unfinished)")
    args = parser.parse_args()
    n, rows = args.merges, args.rows
    root = fresh_dir("queue-bench")
    root.mkdir(parents=True)
    server = None
    if args.local:
        where, options = "local disk", None
        uris = {"racing": str(root / "racing"), "queue": str(root / "queue")}
    else:
        from s3server import S3Server

        server = S3Server().start()
        where, options = "S3 (SeaweedFS on 127.0.0.1)", dict(server.storage_options)
        uris = {"racing": server.uri("racing/repo"), "queue": server.uri("queue/repo")}
    try:
        table = []
        for mode, uri in uris.items():
            t0 = time.perf_counter()
            build(uri, options, n, rows)
            print(f"{mode}: built {n} branches and requests in {time.perf_counter() - t0:.0f} s", flush=True)
            if mode == "racing":
                latencies, took, retries, unfinished = racing(uri, options, n, args.deadline)
                note = f"{retries} retries" + (f", {unfinished} unfinished after {args.deadline:.0f} s"
                                               if unfinished else "")
                sources = merged_sources(uri, options)
                acknowledged = [i for i in range(n) if f"b{i}" in sources]
            else:
                latencies, took = queued(uri, options, n)
                note = "one runner"
                acknowledged = list(range(n))
            done = len(latencies)
            table.append({"mode": mode, "merges": done, "p50 s": percentile(latencies, 50),
                          "p90 s": percentile(latencies, 90), "p99 s": percentile(latencies, 99),
                          "merges/s": done / took, "lost": lost(uri, options, acknowledged, rows, mode == "queue"),
                          "note": note})
            print(table[-1], flush=True)
        print(f"\n{n} concurrent single-row merges into main, {rows} rows, on {where}")
        print_table(table, ["mode", "merges", "p50 s", "p90 s", "p99 s", "merges/s", "lost", "note"])
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
