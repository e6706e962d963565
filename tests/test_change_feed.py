"""The change feed (issue 53): ``repo.changes(consumer, branch)`` and ``trimerge changes``.

A consumer's first batch is every row; then the rows changed since its checkpoint, the same until
it acks. Consumers that apply batches to a plain Lance dataset and to a DuckDB table end equal to
the branch — after a scripted history, and after random histories of upserts, deletes, merges,
resets, tables created and dropped, and consumers dying before their ack (a model test).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import lance
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import trimerge
from trimerge.hooks.feed import ConsumerExpiredError
from trimerge.lineage.errors import BranchNotFoundError, ConcurrentWriteError, InvalidNameError
from trimerge.merge import merge


@pytest.fixture(autouse=True)
def quiet_writer(monkeypatch):
    monkeypatch.setenv("TRIMERGE_HOOKS", "off")


@pytest.fixture
def repo(tmp_path):
    r = trimerge.Repository.init(tmp_path / "repo")
    r.create_table("t", pa.table({"id": [1, 2, 3], "v": [10, 20, 30]}), primary_key="id")
    return r


def table_rows(repo: trimerge.Repository, table: str, ref: str = "main") -> list[dict]:
    return sorted(repo.read(table, ref).to_pylist(), key=lambda r: tuple(r.values()))


def test_first_read_is_every_row_then_the_changes_until_acked(repo):
    first = repo.changes("wh")
    assert first.from_commit is None and first.to_commit == repo.resolve("main").id and not first.full
    assert first.tables["t"].column("change").to_pylist() == ["insert"] * 3
    assert first.primary_keys == {"t": ("id",)} and first.counts() == {"t": {"inserted": 3, "deleted": 0, "updated": 0}}
    first.ack()
    assert repo.changes("wh").empty and dict(repo.changes("wh").tables) == {}
    start = repo.resolve("main").id
    repo.upsert("t", pa.table({"id": [2, 4], "v": [21, 40]}))
    repo.delete("t", "id = 1")
    batch = repo.changes("wh")
    again = repo.changes("wh")
    assert (batch.from_commit, batch.to_commit) == (start, repo.resolve("main").id)
    assert batch.tables["t"].equals(again.tables["t"])  # the same until acked
    got = sorted(batch.tables["t"].to_pylist(), key=lambda r: r["id"])
    assert got == [
        {"id": 1, "change": "delete", "changed_columns": [], "before": {"v": 10}, "after": None},
        {"id": 2, "change": "update", "changed_columns": ["v"], "before": {"v": 20}, "after": {"v": 21}},
        {"id": 4, "change": "insert", "changed_columns": [], "before": None, "after": {"v": 40}}]
    assert batch.commits == [c.id for c in repo.log("main", limit=2)]
    batch.ack()
    batch.ack()  # twice: a no-op
    assert repo.changes("wh").empty
    assert repo.changes("other").counts()["t"]["inserted"] == 3  # consumers are independent
    assert repo.changes("wh", full=True).tables["t"].num_rows == 3


def test_branches_are_separate_and_acks_race(repo):
    repo.branches.create("feat")
    repo.upsert("t", pa.table({"id": [5], "v": [50]}), branch="feat")
    assert repo.changes("c", branch="feat").tables["t"].num_rows == 4
    a, b = repo.changes("c"), repo.changes("c")
    a.ack()
    repo.upsert("t", pa.table({"id": [6], "v": [60]}))
    c = repo.changes("c")
    c.ack()
    with pytest.raises(ConcurrentWriteError):
        b.ack()  # read before a's ack, acked after c moved it further
    assert repo.changes("c").empty and not repo.changes("c", branch="feat").empty


def test_tables_added_and_dropped(repo):
    repo.changes("c").ack()
    repo.create_table("u", pa.table({"k": ["a", "b"], "w": [1.5, 2.5]}), primary_key="k")
    batch = repo.changes("c")
    assert list(batch.tables) == ["u"] and batch.dropped == []
    batch.ack()
    repo.drop_table("u")
    batch = repo.changes("c")
    assert batch.dropped == ["u"] and batch.tables["u"].column("change").to_pylist() == ["delete", "delete"]


def apply_to_lance(path: str, batch: Any) -> None:
    """A consumer keeping a plain Lance dataset equal to table ``t``: deletes, then upserts."""
    if "t" not in batch.tables:
        return
    rows = batch.tables["t"]
    gone = [r["id"] for r in rows.to_pylist() if r["change"] in ("delete", "update")]
    fresh = [{"id": r["id"], **r["after"]} for r in rows.to_pylist() if r["change"] in ("insert", "update")]
    if not Path(path).exists():
        lance.write_dataset(pa.Table.from_pylist(fresh), path)
        return
    ds = lance.dataset(path)
    if gone:
        ds.delete(f"id IN ({', '.join(map(str, gone))})")
    if fresh:
        lance.write_dataset(pa.Table.from_pylist(fresh, schema=ds.schema), path, mode="append")


def test_a_consumer_keeps_a_plain_lance_dataset_equal_to_the_branch(repo, tmp_path):
    copy = str(tmp_path / "copy.lance")
    step = 0

    def consume() -> None:
        batch = repo.changes("lance-copy")
        apply_to_lance(copy, batch)
        batch.ack()
        assert sorted(lance.dataset(copy).to_table().to_pylist(), key=lambda r: r["id"]) == table_rows(repo, "t")

    consume()
    repo.branches.create("feat")
    for step in range(3):
        repo.upsert("t", pa.table({"id": [10 + step, 2], "v": [step, 200 + step]}), branch="feat")
        repo.upsert("t", pa.table({"id": [20 + step], "v": [step]}))
        consume()
    repo.delete("t", "id = 1", branch="feat")
    merge("feat", "main", repo=repo)
    consume()
    repo.branches.reset("main", "main~2")
    consume()


# ---------------------------------------------------------------------------------------------- the model test
KEYS = st.integers(1, 8)
OPS = st.one_of(
    st.tuples(st.just("upsert"), st.sampled_from(["main", "feat"]), st.lists(KEYS, min_size=1, max_size=3, unique=True),
              st.integers(-50, 50)),
    st.tuples(st.just("delete"), st.sampled_from(["main", "feat"]), st.lists(KEYS, min_size=1, max_size=3, unique=True)),
    st.tuples(st.just("merge")),
    st.tuples(st.just("reset")),
    st.tuples(st.just("table_u")),
    st.tuples(st.just("consume"), st.booleans()),
)


class DuckConsumer:
    """Applies batches to DuckDB tables in one transaction per batch, committed only with the ack
    (``dies=True``: the consumer dies after applying, before acking: its transaction rolls back)."""

    def __init__(self) -> None:
        self.db = duckdb.connect()
        self.keys: dict[str, tuple[str, ...]] = {}

    def apply(self, repo: trimerge.Repository, dies: bool) -> None:
        """Apply the next batch; unless the consumer dies, check it then equals the batch's end."""
        batch = repo.changes("duck")
        self.db.execute("BEGIN")
        for name in batch.tables:
            if name in batch.dropped:
                self.db.execute(f'DROP TABLE IF EXISTS "{name}"')
                continue
            rows = batch.tables[name]
            key = batch.primary_keys[name]
            after = rows.schema.field("after").type
            if not self.db.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                                   [name]).fetchone()[0]:
                types = {"int64": "BIGINT", "string": "VARCHAR", "double": "DOUBLE"}
                cols = [(k, types[str(rows.schema.field(k).type)]) for k in key]
                cols += [(f.name, types[str(f.type)]) for f in after]
                self.db.execute(f'CREATE TABLE "{name}" ({", ".join(f"{c} {t}" for c, t in cols)})')
            for r in rows.to_pylist():
                where = " AND ".join(f"{k} = ?" for k in key)
                self.db.execute(f'DELETE FROM "{name}" WHERE {where}', [r[k] for k in key])
                if r["change"] != "delete":
                    values = [r[k] for k in key] + [r["after"][f.name] for f in after]
                    self.db.execute(f'INSERT INTO "{name}" VALUES ({", ".join("?" * len(values))})', values)
        if dies:
            self.db.execute("ROLLBACK")
            return
        batch.ack()
        self.db.execute("COMMIT")
        end = repo.commit(batch.to_commit)
        assert self.tables() == set(end.tables)
        for name in end.tables:
            assert self.rows(name) == table_rows(repo, name, end.id), name

    def rows(self, name: str) -> list[dict]:
        cur = self.db.execute(f'SELECT * FROM "{name}"')
        names = [d[0] for d in cur.description]
        return sorted((dict(zip(names, r)) for r in cur.fetchall()), key=lambda r: tuple(r.values()))

    def tables(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT table_name FROM information_schema.tables").fetchall()}


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=16))
def test_a_duckdb_consumer_ends_equal_to_the_branch_after_random_histories(ops):
    with tempfile.TemporaryDirectory() as tmp:
        repo = trimerge.Repository.init(Path(tmp) / "repo")
        repo.create_table("t", pa.table({"id": [1, 2], "v": [1, 2]}), primary_key="id")
        repo.branches.create("feat")
        consumer = DuckConsumer()
        consumer.apply(repo, dies=False)  # in sync from the start: later changes are real updates
        for op in ops:
            kind = op[0]
            if kind == "upsert":
                repo.upsert("t", pa.table({"id": op[2], "v": [op[3]] * len(op[2])}), branch=op[1])
            elif kind == "delete":
                repo.delete("t", f"id IN ({', '.join(map(str, op[2]))})", branch=op[1])
            elif kind == "merge":
                merge("feat", "main", repo=repo, strategy="source-wins")
            elif kind == "reset" and "t" in repo.resolve("main~1").tables:  # never back before t was made
                repo.branches.reset("main", "main~1")
            elif kind == "table_u":
                if "u" in repo.tables("main"):
                    repo.drop_table("u")
                else:
                    repo.create_table("u", pa.table({"k": ["x", "y"], "w": [0.5, 1.5]}), primary_key="k")
            elif kind == "consume":
                consumer.apply(repo, dies=op[1])
        consumer.apply(repo, dies=False)
        assert repo.changes("duck").empty
        assert consumer.tables() == set(repo.tables("main"))
        for name in repo.tables("main"):
            assert consumer.rows(name) == table_rows(repo, name)


