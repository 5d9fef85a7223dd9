"""Atheris harness over the where-language (gridstat.core.expressions, docs/queries.md).

Contract checked for every input (read as UTF-8, undecodable bytes replaced):

* ``parse`` returns an expression or raises ``ExpressionError`` (naming the field ``where`` and a
  column within the text), nothing else;
* what parses prints, and the print parses to the same tree;
* evaluation against a variable with attributes raises nothing;
* the conversion to the admission controller's filters, exact or as a superset, raises nothing
  but ``ValidationError``, and a superset filter matches the variable whenever the expression does.

Run by hand::

    .venv/bin/python tests/fuzz/fuzz_expressions.py --write-seeds /tmp/expr-corpus
    .venv/bin/python tests/fuzz/fuzz_expressions.py -runs=200000 /tmp/expr-corpus

tests/fuzz/test_atheris.py runs it bounded under pytest.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["gridstat"]):
    from gridstat.admission.filters import Filter
    from gridstat.core import expressions
    from gridstat.core.model import FLOAT, StatusVariable
    from gridstat.errors import ValidationError

VARIABLE = StatusVariable("pmu1", "freq", FLOAT, 16, frames_per_s=60, attributes={
    "station": "WEST_1", "kind": "freq", "region": "west", "nominal_kv": "230", "in": "x", "3phase": "yes"})
SUBJECT = expressions.subject_of(VARIABLE)
EVENT = {("variable" if k == "name" else k): v for k, v in SUBJECT.items()}


def seeds() -> list[bytes]:
    return [s.encode() for s in (
        "kind = 'freq' and region = 'west'",
        "station like 'WEST%' and kind in ('phasor', 'freq') and nominal_kv >= 115",
        "publisher = 'pmu1' or (publisher = 'pmu2' and name != 'dfreq')",
        "not (\"in\" = 'x') and \"3phase\" <> 'no' and frames_per_s > 30",
        "interval_ms <= 1e3 and type not in ('int', 'bool') and station not like '_AST%'",
        "kind = 'it''s'", "((((a = 1))))", "a = ", "'", "kind = 'freq' or",
    )]


def test_one_input(data: bytes) -> None:
    text = data.decode("utf-8", errors="replace")
    try:
        expr = expressions.parse(text)
    except expressions.ExpressionError as exc:
        assert exc.field == "where" and 0 <= exc.column <= len(text) + 1, (exc, exc.column)
        return
    assert expressions.parse(expressions.render(expr)) == expr
    matched = expressions.matches(expr, VARIABLE)
    for exact in (True, False):
        try:
            flt = Filter.from_expression(expr, exact=exact)
        except ValidationError:
            continue
        if matched:
            assert flt.matches(EVENT), (text, flt)


if __name__ == "__main__":
    from atheris_main import run  # this directory is on the path of a script run from it

    run(sys.argv, seeds, test_one_input)
