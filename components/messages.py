"""Pydantic errors in the user's words: what is wrong with a value, never a library's vocabulary.

Shared by the stack file (components/spec.py), the workload file and the price file
(gpu_cluster/pricebook/validation.py), which add the field's path, the value and what is allowed.
"""

from __future__ import annotations

from typing import Any, Iterable

_PLAIN = {
    "int_type": "must be a whole number", "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number", "int_parsing_size": "is too long a number",
    "float_type": "must be a number", "float_parsing": "must be a number", "finite_number": "must be a finite number",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "string_type": "must be text", "dict_type": "must be a mapping of settings (key: value)",
    "model_type": "must be a mapping of settings (key: value)",
    "model_attributes_type": "must be a mapping of settings (key: value)",
    "tuple_type": "must be a list", "list_type": "must be a list", "set_type": "must be a list",
    "none_required": "must be null",
    "ip_v4_network": "must be an IPv4 range written like 10.40.0.0/16",
    "date_type": "must be a date written YYYY-MM-DD", "date_parsing": "must be a date written YYYY-MM-DD",
    "date_from_datetime_parsing": "must be a date written YYYY-MM-DD",
    "date_from_datetime_inexact": "must be a date written YYYY-MM-DD (no time of day)",
    "datetime_type": "must be a date written YYYY-MM-DD", "datetime_parsing": "must be a date written YYYY-MM-DD",
    "date_future": "must be a date in the future", "date_past": "must be a date in the past",
    "enum": "is not one of the allowed values", "string_too_short": "must not be empty",
    "string_too_long": "is too long",
}
_BOUNDS = {"greater_than": "above", "greater_than_equal": "at least", "less_than": "below",
           "less_than_equal": "at most"}


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"{value:,}" if isinstance(value, (int, float)) else str(value)


def plain(err: dict) -> str:
    """What is wrong, in plain words (the message part of one error)."""
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "value_error":
        return err["msg"].removeprefix("Value error, ")
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected', '')}"
    if kind in _BOUNDS:
        bound = next((v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")), "")
        return f"must be {_BOUNDS[kind]} {_number(bound)}"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"allows at most {ctx.get('max_length')} item(s)"
    if kind == "string_pattern_mismatch":
        return f"does not match {ctx.get('pattern')}"
    if kind.startswith("date") or kind.startswith("datetime"):
        return _PLAIN.get(kind, "must be a date written YYYY-MM-DD")
    return _PLAIN.get(kind, "is not a value this field takes")


def essential(errors: Iterable[dict]) -> list[dict]:
    """The errors worth a sentence: a list's length complaint goes when one of its items is wrong
    (pydantic counts only the items that validated), and one sentence per field."""
    errors = list(errors)
    item_locs = [tuple(e["loc"]) for e in errors]
    out, seen = [], set()
    for e in errors:
        loc = tuple(e["loc"])
        if e["type"] in ("too_short", "too_long") and any(o[:len(loc)] == loc and len(o) > len(loc)
                                                          for o in item_locs):
            continue
        key = (loc, e["type"])
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def kind_of(value: Any) -> str:
    """What a YAML/JSON value is, in the file's words: "nothing (null)", "a list", "text", ..."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "true/false"
    return {dict: "a mapping", list: "a list", tuple: "a list", str: "text", int: "a number",
            float: "a number"}.get(type(value), "a value of another kind")
