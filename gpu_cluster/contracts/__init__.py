"""Provider contracts: what each resource type and function of the pinned providers accepts and returns.

One data file per cloud (`aws.yaml`, `tencentcloud.yaml` beside this module), every entry read from
the provider's own documentation or schema source for the versions pinned in requirements.txt and
citing the file it was read from. Three consumers, one source of truth:

- the mocks (gpu_cluster/engine/) answer from them: a function returns only attributes its Read sets
  (plus echoed arguments), a resource only attributes the provider computes — a mock that invents an
  output the provider never returns raises `ContractError`;
- every render is checked against them (`check_registration`): a required argument missing or null,
  an argument the provider does not have, a value outside the documented set or range — one sentence
  each, naming the resource, the argument, the rule and the source;
- the review (gpu_cluster/review.py) decides "replaced" / "cannot be changed" from their `force_new`
  and `immutable` lists.

Entry format (engine camelCase names; nested blocks under `fields`, list elements implicit):

    resources:
      <type token>:
        source: "<provider file(s) and version read>"
        required: [<argument>, ...]
        at_least_one_of: [[<argument>, <argument>], ...]    # the schema's AtLeastOneOf
        arguments:
          <argument>: {force_new: true, force_new_if: <argument>, immutable: true, values: [...], range: [min, max],
                       pattern: "<regex the whole string value must match, as the API documents it>",
                       shrink: replace | fail, fields: {<nested argument>: {...}}, required: [<nested>, ...]}
        computed: [<attribute the provider sets itself>, ...]
        # force_new_if: a change replaces only when that other argument is true (a CustomizeDiff ForceNewIf)
        autoname: <argument>    # the bridge fills it in when unset (below); its rules apply to that name
        delete_before_replace: "<why>"   # a create-then-delete replacement breaks it: register it with
                                         # delete_before_replace=True (the render refuses it otherwise)
        delete_refused_while: {<argument>: "<why>"}   # the provider's Delete fails while the argument is
                                                      # true in state: the review says so before `pulumi up`
        notes: "..."
    functions:
      <invoke token>:
        source: "..."
        required: [...]
        arguments: {<argument>: {values: [...]}, ...}
        returns: [<attribute Read sets>, ...]

An auto-named argument left unset gets the name Pulumi's Terraform bridge makes: the logical (URN) name,
"-" and 7 random hex characters (pulumi/pulumi-terraform-bridge pkg/tfbridge/info/autonaming.go: AutoName,
Separator "-", Randlen 7, ComputeAutoNameDefault). The checker applies the argument's documented form to
that name, so a logical name that grows past a cloud's limit fails the render, not the `pulumi up`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional

import yaml

from components.catalog import YAML_LOADER
from gpu_cluster.errors import UserError

_HERE = Path(__file__).parent
_FILES = {"aws": "aws.yaml", "tencentcloud": "tencentcloud.yaml"}


class ContractError(UserError):
    """The program (or a mock) breaks a provider contract: `pulumi up` would fail or misbehave."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("the plan breaks the provider contracts:\n" + "\n".join(f"  - {p}" for p in problems))


@dataclass(frozen=True)
class Rule:
    """What the provider says about one argument (at any nesting depth)."""

    force_new: bool = False
    """A change replaces the resource."""
    force_new_if: Optional[str] = None
    """A change replaces the resource when this top-level argument is true (a CustomizeDiff ForceNewIf)."""
    immutable: bool = False
    """The provider refuses any change (its update fails)."""
    shrink: Optional[str] = None
    """What a smaller value does: "replace" (the resource is recreated) or "fail" (the update fails)."""
    values: Optional[tuple[Any, ...]] = None
    range: Optional[tuple[Optional[float], Optional[float]]] = None
    pattern: Optional[str] = None
    """A regular expression a string value must match as a whole (a rule the API documents and enforces,
    though the provider does not check it)."""
    fields: Mapping[str, "Rule"] = field(default_factory=dict)
    required: tuple[str, ...] = ()


@dataclass(frozen=True)
class Contract:
    token: str
    kind: str  # "resource" | "function"
    source: str
    arguments: Mapping[str, Rule]
    required: tuple[str, ...]
    at_least_one_of: tuple[tuple[str, ...], ...] = ()
    computed: frozenset[str] = frozenset()
    returns: frozenset[str] = frozenset()
    autoname: Optional[str] = None
    """The argument the bridge fills in from the logical name when it is unset."""
    delete_before_replace: Optional[str] = None
    """Why a replacement must delete the old resource before it creates the new one, if it must."""
    delete_refused_while: Mapping[str, str] = field(default_factory=dict)
    """Arguments that, true in the state, make the provider's Delete fail (argument → why)."""
    calls: Optional[tuple[str, ...]] = None
    """A function's cloud API actions, as its provider's Read calls them ("ec2:DescribeImages"): the
    deployer's credentials need each at every preview and update (docs/clouds.md, "Read permissions of the deployer")."""
    notes: str = ""

    def paths(self) -> Iterator[tuple[str, Rule]]:
        """Every argument as (dotted path, rule), nested ones included."""
        stack = [("", self.arguments)]
        while stack:
            prefix, args = stack.pop()
            for name, rule in args.items():
                path = f"{prefix}{name}"
                yield path, rule
                if rule.fields:
                    stack.append((path + ".", rule.fields))

    def rule_at(self, path: str) -> Optional[Rule]:
        """The rule of a dotted argument path ("networkInterfaces.interfaceType"), or None."""
        args, rule = self.arguments, None
        for part in path.split("."):
            rule = args.get(part)
            if rule is None:
                return None
            args = rule.fields
        return rule


