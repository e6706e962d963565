"""fsck sees the whole repository (issue 29, item 3) and RepositoryMovedError's remedies work as
written (item 5): damaged documents are never read as defaults, symbolic links are reported and
never followed out of the repository, and every problem names its file and its repair."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import trimerge
from trimerge.lineage.errors import CorruptRepositoryError, RepositoryMovedError

from conftest import T


@pytest.fixture
def made(tmp_path) -> Path:
    repo = trimerge.Repository.init(tmp_path / "r")
    repo.create_table("t", T(k=[1, 2], v=["a", "b"]), primary_key="k")
    repo.branches.create("dev", from_ref="main")
    repo.upsert("t", T(k=[3], v=["c"]), branch="dev")  # dev forks the table
    assert repo.fsck().ok
    return tmp_path / "r"


def _problems(path: Path) -> list[str]:
    return trimerge.Repository.open(path, read_only=True).fsck().problems


def test_empty_head_is_damage_not_main(made, cli):
    (made / "_trimerge" / "HEAD").write_bytes(b"")
    repo = trimerge.Repository.open(made, read_only=True)
    with pytest.raises(CorruptRepositoryError, match="HEAD is empty: rewrite it with 'trimerge switch"):
        repo.current_branch
    problems = _problems(made)
    assert any("HEAD is empty" in p and "trimerge switch" in p for p in problems), problems
    res = cli("-C", made, "fsck")
    assert res.exit_code == 1 and "HEAD is empty" in res.stdout + res.stderr
    cli("-C", made, "switch", "main", ok=True)  # the repair it names works
    assert _problems(made) == []


@pytest.mark.parametrize("content", [b"{}", b"[]", b'{"format": 2, "root": "x", "location": "/"}', b"{oops"])
def test_damaged_repo_json_is_an_error_naming_the_file(made, cli, content):
    marker = made / "_trimerge" / "repo.json"
    good = marker.read_bytes()
    marker.write_bytes(content)
    with pytest.raises(CorruptRepositoryError, match="repo.json"):
        trimerge.Repository.open(made, read_only=True)
    res = cli("-C", made, "fsck")
    assert res.exit_code == 2 and "repo.json" in res.stderr and len(res.stderr_lines) == 1
    marker.write_bytes(good)
    assert _problems(made) == []


def test_repo_json_whose_root_is_not_the_root_commit_is_reported(made):
    marker = made / "_trimerge" / "repo.json"
    doc = json.loads(marker.read_bytes())
    doc["root"] = trimerge.Repository.open(made, read_only=True).resolve("main").id  # has parents
    marker.write_text(json.dumps(doc))
    assert any("repo.json" in p and "not the first commit" in p for p in _problems(made))
    doc["root"] = "0" * 64
    marker.write_text(json.dumps(doc))
    assert any("repo.json" in p and "missing or damaged" in p and "restore it" in p for p in _problems(made))


@pytest.mark.parametrize("content", [b"", b"{", b'{"token": 1}'])
def test_damaged_lease_is_reported_and_not_taken_over(made, content):
    lock = made / "_trimerge" / "locks" / "main.lock"
    lock.parent.mkdir(exist_ok=True)
    lock.write_bytes(content)
    problems = _problems(made)
    assert any("locks/main.lock is damaged" in p and "delete that file" in p for p in problems), problems
    repo = trimerge.Repository.open(made, read_only=False)
    with pytest.raises(CorruptRepositoryError, match="main.lock is damaged"):
        repo.upsert("t", T(k=[9], v=["z"]))
    assert lock.read_bytes() == content  # not taken over
    lock.unlink()  # the repair it names
    repo.upsert("t", T(k=[9], v=["z"]))
    assert _problems(made) == []


def test_branch_document_symlinked_out_of_the_repository_is_refused_and_reported(made, tmp_path):
    ref = made / "_trimerge" / "refs" / "branches" / "dev.json"
    outside = tmp_path / "outside.json"
    shutil.copy(ref, outside)
    ref.unlink()
    ref.symlink_to(outside)
    repo = trimerge.Repository.open(made)
    with pytest.raises(CorruptRepositoryError, match="symbolic link.*outside the repository"):
        repo.branches.get("dev")
    with pytest.raises(CorruptRepositoryError):
        repo.upsert("t", T(k=[8], v=["w"]), branch="dev")
    assert ref.is_symlink()  # the next write did not replace the link with a file
    problems = _problems(made)
    assert any(str(ref) in p and "symbolic link" in p for p in problems), problems


def test_symlinks_under_tables_are_reported_and_not_followed(made, tmp_path):
    tables = made / "tables"
    dataset = next(p for p in tables.iterdir() if p.name.startswith("t-"))
    elsewhere = tmp_path / "other-disk"
    shutil.move(str(dataset), elsewhere)
    dataset.symlink_to(elsewhere, target_is_directory=True)
    problems = _problems(made)
    assert any(str(dataset) in p and "symbolic link" in p for p in problems), problems
    with pytest.raises(CorruptRepositoryError, match="outside the repository"):
        trimerge.Repository.open(made, read_only=True).read("t")
    (tables / "stray-link").symlink_to(made / "_trimerge")  # inside: reported too
    assert any("stray-link" in p for p in _problems(made))


def test_fsck_cli_lists_every_problem_and_exits_1(made, cli):
    (made / "_trimerge" / "HEAD").write_bytes(b"")
    (made / "_trimerge" / "locks").mkdir(exist_ok=True)
    (made / "_trimerge" / "locks" / "dev.lock").write_bytes(b"")
    res = cli("-C", made, "fsck")
    assert res.exit_code == 1
    text = res.stdout + res.stderr
    assert "HEAD" in text and "dev.lock" in text


# ---------------------------------------------------------------------------------------------- item 5
def _moved(made: Path, tmp_path: Path) -> Path:
    new = tmp_path / "moved"
    shutil.move(str(made), new)
    with pytest.raises(RepositoryMovedError) as exc:
        trimerge.Repository.open(new, read_only=True).read("t", ref="dev")
    message = str(exc.value)
    assert f"move or copy the repository back to {made}" in message
    assert f"make that path point to {new}" in message
    return new


def test_moved_repository_remedy_symlink_from_the_old_path(made, tmp_path):
    new = _moved(made, tmp_path)
    made.symlink_to(new, target_is_directory=True)  # "make that path point to" the new place
    repo = trimerge.Repository.open(new)
    assert sorted(r["k"] for r in repo.read("t", ref="dev").to_pylist()) == [1, 2, 3]
    repo.upsert("t", T(k=[4], v=["d"]), branch="dev")
    assert repo.read("t", ref="dev").num_rows == 4


def test_moved_repository_remedy_move_back(made, tmp_path):
    new = _moved(made, tmp_path)
    shutil.move(str(new), made)  # "move or copy the repository back"
    assert trimerge.Repository.open(made).read("t", ref="dev").num_rows == 3


def test_repository_opened_through_a_symlink_is_not_moved(made, tmp_path):
    alias = tmp_path / "alias"
    alias.symlink_to(made, target_is_directory=True)
    assert trimerge.Repository.open(alias).read("t", ref="dev").num_rows == 3
