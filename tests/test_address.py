"""Addresses ``[REPOSITORY::]REF::TABLE`` (lineage/history/address.py) and reading through them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trimerge
from trimerge import Address, parse_address
from trimerge.lineage.history.address import is_address
from trimerge.lineage.errors import (
    InvalidOperationError,
    RefNotFoundError,
    RefSyntaxError,
    TableNotFoundError,
    TrimergeError,
)

from conftest import AIRLINES, T, rows

PARSE_CASES = [
    # text, repository, ref, table
    ("main::flights", None, "main", "flights"),
    ("main~2^2::flights", None, "main~2^2", "flights"),
    ("main^::t", None, "main^", "t"),
    ("feature/x::planes", None, "feature/x", "planes"),
    ("v1::airports", None, "v1", "airports"),
    ("0123abcd::t", None, "0123abcd", "t"),
    ("main::", None, "main", None),
    ("/data/repo::v1::airports", "/data/repo", "v1", "airports"),
    ("relative/repo::main::t", "relative/repo", "main", "t"),
    ("s3://bucket/x::feature/x::planes", "s3://bucket/x", "feature/x", "planes"),
    ("file:///data/repo::main::t", "file:///data/repo", "main", "t"),
    ("C:\\repo::main::t", "C:\\repo", "main", "t"),
    ("C:\\my repo\\x::fix-names~1::airlines", "C:\\my repo\\x", "fix-names~1", "airlines"),
    # Repository paths may contain '::' themselves: the string splits at its last two '::'.
    ("/data/we::ird::main::t", "/data/we::ird", "main", "t"),
    ("/a::b::c::v1::_t2", "/a::b::c", "v1", "_t2"),
    ("s3://b/x::y::feature/x~3::planes", "s3://b/x::y", "feature/x~3", "planes"),
    ("/data/repo::main::", "/data/repo", "main", None),
]


@pytest.mark.parametrize("text,repository,ref,table", PARSE_CASES)
def test_parse_address(text, repository, ref, table):
    addr = parse_address(text)
    assert addr == Address(repository, ref, table)
    assert (addr.repository, addr.ref, addr.table) == (repository, ref, table)
    assert is_address(text)


@pytest.mark.parametrize("text,repository,ref,table", PARSE_CASES)
def test_address_round_trips_through_str(text, repository, ref, table):
    addr = parse_address(text)
    assert str(addr) == text
    assert parse_address(str(addr)) == addr


MALFORMED = [
    "",
    "main",            # no separator
    "flights",
    "::",              # no ref
    "::flights",
    "::main::t",       # empty repository
    "repo::::t",       # empty ref
    "main:::t",        # ref would contain ':'
    "ma:in::t",
    ":::",
    "main::1flights",  # table is not an identifier
    "main::fl-ights",
    "main::a.b",
    "repo::main::t t",
    "main::café",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_addresses_raise_ref_syntax_error(text):
    with pytest.raises(RefSyntaxError) as exc:
        parse_address(text)
    assert isinstance(exc.value, TrimergeError)
    assert str(exc.value)


@pytest.mark.parametrize("value", [None, 1, b"main::t"])
def test_non_strings_are_not_addresses(value):
    assert not is_address(value)
    with pytest.raises(RefSyntaxError):
        parse_address(value)


_ref = st.from_regex(r"[a-z][a-z0-9_-]{0,6}(/[a-z0-9_-]{1,4})?([~^][0-9]?){0,2}", fullmatch=True)
_table = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
_repo = st.one_of(st.none(), st.from_regex(r"(/|s3://|C:\\)[a-z:/\\ ]{0,12}[a-z]", fullmatch=True))


@settings(max_examples=150, deadline=None)
@given(repository=_repo, ref=_ref, table=st.one_of(st.none(), _table))
def test_address_round_trip_property(repository, ref, table):
    addr = Address(repository, ref, table)
    text = str(addr)
    parsed = parse_address(text)
    assert parsed == addr
    assert str(parsed) == text


# ---------------------------------------------------------------------------------------------- reading


def test_read_by_address(seeded):
    seeded.upsert("airlines", T(carrier=["AA"], name=["American Airlines"]))
    now = seeded.read("main::airlines")
    before = seeded.read("main~1::airlines")
    assert rows(before, "carrier") == rows(T(**AIRLINES), "carrier")
    assert {r["carrier"]: r["name"] for r in now.to_pylist()}["AA"] == "American Airlines"
    assert rows(seeded.read(f"{seeded.uri}::main~1::airlines"), "carrier") == rows(before, "carrier")
    assert rows(seeded.read(f"file://{seeded.uri}::main::airlines"), "carrier") == rows(now, "carrier")
    assert rows(seeded.read(parse_address("main~1::airlines")), "carrier") == rows(before, "carrier")
    # The ref argument may repeat the address's ref.
    assert seeded.read("main~1::airlines", ref="main~1").num_rows == 3


def test_read_address_by_tag_and_commit_id(seeded):
    seeded.tags.create("v1", ref="main")
    seeded.delete("airlines", "carrier = 'DL'")
    cid = seeded.resolve("main").id
    assert seeded.read("v1::airlines").num_rows == 3
    assert seeded.read(f"{cid}::airlines").num_rows == 2
    assert seeded.read(f"{cid[:12]}::airlines").num_rows == 2
    assert seeded.entity("v1::airlines", "DL") == {"carrier": "DL", "name": "Delta"}
    assert seeded.entity("main::airlines", "DL") is None


def test_read_address_on_a_branch_with_slash(seeded):
    seeded.branches.create("feature/x", from_ref="main")
    seeded.upsert("airports", T(faa=["EWR"], name=["Newark"]), branch="feature/x")
    assert seeded.read(f"{seeded.uri}::feature/x::airports").num_rows == 4
    assert seeded.read("feature/x~1::airports").num_rows == 3


def test_repository_path_containing_double_colon(tmp_path):
    repo = trimerge.Repository.init(tmp_path / "we::ird")
    repo.create_table("t", T(k=[1, 2], v=["a", "b"]), primary_key="k")
    assert repo.read(f"{repo.uri}::main::t").num_rows == 2
    again = trimerge.Repository.open(tmp_path / "we::ird")
    assert again.read(f"{tmp_path / 'we::ird'}::main::t").num_rows == 2


def test_address_errors(seeded):
    with pytest.raises(InvalidOperationError):
        seeded.read("/somewhere/else::main::airlines")
    with pytest.raises(InvalidOperationError):
        seeded.read("main::")  # names no table
    with pytest.raises(InvalidOperationError):
        seeded.read("main::airlines", ref="main~1")  # disagreeing refs
    with pytest.raises(RefSyntaxError):
        seeded.read("main::1bad")
    with pytest.raises(RefNotFoundError):
        seeded.read("nope::airlines")
    with pytest.raises(TableNotFoundError):
        seeded.read("main::nope")
    with pytest.raises(TableNotFoundError):
        seeded.read("main~2::airports")  # before airports was created
