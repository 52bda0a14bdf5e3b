"""Exit statuses (the command-line contract) and the error that carries a bad-input sentence."""

from __future__ import annotations

EXIT_OK = 0
"""Clean: everything rendered / read, no mandatory policy violation."""
EXIT_VIOLATION = 1
"""A mandatory policy violation (plan, check), or no candidate fits (recommend)."""
EXIT_BAD_INPUT = 2
"""Bad input or an unreadable file: printed as sentences naming the file or field, never a traceback."""


class UserError(Exception):
    """Bad input: `str(error)` is the sentence shown to the user (exit status 2)."""
