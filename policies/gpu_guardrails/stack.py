"""A read-only view of a stack for the stack validations: GPU capacity and what it references.

GPU capacity is every resource through which a program can run GPU machines (`CAPACITY_TYPES`):

- AWS: `ec2.Instance`, `ec2.SpotInstanceRequest`, `autoscaling.Group` (launch template, mixed
  instances policy or launch configuration), `eks.NodeGroup`, `ec2.Fleet`, `ec2.SpotFleetRequest`;
- Tencent: `Instance`, Auto Scaling `As.ScalingGroup` + `As.ScalingConfig`, TKE `Kubernetes.NodePool`
  and the inline `workerConfigs` of a `Kubernetes.Cluster`.

Each becomes a `Node`: its instance types, machine count, purchase option, subnets, zones, templates
(launch templates / configurations, scaling configs) and tags — argument names as in pulumi-aws 7.51.1
and tencentcloud-iac-pulumi 0.2.3 (their `*Args` classes; the Terraform schemas they are generated from).

References are resolved by value when the value is known (an id, name or ARN of a resource in the
stack). During a first preview ids are unknown; then, in order: the engine's `property_dependencies`
for that property, its `dependencies`, the launch template (for a node's subnet), and finally the
parent components — the one resource of the wanted type under the nearest common component. A known
value that matches no resource of the stack points outside it (an existing subnet, a shared group).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .props import (CLUSTER_TAG, CRITICALITY_TAG, ROLE_TAG, TIER_TAG, UNKNOWN, as_bool, as_int, as_str, get, items,
                    known, tags_at, tags_of, values, TAG_PREFIX)
from .shapes import is_gpu_type

from .kinds import (AWS_ASG, AWS_BATCH, AWS_EMR, AWS_ENI, AWS_ENI_ATTACHMENT, AWS_FLEET, AWS_INSTANCE,  # noqa: F401
                    AWS_INSTANCE_STATE, AWS_NODE_GROUP, AWS_NOTEBOOK, AWS_SPOT_FLEET, AWS_SPOT_REQUEST,
                    AWSN_INSTANCE, CAPACITY_TYPES, KINDS, TC_ENI, TC_ENI_ATTACHMENT, TC_INSTANCE, TC_INSTANCE_SET,
                    TC_K8S_CLUSTER, TC_NATIVE_POOL, TC_NODE_POOL, TC_SCALE_WORKER, TC_SCALING_GROUP, Kind,
                    PLUMBING, STRICT_NEEDS)
from .placements import SUBNET_INPUTS

AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_LAUNCH_CONFIG = "aws:ec2/launchConfiguration:LaunchConfiguration"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_DEFAULT_SUBNET = "aws:ec2/defaultSubnet:DefaultSubnet"
AWS_VPC = "aws:ec2/vpc:Vpc"
AWS_DEFAULT_VPC = "aws:ec2/defaultVpc:DefaultVpc"
AWS_PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
TC_SCALING_CONFIG = "tencentcloud:As/scalingConfig:ScalingConfig"
TC_SUBNET = "tencentcloud:Subnet/instance:Instance"
TC_VPC = "tencentcloud:Vpc/instance:Instance"
TC_HPC_CLUSTER = "tencentcloud:Cvm/hpcCluster:HpcCluster"

AWS_SECONDARY_SUBNET = "aws:ec2/secondarySubnet:SecondarySubnet"
SUBNET_TYPES = (AWS_SUBNET, AWS_DEFAULT_SUBNET, AWS_SECONDARY_SUBNET, TC_SUBNET)
VPC_TYPES = (AWS_VPC, AWS_DEFAULT_VPC, TC_VPC)
ENI_TYPES = (AWS_ENI, TC_ENI)

_REF_KEYS = ("id", "name", "arn", "bucket")
_LT_KEYS = ("id", "name", "arn")


@dataclass(frozen=True)
class Ref:
    """What a reference property points at: a resource of the stack, an outside id, or nothing known."""

    resource: Any = None        # the PolicyResource in this stack
    outside: Optional[str] = None  # a known value that names no resource of this stack
    present: bool = False       # the property is set (known or unknown)

    @property
    def unknown(self) -> bool:
        """Set, but neither resolved to a resource of the stack nor known to point outside it."""
        return self.present and self.resource is None and self.outside is None


class _Member:
    """What capacity records and placements share: a resource and its tags."""

    resource: Any
    tags: dict[str, str]

    @property
    def urn(self) -> str:
        return self.resource.urn

    @property
    def cluster(self) -> str:
        return self.tags.get(CLUSTER_TAG, "")


@dataclass
class Node(_Member):
    """A capacity record: one machine, or a group of machines launched from the same definition, read
    through its type's `Kind` (kinds.py). Every policy judges these records, not resource types."""

    resource: Any
    instance_type: Optional[str]  # the first GPU type (else the first type) it may launch
    instance_types: list[str]
    count: int                    # machines declared (a group's desired, else min, else max size)
    spot: Optional[bool]          # True: every machine is spot; False: at least one on-demand; None: unknown
    on_demand: int                # on-demand machines that actually run (0 when unknown)
    subnets: list[Ref]            # every subnet it touches: its own, its templates', each attached interface's
    templates: list[Ref]          # launch templates / configurations / scaling configs, in order
    tags: dict[str, str]
    cloud: str
    zones: list[str] = field(default_factory=list)
    spec: Any = None              # the sub-object that describes the machines (worker config), else None
    label: str = ""               # how messages name it (a worker config of a cluster has an index)
    hpc: Optional[Ref] = None     # Tencent: the HPC cluster reference, when the resource can carry one
    kind: Optional[Kind] = None
    runs: int = 0                 # machines that can actually run (desired or min; a stopped node: 0)
    gpu_requirements: bool = False  # instanceRequirements ask for at least one NVIDIA accelerator
    enis: list[Any] = field(default_factory=list)   # network interfaces (resources) attached to it
    unknown: set[str] = field(default_factory=set)  # record fields the plan leaves unknown (strict mode)

    @property
    def tier(self) -> str:
        return self.tags.get(TIER_TAG, "")

    @property
    def criticality(self) -> str:
        """The criticality tag's value, lower-cased ("Critical" is critical)."""
        return self.tags.get(CRITICALITY_TAG, "").strip().lower()

    @property
    def role(self) -> str:
        return self.tags.get(ROLE_TAG, "").strip().lower()

    @property
    def is_gpu(self) -> bool:
        return self.gpu_requirements or any(is_gpu_type(t) for t in self.instance_types)

    @property
    def props(self) -> Any:
        """The object its kind's paths are relative to: the worker config, or the resource's properties."""
        return self.spec if self.spec is not None else self.resource.props


