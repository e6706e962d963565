"""Per-conflict resolutions: each kind, partial, unknown, bad value, and the round trip through
every file format of the CLI (``--conflicts`` then ``--resolve``)."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pytest

import trimerge
from trimerge.merge import MergeConflictError, cherry_pick, merge
from trimerge.merge.resolutions import read_table, write_table


@pytest.fixture
def both(repo):
    """Four keys changed differently on both sides (cells), one deleted on dest and changed on source."""
    repo.create_table("t", pa.table({"id": [1, 2, 3, 4, 5], "a": ["x"] * 5, "n": [0] * 5}), "id")
    repo.branches.create("dev")
    repo.upsert("t", pa.table({"id": [1, 2, 3, 4, 5], "a": ["dev"] * 4 + ["x"], "n": [0, 0, 0, 0, 9]}), branch="dev")
    repo.upsert("t", pa.table({"id": [1, 2, 3, 4], "a": ["main"] * 4, "n": [0] * 4}))
    repo.delete_keys("t", pa.table({"id": [5]}))
    return repo


def resolve(conflicts: pa.Table, choices: dict) -> list[dict]:
    out = []
    for row in conflicts.to_pylist():
        key = json.loads(row["key"])["id"]
        if key in choices:
            choice, value = choices[key]
            out.append({**row, "resolution": choice, "value": json.dumps(value) if value is not None else None})
    return out


def test_each_kind_of_resolution(both):
    conflicts = merge("dev", "main", repo=both, dry_run=True).conflicts_table()
    assert sorted(conflicts.column("kind").to_pylist()) == ["row.delete_modify"] + ["row.update_update"] * 4
    table = pa.Table.from_pylist(resolve(conflicts, {1: ("ours", None), 2: ("theirs", None), 3: ("base", None),
                                                     4: ("value", {"a": "typed"}), 5: ("value", {"a": "back", "n": 5})}))
    result = merge("dev", "main", repo=both, resolutions=pl.from_arrow(table))  # a polars DataFrame works too
    assert result.status == "merged"
    rows = {r["id"]: (r["a"], r["n"]) for r in both.read("t").to_pylist()}
    assert rows == {1: ("main", 0), 2: ("dev", 0), 3: ("x", 0), 4: ("typed", 0), 5: ("back", 5)}
    assert result.commit.metadata["merge.resolved_by_hand"] == "5"


def test_partial_resolutions_leave_only_the_rest_and_strategies_come_after(both):
    conflicts = merge("dev", "main", repo=both, dry_run=True).conflicts_table()
    partial = pa.Table.from_pylist(resolve(conflicts, {1: ("theirs", None), 5: ("ours", None)}))
    with pytest.raises(MergeConflictError) as exc:
        merge("dev", "main", repo=both, resolutions=partial)
    assert sorted(c.key["id"] for c in exc.value.result.conflicts) == [2, 3, 4]
    result = merge("dev", "main", repo=both, resolutions=partial, strategy="dest-wins")
    rows = {r["id"]: r["a"] for r in both.read("t").to_pylist()}
    assert rows == {1: "dev", 2: "main", 3: "main", 4: "main"}
    meta = result.commit.metadata
    assert (meta["merge.resolved_by_hand"], meta["merge.resolved_by_strategy"]) == ("2", "3")


def test_unknown_resolutions_and_bad_values_are_errors_and_publish_nothing(both):
    tip = both.resolve("main").id
    conflicts = merge("dev", "main", repo=both, dry_run=True).conflicts_table()
    unknown = resolve(conflicts, {1: ("ours", None)})
    unknown[0] = {**unknown[0], "key": json.dumps({"id": 99})}
    with pytest.raises(trimerge.TrimergeError, match="match no conflict"):
        merge("dev", "main", repo=both, resolutions=pa.Table.from_pylist(unknown))
    bad = resolve(conflicts, {1: ("value", {"a": 5})})
    with pytest.raises(trimerge.TrimergeError, match="does not fit column 'a'"):
        merge("dev", "main", repo=both, resolutions=pa.Table.from_pylist(bad))
    wrong = resolve(conflicts, {1: ("mine", None)})
    with pytest.raises(trimerge.TrimergeError, match="not one of"):
        merge("dev", "main", repo=both, resolutions=pa.Table.from_pylist(wrong))
    with pytest.raises(trimerge.TrimergeError, match="lack column"):
        merge("dev", "main", repo=both, resolutions=pa.table({"kind": ["x"]}))
    assert both.resolve("main").id == tip


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_cli_round_trip_through_each_format(both, cli, tmp_path, ext):
    path = tmp_path / f"conflicts.{ext}"
    res = cli("-C", both.uri, "merge", "dev", "--dry-run", "--conflicts", str(path))
    assert res.exit_code == 1 and path.exists()
    table = read_table(str(path))
    rows = table.to_pylist()
    for row in rows:
        row["resolution"], row["value"] = "theirs", None
    edited = tmp_path / f"resolved.{ext}"
    write_table(pa.Table.from_pylist(rows).drop_columns(["resolution", "value"])
                .append_column("resolution", pa.array(["theirs"] * len(rows)))
                .append_column("value", pa.array([None] * len(rows), pa.string())), str(edited))
    res = cli("-C", both.uri, "merge", "dev", "--resolve", str(edited))
    assert res.exit_code == 0, res.stderr
    assert {r["id"]: r["a"] for r in both.read("t").to_pylist()} == {1: "dev", 2: "dev", 3: "dev", 4: "dev", 5: "x"}


def test_cherry_pick_and_revert_take_resolutions(both, tmp_path, cli):
    picked = both.resolve("dev").id
    conflicts = cherry_pick(picked, "main", repo=both, dry_run=True).conflicts_table()
    assert conflicts.num_rows == 5
    table = pa.Table.from_pylist(resolve(conflicts, {i: ("ours", None) for i in range(1, 6)}))
    assert cherry_pick(picked, "main", repo=both, resolutions=table).status in ("merged", "up-to-date")
    assert cli("-C", both.uri, "revert", "main", "--dry-run", "--conflicts", str(tmp_path / "r.csv")).exit_code in (0, 1)
