"""Requests per second of ``describe_table`` on a warm ``trimerge serve`` (issue 40).

Run: ``python benchmarks/bench_serve.py [SECONDS]``. A repository with a table on main and a fork
on a branch; the server runs as ``trimerge -C REPO serve`` (its request log to a file, as in use);
after a warm-up, ``describe_table`` is asked for ``SECONDS`` (default 5) per row of the table:
from one client over one keep-alive connection (http.client), from pylance's Rust REST client
(``RestNamespace.describe_table``, what Lance itself calls), and from 4 client processes at once.
Then a filtered read of a 1M-row table at a ref, warm, side by side: through the server (pylance's
and LanceDB's REST clients), through the in-process namespace, and ``repo.dataset(...)``; LanceDB
also with the query pushed down to the namespace (``QueryTable``: the namespace runs it with pylance
and answers an Arrow IPC file) and on the same files without trimerge (LanceDB's own engine: it
reads in 1024-row batches). ``server requests``: what the server answered for one read.
"""

from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from common import fresh_dir, median_time, print_table

import trimerge


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def raw_rate(port: int, table_id: list[str], seconds: float) -> float:
    """describe_table over one keep-alive HTTP connection, as fast as it answers."""
    conn = http.client.HTTPConnection("127.0.0.1", port)
    path = f"/v1/table/{'$'.join(table_id)}/describe?delimiter=%24"
    body = json.dumps({"id": table_id})
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        assert answer.status == 200, answer.read()
        answer.read()
        done += 1
    return done / (time.perf_counter() - t0)


def rust_rate(port: int, table_id: list[str], seconds: float) -> float:
    import lance_namespace as ln
    from lance.namespace import RestNamespace

    ns = RestNamespace(uri=f"http://127.0.0.1:{port}")
    request = ln.DescribeTableRequest(id=table_id)
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        ns.describe_table(request)
        done += 1
    return done / (time.perf_counter() - t0)


def _worker(args: tuple[int, list[str], float]) -> float:
    return raw_rate(*args)


def read_times(repo: trimerge.Repository, port: int, log_path: Path, plain_dir: Path) -> dict[str, tuple[float, int]]:
    """Median seconds of opening ``big`` at main and reading ``v < 100000``, per client, and how many
    requests the server answered for one such read (from its request log)."""
    import lance
    import lancedb
    from lance.namespace import RestNamespace

    url = f"http://127.0.0.1:{port}"
    pushdown = {"namespace_client_pushdown_operations": ["QueryTable"]}
    over_rest = lancedb.connect_namespace("rest", {"uri": url})
    over_rest_pushed = lancedb.connect_namespace("rest", {"uri": url}, **pushdown)
    in_process = lancedb.connect_namespace("trimerge", {"root": repo.uri})
    in_process_pushed = lancedb.connect_namespace("trimerge", {"root": repo.uri}, **pushdown)
    # LanceDB on the same files without trimerge: its own query engine's cost (a link named as it wants).
    (plain_dir / "big.lance").symlink_to(repo.dataset("big", ref="main").uri)
    plain = lancedb.connect(str(plain_dir))
    ns = RestNamespace(uri=url)
    where = "v < 100000"

    def lancedb_read(db: Any, path: list[str] | None, limit: int | None = None) -> Any:
        table = db.open_table("big", namespace_path=path) if path is not None else db.open_table("big")
        return table.search().where(where).limit(limit).to_arrow()

    runs = {
        "repo.dataset": lambda: repo.dataset("big", ref="main").to_table(filter=where),
        "pylance RestNamespace (serve)": lambda: lance.dataset(namespace_client=ns, table_id=["main", "big"]
                                                               ).to_table(filter=where),
        "LanceDB over REST (serve)": lambda: lancedb_read(over_rest, ["main"]),
        # (LanceDB 0.40's Rust client sends k=10 for limit(None) when it pushes a query down: a limit is given)
        "LanceDB over REST, QueryTable pushdown": lambda: lancedb_read(over_rest_pushed, ["main"], 1_000_000),
        "LanceDB in-process namespace": lambda: lancedb_read(in_process, ["main"]),
        "LanceDB in-process, QueryTable pushdown": lambda: lancedb_read(in_process_pushed, ["main"]),
        "LanceDB on the files, no trimerge": lambda: lancedb_read(plain, None),
    }
    answered: dict[str, int] = {}
    for name, fn in runs.items():  # (and warm)
        before = log_path.read_text().count("\n")
        assert fn().num_rows == 100_000, name
        answered[name] = log_path.read_text().count("\n") - before
    return {name: (median_time(fn, repeat=7), answered[name]) for name, fn in runs.items()}


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    work = fresh_dir("serve-bench")
    repo = trimerge.Repository.init(work / "repo")
    repo.create_table("t", pa.table({"id": pa.array(range(1000), pa.int64()), "v": range(1000)}), "id")
    n = 1_000_000
    repo.create_table("big", pa.table({"id": pa.array(range(n), pa.int64()), "v": pa.array(range(n), pa.int64()),
                                       "s": pa.array([f"row{i % 1000}" for i in range(n)])}), "id")
    repo.branches.create("dev")
    for i in range(5):
        repo.upsert("t", pa.table({"id": pa.array([i], pa.int64()), "v": [-i]}), branch="dev")
    port = free_port()
    log = open(work / "requests.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "trimerge.cli", "-C", repo.uri, "serve", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        assert server.stdout.readline().startswith("listening on ")
        rows = []
        for label, table_id in (("main (table on Lance main)", ["main", "t"]), ("dev~1 (a fork's older state)",
                                                                            ["dev~1", "t"])):
            raw_rate(port, table_id, 1.0)  # warm: the repository's caches, a fork's pinned copy
            one = raw_rate(port, table_id, seconds)
            rust = rust_rate(port, table_id, seconds)
            with multiprocessing.get_context("spawn").Pool(4) as pool:
                many = sum(pool.map(_worker, [(port, table_id, seconds)] * 4))
            rows.append({"ref": label, "1 client (http.client)": round(one), "1 client (pylance Rust)": round(rust),
                         "4 client processes": round(many)})
        (work / "plain").mkdir()
        read = read_times(repo, port, work / "requests.log", work / "plain")
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(timeout=30)
        log.close()
    print(f"describe_table requests per second, warm server, {os.cpu_count()} cores (server exit {code}):")
    print_table(rows, list(rows[0]))
    base = read["repo.dataset"][0]
    print("open 1M rows at main and read 100k of them with a filter (median of 7, warm):")
    print_table([{"client": name, "ms": round(t * 1000, 1), "x repo.dataset": round(t / base, 2),
                  "server requests": asked} for name, (t, asked) in read.items()],
                ["client", "ms", "x repo.dataset", "server requests"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