@dataclass
class Placement(_Member):
    """A workload or interface that is not capacity but sits in subnets (a Lambda function, a database
    subnet group, a load balancer, a network interface of no machine...)."""

    resource: Any
    subnets: list[Ref]
    tags: dict[str, str]

    @property
    def label(self) -> str:
        return self.resource.urn.rsplit("::", 1)[-1]


_CACHE: list[Any] = [None, None]  # (resources object, its StackView): stack policies share one view per run


def view_of(resources: Sequence[Any]) -> "StackView":
    """The StackView of `resources`, built once while the same resource list is judged by several policies."""
    if _CACHE[0] is not resources:
        _CACHE[0], _CACHE[1] = resources, StackView(resources)
    return _CACHE[1]


class StackView:
    def __init__(self, resources: Sequence[Any]):
        self.resources = list(resources)
        self._by_type: dict[str, list[Any]] = {}
        self._by_urn: dict[str, Any] = {}
        self._index: dict[tuple[str, str], dict[str, Any]] = {}
        self._nodes: Optional[list[Node]] = None
        self._capacity: Optional[list[Node]] = None
        self._stopped: Optional[set[str]] = None
        self._enis: Optional[dict[str, list[Any]]] = None
        self._eni_owners: dict[str, Any] = {}
        self._placements: Optional[list[Placement]] = None
        for r in self.resources:
            self._by_type.setdefault(r.resource_type, []).append(r)
            self._by_urn[r.urn] = r

    def of_type(self, *types: str) -> list[Any]:
        if len(types) == 1:
            return self._by_type.get(types[0], [])
        return [r for t in types for r in self._by_type.get(t, [])]

    def by_urn(self, urn: str) -> Any:
        return self._by_urn.get(urn)

    # ---- references ---------------------------------------------------------------------------
    def _lookup(self, type_: str, key: str) -> dict[str, Any]:
        index = self._index.get((type_, key))
        if index is None:
            index = {}
            for r in self._by_type.get(type_, []):
                v = as_str(get(r.props, key))
                if v is not None and v not in index:
                    index[v] = r
            self._index[(type_, key)] = index
        return index

    def find(self, value: Any, types: Iterable[str], keys: Sequence[str] = _REF_KEYS) -> Any:
        if not isinstance(value, str) or not value:
            return None
        for t in types:
            for key in keys:
                found = self._lookup(t, key).get(value)
                if found is not None:
                    return found
        return None

    def ref(self, res: Any, path: str, types: Sequence[str], value: Any = None,
            keys: Sequence[str] = _REF_KEYS) -> Ref:
        """Resolve `res.props[path]` (or the given `value`) to a resource of one of `types`."""
        if value is None:
            value = get(res.props, path)
        if value is None:
            return Ref()
        if known(value):
            found = self.find(as_str(value), types, keys)
            if found is not None:
                return Ref(resource=found, present=True)
            if isinstance(value, str):
                return Ref(outside=value, present=True)
            return Ref(present=True)
        return Ref(resource=self.dependency(res, path.split(".", 1)[0], types), present=True)

    def dependency(self, res: Any, prop: str, types: Sequence[str]) -> Any:
        """The one resource of `types` an unknown property `prop` of `res` comes from, or None."""
        pdeps = getattr(res, "property_dependencies", None) or {}
        candidates = _unique(d for d in (pdeps.get(prop) or []) if d.resource_type in types)
        if not candidates:
            candidates = _unique(d for d in (getattr(res, "dependencies", None) or []) if d.resource_type in types)
        if len(candidates) == 1:
            return candidates[0]
        if candidates:
            return None  # several candidates: nothing certain
        return self.family_member(res, types)

    def refs(self, res: Any, prop: str, values: list[Any], types: Sequence[str],
             keys: Sequence[str] = _REF_KEYS) -> list[Ref]:
        """Several references held by one property (a list of subnet ids, the overrides of a fleet...).

        Known values resolve one by one. Unknown ones share the property's dependency edges: when there
        are as many candidates of `types` as unknown values (or one), each unknown value is one of them —
        which one does not matter to a rule that looks at the set (zones, ownership)."""
        out: list[Ref] = []
        unknown = 0
        for v in values:
            if v is UNKNOWN:
                unknown += 1
            elif v is not None:
                out.append(self.ref(res, prop, types, value=v, keys=keys))
        if unknown:
            pdeps = getattr(res, "property_dependencies", None) or {}
            taken = {r.resource.urn for r in out if r.resource is not None}
            cands = _unique(d for d in (pdeps.get(prop) or []) if d.resource_type in types and d.urn not in taken)
            if not cands:
                cands = _unique(d for d in (getattr(res, "dependencies", None) or [])
                                if d.resource_type in types and d.urn not in taken)
            if len(cands) == unknown:
                out += [Ref(resource=c, present=True) for c in cands]
            elif len(cands) == 1:
                out += [Ref(resource=cands[0], present=True)] * unknown
            else:
                fam = self.family_member(res, types) if not cands else None
                out += [Ref(resource=fam, present=True)] * unknown
        return out

    def family_member(self, res: Any, types: Sequence[str]) -> Any:
        """The one resource of `types` under the nearest component that holds `res` and any of them
        (never the stack itself: a stack may hold many unrelated things)."""
        chain, cur = [], getattr(res, "parent", None)
        while cur is not None and cur.resource_type != "pulumi:pulumi:Stack" and len(chain) < 64:
            chain.append(cur.urn)
            cur = getattr(cur, "parent", None)
        if not chain:
            return None
        depth = {urn: i for i, urn in enumerate(chain)}
        best: dict[int, list[Any]] = {}
        for t in types:
            for r in self._by_type.get(t, []):
                p, hops = getattr(r, "parent", None), 0
                while p is not None and hops < 64:
                    if p.urn in depth:
                        best.setdefault(depth[p.urn], []).append(r)
                        break
                    p, hops = getattr(p, "parent", None), hops + 1
        if not best:
            return None
        nearest = best[min(best)]
        return nearest[0] if len(nearest) == 1 else None

    # ---- templates ----------------------------------------------------------------------------
    def _lt(self, res: Any, prop: str, id_value: Any, name_value: Any) -> Optional[Ref]:
        for value, keys in ((id_value, ("id",)), (name_value, ("name",))):
            if value is not None:
                return self.ref(res, prop, (AWS_LAUNCH_TEMPLATE,), value=value, keys=keys if known(value) else _LT_KEYS)
        return None

    def templates_of(self, res: Any) -> list[Ref]:
        """Launch templates, launch configurations or scaling configs a capacity resource launches from."""
        t, p = res.resource_type, res.props
        out: list[Ref] = []

        def add(ref: Optional[Ref]) -> None:
            if ref is not None and ref.present and ref not in out:
                out.append(ref)

        if t in (AWS_INSTANCE, AWS_SPOT_REQUEST, AWS_NODE_GROUP):
            add(self._lt(res, "launchTemplate", get(p, "launchTemplate.id"), get(p, "launchTemplate.name")))
        elif t == AWS_ASG:
            add(self._lt(res, "launchTemplate", get(p, "launchTemplate.id"), get(p, "launchTemplate.name")))
            spec = "mixedInstancesPolicy.launchTemplate.launchTemplateSpecification"
            add(self._lt(res, "mixedInstancesPolicy", get(p, f"{spec}.launchTemplateId"),
                         get(p, f"{spec}.launchTemplateName")))
            for o in items(get(p, "mixedInstancesPolicy.launchTemplate.overrides")):
                add(self._lt(res, "mixedInstancesPolicy", get(o, "launchTemplateSpecification.launchTemplateId"),
                             get(o, "launchTemplateSpecification.launchTemplateName")))
            lc = get(p, "launchConfiguration")
            if lc is not None:
                add(self.ref(res, "launchConfiguration", (AWS_LAUNCH_CONFIG,), keys=("name", "id")))
        elif t == AWS_FLEET:
            for c in items(get(p, "launchTemplateConfigs")):
                add(self._lt(res, "launchTemplateConfigs", get(c, "launchTemplateSpecification.launchTemplateId"),
                             get(c, "launchTemplateSpecification.launchTemplateName")))
        elif t == AWS_SPOT_FLEET:
            for c in items(get(p, "launchTemplateConfigs")):
                add(self._lt(res, "launchTemplateConfigs", get(c, "launchTemplateSpecification.id"),
                             get(c, "launchTemplateSpecification.name")))
        elif t == AWS_BATCH:
            add(self._lt(res, "computeResources", get(p, "computeResources.launchTemplate.launchTemplateId"),
                         get(p, "computeResources.launchTemplate.launchTemplateName")))
        elif t == AWSN_INSTANCE:
            add(self._lt(res, "launchTemplate", get(p, "launchTemplate.launchTemplateId"),
                         get(p, "launchTemplate.launchTemplateName")))
        elif t == TC_SCALING_GROUP:
            if get(p, "configurationId") is not None:
                add(self.ref(res, "configurationId", (TC_SCALING_CONFIG,), keys=("id",)))
        return out

    # ---- capacity -----------------------------------------------------------------------------
    def capacity(self) -> list[Node]:
        """Every capacity record of the stack (GPU or not)."""
        if self._capacity is None:
            self._capacity = [n for res in self.of_type(*CAPACITY_TYPES) for n in self._nodes_of(res)]
        return self._capacity

    def gpu_nodes(self) -> list[Node]:
        if self._nodes is None:
            self._nodes = [n for n in self.capacity() if n.is_gpu]
        return self._nodes

    def clusters(self) -> "OrderedDict[str, list[Node]]":
        """GPU nodes grouped by their `gpu-cluster:name` tag ("" for untagged nodes), in stack order."""
        groups: "OrderedDict[str, list[Node]]" = OrderedDict()
        for n in self.gpu_nodes():
            groups.setdefault(n.cluster, []).append(n)
        return groups

    def _nodes_of(self, res: Any) -> list[Node]:
        kind = KINDS[res.resource_type]
        templates = self.templates_of(res)
        tmpl = [r.resource for r in templates if r.resource is not None]
        tags = self._tags(res.props, kind.tags, tmpl)
        if kind.each:
            specs = [w for w in values(res.props, kind.each) if w is not UNKNOWN]
            nodes = [self._node(res, kind, templates, tmpl, tags, spec=w, index=i) for i, w in enumerate(specs)]
            # The HPC clusters of all worker configs together: unknown ids share one dependency list.
            prop = kind.each.split(".", 1)[0].rstrip("[]")
            with_hpc = [n for n in nodes if get(n.spec, kind.hpc) is not None]
            hpcs = self.refs(res, prop, [get(n.spec, kind.hpc) for n in with_hpc], (TC_HPC_CLUSTER,))
            for n, ref in zip(with_hpc, hpcs):
                n.hpc = ref
            return nodes
        return [self._node(res, kind, templates, tmpl, tags)]

    def _node(self, res: Any, kind: Kind, templates: list[Ref], tmpl: list[Any], tags: dict[str, str],
              spec: Any = None, index: int = -1) -> Node:
        props = spec if spec is not None else res.props
        prop = kind.each.split(".", 1)[0].rstrip("[]") if kind.each else ""
        types = self._types(res, kind, props, tmpl)
        unknown: set[str] = set()
        if UNKNOWN in types:
            unknown.add("instance type")
        types = [t for t in types if t is not UNKNOWN]
        count = self._count(props, kind)
        runs = self._runs(res, props, kind, count, unknown)
        spot, on_demand = self._purchase(res, kind, props, tmpl, runs)
        if spot is None:
            unknown.add("purchase option")
        subnets = self._subnets(res, kind, props, tmpl, prop)
        if any(r.unknown for r in subnets):
            unknown.add("subnet")
        if any(t.unknown for t in templates):
            unknown.add("launch template")
        label = res.urn.rsplit("::", 1)[-1]
        node = Node(resource=res, instance_type=_first_gpu(types), instance_types=types, count=count, spot=spot,
                    on_demand=on_demand, subnets=subnets, templates=templates, tags=tags,
                    cloud=res.resource_type.split(":", 1)[0], spec=spec,
                    label=f"{label} (worker config {index})" if kind.each == "workerConfigs[]" else label,
                    kind=kind, runs=runs, unknown=unknown,
                    gpu_requirements=any(_asks_nvidia(r) for path in kind.requirements
                                         for r in values(props, path)) or
                    any(_asks_nvidia(get(t.props, "instanceRequirements")) for t in tmpl))
        if not kind.tags and not tags:
            # A type that carries no tags at all (a Tencent instance set) belongs to the cluster its subnet does.
            for ref in subnets:
                if ref.resource is not None:
                    node.tags = {k: v for k, v in tags_of(ref.resource.props).items() if k.startswith(TAG_PREFIX)}
                    break
        node.enis = self.enis_of(res) if spec is None else []
        node.zones = self._zones(kind, props, tmpl, subnets)
        if kind.hpc and spec is None:
            node.hpc = self.ref(res, kind.hpc, (TC_HPC_CLUSTER,))
        elif kind.hpc:
            hpc = get(spec, kind.hpc)
            node.hpc = Ref() if hpc is None else self.ref(res, prop, (TC_HPC_CLUSTER,), value=hpc)
        return node

    def _tags(self, props: Any, paths: tuple[str, ...], tmpl: list[Any]) -> dict[str, str]:
        """The resource's tags, then its provider default tags (`tagsAll`), then what its templates put on
        the machines (launch-template tag specifications, scaling-config instance tags): the first place
        that names a key wins."""
        out: dict[str, str] = {}
        for path in paths:
            for k, v in tags_at(props, path).items():
                out.setdefault(k, v)
        for tr in tmpl:
            for k, v in {**_lt_instance_tags(tr), **tags_of(tr.props, "instanceTags"), **tags_of(tr.props)}.items():
                out.setdefault(k, v)
        return out

    def _types(self, res: Any, kind: Kind, props: Any, tmpl: list[Any]) -> list[Any]:
        out: list[Any] = []
        for path in kind.instance_types:
            for v in values(props, path):
                s = as_str(v)
                if s and kind.type_prefix and s.startswith(kind.type_prefix):
                    s = s[len(kind.type_prefix):]
                item = s if s else (UNKNOWN if v is UNKNOWN else None)
                if item is not None and item not in out:
                    out.append(item)
        if not out or res.resource_type in (AWS_FLEET, AWS_SPOT_FLEET, AWS_ASG):
            for tr in tmpl:
                for v in [get(tr.props, "instanceType")] + items(get(tr.props, "instanceTypes")):
                    s = as_str(v)
                    if s and s not in out:
                        out.append(s)
        return out

    @staticmethod
    def _count(props: Any, kind: Kind) -> int:
        """Machines declared: the first positive number of the kind's count paths (none: one machine)."""
        if not kind.count:
            return 1
        for path in kind.count:
            n = as_int(next(iter(values(props, path)), None))
            if n is not None and n > 0:
                return 1 if kind.count_unit == "vcpus" else n
        return 0

    def _runs(self, res: Any, props: Any, kind: Kind, count: int, unknown: set[str]) -> int:
        """Machines that actually run: the first known of desired / min; 0 for a machine held stopped."""
        path, value = kind.stopped
        if path and str(get(props, path)).lower() == value:
            return 0
        if res.urn in self.stopped():
            return 0
        for p in kind.runs:
            v = next(iter(values(props, p)), None)
            if v is UNKNOWN:
                unknown.add("count")
                return count
            n = as_int(v)
            if n is not None:
                return (1 if n > 0 else 0) if kind.count_unit == "vcpus" else max(n, 0)
        return count

    def stopped(self) -> set[str]:
        """URNs of instances an `ec2transitgateway.InstanceState` holds stopped."""
        if self._stopped is None:
            self._stopped = set()
            for st in self.of_type(AWS_INSTANCE_STATE):
                if as_str(get(st.props, "state")) == "stopped":
                    ref = self.ref(st, "instanceId", (AWS_INSTANCE,), keys=("id",))
                    if ref.resource is not None:
                        self._stopped.add(ref.resource.urn)
        return self._stopped

    def _purchase(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        """(all spot?, on-demand machines that run)."""
        spot, on_demand = _MARKETS[kind.market](self, res, kind, props, tmpl, runs)
        return spot, (min(on_demand, runs) if spot is False else 0)

    def _instance_market(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        market = get(props, "instanceMarketOptions.marketType")
        for tr in tmpl:
            if market is not None:
                break
            if tr.resource_type == AWS_LAUNCH_CONFIG:
                price = get(tr.props, "spotPrice")
                market = UNKNOWN if price is UNKNOWN else ("spot" if as_str(price) else None)
            else:
                market = get(tr.props, "instanceMarketOptions.marketType")
        if market is None and res.resource_type == AWS_ASG and not tmpl and self.templates_of(res):
            return None, 0  # the template is unknown until the update
        if market is UNKNOWN:
            return None, 0
        return (True, 0) if market == "spot" else (False, runs)

    def _asg_market(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        if get(props, "mixedInstancesPolicy") is not None:
            return _mixed_instances_purchase(props, runs)
        return self._instance_market(res, kind, props, tmpl, runs)

    def _tencent_market(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        if kind.charge:
            charge = get(props, kind.charge)
        else:  # an Auto Scaling group: its scaling configuration says
            charge = get(tmpl[0].props, "instanceChargeType") if tmpl else (
                UNKNOWN if get(props, "configurationId") is not None else None)
        if charge is UNKNOWN:
            return None, 0
        return (True, 0) if charge == "SPOTPAID" else (False, runs)

    def _node_group_market(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        capacity = get(props, "capacityType")  # ON_DEMAND (the default), SPOT or CAPACITY_BLOCK
        if capacity is UNKNOWN:
            return None, 0
        return (True, 0) if capacity == "SPOT" else (False, runs)

    def _batch_market(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        """AWS Batch: compute resources of type SPOT or FARGATE_SPOT run on spot capacity."""
        kind_ = get(props, "computeResources.type")
        if kind_ is UNKNOWN:
            return None, 0
        return (True, 0) if as_str(kind_) in ("SPOT", "FARGATE_SPOT") else (False, runs)

    def _emr_market(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        """EMR: an instance group with a bid price is spot; a fleet's on-demand target is on-demand."""
        on_demand = 0
        for group in ("masterInstanceGroup", "coreInstanceGroup"):
            if get(props, group) is not None and get(props, f"{group}.bidPrice") is None:
                on_demand += as_int(get(props, f"{group}.instanceCount")) or 1
        for fleet in ("masterInstanceFleet", "coreInstanceFleet"):
            on_demand += as_int(get(props, f"{fleet}.targetOnDemandCapacity")) or 0
        return (True, 0) if on_demand == 0 else (False, on_demand)

    def _spot(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        return True, 0

    def _on_demand(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], runs: int) -> tuple[Optional[bool], int]:
        return False, runs

    def _subnets(self, res: Any, kind: Kind, props: Any, tmpl: list[Any], each_prop: str) -> list[Ref]:
        """Every subnet the record touches: its own subnet properties and each attached interface's; when
        the resource names none, its launch template's interfaces."""
        refs: list[Ref] = []
        for path in kind.subnets:
            prop = each_prop or path.split(".", 1)[0].rstrip("[]")
            refs += self.refs(res, prop, values(props, path), SUBNET_TYPES)
        if not each_prop:
            for eni in self.enis_of(res):
                refs += [r for r in self._eni_subnets(eni) if r not in refs]
        # Its launch templates' interfaces: every one the template adds (a second interface may sit in
        # another subnet), and the primary one when the resource names no subnet of its own.
        from_templates: list[Ref] = []
        for tr in tmpl:
            nics = items(get(tr.props, "networkInterfaces"))
            # unknown subnet ids of several interfaces resolve together, as a set (`refs`)
            for ref in self.refs(tr, "networkInterfaces", [get(nic, "subnetId") for nic in nics], SUBNET_TYPES) + \
                    self.refs(tr, "secondaryInterfaces", values(tr.props, "secondaryInterfaces[].secondarySubnetId"),
                              SUBNET_TYPES):
                if ref not in from_templates:
                    from_templates.append(ref)
            for nic in nics:
                eni = get(nic, "networkInterfaceId")
                if eni is not None:
                    found_eni = self.ref(tr, "networkInterfaces", ENI_TYPES, value=eni, keys=("id",)).resource
                    if found_eni is not None:
                        from_templates += [r for r in self._eni_subnets(found_eni) if r not in from_templates]
        if refs and not all(r.unknown for r in refs):
            return refs + [r for r in from_templates if not r.unknown and r not in refs]
        known_refs = [r for r in from_templates if not (refs and r.unknown)]
        return known_refs or refs

    def _eni_subnets(self, eni: Any) -> list[Ref]:
        return [self.ref(eni, "subnetId", SUBNET_TYPES)] if get(eni.props, "subnetId") is not None else []

    # ---- network interfaces -----------------------------------------------------------------------
    def enis_of(self, res: Any) -> list[Any]:
        """The network interfaces (resources of the stack) attached to a machine: named in its own
        properties, by an attachment resource, or by the interface's own `attachments`."""
        return self._eni_index().get(res.urn, [])

    def eni_owner(self, eni: Any) -> Any:
        """The machine a network interface of the stack is attached to, or None."""
        self._eni_index()
        return self._eni_owners.get(eni.urn)

    def _eni_index(self) -> dict[str, list[Any]]:
        if self._enis is not None:
            return self._enis
        self._enis, self._eni_owners = {}, {}

        def attach(machine: Any, eni: Any) -> None:
            if machine is None or eni is None:
                return
            have = self._enis.setdefault(machine.urn, [])
            if eni not in have:
                have.append(eni)
            self._eni_owners.setdefault(eni.urn, machine)

        for res in self.of_type(*CAPACITY_TYPES):
            kind = KINDS[res.resource_type]
            for path in kind.enis:
                prop = path.split(".", 1)[0].rstrip("[]")
                for v in values(res.props, path):
                    attach(res, self.ref(res, prop, ENI_TYPES, value=v, keys=("id",)).resource)
        for a in self.of_type(AWS_ENI_ATTACHMENT):
            attach(self.ref(a, "instanceId", CAPACITY_TYPES, keys=("id",)).resource,
                   self.ref(a, "networkInterfaceId", ENI_TYPES, keys=("id",)).resource)
        for a in self.of_type(TC_ENI_ATTACHMENT):
            attach(self.ref(a, "instanceId", CAPACITY_TYPES, keys=("id",)).resource,
                   self.ref(a, "eniId", ENI_TYPES, keys=("id",)).resource)
        for eni in self.of_type(AWS_ENI):
            for v in values(eni.props, "attachments[].instance"):
                attach(self.ref(eni, "attachments", CAPACITY_TYPES, value=v, keys=("id",)).resource, eni)
        return self._enis

    def _subnet_zones(self, subnets: list[Ref]) -> list[str]:
        zones = []
        for ref in subnets:
            if ref.resource is not None:
                z = as_str(get(ref.resource.props, "availabilityZone"))
                if z and z not in zones:
                    zones.append(z)
        return zones

    def _zones(self, kind: Kind, props: Any, tmpl: list[Any], subnets: list[Ref]) -> list[str]:
        zones: list[str] = []
        for path in kind.zones:
            for v in values(props, path):
                s = as_str(v)
                if s and s not in zones:
                    zones.append(s)
        if zones and not kind.count:
            return zones  # one machine in the zone it names
        for z in self._subnet_zones(subnets):
            if z not in zones:
                zones.append(z)
        if not zones:
            for tr in tmpl:
                z = as_str(get(tr.props, "placement.availabilityZone"))
                if z and z not in zones:
                    zones.append(z)
        return zones

    # ---- placements ---------------------------------------------------------------------------------
    def placements(self) -> list["Placement"]:
        """Everything else that puts a workload or an interface in a subnet (placements.py): its subnets
        and tags. Network interfaces attached to a machine of the stack count as that machine's."""
        if self._placements is not None:
            return self._placements
        out: list[Placement] = []
        for t, paths in SUBNET_INPUTS.items():
            if t in PLUMBING:
                continue
            kind = KINDS.get(t)
            covered = set(kind.subnets) if kind is not None else set()
            if kind is not None and kind.each:
                covered = {f"{kind.each}.{p}" for p in kind.subnets}
            rest = [p for p in paths if p not in covered]
            if not rest:
                continue
            for res in self.of_type(t):
                if t in ENI_TYPES and self.eni_owner(res) is not None:
                    continue
                refs: list[Ref] = []
                for path in rest:
                    refs += self.refs(res, path.split(".", 1)[0].rstrip("[]"), values(res.props, path), SUBNET_TYPES)
                if refs:
                    out.append(Placement(res, refs, self._member_tags(res)))
        self._placements = out
        return out

    def _member_tags(self, res: Any) -> dict[str, str]:
        tags = self._tags(res.props, ("tags", "tagsAll"), [])
        if res.resource_type == "aws:efs/mountTarget:MountTarget":
            fs = self.ref(res, "fileSystemId", ("aws:efs/fileSystem:FileSystem",), keys=("id",)).resource
            if fs is not None:
                tags = self._tags(fs.props, ("tags", "tagsAll"), [])
        return tags

    # ---- zones of other resources -----------------------------------------------------------------
    def zones_of(self, res: Any) -> list[str]:
        """Zones a resource lives in (several for an autoscaling group or node pool)."""
        if res.resource_type in CAPACITY_TYPES:
            zones: list[str] = []
            for n in self._nodes_of(res):
                zones += [z for z in n.zones if z not in zones]
            return zones
        z = as_str(get(res.props, "availabilityZone")) or as_str(get(res.props, "zone"))
        if z:
            return [z]
        for key in ("subnetIds", "subnetId"):
            v = get(res.props, key)
            if v is None:
                continue
            first = v if isinstance(v, str) or v is UNKNOWN else next(iter(items(v)), None)
            sub = self.ref(res, key, SUBNET_TYPES, value=first).resource if first is not None else None
            z = as_str(get(sub.props, "availabilityZone")) if sub is not None else None
            return [z] if z else []
        return []


def _fleet_purchase(view: "StackView", res: Any, kind: Kind, p: Any, tmpl: list[Any],
                    runs: int) -> tuple[Optional[bool], int]:
    """The purchase option of an EC2 fleet: its on-demand target capacity."""
    spec = get(p, "targetCapacitySpecification")
    default = get(spec, "defaultTargetCapacityType")
    od, spot_n, total = (get(spec, "onDemandTargetCapacity"), get(spec, "spotTargetCapacity"),
                         get(spec, "totalTargetCapacity"))
    if UNKNOWN in (default, od, spot_n, total):
        return None, 0
    od_n = as_int(od)
    if od_n is None:
        od_n = max((as_int(total) or 0) - (as_int(spot_n) or 0), 0) if default == "on-demand" else 0
    return (True, 0) if od_n <= 0 else (False, od_n)


def _spot_fleet_purchase(view: "StackView", res: Any, kind: Kind, p: Any, tmpl: list[Any],
                         runs: int) -> tuple[Optional[bool], int]:
    """The purchase option of a spot fleet request: its on-demand target capacity."""
    od = get(p, "onDemandTargetCapacity")
    if od is UNKNOWN:
        return None, 0
    od_n = as_int(od) or 0
    return (True, 0) if od_n <= 0 else (False, od_n)


def _mixed_instances_purchase(p: Any, count: int) -> tuple[Optional[bool], int]:
    """The purchase option of an auto scaling group with a mixed instances policy."""
    dist = get(p, "mixedInstancesPolicy.instancesDistribution")
    base, pct = get(dist, "onDemandBaseCapacity"), get(dist, "onDemandPercentageAboveBaseCapacity")
    if base is UNKNOWN or pct is UNKNOWN:
        return None, 0
    base_n = as_int(base) or 0                           # AWS default: 0
    pct_n = 100 if pct is None else (as_int(pct) or 0)   # AWS default: 100
    if base_n == 0 and pct_n == 0:
        return True, 0
    if count == 0:
        return False, 0  # nothing runs
    on_demand = min(base_n, count) + (1 if pct_n > 0 and count > base_n else 0)
    return False, max(on_demand, 1)


_MARKETS = {
    "instance": StackView._instance_market, "asg": StackView._asg_market, "tencent": StackView._tencent_market,
    "node-group": StackView._node_group_market, "batch": StackView._batch_market, "emr": StackView._emr_market,
    "spot": StackView._spot, "on-demand": StackView._on_demand, "fleet": _fleet_purchase,
    "spot-fleet": _spot_fleet_purchase,
}
"""How each kind's purchase option is read: (all spot?, on-demand machines)."""

# Accelerator names EC2 instance requirements accept (EC2 API InstanceRequirements.AcceleratorNames):
# all of them but AMD's and Xilinx's are NVIDIA GPUs.
_NON_NVIDIA_ACCELERATORS = frozenset({"radeon-pro-v520", "vu9p", "inferentia", "trainium", "gaudi-hl-205"})


def _asks_nvidia(req: Any) -> bool:
    """Whether EC2 instance requirements ask for at least one NVIDIA accelerator: an NVIDIA manufacturer
    or accelerator name, or a GPU (by type or a minimum count) that no manufacturer list rules out."""
    if not known(req) or not isinstance(req, Mapping):
        return False
    makers = [str(m).lower() for m in items(get(req, "acceleratorManufacturers"))]
    names = [str(n).lower() for n in items(get(req, "acceleratorNames"))]
    kinds = [str(k).lower() for k in items(get(req, "acceleratorTypes"))]
    low = as_int(get(req, "acceleratorCount.min"))
    high = as_int(get(req, "acceleratorCount.max"))
    if high == 0 or (makers and "nvidia" not in makers) or (kinds and "gpu" not in kinds):
        return False
    if names and all(n in _NON_NVIDIA_ACCELERATORS for n in names):
        return False
    return "nvidia" in makers or bool(names) or "gpu" in kinds or (low or 0) >= 1


def _first_gpu(types: list[str]) -> Optional[str]:
    for t in types:
        if is_gpu_type(t):
            return t
    return types[0] if types else None


def _unique(resources: Iterable[Any]) -> list[Any]:
    seen, out = set(), []
    for r in resources:
        if r.urn not in seen:
            seen.add(r.urn)
            out.append(r)
    return out


def _lt_instance_tags(lt: Any) -> dict[str, str]:
    """The tags a launch template puts on the instances it launches (tag_specifications, resource_type instance)."""
    for spec in items(get(lt.props, "tagSpecifications")):
        if get(spec, "resourceType") == "instance":
            return tags_of(spec)
    return {}


def is_default_vpc(view: StackView, subnet: Any) -> bool:
    """Whether a subnet resource of the stack is (or lives in) a default VPC."""
    if subnet.resource_type == AWS_DEFAULT_SUBNET or as_bool(get(subnet.props, "isDefault")):
        return True
    vpc = view.ref(subnet, "vpcId", VPC_TYPES).resource
    return vpc is not None and (vpc.resource_type == AWS_DEFAULT_VPC or bool(as_bool(get(vpc.props, "isDefault"))))


def config_list(args: Any, key: str) -> list[Any]:
    value = get(args.get_config(), key)
    return [get(value, (i,)) for i in range(len(value))] if isinstance(value, (list, tuple)) else items(value)


def config_value(args: Any, key: str, default: Any) -> Any:
    value = get(args.get_config(), key)
    return default if value is None else value


STRICT_PROPERTY = {
    "type": "boolean", "default": False,
    "description": "Fail when a property this policy needs is unknown (a computed value during preview, or a "
                   "launch template outside the stack) instead of judging it at the update.",
}


def strict(args: Any) -> bool:
    """Whether the policy runs in strict mode (its `strict` config; `gpu-cluster check --strict`)."""
    return config_value(args, "strict", False) is True


def report_unknowns(args: Any, nodes: Iterable[Node], rule: str, report_violation: Any) -> None:
    """In strict mode, one violation per GPU node whose record leaves a field `rule` needs unknown."""
    if not strict(args):
        return
    wanted = set(STRICT_NEEDS[rule])
    for n in nodes:
        missing = sorted(n.unknown & wanted)
        if missing:
            report_violation(
                f"GPU node '{n.label}': {' and '.join(missing)} unknown until the update, so {rule} cannot be "
                f"judged, and strict mode accepts nothing it cannot see; give the value in the program or run "
                f"without strict to judge it at the update.", n.urn)
