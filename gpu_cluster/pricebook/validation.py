"""Validation helpers shared by the price file, the price cache and the workload file.

The style is the stack file's (components/spec.py): unknown keys are errors, every problem is one
sentence naming the field, the value and what is allowed, booleans are not numbers, and NaN or
infinite numbers are refused.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError

from components import messages

_NUMBER = re.compile(r"^[+-]?(\d[\d_]*)?(\.\d*)?([eE][+-]?\d+)?$")


def _number(value: Any) -> Any:
    """A real number: int, float or a numeric string such as "14e9" (YAML 1.1 reads 14e9 as text)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not a boolean ({str(value).lower()})")
    if isinstance(value, str):
        text = value.strip()
        if not text or not _NUMBER.match(text) or not any(c.isdigit() for c in text):
            raise ValueError("must be a number (e.g. 14e9, 0.5 or 100)")
        value = float(text.replace("_", ""))
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number (NaN and infinity are not allowed)")
        return value
    raise ValueError(f"must be a number, not {messages.kind_of(value)}")


Number = Annotated[float, BeforeValidator(_number)]
"""A finite float that refuses booleans and accepts numeric strings."""


def _integer(value: Any) -> Any:
    value = _number(value)
    if float(value) != int(value):
        raise ValueError("must be a whole number")
    return int(value)


Integer = Annotated[int, BeforeValidator(_integer)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _model_at(root: type[BaseModel], loc: tuple) -> Optional[type[BaseModel]]:
    model: Any = root
    for part in loc:
        if isinstance(part, int):
            continue
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) else {}
        field = fields.get(part)
        if field is None:
            return None
        model = _unwrap(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _unwrap(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _help(root: type[BaseModel], loc: tuple) -> str:
    names = tuple(p for p in loc if not isinstance(p, int))
    if not names:
        return ""
    model = _model_at(root, names[:-1])
    field = model.model_fields.get(names[-1]) if model else None
    return (field.description or "") if field else ""


def describe(root: type[BaseModel], prefix: str, err: dict) -> str:
    """One pydantic error as `<prefix>.<field>=<value>: <what is wrong> (allowed: ...)`."""
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    path = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    kind = err["type"]
    if kind == "missing":
        return f"{path} is required: {_help(root, loc)}".rstrip(": ")
    if kind == "extra_forbidden":
        model = _model_at(root, loc[:-1])
        allowed = ", ".join(model.model_fields) if model else ""
        return f"{path}: unknown key {loc[-1]!r}; allowed keys here: {allowed}"
    msg = messages.plain(err)
    if isinstance(err.get("input"), dict) and kind == "value_error":
        return f"{path}: {msg}"
    text = f"{path}={short(err.get('input'))}: {msg}"
    help_text = _help(root, loc)
    return text + (f" (allowed: {help_text})" if help_text and "allowed" not in msg else "")


def problems(root: type[BaseModel], prefix: str, e: ValidationError) -> list[str]:
    return [describe(root, prefix, err) for err in messages.essential(e.errors())]
