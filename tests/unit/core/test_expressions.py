"""The where-expression language (gridstat.core.expressions, docs/queries.md): parsing, printing,
evaluation against a reference built alongside each random tree, errors with their column, and the
conversion to the admission controller's filters (exact where it can be, a superset otherwise)."""

from __future__ import annotations

import fnmatch
import math
import operator
from collections.abc import Callable, Mapping

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gridstat.admission.filters import Filter
from gridstat.core import expressions as ex
from gridstat.core.model import FLOAT, StatusVariable
from gridstat.errors import ValidationError

Subject = Mapping[str, ex.Value]
Pred = Callable[[Subject], bool]

_OPS: dict[str, Callable[[object, object], bool]] = {
    "=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}

TEXT_NAMES = ["region", "kind", "station", "in", "3phase", "publisher", "name"]
NUMBER_NAMES = ["kv", "interval_ms", "frames_per_s", "region"]
texts = st.sampled_from(["west", "east", "freq", "a'b", "230", "WEST1", "", "W%"])
numbers = st.sampled_from([0.0, -1.5, 20.0, 230.0, 1e20, 0.125])


def _ref_compare(have: ex.Value | None, op: str, want: ex.Value) -> bool:
    if have is None:
        return False
    if isinstance(want, str):
        return isinstance(have, str) and _OPS[op](have, want)
    try:
        number = float(have)
    except ValueError:
        return False
    return math.isfinite(number) and _OPS[op](number, want)


@st.composite
def leaves(draw: st.DrawFn) -> tuple[ex.Expression, Pred]:
    kind = draw(st.sampled_from(["cmp", "in", "like"]))
    negated = draw(st.booleans())
    if kind == "like":
        name = draw(st.sampled_from([n for n in TEXT_NAMES if n not in ex.FIELDS or ex.FIELDS[n] is str]))
        pattern = draw(st.text(alphabet="we%_sE1", max_size=5))
        glob = pattern.replace("%", "*").replace("_", "?")

        def like(s: Subject) -> bool:
            have = s.get(name)
            return isinstance(have, str) and fnmatch.fnmatchcase(have, glob) != negated
        return ex.Like(name, pattern, negated), like
    numeric = draw(st.booleans())
    names = NUMBER_NAMES if numeric else TEXT_NAMES
    name = draw(st.sampled_from([n for n in names if ex.FIELDS.get(n, str if not numeric else float)
                                 is (float if numeric else str) or n not in ex.FIELDS]))
    values = numbers if numeric else texts
    if kind == "cmp":
        op, value = draw(st.sampled_from(ex.COMPARISONS)), draw(values)
        return ex.Comparison(name, op, value), lambda s: _ref_compare(s.get(name), op, value)
    vs = tuple(draw(st.lists(values, min_size=1, max_size=4)))
    # a predicate on an attribute the subject lacks is false, negated or not (as `!=` is)
    return (ex.Membership(name, vs, negated),
            lambda s: name in s and any(_ref_compare(s.get(name), "=", v) for v in vs) != negated)


def _combine(children: st.SearchStrategy[tuple[ex.Expression, Pred]]) -> st.SearchStrategy[tuple[ex.Expression, Pred]]:
    def build(kind: str, parts: list[tuple[ex.Expression, Pred]]) -> tuple[ex.Expression, Pred]:
        if kind == "not":
            e, p = parts[0]
            return ex.Not(e), lambda s: not p(s)
        preds = [p for _, p in parts]
        if kind == "and":
            return ex.And(tuple(e for e, _ in parts)), lambda s: all(p(s) for p in preds)
        return ex.Or(tuple(e for e, _ in parts)), lambda s: any(p(s) for p in preds)
    return st.builds(build, st.sampled_from(["not", "and", "or"]), st.lists(children, min_size=2, max_size=3))


trees = st.recursive(leaves(), _combine, max_leaves=8)
subjects = st.fixed_dictionaries({}, optional={
    "region": st.sampled_from(["west", "east", "230", "1e3", "nan"]), "kind": texts, "station": texts,
    "in": texts, "3phase": texts, "kv": st.sampled_from(["230", "20", "-1.5", "x", "inf"]),
    "publisher": texts, "name": texts,
    "interval_ms": numbers, "frames_per_s": numbers})


@given(trees)
def test_parse_of_render_is_the_same_tree(tree: tuple[ex.Expression, Pred]) -> None:
    expr, _ = tree
    assert ex.parse(ex.render(expr)) == expr


@given(trees, subjects)
def test_evaluation_agrees_with_the_reference(tree: tuple[ex.Expression, Pred], subject: Subject) -> None:
    expr, reference = tree
    assert ex.matches(ex.parse(ex.render(expr)), subject) == reference(subject)


_TOKENS = st.sampled_from(["a", "kind", "'x'", "'", '"', "1", "-2.5e3", "=", "!=", "<>", "<", ">=", "(", ")",
                           ",", " and ", " or ", "not ", " in ", " like ", "%", "_", " ", "\n", "é", "1e999"])


@given(st.one_of(st.text(max_size=60), st.lists(_TOKENS, max_size=30).map("".join)))
def test_any_text_parses_or_fails_with_a_validation_error(text: str) -> None:
    try:
        expr = ex.parse(text)
    except ex.ExpressionError as exc:
        assert exc.field == "where"
        assert 0 <= exc.column <= len(text) + 1
        return
    assert ex.parse(ex.render(expr)) == expr


@pytest.mark.parametrize(("text", "column", "says"), [
    ("kind = ", 8, "expected a 'text' or a number"),
    ("kind == 'x'", 7, "found '='"),
    ("interval_ms = 'x'", 15, "interval_ms is a number"),
    ("publisher = 5", 13, "publisher is a text"),
    ("kind = 'abc", 8, "never closed"),
    ("a = 1 and", 10, "expected '(', 'not' or a name"),
    ("station like 5", 14, "expected a 'text'"),
    ("a = 1e999", 5, "out of range"),
    ("_x = 1", 1, "unexpected character '_'"),
    ("interval_ms like '1%'", 1, "'like' compares texts"),
])
def test_errors_name_the_field_the_column_and_what_was_expected(text: str, column: int, says: str) -> None:
    with pytest.raises(ex.ExpressionError) as caught:
        ex.parse(text)
    assert caught.value.field == "where" and caught.value.column == column
    assert says in str(caught.value) and f"column {column}" in str(caught.value)


def test_errors_give_the_line_of_a_multi_line_text_and_bounds_hold() -> None:
    with pytest.raises(ex.ExpressionError, match="line 2, column 3"):
        ex.parse("a = 1 and\nb ! 2")
    with pytest.raises(ex.ExpressionError, match="deeper than"):
        ex.parse("(" * 40 + "a = 1" + ")" * 40)
    with pytest.raises(ex.ExpressionError, match="at most"):
        ex.parse("a = 1 or " * 600 + "a = 1")
    with pytest.raises(ex.ExpressionError, match="is empty"):
        ex.parse("  ")
    with pytest.raises(ex.ExpressionError, match="sel at column 1"):
        ex.parse(")", field="sel")


def test_a_variable_is_seen_through_its_fields_and_attributes() -> None:
    var = StatusVariable("pmu1", "freq", FLOAT, 16, frames_per_s=60,
                         attributes={"station": "WEST_1", "kind": "freq", "kv": "230", "name": "shadowed"})
    assert ex.matches(ex.parse("publisher = 'pmu1' and name = 'freq' and type = 'float'"), var)
    assert ex.matches(ex.parse("frames_per_s = 60 and interval_ms < 20 and kv >= 115"), var)
    assert ex.matches(ex.parse("station like 'WEST%' and kind in ('freq', 'dfreq')"), var)
    assert not ex.matches(ex.parse("region = 'west'"), var)  # it has no region
    assert ex.matches(ex.parse("not region = 'west'"), var)
    assert not ex.matches(ex.parse("station like 'west%'"), var)  # like is case-sensitive


def _event(subject: Subject) -> dict[str, ex.Value]:
    out = dict(subject)
    out.pop("variable", None)
    if "name" in out:
        out["variable"] = out.pop("name")
    return out


@given(st.lists(leaves(), min_size=1, max_size=4), subjects)
def test_a_conjunction_of_comparisons_converts_exactly(parts: list[tuple[ex.Expression, Pred]],
                                                       subject: Subject) -> None:
    # (the filters' texts are 1..128 characters: an empty one is refused, not converted)
    comparisons = [e for e, _ in parts if isinstance(e, ex.Comparison) and e.op != "!=" and e.value != ""]
    assume(comparisons)
    expr = comparisons[0] if len(comparisons) == 1 else ex.And(tuple(comparisons))
    try:
        flt = Filter.from_expression(expr)
    except ValidationError:  # an attribute compared with a number and a text, or an empty interval
        assert not ex.matches(expr, subject)
        return
    assert flt.matches(_event(subject)) == ex.matches(expr, subject)
    back = flt.to_expression()
    assert back is not None and Filter.from_expression(back) == flt


@given(trees, subjects)
def test_the_widened_filter_is_a_superset(tree: tuple[ex.Expression, Pred], subject: Subject) -> None:
    expr, _ = tree
    try:
        flt = Filter.from_expression(expr, exact=False)
    except ValidationError:
        assume(False)
        return
    if ex.matches(expr, subject):
        assert flt.matches(_event(subject))


def test_what_the_covering_graph_cannot_represent_is_refused_with_its_column() -> None:
    with pytest.raises(ex.ExpressionError, match=r"column 17.*'a = 1 or b = 2'"):
        Filter.from_expression(ex.parse("kind = 'x' and (a = 1 or b = 2)"))
    with pytest.raises(ex.ExpressionError, match="column 1"):
        Filter.from_expression(ex.parse("kind != 'x'"))
    exact = Filter.from_expression(ex.parse("name = 'freq' and kv in (230) and station like 'W1'"))
    assert exact == Filter.parse('variable=freq, kv=230, station=W1')
    wide = Filter.from_expression(ex.parse("kv in (115, 230) and station like 'W%' and kind != 'x'"), exact=False)
    assert wide == Filter.parse("kv>=115, kv<=230, station>=W, station<X")
    assert wide.covers(Filter.from_expression(ex.parse("kv = 115 and station = 'W2'")))
