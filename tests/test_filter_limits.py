"""The filter guard (trimerge.lineage.tables.filters) against every operator kind, depth and width.

In-process: each kind at its limit passes, one step past is refused with one line; hypothesis
mixes kinds, depths and widths and the guard answers every one with a result or one clear line.
In a subprocess: every filter the guard lets through — the limits themselves and what hypothesis
generated — is planned, read, counted and deleted by Lance with and without a scalar index,
and must neither crash the process nor take long.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trimerge.lineage.errors import InvalidOperationError
from trimerge.lineage.tables.filters import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_NESTING,
    MAX_FILTER_TERMS,
    MAX_IN_VALUES,
    MAX_LIST_ITEMS,
    check_filter,
    measure_filter,
)

ATOMS = ["id", "f", "v", "b", "1", "2.5", "'a'", "true", "NULL", "`id`"]
# Each binary operator with a left side and an operand that make a well-typed chain, so Lance
# plans the whole tree (a type error found early would spare it the deep recursion).
CHAINS = {"+": ("id = ", "1"), "-": ("id = ", "1"), "*": ("id = ", "1"), "/": ("f = ", "1.0"), "%": ("id = ", "7"),
          "<<": ("id = ", "1"), "||": ("v = ", "'a'"), "=": ("b = ", "true"), "<>": ("b <> ", "true"),
          "<": ("b < ", "true"), ">=": ("b >= ", "true"), "IS DISTINCT FROM": ("b IS DISTINCT FROM ", "true"),
          "LIKE": ("v LIKE ", "'a'"), "AND": ("", "b"), "OR": ("", "b")}
CHAIN_OPS = sorted(CHAINS)
# (prefix, suffix, boolean) wrapped around an expression once per level.
NESTINGS = {"paren": ("(", ")", False), "abs": ("abs(", ")", False), "coalesce": ("coalesce(1, ", ")", False),
            "cast": ("CAST(", " AS BIGINT)", False), "try_cast": ("TRY_CAST(", " AS BIGINT)", False),
            "not": ("NOT ", "", True), "not_paren": ("NOT (", ")", True), "minus": ("- ", "", False),
            "minus_paren": ("-(", ")", False), "array": ("[", "]", False), "right_operand": ("1 * (", ")", False),
            "case": ("CASE WHEN b THEN ", " ELSE 0 END", False), "is_null": ("(", ") IS NOT NULL", True),
            "between": ("(", " BETWEEN true AND true)", True), "coalesce_first": ("coalesce(", ", 1)", False),
            "nvl": ("nvl(", ", 1)", False), "ifnull": ("ifnull(1, ", ")", False),
            "not_between": ("(", ") NOT BETWEEN true AND true", True), "nullif": ("nullif(", ", 1)", False),
            "greatest": ("greatest(", ", 1)", False)}


def chain(op: str, n: int, atom: str = "1") -> str:
    return f" {op} ".join([atom] * n)


def chain_filter(op: str, n: int) -> str:
    lhs, atom = CHAINS[op]
    return lhs + chain(op, n, atom)


def nest(kind: str, n: int, inner: str = "id") -> str:
    prefix, suffix, _ = NESTINGS[kind]
    return prefix * n + inner + suffix * n


def nest_filter(kind: str, n: int) -> str:
    return nest(kind, n, "b") if NESTINGS[kind][2] else f"id = {nest(kind, n)}"


def deepest(make, hi: int) -> tuple[int, str]:
    """The largest n for which the guard accepts ``make(n)``, and that filter."""
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _accepted(make(mid)) else (lo, mid)
    return lo, make(lo)


def _accepted(text: str) -> bool:
    try:
        check_filter(text)
    except InvalidOperationError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- in-process
@pytest.mark.parametrize("op", CHAIN_OPS)
def test_chains_of_every_operator_are_bounded(op):
    n, _ = deepest(lambda k: chain_filter(op, k), MAX_FILTER_TERMS + MAX_FILTER_DEPTH + 10)
    # sqlglot parenthesises a chain of IS DISTINCT FROM: its length is bounded by the nesting.
    limit = {"AND": MAX_FILTER_TERMS, "OR": MAX_FILTER_TERMS, "IS DISTINCT FROM": MAX_FILTER_NESTING}.get(
        op, MAX_FILTER_DEPTH)
    assert limit - 3 <= n <= limit + 1, (op, n)
    with pytest.raises(InvalidOperationError) as exc:
        check_filter(chain_filter(op, n + 1))
    assert "\n" not in str(exc.value) and ("deep" in str(exc.value) or "AND/OR" in str(exc.value))


def test_the_issues_reproductions_are_refused():
    for text in ("id = " + "+".join(["1"] * 1000), "id = " + "-".join(["1"] * 2000)):
        with pytest.raises(InvalidOperationError, match="operators deep"):
            check_filter(text)


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_nesting_of_every_kind_is_bounded(kind):
    n, text = deepest(lambda k: nest_filter(kind, k), MAX_FILTER_NESTING + 5)
    assert n >= 8, (kind, n)  # every kind nests some: plain filters are not refused
    assert measure_filter(text).nesting <= MAX_FILTER_NESTING
    with pytest.raises(InvalidOperationError, match="nests"):
        check_filter(nest_filter(kind, MAX_FILTER_NESTING + 1))


@pytest.mark.parametrize("opening, closing, limit", [
    ("id IN (", ")", MAX_IN_VALUES), ("id NOT IN (", ")", MAX_IN_VALUES),
    ("id = coalesce(", ")", MAX_LIST_ITEMS), ("array_has_any(tags, [", "])", MAX_LIST_ITEMS)])
def test_lists_are_bounded_in_width_and_checked_fast(opening, closing, limit):
    values = [str(i) if i % 3 else f"'{i}'" for i in range(limit + 1)]
    started = time.monotonic()
    check_filter(opening + ",".join(values[:limit]) + closing)
    with pytest.raises(InvalidOperationError, match=f"{limit:,}"):
        check_filter(opening + ",".join(values) + closing)
    assert time.monotonic() - started < 10


def test_lists_of_expressions_are_parsed_whole():
    # Items that are not plain literals are not shortened: their depth counts.
    deep_item = "id + " + chain("+", MAX_FILTER_DEPTH + 5, "1")
    with pytest.raises(InvalidOperationError, match="deep"):
        check_filter(f"id IN ({', '.join(['1'] * 20)}, {deep_item})")
    check_filter(f"id IN ({', '.join(['1'] * 20)}, {chain('+', 20)})")


@pytest.mark.parametrize("text, fragment", [
    ("id = ?", "placeholders"), ("id = $1", "placeholders"), ("v = 'abc", "unterminated"),
    ("`a = 1", "unterminated"), ("id = 1 /* open", "unterminated /*"), ("", "empty"), ("a\x00b", "NUL"),
    ("(" * 40 + "true" + ")" * 40, "nests"), ("id IN (" + ",".join(["1"] * 60000) + ") OR id IN ("
                                              + ",".join(["2"] * 60000) + ")", "in all"),
])
def test_lexical_refusals(text, fragment):
    with pytest.raises(InvalidOperationError, match=fragment.replace("*", r"\*")):
        check_filter(text)


def test_plain_filters_pass_untouched():
    for text in ["id = 1", "v LIKE 'a%' AND b", "`a b` = 1", "id = 1 -- comment", "id BETWEEN 1 AND 2",
                 "coalesce(v, 'x') = 'x' AND NOT (id < 3 OR id > 5) AND f >= 1e3 AND v <> 'it''s'",
                 "array_has_any(tags, ['a', 'b']) AND d = date '2020-01-01' AND x::int = 1 AND s.f = 1",
                 " AND ".join(f"c{i} = {i}" for i in range(200))]:
        assert check_filter(text) == text


# Expressions of every kind, mixed: chains, nestings and lists around smaller expressions.
def expressions() -> st.SearchStrategy[str]:
    size = st.one_of(st.integers(1, 12), st.integers(MAX_FILTER_NESTING - 3, MAX_FILTER_NESTING + 2),
                     st.integers(MAX_FILTER_DEPTH - 4, MAX_FILTER_DEPTH + 4))

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.builds(lambda op, n, e: f" {op} ".join([f"({e})"] + ["1"] * n), st.sampled_from(CHAIN_OPS), size, inner),
            st.builds(lambda op, n, e: f" {op} ".join(["1"] * n + [f"({e})"]), st.sampled_from(CHAIN_OPS),
                      st.integers(1, 6), inner),
            st.builds(lambda k, n, e: nest(k, n, e), st.sampled_from(sorted(NESTINGS)),
                      st.one_of(st.integers(1, 8), st.integers(MAX_FILTER_NESTING - 6, MAX_FILTER_NESTING + 1)), inner),
            st.builds(lambda n, e: f"id IN ({', '.join(['1'] * n)}, {e})", st.integers(0, 40), inner),
            st.builds(lambda a, b, op: f"({a}) {op} ({b})", inner, inner, st.sampled_from(CHAIN_OPS)),
        )

    return st.recursive(st.sampled_from(ATOMS), extend, max_leaves=6)


ACCEPTED: list[str] = []


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(text=expressions())
def test_the_guard_answers_every_expression_with_a_result_or_one_line(text):
    try:
        shape = measure_filter(text)
        check_filter(text)
    except InvalidOperationError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert shape.nesting <= MAX_FILTER_NESTING and shape.depth <= MAX_FILTER_DEPTH
    if len(ACCEPTED) < 40 and len(text) > 200:  # the large ones are the interesting ones for Lance
        ACCEPTED.append(text)


# ---------------------------------------------------------------------------------------------- Lance, in a subprocess
LANCE_PROBE = textwrap.dedent("""
    import json, shutil, sys, tempfile, time
    import lance, pyarrow as pa
    root = tempfile.mkdtemp(prefix="filter-limits-")
    n = 50
    table = pa.table({"id": pa.array(range(n), pa.int64()), "f": [i / 3 for i in range(n)],
                      "v": [str(i) for i in range(n)], "b": [i % 2 == 0 for i in range(n)],
                      "tags": [["a"] if i % 2 else ["b"] for i in range(n)]})
    data = {name: lance.write_dataset(table, f"{root}/{name}") for name in ("plain", "indexed")}
    data["indexed"].create_scalar_index("id", "BTREE")
    data["indexed"].create_scalar_index("v", "BTREE")
    slowest = 0.0
    for i, (text, ops) in enumerate(json.load(open(sys.argv[1]))):
        for op in ops:
            print(f"{i} {op}", flush=True)
            started = time.monotonic()
            try:
                if op == "plan":
                    data["plain"].scanner(filter=text, columns=[]).explain_plan()
                elif op == "read":
                    data["indexed"].to_table(filter=text)
                elif op == "count":
                    data["plain"].count_rows(filter=text)
                else:  # a delete writes: on a copy of the indexed dataset
                    lance.dataset(shutil.copytree(root + "/indexed", root + f"/del{i}")).delete(text)
            except Exception:
                pass  # refused by Lance (a type, an unknown function): one error, as it should be
            slowest = max(slowest, time.monotonic() - started)
    print(f"done {slowest:.2f}", flush=True)