def _rule(raw: Any) -> Rule:
    raw = raw or {}
    rng = raw.get("range")
    return Rule(
        force_new=bool(raw.get("force_new")),
        force_new_if=raw.get("force_new_if"),
        immutable=bool(raw.get("immutable")),
        shrink=raw.get("shrink"),
        values=tuple(raw["values"]) if raw.get("values") is not None else None,
        range=(rng[0], rng[1]) if rng else None,
        pattern=raw.get("pattern"),
        fields={k: _rule(v) for k, v in (raw.get("fields") or {}).items()},
        required=tuple(raw.get("required") or ()),
    )


@lru_cache(maxsize=None)
def _document(cloud: str) -> dict:
    with open(_HERE / _FILES[cloud], encoding="utf-8") as f:
        return yaml.load(f, Loader=YAML_LOADER)  # noqa: S506 - a safe loader


def sdk(cloud: str) -> tuple[str, str]:
    """(package, version) of the Python SDK a cloud's contracts were read from (their `sdk:` key)."""
    doc = _document(cloud)["sdk"]
    return doc["package"], str(doc["version"])


def installed_sdk_version(cloud: str) -> Optional[str]:
    """The version of that SDK installed here (None: not installed)."""
    from importlib import metadata

    try:
        return metadata.version(sdk(cloud)[0])
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=None)
def _load(cloud: str) -> dict[str, Contract]:
    doc = _document(cloud)
    out: dict[str, Contract] = {}
    for kind, key in (("resource", "resources"), ("function", "functions")):
        for token, raw in (doc.get(key) or {}).items():
            args = raw.get("arguments") or {}
            if isinstance(args, list):
                args = {a: None for a in args}
            out[token] = Contract(
                token=token, kind=kind, source=raw["source"],
                arguments={k: _rule(v) for k, v in args.items()},
                required=tuple(raw.get("required") or ()),
                at_least_one_of=tuple(tuple(g) for g in raw.get("at_least_one_of") or ()),
                computed=frozenset(raw.get("computed") or ()),
                returns=frozenset(raw.get("returns") or ()),
                autoname=raw.get("autoname"),
                delete_before_replace=raw.get("delete_before_replace"),
                delete_refused_while=dict(raw.get("delete_refused_while") or {}),
                calls=tuple(raw["calls"]) if raw.get("calls") is not None else None,
                notes=raw.get("notes") or "",
            )
    return out


def cloud_of(token: str) -> Optional[str]:
    package = token.split(":", 1)[0]
    return package if package in _FILES else None


def contract(token: str) -> Optional[Contract]:
    """The contract of a resource type or function token, or None when there is none."""
    package = cloud_of(token)
    return _load(package).get(token) if package is not None else None


def all_contracts() -> dict[str, Contract]:
    return {t: c for cloud in _FILES for t, c in _load(cloud).items()}


# ---- checks ---------------------------------------------------------------------------------------

def _number(value: Any) -> Optional[float]:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _allowed(value: Any, values: tuple[Any, ...]) -> bool:
    """Whether `value` is one of `values`: numbers by value (the engine sends 90 as 90.0), booleans
    also as the strings "true"/"false" some providers use, everything else by its text."""
    n = _number(value)
    for v in values:
        if isinstance(v, bool) or isinstance(value, bool):
            if str(v).lower() == str(value).lower():
                return True
        elif n is not None and _number(v) is not None:
            if n == _number(v):
                return True
        elif str(v) == str(value):
            return True
    return False


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_block(where: str, c: Contract, args: Mapping[str, Rule], required: tuple[str, ...], value: Any,
                 prefix: str, problems: list[str]) -> None:
    """Check one object (the top level or a nested block) against its rules."""
    if not isinstance(value, Mapping):
        return
    for name in required:
        if value.get(name) is None:
            what = "missing" if name not in value else "null"
            problems.append(f"{where}: required argument {prefix}{name} is {what} ({c.source})")
    for name, v in value.items():
        if name.startswith("__"):
            continue
        rule = args.get(name)
        path = f"{prefix}{name}"
        if rule is None:
            problems.append(f"{where}: argument {path} is not an argument of {c.token} ({c.source})")
            continue
        _check_value(where, c, rule, v, path, problems)


