"""Run the CrossGuard pack's own policy objects on a plan, a `pulumi stack export` or a state file.

An adapter plays the part of the Pulumi engine and of the SDK's analyzer server
(`pulumi_policy.policy._PolicyAnalyzerServicer`):

- config: the engine's reconciliation — schema defaults, then the `--policy-config` file (Pulumi's
  format: `{"all": "advisory", "<policy>": "disabled" | {"enforcementLevel": ..., <property>: ...}}`),
  validated against each policy's schema; values travel as protobuf `Struct`s, so numbers are floats;
- resource policies: `Analyze` once per resource with `ResourceValidationArgs` (inputs, options,
  provider, config) — only for the types the policy judges (`gpu_guardrails.applies_to`); stack
  policies: `AnalyzeStack` with `StackValidationArgs` of `PolicyResource`s (outputs completed by inputs;
  parents, dependencies and property dependencies linked) — properties converted once as the analyzer
  deserializes them (integers as floats, secrets opened) and shared read-only by every policy. They are
  plain values, unknowns being the engine's sentinel strings, where the analyzer hands out its
  unknown-checking proxy: the pack reads both alike (`gpu_guardrails.props.get`), and
  tests/test_policy_grpc.py shows the real analyzer reports the same on every fixture;
- enforcement: disabled policies do not run, remediate reports as mandatory, an unknown value read
  during validation becomes an advisory "can't run during preview" diagnostic, `not_applicable` is silent.

Two things a real engine has that a plan lacks are filled in: the physical `id` of each resource is
put into its properties when they do not carry one (bridged providers' outputs do), and the
`budget-covers-estimate` policy receives the pricer's estimate as its `monthlyEstimate` config.
"""

from __future__ import annotations

import asyncio
import copy
import json
import sys
from dataclasses import asdict, dataclass
from inspect import isawaitable
from pathlib import Path
from typing import Any, Callable, Optional

from google.protobuf import json_format, struct_pb2
from pulumi_policy import (EnforcementLevel, PolicyCustomTimeouts, PolicyProviderResource, PolicyResource,
                           PolicyResourceOptions, ResourceValidationArgs, ResourceValidationPolicy,
                           StackValidationArgs, StackValidationPolicy)
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY, deserialize_properties
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, UnknownValueError, unknown_checking_proxy

from gpu_cluster.errors import UserError
from gpu_cluster.files import MAX_INPUT_BYTES, parse_json, read_text
from gpu_cluster.sdk_compat import NotApplicableError
from gpu_cluster.plan import Plan, Resource

POLICIES_DIR = Path(__file__).resolve().parent.parent / "policies"
if str(POLICIES_DIR) not in sys.path:
    sys.path.insert(0, str(POLICIES_DIR))

import gpu_guardrails  # noqa: E402  (the pack's own rule modules, the same objects policies/__main__.py serves)

POLICIES = gpu_guardrails.ALL_POLICIES
PACK_NAME = gpu_guardrails.PACK_NAME
PACK_ENFORCEMENT = EnforcementLevel.MANDATORY  # policies/__main__.py: PolicyPack(enforcement_level=...)
ESTIMATE_POLICY = "budget-covers-estimate"
_LEVELS = {e.value: e for e in EnforcementLevel}


@dataclass(frozen=True)
class Violation:
    policy: str
    enforcement: str  # "mandatory" | "advisory"
    urn: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


# ---- policy config (the engine's ReconcilePolicyPackConfig) ------------------------------------------

def load_policy_config(path: Optional[str]) -> Optional[dict]:
    """Read and check a policy-config JSON file; None when no path is given. Bad files raise UserError."""
    if not path:
        return None
    text = read_text(Path(path), "policy config", MAX_INPUT_BYTES)
    if not text.strip():
        return {}
    doc = parse_json(text, f"policy config {path}")
    if not isinstance(doc, dict):
        raise UserError(f"policy config {path} must be a JSON object mapping policy names to settings")
    problems = _config_problems(doc)
    if problems:
        raise UserError(f"policy config {path} is invalid: " + "; ".join(problems))
    return doc


