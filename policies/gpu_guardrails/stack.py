"""A read-only view of a stack for the stack validations: GPU nodes and what they reference.

References between resources are resolved by value when the value is known (an id, name or ARN of a
resource in the stack) and, during a preview where a new resource's id is still unknown, through the
engine's dependency edges (`property_dependencies`, then `dependencies`). A known value that matches
no resource of the stack points outside it (an existing subnet, a shared placement group...).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from .props import CLUSTER_TAG, CRITICALITY_TAG, TIER_TAG, UNKNOWN, as_bool, as_int, as_str, get, items, known, tags_of
from .shapes import is_gpu_type

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_SPOT_REQUEST = "aws:ec2/spotInstanceRequest:SpotInstanceRequest"
AWS_ASG = "aws:autoscaling/group:Group"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_DEFAULT_SUBNET = "aws:ec2/defaultSubnet:DefaultSubnet"
AWS_VPC = "aws:ec2/vpc:Vpc"
AWS_DEFAULT_VPC = "aws:ec2/defaultVpc:DefaultVpc"
AWS_PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"
TC_INSTANCE = "tencentcloud:Instance/instance:Instance"
TC_SUBNET = "tencentcloud:Subnet/instance:Instance"
TC_VPC = "tencentcloud:Vpc/instance:Instance"
TC_HPC_CLUSTER = "tencentcloud:Cvm/hpcCluster:HpcCluster"

SUBNET_TYPES = (AWS_SUBNET, AWS_DEFAULT_SUBNET, TC_SUBNET)
VPC_TYPES = (AWS_VPC, AWS_DEFAULT_VPC, TC_VPC)
# Resources that run machines in a subnet: GPU nodes and anything else sharing their subnet.
COMPUTE_TYPES = (AWS_INSTANCE, AWS_SPOT_REQUEST, AWS_ASG, TC_INSTANCE)

_REF_KEYS = ("id", "name", "arn", "bucket")


@dataclass(frozen=True)
class Ref:
    """What a reference property points at: a resource of the stack, an outside id, or nothing known."""

    resource: Any = None        # the PolicyResource in this stack
    outside: Optional[str] = None  # a known value that names no resource of this stack
    present: bool = False       # the property is set (known or unknown)


@dataclass
class Node:
    """A GPU node or group of nodes: an instance, an autoscaling group, a Tencent instance."""

    resource: Any
    instance_type: Optional[str]
    count: int
    spot: Optional[bool]          # True: every machine is spot; False: at least one on-demand; None: unknown
    on_demand: int                # machines guaranteed on-demand (0 when unknown)
    subnets: list[Ref]
    launch_template: Ref
    tags: dict[str, str]
    cloud: str

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


class StackView:
    def __init__(self, resources: Sequence[Any]):
        self.resources = list(resources)
        self._by_type: dict[str, list[Any]] = {}
        for r in self.resources:
            self._by_type.setdefault(r.resource_type, []).append(r)

    def of_type(self, *types: str) -> list[Any]:
        return [r for t in types for r in self._by_type.get(t, [])]

    # ---- references ---------------------------------------------------------------------------
    def find(self, value: Any, types: Iterable[str], keys: Sequence[str] = _REF_KEYS) -> Any:
        if not isinstance(value, str):
            return None
        for r in self.of_type(*types):
            for key in keys:
                if as_str(get(r.props, key)) == value:
                    return r
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
        # Unknown during preview: follow the engine's dependency edges.
        top = path.split(".", 1)[0]
        deps = list(getattr(res, "property_dependencies", {}).get(top, []) or [])
        candidates = [d for d in deps if d.resource_type in types]
        if not candidates:
            candidates = [d for d in getattr(res, "dependencies", []) or [] if d.resource_type in types]
        return Ref(resource=candidates[0] if len(candidates) == 1 else None, present=True)

    # ---- GPU nodes ----------------------------------------------------------------------------
    def launch_template_of(self, res: Any) -> Ref:
        if res.resource_type == AWS_ASG:
            for path in ("launchTemplate.id", "launchTemplate.name",
                         "mixedInstancesPolicy.launchTemplate.launchTemplateSpecification.launchTemplateId",
                         "mixedInstancesPolicy.launchTemplate.launchTemplateSpecification.launchTemplateName"):
                if get(res.props, path) is not None:
                    top = "launchTemplate" if path.startswith("launchTemplate") else "mixedInstancesPolicy"
                    r = self.ref(res, top, (AWS_LAUNCH_TEMPLATE,), value=get(res.props, path))
                    return r
            return Ref()
        for path in ("launchTemplate.id", "launchTemplate.name"):
            if get(res.props, path) is not None:
                return self.ref(res, "launchTemplate", (AWS_LAUNCH_TEMPLATE,), value=get(res.props, path))
        return Ref()

    def instance_type_of(self, res: Any, lt: Ref) -> Optional[str]:
        t = as_str(get(res.props, "instanceType"))
        if t:
            return t
        if res.resource_type == AWS_ASG:
            for o in items(get(res.props, "mixedInstancesPolicy.launchTemplate.overrides")):
                t = as_str(get(o, "instanceType"))
                if t:
                    return t
        if lt.resource is not None:
            return as_str(get(lt.resource.props, "instanceType"))
        return None

    def subnets_of(self, res: Any, lt: Ref) -> list[Ref]:
        t = res.resource_type
        if t == TC_INSTANCE or t in (AWS_INSTANCE, AWS_SPOT_REQUEST):
            if get(res.props, "subnetId") is not None:
                return [self.ref(res, "subnetId", SUBNET_TYPES)]
        if t == AWS_ASG:
            zones = get(res.props, "vpcZoneIdentifiers")
            if zones is UNKNOWN:
                return [self.ref(res, "vpcZoneIdentifiers", SUBNET_TYPES)]
            refs = [self.ref(res, "vpcZoneIdentifiers", SUBNET_TYPES, value=v) for v in items(zones)]
            if refs:
                return refs
        if lt.resource is not None:
            nics = items(get(lt.resource.props, "networkInterfaces"))
            for nic in nics:
                v = get(nic, "subnetId")
                if v is not None:
                    return [self.ref(lt.resource, "networkInterfaces", SUBNET_TYPES, value=v)]
        return []

    def spot_of(self, res: Any, lt: Ref, count: int) -> tuple[Optional[bool], int]:
        """(all spot?, guaranteed on-demand machines)."""
        t = res.resource_type
        if t == AWS_SPOT_REQUEST:
            return True, 0
        if t == TC_INSTANCE:
            charge = get(res.props, "instanceChargeType")
            if charge is UNKNOWN:
                return None, 0
            return (True, 0) if charge == "SPOTPAID" else (False, count)
        lt_market = get(lt.resource.props, "instanceMarketOptions.marketType") if lt.resource is not None else None
        if t == AWS_ASG:
            dist = get(res.props, "mixedInstancesPolicy.instancesDistribution")
            if get(res.props, "mixedInstancesPolicy") is not None:
                base = get(dist, "onDemandBaseCapacity")
                pct = get(dist, "onDemandPercentageAboveBaseCapacity")
                if base is UNKNOWN or pct is UNKNOWN:
                    return None, 0
                base_n = as_int(base) or 0            # AWS default: 0
                pct_n = 100 if pct is None else (as_int(pct) or 0)  # AWS default: 100
                if base_n == 0 and pct_n == 0:
                    return True, 0
                on_demand = min(base_n, count) + (1 if pct_n > 0 and count > base_n else 0)
                return False, max(on_demand, 1)
        market = get(res.props, "instanceMarketOptions.marketType")
        if market is None:
            market = lt_market
        if market is UNKNOWN:
            return None, 0
        return (True, 0) if market == "spot" else (False, count)

    def count_of(self, res: Any) -> int:
        if res.resource_type != AWS_ASG:
            return 1
        for key in ("desiredCapacity", "minSize", "maxSize"):
            n = as_int(get(res.props, key))
            if n is not None and n > 0:
                return n
        return 0

    def gpu_nodes(self) -> list[Node]:
        nodes = []
        for res in self.of_type(*COMPUTE_TYPES):
            lt = self.launch_template_of(res)
            itype = self.instance_type_of(res, lt)
            if not is_gpu_type(itype):
                continue
            count = self.count_of(res)
            spot, on_demand = self.spot_of(res, lt, count)
            tags = tags_of(res.props) or (tags_of(lt.resource.props) if lt.resource is not None else {})
            nodes.append(Node(
                resource=res, instance_type=itype, count=count, spot=spot, on_demand=on_demand,
                subnets=self.subnets_of(res, lt), launch_template=lt, tags=tags,
                cloud=res.resource_type.split(":", 1)[0],
            ))
        return nodes

    def clusters(self) -> "OrderedDict[str, list[Node]]":
        """GPU nodes grouped by their `gpu-cluster:name` tag ("" for untagged nodes), in stack order."""
        groups: "OrderedDict[str, list[Node]]" = OrderedDict()
        for n in self.gpu_nodes():
            groups.setdefault(n.cluster, []).append(n)
        return groups

    # ---- zones --------------------------------------------------------------------------------
    def zone_of(self, res: Any) -> Optional[str]:
        """The one zone a resource lives in, when known."""
        z = as_str(get(res.props, "availabilityZone")) or as_str(get(res.props, "zone"))
        if z:
            return z
        t = res.resource_type
        if t in (AWS_INSTANCE, AWS_SPOT_REQUEST, TC_INSTANCE):
            sub = self.ref(res, "subnetId", SUBNET_TYPES).resource
            if sub is None and t == AWS_INSTANCE:
                lt = self.launch_template_of(res)
                if lt.resource is not None:
                    z = as_str(get(lt.resource.props, "placement.availabilityZone"))
                    if z:
                        return z
                    subs = self.subnets_of(res, lt)
                    sub = subs[0].resource if subs else None
            return as_str(get(sub.props, "availabilityZone")) if sub is not None else None
        if t == "aws:fsx/lustreFileSystem:LustreFileSystem":
            ids = get(res.props, "subnetIds")
            value = ids if isinstance(ids, str) else (items(ids)[0] if items(ids) else ids)
            sub = self.ref(res, "subnetIds", SUBNET_TYPES, value=value).resource
            return as_str(get(sub.props, "availabilityZone")) if sub is not None else None
        return None

    def zones_of(self, res: Any) -> list[str]:
        """Zones of a resource; an autoscaling group may span several subnets."""
        if res.resource_type == AWS_ASG:
            zones = [as_str(z) for z in items(get(res.props, "availabilityZones"))]
            lt = self.launch_template_of(res)
            for ref in self.subnets_of(res, lt):
                if ref.resource is not None:
                    zones.append(as_str(get(ref.resource.props, "availabilityZone")))
            return sorted({z for z in zones if z})
        z = self.zone_of(res)
        return [z] if z else []


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