def _check_value(where: str, c: Contract, rule: Rule, value: Any, path: str, problems: list[str]) -> None:
    if value is None:
        return
    if isinstance(value, list):
        for item in value:
            _check_value(where, c, rule, item, path, problems)
        return
    if rule.fields:
        if isinstance(value, Mapping):
            _check_block(where, c, rule.fields, rule.required, value, path + ".", problems)
        return
    if rule.values is not None and not isinstance(value, Mapping) and not _allowed(value, rule.values):
            problems.append(f"{where}: argument {path}={_show(value)} is not a documented value; allowed: "
                            f"{', '.join(map(str, rule.values))} ({c.source})")
    if rule.pattern is not None and isinstance(value, str) and re.fullmatch(rule.pattern, value) is None:
        problems.append(f"{where}: argument {path}={_show(value)} does not match the documented form "
                        f"{rule.pattern} ({c.source})")
    if rule.range is not None:
        n = _number(value)
        lo, hi = rule.range
        if n is not None and (not math.isfinite(n) or (lo is not None and n < lo) or (hi is not None and n > hi)):
            problems.append(f"{where}: argument {path}={_show(value)} is outside the documented range "
                            f"{'-∞' if lo is None else f'{lo:g}'}..{'∞' if hi is None else f'{hi:g}'} ({c.source})")


def _check(token: str, kind: str, where: str, values: Mapping[str, Any]) -> list[str]:
    c = contract(token)
    if c is None or c.kind != kind:
        what = "type" if kind == "resource" else "function"
        return [f"{where}: no provider contract for this {what}; add one to gpu_cluster/contracts/"
                f"{cloud_of(token) or '<cloud>'}.yaml from the provider's docs or schema source"]
    problems: list[str] = []
    _check_block(where, c, c.arguments, c.required, values, "", problems)
    for group in c.at_least_one_of:
        if all(values.get(name) is None for name in group):
            problems.append(f"{where}: one of the arguments {', '.join(group)} is required and none is set ({c.source})")
    return problems


AUTONAME_SUFFIX = 8
"""What the bridge adds to a logical name: "-" and 7 random hex characters."""


def check_resource(type_: str, name: str, inputs: Mapping[str, Any],
                   delete_before_replace: Optional[bool] = None) -> list[str]:
    """Problems of one registration's inputs, as sentences (empty when it keeps the contract), of the
    name the bridge gives it when its auto-named argument is unset, and (when `delete_before_replace`,
    the registration's option, is given) of a replacement order the provider cannot take."""
    where = f"resource {name!r} ({type_})"
    problems = _check(type_, "resource", where, inputs)
    c = contract(type_)
    if c is not None and c.delete_before_replace and delete_before_replace is False:
        problems.append(f"{where}: register it with delete_before_replace=True: {c.delete_before_replace} "
                        f"({c.source})")
    if c is not None and c.autoname and inputs.get(c.autoname) is None:
        rule = c.arguments.get(c.autoname)
        auto = f"{name}-{'0' * (AUTONAME_SUFFIX - 1)}"
        if rule is not None and rule.pattern is not None and re.fullmatch(rule.pattern, auto) is None:
            problems.append(f"{where}: with {c.autoname} unset, Pulumi names it {name!r} plus '-' and 7 random "
                            f"characters ({len(auto)} characters), which does not match the documented form "
                            f"{rule.pattern} ({c.source})")
    return problems


def check_invoke(token: str, args: Mapping[str, Any]) -> list[str]:
    """Problems of one function call's arguments (unset arguments arrive as null)."""
    return _check(token, "function", f"function {token}", {k: v for k, v in args.items() if v is not None})


def function_result(token: str, args: Mapping[str, Any], result: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """A mocked function result as the provider would return it — the given arguments echoed (the
    provider keeps configuration values in a data source's state) and only the attributes its Read
    sets — and a problem for every attribute the mock invented (dropped from the result)."""
    c = contract(token)
    if c is None:
        return dict(result), [f"function {token}: no provider contract"]
    invented = sorted(k for k in result if k not in c.returns and k not in args)
    kept = {k: v for k, v in result.items() if k not in invented}
    problems = [f"the mock of {token} returns {', '.join(invented)}, which the provider never sets ({c.source})"] \
        if invented else []
    return {**{k: v for k, v in args.items() if v is not None}, **kept}, problems


def resource_outputs(type_: str, computed: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """Mocked computed outputs of a resource, only those the provider computes, and a problem for each
    other one (dropped)."""
    c = contract(type_)
    if c is None:
        return {}, [f"resource type {type_}: no provider contract"]
    invented = sorted(k for k in computed if k not in c.computed)
    problems = [f"the mock of {type_} computes {', '.join(invented)}, which the provider does not compute "
                f"({c.source})"] if invented else []
    return {k: v for k, v in computed.items() if k not in invented}, problems


def changed_paths(before: Any, after: Any, prefix: str = "") -> list[str]:
    """Dotted argument paths whose value differs (list elements compared as a whole below their block)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        out = []
        for k in sorted(set(before) | set(after)):
            if before.get(k) != after.get(k):
                out += changed_paths(before.get(k), after.get(k), f"{prefix}{k}.") or [f"{prefix}{k}"]
        return out
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        out = []
        for b, a in zip(before, after):
            out += changed_paths(b, a, prefix)
        return sorted(set(out))
    return [prefix.rstrip(".")] if before != after and prefix else []
