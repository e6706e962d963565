"""Vector and full-text search at any ref (``Repository.search``, ``trimerge search``)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from trimerge.lineage.errors import InvalidOperationError, SchemaMismatchError, TableNotFoundError
from trimerge.lineage.repository import Repository
from trimerge.lineage.tables.search import DEFAULT_REFINE_FACTOR, MAX_K

N, DIM = 400, 8
WORDS = ["apple", "banana", "cherry", "walnut", "mango", "papaya"]
has_create_index = pytest.mark.skipif(not hasattr(Repository, "create_index"),
                                      reason="Repository.create_index is not there yet")


def vectors(rows: int, dim: int, seed: int = 0, clusters: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if not clusters:
        return rng.standard_normal((rows, dim)).astype("float32")
    # Real embeddings are clustered; isotropic noise is the worst case for PQ codes.
    centers = rng.standard_normal((clusters, dim)) * 3
    return (centers[rng.integers(0, clusters, rows)] + rng.standard_normal((rows, dim))).astype("float32")


def docs_table(vec: np.ndarray, start: int = 0) -> pa.Table:
    n, dim = vec.shape
    ids = range(start, start + n)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "emb": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), dim),
                     "body": [f"{WORDS[i % 6]} {WORDS[(i // 6) % 6]} number{i}" for i in ids],
                     "g": pa.array([i % 3 for i in ids], pa.int64())})


def brute(vec: np.ndarray, q, k: int, mask=None, metric: str = "l2"):
    """Exact top k: (row indices, distances) as Lance defines them (l2 is squared)."""
    q = np.asarray(q, dtype=np.float64)
    v = vec.astype(np.float64)
    if metric == "l2":
        dist = ((v - q) ** 2).sum(1)
    elif metric == "cosine":
        dist = 1 - (v @ q) / (np.linalg.norm(v, axis=1) * np.linalg.norm(q))
    else:
        dist = 1 - v @ q  # Lance's dot distance
    if mask is not None:
        dist = np.where(mask, dist, np.inf)
    order = np.argsort(dist, kind="stable")[:k]
    return order.tolist(), dist[order]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """``docs`` (400 rows, 8-d vectors) on main; read-only tests share it."""
    repo = Repository.init(tmp_path_factory.mktemp("search") / "r")
    vec = vectors(N, DIM)
    repo.create_table("docs", docs_table(vec), "id")
    return repo, vec


# ---------------------------------------------------------------------------------------------- exact search

def test_exact_search_equals_brute_force(small):
    repo, vec = small
    for q in vectors(5, DIM, seed=1):
        got = repo.search("docs", vector=q, k=10)
        ids, dist = brute(vec, q, 10)
        assert got.column_names == ["id", "_distance"]
        assert got["id"].to_pylist() == ids
        np.testing.assert_allclose(got["_distance"].to_numpy(), dist, rtol=1e-4, atol=1e-5)
    # A row's own vector is its nearest neighbour at distance 0; plain lists and numpy ints work too.
    assert repo.search("docs", vector=vec[17].tolist(), k=1)["id"].to_pylist() == [17]
    assert repo.search("docs", vector=np.zeros(DIM, dtype=np.int32), k=3).num_rows == 3


@pytest.mark.parametrize("metric", ["cosine", "dot", "L2"])
def test_metrics_without_index_are_exact(small, metric):
    repo, vec = small
    q = vectors(1, DIM, seed=2)[0]
    got = repo.search("docs", vector=q, k=7, metric=metric)
    ids, dist = brute(vec, q, 7, metric=metric.lower())
    assert got["id"].to_pylist() == ids
    np.testing.assert_allclose(got["_distance"].to_numpy(), dist, rtol=1e-4, atol=1e-4)


def test_where_is_a_prefilter(small):
    repo, vec = small
    q = vectors(1, DIM, seed=3)[0]
    got = repo.search("docs", vector=q, k=10, where="g = 1 AND id < 200", columns=["g"])
    mask = (np.arange(N) % 3 == 1) & (np.arange(N) < 200)
    assert got["id"].to_pylist() == brute(vec, q, 10, mask)[0]  # ten rows: the filter ran first
    assert set(got["g"].to_pylist()) == {1}
    assert repo.search("docs", vector=q, k=5, where="id < 0").num_rows == 0


def test_columns_order_and_k(small):
    repo, vec = small
    got = repo.search("docs", vector=vec[0], k=4, columns=["body", "id", "g", "body"])
    assert got.column_names == ["id", "body", "g", "_distance"]
    assert repo.search("docs", vector=vec[0], k=1, columns="g").column_names == ["id", "g", "_distance"]
    assert repo.search("docs", vector=vec[0], k=1, columns=["emb"])["emb"].type == pa.list_(pa.float32(), DIM)
    assert repo.search("docs", vector=vec[0], k=MAX_K).num_rows == N  # k beyond the rows: all of them, sorted
    assert repo.search(f"{repo.uri}::main::docs", vector=vec[0], k=1)["id"].to_pylist() == [0]


def test_search_at_any_ref(tmp_path):
    repo = Repository.init(tmp_path / "r")
    vec = vectors(50, DIM, seed=4)
    repo.create_table("docs", docs_table(vec), "id")
    repo.tags.create("v1")
    first = repo.resolve("main").id
    target = np.full(DIM, 9.0, dtype=np.float32)  # far from every row
    repo.branches.create("dev")
    moved = docs_table(target[None, :], start=7)
    repo.upsert("docs", moved, branch="dev")  # row 7 moves next to the target on dev only
    repo.upsert("docs", docs_table(target[None, :] + 0.5, start=1000), branch="dev")  # and a new row
    repo.delete("docs", "id = 3", branch="main")
    assert repo.search("docs", ref="dev", vector=target, k=2)["id"].to_pylist() == [7, 1000]
    assert repo.search("docs", ref="dev", vector=target, k=1)["_distance"].to_pylist() == [0.0]
    for ref in ("main", "v1", first):
        assert 7 not in repo.search("docs", ref=ref, vector=target, k=2)["id"].to_pylist()
        assert 1000 not in repo.search("docs", ref=ref, vector=target, k=50)["id"].to_pylist()
    # A deleted row is gone on main, still there at the tag and on the branch.
    assert repo.search("docs", vector=vec[3], k=1)["id"].to_pylist() != [3]
    assert repo.search("docs", ref="v1", vector=vec[3], k=1)["id"].to_pylist() == [3]
    assert repo.search("docs", ref="dev", vector=vec[3], k=1)["id"].to_pylist() == [3]


def test_composite_key_comes_first(tmp_path):
    repo = Repository.init(tmp_path / "r")
    vec = vectors(20, 4, seed=5)
    t = pa.table({"a": [i % 2 for i in range(20)], "b": list(range(20)),
                  "v": pa.FixedSizeListArray.from_arrays(pa.array(vec.ravel()), 4), "w": list(range(20))})
    repo.create_table("t", t, ["b", "a"])
    got = repo.search("t", vector=vec[5], k=2, columns=["w"])
    assert got.column_names == ["b", "a", "w", "_distance"]
    assert got.to_pylist()[0] == {"b": 5, "a": 1, "w": 5, "_distance": 0.0}


# ---------------------------------------------------------------------------------------------- bad input

BAD = [
    (dict(), InvalidOperationError, "exactly one of"),
    (dict(vector=[0.0] * DIM, text="apple"), InvalidOperationError, "both were given"),
    (dict(vector=[0.0] * (DIM - 1)), SchemaMismatchError, "vector has 7 values; the column holds vectors of 8"),
    (dict(vector=[]), SchemaMismatchError, "vector has 0 values"),
    (dict(vector=["a"] * DIM), InvalidOperationError, "numbers only"),
    (dict(vector=[True] * DIM), InvalidOperationError, "numbers only"),
    (dict(vector=[None] * DIM), InvalidOperationError, "numbers only"),
    (dict(vector="0,1"), InvalidOperationError, "list of numbers"),
    (dict(vector=3.0), InvalidOperationError, "list of numbers"),
    (dict(vector=[[0.0] * DIM]), InvalidOperationError, "flat list"),
    (dict(vector=np.zeros((2, DIM))), InvalidOperationError, "flat array"),
    (dict(vector=pa.array([1.0, None] * 4)), InvalidOperationError, "nulls"),
    (dict(vector=[float("nan")] + [0.0] * (DIM - 1)), InvalidOperationError, "NaN"),
    (dict(vector=[float("inf")] * DIM), InvalidOperationError, "infinite"),
    (dict(vector=[1e300] * DIM), InvalidOperationError, "float32 range"),
    (dict(vector=[0.0] * DIM, column="nope"), SchemaMismatchError, "no column 'nope'"),
    (dict(vector=[0.0] * DIM, column="g"), SchemaMismatchError, "column 'g' is int64, not a vector"),
    (dict(vector=[0.0] * DIM, k=0), InvalidOperationError, "k must be from 1"),
    (dict(vector=[0.0] * DIM, k=-3), InvalidOperationError, "k must be from 1"),
    (dict(vector=[0.0] * DIM, k=MAX_K + 1), InvalidOperationError, "k must be from 1"),
    (dict(vector=[0.0] * DIM, k=True), InvalidOperationError, "k must be a positive integer"),
    (dict(vector=[0.0] * DIM, k=2.0), InvalidOperationError, "k must be a positive integer"),
    (dict(vector=[0.0] * DIM, k="5"), InvalidOperationError, "k must be a positive integer"),
    (dict(vector=[0.0] * DIM, where="nope > 1"), InvalidOperationError, "bad filter"),
    (dict(vector=[0.0] * DIM, where="id = ?"), InvalidOperationError, "placeholders"),
    (dict(vector=[0.0] * DIM, where=" "), InvalidOperationError, "is empty"),
    (dict(vector=[0.0] * DIM, columns=["zz"]), SchemaMismatchError, "no column(s) 'zz'"),
    (dict(vector=[0.0] * DIM, columns=[1]), SchemaMismatchError, "no column(s) 1"),
    (dict(vector=[0.0] * DIM, columns=5), InvalidOperationError, "columns must be a list"),
    (dict(vector=[0.0] * DIM, bogus=1), InvalidOperationError, "unknown option 'bogus' (options: nprobes"),
    (dict(vector=[0.0] * DIM, fast_search=True), InvalidOperationError, "unknown option 'fast_search'"),
    (dict(vector=[0.0] * DIM, nprobes=0), InvalidOperationError, "nprobes=0 must be"),
    (dict(vector=[0.0] * DIM, nprobes=True), InvalidOperationError, "nprobes=True must be"),
    (dict(vector=[0.0] * DIM, nprobes=2**64), InvalidOperationError, "must be an integer"),
    (dict(vector=[0.0] * DIM, refine_factor=0), InvalidOperationError, "refine_factor=0 must be"),
    (dict(vector=[0.0] * DIM, refine_factor=2**40), InvalidOperationError, "refine_factor="),
    (dict(vector=[0.0] * DIM, ef=2**40), InvalidOperationError, "ef="),
    (dict(vector=[0.0] * DIM, ef=5, k=10), InvalidOperationError, "ef=5 must be at least k=10"),
    (dict(vector=[0.0] * DIM, metric="hamming"), InvalidOperationError, "metric='hamming' must be one of"),
    (dict(vector=[0.0] * DIM, use_index="no"), InvalidOperationError, "use_index='no' must be"),
    (dict(text=""), InvalidOperationError, "text is empty"),
    (dict(text="  \t"), InvalidOperationError, "text is empty"),
    (dict(text="a\x00b"), InvalidOperationError, "NUL"),
    (dict(text=5), InvalidOperationError, "text must be a string"),
    (dict(text="\ud800"), InvalidOperationError, "not valid Unicode"),
    (dict(text="x" * 100_001), InvalidOperationError, "limit is"),
    (dict(text="apple"), InvalidOperationError, "needs an INVERTED index and no column has one"),
    (dict(text="apple", column="body"), InvalidOperationError, "create_index(TABLE, 'body', 'INVERTED')"),
    (dict(text="apple", column="g"), SchemaMismatchError, "not text"),
    (dict(text="apple", nprobes=3), InvalidOperationError, "full-text search takes no options"),
]


@pytest.mark.parametrize("kwargs,error,fragment", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_input_is_one_typed_line(small, kwargs, error, fragment):
    repo, _ = small
    with pytest.raises(error) as info:
        repo.search("docs", **kwargs)
    message = str(info.value)
    assert fragment in message and "\n" not in message and ".rs:" not in message
    assert info.value.exit_code == 2


def test_unknown_table_and_several_vector_columns(tmp_path, small):
    repo, _ = small
    with pytest.raises(TableNotFoundError):
        repo.search("nope", vector=[0.0] * DIM)
    other = Repository.init(tmp_path / "r")
    v = pa.FixedSizeListArray.from_arrays(pa.array([1.0, 2.0, 3.0, 4.0], pa.float32()), 2)
    other.create_table("t", pa.table({"id": [1, 2], "a": v, "b": v, "s": ["x", "y"]}), "id")
    with pytest.raises(InvalidOperationError, match=r"several vector columns \(a, b\)"):
        other.search("t", vector=[1.0, 2.0])
    assert other.search("t", vector=[1.0, 2.0], column="b", k=1)["id"].to_pylist() == [1]
    empty = Repository.init(tmp_path / "e")
    empty.create_table("t", pa.table({"id": pa.array([], pa.int64()), "s": pa.array([], pa.string())}), "id")
    with pytest.raises(SchemaMismatchError, match="no vector column"):
        empty.search("t", vector=[1.0])


# ---------------------------------------------------------------------------------------------- CLI

def test_cli_search(small, cli, tmp_path):
    repo, vec = small
    q = json.dumps(vec[9].tolist())
    doc = cli("-C", repo.uri, "--json", "search", "docs", "--vector", q, "-k", "3", "--columns", "g,body",
              ok=True).json()
    assert [r["id"] for r in doc] == repo.search("docs", vector=vec[9], k=3)["id"].to_pylist()
    assert list(doc[0]) == ["id", "g", "body", "_distance"] and doc[0]["id"] == 9
    path = tmp_path / "q.json"
    path.write_text(q)
    res = cli("-C", repo.uri, "search", "docs", "--vector", f"@{path}", "-k", "2", "--where", "g = 2",
              "--option", "metric=cosine", "--format", "csv", ok=True)
    lines = [line for line in res.stdout.splitlines() if line]
    assert lines[0] == "id,_distance" and len(lines) == 3
    res = cli("-C", repo.uri, "search", f"{repo.uri}::main::docs", "--vector", q, "-k", "1", ok=True)
    assert "_distance" in res.stdout
    out = tmp_path / "hits.parquet"
    cli("-C", repo.uri, "search", "docs", "--vector", q, "--format", "parquet", "-o", out, ok=True)
    import pyarrow.parquet as pq
    assert pq.read_table(out).num_rows == 10


CLI_BAD = [
    [],
    ["--vector", "[0]", "--text", "x"],
    ["--vector", "[0,1]"],
    ["--vector", "[0,1"],
    ["--vector", '{"a": 1}'],
    ["--vector", "@/nonexistent/q.json"],
    ["--vector", "[NaN, 0, 0, 0, 0, 0, 0, 0]"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "-k", "0"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "-k", "many"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--column", "nope"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--column", "g"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--option", "bogus=1"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--option", "nprobes"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--option", "nprobes=x"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--where", "nope = 1"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--columns", "zz"],
    ["--vector", "[0,0,0,0,0,0,0,0]", "--ref", "no-such-ref"],
    ["--text", ""],
    ["--text", "apple"],
]


@pytest.mark.parametrize("args", CLI_BAD, ids=[str(i) for i in range(len(CLI_BAD))])
def test_cli_bad_input_exit_2_one_line(small, cli, args):
    repo, _ = small
    res = cli("-C", repo.uri, "search", "docs", *args)
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    assert "Traceback" not in res.stderr + res.stdout and res.stdout == ""
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr


def test_cli_unknown_table_in_a_real_process(small, run_trimerge):
    repo, _ = small
    res = run_trimerge("-C", repo.uri, "--json", "search", "nope", "--vector", "[1]")
    assert res.exit_code == 2 and res.stdout == ""
    assert json.loads(res.stderr)["type"] == "TableNotFoundError"


# ---------------------------------------------------------------------------------------------- indices

@pytest.fixture(scope="module")
def indexed(tmp_path_factory):
    """5,000 clustered 32-d vectors with the default IVF_PQ index and an INVERTED index on body."""
    repo = Repository.init(tmp_path_factory.mktemp("indexed") / "r")
    vec = vectors(5000, 32, seed=6, clusters=50)
    repo.create_table("docs", docs_table(vec), "id")
    repo.tags.create("before-index")
    repo.create_index("docs", "emb", "IVF_PQ")
    repo.create_index("docs", "body", "INVERTED")
    return repo, vec


@has_create_index
def test_ivf_pq_recall_with_default_refine(indexed):
    repo, vec = indexed
    rng = np.random.default_rng(7)
    queries = vec[rng.integers(0, len(vec), 40)] + 0.3 * rng.standard_normal((40, 32)).astype("float32")
    recall = coarse = 0.0
    for q in queries:
        exact = brute(vec, q, 10)
        got = repo.search("docs", vector=q, k=10)
        recall += len(set(got["id"].to_pylist()) & set(exact[0])) / 10
        # Re-ranked distances are exact ones.
        dist = ((vec[got["id"].to_numpy()].astype(np.float64) - q) ** 2).sum(1)
        np.testing.assert_allclose(got["_distance"].to_numpy(), dist, rtol=1e-4, atol=1e-4)
        flat = repo.search("docs", vector=q, k=10, use_index=False)
        assert flat["id"].to_pylist() == exact[0]
        raw = repo.search("docs", vector=q, k=10, refine_factor=None, nprobes=4)
        coarse += len(set(raw["id"].to_pylist()) & set(exact[0])) / 10
    assert DEFAULT_REFINE_FACTOR == 10
    assert recall / len(queries) >= 0.95, recall / len(queries)
    assert coarse < recall  # the PQ codes alone are coarse: the re-ranking is what buys the recall


@has_create_index
def test_indexed_search_finds_rows_written_after_the_index(indexed, tmp_path):
    repo, vec = indexed
    target = np.full(32, 20.0, dtype=np.float32)
    repo.branches.create("late")
    repo.upsert("docs", docs_table(target[None, :], start=90_000), branch="late")
    repo.upsert("docs", docs_table(target[None, :] + 0.1, start=12), branch="late")  # an indexed row moves
    got = repo.search("docs", ref="late", vector=target, k=2)
    assert got["id"].to_pylist() == [90_000, 12] and got["_distance"][0].as_py() == 0.0
    assert 90_000 not in repo.search("docs", vector=target, k=5)["id"].to_pylist()
    assert repo.search("docs", ref="late", text="number90000")["id"].to_pylist() == [90_000]
    assert repo.search("docs", text="number90000").num_rows == 0
    # Huge k and refine are bounded before Lance allocates for them (it would abort the process).
    assert repo.search("docs", vector=target, k=MAX_K, refine_factor=1000).num_rows == 5000
    assert repo.search("docs", vector=target, k=3, refine_factor=1000, nprobes=1_000_000).num_rows == 3


@has_create_index
def test_index_metric_and_time_travel(indexed):
    repo, vec = indexed
    q = vec[1]
    with pytest.raises(InvalidOperationError, match="uses metric l2.*use_index=False"):
        repo.search("docs", vector=q, metric="cosine")
    assert repo.search("docs", vector=q, k=3, metric="cosine", use_index=False)["id"].to_pylist() == \
        brute(vec, q, 3, metric="cosine")[0]
    assert repo.search("docs", vector=q, k=3, metric="l2", nprobes=8, ef=50)["id"][0].as_py() == 1
    # Before the index: exact, any metric, and no full text.
    assert repo.search("docs", ref="before-index", vector=q, k=5, metric="dot")["id"].to_pylist() == \
        brute(vec, q, 5, metric="dot")[0]
    with pytest.raises(InvalidOperationError, match="INVERTED"):
        repo.search("docs", ref="before-index", text="apple")


@has_create_index
def test_full_text_search(indexed, cli):
    repo, _ = indexed
    got = repo.search("docs", text="walnut", k=5, columns=["body"])
    assert got.column_names == ["id", "body", "_score"] and got.num_rows == 5
    assert all("walnut" in b for b in got["body"].to_pylist())
    scores = got["_score"].to_pylist()
    assert scores == sorted(scores, reverse=True)
    assert repo.search("docs", text="number42", column="body")["id"].to_pylist() == [42]
    filtered = repo.search("docs", text="walnut", k=20, where="g = 2", columns=["g"])
    assert filtered.num_rows == 20 and set(filtered["g"].to_pylist()) == {2}  # prefilter: still k rows
    assert repo.search("docs", text="zzzzunknown").num_rows == 0
    with pytest.raises(SchemaMismatchError, match="column .emb. is"):
        repo.search("docs", text="walnut", column="emb")
    doc = cli("-C", repo.uri, "--json", "search", "docs", "--text", "number7", ok=True).json()
    assert doc == [{"id": 7, "_score": doc[0]["_score"]}]


@has_create_index
def test_hnsw_ef_and_refine(tmp_path):
    repo = Repository.init(tmp_path / "r")
    vec = vectors(300, 4, seed=8)
    repo.create_table("docs", docs_table(vec), "id")
    repo.create_index("docs", "emb", "IVF_HNSW_SQ")
    q = vec[2]
    assert repo.search("docs", vector=q, k=5)["id"].to_pylist() == brute(vec, q, 5)[0]
    # Lance's HNSW needs ef >= k * refine_factor: a given ef lowers the default re-ranking ...
    assert repo.search("docs", vector=q, k=5, ef=20)["id"][0].as_py() == 2
    # ... and an explicit pair that breaks the rule is refused before Lance sees it.
    with pytest.raises(InvalidOperationError, match="at least k \\* refine_factor = 50"):
        repo.search("docs", vector=q, k=5, ef=20, refine_factor=10)
    assert repo.search("docs", vector=q, k=MAX_K, ef=1_000_000).num_rows == 300


@pytest.mark.s3
def test_search_on_an_object_store(s3_uri):
    uri, options = s3_uri
    repo = Repository.init(uri, storage_options=options)
    vec = vectors(60, DIM, seed=9)
    repo.create_table("docs", docs_table(vec), "id")
    repo.branches.create("dev")
    repo.upsert("docs", docs_table(np.full((1, DIM), 7.0, dtype=np.float32), start=500), branch="dev")
    assert repo.search("docs", vector=vec[4], k=3)["id"].to_pylist() == brute(vec, vec[4], 3)[0]
    assert repo.search("docs", ref="dev", vector=[7.0] * DIM, k=1)["id"].to_pylist() == [500]
    if hasattr(Repository, "create_index"):
        repo.create_index("docs", "body", "INVERTED", branch="dev")
        assert repo.search("docs", ref="dev", text="number500")["id"].to_pylist() == [500]
