"""dz-expressions against seed 004's worked examples (Figs. 2 and 4) and the algebra's laws."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.errors import ValidationError
from gridstat.granularity import dz
from gridstat.granularity.space import Attribute, AttributeSpace, Rectangle

FIG2 = AttributeSpace((Attribute("humidity", "float", 0, 100), Attribute("Temp", "float", 0, 100)))
FIG4_SUB = Rectangle.box([(0.0, 1.0), (0.0, 0.25)])


def test_fig2_accurate_mapping_is_000_and_010() -> None:
    sub1 = FIG2.rectangle({"humidity": [0, 25], "Temp": [0, 100]})
    assert dz.encode(sub1, max_depth=8) == {"000", "010"}


def test_fig2_with_wildcards_is_0_star_0() -> None:
    sub1 = FIG2.rectangle({"humidity": [0, 25], "Temp": [0, 100]})
    assert dz.encode(sub1, max_depth=8, wildcard=True) == {"0*0"}
    assert dz.merge_wildcards({"000", "010"}) == {"0*0"}


def test_fig2_coarsened_mapping_is_0() -> None:
    assert dz.coarser_set({"000", "010"}, step=2) == {"0"}


def test_fig4_coarser_and_finer_sub_spaces() -> None:
    current = {"00", "10"}
    assert dz.coarser_set(current, step=2) == {dz.EPSILON}                      # DZ_-1 = {ε}
    assert dz.finer_set(current, FIG4_SUB, step=2) == {"0000", "0010", "1000", "1010"}  # DZ_+1
    assert dz.encode(FIG4_SUB, max_depth=4) == {"0000", "0010", "1000", "1010"}
    assert dz.encode(FIG4_SUB, max_depth=8, wildcard=True) == {"*0*0"}
    assert dz.merge_wildcards({"0000", "0010", "1000", "1010"}) == {"*0*0"}


def test_covering_is_prefix_with_wildcards() -> None:
    assert dz.covers("", "0101")
    assert dz.covers("01", "0110")
    assert not dz.covers("0110", "01")
    assert dz.covers("*0", "10")
    assert not dz.covers("10", "*0")
    assert dz.covers("*0*0", "0010")
    assert not dz.covers("1", "0")


def test_wildcard_expression_covers_exactly_its_expansion() -> None:
    for expr in ("*0*0", "0*0", "*", "1*1"):
        plain = dz.expand(expr)
        assert all(dz.covers(expr, p) for p in plain)
        assert dz.union_volume(plain) == pytest.approx(dz.volume(expr))


def test_mapping_encloses_the_rectangle_at_every_depth() -> None:
    sub = Rectangle.box([(0.1, 0.7), (0.3, 0.35)])
    for depth in range(0, 12):
        m = dz.encode(sub, max_depth=depth)
        assert dz.encloses(m, sub)
        assert all(len(x) <= depth for x in m)
    # deeper is never coarser
    vols = [dz.union_volume(dz.encode(sub, max_depth=k)) for k in range(0, 12)]
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(vols))


def test_point_dz_and_contains() -> None:
    p = (0.3, 0.8)   # humidity lower half, Temp upper half, humidity second quarter
    assert dz.point_dz(p, 3) == "011"
    assert dz.contains("01", p)
    assert not dz.contains("00", p)
    assert dz.contains("*1", p)


def test_gridstat_attribute_space_of_status_variables() -> None:
    space = AttributeSpace((
        Attribute("region", "category", categories=("north", "south", "east", "west")),
        Attribute("type", "category", categories=("voltage", "current", "frequency", "breaker")),
        Attribute("kv", "int", 0, 1023),
    ))
    west_voltage = space.rectangle({"region": "west", "type": "voltage"})
    # Round robin: bits 1 and 4 split region (west = 11), bits 2 and 5 type (voltage = 00), bit 3 kv.
    assert dz.encode(west_voltage, max_depth=30) == {"10010", "10110"}
    assert dz.encode(west_voltage, max_depth=30, wildcard=True) == {"10*10"}
    point = space.point({"region": "west", "type": "voltage", "kv": 345})
    assert west_voltage.contains(point)
    assert dz.contains("10*10", point)
    assert dz.point_dz(point, 5) == "10010"
    high = space.rectangle({"region": ["east", "west"], "kv": [512, 1023]})
    assert dz.encode(high, max_depth=30) == {"101", "111"}
    assert dz.encode(high, max_depth=30, wildcard=True) == {"1*1"}
    with pytest.raises(ValidationError):
        space.point({"region": "mars", "type": "voltage", "kv": 1})
    with pytest.raises(ValidationError):
        space.rectangle({"kv": [10, 2000]})


def test_bad_expressions() -> None:
    with pytest.raises(ValidationError):
        dz.check("012")


bits = st.text(alphabet="01", max_size=8)


@given(bits, bits, bits)
def test_covering_is_a_partial_order(a: str, b: str, c: str) -> None:
    assert dz.covers(a, a)
    if dz.covers(a, b) and dz.covers(b, a):
        assert a == b
    if dz.covers(a, b) and dz.covers(b, c):
        assert dz.covers(a, c)


@given(bits, bits)
def test_two_plain_sub_spaces_nest_or_are_disjoint(a: str, b: str) -> None:
    if dz.intersects(a, b):
        assert dz.covers(a, b) or dz.covers(b, a)


def test_volumes_halve_per_bit() -> None:
    for k in range(6):
        assert sum(dz.volume("".join(x)) for x in itertools.product("01", repeat=k)) == pytest.approx(1.0)
