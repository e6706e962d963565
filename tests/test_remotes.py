"""Remotes (issue 41): clone, fetch, pull and push between local repositories; remote-tracking refs
in ref expressions; transfer cost; never two writers of one Lance version; crash safety; bad input.
The same on the S3 test server: tests/test_remotes_s3.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import trimerge
from trimerge.diff import diff
from trimerge.lineage.errors import (
    AlreadyExistsError,
    InvalidNameError,
    NonFastForwardError,
    ProtectedBranchError,
    RemoteError,
)
from trimerge.lineage.tables.relocation import rebase_manifest, rebase_transaction

from conftest import T, run_trimerge_subprocess


def rows(repo, table="t", ref=None):
    return sorted(repo.read(table, ref=ref).to_pylist(), key=lambda r: r["k"])


def make_origin(path: Path, n: int = 10) -> trimerge.Repository:
    repo = trimerge.Repository.init(path)
    repo.create_table("t", T(k=list(range(n)), v=[f"v{i}" for i in range(n)]), primary_key="k")
    repo.upsert("t", T(k=[0], v=["zero"]))
    repo.branches.create("dev/x")
    repo.upsert("t", T(k=[1], v=["one-dev"]), branch="dev/x")
    repo.create_table("u", T(k=[1, 2], w=[1.0, 2.0]), primary_key="k", branch="dev/x")
    repo.tags.create("v1", "dev/x")
    return repo


@pytest.fixture
def origin(tmp_path):
    return make_origin(tmp_path / "origin")


def files_below(root: Path) -> dict[str, bytes]:
    """Every file of a repository (hints and leases left out: they change without meaning)."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.name.startswith(".tmp-"):
            out[p.relative_to(root).as_posix()] = p.read_bytes()
    return out


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for key, data in files_below(root).items():
        h.update(key.encode() + b"\0" + data)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- clone
@pytest.mark.parametrize("stream_bytes", [None, 1], ids=["in-memory", "streamed"])
def test_clone_reads_every_ref_and_names_nothing_of_the_source(origin, tmp_path, monkeypatch, stream_bytes):
    if stream_bytes is not None:
        monkeypatch.setattr("trimerge.remotes.copying.STREAM_BYTES", stream_bytes)
        monkeypatch.setattr("trimerge.remotes.transfer.STREAM_BYTES", stream_bytes)
    result = trimerge.Repository.clone(origin.uri, tmp_path / "copy")
    copy = result.repository
    assert result.commits == len(origin.all_commits()) and result.files > 0 and result.bytes > 0
    assert [r.name for r in copy.remotes.list()] == ["origin"] and copy.remotes.get("origin").uri == origin.uri
    assert copy.branches.names() == ["main"]
    assert copy.resolve("main").id == origin.resolve("main").id
    assert copy.resolve("origin/dev/x").id == origin.resolve("dev/x").id
    assert copy.resolve("v1").id == origin.resolve("v1").id
    for ref in ("main", "origin/main", "origin/dev/x", "v1", "origin/main~1"):
        for table in copy.tables(ref):
            theirs = ref.removeprefix("origin/")
            assert copy.read(table, ref=ref).equals(origin.read(table, ref=theirs)), (ref, table)
    assert copy.fsck().ok
    for key, data in files_below(Path(copy.uri) / "tables").items():
        assert origin.uri.encode() not in data, key  # fork manifests were rebased
    # A fresh incarnation: the clone's main owns none of the Lance branches it copied.
    assert copy.branches.get("main").id != origin.branches.get("main").id
    # The clone writes, branches and merges.
    copy.upsert("t", T(k=[5], v=["five"]))
    copy.branches.create("feat", "origin/dev/x")
    copy.upsert("u", T(k=[3], w=[3.0]), branch="feat")
    from trimerge.merge import merge

    assert merge("feat", "main", repo=copy).status == "merged"
    assert {r["k"]: r["v"] for r in rows(copy)}[5] == "five" and copy.read("u").num_rows == 3
    assert copy.fsck().ok and origin.fsck().ok


