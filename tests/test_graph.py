"""Commit-graph algorithms and ref resolution on hand-built histories."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimerge.lineage.errors import AmbiguousRefError, NoSuchAncestorError, RefNotFoundError, RefSyntaxError
from trimerge.lineage.history.graph import (
    DictGraph,
    independent,
    is_ancestor,
    iter_history,
    merge_base,
    merge_bases,
    merge_bases_many,
    octopus_merge_bases,
    shortest_unique_prefix,
)
from trimerge.lineage.history.refexpr import Step, apply_steps, resolve, resolve_base


class CountingGraph:
    """Wraps a graph and records which commits an algorithm looked at."""

    def __init__(self, inner: DictGraph) -> None:
        self.inner = inner
        self.parent_calls = 0
        self.touched: set[str] = set()

    def parents(self, commit_id: str) -> tuple[str, ...]:
        self.parent_calls += 1
        self.touched.add(commit_id)
        return self.inner.parents(commit_id)

    def generation(self, commit_id: str) -> int:
        self.touched.add(commit_id)
        return self.inner.generation(commit_id)

    def created_at(self, commit_id: str) -> float:
        self.touched.add(commit_id)
        return self.inner.created_at(commit_id)


def chain(graph: DictGraph, prefix: str, start: str | None, length: int, t0: float = 0.0) -> list[str]:
    """Append ``length`` commits named prefix0, prefix1, ... on top of ``start``."""
    ids = []
    parent = start
    for i in range(length):
        cid = f"{prefix}{i}"
        graph.add(cid, (parent,) if parent else (), created_at=t0 + i)
        ids.append(cid)
        parent = cid
    return ids


# ----------------------------------------------------------------------------- fixtures

# Criss-cross: A2 and B2 each merge the other side's first commit, so both A1 and B1 are
# best common ancestors (a "shortest summed distance" rule would pick only one).
CRISS_CROSS = {
    "R": (),
    "A1": ("R",),
    "B1": ("R",),
    "A2": ("A1", "B1"),
    "B2": ("B1", "A1"),
    "A3": ("A2",),
}

# Feature F is merged into main (M3) and into dev (D2); dev forked from M0. The best base of
# main and dev is F3. Feature commits carry ancient timestamps, so an early exit on the first
# commit reached from both sides in time order (lakeFS) would stop at M0 instead.
MERGED_INTO_TWO = {
    "M0": (),
    "M1": ("M0",),
    "M2": ("M1",),
    "F1": ("M0",),
    "F2": ("F1",),
    "F3": ("F2",),
    "M3": ("M2", "F3"),
    "M4": ("M3",),
    "M5": ("M4",),
    "D1": ("M0",),
    "D2": ("D1", "F3"),
    "D3": ("D2",),
}
MERGED_INTO_TWO_TIMES = {c: (1.0 if c.startswith("F") else 100.0 + i) for i, c in enumerate(MERGED_INTO_TWO)}

# Two unrelated histories (roots R1 and R2) that get joined by J.
TWO_ROOTS = {
    "R1": (),
    "a1": ("R1",),
    "a2": ("a1",),
    "R2": (),
    "b1": ("R2",),
    "J": ("a2", "b1"),
    "b2": ("b1",),
    "x": ("J",),
}

# An octopus merge O of three branches plus a later criss-cross between two of them.
OCTOPUS = {
    "r": (),
    "p": ("r",),
    "q": ("r",),
    "s": ("r",),
    "O": ("p", "q", "s"),
    "p2": ("p", "q"),
    "q2": ("q", "p"),
}

GRAPHS = {
    "criss_cross": (CRISS_CROSS, None),
    "merged_into_two": (MERGED_INTO_TWO, MERGED_INTO_TWO_TIMES),
    "two_roots": (TWO_ROOTS, None),
    "octopus": (OCTOPUS, None),
}

MERGE_BASE_CASES = [
    # graph, a, b, expected merge_bases
    ("criss_cross", "A2", "B2", ["A1", "B1"]),
    ("criss_cross", "A3", "B2", ["A1", "B1"]),
    ("criss_cross", "A2", "A1", ["A1"]),
    ("criss_cross", "A1", "A3", ["A1"]),
    ("criss_cross", "A1", "B1", ["R"]),
    ("criss_cross", "R", "R", ["R"]),
    ("merged_into_two", "M5", "D3", ["F3"]),
    ("merged_into_two", "D3", "M5", ["F3"]),
    ("merged_into_two", "M2", "D3", ["M0"]),
    ("merged_into_two", "F2", "D1", ["M0"]),
    ("two_roots", "a2", "b2", []),
    ("two_roots", "R1", "R2", []),
    ("two_roots", "x", "b2", ["b1"]),
    ("two_roots", "x", "a1", ["a1"]),
    ("octopus", "p2", "q2", ["p", "q"]),
    ("octopus", "O", "p2", ["p", "q"]),
    ("octopus", "O", "s", ["s"]),
]


def build(name: str) -> DictGraph:
    parents, times = GRAPHS[name]
    return DictGraph(parents, times)


@pytest.mark.parametrize(("graph_name", "a", "b", "expected"), MERGE_BASE_CASES)
def test_merge_bases(graph_name: str, a: str, b: str, expected: list[str]) -> None:
    graph = build(graph_name)
    assert merge_bases(graph, a, b) == expected
    assert merge_base(graph, a, b) == (expected[0] if expected else None)


def test_merged_into_two_time_order_would_mislead() -> None:
    graph = build("merged_into_two")
    # M0 is a common ancestor and newer than F3 by clock, but F3 is the best one.
    assert is_ancestor(graph, "M0", "M5") and is_ancestor(graph, "M0", "D3")
    assert graph.created_at("M0") > graph.created_at("F3")
    assert merge_bases(graph, "M5", "D3") == ["F3"]


MANY_CASES = [
    # graph, a, others, expected merge_bases_many
    ("criss_cross", "A2", ["B2"], ["A1", "B1"]),
    ("criss_cross", "A1", ["B1", "R"], ["R"]),
    ("criss_cross", "A2", ["A1", "B1"], ["A1", "B1"]),  # a merge of A1 and B1 reaches both
    ("octopus", "O", ["p2", "q2"], ["p", "q"]),
    ("octopus", "s", ["p", "q"], ["r"]),
    ("octopus", "p", ["p", "s"], ["p"]),
    ("two_roots", "a2", ["b2", "R2"], []),
    ("two_roots", "x", ["a1", "b2"], ["a1", "b1"]),
    ("two_roots", "x", [], ["x"]),
]


@pytest.mark.parametrize(("graph_name", "a", "others", "expected"), MANY_CASES)
def test_merge_bases_many(graph_name: str, a: str, others: list[str], expected: list[str]) -> None:
    assert merge_bases_many(build(graph_name), a, others) == expected


OCTOPUS_CASES = [
    ("octopus", ["p2", "q2", "O"], ["p", "q"]),
    ("octopus", ["p2", "q2", "s"], ["r"]),
    ("octopus", ["O"], ["O"]),
    ("octopus", [], []),
    ("octopus", ["O", "O", "p"], ["p"]),
    ("criss_cross", ["A2", "B2", "A3"], ["A1", "B1"]),
    ("two_roots", ["x", "b2", "J"], ["b1"]),
    ("two_roots", ["x", "a1", "R2"], []),
]


@pytest.mark.parametrize(("graph_name", "commits", "expected"), OCTOPUS_CASES)
def test_octopus_merge_bases(graph_name: str, commits: list[str], expected: list[str]) -> None:
    assert octopus_merge_bases(build(graph_name), commits) == expected


INDEPENDENT_CASES = [
    ("criss_cross", ["A2", "B2", "A1", "R"], ["A2", "B2"]),
    ("criss_cross", ["R", "A3", "A2", "A3"], ["A3"]),
    ("criss_cross", ["B1", "A1"], ["B1", "A1"]),
    ("two_roots", ["a2", "b2", "R1"], ["a2", "b2"]),
    ("two_roots", ["R1", "R2", "x"], ["x"]),
    ("octopus", ["s", "p2", "q2", "O", "r"], ["p2", "q2", "O"]),
    ("octopus", [], []),
]


@pytest.mark.parametrize(("graph_name", "commits", "expected"), INDEPENDENT_CASES)
def test_independent(graph_name: str, commits: list[str], expected: list[str]) -> None:
    assert independent(build(graph_name), commits) == expected


ANCESTOR_CASES = [
    ("criss_cross", "A1", "B2", True),
    ("criss_cross", "B2", "A3", False),
    ("criss_cross", "A2", "A2", True),
    ("criss_cross", "A3", "R", False),
    ("merged_into_two", "F1", "D3", True),
    ("merged_into_two", "M1", "D3", False),
    ("merged_into_two", "D1", "M5", False),
    ("two_roots", "R2", "x", True),
    ("two_roots", "R2", "a2", False),
    ("two_roots", "b2", "x", False),
]


@pytest.mark.parametrize(("graph_name", "a", "b", "expected"), ANCESTOR_CASES)
def test_is_ancestor(graph_name: str, a: str, b: str, expected: bool) -> None:
    assert is_ancestor(build(graph_name), a, b) is expected


# ----------------------------------------------------------------------------- history order


def test_history_orders_by_generation_despite_skewed_clocks() -> None:
    # Clocks run backwards: every child claims to be older than its parent.
    graph = DictGraph()
    graph.add("root", (), created_at=1000.0)
    graph.add("a", ("root",), created_at=900.0)
    graph.add("b", ("root",), created_at=950.0)
    graph.add("merge", ("a", "b"), created_at=10.0)
    graph.add("tip", ("merge",), created_at=5.0)
    assert list(iter_history(graph, "tip")) == ["tip", "merge", "b", "a", "root"]
    assert list(iter_history(graph, "tip", first_parent=True)) == ["tip", "merge", "a", "root"]


def test_history_ties_broken_by_time_then_id_descending() -> None:
    graph = DictGraph({"r": (), "x": ("r",), "y": ("r",), "z": ("r",), "m": ("x", "y", "z")}, {"x": 5.0, "y": 5.0, "z": 1.0})
    assert list(iter_history(graph, "m")) == ["m", "y", "x", "z", "r"]


def test_history_from_several_starts_visits_each_commit_once() -> None:
    graph = build("criss_cross")
    # A2 and B2 tie on generation and time: the larger id comes first.
    assert list(iter_history(graph, ["B2", "A3", "B2"])) == ["A3", "B2", "A2", "B1", "A1", "R"]
    assert list(iter_history(graph, ["A3", "B2"], first_parent=True)) == ["A3", "B2", "A2", "B1", "A1", "R"]
    assert list(iter_history(build("two_roots"), ["a2", "b2"])) == ["b2", "a2", "b1", "a1", "R2", "R1"]


def test_history_is_lazy() -> None:
    inner = DictGraph()
    ids = chain(inner, "c", None, 10_000)
    graph = CountingGraph(inner)
    first = list(itertools.islice(iter_history(graph, ids[-1]), 10))
    assert first == ids[::-1][:10]
    assert graph.parent_calls <= 10
    assert len(graph.touched) <= 11


def test_history_parents_always_after_children_on_random_clock() -> None:
    parents = CRISS_CROSS | {"B3": ("B2", "A3")}
    inner = DictGraph(parents, {c: float(i * 7919 % 13) for i, c in enumerate(parents)})
    order = list(iter_history(inner, "B3"))
    position = {c: i for i, c in enumerate(order)}
    for c in order:
        assert all(position[p] > position[c] for p in inner.parents(c))


# ----------------------------------------------------------------------------- bounded walks


def test_merge_base_walk_is_bounded_by_distance_to_base() -> None:
    inner = DictGraph()
    trunk = chain(inner, "t", None, 20_000)
    left = chain(inner, "l", trunk[-1], 30)
    right = chain(inner, "r", trunk[-1], 50)
    graph = CountingGraph(inner)
    assert merge_bases(graph, left[-1], right[-1]) == [trunk[-1]]
    assert len(graph.touched) < 100


def test_one_sided_old_branch_does_not_drag_walk_to_its_fork_point() -> None:
    # Tip A merges a side branch forked near the root. Git keeps walking that branch (and
    # the STALE wave) down to the fork; stopping once one side has no live commit is enough.
    inner = DictGraph()
    trunk = chain(inner, "t", None, 20_000)
    side = chain(inner, "s", trunk[5], 3)
    inner.add("A", (trunk[-1], side[-1]))
    inner.add("B", (trunk[-1],))
    graph = CountingGraph(inner)
    assert merge_bases(graph, "A", "B") == [trunk[-1]]
    assert len(graph.touched) < 20


def test_redundancy_check_is_bounded() -> None:
    inner = DictGraph()
    trunk = chain(inner, "t", None, 20_000)
    a1 = chain(inner, "a", trunk[-1], 5)
    b1 = chain(inner, "b", trunk[-1], 5)
    inner.add("X", (a1[-1], b1[-1]))
    inner.add("Y", (b1[-1], a1[-1]))
    graph = CountingGraph(inner)
    assert merge_bases(graph, "X", "Y") == sorted([a1[-1], b1[-1]])
    assert independent(graph, [trunk[-3], "X", "Y", a1[0]]) == ["X", "Y"]
    assert len(graph.touched) < 40


def test_is_ancestor_walk_is_bounded() -> None:
    inner = DictGraph()
    trunk = chain(inner, "t", None, 20_000)
    graph = CountingGraph(inner)
    assert is_ancestor(graph, trunk[-10], trunk[-1])
    assert not is_ancestor(graph, trunk[-1], trunk[-10])
    assert len(graph.touched) <= 12


def test_200k_commit_history_needs_no_recursion() -> None:
    n = 200_000
    # Children listed before parents forces DictGraph to order the whole chain itself.
    parents = {f"c{i}": ((f"c{i - 1}",) if i else ()) for i in reversed(range(n))}
    graph = DictGraph(parents)
    assert graph.generation(f"c{n - 1}") == n
    assert merge_bases(graph, f"c{n - 1}", "c0") == ["c0"]
    assert is_ancestor(graph, "c0", f"c{n - 1}")
    assert sum(1 for _ in iter_history(graph, f"c{n - 1}", first_parent=True)) == n


def test_dict_graph_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="cycle"):
        DictGraph({"a": ("b",), "b": ("a",)})
    with pytest.raises(ValueError, match="not in the graph"):
        DictGraph({"a": ("missing",)})
    graph = DictGraph({"a": ()})
    with pytest.raises(ValueError, match="already"):
        graph.add("a")
    with pytest.raises(RefNotFoundError):
        graph.parents("zzz")


def test_dict_graph_accepts_diamonds_in_any_order() -> None:
    graph = DictGraph({"m": ("b", "c"), "b": ("a",), "c": ("a", "b"), "a": ()})
    assert [graph.generation(c) for c in "abcm"] == [1, 2, 3, 4]


# ----------------------------------------------------------------------------- random DAGs vs definition


@st.composite
def dags(draw: st.DrawFn) -> list[tuple[int, ...]]:
    """Parent lists (indexes of earlier commits); some roots, many merges."""
    n = draw(st.integers(1, 30))
    result: list[tuple[int, ...]] = []
    for i in range(n):
        if i == 0 or draw(st.integers(0, 9)) == 0:
            result.append(())
            continue
        first = draw(st.integers(max(0, i - 4), i - 1))
        extra = draw(st.lists(st.integers(0, i - 1), max_size=draw(st.sampled_from([0, 0, 1, 1, 2]))))
        result.append(tuple(dict.fromkeys([first, *extra])))
    return result


def _maximal(candidates: set[int], ancestors: list[set[int]]) -> set[int]:
    return {c for c in candidates if not any(c != d and c in ancestors[d] for d in candidates)}


@settings(max_examples=200, deadline=None)
@given(dag=dags(), data=st.data())
def test_random_dags_match_definitions(dag: list[tuple[int, ...]], data: st.DataObject) -> None:
    graph = DictGraph({str(i): tuple(map(str, ps)) for i, ps in enumerate(dag)})
    ancestors: list[set[int]] = []
    for i, ps in enumerate(dag):
        ancestors.append({i}.union(*(ancestors[p] for p in ps)))
    commits = st.integers(0, len(dag) - 1)

    def ids(xs: Sequence[int] | set[int]) -> set[str]:
        return {str(x) for x in xs}

    for _ in range(5):
        a, b = data.draw(commits), data.draw(commits)
        assert set(merge_bases(graph, str(a), str(b))) == ids(_maximal(ancestors[a] & ancestors[b], ancestors))
        assert is_ancestor(graph, str(a), str(b)) == (a in ancestors[b])
        others = data.draw(st.lists(commits, min_size=1, max_size=3))
        reach_others = set().union(*(ancestors[o] for o in others))
        expected_many = _maximal(ancestors[a] & reach_others, ancestors)
        assert set(merge_bases_many(graph, str(a), [str(o) for o in others])) == ids(expected_many)
        group = data.draw(st.lists(commits, min_size=1, max_size=4))
        common = set.intersection(*(ancestors[g] for g in group))
        assert set(octopus_merge_bases(graph, [str(g) for g in group])) == ids(_maximal(common, ancestors))
        assert set(independent(graph, [str(g) for g in group])) == ids(_maximal(set(group), ancestors))

    tip = data.draw(commits)
    order = list(iter_history(graph, str(tip)))
    assert set(order) == ids(ancestors[tip])
    keys = [(-graph.generation(c), -graph.created_at(c)) for c in order]
    assert keys == sorted(keys)


# ----------------------------------------------------------------------------- resolution


def hexid(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


class Namespace:
    """RefNamespace over a DictGraph with hex ids."""

    def __init__(self, graph: DictGraph, branches: dict[str, str], tags: dict[str, str]) -> None:
        self.graph, self.branches, self.tags = graph, branches, tags

    def commit_exists(self, commit_id: str) -> bool:
        return commit_id in self.graph

    def branch_tip(self, name: str) -> str | None:
        return self.branches.get(name)

    def tag_target(self, name: str) -> str | None:
        return self.tags.get(name)

    def ids_with_prefix(self, prefix: str) -> list[str]:
        return [c for c in self.graph if c.startswith(prefix)]


ROOT = hexid("root")
C1 = hexid("c1")
C2 = hexid("c2")
SIDE = hexid("side")
MERGE = hexid("merge")
# Two commits sharing the prefix "abcd"; the first also starts with "abcd1".
AB1 = "abcd1" + hexid("ab1")[5:]
AB2 = "abcd2" + hexid("ab2")[5:]

RES_GRAPH = DictGraph(
    {ROOT: (), C1: (ROOT,), C2: (C1,), SIDE: (ROOT,), MERGE: (C2, SIDE), AB1: (ROOT,), AB2: (ROOT,)}
)
RES_NS = Namespace(
    RES_GRAPH,
    branches={"main": MERGE, "abcd1": ROOT, C1: C2, "dup": C1, "feature/x": SIDE},
    tags={"v1": C2, "dup": SIDE},
)

RESOLVE_CASES = [
    # text, expected commit
    ("main", MERGE),
    ("main^", C2),
    ("main^1", C2),
    ("main^01", C2),
    ("main^2", SIDE),
    ("main~", C2),
    ("main~2", C1),
    ("main~3", ROOT),
    ("main^2~1", ROOT),
    ("main^0~0", MERGE),
    ("main~1^0~1", C1),
    ("v1~1", C1),
    ("feature/x^", ROOT),
    (C1, C1),  # a full id wins over a branch named like it
    (C1 + "~1", ROOT),
    (C1.upper(), C1),
    ("dup", C1),  # branch wins over tag
    ("abcd1", ROOT),  # branch wins over the commit-id prefix "abcd1"
    ("abcd1" + AB1[5:9], AB1),
    ("abcd2", AB2),
    (MERGE[:4], MERGE),
    (MERGE[:10].upper() + "^2", SIDE),
]


@pytest.mark.parametrize(("text", "expected"), RESOLVE_CASES)
def test_resolve(text: str, expected: str) -> None:
    assert resolve(text, RES_NS, RES_GRAPH) == expected


RESOLVE_ERRORS = [
    # text, error type, fragment of the message
    ("main^3", NoSuchAncestorError, f"main^3: step '^3' fails: commit {MERGE[:7]} has 2 parent(s)"),
    ("main~2^2", NoSuchAncestorError, f"main~2^2: step '^2' fails: commit {C1[:7]} has 1 parent(s)"),
    ("main~4", NoSuchAncestorError, "step '~4' fails: commit " + ROOT[:7] + " is a root, reached after 3 of 4"),
    ("main^2~02", NoSuchAncestorError, "step '~02' fails"),
    ("abcd", AmbiguousRefError, "ambiguous"),
    ("abc", RefNotFoundError, "'abc' not found"),
    ("nope~1", RefNotFoundError, "'nope' not found"),
    (hexid("absent"), RefNotFoundError, "not found"),
    ("main^x", RefSyntaxError, "position 5"),
]


@pytest.mark.parametrize(("text", "error", "fragment"), RESOLVE_ERRORS)
def test_resolve_errors(text: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        resolve(text, RES_NS, RES_GRAPH)
    assert fragment in str(info.value)


def test_ambiguous_prefix_lists_candidates() -> None:
    with pytest.raises(AmbiguousRefError) as info:
        resolve_base("abcd", RES_NS)
    assert info.value.candidates == sorted([AB1, AB2])
    assert AB1[:12] in str(info.value) and AB2[:12] in str(info.value)
    assert not isinstance(info.value, RefNotFoundError)


def test_no_such_ancestor_is_a_ref_not_found() -> None:
    with pytest.raises(RefNotFoundError):
        resolve("main~9", RES_NS, RES_GRAPH)


def test_apply_steps_without_written_text() -> None:
    assert apply_steps(RES_GRAPH, MERGE, [Step("^", 2), Step("~", 1)]) == ROOT
    with pytest.raises(NoSuchAncestorError, match=r"step '\^2' fails"):
        apply_steps(RES_GRAPH, C2, [Step("^", 2)])


def test_shortest_unique_prefix() -> None:
    ids = ["abcdef0123", "abcdef0199", "abcdff0000", "ffff000000"]
    calls: list[str] = []

    def lookup(prefix: str) -> list[str]:
        calls.append(prefix)
        return [i for i in ids if i.startswith(prefix)]

    assert shortest_unique_prefix("abcdef0123", lookup, min_length=4) == "abcdef012"
    assert shortest_unique_prefix("abcdff0000", lookup, min_length=4) == "abcdf"
    assert shortest_unique_prefix("ffff000000", lookup, min_length=4) == "ffff"
    assert shortest_unique_prefix("ffff000000", lookup) == "ffff000"
    assert shortest_unique_prefix("abc", lookup) == "abc"
    assert calls == ["abcd", "abcd", "ffff", "ffff000"]
    full = hexid("x")
    assert shortest_unique_prefix(full, lambda p: [full, full[:-1] + "z"]) == full
