"""Branch, tag and table name validation (lineage/history/names.py), and that valid names really work."""

from __future__ import annotations

from datetime import timedelta

import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import trimerge
from trimerge.lineage.errors import InvalidNameError, TrimergeError
from trimerge.lineage.history.names import (
    RESERVED_SEGMENTS,
    SCHEMA_LOCK_BRANCH,
    validate_branch_name,
    validate_table_name,
    validate_tag_name,
)

from conftest import T, lance_branches

# ---------------------------------------------------------------------------------------------- branch names

VALID_BRANCHES = [
    "fix-names", "feature/x", "a", "A_b-c.d", "release/2024.01", "x/y/z", "under_score", "v1.2.3",
    "a.b", "UPPER", "x/main", "main2", "mainline", "a" * 200, "data2", "tree-house", "lockfile",
]


@pytest.mark.parametrize("name", VALID_BRANCHES)
def test_valid_branch_names_accepted(name):
    assert validate_branch_name(name) == name


BRANCH_RULES = [
    ("", "rule 1"),
    ("/a", "rule 2"),
    ("a/", "rule 2"),
    ("/", "rule 2"),
    ("a//b", "rule 3"),
    ("a..b", "rule 4"),
    ("..", "rule 4"),
    ("a\\b", "rule 4"),
    ("a b", "rule 5"),
    ("a:b", "rule 5"),
    ("a~1", "rule 5"),
    ("a^", "rule 5"),
    ("a*", "rule 5"),
    ("a?b", "rule 5"),
    ("a[b", "rule 5"),
    ("a@{1}", "rule 5"),
    ("x/a%2Fb", "rule 5"),
    ("a\tb", "rule 5"),
    ("a.lock", "rule 6"),
    ("x/y.lock", "rule 6"),
    ("main", "rule 7"),
]


@pytest.mark.parametrize("name,rule", BRANCH_RULES)
def test_branch_rules_are_named_in_the_error(name, rule):
    with pytest.raises(InvalidNameError) as exc:
        validate_branch_name(name)
    assert rule in str(exc.value)
    assert isinstance(exc.value, TrimergeError)
    assert isinstance(exc.value, ValueError)


@pytest.mark.parametrize("segment", sorted(RESERVED_SEGMENTS))
@pytest.mark.parametrize("template", ["{s}", "x/{s}", "{s}/x", "a/{s}/b"])
def test_reserved_lance_segments_rejected(segment, template):
    name = template.format(s=segment)
    with pytest.raises(InvalidNameError) as exc:
        validate_branch_name(name)
    assert segment in str(exc.value)
    assert "reserved" in str(exc.value) or "collides" in str(exc.value)


@pytest.mark.parametrize("name", ["café", "ブランチ", "naïve/x", "x/ü", "a\u00a0b", "straße", "\u0661"])
def test_non_ascii_branch_names_rejected(name):
    with pytest.raises(InvalidNameError) as exc:
        validate_branch_name(name)
    assert "ASCII" in str(exc.value) or "rule 5" in str(exc.value)


@pytest.mark.parametrize("name", [".hidden", "x/.hidden", "trailing.", "x/y.", "x/a.lock/b"])
def test_unsafe_dot_segments_rejected(name):
    with pytest.raises(InvalidNameError):
        validate_branch_name(name)


def test_too_long_branch_name_rejected():
    with pytest.raises(InvalidNameError) as exc:
        validate_branch_name("a" * 201)
    assert "longer" in str(exc.value)


@pytest.mark.parametrize("name", [SCHEMA_LOCK_BRANCH, "__x__", "__internal__"])
def test_internal_branch_names_reserved(name):
    with pytest.raises(InvalidNameError):
        validate_branch_name(name)


def test_schema_lock_branch_allowed_internally():
    assert validate_branch_name(SCHEMA_LOCK_BRANCH, allow_internal=True) == SCHEMA_LOCK_BRANCH


@pytest.mark.parametrize("name", [None, 1, b"abc", ["a"]])
def test_non_string_branch_names_rejected(name):
    with pytest.raises(InvalidNameError):
        validate_branch_name(name)


@pytest.mark.parametrize("name", ["abc\n", "feature/x\n"])
def test_branch_name_with_trailing_newline_rejected(name):
    with pytest.raises(InvalidNameError):
        validate_branch_name(name)


# ---------------------------------------------------------------------------------------------- tag names

@pytest.mark.parametrize("name", ["v1", "v1.0.0", "release-2024_01", "A", "x" * 200, "a.b", "1"])
def test_valid_tag_names_accepted(name):
    assert validate_tag_name(name) == name


TAG_RULES = [
    ("", "rule 1"),
    ("a/b", "rule 2"),
    ("a b", "rule 2"),
    ("a:b", "rule 2"),
    ("v1^", "rule 2"),
    ("v1~2", "rule 2"),
    (".v1", "rule 3"),
    ("v1.", "rule 3"),
    ("v1.lock", "rule 4"),
    ("v1..2", "rule 5"),
]


@pytest.mark.parametrize("name,rule", TAG_RULES)
def test_tag_rules_are_named_in_the_error(name, rule):
    with pytest.raises(InvalidNameError) as exc:
        validate_tag_name(name)
    assert rule in str(exc.value)


@pytest.mark.parametrize("name", ["café", "v1ü", "タグ", "\u0661"])
def test_non_ascii_tag_names_rejected(name):
    with pytest.raises(InvalidNameError) as exc:
        validate_tag_name(name)
    assert "ASCII" in str(exc.value)


