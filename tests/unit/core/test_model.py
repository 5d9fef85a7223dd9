"""Status variables, value types and the registry: validation names the field and the reason."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridstat.core.model import (
    BOOL,
    FLOAT,
    INT,
    MAX_VARIABLE_ID,
    PRIORITY_ALERT,
    PRIORITY_LOW,
    StatusVariable,
    StructType,
    TypeSpec,
    ValueType,
    VariableRegistry,
    check_name,
    split_variable_name,
    variables_by_id,
)
from gridstat.errors import DuplicateName, GridStatError, TypeMismatch, UnknownVariable, ValidationError

PMU = StructType("pmu", (("freq", "float64"), ("angle", "float32")))


def var(**kw: object) -> StatusVariable:
    args: dict[str, object] = {"publisher": "pmu1", "name": "freq", "type": FLOAT, "interval_ms": 10}
    args.update(kw)
    return StatusVariable(**args)  # type: ignore[arg-type]


def error(exc_type: type[GridStatError], fn: object, *args: object, **kw: object) -> GridStatError:
    with pytest.raises(exc_type) as exc:
        fn(*args, **kw)  # type: ignore[operator]
    return exc.value


# -- StructType ---------------------------------------------------------------

def test_struct_type_layout_and_size() -> None:
    st_ = StructType("s", (("a", "int8"), ("b", "uint64"), ("c", "float32"), ("d", "bool")))
    assert st_.size == 1 + 8 + 4 + 1
    assert st_.unpack(st_.pack({"a": -1, "b": 2**64 - 1, "c": 0.5, "d": True})) == {
        "a": -1, "b": 2**64 - 1, "c": 0.5, "d": True}


@pytest.mark.parametrize("name", ["", "has space", "-lead", "x" * 129, "a/b"])
def test_struct_type_bad_name(name: str) -> None:
    e = error(ValidationError, StructType, name, (("a", "int8"),))
    assert e.field == "name" and e.reason == "InvalidArgument"


def test_struct_type_no_fields() -> None:
    assert error(ValidationError, StructType, "s", ()).field == "fields"


def test_struct_type_repeated_field() -> None:
    e = error(ValidationError, StructType, "s", (("a", "int8"), ("a", "int16")))
    assert e.field == "fields" and "'a'" in str(e)


def test_struct_type_unknown_field_type_names_the_field() -> None:
    e = error(ValidationError, StructType, "s", (("a", "int8"), ("volts", "double")))
    assert e.field == "fields.volts" and "'double'" in str(e) and "float64" in str(e)


def test_struct_pack_type_mismatch() -> None:
    e = error(TypeMismatch, PMU.pack, {"freq": 50.0})
    assert "'angle'" in str(e) and e.reason == "TypeMismatch"
    error(TypeMismatch, PMU.pack, {"freq": "x", "angle": 1.0})


def test_struct_types_compare_by_name_and_layout() -> None:
    assert StructType("pmu", (("freq", "float64"), ("angle", "float32"))) == PMU
    assert StructType("pmu", (("freq", "float64"), ("angle", "float64"))) != PMU
    assert StructType("pmu2", PMU.fields) != PMU


# -- TypeSpec -------------------------------------------------------------------

def test_type_spec_struct_consistency() -> None:
    assert error(ValidationError, TypeSpec, ValueType.STRUCT).field == "type"
    assert error(ValidationError, TypeSpec, ValueType.INT, PMU).field == "type"
    assert TypeSpec(ValueType.STRUCT, PMU).name == "pmu"
    assert (INT.name, FLOAT.name, BOOL.name) == ("int", "float", "bool")


def test_type_spec_parse() -> None:
    assert TypeSpec.parse("INT") == INT and TypeSpec.parse("Float") == FLOAT and TypeSpec.parse("bool") == BOOL
    assert TypeSpec.parse("pmu", {"pmu": PMU}) == TypeSpec(ValueType.STRUCT, PMU)
    e = error(ValidationError, TypeSpec.parse, "double")
    assert e.field == "type" and "'double'" in str(e)
    error(ValidationError, TypeSpec.parse, "PMU", {"pmu": PMU})  # struct names are case-sensitive


# -- names ----------------------------------------------------------------------

@pytest.mark.parametrize("full,field", [
    ("pmu1", "variable"), ("a/b/c", "variable"), ("/freq", "publisher"), ("pmu1/", "variable"),
    ("pm u/freq", "publisher"), ("pmu/fr eq", "variable"), (42, "variable"),
])
def test_split_variable_name_errors(full: object, field: str) -> None:
    assert error(ValidationError, split_variable_name, full).field == field


def test_split_and_check_name_ok() -> None:
    assert split_variable_name("pmu1/freq") == ("pmu1", "freq")
    assert check_name("a.b:c-d_e", what="x") == "a.b:c-d_e"
    assert check_name("x" * 128, what="x") == "x" * 128
    assert error(ValidationError, check_name, "x" * 129, what="router").field == "router"


@given(st.text(max_size=140).filter(lambda s: not s.endswith("\n")))
def test_check_name_accepts_only_the_documented_alphabet(name: str) -> None:
    ok = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}", name) is not None
    try:
        check_name(name, what="publisher")
    except ValidationError as e:
        assert not ok and e.field == "publisher"
    else:
        assert ok


@pytest.mark.parametrize("name", ["pmu\n", "freq\n"])
def test_check_name_rejects_a_trailing_newline(name: str) -> None:
    with pytest.raises(ValidationError):
        check_name(name, what="variable")


# -- StatusVariable -------------------------------------------------------------

def test_status_variable_ok() -> None:
    v = var()
    assert v.full_name == "pmu1/freq" and v.effective_interval_ms == 10 and not v.alert


@pytest.mark.parametrize("kw,field", [
    ({"publisher": "bad name"}, "publisher"),
    ({"name": ""}, "variable"),
    ({"interval_ms": 0}, "interval_ms"),
    ({"interval_ms": -5}, "interval_ms"),
    ({"interval_ms": 86_400_001}, "interval_ms"),
    ({"priority": -1}, "priority"),
    ({"priority": PRIORITY_LOW + 1}, "priority"),
    ({"variable_id": -1}, "variable_id"),
    ({"variable_id": MAX_VARIABLE_ID + 1}, "variable_id"),
    ({"alert": True}, "min_interval_ms"),
    ({"alert": True, "min_interval_ms": -1}, "min_interval_ms"),
])
def test_status_variable_validation(kw: dict[str, object], field: str) -> None:
    e = error(ValidationError, var, **kw)
    assert e.field == field and e.reason == "InvalidArgument"


def test_alert_variable_needs_min_interval_and_uses_it() -> None:
    e = error(ValidationError, var, alert=True, min_interval_ms=0)
    assert "min_interval_ms" in str(e) and "'pmu1/freq'" in str(e)
    v = var(alert=True, min_interval_ms=250, interval_ms=0, priority=PRIORITY_ALERT)
    assert v.effective_interval_ms == 250


def test_status_variable_bounds_inclusive() -> None:
    var(interval_ms=1)
    var(interval_ms=86_400_000)
    var(variable_id=MAX_VARIABLE_ID)
    var(priority=PRIORITY_ALERT)
    var(priority=PRIORITY_LOW)


# -- VariableRegistry -----------------------------------------------------------

def test_registry_register_lookup_by_id() -> None:
    reg = VariableRegistry()
    a = reg.register("pmu1", "freq", FLOAT, interval_ms=20)
    b = reg.register("pmu1", "volt", TypeSpec(ValueType.STRUCT, PMU), interval_ms=20, priority=3)
    assert (a.variable_id, b.variable_id) == (1, 2)
    assert reg.lookup("pmu1/freq") is a and reg.by_id(2) is b and len(reg) == 2
    assert list(reg) == [a, b] and variables_by_id(list(reg)) == {1: a, 2: b}


def test_registry_duplicate_name() -> None:
    reg = VariableRegistry()
    reg.register("pmu1", "freq", FLOAT, interval_ms=20)
    e = error(DuplicateName, reg.register, "pmu1", "freq", INT, interval_ms=10)
    assert e.field == "variable" and e.reason == "AlreadyExists"


def test_registry_invalid_registration_consumes_no_id() -> None:
    reg = VariableRegistry()
    assert error(ValidationError, reg.register, "pmu1", "a", FLOAT, interval_ms=0).field == "interval_ms"
    assert error(ValidationError, reg.register, "pmu1", "al", BOOL, interval_ms=0,
                 alert=True).field == "min_interval_ms"
    assert reg.register("pmu1", "a", FLOAT, interval_ms=10).variable_id == 1
    assert len(reg) == 1


def test_registry_unknown_variable() -> None:
    reg = VariableRegistry()
    e = error(UnknownVariable, reg.lookup, "pmu1/freq")
    assert e.field == "variable" and e.reason == "UnknownVariable"
    assert error(UnknownVariable, reg.by_id, 7).field == "variable_id"
    assert error(ValidationError, reg.lookup, "no-slash").field == "variable"
    error(UnknownVariable, reg.unregister, "pmu1/freq")


def test_ids_are_never_reused() -> None:
    reg = VariableRegistry(first_id=100)
    seen = set()
    for i in range(5):
        v = reg.register("p", "v", INT, interval_ms=10)
        assert v.variable_id not in seen
        seen.add(v.variable_id)
        assert reg.unregister("p/v") is v
        error(UnknownVariable, reg.by_id, v.variable_id)
        assert len(reg) == 0, i
    assert sorted(seen) == [100, 101, 102, 103, 104]


def test_id_space_exhaustion() -> None:
    reg = VariableRegistry(first_id=MAX_VARIABLE_ID)
    assert reg.register("p", "last", INT, interval_ms=10).variable_id == MAX_VARIABLE_ID
    assert error(ValidationError, reg.register, "p", "more", INT, interval_ms=10).field == "variable_id"


def test_subscription_type_check() -> None:
    reg = VariableRegistry()
    reg.register("pmu1", "freq", FLOAT, interval_ms=20)
    reg.register("pmu1", "phasor", TypeSpec(ValueType.STRUCT, PMU), interval_ms=20)
    assert reg.check_subscription_type("pmu1/freq", FLOAT).name == "freq"
    e = error(TypeMismatch, reg.check_subscription_type, "pmu1/freq", INT)
    assert e.field == "type" and e.reason == "TypeMismatch" and "'float'" in str(e) and "'int'" in str(e)
    # structs must match name and layout, not just the name
    other = StructType("pmu", (("freq", "float64"), ("angle", "float64")))
    error(TypeMismatch, reg.check_subscription_type, "pmu1/phasor", TypeSpec(ValueType.STRUCT, other))
    error(TypeMismatch, reg.check_subscription_type, "pmu1/phasor", FLOAT)
    assert reg.check_subscription_type("pmu1/phasor", TypeSpec(ValueType.STRUCT, PMU)).name == "phasor"
    error(UnknownVariable, reg.check_subscription_type, "pmu1/nope", FLOAT)
