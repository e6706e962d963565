"""Remotes: clone beside a plain copy, a one-row push and pull (bytes and time), a fetch of many
metadata-only commits.

Run: ``python benchmarks/bench_remotes.py [--rows N] [--commits N] [--s3 | --azure]`` (defaults:
2,000,000 rows, 1,000 commits). ``--s3`` runs the same on a SeaweedFS S3 server on 127.0.0.1
(tests/s3server.py), ``--azure`` on an Azurite server (tests/azserver.py): a clone from a local
repository into the bucket beside uploading its files with the same client and threads, a clone back
out, a one-row push into the bucket and a pull from it, and a fetch of metadata-only commits made in
the bucket.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "tests"))

import trimerge


def tree_bytes(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--commits", type=int, default=1_000)
    stores = parser.add_mutually_exclusive_group()
    stores.add_argument("--s3", action="store_true", help="against a SeaweedFS S3 server on 127.0.0.1")
    stores.add_argument("--azure", action="store_true", help="against an Azurite server on 127.0.0.1")
    args = parser.parse_args()
    if args.s3 or args.azure:
        return on_object_store("azure" if args.azure else "s3", args.rows, args.commits)
    root = fresh_dir("remotes-bench")
    n = args.rows
    origin = trimerge.Repository.init(root / "origin")
    rng = np.random.default_rng(7)
    origin.create_table("t", pa.table({"k": pa.array(np.arange(n)), "a": rng.random(n), "b": rng.integers(0, 1 << 60, n),
                                       "s": pa.array([f"row-{i}" for i in range(n)])}), primary_key="k")
    size = tree_bytes(root / "origin")
    rows = []

    os.sync()
    t0 = time.perf_counter()
    shutil.copytree(root / "origin", root / "plain-copy")
    os.sync()  # a clone is durable (each file flushed before it is linked into place): so is the copy compared
    t_cp = time.perf_counter() - t0
    os.sync()
    t0 = time.perf_counter()
    clone = trimerge.Repository.clone(origin.uri, root / "clone")
    os.sync()
    t_clone = time.perf_counter() - t0
    rows.append({"operation": f"copytree + sync of the repository ({size / 1e6:.0f} MB)", "seconds": t_cp, "bytes": size})
    rows.append({"operation": "clone of the same (data files hard-linked, as git does locally)", "seconds": t_clone,
                 "bytes": clone.bytes})
    os.environ["TRIMERGE_NO_HARDLINKS"] = "1"
    os.sync()
    t0 = time.perf_counter()
    copied = trimerge.Repository.clone(origin.uri, root / "clone-copied")
    os.sync()
    rows.append({"operation": "clone with TRIMERGE_NO_HARDLINKS=1 (every byte copied)", "seconds": time.perf_counter() - t0,
                 "bytes": copied.bytes})
    del os.environ["TRIMERGE_NO_HARDLINKS"]
    shutil.rmtree(root / "clone-copied")

    a = clone.repository
    b = trimerge.Repository.clone(origin.uri, root / "other").repository
    a.upsert("t", pa.table({"k": [n // 2], "a": [0.5], "b": [1], "s": ["changed"]}))
    t0 = time.perf_counter()
    pushed = a.push()
    rows.append({"operation": "one-row push", "seconds": time.perf_counter() - t0, "bytes": pushed.bytes})
    t0 = time.perf_counter()
    pulled = b.pull()
    rows.append({"operation": "one-row pull (fast-forward)", "seconds": time.perf_counter() - t0, "bytes": pulled.bytes})

    for i in range(args.commits):  # metadata-only commits: a data check added and removed
        if i % 2 == 0:
            origin.checks.add("positive", "t", "SELECT * FROM t WHERE a < 0", message=f"c{i}")
        else:
            origin.checks.remove("positive", message=f"c{i}")
    t0 = time.perf_counter()
    fetched = b.fetch()
    rows.append({"operation": f"fetch of {fetched.commits:,} metadata-only commits", "seconds": time.perf_counter() - t0,
                 "bytes": fetched.bytes})
    print_table(rows, ["operation", "seconds", "bytes"])
    return 0


def server_and_client(kind: str):
    """The test server of ``kind`` and a function making an obstore client of its container."""
    from obstore.store import AzureStore, S3Store

    if kind == "azure":
        from azserver import AzuriteServer

        server = AzuriteServer()
        return server, lambda opts: AzureStore(server.container, config={
            k: opts[k] for k in ("account_name", "account_key", "endpoint")}, client_options={"allow_http": True})
    from s3server import S3Server

    server = S3Server()
    return server, lambda opts: S3Store(server.bucket, config={k: v for k, v in opts.items() if k.startswith("aws_")},
                                        client_options={"allow_http": True})


def on_object_store(kind: str, n: int, commits: int) -> int:
    from concurrent.futures import ThreadPoolExecutor

    import obstore

    root = fresh_dir(f"remotes-bench-{kind}")
    rng = np.random.default_rng(7)
    origin = trimerge.Repository.init(root / "origin")
    origin.create_table("t", pa.table({"k": pa.array(np.arange(n)), "a": rng.random(n), "b": rng.integers(0, 1 << 60, n),
                                       "s": pa.array([f"row-{i}" for i in range(n)])}), primary_key="k")
    files = [p for p in (root / "origin").rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    rows = []
    server, client = server_and_client(kind)
    with server:
        opts = dict(server.storage_options)
        store = client(opts)

        def upload(p) -> None:
            obstore.put(store, "plain/" + p.relative_to(root / "origin").as_posix(), p, use_multipart=True)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(upload, files))
        rows.append({"operation": f"upload of the repository's files, 8 threads ({size / 1e6:.0f} MB)",
                     "seconds": time.perf_counter() - t0, "bytes": size})
        uri = server.uri("cloned/repo")
        t0 = time.perf_counter()
        up = trimerge.Repository.clone(origin.uri, uri, dst_storage_options=opts)
        rows.append({"operation": "clone of the same into the bucket", "seconds": time.perf_counter() - t0, "bytes": up.bytes})
        t0 = time.perf_counter()
        down = trimerge.Repository.clone(uri, root / "down", storage_options=opts)
        rows.append({"operation": "clone from the bucket to local disk", "seconds": time.perf_counter() - t0,
                     "bytes": down.bytes})
        a = down.repository
        b = trimerge.Repository.clone(uri, root / "other", storage_options=opts).repository
        a.upsert("t", pa.table({"k": [n // 2], "a": [0.5], "b": [1], "s": ["changed"]}))
        t0 = time.perf_counter()
        pushed = a.push(storage_options=opts)
        rows.append({"operation": "one-row push into the bucket", "seconds": time.perf_counter() - t0,
                     "bytes": pushed.bytes})
        t0 = time.perf_counter()
        pulled = b.pull(storage_options=opts)
        rows.append({"operation": "one-row pull from the bucket", "seconds": time.perf_counter() - t0,
                     "bytes": pulled.bytes})
        remote = trimerge.Repository.open(uri, storage_options=opts)
        for i in range(commits):
            if i % 2 == 0:
                remote.checks.add("positive", "t", "SELECT * FROM t WHERE a < 0", message=f"c{i}")
            else:
                remote.checks.remove("positive", message=f"c{i}")
        t0 = time.perf_counter()
        fetched = b.fetch(storage_options=opts)
        rows.append({"operation": f"fetch of {fetched.commits:,} metadata-only commits from the bucket",
                     "seconds": time.perf_counter() - t0, "bytes": fetched.bytes})
    print_table(rows, ["operation", "seconds", "bytes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