@pytest.mark.parametrize("hardlinks", [True, False], ids=["linked", "copied"])
def test_a_local_clone_links_immutable_files_and_both_sides_stay_independent(origin, tmp_path, monkeypatch, hardlinks):
    """As git does for a local source: data files are hard links (no bytes copied); fork manifests,
    which name their repository, are rewritten copies. Writes and gc on either side leave the other whole."""
    if not hardlinks:
        monkeypatch.setenv("TRIMERGE_NO_HARDLINKS", "1")
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    data = [p for p in (Path(copy.uri) / "tables").rglob("*.lance")]
    assert data and all((p.stat().st_nlink > 1) == hardlinks for p in data)
    for p in (Path(copy.uri) / "tables").rglob("*.manifest"):
        if "/tree/" in p.as_posix():
            assert p.stat().st_nlink == 1
    before = digest(Path(origin.uri))
    copy.upsert("t", T(k=[0, 7], v=["changed", "seven"]))
    copy.delete("t", "k = 3")
    copy.gc(retention=0)
    assert digest(Path(origin.uri)) == before and origin.fsck().ok
    assert {r["k"]: r["v"] for r in rows(origin)}[0] == "zero" and copy.fsck().ok
    origin.upsert("t", T(k=[1], v=["origin"]))
    assert {r["k"]: r["v"] for r in rows(copy)}[1] == "v1"


def test_indices_deletions_and_tags_travel(origin, tmp_path):
    origin.create_index("t", "v", "BTREE", name="v_idx")
    origin.delete("t", "k = 9")
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    assert [i.name for i in copy.indices("t")] == ["v_idx"]
    assert copy.read("t", where="v = 'v5'").num_rows == 1 and 9 not in copy.read("t").column("k").to_pylist()
    assert copy.fsck().ok
    origin.branches.create("rel")
    origin.upsert("t", T(k=[5], v=["five"]), branch="rel")
    origin.tags.create("v2", "rel")
    assert copy.fetch().refs[0].ref == "origin/rel" and copy.tags.get_or_none("v2") is None
    assert [r.ref for r in copy.fetch(tags=True).refs] == ["tags/v2"]
    assert copy.read("t", ref="v2").equals(origin.read("t", ref="v2"))
    copy.create_index("t", "k", "BTREE", name="k_idx", branch="main")
    copy.tags.create("clash", "main")
    origin.tags.create("clash", "rel")
    pushed = copy.push(tags=True)
    assert pushed.rejected == ["tags/clash"] and origin.resolve("clash").id == origin.resolve("rel").id
    assert sorted(i.name for i in origin.indices("t")) == ["k_idx", "v_idx"] and origin.fsck().ok


def test_clone_target_must_be_absent_or_empty(origin, tmp_path):
    (tmp_path / "empty").mkdir()
    trimerge.Repository.clone(origin.uri, tmp_path / "empty")
    full = tmp_path / "full"
    full.mkdir()
    (full / "x.txt").write_text("hello")
    with pytest.raises(RemoteError, match="not empty"):
        trimerge.Repository.clone(origin.uri, full)
    assert os.listdir(full) == ["x.txt"]
    # A finished clone of the same source, run again, has nothing to do (issue 50: a clone killed
    # after its last write is no different); of another source, the target is not empty.
    assert trimerge.Repository.clone(origin.uri, tmp_path / "empty").status == "up-to-date"
    other = make_origin(tmp_path / "other")
    with pytest.raises(RemoteError, match="not empty"):
        trimerge.Repository.clone(other.uri, tmp_path / "empty")
    with pytest.raises(RemoteError, match="not a trimerge repository"):
        trimerge.Repository.clone(tmp_path / "nowhere", tmp_path / "c2")
    assert not (tmp_path / "c2").exists()


# ---------------------------------------------------------------------------------------------- refs
def test_remote_tracking_refs_in_ref_expressions_and_diff(origin, tmp_path):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    assert copy.resolve("origin/main~1").id == origin.resolve("main~1").id
    assert copy.resolve("origin/dev/x^").id == origin.resolve("dev/x^").id
    d = diff("origin/main", "origin/dev/x", repo=copy)
    changed = d.tables["t"].rows().to_pylist()
    assert len(changed) == 1
    assert copy.is_ancestor("origin/main", "origin/dev/x")
    # A local branch wins over a remote-tracking ref of the same name, as in git.
    copy.branches.create("origin/main", "origin/dev/x")
    assert copy.resolve("origin/main").id == origin.resolve("dev/x").id
    with pytest.raises(trimerge.RefNotFoundError):
        copy.resolve("origin/nothing")
    with pytest.raises(trimerge.RefNotFoundError):
        copy.resolve("nowhere/main")


