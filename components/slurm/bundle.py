"""A GPU node's Slurm boot (BootParts) as one self-contained bash script, for clouds whose user data cannot hold
it: Tencent Cloud takes at most 16 KB of base64 user data (provider doc instance v1.82.42, user_data), about
12 KB of gzip, and a node's Slurm scripts alone compress to more. The node's user data then fetches this script
(checking its SHA-256, which the user data pins) and runs it where cloud-init would have run the same parts.

The script is plain text, so a plan shows every file it writes and a review diffs them: each file is written
from a quoted here-document (root-owned, with the mode the parts give), then the parts' boot steps and commands
run in order, each even when one before it failed (as cloud-init's runcmd runs them), the script failing at the
end if any did. Packages stay in the user data (cloud-init's package module installs them before any of this).
"""

from __future__ import annotations

import hashlib
import re

from components.cloudinit import SBIN
from components.slurm import shell
from components.slurm.boot import BootParts

END = "GPU_CLUSTER_EOF"
HEADER = "# The Slurm part of "
_FILE = re.compile(r"^install -D -m (0[0-7]{3}) /dev/stdin \"\$\{GPU_CLUSTER_TEST_ROOT:-\}\"(\S+) <<'" + END + "'$")


def _files(parts: BootParts) -> list[tuple[str, str, str]]:
    files = [(f["path"], f["permissions"], f["content"]) for f in parts.files]
    files += [(f"{SBIN}/{step.name}", "0755", step.script) for step in parts.steps]
    paths = [p for p, _, _ in files]
    if len(set(paths)) != len(paths):
        raise ValueError("two files of the Slurm boot have the same path")
    for path, mode, content in files:
        if not re.fullmatch(r"/[A-Za-z0-9._/@-]+", path) or not re.fullmatch(r"0[0-7]{3}", mode):
            raise ValueError(f"a Slurm boot file cannot be written as {mode} {path!r}")
        if END in content.splitlines() or not content.endswith("\n"):
            raise ValueError(f"{path}: its content must end in a newline and hold no line {END}")
    return files


def bundle_script(parts: BootParts, what: str) -> str:
    """The script that writes `parts`' files (under GPU_CLUSTER_TEST_ROOT in a test) and runs its steps and
    commands."""
    out = ["#!/bin/bash", f"{HEADER}{what}'s boot (written by gpu-cluster): its files, then its steps and commands.",
           "set -euo pipefail"]
    for path, mode, content in _files(parts):
        out.append(f"install -D -m {mode} /dev/stdin \"${{GPU_CLUSTER_TEST_ROOT:-}}\"{path} <<'{END}'")
        out.append(content + END)
    # As cloud-init's runcmd: every step and command runs even when one before it failed (a failed node-setup must
    # still leave slurmd and the health-recheck timer enabled, which repair it), and the script fails at the end.
    out.append('failed=0\nrun() { "$@" || { echo "gpu-cluster: $* failed (exit $?)" >&2; failed=1; }; }')
    out += ["run " + shell.command((f"{SBIN}/{step.name}",)) for step in parts.steps]
    out += ["run " + shell.command(c) for c in parts.commands]
    out.append('exit "$failed"')
    return "\n".join(out) + "\n"


def unpack(script: str) -> dict[str, str]:
    """The files a bundle script writes, by path (what a reader, or a test, sees of a node's Slurm boot)."""
    files, lines, i = {}, script.split("\n"), 0
    while i < len(lines):
        m = _FILE.match(lines[i])
        i += 1
        if m is None:
            continue
        start = i
        while lines[i] != END:
            i += 1
        files[m.group(2)] = "\n".join(lines[start:i]) + "\n"
        i += 1
    return files


def sha256(script: str) -> str:
    return hashlib.sha256(script.encode()).hexdigest()