""")
ALL_OPS = ["plan", "read", "count", "delete"]


def run_in_lance(tmp_path, filters: list[tuple[str, list[str]]], timeout: float = 300) -> float:
    """Run each filter's operations through Lance in a subprocess; the slowest one's seconds."""
    src = tmp_path / "filters.json"
    src.write_text(json.dumps(filters))
    proc = subprocess.run([sys.executable, "-c", LANCE_PROBE, str(src)], capture_output=True, text=True,
                          timeout=timeout)
    last = (proc.stdout.strip().splitlines() or ["nothing"])[-1]
    culprit = filters[int(last.split()[0])][0][:300] if last[:1].isdigit() else ""
    assert proc.returncode == 0, f"Lance died ({proc.returncode}) at {last!r}: {culprit!r}\n{proc.stderr[-2000:]}"
    assert last.startswith("done"), last
    return float(last.split()[1])


def test_filters_at_every_limit_are_safe_in_lance(tmp_path):
    at_limits = [deepest(lambda k, op=op: chain_filter(op, k), MAX_FILTER_TERMS + MAX_FILTER_DEPTH + 10)[1]
                 for op in CHAIN_OPS]
    at_limits += [deepest(lambda k, kind=kind: nest_filter(kind, k), MAX_FILTER_NESTING + 5)[1]
                  for kind in sorted(NESTINGS)]
    filters = [(text, ALL_OPS) for text in at_limits]
    # The widest lists: planned and read (seconds each; the other paths scale alike).
    filters += [("id IN (" + ",".join(map(str, range(MAX_IN_VALUES))) + ")", ["read"]),
                ("id = coalesce(" + ",".join(["1"] * MAX_LIST_ITEMS) + ")", ["plan"])]
    for text, _ in filters:
        check_filter(text)
    assert run_in_lance(tmp_path, filters) < 20


def test_what_hypothesis_let_through_is_safe_in_lance(tmp_path):
    if not ACCEPTED:  # run alone: generate some
        test_the_guard_answers_every_expression_with_a_result_or_one_line()
    assert ACCEPTED
    assert run_in_lance(tmp_path, [(text, ["plan", "read", "delete"]) for text in ACCEPTED]) < 20
