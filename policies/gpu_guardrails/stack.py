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
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .props import (CLUSTER_TAG, CRITICALITY_TAG, TIER_TAG, UNKNOWN, as_bool, as_int, as_str, get, items, known,
                    tags_of)
from .shapes import is_gpu_type

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SPOT_REQUEST = "aws:ec2/spotInstanceRequest:SpotInstanceRequest"
AWS_ASG = "aws:autoscaling/group:Group"
AWS_NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
AWS_FLEET = "aws:ec2/fleet:Fleet"
AWS_SPOT_FLEET = "aws:ec2/spotFleetRequest:SpotFleetRequest"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_LAUNCH_CONFIG = "aws:ec2/launchConfiguration:LaunchConfiguration"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_DEFAULT_SUBNET = "aws:ec2/defaultSubnet:DefaultSubnet"
AWS_VPC = "aws:ec2/vpc:Vpc"
AWS_DEFAULT_VPC = "aws:ec2/defaultVpc:DefaultVpc"
AWS_PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_SCALING_GROUP = "tencentcloud:As/scalingGroup:ScalingGroup"
TC_SCALING_CONFIG = "tencentcloud:As/scalingConfig:ScalingConfig"
TC_NODE_POOL = "tencentcloud:Kubernetes/nodePool:NodePool"
TC_K8S_CLUSTER = "tencentcloud:Kubernetes/cluster:Cluster"
TC_SUBNET = "tencentcloud:Subnet/instance:Instance"
TC_VPC = "tencentcloud:Vpc/instance:Instance"
TC_HPC_CLUSTER = "tencentcloud:Cvm/hpcCluster:HpcCluster"

SUBNET_TYPES = (AWS_SUBNET, AWS_DEFAULT_SUBNET, TC_SUBNET)
VPC_TYPES = (AWS_VPC, AWS_DEFAULT_VPC, TC_VPC)
# Resources that run machines: GPU nodes and anything else that could share their subnet.
CAPACITY_TYPES = (AWS_INSTANCE, AWS_SPOT_REQUEST, AWS_ASG, AWS_NODE_GROUP, AWS_FLEET, AWS_SPOT_FLEET,
                  TC_INSTANCE, TC_SCALING_GROUP, TC_NODE_POOL, TC_K8S_CLUSTER)

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