def test_remotes_add_list_remove_and_bad_names(origin, tmp_path):
    other = trimerge.Repository.init(tmp_path / "other")
    other.remotes.add("up", origin.uri)
    with pytest.raises(AlreadyExistsError):
        other.remotes.add("up", origin.uri)
    for bad in ("a/b", "", "..", "x y", "-x", "HEAD", "a\nb", "é"):
        with pytest.raises(InvalidNameError):
            other.remotes.add(bad, origin.uri)
    with pytest.raises(RemoteError, match="no remote 'nope'"):
        other.fetch("nope")
    with pytest.raises(RemoteError, match="this repository itself"):
        other.remotes.add("self", other.uri)
    assert [r.name for r in other.remotes.list()] == ["up"]
    # Histories with no commit in common: one clear error, nothing changed.
    before = digest(Path(other.uri))
    with pytest.raises(RemoteError, match="no commit in common"):
        other.fetch("up")
    with pytest.raises(RemoteError, match="no commit in common"):
        other.push("up")
    assert digest(Path(other.uri)) == before
    other.remotes.remove("up")
    assert other.remotes.list() == []


def test_a_plain_copy_is_refused_as_a_remote(origin, tmp_path):
    import shutil

    shutil.copytree(origin.uri, tmp_path / "copy", symlinks=True)
    copy = trimerge.Repository.open(tmp_path / "copy")
    copy.remotes.add("o", origin.uri)
    with pytest.raises(RemoteError, match="copies of one repository"):
        copy.fetch("o")
    with pytest.raises(RemoteError, match="copies of one repository"):
        copy.push("o")


# ---------------------------------------------------------------------------------------------- pull
def test_pull_fast_forwards_then_merges_a_diverged_branch(origin, tmp_path):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    origin.upsert("t", T(k=[2], v=["two-origin"]))
    r = copy.pull()
    assert r.status == "fast-forward" and r.commits == 1
    assert copy.resolve("main").id == origin.resolve("main").id
    assert [u.ref for u in r.refs] == ["origin/main", "main"]
    assert copy.pull().status == "up-to-date"
    # Diverged: a merge commit with both tips as parents.
    origin.upsert("t", T(k=[3], v=["three-origin"]))
    copy.upsert("t", T(k=[4], v=["four-copy"]))
    local_tip = copy.resolve("main").id
    r = copy.pull("origin", "main")
    assert r.status == "merged"
    merged = copy.resolve("main")
    assert merged.parents == (local_tip, origin.resolve("main").id)
    values = {x["k"]: x["v"] for x in rows(copy)}
    assert values[3] == "three-origin" and values[4] == "four-copy" and values[2] == "two-origin"
    # A branch only the remote has is created from it.
    assert copy.pull("origin", "dev/x").status == "created"
    assert copy.resolve("dev/x").id == origin.resolve("dev/x").id


def test_pull_with_conflicts_reports_them_like_a_merge(origin, tmp_path):
    from trimerge.merge import MergeConflictError

    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    origin.upsert("t", T(k=[3], v=["origin"]))
    copy.upsert("t", T(k=[3], v=["copy"]))
    tip = copy.resolve("main").id
    with pytest.raises(MergeConflictError):
        copy.pull()
    assert copy.resolve("main").id == tip  # nothing merged, the tracking ref moved
    assert copy.resolve("origin/main").id == origin.resolve("main").id
    res = run_trimerge_subprocess("-C", copy.uri, "pull")
    assert res.exit_code == 1 and len(res.stderr.strip().splitlines()) == 1
    assert "trimerge merge origin/main" in res.stderr and copy.resolve("main").id == tip
    from trimerge.merge import merge

    assert merge("origin/main", "main", repo=copy, strategy="source-wins").status == "merged"
    assert copy.push().status == "fast-forward"


