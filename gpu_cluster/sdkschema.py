"""The provider SDKs' own types, read from their Python sources (the SDKs ship no schema file).

Each generated resource module holds `<Name>Args` (inputs) and `_<Name>State` (inputs and outputs), and
each property is a getter decorated `@pulumi.getter(name="camelName")` (or bare `@pulumi.getter` when the
Python name is the schema name) whose return annotation names nested `...Args` classes of the package's
`_inputs.py`. The policy pack reads properties by their schema (camelCase) paths; this module answers,
for a type token and a path such as `launchTemplateConfigs[].overrides[].subnetId`, whether the SDK
knows that path, so every path the pack reads is checked against the locked provider versions
(tests/test_policy_kinds.py). It parses the sources with `ast` and never imports the SDKs.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

# Type-token package prefix → the Python SDK that implements it.
PACKAGES = {"aws": "pulumi_aws", "tencentcloud": "tencentcloud_iac_pulumi", "aws-native": "pulumi_aws_native"}

_QUOTED = re.compile(r"'(\w+)'")
_TOKEN = re.compile(r"""(?:type_token\(|__init__\(\s*)["']([\w-]+:[\w/]+:\w+)["']""")


def package_dir(cloud: str) -> Optional[Path]:
    """Where the SDK of `cloud` is installed (None: not installed)."""
    name = PACKAGES.get(cloud)
    spec = importlib.util.find_spec(name) if name else None
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


@lru_cache(maxsize=None)
def _token_files(cloud: str) -> dict[str, Path]:
    """Every resource token of an SDK → its module file (one scan of the package)."""
    root = package_dir(cloud)
    out: dict[str, Path] = {}
    if root is None:
        return out
    for path in root.rglob("*.py"):
        if path.name.startswith("_") or path.name.startswith("get_"):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for m in _TOKEN.finditer(text):
            if m.group(1).startswith(cloud + ":"):
                out.setdefault(m.group(1), path)
    return out


@lru_cache(maxsize=None)
def module_file(token: str) -> Optional[Path]:
    """The SDK module that defines resource `token` (None: no such resource in the installed SDK)."""
    cloud, module, _ = (token.split(":") + ["", ""])[:3]
    root = package_dir(cloud)
    if root is None:
        return None
    folder, _, leaf = module.rpartition("/")
    guess = root / _snake(folder[:1].lower() + folder[1:]) / f"{_snake(leaf)}.py"
    if guess.is_file():
        text = guess.read_text(encoding="utf-8", errors="replace")
        if f"'{token}'" in text or f'"{token}"' in text:
            return guess
    return _token_files(cloud).get(token)


@lru_cache(maxsize=None)
def _classes(path: Path) -> dict[str, dict[str, str]]:
    """Class name → {schema property name: return annotation} of every class in a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        props: dict[str, str] = {}
        for fn in node.body:
            if not isinstance(fn, ast.FunctionDef) or fn.returns is None:
                continue
            for deco in fn.decorator_list:
                name = _getter_name(deco, fn.name)
                if name is not None:
                    props[name] = ast.unparse(fn.returns)
        out[node.name] = props
    return out


def _getter_name(deco: ast.expr, python_name: str) -> Optional[str]:
    target = deco.func if isinstance(deco, ast.Call) else deco
    if not (isinstance(target, ast.Attribute) and target.attr == "getter"):
        return None
    if isinstance(deco, ast.Call):
        for kw in deco.keywords:
            if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
    return python_name


def properties(token: str) -> dict[str, str]:
    """Top-level properties (inputs and outputs) of resource `token` → annotation; {} when unknown."""
    path = module_file(token)
    if path is None:
        return {}
    name = token.rsplit(":", 1)[-1]
    classes = _classes(path)
    merged = dict(classes.get(f"_{name}State", {}))
    merged.update(classes.get(f"{name}Args", {}))
    if not merged:  # SDKs without a State class (aws-native): the resource's own output getters
        merged.update(classes.get(name, {}))
    return merged


def _nested(token: str, annotation: str) -> dict[str, str]:
    """Properties of the object type an annotation names (a quoted `...Args` class of `_inputs.py`)."""
    path = module_file(token)
    if path is None:
        return {}
    names = [n for n in _QUOTED.findall(annotation) if n.endswith("Args") or n.endswith("ArgsDict")]
    for candidate in (path.parent / "_inputs.py", path.parent.parent / "_inputs.py"):
        if candidate.is_file():
            classes = _classes(candidate)
            for n in names:
                if n in classes:
                    return classes[n]
    return {}


def path_exists(token: str, path: str) -> Optional[str]:
    """None when the SDK of `token` has `path` (dotted schema names; `[]` after a list), else why not."""
    props = properties(token)
    if not props:
        return f"{token}: no such resource in the installed SDK"
    annotation = ""
    for i, raw in enumerate(path.split(".")):
        seq = raw.endswith("[]")
        name = raw[:-2] if seq else raw
        if i and annotation.startswith(("Mapping", "pulumi.Input[Optional[Mapping", "pulumi.Input[Mapping",
                                        "Optional[Mapping", "Optional[pulumi.Input[Mapping")):
            return None  # a key of a map (tags.<key>)
        if i:
            props = _nested(token, annotation)
        if name not in props:
            return f"{token}: '{name}' is not a property (in '{path}')"
        annotation = props[name]
        if seq and "Sequence" not in annotation:
            return f"{token}: '{name}' is not a list (in '{path}')"
    return None


_SUBNET_NAME = re.compile(r"(?i)^(?:\w*subnet(?:_?ids?|s|idlist|_?id_?list)|vpczoneidentifiers)$")
_OBJECT = re.compile(r"'(\w+Args)'")


def subnet_paths(cloud: str, depth: int = 3) -> dict[str, list[str]]:
    """Every resource of the SDK with an input that names a subnet (or vSwitch) → those input paths:
    what can place a workload or an interface in a subnet. Inputs only (`<Name>Args`), objects followed
    `depth` levels deep."""
    out: dict[str, list[str]] = {}
    for token, path in sorted(_token_files(cloud).items()):
        name = token.rsplit(":", 1)[-1]
        args = _classes(path).get(f"{name}Args")
        if not args:
            continue
        found = sorted(_walk_subnets(token, args, "", depth))
        if found:
            out[token] = found
    return out


def _walk_subnets(token: str, props: dict[str, str], prefix: str, depth: int) -> set[str]:
    found: set[str] = set()
    for name, annotation in props.items():
        seq = "Sequence" in annotation
        here = f"{prefix}{name}{'[]' if seq else ''}"
        if _OBJECT.search(annotation):
            if depth > 1:
                found |= _walk_subnets(token, _nested(token, annotation), here + ".", depth - 1)
        elif _SUBNET_NAME.match(name):
            found.add(here)
    return found


GENERATED = Path(__file__).resolve().parent.parent / "policies" / "gpu_guardrails" / "placements.py"
COVERED_CLOUDS = ("aws", "tencentcloud")  # the providers this project locks (requirements.lock)


def placements_source() -> str:
    """The text of policies/gpu_guardrails/placements.py, generated from the installed SDKs."""
    from importlib.metadata import version

    versions = ", ".join(f"{PACKAGES[c].replace('_', '-')} {version(PACKAGES[c])}" for c in COVERED_CLOUDS)
    lines = [
        '"""GENERATED by `make policy-coverage` (gpu_cluster/sdkschema.py): do not edit.',
        "",
        f"Every resource type of {versions} with an input that names a subnet",
        "(vSwitch), and those input paths: what can place a workload or an interface in a subnet. The pack",
        "decides for each type what it is (kinds.py capacity, a cluster member, plumbing, or another workload:",
        "`network.py`); tests/test_policy_kinds.py regenerates this file and fails when it is out of date.",
        '"""',
        "",
        "SUBNET_INPUTS: dict[str, tuple[str, ...]] = {",
    ]
    for cloud in COVERED_CLOUDS:
        for token, paths in subnet_paths(cloud).items():
            joined = ", ".join(f'"{p}"' for p in paths)
            lines.append(f'    "{token}": ({joined},),')
    lines.append("}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # make policy-coverage
    GENERATED.write_text(placements_source(), encoding="utf-8")
    from gpu_cluster import policydocs  # after placements.py: the docs read it

    policydocs.write()
    print(f"wrote {GENERATED}, {policydocs.POLICIES_DOC} and {policydocs.COVERAGE_DOC}")