@dataclass
class Node:
    """GPU-capable capacity: one machine, or a group of machines launched from the same definition."""

    resource: Any
    instance_type: Optional[str]  # the first GPU type (else the first type) it may launch
    instance_types: list[str]
    count: int
    spot: Optional[bool]          # True: every machine is spot; False: at least one on-demand; None: unknown
    on_demand: int                # machines guaranteed on-demand (0 when unknown)
    subnets: list[Ref]
    templates: list[Ref]          # launch templates / configurations / scaling configs, in order
    tags: dict[str, str]
    cloud: str
    zones: list[str] = field(default_factory=list)
    spec: Any = None              # the sub-object that describes the machines (worker config, launch spec)
    label: str = ""               # how messages name it (a worker config of a cluster has an index)
    hpc: Optional[Ref] = None     # Tencent: the HPC cluster reference, when the resource can carry one

    @property
    def urn(self) -> str:
        return self.resource.urn

    @property
    def cluster(self) -> str:
        return self.tags.get(CLUSTER_TAG, "")

    @property
    def tier(self) -> str:
        return self.tags.get(TIER_TAG, "")

    @property
    def criticality(self) -> str:
        return self.tags.get(CRITICALITY_TAG, "")

    @property
    def is_gpu(self) -> bool:
        return any(is_gpu_type(t) for t in self.instance_types)


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
        elif t == TC_SCALING_GROUP:
            if get(p, "configurationId") is not None:
                add(self.ref(res, "configurationId", (TC_SCALING_CONFIG,), keys=("id",)))
        return out

    # ---- capacity -----------------------------------------------------------------------------
    def capacity(self) -> list[Node]:
        """Every capacity resource of the stack (GPU or not), as nodes."""
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
        t, p = res.resource_type, res.props
        cloud = t.split(":", 1)[0]
        templates = self.templates_of(res)
        tmpl = [r.resource for r in templates if r.resource is not None]
        tags = tags_of(p)
        if not tags:
            for tr in tmpl:
                tags = tags_of(tr.props) or _lt_instance_tags(tr)
                if tags:
                    break
        if t == TC_K8S_CLUSTER:
            workers = [(i, w) for i, w in enumerate(items(get(p, "workerConfigs"))) if w is not None and w is not UNKNOWN]
            nodes = [self._worker(res, i, w, tags) for i, w in workers]
            # The HPC clusters of all worker configs together: unknown ids share one dependency list.
            with_hpc = [n for n in nodes if n.hpc is not None and n.hpc.present]
            hpcs = self.refs(res, "workerConfigs", [get(n.spec, "hpcClusterId") for n in with_hpc], (TC_HPC_CLUSTER,))
            for n, ref in zip(with_hpc, hpcs):
                n.hpc = ref
            return nodes
        types = self._types(res, tmpl)
        count = self._count(res)
        spot, on_demand = self._purchase(res, tmpl, count)
        subnets = self._subnets(res, tmpl)
        node = Node(resource=res, instance_type=_first_gpu(types), instance_types=types, count=count, spot=spot,
                    on_demand=on_demand, subnets=subnets, templates=templates, tags=tags, cloud=cloud,
                    label=res.urn.rsplit("::", 1)[-1])
        node.zones = self._zones(res, tmpl, subnets)
        if t == TC_INSTANCE:
            node.hpc = self.ref(res, "hpcClusterId", (TC_HPC_CLUSTER,))
        return [node]

    def _worker(self, res: Any, i: int, w: Any, tags: dict[str, str]) -> Node:
        itype = as_str(get(w, "instanceType"))
        count = as_int(get(w, "count"))
        count = 1 if count is None else max(count, 0)
        charge = get(w, "instanceChargeType")
        spot = None if charge is UNKNOWN else charge == "SPOTPAID"
        subnet = get(w, "subnetId")
        subnets = self.refs(res, "workerConfigs", [subnet], SUBNET_TYPES) if subnet is not None else []
        node = Node(resource=res, instance_type=itype, instance_types=[itype] if itype else [], count=count,
                    spot=spot, on_demand=0 if spot is not False else count, subnets=subnets, templates=[],
                    tags=tags, cloud="tencentcloud", spec=w,
                    label=f"{res.urn.rsplit('::', 1)[-1]} (worker config {i})")
        zone = as_str(get(w, "availabilityZone"))
        node.zones = [zone] if zone else self._subnet_zones(subnets)
        hpc = get(w, "hpcClusterId")
        node.hpc = Ref() if hpc is None else self.ref(res, "workerConfigs", (TC_HPC_CLUSTER,), value=hpc)
        return node

    def _types(self, res: Any, tmpl: list[Any]) -> list[str]:
        t, p = res.resource_type, res.props
        out: list[str] = []

        def add(v: Any) -> None:
            s = as_str(v)
            if s and s not in out:
                out.append(s)

        add(get(p, "instanceType"))
        if t == AWS_ASG:
            for o in items(get(p, "mixedInstancesPolicy.launchTemplate.overrides")):
                add(get(o, "instanceType"))
        elif t == AWS_NODE_GROUP:
            for v in items(get(p, "instanceTypes")):
                add(v)
        elif t in (AWS_FLEET, AWS_SPOT_FLEET):
            for c in items(get(p, "launchTemplateConfigs")):
                for o in items(get(c, "overrides")):
                    add(get(o, "instanceType"))
            for spec in items(get(p, "launchSpecifications")):
                add(get(spec, "instanceType"))
        elif t == TC_NODE_POOL:
            add(get(p, "autoScalingConfig.instanceType"))
            for v in items(get(p, "autoScalingConfig.backupInstanceTypes")):
                add(v)
        if not out or t in (AWS_FLEET, AWS_SPOT_FLEET, AWS_ASG):
            for tr in tmpl:
                add(get(tr.props, "instanceType"))
                for v in items(get(tr.props, "instanceTypes")):
                    add(v)
        return out

    def _count(self, res: Any) -> int:
        t, p = res.resource_type, res.props
        if t in (AWS_INSTANCE, AWS_SPOT_REQUEST, TC_INSTANCE):
            return 1
        if t == AWS_NODE_GROUP:
            keys = ("scalingConfig.desiredSize", "scalingConfig.minSize", "scalingConfig.maxSize")
        elif t == AWS_FLEET:
            keys = ("targetCapacitySpecification.totalTargetCapacity",)
        elif t == AWS_SPOT_FLEET:
            keys = ("targetCapacity",)
        else:
            keys = ("desiredCapacity", "minSize", "maxSize")
        for key in keys:
            n = as_int(get(p, key))
            if n is not None and n > 0:
                return n
        return 0

    def _purchase(self, res: Any, tmpl: list[Any], count: int) -> tuple[Optional[bool], int]:
        """(all spot?, machines guaranteed on-demand)."""
        t, p = res.resource_type, res.props
        if t == AWS_SPOT_REQUEST:
            return True, 0
        if t in (TC_INSTANCE, TC_SCALING_GROUP, TC_NODE_POOL):
            if t == TC_INSTANCE:
                charge = get(p, "instanceChargeType")
            elif t == TC_NODE_POOL:
                charge = get(p, "autoScalingConfig.instanceChargeType")
            else:
                charge = get(tmpl[0].props, "instanceChargeType") if tmpl else (
                    UNKNOWN if get(p, "configurationId") is not None else None)
            if charge is UNKNOWN:
                return None, 0
            return (True, 0) if charge == "SPOTPAID" else (False, max(count, 1))
        if t == AWS_NODE_GROUP:
            kind = get(p, "capacityType")  # ON_DEMAND (the default), SPOT or CAPACITY_BLOCK
            if kind is UNKNOWN:
                return None, 0
            return (True, 0) if kind == "SPOT" else (False, max(count, 1))
        if t in (AWS_FLEET, AWS_SPOT_FLEET):
            return self._fleet_purchase(t, p)
        if t == AWS_ASG and get(p, "mixedInstancesPolicy") is not None:
            return self._mixed_instances_purchase(p, count)
        market = get(p, "instanceMarketOptions.marketType")
        for tr in tmpl:
            if market is not None:
                break
            if tr.resource_type == AWS_LAUNCH_CONFIG:
                price = get(tr.props, "spotPrice")
                market = UNKNOWN if price is UNKNOWN else ("spot" if as_str(price) else None)
            else:
                market = get(tr.props, "instanceMarketOptions.marketType")
        if market is None and t == AWS_ASG and not tmpl and self.templates_of(res):
            return None, 0  # the template is unknown until the update
        if market is UNKNOWN:
            return None, 0
        return (True, 0) if market == "spot" else (False, max(count, 1))

    @staticmethod
    def _fleet_purchase(t: str, p: Any) -> tuple[Optional[bool], int]:
        """`_purchase` of an EC2 fleet or spot fleet request: its on-demand target capacity."""
        if t == AWS_FLEET:
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
        od = get(p, "onDemandTargetCapacity")
        if od is UNKNOWN:
            return None, 0
        od_n = as_int(od) or 0
        return (True, 0) if od_n <= 0 else (False, od_n)

    @staticmethod
    def _mixed_instances_purchase(p: Any, count: int) -> tuple[Optional[bool], int]:
        """`_purchase` of an auto scaling group with a mixed instances policy."""
        dist = get(p, "mixedInstancesPolicy.instancesDistribution")
        base, pct = get(dist, "onDemandBaseCapacity"), get(dist, "onDemandPercentageAboveBaseCapacity")
        if base is UNKNOWN or pct is UNKNOWN:
            return None, 0
        base_n = as_int(base) or 0                           # AWS default: 0
        pct_n = 100 if pct is None else (as_int(pct) or 0)   # AWS default: 100
        if base_n == 0 and pct_n == 0:
            return True, 0
        on_demand = min(base_n, count) + (1 if pct_n > 0 and count > base_n else 0)
        return False, max(on_demand, 1)

    def _subnets(self, res: Any, tmpl: list[Any]) -> list[Ref]:
        t, p = res.resource_type, res.props
        refs: list[Ref] = []
        if t in (AWS_INSTANCE, AWS_SPOT_REQUEST, TC_INSTANCE):
            if get(p, "subnetId") is not None:
                refs = [self.ref(res, "subnetId", SUBNET_TYPES)]
        elif t in (AWS_ASG, AWS_NODE_GROUP, TC_SCALING_GROUP, TC_NODE_POOL):
            key = "vpcZoneIdentifiers" if t == AWS_ASG else "subnetIds"
            values = get(p, key)
            if values is UNKNOWN:
                refs = [self.ref(res, key, SUBNET_TYPES)]
            else:
                refs = self.refs(res, key, items(values), SUBNET_TYPES)
        elif t in (AWS_FLEET, AWS_SPOT_FLEET):
            refs = self.refs(res, "launchTemplateConfigs", [get(o, "subnetId") for c in items(get(p, "launchTemplateConfigs"))
                                                           for o in items(get(c, "overrides"))], SUBNET_TYPES)
            refs += self.refs(res, "launchSpecifications", [get(spec, "subnetId") for spec in
                                                            items(get(p, "launchSpecifications"))], SUBNET_TYPES)
        if refs and not all(r.unknown for r in refs):
            return refs
        # Nothing known on the resource itself: what its launch template says.
        for tr in tmpl:
            for nic in items(get(tr.props, "networkInterfaces")):
                v = get(nic, "subnetId")
                if v is not None:
                    ref = self.ref(tr, "networkInterfaces", SUBNET_TYPES, value=v)
                    if not (refs and ref.unknown):
                        return [ref]
        return refs

    def _subnet_zones(self, subnets: list[Ref]) -> list[str]:
        zones = []
        for ref in subnets:
            if ref.resource is not None:
                z = as_str(get(ref.resource.props, "availabilityZone"))
                if z and z not in zones:
                    zones.append(z)
        return zones

    def _zones(self, res: Any, tmpl: list[Any], subnets: list[Ref]) -> list[str]:
        t, p = res.resource_type, res.props
        zones: list[str] = []

        def add(v: Any) -> None:
            s = as_str(v)
            if s and s not in zones:
                zones.append(s)

        add(get(p, "availabilityZone"))
        if t == AWS_ASG:
            for z in items(get(p, "availabilityZones")):
                add(z)
        elif t in (TC_SCALING_GROUP, TC_NODE_POOL):
            for z in items(get(p, "zones")):
                add(z)
        elif t in (AWS_FLEET, AWS_SPOT_FLEET):
            for c in items(get(p, "launchTemplateConfigs")):
                for o in items(get(c, "overrides")):
                    add(get(o, "availabilityZone"))
            for spec in items(get(p, "launchSpecifications")):
                add(get(spec, "availabilityZone"))
        if zones and t in (AWS_INSTANCE, AWS_SPOT_REQUEST, TC_INSTANCE):
            return zones
        for z in self._subnet_zones(subnets):
            add(z)
        if not zones:
            for tr in tmpl:
                add(get(tr.props, "placement.availabilityZone"))
        return zones

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
