"""Index benchmark: a merge with a vector and a full-text index vs the same merge without them.

A document table (id, text, a 128-float embedding drawn around 1,000 cluster centres) in two
repositories, one of them with an IVF_PQ index on the embedding and an INVERTED index on the text.
On each, a branch rewrites 1% of the rows (new text and embedding) while main upserts 0.1% others;
then the branch is merged into main. Measured side by side, in one run:

* the index builds (what a rebuild after the merge would cost);
* the merge with and without the indices (target: with ≤ 1.3× without);
* recall@10 of ``repo.search`` on the merged table (default options) against exact search
  (target ≥ 0.95), and its latency.

Run: ``python benchmarks/bench_indices.py`` (1M rows; ``--rows N`` to change, ``--quick`` for 200k).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from common import fresh_dir, print_table

import trimerge
from trimerge.merge import merge

DIM = 128
WORDS = [f"w{i}" for i in range(5000)]


def documents(ids: np.ndarray, rng: np.random.Generator, centres: np.ndarray) -> pa.Table:
    pick = rng.integers(0, len(centres), len(ids))
    vectors = (centres[pick] + rng.normal(0, 0.35, (len(ids), DIM))).astype("float32")
    words = rng.integers(0, len(WORDS), (len(ids), 8))
    text = [" ".join(WORDS[w] for w in row) for row in words]
    return pa.table({"id": pa.array(ids, pa.int64()), "text": text,
                     "emb": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)})


def build(path, rows: int, with_indices: bool, results: dict) -> trimerge.Repository:
    rng = np.random.default_rng(7)
    centres = rng.normal(0, 1, (1000, DIM))
    repo = trimerge.Repository.init(path)
    base = documents(np.arange(rows), rng, centres)
    repo.create_table("docs", base, "id")
    if with_indices:
        t0 = time.perf_counter()
        repo.create_index("docs", "emb", "IVF_PQ", num_sub_vectors=16)
        results["IVF_PQ build (s)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        repo.create_index("docs", "text", "INVERTED")
        results["INVERTED build (s)"] = time.perf_counter() - t0
    repo.branches.create("feat")
    changed = rng.choice(rows, rows // 100, replace=False)
    repo.upsert("docs", documents(np.sort(changed), rng, centres), branch="feat")
    others = np.setdiff1d(rng.choice(rows, rows // 1000, replace=False), changed)
    repo.upsert("docs", documents(np.sort(others), rng, centres), branch="main")
    t0 = time.perf_counter()
    result = merge("feat", "main", repo=repo)
    results["merge (s)"] = time.perf_counter() - t0
    assert result.status == "merged", result.status
    return repo


def recall(repo: trimerge.Repository, queries: int, results: dict) -> None:
    table = repo.read("docs", columns=["id", "emb"])
    ids = table.column("id").to_numpy()
    vectors = table.column("emb").combine_chunks().flatten().to_numpy().reshape(-1, DIM)
    rng = np.random.default_rng(11)
    hits, latencies = 0, []
    for q in vectors[rng.choice(len(vectors), queries, replace=False)]:
        exact = ids[np.argsort(((vectors - q) ** 2).sum(axis=1))[:10]]
        t0 = time.perf_counter()
        found = repo.search("docs", vector=q.tolist(), k=10).column("id").to_numpy()
        latencies.append(time.perf_counter() - t0)
        hits += len(set(found) & set(exact))
    results["recall@10"] = hits / (10 * queries)
    results["search p50 (ms)"] = 1000 * float(np.median(latencies))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--queries", type=int, default=100)
    args = parser.parse_args()
    rows = 200_000 if args.quick else args.rows
    plain, indexed = {}, {}
    build(fresh_dir("indices-plain"), rows, False, plain)
    repo = build(fresh_dir("indices-indexed"), rows, True, indexed)
    recall(repo, args.queries, indexed)
    info = {i.name: i for i in repo.indices("docs")}
    print(f"docs: {rows:,} rows, {DIM}-d embedding; feat rewrote 1%, main upserted 0.1%")
    cols = ["measure", "without indices", "with IVF_PQ + INVERTED"]
    print_table([dict(zip(cols, r)) for r in [
        ["index builds (s)", "-", f"{indexed['IVF_PQ build (s)']:.2f} + {indexed['INVERTED build (s)']:.2f}"],
        ["merge (s)", f"{plain['merge (s)']:.2f}", f"{indexed['merge (s)']:.2f}"],
        ["merge ratio", "1.00", f"{indexed['merge (s)'] / plain['merge (s)']:.2f}"],
        ["recall@10 (default search)", "-", f"{indexed['recall@10']:.3f}"],
        ["search p50 (ms)", "-", f"{indexed['search p50 (ms)']:.1f}"],
        ["unindexed rows after merge", "-", ", ".join(f"{n}: {i.num_unindexed_rows:,}" for n, i in info.items())],
    ]], cols)

if __name__ == "__main__":
    main()