# ---------------------------------------------------------------------------------------------- push
def test_push_fast_forward_new_branch_and_tags(origin, tmp_path):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    copy.upsert("t", T(k=[7], v=["seven"]))
    r = copy.push()
    assert r.status == "fast-forward" and r.commits == 1
    assert origin.resolve("main").id == copy.resolve("main").id == copy.resolve("origin/main").id
    assert {x["k"]: x["v"] for x in rows(origin)}[7] == "seven"
    assert copy.push().status == "up-to-date"
    copy.branches.create("feature")
    copy.upsert("t", T(k=[8], v=["eight"]), branch="feature")
    copy.tags.create("v2", "feature")
    r = copy.push("origin", "feature", tags=True)
    assert r.status == "created"
    assert origin.resolve("feature").id == copy.resolve("feature").id
    assert origin.resolve("v2").id == copy.resolve("v2").id
    # The new remote branch is a new incarnation: it owns nothing the clone wrote.
    assert origin.branches.get("feature").id != copy.branches.get("feature").id
    origin.upsert("t", T(k=[9], v=["nine"]), branch="feature")  # the remote forks, never appends to ours
    tv = origin.table_version("t", "feature")
    assert tv.owner == origin.branches.get("feature").id
    assert tv.lance_branch != copy.table_version("t", "feature").lance_branch
    assert origin.fsck().ok and copy.fsck().ok


def test_non_fast_forward_push_is_refused_and_changes_nothing(origin, tmp_path):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    origin.upsert("t", T(k=[2], v=["origin"]))
    copy.upsert("t", T(k=[3], v=["copy"]))
    before = (digest(Path(origin.uri)), digest(Path(copy.uri)))
    with pytest.raises(NonFastForwardError, match="fetch and merge first"):
        copy.push()
    assert (digest(Path(origin.uri)), digest(Path(copy.uri))) == before
    res = run_trimerge_subprocess("-C", copy.uri, "push")
    assert res.exit_code == 1 and "fetch and merge first" in res.stderr and len(res.stderr.splitlines()) == 1
    assert (digest(Path(origin.uri)), digest(Path(copy.uri))) == before
    # fetch + merge, then the push goes through.
    copy.pull()
    assert copy.push().status == "fast-forward"
    assert {x["k"]: x["v"] for x in rows(origin)}[3] == "copy"


def test_two_pushes_racing_one_wins_the_other_retries(origin, tmp_path):
    from trimerge.lineage.errors import ConcurrentWriteError
    from trimerge.lineage.storage import faults

    a = trimerge.Repository.clone(origin.uri, tmp_path / "a").repository
    b = trimerge.Repository.clone(origin.uri, tmp_path / "b").repository
    a.upsert("t", T(k=[2], v=["a"]))
    b.upsert("t", T(k=[3], v=["b"]))
    won = []
    with faults.at("push_before_ref", lambda: won.append(b.push())):
        with pytest.raises(ConcurrentWriteError, match="moved during the push") as lost:
            a.push()  # b's push lands between a's upload and a's compare-and-swap
    assert lost.value.exit_code == 3 and won[0].status == "fast-forward"
    assert origin.resolve("main").id == b.resolve("main").id
    assert a.resolve("origin/main").id != origin.resolve("main").id
    with pytest.raises(NonFastForwardError):
        a.push()
    a.pull()
    assert a.push().status == "fast-forward"
    values = {x["k"]: x["v"] for x in rows(origin)}
    assert (values[2], values[3]) == ("a", "b") and origin.fsck().ok and not origin.docs.list("incoming")


def test_push_to_a_protected_remote_branch_is_refused(origin, tmp_path):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    origin.branches.protect("main")
    copy.upsert("t", T(k=[2], v=["x"]))
    before = digest(Path(origin.uri))
    with pytest.raises(ProtectedBranchError, match="merge it there"):
        copy.push()
    assert digest(Path(origin.uri)) == before
    copy.branches.create("review")
    assert copy.push("origin", "review").status == "created"


# ---------------------------------------------------------------------------------------------- owners
def _normalised(repo_root: Path) -> dict[str, bytes]:
    """Lance version files of a repository, fork paths spelled without the repository's own root."""
    out = {}
    root = str(repo_root / "tables")
    for key, data in files_below(repo_root / "tables").items():
        if key.endswith("latest_version_hint.json") or key.startswith("_") or "/_refs/" in key:
            continue
        if key.endswith(".manifest"):
            data = rebase_manifest(data, root, "/ROOT")
        elif key.endswith(".txn"):
            data = rebase_transaction(data, root, "/ROOT")
        out[key] = data
    return out