def _split(value: Any) -> tuple[Optional[EnforcementLevel], dict]:
    if isinstance(value, str):
        return _LEVELS[value], {}
    props = dict(value)
    level = props.pop("enforcementLevel", None)
    return (_LEVELS[level] if level is not None else None), props


def _config_problems(doc: dict) -> list[str]:
    names = {p.name: p for p in POLICIES}
    problems = []
    for key, value in doc.items():
        if key != "all" and key not in names:
            problems.append(f"{key!r} is not a policy of {PACK_NAME}; known: {', '.join(sorted(names))}")
            continue
        if isinstance(value, str):
            level = value
        elif isinstance(value, dict):
            level = value.get("enforcementLevel")
        else:
            problems.append(f"{key!r} must be an enforcement level or an object, got {json.dumps(value)}")
            continue
        if level is not None and level not in _LEVELS:
            problems.append(f"{key!r}: enforcement level {level!r} is not one of {', '.join(_LEVELS)}")
    if problems:
        return problems
    for name, (_, props) in _reconcile(doc).items():
        schema = names[name].config_schema
        if schema is not None:
            problems += [f"{name}: {p}" for p in _schema_problems(
                {"type": "object", "properties": schema.properties, "required": schema.required or []}, props, "")]
    return problems


def _reconcile(doc: Optional[dict]) -> dict[str, tuple[EnforcementLevel, dict]]:
    """policy name → (enforcement level, config properties): defaults, then `all`, then per policy."""
    result = {}
    for p in POLICIES:
        defaults = {k: copy.deepcopy(v["default"]) for k, v in (p.config_schema.properties if p.config_schema else {}).items()
                    if "default" in v}
        result[p.name] = (p.enforcement_level or PACK_ENFORCEMENT, defaults)
    doc = doc or {}
    if "all" in doc:
        level, _ = _split(doc["all"])
        if level is not None:
            result = {k: (level, props) for k, (_, props) in result.items()}
    for name, value in doc.items():
        if name == "all" or name not in result:
            continue
        level, props = _split(value)
        old_level, old_props = result[name]
        result[name] = (level or old_level, {**old_props, **props})
    return result


