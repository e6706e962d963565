"""The same repository operations on local disk and on a local S3 server (SeaweedFS), side by side,
with the metadata requests each one makes (the counted backend sees every request of trimerge's
own store; Lance's requests are not counted).

Run: ``python benchmarks/bench_storage.py`` (needs ``pip install -e '.[test]'`` for the server)."""

from __future__ import annotations

import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa

from common import fresh_dir, median_time as median_of, print_table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import trimerge  # noqa: E402
from trimerge.merge import merge  # noqa: E402

from s3server import S3Server  # noqa: E402


class Counted:
    """A backend proxy counting requests by operation."""

    def __init__(self, inner):
        self.inner = inner
        self.calls: Counter = Counter()

    def __getattr__(self, name):
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call


def counted(repo: trimerge.Repository) -> Counted:
    proxy = Counted(repo.docs.backend)
    repo.docs.backend = proxy
    return proxy


def measure(make_uri, options) -> dict[str, float | str]:
    out: dict[str, float | str] = {}
    n = iter(range(10**6))
    out["init"] = median_of(lambda: trimerge.Repository.init(make_uri(f"init{next(n)}"), storage_options=options), 5)
    repo = trimerge.Repository.init(make_uri("main"), storage_options=options)
    repo.create_table("t", pa.table({"id": pa.array(range(10_000), pa.int64()), "v": range(10_000)}), "id")
    keys = iter(range(100_000, 10**9))
    one_row = lambda: repo.upsert("t", pa.table({"id": pa.array([next(keys)], pa.int64()), "v": [1]}))  # noqa: E731
    one_row()
    out["one-row commit"] = median_of(one_row, 41)
    proxy = counted(repo)
    one_row()
    out["metadata requests per commit"] = f"{sum(proxy.calls.values())} ({dict(sorted(proxy.calls.items()))})"
    repo.docs.backend = proxy.inner
    names = iter(range(10**6))
    out["branch create"] = median_of(lambda: repo.branches.create(f"b{next(names)}", "main"), 9)
    firsts = iter(range(10**6))

    def first_write():
        name = f"fw{next(firsts)}"
        repo.branches.create(name, "main")
        t0 = time.perf_counter()
        repo.upsert("t", pa.table({"id": pa.array([1], pa.int64()), "v": [next(keys)]}), branch=name)
        return time.perf_counter() - t0

    out["first write to a branch (fork)"] = statistics.median(first_write() for _ in range(7))
    hist = trimerge.Repository.init(make_uri("log"), storage_options=options)
    hist.create_table("t", pa.table({"id": pa.array([0], pa.int64()), "v": [0]}), "id")
    for i in range(999):
        hist.upsert("t", pa.table({"id": pa.array([0], pa.int64()), "v": [i + 1]}))
    uri = hist.uri
    out["log of 1,000 commits (cold open)"] = median_of(
        lambda: trimerge.Repository.open(uri, read_only=True, storage_options=options).log(), 3)
    repo.branches.create("feature", "main")
    repo.upsert("t", pa.table({"id": pa.array(range(0, 100), pa.int64()), "v": [-1] * 100}), branch="feature")
    repo.upsert("t", pa.table({"id": pa.array(range(5000, 5100), pa.int64()), "v": [-2] * 100}))
    t0 = time.perf_counter()
    merge(repo.ref("feature"), repo.ref("main"))
    out["merge of 100+100 changed rows (10k-row table)"] = time.perf_counter() - t0
    return out


def main() -> int:
    root = fresh_dir("storage-bench")
    local = measure(lambda name: str(root / name), None)
    with S3Server() as server:
        s3 = measure(lambda name: server.uri(f"bench/{name}"), server.storage_options)
    rows = []
    for op in local:
        a, b = local[op], s3[op]
        if isinstance(a, float):
            rows.append({"operation": op, "local disk": f"{a * 1000:.1f} ms", "S3 (SeaweedFS)": f"{b * 1000:.1f} ms",
                         "S3 / local": f"{b / a:.1f}x"})
        else:
            rows.append({"operation": op, "local disk": a, "S3 (SeaweedFS)": b, "S3 / local": ""})
    print_table(rows, ["operation", "local disk", "S3 (SeaweedFS)", "S3 / local"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
