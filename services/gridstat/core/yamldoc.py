"""YAML documents read with the line of every field, so that a topology or analysis file's errors say
``file:line: field: what`` (docs/topology.md, docs/analysis.md). One reader for every such file: the
syntax, an empty file, a duplicate key and a value its tag rejects are all typed errors, never a
raw ``yaml`` exception or a ``ValueError`` escaping.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
