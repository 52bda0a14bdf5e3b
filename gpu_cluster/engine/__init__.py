"""The one Mocks class (docs/architecture.md, "Tests"): deterministic ids, realistic computed outputs, answers to lookups.

Used by the offline renderer and by the tests alike. What a cloud computes (ARNs, DNS names, mount
names) and the lookups its components make live in `gpu_cluster/engine/<cloud>.py`, each a table of
small functions keyed by the provider's type token; this module merges them and records every
registration the program makes, in order, for the plan file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pulumi
from pulumi.runtime import rpc
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs

from gpu_cluster import contracts
from gpu_cluster.sdk_compat import ensure_event_loop, sync_await
from gpu_cluster.engine import aws as mocks_aws
from gpu_cluster.engine import tencentcloud as mocks_tencentcloud

# A computed-outputs function gets (logical name, engine inputs, id) and returns extra outputs.
Computed = Callable[[str, dict, str], dict]
# A lookup function gets the invoke's arguments and returns its result.
Lookup = Callable[[dict], dict]

COMPUTED: dict[str, Computed] = {**mocks_aws.COMPUTED, **mocks_tencentcloud.COMPUTED}
LOOKUPS: dict[str, Lookup] = {**mocks_aws.LOOKUPS, **mocks_tencentcloud.LOOKUPS}
ID_PREFIXES: dict[str, str] = {**mocks_aws.ID_PREFIXES, **mocks_tencentcloud.ID_PREFIXES}
NUMERIC_IDS: dict[str, int] = dict(mocks_tencentcloud.NUMERIC_IDS)
IDS_FROM_INPUTS: dict[str, Callable[[dict, str], Optional[str]]] = dict(mocks_tencentcloud.IDS_FROM_INPUTS)


def mock_id(type_: str, name: str, inputs: Optional[dict] = None) -> str:
    """A stable, realistic-looking id: what the provider builds from the inputs (IDS_FROM_INPUTS), a
    number where the cloud's ids are numbers (NUMERIC_IDS), or the type's id prefix plus a hash of the
    logical name."""
    digest = hashlib.sha256(f"{type_}::{name}".encode()).hexdigest()
    from_inputs = IDS_FROM_INPUTS.get(type_)
    if from_inputs is not None and (rid := from_inputs(inputs or {}, digest)):
        return rid
    if type_ in NUMERIC_IDS:
        return mocks_tencentcloud.digits(f"{type_}::{name}", NUMERIC_IDS[type_])
    prefix = ID_PREFIXES.get(type_)
    if prefix is None:
        return f"{name}-{digest[:8]}"
    # AWS ids carry 17 hex digits (vpc-0a1b…); Tencent ids 8 lowercase alphanumerics (vpc-1a2b3c4d).
    return f"{prefix}{digest[:17] if type_.startswith('aws:') else digest[:8]}"


class GpuClusterMocks(pulumi.runtime.Mocks):
    """Answers every registration and lookup the program makes, the same way every time, and only
    with what the provider itself returns (gpu_cluster/contracts/)."""

    def __init__(self) -> None:
        self.invokes: list[tuple[str, dict]] = []
        """Every function the program called, with its arguments, in order."""
        self.problems: list[str] = []
        """Contract problems of those calls (a render with any fails)."""

    def new_resource(self, args: MockResourceArgs) -> tuple[Optional[str], dict]:
        rid = args.resource_id or mock_id(args.typ, args.name, args.inputs)
        outputs = dict(args.inputs)
        computed = COMPUTED.get(args.typ)
        if computed is not None:
            values, problems = contracts.resource_outputs(args.typ, computed(args.name, args.inputs, rid))
            outputs.update(values)
            self.problems += problems
        return rid, outputs

    def call(self, args: MockCallArgs) -> dict:
        self.invokes.append((args.token, dict(args.args)))
        self.problems += contracts.check_invoke(args.token, args.args)
        lookup = LOOKUPS.get(args.token)
        if lookup is None:
            self.problems.append(f"the offline mocks have no answer for the function {args.token}; add one to "
                                 f"gpu_cluster/engine/<cloud>.py, returning only what its contract says it returns")
            return {}
        result, problems = contracts.function_result(args.token, args.args, lookup(args.args))
        self.problems += problems
        return result


@dataclass
class Registration:
    """One resource as the engine saw it: what the plan file needs of it."""

    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    protect: bool
    dependencies: list[str]
    provider: str
    inputs: dict
    outputs: dict = field(default_factory=dict)
    id: str = ""
    ignore_changes: list[str] = field(default_factory=list)
    property_dependencies: dict[str, list[str]] = field(default_factory=dict)
    delete_before_replace: bool = False
    retain_on_delete: bool = False
    """The provider's Delete is not called: the resource stays in the cloud when it leaves the state."""
    custom_timeouts: dict = field(default_factory=dict)
    """create / update / delete waits the program asks the provider for (ResourceOptions.custom_timeouts)."""


class RecordingMonitor(MockMonitor):
    """A MockMonitor that keeps every registration in order, with its options."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.component_outputs: dict[str, dict] = {}

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        """URNs as the engine makes them: the parent's full qualified type, but never the root stack's.

        (The SDK's MockMonitor keeps only the parent's last type and prefixes the stack type too, so its
        URNs would not match a `pulumi stack export` of the same program.)
        """
        if parent:
            parent_type = parent.split("::")[2]
            if parent_type != "pulumi:pulumi:Stack":
                type_ = f"{parent_type}${type_}"
        return "urn:pulumi:" + "::".join([pulumi.get_stack(), pulumi.get_project(), type_, name])

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type == "pulumi:pulumi:Stack":
            return response
        reg = self.resources[response.urn]
        ensure_event_loop()
        self.registrations.append(Registration(
            urn=response.urn,
            type=request.type,
            name=request.name,
            custom=bool(request.custom),
            parent=request.parent,
            protect=bool(request.protect),
            dependencies=list(request.dependencies),
            provider=request.provider,
            inputs=rpc.deserialize_properties(request.object),
            outputs=reg.state,
            id=reg.id or "",
            ignore_changes=list(request.ignoreChanges),
            property_dependencies={k: list(v.urns) for k, v in request.propertyDependencies.items()},
            delete_before_replace=bool(request.deleteBeforeReplace),
            retain_on_delete=bool(getattr(request, "retainOnDelete", False)),
            custom_timeouts={k: v for k in ("create", "update", "delete")
                             if (v := getattr(request.customTimeouts, k, ""))},
        ))
        return response

    def RegisterResourceOutputs(self, request):
        ensure_event_loop()
        self.component_outputs[request.urn] = rpc.deserialize_properties(request.outputs)
        return super().RegisterResourceOutputs(request)


def resolve(value: Any) -> Any:
    """Await an Output (or a structure holding Outputs) under the mocks; unknowns become None."""
    return sync_await(pulumi.Output.from_input(value).future())
