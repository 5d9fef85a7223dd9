"""YAML documents read with the line of every field, so that a topology or analysis file's errors say
``file:line: field: what`` (docs/topology.md, docs/analysis.md). One reader for every such file: the
syntax, an empty file, a duplicate key and a value its tag rejects are all typed errors, never a
raw ``yaml`` exception or a ``ValueError`` escaping.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import yaml

from gridstat.errors import ValidationError

FieldPath = tuple[str | int, ...]


def field_name(path: FieldPath) -> str:
    """``("links", 2, "b")`` -> ``links[2].b``; ``()`` -> ``(document)``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out or "(document)"


def _walk_lines(node: yaml.Node, path: FieldPath, out: dict[str, int], source: str,
                error: type[ValidationError]) -> Iterator[ValidationError]:
    """Record the line of every node by field name; yield duplicate-key errors."""
    out.setdefault(field_name(path), node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            k = str(key.value)
            if k in seen:
                yield error(f"{source}:{key.start_mark.line + 1}: {field_name((*path, k))}: "
                            f"duplicate key {k!r}", field=field_name((*path, k)))
            seen.add(k)
            out[field_name((*path, k))] = key.start_mark.line + 1
            yield from _walk_lines(value, (*path, k), out, source, error)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _walk_lines(item, (*path, i), out, source, error)


def load(text: str, source: str, error: type[ValidationError]) -> tuple[Any, dict[str, int]]:
    """The document in ``text`` and the line of each of its fields (by ``field_name``); ``error`` (a
    ValidationError subclass, field ``(document)`` or the duplicated key) for anything unreadable."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark is not None else source
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{where}: (document): not valid YAML: {problem}", field="(document)") from None
    if node is None:
        raise error(f"{source}: (document): the file is empty", field="(document)")
    lines: dict[str, int] = {}
    for err in _walk_lines(node, (), lines, source, error):
        raise err
    loader = yaml.SafeLoader("")
    try:
        data = loader.construct_document(node)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        # a tag SafeLoader has no constructor for ('=' is !!value), a scalar its tag rejects ('!!int x')...
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None) or node.start_mark
        problem = getattr(exc, "problem", None) or str(exc)
        raise error(f"{source}:{mark.line + 1}: (document): not valid YAML: {problem}",
                    field="(document)") from None
    finally:
        loader.dispose()
    return data, lines


# -- JSON Schema checks with file:line errors ---------------------------------------------------------
_KINDS = {"object": "a mapping", "array": "a list", "string": "a string", "integer": "an integer",
          "number": "a number", "boolean": "a boolean", "null": "nothing"}


def kind_of(value: object) -> str:
    """How an error names a value's type: ``a mapping``, ``a list``, ``an integer``..."""
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number"}.get(type(value), type(value).__name__)


def _expected(types: object) -> str:
    names = [types] if isinstance(types, str) else list(types) if isinstance(types, list) else []
    names = [t for t in names if t != "null"] or names  # an optional list "may be empty": say "a list"
    return " or ".join(_KINDS.get(str(t), str(t)) for t in names) or "another value"


def _range(schema: dict[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f"{low}..{high}"
    return f">= {low}" if low is not None else f"<= {high}"


def line_of(lines: Mapping[str, int], path: FieldPath) -> int | None:
    """The line of ``path``, else of its nearest enclosing field that has one."""
    for n in range(len(path), -1, -1):
        line = lines.get(field_name(path[:n]))
        if line is not None:
            return line
    return None


class SchemaProblem(NamedTuple):
    """Where a document breaks its schema, what is wrong, and the JSON Schema keyword that says so."""

    path: FieldPath
    message: str
    keyword: str


def schema_problem(data: object, schema: dict[str, Any], lines: Mapping[str, int]) -> SchemaProblem | None:
    """The first place (by line) where ``data`` breaks ``schema`` (JSON Schema 2020-12, checked by
    jsonschema), and what is wrong there in the project's words (``expected an integer, got a
    string``, ``unknown field 'c'; expected one of a, b``, ``0 is out of range (1..6)``); None when
    it conforms."""
    from jsonschema import Draft202012Validator

    found: list[tuple[int, int, SchemaProblem]] = []
    for err in Draft202012Validator(schema).iter_errors(data):
        path: FieldPath = tuple(err.absolute_path)
        inst, kw, sch = err.instance, err.validator, err.schema
        if kw == "type":
            message = f"expected {_expected(err.validator_value)}, got {kind_of(inst)}"
        elif kw == "enum":
            message = f"{inst!r} is not one of {', '.join(map(str, err.validator_value))}"
        elif kw in ("minimum", "maximum"):
            message = f"{inst} is out of range ({_range(sch)})"
        elif kw == "exclusiveMinimum":
            message = f"{inst} is out of range (> {err.validator_value})"
        elif kw == "required":
            missing = [k for k in err.validator_value if isinstance(inst, dict) and k not in inst]
            message = f"missing field {missing[0]!r}" if missing else err.message
        elif kw == "additionalProperties" and isinstance(inst, dict):
            known = list(sch.get("properties", {}))
            extra = [k for k in inst if k not in known]
            path = (*path, str(extra[0]))
            message = f"unknown field {extra[0]!r}; expected one of {', '.join(known)}"
        elif kw in ("pattern", "minLength", "maxLength") and "description" in sch:
            message = f"{inst!r} is not {sch['description']}"
        elif kw in ("minItems", "maxItems"):
            word = "at least" if kw == "minItems" else "at most"
            message = f"expected a list of {word} {err.validator_value} {sch.get('description', 'items')}"
        else:
            message = err.message
        found.append((line_of(lines, path) or 0, -len(path), SchemaProblem(path, message, str(kw))))
    if not found:
        return None
    return min(found, key=lambda f: (f[0], f[1]))[2]
