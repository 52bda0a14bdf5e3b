"""The shape of the code the one-model design keeps: shared code never branches on a cloud's name, and
long functions stay few and say why they are long."""

from __future__ import annotations

import ast
import re

from gpu_cluster.stackfile import ROOT

FOLDERS = ("gpu_cluster", "components", "policies", "bench")
CLOUD_BRANCH = re.compile(r'== ?"(aws|tencentcloud)"|!= ?"(aws|tencentcloud)"|in \("aws"|cloud ?== ?|\.cloud ?!= ?|if cloud\b')


def _sources(folders=FOLDERS):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if "venv" not in path.parts and "__pycache__" not in path.parts:
                yield path


def test_shared_code_asks_the_clouds_profile_instead_of_branching_on_its_name():
    """Counted as the one-model issue counts them: outside files whose path names a cloud and the price
    fetchers, at most 5 lines compare a cloud's name (the ones left compare two cloud variables)."""
    found = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if re.search(r"aws|tencent", rel) or "/prices/fetch_" in rel:
            continue
        found += [f"{rel}:{n}: {line.strip()}" for n, line in enumerate(path.read_text().splitlines(), 1)
                  if CLOUD_BRANCH.search(line)]
    assert len(found) <= 5, "\n".join(found)
    assert not [f for f in found if re.search(r'"(aws|tencentcloud)"', f)], "no branch names a cloud"


def test_at_most_five_functions_over_60_lines_each_saying_why():
    long = []
    for path in _sources(("gpu_cluster", "components", "policies")):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                body = "\n".join(lines[node.lineno - 1:node.lineno + 8])
                long.append((path.relative_to(ROOT).as_posix(), node.name, "Over 60 lines on purpose" in body))
    assert len(long) <= 5, long
    assert all(said for _, _, said in long), [f for f in long if not f[2]]
