"""What the installed provider SDK says about a type or function: its arguments (engine camelCase names,
nested blocks), which are required, and which outputs only the provider computes.

Two uses: `python -m gpu_cluster.contracts.skeleton <token>...` prints the skeleton of a new contract
entry (then read the provider's source for force-new, values, ranges and what it computes), and
tests/test_contracts.py checks every contract against the SDK pinned in requirements.txt, so an SDK
upgrade that renames or drops an argument fails a test instead of a `pulumi up`.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from typing import Any

import yaml

_ARGS = re.compile(r"'?(\w+Args)'?")
_PACKAGES = {"aws": "pulumi_aws", "tencentcloud": "tencentcloud_iac_pulumi"}


def _camel_names(cls: type) -> dict[str, str]:
    from gpu_cluster.sdk_compat import pulumi_name

    return {n: pulumi_name(v.fget) for n, v in vars(cls).items() if isinstance(v, property) and pulumi_name(v.fget)}


def _fields(cls: type, module: Any, depth: int = 0) -> tuple[dict, list[str]]:
    names = _camel_names(cls)
    fields, required = {}, []
    for p in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if p.kind == p.VAR_KEYWORD:
            continue
        camel = names.get(p.name, p.name)
        entry: dict = {}
        nested = [a for a in _ARGS.findall(str(p.annotation)) if a != cls.__name__]
        sub = getattr(module, nested[0], None) if nested and depth < 6 else None
        if sub is not None:
            sub_fields, sub_required = _fields(sub, module, depth + 1)
            entry = {"fields": sub_fields, **({"required": sub_required} if sub_required else {})}
        fields[camel] = entry
        if p.default is inspect.Parameter.empty:
            required.append(camel)
    return fields, required


def _module(token: str) -> tuple[Any, str, str]:
    package = _PACKAGES[token.split(":", 1)[0]]
    part, name = token.split(":")[1].split("/")[0], token.split(":")[2]
    modname = package if part == "index" else f"{package}.{part.lower()}"
    return importlib.import_module(modname), modname, name


def resource(token: str) -> dict:
    """Arguments, required arguments and computed-only outputs of a resource type."""
    module, modname, name = _module(token)
    cls = getattr(module, name)
    try:
        inputs = importlib.import_module(f"{modname}._inputs")
    except ModuleNotFoundError:
        inputs = module
    names = _camel_names(cls)
    source = inspect.getsource(cls._internal_init)
    required_py = set(re.findall(r"Missing required property '(\w+)'", source))
    fields, required = {}, []
    for p in list(inspect.signature(cls._internal_init).parameters.values())[1:]:
        if p.name in ("resource_name", "opts", "__props__") or p.kind == p.VAR_KEYWORD:
            continue
        camel = names.get(p.name, p.name)
        nested = _ARGS.findall(str(p.annotation))
        sub = getattr(inputs, nested[0], None) if nested else None
        entry: dict = {}
        if sub is not None:
            sub_fields, sub_required = _fields(sub, inputs, 1)
            entry = {"fields": sub_fields, **({"required": sub_required} if sub_required else {})}
        fields[camel] = entry
        if p.name in required_py:
            required.append(camel)
    computed = sorted(names.get(o, o) for o in re.findall(r'__props__\.__dict__\["(\w+)"\] = None', source))
    return {"required": required, "arguments": fields, "computed": computed}


def function(token: str) -> dict:
    """Arguments, required arguments and result attributes of a function (data source)."""
    module, _, name = _module(token)
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
    fn = getattr(module, snake)
    args = dict((py, camel) for camel, py in re.findall(r"__args__\['(\w+)'\] = (\w+)", inspect.getsource(fn)))
    required = [args.get(p.name, p.name) for p in inspect.signature(fn).parameters.values()
                if p.default is inspect.Parameter.empty and p.name != "opts"]
    result = getattr(module, "Get" + name[3:] + "Result", None) or getattr(module, name[0].upper() + name[1:] + "Result")
    return {"required": required, "arguments": sorted(args.values()), "returns": sorted(_camel_names(result).values())}


def skeleton(token: str) -> dict:
    return function(token) if token.split(":")[2].startswith("get") else resource(token)


if __name__ == "__main__":
    yaml.safe_dump({t: skeleton(t) for t in sys.argv[1:]}, sys.stdout, sort_keys=False, width=110)
