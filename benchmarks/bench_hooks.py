"""Hooks and the change feed (issue 53), side by side in one run:

1. **What a hook costs a commit**: ``--commits`` single-row upserts into a ``--rows``-row table
   (default 200 into 100k), p50/p90 of each upsert, with no hook, with a webhook delivered by a
   runner (the writer only records its outbox — the reflog entry it writes anyway) and with a
   webhook the writer delivers itself (a thread after publish). Rounds alternate the three.
2. **Webhook latency after a commit**: from the move's reflog entry (the publish) to the loopback
   receiver's arrival, p50/p99 — delivered by the writer, and by ``hooks run --watch`` (0.05 s
   interval) in another process.
3. **The feed over many small commits** (``--feed-rows``, ``--feed-commits``; the issue's 4M rows
   and 1,000 commits with ``--full-size``): one ``repo.changes`` batch over the whole range vs the
   per-commit diffs it is made of vs reading the table at both ends.

Run: ``python benchmarks/bench_hooks.py`` (``--quick`` for small sizes). Not part of CI.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

import trimerge
from trimerge.lineage.commit import parse_time


class Receiver:
    """A loopback webhook: records (event id, event time, arrival time)."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[str, float, float]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                arrived = time.time()
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                receiver.arrivals.append((body["id"], parse_time(body["time"]).timestamp(), arrived))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"

    def latencies_ms(self) -> list[float]:
        return [(arrived - sent) * 1000 for _, sent, arrived in self.arrivals]


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def setup(name: str, rows: int, hook_url: str | None) -> trimerge.Repository:
    repo = trimerge.Repository.init(fresh_dir(name))
    repo.create_table("t", pa.table({"id": np.arange(rows, dtype=np.int64), "v": np.zeros(rows, dtype=np.int64)}),
                      primary_key="id")
    if hook_url is not None:
        repo.hooks.add("web", on="post-commit", url=hook_url)
    return repo


def commit_cost(rows: int, commits: int) -> tuple[list[dict], Receiver]:
    receiver = Receiver()
    repos = {"no hook": setup("hooks_none", rows, None), "hook, runner delivers": setup("hooks_runner", rows, receiver.url),
             "hook, writer delivers": setup("hooks_writer", rows, receiver.url)}
    times: dict[str, list[float]] = {k: [] for k in repos}
    from trimerge.hooks import background

    names = list(repos)
    for i in range(commits):
        for name in names[i % 3:] + names[:i % 3]:  # each config first, second and third in turn
            repo = repos[name]
            os.environ["TRIMERGE_HOOKS"] = "on" if name == "hook, writer delivers" else "off"
            t0 = time.perf_counter()
            repo.upsert("t", pa.table({"id": [i % rows], "v": [i + 1]}))
            times[name].append((time.perf_counter() - t0) * 1000)
            background.wait(30)  # each config's commit starts alone
    out = [{"config": k, "p50 ms": pct(v, 50), "p90 ms": pct(v, 90), "delivered": None} for k, v in times.items()]
    out[2]["delivered"] = len(receiver.arrivals)
    return out, receiver


def runner_latency(rows: int, commits: int) -> list[float]:
    receiver = Receiver()
    os.environ["TRIMERGE_HOOKS"] = "off"
    repo = setup("hooks_watch", rows, receiver.url)
    proc = subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", repo.uri, "hooks", "run", "--watch",
                             "--interval", "0.05"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)  # the runner's start
        for i in range(commits):
            repo.upsert("t", pa.table({"id": [i], "v": [i + 1]}))
            deadline = time.time() + 30
            while len(receiver.arrivals) < i + 1 and time.time() < deadline:
                time.sleep(0.005)
    finally:
        proc.terminate()
        proc.wait(30)
    return receiver.latencies_ms()