def test_two_clones_writing_main_never_mint_the_same_lance_version(origin, tmp_path):
    a = trimerge.Repository.clone(origin.uri, tmp_path / "a").repository
    b = trimerge.Repository.clone(origin.uri, tmp_path / "b").repository
    a.upsert("t", T(k=[1], v=["from-a"]))
    b.upsert("t", T(k=[2], v=["from-b"]))
    origin.upsert("t", T(k=[6], v=["from-origin"]))  # the origin writes main's table as well
    a.pull()
    a.push()
    with pytest.raises(NonFastForwardError):
        b.push()
    b.pull()
    b.push()
    a.pull()
    a.upsert("t", T(k=[3], v=["again-a"]))
    a.push()
    origin.upsert("t", T(k=[4], v=["again-origin"]))
    b.pull()
    values = {x["k"]: x["v"] for x in rows(b)}
    assert (values[1], values[2], values[3], values[4], values[6]) == ("from-a", "from-b", "again-a", "again-origin",
                                                                      "from-origin")
    # Every Lance version path that exists in several repositories holds the same bytes in each.
    seen: dict[str, bytes] = {}
    shared = 0
    for root in (Path(origin.uri), Path(a.uri), Path(b.uri)):
        for key, data in _normalised(root).items():
            if key in seen:
                shared += 1
                assert seen[key] == data, f"{key} differs between repositories: two writers of one version"
            seen[key] = data
    assert shared > 0
    # Each Lance branch is written by the repository whose branch owns it.
    for repo in (origin, a, b):
        assert repo.fsck().ok


# ---------------------------------------------------------------------------------------------- gc
def test_gc_keeps_remote_tracking_refs_and_what_a_push_in_flight_uploaded(origin, tmp_path):
    from trimerge.lineage.storage import faults

    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    origin.upsert("t", T(k=[2], v=["fetched"]))
    copy.fetch()
    copy.gc("now")  # origin/main is a root, as in git
    assert {x["k"]: x["v"] for x in rows(copy, ref="origin/main")}[2] == "fetched"
    copy.pull()
    copy.branches.create("feat")
    copy.upsert("t", T(k=[3], v=["pushed"]), branch="feat")
    copy.create_table("n", T(k=[1], x=[1]), primary_key="k", branch="feat")
    reports = []
    with faults.at("push_before_ref", lambda: reports.append(trimerge.Repository.open(origin.uri).gc("now"))):
        assert copy.push("origin", "feat").status == "created"
    assert reports and not reports[0].datasets_removed and not reports[0].forks_removed
    assert {x["k"]: x["v"] for x in rows(origin, ref="feat")}[3] == "pushed"
    assert origin.read("n", ref="feat").num_rows == 1
    assert origin.fsck().ok and not origin.docs.list("incoming")
    origin.gc("now")
    assert origin.fsck().ok and origin.read("n", ref="feat").num_rows == 1


# ---------------------------------------------------------------------------------------------- cost
def test_one_row_push_and_pull_of_a_200k_row_table_move_little(tmp_path):
    origin = trimerge.Repository.init(tmp_path / "origin")
    n = 200_000
    origin.create_table("big", pa.table({"k": pa.array(range(n), pa.int64()),
                                         "v": pa.array([f"value-{i}" for i in range(n)])}), primary_key="k")
    a = trimerge.Repository.clone(origin.uri, tmp_path / "a").repository
    b = trimerge.Repository.clone(origin.uri, tmp_path / "b").repository
    a.upsert("big", pa.table({"k": [12345], "v": ["changed"]}))
    size_before = sum(len(d) for d in files_below(Path(origin.uri)).values())
    pushed = a.push()
    size_after = sum(len(d) for d in files_below(Path(origin.uri)).values())
    pulled = b.pull()
    print(f"one-row push: {pushed.bytes} bytes in {pushed.files} files + {pushed.commits} commit; "
          f"remote grew {size_after - size_before} bytes; pull: {pulled.bytes} bytes in {pulled.files} files")
    assert pushed.commits == 1 and pulled.commits == 1
    assert pushed.bytes < 250_000 and pulled.bytes < 250_000
    assert size_after - size_before < 250_000
    assert b.read("big", where="k = 12345").column("v").to_pylist() == ["changed"]
    assert b.read("big").num_rows == n
    again = a.push()
    assert again.bytes == 0 and again.files == 0


