"""What Tencent Cloud computes and answers, for the offline mocks (see offline/mocks.py)."""

from __future__ import annotations

# Provider type token → id prefix of the resource's physical id.
ID_PREFIXES: dict[str, str] = {}

# Provider type token → fn(name, inputs, id) → computed outputs.
COMPUTED: dict = {}

# Invoke token → fn(args) → result.
LOOKUPS: dict = {}
