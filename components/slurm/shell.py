"""Turning data into bash without string surgery.

A command is a tuple of tokens. A token that is exactly `$NAME` (NAME = [A-Z_][A-Z0-9_]*) becomes
the quoted expansion "${NAME}" of a variable the script defines, `$NAME[@]` the quoted expansion of every
element of an array, "${NAME[@]}" (one word each); every other token is quoted with
shlex.quote. Variable definitions are `NAME=<shlex.quote(value)>` lines. Nothing else is pasted
into a script, so no value can break out of its word.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, Mapping, Sequence, Union

_VAR = re.compile(r"^\$([A-Z_][A-Z0-9_]*)(\[@\])?$")
Value = Union[str, int, float]


def word(token: str) -> str:
    m = _VAR.match(token)
    return f'"${{{m.group(1)}{m.group(2) or ""}}}"' if m else shlex.quote(token)


def command(tokens: Sequence[str]) -> str:
    """One bash command line from tokens (see the module docstring)."""
    if not tokens:
        raise ValueError("empty command")
    return " ".join(word(t) for t in tokens)


def literal(value: Value) -> str:
    """A quoted bash word for `value`, always in quotes (so `X='head'` never reads as a command)."""
    q = shlex.quote(str(value))
    return q if q.startswith("'") else f"'{q}'"


def assign(name: str, value: Value) -> str:
    if not re.match(r"^[A-Z_][A-Z0-9_]*$", name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return f"{name}={literal(value)}"


def assignments(values: Mapping[str, Value]) -> str:
    return "\n".join(assign(k, v) for k, v in values.items())


def array(name: str, items: Iterable[str]) -> str:
    """A bash array of literal strings."""
    if not re.match(r"^[A-Z_][A-Z0-9_]*$", name):
        raise ValueError(f"not a shell variable name: {name!r}")
    return f"{name}=(" + " ".join(literal(i) for i in items) + ")"


def function(name: str, tokens: Sequence[str]) -> str:
    """A bash function running one command (it takes no arguments: its inputs are variables)."""
    if not re.match(r"^[a-z_][a-z0-9_]*$", name):
        raise ValueError(f"not a function name: {name!r}")
    return f"{name}() {{\n  {command(tokens)}\n}}"