# ---------------------------------------------------------------------------------------------- crashes
def _crash(args: list[str], point: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRIMERGE_CRASH_AT": point}
    env.pop("TRIMERGE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "trimerge.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("point", ["transfer_file_copied", "transfer_data_copied", "transfer_manifests_copied",
                                   "transfer_commit_copied", "clone_before_refs"])
def test_killed_clone_is_finished_by_a_rerun(origin, tmp_path, point):
    target = tmp_path / "copy"
    crashed = _crash(["clone", origin.uri, str(target)], point, tmp_path)
    assert crashed.returncode == -9, crashed.stderr
    with pytest.raises(trimerge.TrimergeError):
        trimerge.Repository.open(target)  # no repository yet: repo.json is written last
    again = run_trimerge_subprocess("clone", origin.uri, target, cwd=tmp_path)
    assert again.exit_code == 0, again.stderr
    copy = trimerge.Repository.open(target)
    assert copy.fsck().ok
    assert copy.resolve("origin/dev/x").id == origin.resolve("dev/x").id
    assert copy.read("u", ref="v1").equals(origin.read("u", ref="v1"))


@pytest.mark.parametrize("point", ["transfer_file_copied", "transfer_manifests_copied", "transfer_commit_copied",
                                   "push_before_ref"])
def test_killed_push_leaves_the_remote_ref_and_a_rerun_finishes(origin, tmp_path, point):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    copy.upsert("t", T(k=[2], v=["pushed"]))
    copy.upsert("t", T(k=[3], v=["pushed"]))
    tip = origin.resolve("main").id
    crashed = _crash(["-C", copy.uri, "push"], point, tmp_path)
    assert crashed.returncode == -9, crashed.stderr
    reopened = trimerge.Repository.open(origin.uri)
    assert reopened.resolve("main").id == tip and reopened.fsck().ok  # as before: the ref moves last
    assert trimerge.Repository.open(copy.uri).resolve("origin/main").id == tip
    again = run_trimerge_subprocess("-C", copy.uri, "push", "--json")
    assert again.exit_code == 0, again.stderr
    assert json.loads(again.stdout)["status"] == "fast-forward"
    reopened = trimerge.Repository.open(origin.uri)
    assert reopened.resolve("main").id == copy.resolve("main").id and reopened.fsck().ok
    assert {x["k"]: x["v"] for x in rows(reopened)}[3] == "pushed"


def test_killed_fetch_leaves_tracking_refs_and_a_rerun_finishes(origin, tmp_path):
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    origin.upsert("t", T(k=[2], v=["new"]))
    old = copy.resolve("origin/main").id
    crashed = _crash(["-C", copy.uri, "fetch"], "fetch_before_refs", tmp_path)
    assert crashed.returncode == -9
    assert trimerge.Repository.open(copy.uri).resolve("origin/main").id == old
    assert run_trimerge_subprocess("-C", copy.uri, "fetch").exit_code == 0
    assert trimerge.Repository.open(copy.uri).resolve("origin/main").id == origin.resolve("main").id


# ---------------------------------------------------------------------------------------------- CLI
def test_cli_clone_remote_fetch_pull_push(origin, tmp_path, cli):
    res = cli("clone", origin.uri, tmp_path / "copy", "--json", ok=True)
    out = json.loads(res.stdout)
    assert out["operation"] == "clone" and out["commits"] == len(origin.all_commits())
    copy = str(tmp_path / "copy")
    listed = json.loads(cli("-C", copy, "remote", "list", "--json", ok=True).stdout)
    assert listed == [{"name": "origin", "uri": origin.uri}]
    origin.upsert("t", T(k=[2], v=["o"]))
    fetched = json.loads(cli("-C", copy, "fetch", "--json", ok=True).stdout)
    assert fetched["refs"][0]["ref"] == "origin/main"
    assert json.loads(cli("-C", copy, "pull", "--json", ok=True).stdout)["status"] == "fast-forward"
    cli("-C", copy, "load", "t", _csv(tmp_path, "k,v\n3,c\n"), "--mode", "upsert", ok=True)
    pushed = json.loads(cli("-C", copy, "push", "origin", "main", "--json", ok=True).stdout)
    assert pushed["status"] == "fast-forward" and pushed["commits"] == 1
    text = cli("-C", copy, "push", ok=True).stdout
    assert "up-to-date" in text
    assert cli("-C", copy, "log", "-n", "1", "origin/main~1", ok=True).exit_code == 0


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "rows.csv"
    p.write_text(text)
    return p


def test_cli_bad_input_is_one_line_exit_2(origin, tmp_path, cli):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    for args, words in [(("clone", origin.uri, full), "not empty"),
                        (("clone", tmp_path / "nothing", tmp_path / "c"), "not a trimerge repository"),
                        (("-C", origin.uri, "fetch", "nope"), "no remote 'nope'"),
                        (("-C", origin.uri, "push", "nope"), "no remote 'nope'"),
                        (("-C", origin.uri, "remote", "add", "a/b", origin.uri), "invalid remote name"),
                        (("-C", origin.uri, "remote", "add", "up", tmp_path / "nothing"), "not a trimerge repository"),
                        (("-C", tmp_path / "nothing", "fetch"), "no trimerge repository"),
                        (("clone", "s3://", tmp_path / "c"), "")]:
        res = cli(*args)
        assert res.exit_code == 2, (args, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1 and words in res.stderr, (args, res.stderr)
    res = cli("-C", origin.uri, "fetch", "--json")
    assert res.exit_code == 2 and json.loads(res.stderr)["type"] == "RemoteError"


def test_the_transfer_bar_draws_on_a_terminal(monkeypatch):
    from trimerge.cli.app import Context
    from trimerge.cli.remotes import TransferBar

    bar = TransferBar(Context(), "clone", delay=0.0)
    bar.enabled = True
    for done in range(1, 4):
        bar(done, 3, done * 1000)
    assert bar._progress is not None
    bar.close()


def test_clients_nobody_here_wrote_read_a_clone_exactly(origin, tmp_path):
    """LanceDB (through the namespace) and DuckDB (through repo.sql) read a clone's remote-tracking
    refs and its own forks as trimerge does."""
    lancedb = pytest.importorskip("lancedb")
    copy = trimerge.Repository.clone(origin.uri, tmp_path / "copy").repository
    copy.upsert("t", T(k=[42], v=["new"]))  # the clone's main forks what it received
    for ref in ("main", "origin/main", "origin/dev/x", "origin/main~1"):
        db = lancedb.connect_namespace("trimerge", {"root": copy.uri, "ref": ref})
        seen = db.open_table("t").to_arrow().select(["k", "v"]).sort_by("k")
        assert seen.equals(copy.read("t", ref=ref).select(["k", "v"]).sort_by("k")), ref
    counted = copy.sql('SELECT count(*) AS n FROM "t@origin/main"').column("n")[0].as_py()
    assert counted == copy.read("t", ref="origin/main").num_rows == copy.read("t").num_rows - 1


def test_remote_options_refuse_credentials_and_bad_input_and_ignore_edited_secrets(origin, tmp_path):
    from trimerge.lineage.errors import RemoteError

    repo = trimerge.Repository.clone(origin.uri, tmp_path / "c").repository
    assert repo.remotes.get("origin").storage_options == {}  # a local source keeps nothing
    for bad in ("endpoint=x", ["endpoint"], 7):
        with pytest.raises(RemoteError, match="mapping"):
            repo.remotes.add("bad", "s3://bucket/r", storage_options=bad)
    for secret in ("aws_secret_access_key", "SECRET_ACCESS_KEY", "azure_storage_sas_key", "token", "proxy_url"):
        with pytest.raises(RemoteError, match="a credential"):
            repo.remotes.add("bad", "s3://bucket/r", storage_options={"endpoint": "http://h", secret: "s"})
    assert "bad" not in repo.remotes
    kept = repo.remotes.add("up", "s3://bucket/r", storage_options={"AWS_REGION": "eu", "allow_http": True})
    assert kept.storage_options == {"AWS_REGION": "eu", "allow_http": "True"}
    assert repo.remotes.add("here", str(tmp_path / "x"), storage_options={"endpoint": "e"}).storage_options == {}
    doc = tmp_path / "c" / "_trimerge" / "remotes" / "up.json"
    edited = {**json.loads(doc.read_text()), "storage_options": {"region": "eu", "aws_secret_access_key": "s"}}
    doc.write_text(json.dumps(edited))
    assert repo.remotes.get("up").storage_options == {"region": "eu"}  # a secret edited in is never used
    doc.write_text(json.dumps({**edited, "storage_options": ["junk"]}))
    assert repo.remotes.get("up").storage_options == {}
