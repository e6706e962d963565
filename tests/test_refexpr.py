"""Grammar of ref expressions: table-driven cases and round-trip / robustness properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimerge.lineage.errors import RefSyntaxError
from trimerge.lineage.history.refexpr import RefExpr, Step, parse_ref_expr


def steps(*pairs: tuple[str, int]) -> tuple[Step, ...]:
    return tuple(Step(kind, n) for kind, n in pairs)


VALID = [
    # text, base, steps
    ("main", "main", ()),
    ("main^", "main", steps(("^", 1))),
    ("main~", "main", steps(("~", 1))),
    ("main^2", "main", steps(("^", 2))),
    ("main~10", "main", steps(("~", 10))),
    ("main~2^2", "main", steps(("~", 2), ("^", 2))),
    ("v1^^3~1", "v1", steps(("^", 1), ("^", 3), ("~", 1))),
    ("abc123^1^0~0", "abc123", steps(("^", 1), ("^", 0), ("~", 0))),
    ("main^01", "main", steps(("^", 1))),
    ("main~007", "main", steps(("~", 7))),
    ("main^^^", "main", steps(("^", 1), ("^", 1), ("^", 1))),
    ("main~~^~", "main", steps(("~", 1), ("~", 1), ("^", 1), ("~", 1))),
    ("feature/x-1.2^2", "feature/x-1.2", steps(("^", 2))),
    ("release@{1}", "release@{1}", ()),  # no @{...} grammar: the name simply won't resolve
    ("ünïcode~1", "ünïcode", steps(("~", 1))),
    ("a" * 64 + "~3", "a" * 64, steps(("~", 3))),
]

INVALID = [
    # text, fragment expected in the message
    ("", "empty"),
    ("^", "missing ref name"),
    ("~2", "missing ref name"),
    ("main^+1", "signed"),
    ("main~-1", "signed"),
    ("main^-", "signed"),
    ("main^ 1", "unexpected ' '"),
    (" main", "whitespace"),
    ("main ", "whitespace"),
    ("ma in~1", "whitespace"),
    ("main\t", "whitespace"),
    ("main\x00", "control character"),
    ("main\x7f", "control character"),
    ("main:path", "':'"),
    ("mai?n", "'?'"),
    ("main*", "'*'"),
    ("main[0]", "'['"),
    ("main\\x", "'\\\\'"),
    ("main^x", "unexpected 'x'"),
    ("main~1a", "unexpected 'a'"),
    ("main^{commit}", "unexpected '{'"),
    ("main^1:path", "unexpected ':'"),
    ("main~1 ", "unexpected ' '"),
    ("main^١", "unexpected '١'"),  # Arabic-Indic digit: only ASCII digits count
    ("main~" + "9" * 40, "too large"),
]


@pytest.mark.parametrize(("text", "base", "expected_steps"), VALID)
def test_valid_expressions(text: str, base: str, expected_steps: tuple[Step, ...]) -> None:
    expr = parse_ref_expr(text)
    assert expr == RefExpr(base, expected_steps)
    assert parse_ref_expr(str(expr)) == expr


@pytest.mark.parametrize(("text", "fragment"), INVALID)
def test_invalid_expressions(text: str, fragment: str) -> None:
    with pytest.raises(RefSyntaxError) as info:
        parse_ref_expr(text)
    assert fragment in str(info.value)


def test_error_message_points_at_position() -> None:
    with pytest.raises(RefSyntaxError, match=r"position 7"):
        parse_ref_expr("main~2^x")


def test_step_text_is_kept_as_written_but_not_compared() -> None:
    expr = parse_ref_expr("main^01~")
    assert [s.text for s in expr.steps] == ["^01", "~"]
    assert expr == parse_ref_expr("main^1~1")
    assert str(expr) == "main^~"


def test_canonical_string() -> None:
    assert str(parse_ref_expr("v1^1^0~0~02")) == "v1^^0~0~2"
    assert str(RefExpr("main")) == "main"


def test_leading_zeros_are_not_too_large() -> None:
    assert parse_ref_expr("main^" + "0" * 50 + "2").steps == steps(("^", 2))


# ----------------------------------------------------------------------------- properties

_base_chars = st.characters(
    blacklist_characters="^~:?*[\\",
    blacklist_categories=("Cc", "Cs"),
).filter(lambda ch: not ch.isspace())
_bases = st.text(_base_chars, min_size=1, max_size=12)
_steps = st.lists(
    st.tuples(st.sampled_from("^~"), st.one_of(st.just(""), st.from_regex(r"\A[0-9]{1,4}\Z"))),
    max_size=6,
)


@settings(max_examples=300)
@given(base=_bases, raw_steps=_steps)
def test_round_trip(base: str, raw_steps: list[tuple[str, str]]) -> None:
    text = base + "".join(kind + digits for kind, digits in raw_steps)
    expr = parse_ref_expr(text)
    assert expr.base == base
    assert [(s.kind, s.n, s.text) for s in expr.steps] == [
        (kind, int(digits) if digits else 1, kind + digits) for kind, digits in raw_steps
    ]
    assert parse_ref_expr(str(expr)) == expr


@settings(max_examples=500)
@given(st.one_of(st.text(), st.text(alphabet="ab^~0129+- :{}\t\x00")))
def test_garbage_only_raises_ref_syntax_error(text: str) -> None:
    try:
        expr = parse_ref_expr(text)
    except RefSyntaxError:
        return
    assert parse_ref_expr(str(expr)) == expr