# ---------------------------------------------------------------------------------------------- retention, CLI
def test_an_expired_consumer_is_told_to_reread_in_full(repo, cli):
    repo.branches.create("side")
    repo.upsert("t", pa.table({"id": [7], "v": [70]}), branch="side")
    batch = repo.changes("c", branch="side", retention="now")
    batch.ack()
    repo.branches.reset("side", "main")  # the checkpoint commit leaves the branch's history
    repo.gc("now")
    with pytest.raises(ConsumerExpiredError) as caught:
        repo.changes("c", branch="side")
    message = str(caught.value)
    assert "full=True" in message and "--full" in message and "\n" not in message
    res = cli("-C", repo.uri, "changes", "c", "--branch", "side")
    assert res.exit_code == 2 and "trimerge changes c --branch side --full" in res.stderr
    full = repo.changes("c", branch="side", full=True)
    assert full.full and full.tables["t"].num_rows == 3
    full.ack()
    assert repo.changes("c", branch="side").empty


def test_a_checkpoint_is_kept_by_gc_within_its_retention(repo):
    repo.branches.create("side")
    repo.upsert("t", pa.table({"id": [7], "v": [70]}), branch="side")
    repo.changes("c", branch="side").ack()  # default retention: 7 days
    repo.branches.reset("side", "main")
    repo.gc("now")
    batch = repo.changes("c", branch="side")
    assert [r["change"] for r in batch.tables["t"].to_pylist()] == ["delete"]


