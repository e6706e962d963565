"""trimerge as a Lance Namespace: LanceDB and pylance open any ref's tables, exactly; writes are refused.

One repository (module fixture) with history on main, a tag, a branch with a forked table and a
table only on the branch; every ref is opened through ``lance_namespace.connect("trimerge", ...)``
and ``lancedb.connect_namespace("trimerge", ...)`` and compared with ``repo.read``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lance
import lance_namespace as ln
import pyarrow as pa
import pytest

import trimerge

lancedb = pytest.importorskip("lancedb")


def vectors(ids: list[int]) -> pa.Array:
    return pa.array([[float(i), float(i) / 2] for i in ids], pa.list_(pa.float32(), 2))


def items(ids: list[int], suffix: str = "") -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"item{i}{suffix}" for i in ids], "vec": vectors(ids)})


def build(uri: str, options: dict | None = None) -> trimerge.Repository:
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("items", items([1, 2, 3, 4]), primary_key="id")
    repo.upsert("items", items([2], " v2"))
    repo.tags.create("v1")
    repo.branches.create("feat", from_ref="main")
    repo.upsert("items", items([5]), branch="feat")                    # forks items on feat
    repo.create_table("extra", pa.table({"k": [1, 2]}), primary_key="k", branch="feat")
    repo.upsert("items", items([3], " feat"), branch="feat")
    repo.delete("items", "id = 1")                                     # main moves on
    return repo


def rows(table: pa.Table) -> list[dict]:
    return sorted(table.select(["id", "name"]).to_pylist(), key=lambda r: r["id"])


REFS = ["main", "main~1", "v1", "feat", "feat~1"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> trimerge.Repository:
    return build(str(tmp_path_factory.mktemp("ns") / "repo"))


def describe(ns, table: str, **kw) -> ln.DescribeTableResponse:
    return ns.describe_table(ln.DescribeTableRequest(id=[table] if isinstance(table, str) else table, **kw))


@pytest.mark.parametrize("ref", REFS)
def test_every_ref_lists_and_opens_exactly_its_data(repo, ref):
    ns = ln.connect("trimerge", {"root": repo.uri, "ref": ref})
    assert ns.list_tables(ln.ListTablesRequest(id=[])).tables == repo.tables(ref)
    want = rows(repo.read("items", ref=ref))
    d = describe(ns, "items")
    assert d.version == repo.table_version("items", ref).version
    pinned = lance.dataset(namespace_client=ns, table_id=["items"], version=d.version)
    assert rows(pinned.to_table()) == want
    db = lancedb.connect_namespace("trimerge", {"root": repo.uri, "ref": ref})
    assert list(db.list_tables().tables) == repo.tables(ref)
    if d.properties["trimerge.exact_latest"] == "true":
        table = db.open_table("items")
        assert rows(lance.dataset(namespace_client=ns, table_id=["items"]).to_table()) == want
    else:  # an older state of a forked table: the client applies the described version
        table = db.open_table("items", version=d.version)
    assert rows(table.to_arrow()) == want
    # LanceDB's filters and vector search run on the ref's data
    assert rows(table.search().where("id >= 2").to_arrow()) == [r for r in want if r["id"] >= 2]
    hits = table.search([3.0, 1.5]).limit(1).to_arrow()
    assert hits["id"].to_pylist() == [3] and hits["name"].to_pylist() == [r["name"] for r in want if r["id"] == 3]


def test_branch_head_and_old_states_are_described_as_such(repo):
    ns = ln.connect("trimerge", {"root": repo.uri})
    on_main = describe(ns, "items")
    assert on_main.managed_versioning is True and on_main.location == repo.dataset_path(repo.table_version("items"))
    fork = describe(ns, "items", branch="feat")
    tv = repo.table_version("items", "feat")
    # a fork's state is served managed from a pinned location (a shallow clone of exactly that version)
    assert fork.managed_versioning is True and fork.properties["trimerge.pinned"] == "true"
    assert fork.location.endswith(f"/_trimerge/served/{tv.dataset}/{tv.lance_branch}/v{tv.version}")
    older = describe(ns, ["feat~1", "items"])
    assert older.managed_versioning is True and older.location != fork.location
    assert {fork.properties["trimerge.exact_latest"], older.properties["trimerge.exact_latest"]} == {"true"}


def test_branch_and_tag_of_the_request_are_trimerge_refs(repo):
    ns = ln.connect("trimerge", {"root": repo.uri, "ref": "main"})
    assert describe(ns, "extra", branch="feat").properties["trimerge.ref"] == "feat"
    assert describe(ns, "items", tag="v1").version == repo.table_version("items", "v1").version
    assert describe(ns, "items", branch="main").version == repo.table_version("items", "main").version
    with pytest.raises(ln.TableNotFoundError, match="no table 'extra' at main"):
        describe(ns, "extra")
    with pytest.raises(ln.TableBranchNotFoundError, match="nope"):
        describe(ns, "items", branch="nope")
    with pytest.raises(ln.TableTagNotFoundError, match="nope"):
        describe(ns, "items", tag="nope")
    with pytest.raises(ln.InvalidInputError, match="not both"):
        describe(ns, "items", branch="feat", tag="v1")
    with pytest.raises(ln.TableVersionNotFoundError, match="open another ref"):
        describe(ns, "items", version=1)


def test_child_namespaces_are_refs(repo):
    ns = ln.connect("trimerge", {"root": repo.uri})
    assert set(ns.list_namespaces(ln.ListNamespacesRequest(id=[])).namespaces) == {"feat", "main", "v1"}
    assert ns.list_tables(ln.ListTablesRequest(id=["feat"])).tables == ["extra", "items"]
    assert ns.describe_namespace(ln.DescribeNamespaceRequest(id=["main~2"])).properties["trimerge.commit"] == \
        repo.resolve("main~2").id
    ns.table_exists(ln.TableExistsRequest(id=["v1", "items"]))
    assert ns.count_table_rows(ln.CountTableRowsRequest(id=["main~1", "items"])).count == 4
    db = lancedb.connect_namespace("trimerge", {"root": repo.uri})
    assert rows(db.open_table("items", namespace_path=["main~2"]).to_arrow()) == rows(repo.read("items", "main~2"))
    with pytest.raises(ln.NamespaceNotFoundError, match="nope"):
        ns.list_tables(ln.ListTablesRequest(id=["nope"]))
    with pytest.raises(ln.TableNotFoundError):
        ns.table_exists(ln.TableExistsRequest(id=["main", "nope"]))


def files(root: str) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in Path(root).rglob("*") if p.is_file()}


def test_bad_input_raises_namespace_errors_and_writes_nothing(repo, tmp_path):
    before = files(repo.uri)
    with pytest.raises(ln.InvalidInputError, match="no trimerge repository"):
        trimerge.TrimergeNamespace(root=str(tmp_path))
    with pytest.raises(ValueError, match="no trimerge repository"):  # connect() wraps constructor errors
        ln.connect("trimerge", {"root": str(tmp_path / "absent")})
    with pytest.raises(ln.InvalidInputError, match="ref='nope~3' does not resolve"):
        trimerge.TrimergeNamespace(root=repo.uri, ref="nope~3")
    with pytest.raises(ln.InvalidInputError, match="'root'"):
        trimerge.TrimergeNamespace()
    ns = trimerge.TrimergeNamespace(root=repo.uri, ref="v1")
    with pytest.raises(ln.TableNotFoundError, match="no table 'nope' at v1"):
        describe(ns, "nope")
    with pytest.raises(ln.UnsupportedOperationError, match="read-only"):
        ns.create_table(ln.CreateTableRequest(id=["new"]), b"")
    with pytest.raises(ln.UnsupportedOperationError, match="read-only"):
        ns.drop_table(ln.DropTableRequest(id=["items"]))
    assert files(repo.uri) == before
    assert not list(Path(tmp_path).iterdir())


def test_lancedb_writes_become_commits_on_a_branch_and_are_refused_elsewhere(tmp_path):
    repo = build(str(tmp_path / "repo"))
    db = lancedb.connect_namespace("trimerge", {"root": repo.uri})
    db.open_table("items").add(items([9]))  # Lance asks the namespace to commit: one trimerge commit on main
    fresh = trimerge.Repository.open(repo.uri)
    assert [r["id"] for r in rows(fresh.read("items"))] == [2, 3, 4, 9] and fresh.fsck().ok
    before = rows(fresh.read("items", "v1"))
    tagged = lancedb.connect_namespace("trimerge", {"root": repo.uri, "ref": "v1"}).open_table("items")
    # a tag is a fixed state: refused (Lance reports the refused commit's outcome as unknown)
    with pytest.raises(RuntimeError, match="Commit result for version .* is unknown"):
        tagged.add(items([10]))
    assert rows(trimerge.Repository.open(repo.uri).read("items", "v1")) == before
    assert rows(lancedb.connect_namespace("trimerge", {"root": repo.uri, "ref": "v1"})
                .open_table("items").to_arrow()) == before


def test_registered_when_lance_namespace_is_imported_after_trimerge(repo):
    code = ("import sys, trimerge; assert 'lance_namespace' not in sys.modules; import lance_namespace as ln; "
            f"ns = ln.connect('trimerge', {{'root': {repo.uri!r}, 'ref': 'feat'}}); "
            "print(ns.list_tables(ln.ListTablesRequest(id=[])).tables)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['extra', 'items']"


@pytest.mark.s3
def test_on_the_s3_server_with_storage_options(s3_uri):
    uri, options = s3_uri
    repo = build(uri, options)
    props = {"root": uri, "ref": "feat", **options}
    ns = ln.connect("trimerge", props)
    d = describe(ns, "items")
    assert d.location.startswith("s3://") and d.storage_options == options
    db = lancedb.connect_namespace("trimerge", props)
    assert rows(db.open_table("items").to_arrow()) == rows(repo.read("items", "feat"))
    main = lancedb.connect_namespace("trimerge", {**props, "ref": "main~1"})
    assert rows(main.open_table("items").to_arrow()) == rows(repo.read("items", "main~1"))