def test_too_long_tag_name_rejected():
    with pytest.raises(InvalidNameError):
        validate_tag_name("t" * 201)


def test_tag_name_with_trailing_newline_rejected():
    with pytest.raises(InvalidNameError):
        validate_tag_name("v1\n")


# ---------------------------------------------------------------------------------------------- table names

@pytest.mark.parametrize("name", ["airlines", "_t", "T1", "a_b_c", "x" * 128])
def test_valid_table_names(name):
    assert validate_table_name(name) == name


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a.b", "a b", "a/b", "x" * 129, "café", "a::b", None])
def test_invalid_table_names(name):
    with pytest.raises(InvalidNameError):
        validate_table_name(name)


def test_table_name_with_trailing_newline_rejected():
    with pytest.raises(InvalidNameError):
        validate_table_name("t\n")


# ---------------------------------------------------------------------------------------------- end to end

def test_invalid_names_rejected_by_the_repository(seeded):
    for bad in ["", "a..b", "main", "x/data", "café", "a.lock"]:
        with pytest.raises(InvalidNameError):
            seeded.branches.create(bad, from_ref="main")
    for bad in ["", "a/b", ".v", "v.lock", "v..1", "tég"]:
        with pytest.raises(InvalidNameError):
            seeded.tags.create(bad, ref="main")
    with pytest.raises(InvalidNameError):
        seeded.create_table("1bad", T(k=[1]), primary_key="k")
    assert seeded.branches.names() == ["main"]
    assert seeded.tags.list() == []


_SEGMENT_ALPHABET = st.sampled_from(list("abcXYZ019._-"))
_segment = st.text(_SEGMENT_ALPHABET, min_size=1, max_size=8)
_branch_candidates = st.one_of(
    st.lists(_segment, min_size=1, max_size=3).map("/".join),
    st.text(min_size=0, max_size=12),  # anything, mostly invalid
)


def _accepted(name: str) -> bool:
    try:
        validate_branch_name(name)
    except InvalidNameError:
        return False
    return True


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                  HealthCheck.too_slow])
@given(names=st.lists(_branch_candidates, min_size=1, max_size=4, unique=True))
def test_every_accepted_branch_name_works_end_to_end(names):
    """Whatever validate_branch_name accepts can be created, written to and deleted."""
    valid = [n for n in names if _accepted(n)]
    assume(valid)
    tmp = Path(tempfile.mkdtemp(prefix="trimerge-names-"))
    try:
        repo = trimerge.Repository.init(tmp / "repo")
        repo.create_table("t", T(k=[0], v=["root"]), primary_key="k")
        created = []
        for i, name in enumerate(valid):
            b = repo.branches.create(name, from_ref="main")
            assert b.name == name
            created.append(name)
            repo.upsert("t", T(k=[i + 1], v=[name]), branch=name)
            got = {r["k"]: r["v"] for r in repo.read("t", ref=name).to_pylist()}
            assert got == {0: "root", i + 1: name}
            assert repo.resolve(name).id == repo.branches.get(name).commit_id
        assert sorted(repo.branches.names()) == sorted(["main", *created])
        for name in created:
            repo.branches.delete(name, force=True)
            assert name not in repo.branches.names()
        assert repo.read("t", ref="main").num_rows == 1
        # Every fork belonged to a deleted branch and nothing else reaches them.
        repo.gc(retention=timedelta(0))
        assert lance_branches(repo, "t") == []
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_validators_raise_only_invalid_name_error(text):
    for fn in (validate_branch_name, validate_tag_name, validate_table_name):
        try:
            assert fn(text) == text
        except InvalidNameError as exc:
            assert str(exc)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_accepted_names_only_use_the_allowed_characters(text):
    """Independent restatement of rule 5 / tag rule 2: accepted names use [A-Za-z0-9._-/] only.

    Trailing newlines have their own tests above."""
    assume(not text.endswith("\n"))
    if _accepted(text):
        assert re.fullmatch(r"[A-Za-z0-9._/-]+", text), repr(text)
    try:
        validate_tag_name(text)
    except InvalidNameError:
        pass
    else:
        assert re.fullmatch(r"[A-Za-z0-9._-]+", text), repr(text)


@pytest.mark.parametrize("name", ["a/" * 99 + "a", "ab/" * 66 + "ab"], ids=["100-segments", "67-segments"])
def test_names_too_long_once_stored_are_refused_with_the_rule(repo, name):
    # Each '/' is stored as %2F in the ref file name, so it counts as 3 characters.
    with pytest.raises(InvalidNameError, match="counts as 3"):
        validate_branch_name(name)


@pytest.mark.parametrize("name", ["a/" * 40 + "a", "ab/" * 30 + "ab"], ids=["41-segments", "31-segments"])
def test_long_names_with_many_segments_can_be_created(repo, name):
    assert validate_branch_name(name) == name
    repo.branches.create(name, from_ref="main")
    repo.branches.delete(name)


def test_longest_single_segment_name_can_be_created(repo):
    name = "x" * 200
    repo.create_table("t", T(k=[1]), primary_key="k")
    repo.branches.create(name)
    repo.upsert("t", T(k=[2]), branch=name)
    assert repo.read("t", ref=name).num_rows == 2
    repo.branches.delete(name, force=True)
    repo.tags.create("v" * 200)
    assert repo.resolve("v" * 200) == repo.resolve("main")
