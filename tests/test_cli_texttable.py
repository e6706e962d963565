"""The CLI's text table drawn without polars (:mod:`trimerge.cli.texttable`) is the text polars
draws, character for character, or is not drawn at all (polars then draws it)."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

pl = pytest.importorskip("polars")

from trimerge.cli import texttable  # noqa: E402


def polars_text(table: pa.Table) -> str:
    with pl.Config(tbl_rows=texttable.MAX_ROWS, tbl_cols=texttable.MAX_COLUMNS, fmt_str_lengths=texttable.MAX_TEXT):
        return str(pl.from_arrow(table))


@pytest.fixture(autouse=True)
def not_a_terminal(monkeypatch):
    for k in [k for k in __import__("os").environ if k.startswith("POLARS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setattr(texttable, "_width_limit", lambda: texttable.DEFAULT_WIDTH)


def random_column(rng: random.Random, n: int) -> pa.Array:
    kind = rng.choice(["int64", "int32", "uint8", "uint64", "bool", "string", "large_string", "long"])
    if kind == "bool":
        return pa.array([rng.choice([True, False, None]) for _ in range(n)], pa.bool_())
    if kind in ("string", "large_string", "long"):
        top = 60 if kind == "long" else 12
        chars = "abc XYZ_-.,:;'\"!?#0123456789 "
        values = [None if rng.random() < 0.1 else "".join(rng.choice(chars) for _ in range(rng.randint(0, top)))
                  for _ in range(n)]
        return pa.array(values, pa.large_string() if kind == "large_string" else pa.string())
    t = getattr(pa, kind)()
    lo, hi = (0, 255) if kind == "uint8" else ((0, 2**64 - 1) if kind == "uint64" else (-(2**31), 2**31 - 1))
    return pa.array([None if rng.random() < 0.1 else rng.randint(lo, hi) for _ in range(n)], t)


def test_random_simple_tables_draw_as_polars_draws_them():
    rng = random.Random(42)
    drawn = 0
    for _ in range(400):
        n, c = rng.choice([rng.randint(0, 52), rng.randint(0, 130)]), rng.randint(1, 8)
        names = [rng.choice(["id", "v", "a_long_column_name", "x" * rng.randint(1, 45), "with space"]) + str(i)
                 for i in range(c)]
        table = pa.table({name: random_column(rng, n) for name in names})
        text = texttable.simple_text(table)
        if text is not None:
            drawn += 1
            assert text == polars_text(table), table.schema
    assert drawn > 100


@pytest.mark.parametrize("table", [
    pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}),
    pa.table({"id": pa.array([], pa.int64()), "v": pa.array([], pa.string())}),
    pa.table({"s": ["  lead", "trail  ", "", None, "x" * 40, "y" * 41]}),
    pa.table({"b": [True, None, False], "u": pa.array([0, 2**64 - 1, None], pa.uint64())}),
    pa.table({f"c{i}": [i] for i in range(16)}),
    pa.table({"n": list(range(50))}),
    pa.table({"n": list(range(51)), "s": ["x"] * 51}),
    pa.table({"n": list(range(1000)), "s": [None] * 990 + ["y" * 30] * 10}),  # widths: of the rows shown
], ids=["small", "empty", "text-edges", "bool-u64", "16-columns", "50-rows", "51-rows", "1000-rows"])
def test_edge_cases_draw_as_polars_draws_them(table):
    assert texttable.simple_text(table) == polars_text(table)


@pytest.mark.parametrize("table", [
    pa.table({"f": [1.5]}),
    pa.table({"s": ["héllo"]}),
    pa.table({"s": ["tab\there"]}),
    pa.table({"l": [[1, 2]]}),
    pa.table({f"c{i}": [i] for i in range(21)}),
    pa.table({f"c{i}": ["x" * 30] for i in range(4)}),  # wider than polars' 100 characters: polars wraps it
], ids=["float", "non-ascii", "control", "list", "21-columns", "wide"])
def test_what_is_not_simple_is_left_to_polars(table):
    assert texttable.simple_text(table) is None
