"""The lock files: every venv target installs from one, and each pins what its requirements file allows."""

from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement

from gpu_cluster.stackfile import ROOT


def pins(lock: str) -> dict[str, str]:
    return {m.group(1).lower().replace("_", "-"): m.group(2)
            for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([^ ;\\\n]+)", (ROOT / lock).read_text(), re.M)}


def requirements(path: str) -> list[Requirement]:
    out = []
    for line in (ROOT / path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append(Requirement(line))
    return out


@pytest.mark.parametrize("lock, sources", [
    ("requirements.lock", ["requirements.txt"]),
    ("requirements-test.lock", ["requirements.txt", "requirements-test.txt"]),
    ("policies/requirements.lock", ["policies/requirements.txt"]),
])
def test_each_lock_pins_every_requirement_within_its_range_with_hashes(lock, sources):
    pinned = pins(lock)
    for source in sources:
        for req in requirements(source):
            name = req.name.lower().replace("_", "-")
            assert name in pinned, f"{lock} does not pin {req.name} ({source})"
            assert req.specifier.contains(pinned[name], prereleases=True), f"{lock}: {name}=={pinned[name]} vs {req}"
    blocks = [b for b in re.split(r"\n(?=[A-Za-z0-9_.-]+==)", (ROOT / lock).read_text()) if "==" in b]
    assert len(blocks) == len(pinned) and all("--hash=sha256:" in b for b in blocks), "every pin has its hashes"


def test_the_tests_run_on_exactly_what_users_install():
    runtime, test = pins("requirements.lock"), pins("requirements-test.lock")
    assert {k: test[k] for k in runtime} == runtime


def test_both_venv_targets_install_from_the_locks_with_hashes():
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r requirements.lock" in makefile
    assert "--require-hashes -r requirements-test.lock" in makefile
    assert "--require-hashes -r policies/requirements.lock" in makefile
    assert "-r requirements.txt" not in makefile and "-r policies/requirements.txt" not in makefile
    assert re.search(r"uv==\$\(UV_VERSION\)", makefile) and pins("requirements-test.lock")["uv"] == re.search(
        r"UV_VERSION := (\S+)", makefile).group(1), "the uv that builds the venvs is the one the tests lock"