def test_changes_cli(repo, cli, tmp_path):
    res = cli("-C", repo.uri, "changes", "wh", ok=True)
    lines = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["table"], r["id"], r["change"], r["after"]) for r in lines] == \
        [("t", 1, "insert", {"v": 10}), ("t", 2, "insert", {"v": 20}), ("t", 3, "insert", {"v": 30})]
    assert "wh on main: nothing.." in res.stderr and "(acked)" not in res.stderr
    assert len(cli("-C", repo.uri, "changes", "wh", "--ack", ok=True).stdout.splitlines()) == 3
    assert cli("-C", repo.uri, "changes", "wh", ok=True).stdout == ""
    repo.upsert("t", pa.table({"id": [3], "v": [31]}))
    repo.create_table("u", pa.table({"k": ["a"]}), primary_key="k")
    out = tmp_path / "batch"
    cli("-C", repo.uri, "changes", "wh", "--format", "parquet", "-o", out, ok=True)
    import pyarrow.parquet as pq

    assert pq.read_table(out / "t.parquet").to_pylist() == [
        {"id": 3, "change": "update", "changed_columns": ["v"], "before": {"v": 30}, "after": {"v": 31}}]
    meta = json.loads((out / "changes.json").read_text())
    assert meta["files"] == {"t": "t.parquet", "u": "u.parquet"} and meta["primary_keys"] == {"t": ["id"], "u": ["k"]}
    cli("-C", repo.uri, "changes", "wh", "--format", "arrow", "-o", tmp_path / "arrow", "--ack", ok=True)
    import pyarrow.ipc as ipc

    assert ipc.open_file(str(tmp_path / "arrow" / "t.arrow")).read_all().num_rows == 1
    assert cli("-C", repo.uri, "changes", "wh", ok=True).stdout == ""


@pytest.mark.parametrize("args, text", [
    (["changes", "bad/name"], "consumer name"),
    (["changes", ""], "consumer name"),
    (["changes", "c", "--branch", "nope"], "no branch"),
    (["changes", "c", "--format", "parquet"], "-o DIRECTORY"),
    (["changes", "c", "--retention", "soon", "--ack"], "retention"),
])
def test_bad_feed_input_is_exit_2_and_changes_nothing(repo, cli, args, text):
    res = cli("-C", repo.uri, *args)
    assert res.exit_code == 2 and text in res.stderr
    assert not (Path(repo.uri) / "_trimerge" / "feeds").exists()


def test_bad_feed_input_through_the_api(repo):
    with pytest.raises(InvalidNameError):
        repo.changes("a b")
    with pytest.raises(BranchNotFoundError):
        repo.changes("c", branch="nope")
    with pytest.raises(trimerge.InvalidOperationError):
        repo.changes("c", full="yes")


@pytest.mark.spark
def test_a_spark_reader_of_the_feed(repo, spark):
    repo.changes("c").ack()
    repo.upsert("t", pa.table({"id": [2, 9], "v": [22, 90]}))
    frame = repo.changes("c").to_spark("t", spark)
    got = sorted((r["id"], r["change"]) for r in frame.collect())
    assert got == [(2, "update"), (9, "insert")]
