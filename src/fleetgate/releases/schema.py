"""A small JSON Schema check for the ``json-schema`` scorer (no extra dependency).

Supported keywords: ``type`` (one or a list: object, array, string, number, integer, boolean,
null), ``properties``, ``required``, ``additionalProperties`` (false or a schema), ``items``,
``enum``, ``const``, ``minimum``, ``maximum``, ``minLength``, ``maxLength``, ``minItems``,
``maxItems``, ``pattern``. Other keywords are ignored.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["valid"]

_TYPES: dict[str, Any] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None),
}  # fmt: skip


def _type_ok(value: Any, name: str) -> bool:
    if name == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    kind = _TYPES.get(name)
    return kind is not None and isinstance(value, kind)


def _scalar_ok(value: Any, schema: dict[str, Any]) -> bool:
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "const" in schema and value != schema["const"]:
        return False
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            return False
        if "maximum" in schema and value > schema["maximum"]:
            return False
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return False
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return False
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            return False
    return True


def _object_ok(value: dict[str, Any], schema: dict[str, Any]) -> bool:
    props: dict[str, Any] = schema.get("properties", {})
    if any(name not in value for name in schema.get("required", ())):
        return False
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in props:
            if not valid(item, props[name]):
                return False
        elif extra is False or (isinstance(extra, dict) and not valid(item, extra)):
            return False
    return True


def _array_ok(value: list[Any], schema: dict[str, Any]) -> bool:
    if len(value) < schema.get("minItems", 0):
        return False
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return False
    items = schema.get("items")
    return not isinstance(items, dict) or all(valid(v, items) for v in value)


def valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether ``value`` satisfies ``schema`` (the keywords above)."""
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else list(kinds)
        if not any(_type_ok(value, n) for n in names):
            return False
    if not _scalar_ok(value, schema):
        return False
    if isinstance(value, dict):
        return _object_ok(value, schema)
    if isinstance(value, list):
        return _array_ok(value, schema)
    return True
