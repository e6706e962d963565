"""Copies work where they land (issue 41, point 1): a repository copied or moved by a plain tool
reads every ref, passes fsck and takes writes, merges and gc at its new place, with no step (a
read-write open relocates it) or after ``trimerge relocate``; afterwards no file names the old
place, and the original is never read or written through the copy. Real Lance data throughout."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import lance
import pytest

import trimerge
from trimerge.lineage.errors import RepositoryMovedError
from trimerge.lineage.storage.location import Location
from trimerge.lineage.tables.relocation import rebase_manifest, rebase_transaction, relocate
from trimerge.merge import merge

from conftest import T, rows, run_python

REFS = ("main", "feat", "feat~1", "sub", "v1", "v0")


def build(uri: str, options: dict | None = None) -> trimerge.Repository:
    """Two tables; ``feat`` (two commits, one fork), ``sub`` from ``feat`` (a fork of a fork), tags on
    a fork (``v1``) and on main (``v0``)."""
    repo = trimerge.Repository.init(uri, storage_options=options)
    repo.create_table("t", T(id=[1, 2, 3], v=["a", "b", "c"]), "id")
    repo.create_table("u", T(k=[1], w=[10]), "k")
    repo.create_index("t", "v", "btree")
    repo.tags.create("v0", "main")
    repo.branches.create("feat")
    repo.upsert("t", T(id=[2, 4], v=["B", "d"]), branch="feat")
    repo.create_index("t", "id", "bitmap", branch="feat")  # an index section in the fork's manifests
    repo.upsert("u", T(k=[2], w=[20]), branch="feat")
    repo.branches.create("sub", "feat")
    repo.upsert("t", T(id=[5], v=["e"]), branch="sub")
    repo.tags.create("v1", "sub")
    return repo


def snapshot(repo: trimerge.Repository) -> dict:
    """Every table at every ref, and an indexed lookup on each."""
    out = {(ref, table): rows(repo.read(table, ref), repo.primary_key(table, ref)[0])
           for ref in REFS for table in repo.tables(ref)}
    out.update({(ref, "v = 'B'"): repo.read("t", ref, where="v = 'B'").to_pylist() for ref in REFS})
    return out


def files_naming(root: Path, needle: str) -> list[str]:
    needle_bytes = needle.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and needle_bytes in p.read_bytes()]


def lance_files_naming(root: Path, needle: str) -> list[str]:
    """Files of the repository that name ``needle``, except ``repo.json`` (which says where it is)."""
    return [p for p in files_naming(root, needle) if not p.endswith("repo.json")]


@pytest.fixture
def made(tmp_path) -> tuple[Path, dict]:
    path = tmp_path / "original"
    repo = build(str(path))
    return path, snapshot(repo)


def copy_of(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)  # cp -a
    return dst


# ---------------------------------------------------------------------------------------------- bytes
def test_rebase_manifest_and_transaction_are_exact_and_idempotent(made, tmp_path):
    src, _ = made
    old, new = f"{src}/tables", f"{tmp_path}/a/much/longer/place/tables"
    manifests = sorted(src.glob("tables/*/tree/*/_versions/*.manifest"))
    txns = sorted(src.glob("tables/*/tree/*/_transactions/*.txn"))
    assert manifests and txns
    for p in manifests:
        data = p.read_bytes()
        out = rebase_manifest(data, old, new)
        assert old.encode() not in out and new.encode() in out and out[-4:] == b"LANC"
        assert rebase_manifest(out, old, new) is out  # nothing left to change: the same bytes
        assert rebase_manifest(out, new, old) == data  # and back, byte for byte
    changed = 0
    for p in txns:
        data = p.read_bytes()
        out = rebase_transaction(data, old, new)
        changed += out != data
        assert old.encode() not in out and rebase_transaction(out, new, old) == data
    assert changed  # the Clone transactions
    unrelated = manifests[0].read_bytes()
    assert rebase_manifest(unrelated, "/somewhere/else", "/x") is unrelated
    assert rebase_manifest(unrelated, old[:-1], new) is unrelated  # a prefix that is not a whole folder
    nested = rebase_manifest(unrelated, str(src), f"{src}/inside")  # the new place below the old one
    assert nested != unrelated and rebase_manifest(nested, str(src), f"{src}/inside") is nested


def test_a_rebased_fork_opens_in_lance_at_every_version(made, tmp_path):
    src, _ = made
    dst = copy_of(src, tmp_path / "copy-with-a-longer-name")
    for p in [*dst.glob("tables/*/tree/*/_versions/*.manifest"), *dst.glob("tables/*/tree/*/_transactions/*.txn")]:
        fn = rebase_manifest if p.suffix == ".manifest" else rebase_transaction
        p.write_bytes(fn(p.read_bytes(), f"{src}/tables", f"{dst}/tables"))
    shutil.rmtree(src)
    for dataset in dst.glob("tables/*"):
        ds = lance.dataset(str(dataset))
        for fork in ds.branches.list():
            for v in ds.checkout_version((fork, None)).versions():
                opened = ds.checkout_version((fork, v["version"]))
                assert opened.to_table().num_rows >= 0
                assert all(str(b.path).startswith(str(dst)) for b in opened.base_paths().values())


# ---------------------------------------------------------------------------------------------- copies
def test_a_copy_works_where_it_lands_with_no_step(made, tmp_path):
    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    repo = trimerge.Repository.open(dst)  # read-write: relocates itself
    assert snapshot(repo) == before
    assert repo.fsck().problems == []
    assert lance_files_naming(dst, str(src)) == []
    assert json.loads((dst / "_trimerge" / "repo.json").read_bytes())["location"] == str(dst)
    # writes, a merge, forks of forks, gc
    repo.upsert("t", T(id=[9], v=["z"]), branch="feat")
    repo.branches.create("deeper", "sub")
    repo.upsert("t", T(id=[10], v=["y"]), branch="deeper")
    assert merge("feat", "main", repo=repo).commit is not None
    assert rows(repo.read("t"), "id")[-1] == {"id": 9, "v": "z"}
    repo.branches.delete("deeper", force=True)
    repo.gc("now")
    after = snapshot(repo)
    assert {k: v for k, v in after.items() if k[0] in ("sub", "v1", "v0")} == \
        {k: v for k, v in before.items() if k[0] in ("sub", "v1", "v0")}
    assert after[("feat~1", "t")] == before[("feat", "t")]
    assert repo.fsck().problems == []
    assert files_naming(dst, str(src)) == []
    assert trimerge.Repository.open(dst, read_only=True).read("t", "sub").num_rows == 5


def test_a_staged_manifest_left_by_a_refused_client_write_is_rebased_too(made, tmp_path):
    """Lance stages a client's version as ``N.manifest-<id>`` before the namespace takes or refuses
    it; one left in a fork (a refusal, a crash) names the old place like any fork manifest."""
    src, before = made
    versions = next(p for p in (src / "tables").glob("*/tree/*/_versions") if any(versions_in(p)))
    newest = sorted(versions_in(versions))[0]
    staged = versions / f"{newest.name}-6f1c2a9e-4b7d-4e0a-9c55-0d3f1e2b7a10"
    shutil.copyfile(newest, staged)
    staged_bytes = staged.read_bytes()
    assert str(src).encode() in staged_bytes
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    repo = trimerge.Repository.open(dst)
    assert lance_files_naming(dst, str(src)) == []
    assert snapshot(repo) == before
    moved = (dst / staged.relative_to(src)).read_bytes()
    assert str(dst).encode() in moved and moved[-4:] == b"LANC"
    assert moved == rebase_manifest(staged_bytes, f"{src}/tables", f"{dst}/tables")


def versions_in(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.endswith(".manifest")]


def test_a_renamed_directory(made, tmp_path):
    src, before = made
    dst = tmp_path / "renamed"
    os.rename(src, dst)
    modes = {p: p.stat().st_mode for p in dst.rglob("*")}
    repo = trimerge.Repository.open(dst)
    assert {p: p.stat().st_mode for p in modes} == modes  # who may read a rewritten file is kept
    assert snapshot(repo) == before
    assert files_naming(dst, str(src)) == []
    repo.upsert("t", T(id=[7], v=["g"]), branch="sub")
    assert repo.read("t", "sub").num_rows == 6


def test_the_original_is_never_read_or_written_through_the_copy(made, tmp_path):
    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    # The original stays, but every file of it is unreadable garbage (chmod does not stop root):
    # a read through the copy that reached it would fail or differ.
    for p in src.rglob("*"):
        if p.is_file():
            p.write_bytes(b"not yours")
    listing = {str(p): p.stat().st_mtime_ns for p in src.rglob("*")}
    src.chmod(0)
    try:
        repo = trimerge.Repository.open(dst)
        assert snapshot(repo) == before
        repo.upsert("t", T(id=[8], v=["h"]), branch="feat")
        repo.gc("now")
        assert repo.fsck().problems == []
    finally:
        src.chmod(0o755)
    assert {str(p): p.stat().st_mtime_ns for p in src.rglob("*")} == listing  # nothing written there


def test_read_only_open_of_a_moved_copy_names_the_command_and_changes_nothing(made, tmp_path, cli):
    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    files = {str(p): p.read_bytes() for p in dst.rglob("*") if p.is_file()}
    ro = trimerge.Repository.open(dst, read_only=True)
    assert rows(ro.read("t"), "id") == before[("main", "t")]  # main names no absolute path
    with pytest.raises(RepositoryMovedError, match=f"trimerge relocate {dst}"):
        ro.read("t", "feat")
    assert {str(p): p.read_bytes() for p in dst.rglob("*") if p.is_file()} == files
    res = cli("-C", dst, "read", "t", "--ref", "feat")
    assert res.exit_code == 2 and "trimerge relocate" in res.stderr
    # the command it names
    out = cli("relocate", str(dst), "--json", ok=True).json()
    assert out["relocated"] and out["old_location"] == str(src) and out["files_rewritten"] > 0
    assert snapshot(trimerge.Repository.open(dst, read_only=True)) == before
    again = cli("-C", dst, "relocate", "--json", ok=True).json()
    assert again["relocated"] is False and again["files_rewritten"] == 0
    assert "nothing to do" in cli("-C", dst, "relocate", ok=True).stdout


def test_a_damaged_fork_manifest_stops_the_relocation_and_names_the_file(made, tmp_path, cli):
    src, _ = made
    dst = copy_of(src, tmp_path / "copy")
    victim = sorted(dst.glob("tables/*/tree/*/_versions/*.manifest"))[0]
    victim.write_bytes(victim.read_bytes()[:-3])  # torn footer: the old path is still in it
    res = cli("relocate", str(dst))
    assert res.exit_code == 2 and victim.name in res.stderr and "not a Lance manifest" in res.stderr
    assert json.loads((dst / "_trimerge" / "repo.json").read_bytes())["location"] == str(src)
    with pytest.raises(trimerge.lineage.errors.CorruptRepositoryError):
        rebase_manifest(b"junk " + f"{src}/tables".encode() + b" LANC", f"{src}/tables", "/x")
    with pytest.raises(trimerge.lineage.errors.CorruptRepositoryError):
        rebase_transaction(b"\xff" + f"{src}/tables".encode(), f"{src}/tables", "/x")


def test_relocate_refuses_what_is_not_a_repository(tmp_path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "tables").mkdir()
    for target in (empty, tmp_path / "absent", tmp_path / "afile"):
        if target.name == "afile":
            target.write_text("x")
        before = sorted(str(p) for p in tmp_path.rglob("*"))
        res = cli("relocate", str(target))
        assert res.exit_code == 2 and "no trimerge repository" in res.stderr
        res = cli("relocate", str(target), "--json")
        assert res.exit_code == 2 and json.loads(res.stderr)["exit_code"] == 2
        assert sorted(str(p) for p in tmp_path.rglob("*")) == before


def test_a_symlink_to_the_repository_is_not_a_move(made, tmp_path):
    src, before = made
    alias = tmp_path / "alias"
    alias.symlink_to(src, target_is_directory=True)
    assert relocate(str(alias)).relocated is False
    assert snapshot(trimerge.Repository.open(alias)) == before
    assert json.loads((src / "_trimerge" / "repo.json").read_bytes())["location"] == str(src)


@pytest.mark.parametrize("point", ["relocate_file_rewritten", "relocate_before_marker"])
def test_kill_9_during_relocate_then_a_rerun_finishes(made, tmp_path, point):
    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    proc = run_python("""
        import sys
        from trimerge.lineage.tables.relocation import relocate
        relocate(sys.argv[1])
    """, dst, env={"TRIMERGE_CRASH_AT": point})
    assert proc.returncode == -9, proc.stderr
    assert json.loads((dst / "_trimerge" / "repo.json").read_bytes())["location"] == str(src)  # still moved
    if point == "relocate_file_rewritten":
        assert lance_files_naming(dst, str(src))  # part done
    with pytest.raises(RepositoryMovedError):
        trimerge.Repository.open(dst, read_only=True).read("t", "sub")
    result = relocate(str(dst))  # the lease of the killed run belongs to a dead process
    assert result.relocated and result.old_location == str(src)
    assert files_naming(dst, str(src)) == []
    repo = trimerge.Repository.open(dst)
    assert snapshot(repo) == before and repo.fsck().problems == []


def _lancedb_rows(root: Path, ref: str) -> list[dict]:
    lancedb = pytest.importorskip("lancedb")
    db = lancedb.connect_namespace("trimerge", {"root": str(root), "ref": ref})
    version = trimerge.Repository.open(root, read_only=True).table_version("t", ref).version
    return rows(db.open_table("t", version=version).to_arrow(), "id")


def test_lancedb_reads_a_fork_of_the_relocated_copy(made, tmp_path):
    src, before = made
    assert _lancedb_rows(src, "feat") == before[("feat", "t")]  # a served pinned copy in the original
    assert any(src.glob("_trimerge/served/*"))
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    trimerge.Repository.open(dst)
    for ref in ("feat", "sub"):
        assert _lancedb_rows(dst, ref) == before[(ref, "t")]
    assert files_naming(dst, str(src)) == []


def test_forks_made_through_a_symlinked_old_place_are_rebased_too(tmp_path):
    """A repository reached through a symbolic link from where it was made writes forks naming the
    link's target; a copy of it must lose both places (a dataset folder's ULID names it anywhere)."""
    a, b = tmp_path / "a", tmp_path / "b"
    build(str(a))
    os.rename(a, b)
    a.symlink_to(b, target_is_directory=True)
    at_b = trimerge.Repository.open(b)  # the same place as a: not a move
    at_b.branches.create("late", "sub")
    at_b.upsert("t", T(id=[30], v=["late"]), branch="late")
    assert files_naming(b / "tables", str(b))  # the new fork names b, the old ones a
    before = snapshot(at_b)
    before_late = rows(at_b.read("t", "late"), "id")
    dst = copy_of(b, tmp_path / "c")
    a.unlink()
    shutil.rmtree(b)
    repo = trimerge.Repository.open(dst)
    assert snapshot(repo) == before and rows(repo.read("t", "late"), "id") == before_late
    assert files_naming(dst, str(a)) == [] and files_naming(dst, str(b)) == []


def test_a_reader_that_opened_before_the_relocation_reads_after_it(made, tmp_path):
    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    reader = trimerge.Repository.open(dst, read_only=True)
    with pytest.raises(RepositoryMovedError):
        reader.read("t", "sub")
    trimerge.Repository.open(dst)  # another writer opens it: relocated
    assert rows(reader.read("t", "sub"), "id") == before[("sub", "t")]


def test_a_reader_in_the_middle_of_a_relocation_sees_the_old_state_or_the_new(made, tmp_path):
    from trimerge.lineage.storage import faults

    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    seen = []

    def read_now() -> None:  # some fork files name the new place already, repo.json the old one
        reader = trimerge.Repository.open(dst, read_only=True)
        seen.append(rows(reader.read("t"), "id") == before[("main", "t")])
        with pytest.raises(RepositoryMovedError):
            reader.read("t", "sub")
        seen.append("refused")

    with faults.at("relocate_file_rewritten", read_now):
        assert relocate(str(dst)).relocated
    assert seen == [True, "refused"]
    assert snapshot(trimerge.Repository.open(dst, read_only=True)) == before


def test_manifest_size_hints_follow_the_rewritten_manifests(made, tmp_path):
    src, _ = made
    dst = copy_of(src, tmp_path / "a-copy-with-a-longer-name")
    result = relocate(str(dst))
    assert result.relocated and result.refs_fixed > 0 and result.forks >= 3
    for ref in dst.glob("tables/*/_refs/*/*.json"):
        doc = json.loads(ref.read_bytes())
        dataset = ref.parents[2]
        if "parentVersion" in doc:
            branch, version = doc["parentBranch"], doc["parentVersion"]
        else:
            branch, version = doc["branch"], doc["version"]
        folder = dataset if branch in (None, "main") else dataset / "tree" / branch
        assert (folder / "_versions" / f"{2**64 - 1 - version:020d}.manifest").stat().st_size == doc["manifestSize"]


def test_two_processes_opening_a_copy_at_once_both_work(made, tmp_path):
    src, before = made
    dst = copy_of(src, tmp_path / "copy")
    shutil.rmtree(src)
    code = """
        import sys, trimerge
        repo = trimerge.Repository.open(sys.argv[1])
        print(repo.read("t", "sub").num_rows, repo.read("u", "feat").num_rows)
    """
    import subprocess
    import sys
    import textwrap

    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(dst)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert {o for o, _ in outs} == {"5 2\n"}
    assert snapshot(trimerge.Repository.open(dst, read_only=True)) == before
    assert files_naming(dst, str(src)) == []


# ---------------------------------------------------------------------------------------------- object stores
def _upload(local: Path, uri: str, options: dict) -> None:
    location = Location.parse(uri, options)
    for folder in ("_trimerge", "tables"):
        backend = location.backend(folder)
        for p in (local / folder).rglob("*"):
            if p.is_file():
                assert backend.create(p.relative_to(local / folder).as_posix(), p.read_bytes()) is not None


def _download(uri: str, options: dict, local: Path) -> None:
    location = Location.parse(uri, options)
    for folder in ("_trimerge", "tables"):
        backend = location.backend(folder)
        for key in list(backend.keys_below("")):
            key = key.lstrip("/")
            target = local / folder / key
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(backend.get(key).data)


def _objects_naming(uri: str, options: dict, needle: str) -> list[str]:
    location = Location.parse(uri, options)
    out = []
    for folder in ("_trimerge", "tables"):
        backend = location.backend(folder)
        out += [k for k in backend.keys_below("") if needle.encode() in backend.get(k.lstrip("/")).data]
    return out


@pytest.mark.s3
def test_a_local_repository_uploaded_to_s3_works_there(made, s3_uri, cli):
    src, before = made
    uri, options = s3_uri
    _upload(src, uri, options)
    shutil.rmtree(src)
    opts = [a for k, v in options.items() for a in ("--storage-option", f"{k}={v}")]
    out = cli("-C", uri, *opts, "relocate", "--json", ok=True).json()  # the command, on a bucket
    assert out["relocated"] and out["old_location"] == str(src) and out["forks"] >= 3
    assert cli("-C", uri, *opts, "relocate", "--json", ok=True).json()["relocated"] is False
    repo = trimerge.Repository.open(uri, storage_options=options)
    assert snapshot(repo) == before
    assert repo.fsck().problems == []
    assert _objects_naming(uri, options, str(src)) == []
    assert all(uri in str(b.path) for b in repo.dataset("t", "sub").base_paths().values())
    repo.upsert("t", T(id=[11], v=["k"]), branch="sub")
    assert merge("sub", "main", repo=repo).commit is not None
    repo.gc("now")
    assert repo.read("t").num_rows == 6


@pytest.mark.s3
def test_an_s3_repository_downloaded_to_a_local_disk_works_there(s3_uri, tmp_path):
    uri, options = s3_uri
    before = snapshot(build(uri, options))
    dst = tmp_path / "local"
    _download(uri, options, dst)
    Location.parse(uri, options).backend("tables").delete_tree("")
    Location.parse(uri, options).backend("_trimerge").delete_tree("")
    ro = trimerge.Repository.open(dst, read_only=True)
    with pytest.raises(RepositoryMovedError, match="trimerge relocate"):
        ro.read("t", "feat")
    repo = trimerge.Repository.open(dst)
    assert snapshot(repo) == before
    assert repo.fsck().problems == []
    assert files_naming(dst, uri.split("://", 1)[1]) == []  # with or without its scheme
    repo.upsert("t", T(id=[12], v=["m"]), branch="feat")
    repo.gc("now")
    assert repo.read("t", "feat").num_rows == 5