def feed(rows: int, commits: int, per_commit: int) -> list[dict]:
    os.environ["TRIMERGE_HOOKS"] = "off"
    repo = setup("hooks_feed", rows, None)
    repo.changes("c").ack()
    start = repo.resolve("main").id
    rng = np.random.default_rng(7)
    for i in range(commits):
        ids = rng.choice(rows, per_commit, replace=False)
        repo.upsert("t", pa.table({"id": ids.astype(np.int64), "v": np.full(per_commit, i + 1, dtype=np.int64)}))
    tip = repo.resolve("main")
    out = []
    t0 = time.perf_counter()
    batch = repo.changes("c")
    n = batch.tables["t"].num_rows
    out.append({"how": f"feed: one batch over {commits} commits", "s": time.perf_counter() - t0, "rows": n})
    t0 = time.perf_counter()
    total = 0
    from trimerge.diff import diff

    chain = [c.id for c in repo.log("main", limit=commits + 1)][::-1]
    for a, b in zip(chain, chain[1:]):
        total += diff(a, b, repo=repo).tables["t"].rows().num_rows
    out.append({"how": f"the {commits} per-commit diffs", "s": time.perf_counter() - t0, "rows": total})
    t0 = time.perf_counter()
    import polars as pl

    before = pl.from_arrow(repo.read("t", start))
    after = pl.from_arrow(repo.read("t", tip.id))
    joined = before.join(after, on="id", how="full", suffix="_after", coalesce=True)
    changed = joined.filter(pl.col("v").ne_missing(pl.col("v_after")))
    out.append({"how": "reading the table at both ends and comparing", "s": time.perf_counter() - t0,
                "rows": changed.height})
    return out


def listener_cost(moves: int) -> tuple[float, float]:
    """p50 ms of the branch swap itself with and without the hooks' listener (alternating), the
    writer's delivery on: what a hook adds to the commit's own path."""
    from functools import partial

    from trimerge.hooks import background
    from trimerge.lineage.extensions import ref_changed

    os.environ["TRIMERGE_HOOKS"] = "on"
    repo = setup("hooks_listener", 10, None)
    repo.hooks.add("cmd", on="post-commit", run="true")
    tip = repo.resolve("main")
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(moves):
        listening = bool(i % 2)
        repo.refs.on_change = partial(ref_changed, repo) if listening else None
        branch = repo.refs.branch("main")
        new = repo.commits.build(parents=[branch.commit_id], actor="bench", message=str(i), metadata={},
                                 branch="main", tables=tip.tables, created_at=tip.created_at)
        repo.commits.put(new)
        t0 = time.perf_counter()
        repo.refs.move_branch(branch, new.id, actor="bench", reason="commit: bench")
        times[listening].append((time.perf_counter() - t0) * 1000)
        background.wait(30)
    return pct(times[False], 50), pct(times[True], 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--feed-rows", type=int, default=1_000_000)
    parser.add_argument("--feed-commits", type=int, default=200)
    parser.add_argument("--full-size", action="store_true", help="The issue's feed: 4M rows, 1,000 commits.")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only-feed", action="store_true", help="Only part 3.")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.commits, args.feed_rows, args.feed_commits = 10_000, 40, 100_000, 40
    if args.full_size:
        args.feed_rows, args.feed_commits = 4_000_000, 1000
    if args.only_feed:
        print(f"\n3. the change feed: {args.feed_commits} commits of 10-row upserts on {args.feed_rows:,} rows")
        print_table(feed(args.feed_rows, args.feed_commits, 10), ["how", "s", "rows"])
        return
    cost, receiver = commit_cost(args.rows, args.commits)
    print(f"\n1. upsert latency, {args.commits} single-row upserts into {args.rows:,} rows")
    print_table(cost, ["config", "p50 ms", "p90 ms", "delivered"])
    without, with_hook = listener_cost(args.commits * 2)
    print(f"   the branch swap alone (alternating): p50 {without:.3f} ms without the hooks' listener, "
          f"{with_hook:.3f} ms with it")
    writer = receiver.latencies_ms()
    watch = runner_latency(args.rows, min(args.commits, 100))
    print("\n2. webhook latency after the commit's publish (ms)")
    print_table([{"delivered by": "the writer (thread after publish)", "n": len(writer), "p50": pct(writer, 50),
                  "p99": pct(writer, 99)},
                 {"delivered by": "hooks run --watch (0.05 s)", "n": len(watch), "p50": pct(watch, 50),
                  "p99": pct(watch, 99)}], ["delivered by", "n", "p50", "p99"])
    print(f"\n3. the change feed: {args.feed_commits} commits of 10-row upserts on {args.feed_rows:,} rows")
    print_table(feed(args.feed_rows, args.feed_commits, 10), ["how", "s", "rows"])


if __name__ == "__main__":
    main()