_JSON_TYPES = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool) or isinstance(v, float) and v.is_integer(),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _schema_problems(schema: dict, value: Any, where: str) -> list[str]:
    """The JSON-schema subset the pack's schemas use (type, enum, minimum/maximum, items, properties)."""
    at = where or "config"
    kind = schema.get("type")
    if kind and not _JSON_TYPES[kind](value):
        return [f"{at} must be {'an' if kind[0] in 'aeiou' else 'a'} {kind}, got {json.dumps(value)}"]
    problems = []
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{at} must be one of {schema['enum']}, got {json.dumps(value)}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        problems.append(f"{at} must be at least {schema['minimum']}, got {value}")
    if "maximum" in schema and isinstance(value, (int, float)) and value > schema["maximum"]:
        problems.append(f"{at} must be at most {schema['maximum']}, got {value}")
    if isinstance(value, list) and "items" in schema:
        for i, v in enumerate(value):
            problems += _schema_problems(schema["items"], v, f"{at}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in value:
                problems.append(f"{at}.{k} is required")
        for k, v in value.items():
            sub = props.get(k, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                problems += _schema_problems(sub, v, f"{where}.{k}" if where else k)
    return problems


def _as_engine_value(value: Any) -> Any:
    """What a value looks like after a trip through a protobuf Struct (the analyzer's RPC): ints become floats."""
    s = struct_pb2.Struct()
    s.update({"v": value})
    return json_format.MessageToDict(s)["v"]


# ---- properties as the analyzer sees them ---------------------------------------------------------------

_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"      # pulumi.runtime.rpc: a resource reference
_OUTPUT_VALUE_SIG = "d0e6a833031e9bbcd3f4e8bde6ca49a4"  # pulumi.runtime.rpc: an output value


def _engine_value(v: Any) -> Any:
    """One property value as the analyzer receives it, in one pass (no protobuf round trip per resource).

    What a trip through a protobuf `Struct` does (integers become floats), then what the SDK's
    `deserialize_properties` does (secrets unwrapped, assets and archives rebuilt); secrets are decoded
    where the export holds plaintext and unknown where it holds only ciphertext; a resource reference
    becomes its id (or URN), an output value its value (unknown when it has none)."""
    t = type(v)
    if t is dict:
        if SPECIAL_SIG_KEY in v:
            return _special(v)
        return {k: (x if type(x) in _PLAIN else float(x) if type(x) is int else _engine_value(x)) for k, x in v.items()}
    if t is list:
        return [x if type(x) in _PLAIN else float(x) if type(x) is int else _engine_value(x) for x in v]
    if t is int:
        return float(v)
    return v


_PLAIN = (str, float, bool, type(None))


def _special(v: dict) -> Any:
    sig = v.get(SPECIAL_SIG_KEY)
    if sig == SPECIAL_SECRET_SIG:
        if "value" in v:
            return _engine_value(v["value"])
        if "plaintext" in v:
            try:
                return _engine_value(json.loads(v["plaintext"], parse_constant=_refuse_constant))
            except (TypeError, ValueError, RecursionError):
                return v["plaintext"] if isinstance(v["plaintext"], str) else UNKNOWN_STRING_VALUE
        return UNKNOWN_STRING_VALUE
    if sig == _RESOURCE_SIG:
        ref = v.get("id") or v.get("urn")
        return ref if isinstance(ref, str) and ref else UNKNOWN_STRING_VALUE
    if sig == _OUTPUT_VALUE_SIG:
        return _engine_value(v["value"]) if "value" in v else UNKNOWN_STRING_VALUE
    try:  # assets and archives: the SDK's own reader
        return deserialize_properties({"v": _as_engine_value(v)})["v"]
    except (AssertionError, TypeError, ValueError):
        return UNKNOWN_STRING_VALUE


def _refuse_constant(name: str) -> float:
    raise ValueError(name)


def _engine_props(props: dict[str, Any]) -> dict[str, Any]:
    return {k: _engine_value(v) for k, v in props.items()}


def _with_id(props: dict[str, Any], res: Resource) -> dict[str, Any]:
    if res.id and "id" not in props:
        props["id"] = res.id
    return props


def _options(res: Resource) -> PolicyResourceOptions:
    return PolicyResourceOptions(res.protect, [], None, [], PolicyCustomTimeouts(0, 0, 0), [], res.parent or None)


class _Providers:
    """The provider resource of each resource, built once per provider reference."""

    def __init__(self, by_urn: dict[str, Resource]):
        self._by_urn, self._cache = by_urn, {}

    def __call__(self, res: Resource) -> Optional[PolicyProviderResource]:
        ref = res.provider
        if not ref:
            return None
        if ref not in self._cache:
            urn = ref.rsplit("::", 1)[0] if ref.count("::") > 3 else ref
            prov = self._by_urn.get(urn)
            self._cache[ref] = None if prov is None else PolicyProviderResource(
                prov.type, unknown_checking_proxy(_engine_props(prov.props)), prov.urn, prov.name)
        return self._cache[ref]


# ---- running ------------------------------------------------------------------------------------------

Pricer = Callable[[Plan], Any]
Progress = Callable[[str], None]


def _default_pricer() -> Optional[Pricer]:
    try:
        from gpu_cluster.pricing import price_plan
    except ImportError:
        return None
    return price_plan


def _estimate(plan: Plan, pricer: Optional[Pricer]) -> Optional[dict]:
    if pricer is None:
        return None
    try:
        cost = pricer(plan)
    except (ArithmeticError, AttributeError, LookupError, TypeError, ValueError, UserError):
        return None  # a file the pricer cannot price (another project's export): no estimate to compare
    total = getattr(cost, "total", None)
    if total is None:
        return None
    unpriced = getattr(cost, "unpriced", None) or []
    return {"total": float(total), "currency": str(getattr(cost, "currency", "")),
            "unpriced": unpriced if isinstance(unpriced, int) else len(unpriced),
            "unpricedItems": str(getattr(cost, "unpriced_summary", "") or "")}


def _run(policy: Any, args: Any, level: EnforcementLevel, urn_default: str, out: list[Violation],
         is_stack: bool) -> None:
    reported = "mandatory" if level in (EnforcementLevel.MANDATORY, EnforcementLevel.REMEDIATE) else level.value

    def report_violation(message: str, urn: Optional[str] = None) -> None:
        if message and not isinstance(message, str):
            raise TypeError("Expected message to be a string")
        if urn is not None and not isinstance(urn, str):
            raise TypeError("Expected urn to be a string")
        # Resource validations always report against the resource; stack ones against `urn` or the stack.
        out.append(Violation(policy.name, reported, (urn or "") if is_stack else urn_default,
                             message or policy.description))

    try:
        result = policy.validate(args, report_violation)
        if isawaitable(result):
            loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(result)
            finally:
                loop.close()
    except UnknownValueError as e:
        out.append(Violation(policy.name, "advisory", "",
                             f"can't run policy '{policy.name}' from policy pack '{PACK_NAME}' during preview: "
                             f"{e.message}"))
    except NotApplicableError:
        pass
    except Exception as e:  # a rule bug: name it instead of a bare traceback
        raise RuntimeError(f"policy {policy.name} failed on {urn_default or 'the stack'}: "
                           f"{type(e).__name__}: {e}") from e


def reconciled_config(plan: Plan, config: Optional[dict] = None,
                      pricer: Optional[Pricer] = None) -> dict[str, tuple[EnforcementLevel, dict]]:
    """policy name → (enforcement level, config properties as the engine sends them): what `Configure` gets."""
    problems = _config_problems(config or {})
    if problems:
        raise ValueError("policy config is invalid: " + "; ".join(problems))
    settings = _reconcile(config)
    if ESTIMATE_POLICY in settings and "monthlyEstimate" not in settings[ESTIMATE_POLICY][1] \
            and settings[ESTIMATE_POLICY][0] != EnforcementLevel.DISABLED:
        estimate = _estimate(plan, pricer if pricer is not None else _default_pricer())
        if estimate is not None:
            settings[ESTIMATE_POLICY][1]["monthlyEstimate"] = estimate
    return {name: (level, _as_engine_value(props)) for name, (level, props) in settings.items()}


def strict_config(config: Optional[dict]) -> dict:
    """`config` with every policy in strict mode (`gpu-cluster check --strict`): a mandatory rule fails when
    a property it needs is unknown instead of leaving it to the update."""
    out = dict(config or {})
    for policy in POLICIES:
        entry = out.get(policy.name)
        if entry == EnforcementLevel.DISABLED.value:
            continue
        if isinstance(entry, str):
            out[policy.name] = {"enforcementLevel": entry, "strict": True}
        elif isinstance(entry, dict):
            out[policy.name] = {**entry, "strict": True}
        else:
            out[policy.name] = {"strict": True}
    return out


def analyzed(plan: Plan) -> list[Resource]:
    """The resources the engine sends to `Analyze` one by one (every one but the root stack). A resource
    read with `.get()` (`external` in an export) is not the stack's own: it is left out here and from the
    stack policies, so a reference to it is a reference outside the stack (docs/policies.md, "Unknowns")."""
    return [r for r in plan.resources if r.type != "pulumi:pulumi:Stack" and not r.external]


def run_policies(plan: Plan, config: Optional[dict] = None, pricer: Optional[Pricer] = None,
                 progress: Optional[Progress] = None) -> list[Violation]:
    """Every violation the pack reports on `plan`, resource policies first, in plan order.

    `config` is a policy-config document (see `load_policy_config`). `pricer(plan)` returns an object
    with `.total`, `.currency` and `.unpriced`; by default `gpu_cluster.pricing.price_plan` when it imports.
    `progress(label)` hears of each step of a long run.

    Fast by construction: each resource's properties are converted once and shared (read-only) by every
    policy, and a resource policy runs only on the types it can judge (`gpu_guardrails.applies_to`).
    """
    settings = reconciled_config(plan, config, pricer)
    engine_config = {name: props or None for name, (_, props) in settings.items()}
    providers = _Providers(plan.by_urn())
    violations: list[Violation] = []

    resource_policies = [p for p in POLICIES if isinstance(p, ResourceValidationPolicy)
                         and settings[p.name][0] != EnforcementLevel.DISABLED]
    scopes = {p.name: gpu_guardrails.applies_to(p, settings[p.name][1]) for p in resource_policies}
    by_type: dict[str, list[Any]] = {}
    if progress is not None:
        progress("resource policies")
    converted = _Converted(plan)
    for res in analyzed(plan):
        policies = by_type.get(res.type)
        if policies is None:
            policies = by_type[res.type] = [p for p in resource_policies
                                            if scopes[p.name] is None or res.type in scopes[p.name]]
        if not policies:
            continue
        props = converted.analyzed(res)
        opts, provider = _options(res), providers(res)
        for policy in policies:
            args = ResourceValidationArgs(res.type, props, res.urn, res.name, opts, provider,
                                          engine_config[policy.name])
            _run(policy, args, settings[policy.name][0], res.urn, violations, is_stack=False)

    stack_policies = [p for p in POLICIES if isinstance(p, StackValidationPolicy)
                      and settings[p.name][0] != EnforcementLevel.DISABLED]
    if stack_policies:
        resources = _policy_resources(plan, providers, converted)
        for policy in stack_policies:
            if progress is not None:
                progress(policy.name)
            args = StackValidationArgs(resources, engine_config[policy.name])
            _run(policy, args, settings[policy.name][0], "", violations, is_stack=True)
    return violations


class _Converted:
    """Each resource's inputs and outputs converted once (`_engine_value`), shared by `Analyze` (inputs)
    and `AnalyzeStack` (outputs completed by inputs). Policies only read them."""

    def __init__(self, plan: Plan):
        self._cache: dict[str, tuple[dict, dict]] = {}

    def _both(self, res: Resource) -> tuple[dict, dict]:
        got = self._cache.get(res.urn)
        if got is None:
            got = self._cache[res.urn] = (_engine_props(res.inputs), _engine_props(res.outputs))
        return got

    def analyzed(self, res: Resource) -> dict:
        inputs, outputs = self._both(res)
        return _with_id(dict(inputs if inputs else outputs), res)

    def stacked(self, res: Resource) -> dict:
        inputs, outputs = self._both(res)
        return _with_id({**outputs, **inputs} if outputs else dict(inputs), res)


def _policy_resources(plan: Plan, providers: Callable[[Resource], Any],
                      converted: Optional[_Converted] = None) -> list[PolicyResource]:
    """The stack as `AnalyzeStack` hands it to stack policies: outputs, parents and (property) dependencies."""
    converted = converted or _Converted(plan)
    out: dict[str, PolicyResource] = {}
    for r in plan.resources:
        if r.external:
            continue
        out[r.urn] = PolicyResource(r.type, converted.stacked(r), r.urn,
                                    r.name, _options(r), providers(r), None, [], {})
    for r in plan.resources:
        pr = out.get(r.urn)
        if pr is None:
            continue
        if r.parent in out:
            pr.parent = out[r.parent]
        pr.dependencies.extend(out[d] for d in r.dependencies if d in out)
        for key, urns in r.property_dependencies.items():
            pr.property_dependencies[key] = [out[d] for d in urns if d in out]
    return list(out.values())


# ---- output -------------------------------------------------------------------------------------------

def _resource_label(urn: str) -> str:
    if not urn:
        return "(stack)"
    parts = urn.split("::")
    return f"{parts[-1]} ({parts[-2].rsplit('$', 1)[-1].rsplit(':', 1)[-1]})" if len(parts) >= 4 else urn


def format_violations(violations: list[Violation]) -> str:
    """A table of violations (mandatory first) and a one-line summary."""
    if not violations:
        return f"no policy violations ({len(POLICIES)} policies of {PACK_NAME} checked)"
    rows = sorted(violations, key=lambda v: (v.enforcement != "mandatory", v.policy, v.urn))
    header = ["level", "policy", "resource", "message"]
    cells = [[v.enforcement, v.policy, _resource_label(v.urn), v.message] for v in rows]
    widths = [max(len(c[i]) for c in [header] + cells) for i in range(3)]
    line = lambda c: "  ".join([c[0].ljust(widths[0]), c[1].ljust(widths[1]), c[2].ljust(widths[2]), c[3]])  # noqa: E731
    mandatory = sum(v.enforcement == "mandatory" for v in violations)
    return "\n".join([line(header), line(["-" * w for w in widths] + ["-" * 7])] + [line(c) for c in cells] + [
        f"{len(violations)} violation(s), {mandatory} mandatory"])
