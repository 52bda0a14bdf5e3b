"""Network guardrails: a dedicated subnet per cluster, one zone, no admin port open to the internet, no public IPs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, StackValidationPolicy

from . import cidrs
from .kinds import CLUSTER_MEMBERS, HEAD_ROLE
from .props import (CLUSTER_TAG, ROLE_TAG, UNKNOWN, as_bool, as_int, as_number, as_str, get, items, known, short,
                    tags_of, values)
from .shapes import is_gpu_type
from .stack import (AWS_ASG, AWS_DEFAULT_SUBNET, AWS_LAUNCH_CONFIG, AWS_LAUNCH_TEMPLATE, AWS_NODE_GROUP, AWS_NOTEBOOK,
                    CAPACITY_TYPES, ENI_TYPES, TC_SCALING_CONFIG, Node, StackView, config_list, config_value,
                    is_default_vpc, report_unknowns, view_of)


# ---- dedicated-subnet ---------------------------------------------------------------------------

DEFAULT_VPC_CLOUDS = frozenset({"aws"})
"""Clouds that launch a machine given no subnet into a default VPC (EC2 user guide, "Default VPCs");
Tencent's instance needs its subnet."""
SUBNET_PUBLIC_IP_CLOUDS = frozenset({"aws"})
"""Clouds whose subnet can hand a public IP to every machine that does not refuse one itself (an AWS
subnet's map_public_ip_on_launch)."""


def _dedicated_subnet(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    report_unknowns(args, view.gpu_nodes(), "dedicated-subnet", report_violation)
    allowed = {v for v in config_list(args, "allowedSharedSubnetIds") if isinstance(v, str)}
    cluster_subnets: dict[str, str] = {}  # subnet URN → the cluster whose GPU nodes it hosts
    for node in view.gpu_nodes():
        name, cluster = node.label, node.cluster or "(untagged)"
        if not node.subnets:
            if node.cloud in DEFAULT_VPC_CLOUDS and node.kind is not None and node.kind.default_vpc \
                    and node.spec is None and not any(t.unknown for t in node.templates):
                report_violation(
                    f"GPU node '{name}' sets no subnet, so AWS launches it in the default VPC; give it the "
                    f"subnet this stack creates for cluster '{cluster}'.", node.urn)
            continue
        for ref in node.subnets:
            if ref.outside is not None:
                if ref.outside not in allowed:
                    report_violation(
                        f"GPU node '{name}' runs in subnet {ref.outside}, which this stack did not create and "
                        f"other workloads may share; let the stack create a subnet for cluster '{cluster}' "
                        f"(remove network.existing_subnet_id) or list the id in allowedSharedSubnetIds.",
                        node.urn)
                continue
            subnet = ref.resource
            if subnet is None:
                continue  # unknown during preview and nothing says which subnet: nothing to judge
            if is_default_vpc(view, subnet):
                report_violation(
                    f"GPU node '{name}' runs in subnet '{short(subnet.urn)}' of a default VPC; create a VPC "
                    f"and a subnet for cluster '{cluster}' instead.", node.urn)
                continue
            owner = tags_of(subnet.props).get(CLUSTER_TAG)
            if not node.cluster:
                report_violation(
                    f"GPU node '{name}' carries no {CLUSTER_TAG} tag, so nothing says which cluster subnet "
                    f"'{short(subnet.urn)}' is dedicated to; tag the node and its subnet with the cluster's name.",
                    node.urn)
                continue
            if owner != node.cluster:
                report_violation(
                    f"GPU node '{name}' runs in subnet '{short(subnet.urn)}', which is not tagged "
                    f"{CLUSTER_TAG}={node.cluster}; give cluster '{node.cluster}' its own subnet tagged so.",
                    node.urn)
                continue
            cluster_subnets.setdefault(subnet.urn, node.cluster)
    _others_in_cluster_subnets(view, cluster_subnets, report_violation)


def _others_in_cluster_subnets(view: StackView, cluster_subnets: dict[str, str], report_violation: Any) -> None:
    """What else sits in a cluster's subnet. Members: the cluster's GPU capacity, its one head node
    (capacity tagged gpu-cluster:role=head), and its file systems and VPC endpoints (`CLUSTER_MEMBERS`)
    tagged with the cluster. Anything else — other machines, a copy of the cluster tag on a non-GPU machine
    that is not its head, Lambda functions, database subnet groups, load balancers, interfaces attached to
    other machines — is reported."""
    heads: dict[str, str] = {}
    gpu_urns: dict[str, set[str]] = {}
    for n in view.gpu_nodes():
        gpu_urns.setdefault(n.cluster, set()).add(n.urn)
    for n in view.capacity():
        for ref in n.subnets:
            if ref.resource is None or ref.resource.urn not in cluster_subnets:
                continue
            owner = cluster_subnets[ref.resource.urn]
            why = _not_member(n, owner, heads)
            if why:
                report_violation(
                    f"'{n.label}' {why} but runs in the subnet '{short(ref.resource.urn)}' of cluster "
                    f"'{owner or '(untagged)'}'; move it to a subnet of its own so the GPU cluster's subnet "
                    f"stays dedicated.", n.urn)
                break
    for p in view.placements():
        for ref in p.subnets:
            if ref.resource is None or ref.resource.urn not in cluster_subnets:
                continue
            owner = cluster_subnets[ref.resource.urn]
            if p.urn in gpu_urns.get(owner, set()):
                continue  # the cluster's own capacity resource (a TKE cluster's pod interfaces)
            if p.resource.resource_type in CLUSTER_MEMBERS and owner and p.cluster == owner:
                continue
            what = p.resource.resource_type.rsplit(":", 1)[-1]
            report_violation(
                f"'{p.label}' ({what}) places a workload or network interface in the subnet "
                f"'{short(ref.resource.urn)}' of GPU cluster '{owner or '(untagged)'}'; only the cluster's "
                f"nodes, its head node, file systems and VPC endpoints may use it: give it a subnet of its own.",
                p.urn)
            break


def _not_member(n: Node, owner: str, heads: dict[str, str]) -> str:
    """Why capacity record `n` is not a member of cluster `owner` ("" when it is)."""
    if n.is_gpu:
        return "" if n.cluster == owner else "is not part of the cluster"
    if not owner or n.cluster != owner:
        return "is not part of the cluster"
    if n.role != HEAD_ROLE:
        return (f"is tagged {CLUSTER_TAG}={owner} without being a GPU node or its head node "
                f"({ROLE_TAG}={HEAD_ROLE})")
    first = heads.setdefault(owner, n.urn)
    if first != n.urn:
        return f"is a second head node of the cluster (the first is '{short(first)}')"
    return ""


dedicated_subnet = StackValidationPolicy(
    name="dedicated-subnet",
    description="GPU nodes run in a subnet created by this stack for their cluster, shared with nothing "
                "else and outside any default VPC.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_dedicated_subnet,
    config_schema=PolicyConfigSchema(properties={
        "allowedSharedSubnetIds": {
            "type": "array", "items": {"type": "string"}, "default": [],
            "description": "Subnet / vSwitch ids GPU nodes may use although this stack did not create them.",
        },
    }),
    remediation_steps="Let the stack create the cluster's VPC and subnet (leave network.existing_subnet_id "
                      "unset), or allow a reviewed shared subnet id in allowedSharedSubnetIds.",
)


# ---- single-zone ----------------------------------------------------------------------------------

# Tagged resources that belong to one zone and must sit with the nodes.
_ZONED_TYPES = (
    "aws:ec2/subnet:Subnet", "aws:ebs/volume:Volume", "aws:fsx/lustreFileSystem:LustreFileSystem",
    "tencentcloud:Subnet/instance:Instance", "tencentcloud:Cbs/storage:Storage",
    "tencentcloud:Cfs/fileSystem:FileSystem",
)


def _single_zone(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    report_unknowns(args, view.gpu_nodes(), "single-zone", report_violation)
    include_storage = config_value(args, "includeStorage", True) is not False
    for cluster, nodes in view.clusters().items():
        members: dict[str, tuple[Any, list[str]]] = {}
        for node in nodes:
            zones = members.get(node.urn, (None, []))[1]
            members[node.urn] = (node.resource, zones + [z for z in node.zones if z not in zones])
            hpc = node.hpc.resource if node.hpc is not None else None
            if hpc is not None:
                members.setdefault(hpc.urn, (hpc, view.zones_of(hpc)))
        if cluster and include_storage:
            for res in view.of_type(*_ZONED_TYPES):
                if tags_of(res.props).get(CLUSTER_TAG) == cluster:
                    members.setdefault(res.urn, (res, view.zones_of(res)))
        home = _home_zone([z for node in nodes for z in node.zones],
                          [z for _, zones in members.values() for z in zones])
        if home is None:
            continue
        label = cluster or "(untagged)"
        for urn, (res, zones) in members.items():
            stray = [z for z in zones if z != home]
            if stray:
                report_violation(
                    f"'{short(urn)}' is in {', '.join(stray)} but cluster '{label}' runs in {home}; put every "
                    f"node, disk, file system and subnet of the cluster in {home} (EFA, cluster placement and "
                    f"Lustre do not work across zones).", urn)


def _home_zone(node_zones: list[str], all_zones: list[str]) -> Optional[str]:
    """The zone most of the cluster (nodes, disks, file systems, subnets) is in; on a tie the first GPU
    node's zone, so one stray member is what gets reported."""
    if not all_zones:
        return None
    order = {z: i for i, z in reversed(list(enumerate(node_zones + all_zones)))}
    return max(sorted(set(all_zones)), key=lambda z: (all_zones.count(z), -order[z]))


single_zone = StackValidationPolicy(
    name="single-zone",
    description="The nodes, file system, disks and subnet of one GPU cluster sit in a single zone.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_single_zone,
    config_schema=PolicyConfigSchema(properties={
        "includeStorage": {
            "type": "boolean", "default": True,
            "description": "Also check the cluster's subnets, disks and file systems (not only its nodes).",
        },
    }),
    remediation_steps="Set one zone for the whole cluster (cluster.zone) and create every node, disk, file "
                      "system and subnet there.",
)


# ---- no-public-ssh --------------------------------------------------------------------------------

# AWS Foundational Security Best Practices, control EC2.19 "Security groups should not allow unrestricted
# access to ports with high risk" (https://docs.aws.amazon.com/securityhub/latest/userguide/ec2-controls.html#ec2-19):
# the ports it checks. EC2.21 applies 22 and 3389 to network ACLs; this rule checks the same list everywhere.
EC2_19_PORTS = [20, 21, 22, 23, 25, 110, 135, 143, 445, 1433, 1434, 3000, 3306, 3389, 4333, 5000, 5432, 5500,
                5601, 8080, 8088, 8888, 9200, 9300]

AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AWS_DEFAULT_SG = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_SG_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_NACL = "aws:ec2/networkAcl:NetworkAcl"
AWS_DEFAULT_NACL = "aws:ec2/defaultNetworkAcl:DefaultNetworkAcl"
AWS_NACL_RULE = "aws:ec2/networkAclRule:NetworkAclRule"
TC_SG = "tencentcloud:Security/group:Group"
TC_SG_RULE = "tencentcloud:Security/groupRule:GroupRule"
TC_SG_RULE_SET = "tencentcloud:Security/groupRuleSet:GroupRuleSet"
TC_SG_LITE = "tencentcloud:Security/groupLiteRule:GroupLiteRule"
TC_ACL = "tencentcloud:Vpc/acl:Acl"
TC_ADDRESS = "tencentcloud:Address/template:Template"
TC_ADDRESS_EXTRA = "tencentcloud:Address/extraTemplate:ExtraTemplate"
TC_ADDRESS_GROUP = "tencentcloud:Address/templateGroup:TemplateGroup"
AWS_PREFIX_LIST = "aws:ec2/managedPrefixList:ManagedPrefixList"
AWS_PREFIX_LIST_ENTRY = "aws:ec2/managedPrefixListEntry:ManagedPrefixListEntry"

Sources = Optional[list[tuple[int, cidrs.Interval, str]]]  # (family, interval, as written); None: unknown


@dataclass
class _Rule:
    urn: str
    order: tuple
    accept: bool
    proto: str                   # all | tcp | udp | other | unknown
    ports: Optional[list[tuple[int, int]]]  # None: every port
    sources: Sources

    def matches(self, port: int) -> Optional[bool]:
        """Does the rule apply to `port`? None when that is not known."""
        if self.proto == "unknown":
            return None
        if self.proto not in ("all", "tcp", "udp"):
            return False
        return self.ports is None or any(lo <= port <= hi for lo, hi in self.ports)


def _aws_proto(value: Any) -> str:
    if value is UNKNOWN:
        return "unknown"
    p = str(value).lower() if value is not None else "-1"
    return {"-1": "all", "all": "all", "tcp": "tcp", "6": "tcp", "6.0": "tcp", "udp": "udp", "17": "udp",
            "17.0": "udp"}.get(p, "other")


def _aws_ports(proto: str, lo: Any, hi: Any) -> Optional[list[tuple[int, int]]]:
    if proto == "all":
        return None
    a, b = as_int(lo), as_int(hi)
    if a is None or b is None:
        return [] if lo is not UNKNOWN and hi is not UNKNOWN else None
    return [(a, b)]


def _tc_proto(value: Any) -> str:
    if value is UNKNOWN:
        return "unknown"
    p = as_str(value)
    if p is None or p.upper() == "ALL" or not p:
        return "all"
    return {"TCP": "tcp", "UDP": "udp"}.get(p.upper(), "other" if not p.startswith("ppm") else "unknown")


def _tc_ports(spec: Any) -> Optional[list[tuple[int, int]]]:
    if spec is UNKNOWN:
        return None
    text = as_str(spec)
    if text is None or text.strip().upper() in ("", "ALL"):
        return None
    out = []
    for part in text.split(","):
        part = part.strip()
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.append((int(lo), int(hi or lo)))
    return out


def _cidr_sources(values: list[Any]) -> Sources:
    out: list[tuple[int, cidrs.Interval, str]] = []
    for v in values:
        if v is UNKNOWN:
            return None
        text = as_str(v)
        parsed = cidrs.parse(text) if text else None
        if parsed is not None:
            out.append((parsed[0], parsed[1], text))
    return out


class _Templates:
    """Tencent address templates (and groups of them) of the stack, by id."""

    def __init__(self, view: StackView):
        self.view = view

    def sources(self, owner: Any, prop: str, template_id: Any = None, group_id: Any = None) -> Sources:
        out: list[tuple[int, cidrs.Interval, str]] = []
        for value, types in ((template_id, (TC_ADDRESS, TC_ADDRESS_EXTRA)), (group_id, (TC_ADDRESS_GROUP,))):
            if value is None:
                continue
            ref = self.view.ref(owner, prop, types, value=value, keys=("id",))
            if ref.resource is None:
                return None  # an address template this stack cannot see (or not yet known)
            got = self._expand(ref.resource, 0)
            if got is None:
                return None
            out += got
        return out

    def _expand(self, res: Any, depth: int) -> Sources:
        if res.resource_type == TC_ADDRESS_GROUP:
            out: list[tuple[int, cidrs.Interval, str]] = []
            for tid in items(get(res.props, "templateIds")):
                ref = self.view.ref(res, "templateIds", (TC_ADDRESS, TC_ADDRESS_EXTRA), value=tid, keys=("id",))
                got = self._expand(ref.resource, depth + 1) if ref.resource is not None and depth < 4 else None
                if got is None:
                    return None
                out += got
            return out
        values = get(res.props, "addresses")
        if values is UNKNOWN:
            return None
        addresses = items(values) + [get(e, "address") for e in items(get(res.props, "addressesExtras"))]
        return _cidr_sources(addresses)


def _prefix_list_sources(view: StackView, owner: Any, prop: str, values: list[Any]) -> Sources:
    """The CIDRs of customer-managed prefix lists of the stack a rule names (AWS-managed lists such as
    com.amazonaws.<region>.s3 are AWS service ranges, not the internet, and are not in the stack)."""
    out: list[tuple[int, cidrs.Interval, str]] = []
    for v in values:
        ref = view.ref(owner, prop, (AWS_PREFIX_LIST,), value=v, keys=("id",))
        if ref.resource is None:
            if ref.unknown:
                return None
            continue
        entries = get(ref.resource.props, "entries")
        if entries is UNKNOWN:
            return None
        values_ = [get(e, "cidr") for e in items(entries)]
        values_ += [get(e.props, "cidr") for e in view.of_type(AWS_PREFIX_LIST_ENTRY)
                    if view.ref(e, "prefixListId", (AWS_PREFIX_LIST,), keys=("id",)).resource is ref.resource]
        got = _cidr_sources(values_)
        if got is None:
            return None
        out += got
    return out


def _merge(a: Sources, b: Sources) -> Sources:
    return None if a is None or b is None else a + b


def _tc_lite_source(view: StackView, templates: _Templates, res: Any, text: str) -> Sources:
    if text.startswith("ipmg-"):
        return templates.sources(res, "ingresses", group_id=text)
    if text.startswith("ipm-"):
        return templates.sources(res, "ingresses", template_id=text)
    if text.startswith("sg-"):
        return []  # another security group: members only
    return _cidr_sources([text])


def _collect(view: StackView) -> tuple[dict[Any, tuple[bool, list[_Rule]]], list[tuple[str, str]]]:
    """Ingress rules grouped by what they belong to (security group or network ACL) → (ordered?, rules);
    and the resources open by construction (urn, why)."""
    collector = _Collector(view)
    for pos, res in enumerate(view.resources):
        read = collector.readers.get(res.resource_type)
        if read is not None:
            read(pos, res)
    return collector.groups, collector.direct


class _Collector:
    """What `_collect` gathers, one reader per resource type that lets traffic in; each reader files the
    resource's ingress rules in stack order."""

    def __init__(self, view: StackView) -> None:
        self.view = view
        self.groups: dict[Any, tuple[bool, list[_Rule]]] = {}
        self.direct: list[tuple[str, str]] = []
        self.templates = _Templates(view)
        self.readers = {
            AWS_SG: self._aws_sg, AWS_DEFAULT_SG: self._aws_sg,
            AWS_SG_RULE: self._aws_sg_rule,
            AWS_SG_INGRESS: self._aws_sg_ingress,
            AWS_NACL: self._aws_nacl, AWS_DEFAULT_NACL: self._aws_nacl,
            AWS_NACL_RULE: self._aws_nacl_rule,
            TC_SG_RULE: self._tc_sg_rule,
            TC_SG_RULE_SET: self._tc_sg_rule_set,
            TC_SG_LITE: self._tc_lite, TC_ACL: self._tc_lite,
            AWS_NODE_GROUP: self._aws_node_group,
        }

    def group_of(self, res: Any, prop: str, types: tuple[str, ...]) -> Any:
        ref = self.view.ref(res, prop, types, keys=("id",))
        if ref.resource is not None:
            return ref.resource.urn
        return ("id", ref.outside) if ref.outside is not None else res.urn

    def add(self, key: Any, ordered: bool, rule: _Rule) -> None:
        self.groups.setdefault(key, (ordered, []))[1].append(rule)

    def _aws_sg(self, pos: int, res: Any) -> None:
        view, p, urn = self.view, res.props, res.urn
        for rule in items(get(p, "ingress")):
            proto = _aws_proto(get(rule, "protocol"))
            self.add(urn, False, _Rule(urn, (pos,), True, proto,
                                       _aws_ports(proto, get(rule, "fromPort"), get(rule, "toPort")),
                                       _merge(_cidr_sources(items(get(rule, "cidrBlocks")) + items(get(rule, "ipv6CidrBlocks"))),
                                              _prefix_list_sources(view, res, "ingress", items(get(rule, "prefixListIds"))))))

    def _aws_sg_rule(self, pos: int, res: Any) -> None:
        view, p, urn = self.view, res.props, res.urn
        kind = get(p, "type")
        if kind == "ingress" or kind is UNKNOWN:
            proto = _aws_proto(get(p, "protocol"))
            self.add(self.group_of(res, "securityGroupId", (AWS_SG, AWS_DEFAULT_SG)), False,
                     _Rule(urn, (pos,), kind == "ingress", proto, _aws_ports(proto, get(p, "fromPort"), get(p, "toPort")),
                           _merge(_cidr_sources(items(get(p, "cidrBlocks")) + items(get(p, "ipv6CidrBlocks"))),
                                  _prefix_list_sources(view, res, "prefixListIds", items(get(p, "prefixListIds"))))))

    def _aws_sg_ingress(self, pos: int, res: Any) -> None:
        view, p, urn = self.view, res.props, res.urn
        proto = _aws_proto(get(p, "ipProtocol"))
        values = [v for v in (get(p, "cidrIpv4"), get(p, "cidrIpv6")) if v is not None]
        plist = get(p, "prefixListId")
        self.add(self.group_of(res, "securityGroupId", (AWS_SG, AWS_DEFAULT_SG)), False,
                 _Rule(urn, (pos,), True, proto, _aws_ports(proto, get(p, "fromPort"), get(p, "toPort")),
                       _merge(_cidr_sources(values),
                              _prefix_list_sources(view, res, "prefixListId", [plist] if plist is not None else []))))

    def _aws_nacl(self, pos: int, res: Any) -> None:
        p, urn = res.props, res.urn
        for rule in items(get(p, "ingress")):
            proto = _aws_proto(get(rule, "protocol"))
            n = as_int(get(rule, "ruleNo"))
            action = get(rule, "action")
            self.add(urn, True, _Rule(urn, (n if n is not None else 1 << 20, pos), action == "allow",
                                      proto if action is not UNKNOWN else "unknown",
                     _aws_ports(proto, get(rule, "fromPort"), get(rule, "toPort")),
                     _cidr_sources([v for v in (get(rule, "cidrBlock"), get(rule, "ipv6CidrBlock")) if v is not None])))

    def _aws_nacl_rule(self, pos: int, res: Any) -> None:
        p, urn = res.props, res.urn
        if as_bool(get(p, "egress")) is True:
            return
        proto = _aws_proto(get(p, "protocol"))
        n = as_int(get(p, "ruleNumber"))
        action = get(p, "ruleAction")
        self.add(self.group_of(res, "networkAclId", (AWS_NACL, AWS_DEFAULT_NACL)), True,
                 _Rule(urn, (n if n is not None else 1 << 20, pos), action == "allow",
                       proto if action is not UNKNOWN else "unknown",
                       _aws_ports(proto, get(p, "fromPort"), get(p, "toPort")),
                       _cidr_sources([v for v in (get(p, "cidrBlock"), get(p, "ipv6CidrBlock")) if v is not None])))

    def _tc_sg_rule(self, pos: int, res: Any) -> None:
        p, urn = res.props, res.urn
        if get(p, "type") != "ingress":
            return
        at = get(p, "addressTemplate")
        if at is not None:
            sources = None if at is UNKNOWN else self.templates.sources(
                res, "addressTemplate", template_id=get(at, "templateId"), group_id=get(at, "groupId"))
        else:
            sources = _cidr_sources([get(p, "cidrIp")]) if get(p, "cidrIp") is not None else []
        index = as_int(get(p, "policyIndex"))
        policy = get(p, "policy", "ACCEPT")
        proto = _tc_proto(get(p, "ipProtocol")) if get(p, "protocolTemplate") is None else "unknown"
        self.add(self.group_of(res, "securityGroupId", (TC_SG,)), True,
                 _Rule(urn, (0, index, 0) if index is not None else (1, pos, 0), str(policy).upper() == "ACCEPT",
                       proto if policy is not UNKNOWN else "unknown", _tc_ports(get(p, "portRange")), sources))

    def _tc_sg_rule_set(self, pos: int, res: Any) -> None:
        p, urn = res.props, res.urn
        key = self.group_of(res, "securityGroupId", (TC_SG,))
        for i, rule in enumerate(items(get(p, "ingresses"))):
            if get(rule, "addressTemplateId") is not None or get(rule, "addressTemplateGroup") is not None:
                sources = self.templates.sources(res, "ingresses", template_id=get(rule, "addressTemplateId"),
                                                 group_id=get(rule, "addressTemplateGroup"))
            else:
                sources = _cidr_sources([v for v in (get(rule, "cidrBlock"), get(rule, "ipv6CidrBlock"))
                                         if v is not None])
            proto = _tc_proto(get(rule, "protocol"))
            if get(rule, "serviceTemplateId") is not None or get(rule, "serviceTemplateGroup") is not None:
                proto = "unknown"
            action = get(rule, "action")
            self.add(key, True, _Rule(urn, (1, pos, i), str(action).upper() == "ACCEPT",
                                      proto if action is not UNKNOWN else "unknown", _tc_ports(get(rule, "port")),
                                      sources))

    def _tc_lite(self, pos: int, res: Any) -> None:
        t, p, urn = res.resource_type, res.props, res.urn
        key = self.group_of(res, "securityGroupId", (TC_SG,)) if t == TC_SG_LITE else urn
        for i, rule in enumerate(items(get(p, "ingresses"))):
            parts = (as_str(rule) or "").split("#")
            if rule is UNKNOWN:
                self.add(key, True, _Rule(urn, (1, pos, i), False, "unknown", None, None))
                continue
            if len(parts) < 4:
                continue
            sources = _tc_lite_source(self.view, self.templates, res, parts[1].strip())
            self.add(key, True, _Rule(urn, (1, pos, i), parts[0].strip().upper() == "ACCEPT", _tc_proto(parts[3]),
                                      _tc_ports(parts[2]), sources))

    def _aws_node_group(self, pos: int, res: Any) -> None:
        p, urn = res.props, res.urn
        ra = get(p, "remoteAccess")
        key_name = get(ra, "ec2SshKey")
        sgs = get(ra, "sourceSecurityGroupIds")
        if known(key_name) and as_str(key_name) and sgs is not UNKNOWN and not items(sgs):
            # terraform-provider-aws docs, eks_node_group remote_access: with an ec2_ssh_key and no
            # source_security_group_ids, "port 22 on the worker nodes is opened to the Internet (0.0.0.0/0)".
            self.direct.append((urn, "remote_access has an ec2_ssh_key and no source_security_group_ids, so EKS "
                                     "opens port 22 to 0.0.0.0/0"))


def _judge(ordered: bool, rules: list[_Rule], port: int) -> dict[int, dict[str, list[cidrs.Interval]]]:
    """family → {urn: addresses that rule's resource lets in on `port`}."""
    out: dict[int, dict[str, list[cidrs.Interval]]] = {4: {}, 6: {}}
    if not ordered:
        for r in rules:
            if r.accept and r.matches(port) and r.sources:
                for fam, iv, _ in r.sources:
                    out[fam].setdefault(r.urn, []).append(iv)
        return {fam: {u: cidrs.union(v) for u, v in m.items()} for fam, m in out.items()}
    decided: dict[int, list[cidrs.Interval]] = {4: [], 6: []}
    for r in sorted(rules, key=lambda r: r.order):
        hit = r.matches(port)
        if hit is False:
            continue
        if hit is None or r.sources is None:
            if not r.accept or hit is None:
                break  # a rule we cannot read might drop everything after it: judge no further
            continue
        for fam in (4, 6):
            mine = cidrs.union(iv for f, iv, _ in r.sources if f == fam)
            if not mine:
                continue
            fresh = cidrs.subtract(mine, decided[fam])
            if r.accept and fresh:
                out[fam].setdefault(r.urn, []).extend(fresh)
            decided[fam] = cidrs.union(decided[fam] + mine)
    return {fam: {u: cidrs.union(v) for u, v in m.items()} for fam, m in out.items()}


def _labels(rules: list[_Rule], urn: str, port: int) -> list[str]:
    out: list[str] = []
    for r in rules:
        if r.urn == urn and r.accept and r.matches(port) and r.sources:
            out += [text for _, _, text in r.sources if text not in out]
    return out


def _no_public_ssh(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    ports = [n for n in (as_int(v) for v in config_list(args, "ports")) if n is not None] or EC2_19_PORTS
    prefix = as_int(config_value(args, "broadIpv4Prefix", cidrs.BROAD_PREFIX[4]))

    def opened(fam: int, ivs: list) -> bool:
        return cidrs.open_to_internet(fam, ivs, prefix if fam == 4 else None)

    groups, direct = _collect(view)
    found: dict[str, dict[str, Any]] = {}  # urn → {"ports": [...], "sources": [...], "with": set()}
    for key, (ordered, rules) in groups.items():
        # What the group could let in at most (any port, before DROP / deny rules): if even that is not
        # the whole internet, no port of it is.
        widest = {fam: cidrs.union(iv for r in rules if r.accept and r.sources for f, iv, _ in r.sources if f == fam)
                  for fam in (4, 6)}
        if not any(ivs and opened(fam, ivs) for fam, ivs in widest.items()):
            continue
        for port in ports:
            for fam, per_urn in _judge(ordered, rules, port).items():
                total = cidrs.union(iv for ivs in per_urn.values() for iv in ivs)
                if not total or not opened(fam, total):
                    continue
                whole = cidrs.reaches_internet(fam, total)
                solo = [u for u, ivs in per_urn.items() if opened(fam, ivs)]
                culprits = solo or [u for u, ivs in per_urn.items() if cidrs.public_part(fam, ivs)]
                for u in culprits:
                    entry = found.setdefault(u, {"ports": [], "sources": [], "with": set(), "whole": False})
                    entry["whole"] = entry["whole"] or whole
                    if port not in entry["ports"]:
                        entry["ports"].append(port)
                    entry["sources"] += [s for s in _labels(rules, u, port) if s not in entry["sources"]]
                    if not solo:
                        entry["with"].update(c for c in culprits if c != u)
    for urn, entry in found.items():
        shown = ", ".join(str(p) for p in entry["ports"][:6]) + (" …" if len(entry["ports"]) > 6 else "")
        together = (f" together with {', '.join(repr(short(u)) for u in sorted(entry['with']))}"
                    if entry["with"] else "")
        who = "the whole internet" if entry["whole"] else f"a public range wider than a /{prefix}"
        report_violation(
            f"'{short(urn)}' lets {who} reach port{'s' if len(entry['ports']) > 1 else ''} {shown} "
            f"(sources {', '.join(entry['sources'][:6])}{together}); remove that rule and reach the nodes "
            f"through SSM Session Manager / TAT, or allow only named ranges (cluster.network.ssh_cidrs).", urn)
    for urn, why in direct:
        if 22 in ports and urn not in found:
            report_violation(f"'{short(urn)}' lets the whole internet reach port 22: {why}; list "
                             f"source_security_group_ids, or drop the SSH key and use SSM Session Manager.", urn)


no_public_ssh = StackValidationPolicy(
    name="no-public-ssh",
    description="No security group, network ACL or node group lets the whole internet (or a public range wider "
                "than a /16 of IPv4 or a /32 of IPv6) reach SSH, RDP or another high-risk administrative port "
                "(AWS FSBP EC2.19).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_no_public_ssh,
    config_schema=PolicyConfigSchema(properties={
        "ports": {
            "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}, "default": EC2_19_PORTS,
            "description": "Ports that must never be reachable from the whole internet (default: the high-risk "
                           "ports of AWS FSBP control EC2.19).",
        },
        "broadIpv4Prefix": {
            "type": "integer", "minimum": 1, "maximum": 32, "default": 16,
            "description": "IPv4 sources opening more public addresses than a prefix of this length holds count as "
                           "the internet.",
        },
    }),
    remediation_steps="Delete the rule, or narrow its source to your VPN or office ranges; on an EKS node group "
                      "with an SSH key, list source_security_group_ids.",
)


# ---- no-public-ip --------------------------------------------------------------------------------

AWS_EIP = "aws:ec2/eip:Eip"
AWS_EIP_ASSOC = "aws:ec2/eipAssociation:EipAssociation"
TC_EIP_ASSOC = "tencentcloud:Eip/association:Association"


def _primary_nic_public(lt: Any) -> Optional[bool]:
    """What a launch template's primary interface says about a public IPv4 address (None: unset)."""
    nics = items(get(lt.props, "networkInterfaces"))
    for nic in nics:
        if (as_int(get(nic, "deviceIndex")) or 0) == 0 and (as_int(get(nic, "networkCardIndex")) or 0) == 0:
            v = get(nic, "associatePublicIpAddress")
            return None if v is UNKNOWN else as_bool(v)
    return None


def _explicit_public(view: StackView, node: Node) -> tuple[Optional[bool], Any]:
    """(the node's own public-address setting, the resource that sets it), looking through its templates."""
    kind, props = node.kind, node.props
    if kind is not None:
        settings = [v for path in kind.public for v in values(props, path)]
        settings += [UNKNOWN if v is UNKNOWN else (as_number(v) or 0) > 0
                     for path in kind.public_bandwidth for v in values(props, path)]
        if node.resource.resource_type == AWS_NOTEBOOK:
            # SageMaker gives a notebook direct internet access unless told not to (DirectInternetAccess,
            # default Enabled: SageMaker API CreateNotebookInstance).
            access = get(props, "directInternetAccess")
            settings.append(UNKNOWN if access is UNKNOWN else as_str(access) != "Disabled")
        if any(as_bool(v) is True for v in settings):
            return True, node.resource
        if settings and all(as_bool(v) is False for v in settings):
            return False, node.resource
    for ref in node.templates:
        lt = ref.resource
        if lt is None:
            continue
        if lt.resource_type == AWS_LAUNCH_TEMPLATE:
            v = _primary_nic_public(lt)
        elif lt.resource_type == AWS_LAUNCH_CONFIG:
            raw = get(lt.props, "associatePublicIpAddress")
            v = None if raw is UNKNOWN else as_bool(raw)
        elif lt.resource_type == TC_SCALING_CONFIG:
            raw = get(lt.props, "publicIpAssigned")
            v = None if raw is UNKNOWN else as_bool(raw)
        else:
            v = None
        if v is not None:
            return v, lt
    return None, None


def _ipv6(view: StackView, node: Node) -> Optional[str]:
    """Where a GPU node gets a global IPv6 address (AWS IPv6 addresses are globally unique and routable:
    VPC user guide, "IP addressing for your VPCs and subnets"), or None."""
    kind = node.kind
    places = [(node.resource, v) for path in (kind.ipv6 if kind else ()) for v in values(node.props, path)]
    for ref in node.templates:
        if ref.resource is not None and ref.resource.resource_type == AWS_LAUNCH_TEMPLATE:
            for path in ("networkInterfaces[].ipv6AddressCount", "networkInterfaces[].ipv6Addresses[]"):
                places += [(ref.resource, v) for v in values(ref.resource.props, path)]
    for where, v in places:
        if (isinstance(v, str) and v and v is not UNKNOWN) or (as_number(v) or 0) > 0:
            return f"'{short(where.urn)}' asks for one"
    for ref in node.subnets:
        if ref.resource is not None and as_bool(get(ref.resource.props, "assignIpv6AddressOnCreation")) is True:
            return f"its subnet '{short(ref.resource.urn)}' assigns one on creation"
    return None


def _maps_public(subnet: Any) -> bool:
    v = get(subnet.props, "mapPublicIpOnLaunch")
    if v is None and subnet.resource_type == AWS_DEFAULT_SUBNET:
        # Default subnets give every instance a public IPv4 address
        # (https://docs.aws.amazon.com/vpc/latest/userguide/default-vpc.html).
        return True
    return as_bool(v) is True


def _no_public_ip(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    report_unknowns(args, view.gpu_nodes(), "no-public-ip", report_violation)
    reported: set[str] = set()

    def report(urn: str, message: str) -> None:
        if urn not in reported:
            reported.add(urn)
            report_violation(message, urn)

    nodes = view.gpu_nodes()
    for node in nodes:
        setting, where = _explicit_public(view, node)
        if setting is True:
            what = "its own settings" if where is node.resource else f"'{short(where.urn)}'"
            report(where.urn, f"GPU node '{node.label}' gets a public IP address ({what} ask for one: "
                              f"associate_public_ip_address / allocate_public_ip / public_ip_assigned); set it to "
                              f"false and reach the nodes through the NAT gateway and SSM / TAT.")
        elif setting is None and node.cloud in SUBNET_PUBLIC_IP_CLOUDS:
            for ref in node.subnets:
                if ref.resource is not None and _maps_public(ref.resource):
                    report(ref.resource.urn,
                           f"Subnet '{short(ref.resource.urn)}' gives GPU node '{node.label}' a public IP address "
                           f"(map_public_ip_on_launch); set it to false, or set associate_public_ip_address=false "
                           f"on the node's primary network interface.")
        v6 = _ipv6(view, node)
        if v6 is not None:
            report(node.urn, f"GPU node '{node.label}' gets a global IPv6 address ({v6}), reachable from the "
                             f"internet wherever the VPC routes IPv6 to an internet gateway; give GPU nodes no "
                             f"IPv6 address (ipv6_address_count 0, assign_ipv6_address_on_creation false).")
    # Templates with a GPU instance type that hand out public addresses, used by a node or not.
    for lt in view.of_type(AWS_LAUNCH_TEMPLATE, AWS_LAUNCH_CONFIG, TC_SCALING_CONFIG):
        if lt.urn in reported:
            continue
        types = [get(lt.props, "instanceType")] + items(get(lt.props, "instanceTypes"))
        if not any(is_gpu_type(as_str(x)) for x in types):
            continue
        if lt.resource_type == AWS_LAUNCH_TEMPLATE:
            public = _primary_nic_public(lt) is True or any(
                as_bool(get(nic, "associatePublicIpAddress")) is True for nic in items(get(lt.props, "networkInterfaces")))
        else:
            key = "associatePublicIpAddress" if lt.resource_type == AWS_LAUNCH_CONFIG else "publicIpAssigned"
            public = as_bool(get(lt.props, key)) is True
        if public:
            report(lt.urn, f"'{short(lt.urn)}' launches GPU machines with a public IP address; set "
                           f"associate_public_ip_address / public_ip_assigned to false.")
    if config_value(args, "includeElasticIps", True) is False:
        return
    _bound_public_addresses(view, nodes, report)


def _bound_public_addresses(view: StackView, nodes: list[Node], report: Any) -> None:
    """Elastic IPs bound to a GPU node (directly or through one of its network interfaces), and internet-facing
    load balancers forwarding to one."""
    gpu_urns = {n.urn for n in nodes}
    machines = tuple({n.resource.resource_type for n in nodes})
    binds = [(e, "instance", "networkInterface") for e in view.of_type(AWS_EIP)] + \
            [(e, "instanceId", "networkInterfaceId") for e in view.of_type(AWS_EIP_ASSOC, TC_EIP_ASSOC)]
    for eip, to_machine, to_eni in binds:
        target = None
        if get(eip.props, to_machine) is not None and machines:
            target = view.ref(eip, to_machine, machines, keys=("id", "spotInstanceId")).resource
        if target is None and get(eip.props, to_eni) is not None:
            eni = view.ref(eip, to_eni, ENI_TYPES, keys=("id",)).resource
            # an interface of the stack, or a machine's own primary interface (its output)
            target = view.eni_owner(eni) if eni is not None else \
                view.ref(eip, to_eni, machines, keys=("primaryNetworkInterfaceId",)).resource
        if target is not None and target.urn in gpu_urns:
            report(eip.urn, f"Elastic IP '{short(eip.urn)}' binds a public address to GPU node "
                            f"'{short(target.urn)}'; remove it and reach the node through the NAT gateway.")
    for lb, node in _internet_load_balancers(view, nodes) + _open_clbs(view, nodes):
        report(lb.urn, f"Internet-facing load balancer '{short(lb.urn)}' forwards traffic from the internet to GPU "
                       f"node '{node.label}'; make it internal (internal=True) or keep GPU nodes out of its "
                       f"target groups.")


TC_CLB = "tencentcloud:Clb/instance:Instance"
TC_CLB_ATTACHMENT = "tencentcloud:Clb/attachment:Attachment"


def _open_clbs(view: StackView, nodes: list[Node]) -> list[tuple[Any, Node]]:
    """(CLB, GPU node) for every public Tencent CLB (network_type OPEN) with a listener target on a GPU node."""
    by_urn = {n.urn: n for n in nodes}
    machines = tuple({n.resource.resource_type for n in nodes})
    out: list[tuple[Any, Node]] = []
    for att in view.of_type(TC_CLB_ATTACHMENT):
        clb = view.ref(att, "clbId", (TC_CLB,), keys=("id",)).resource
        if clb is None or as_str(get(clb.props, "networkType")) != "OPEN" or not machines:
            continue
        for v in values(att.props, "targets[].instanceId"):
            target = view.ref(att, "targets", machines, value=v, keys=("id",)).resource
            if target is not None and target.urn in by_urn:
                out.append((clb, by_urn[target.urn]))
                break
    return out


AWS_LBS = ("aws:lb/loadBalancer:LoadBalancer", "aws:alb/loadBalancer:LoadBalancer")
AWS_LISTENERS = ("aws:lb/listener:Listener", "aws:alb/listener:Listener")
AWS_TARGET_GROUPS = ("aws:lb/targetGroup:TargetGroup", "aws:alb/targetGroup:TargetGroup")
AWS_ASG_TG_ATTACHMENT = "aws:autoscaling/attachment:Attachment"
AWS_ASG_TRAFFIC_SOURCE = "aws:autoscaling/trafficSourceAttachment:TrafficSourceAttachment"
AWS_TG_ATTACHMENTS = ("aws:lb/targetGroupAttachment:TargetGroupAttachment",
                      "aws:alb/targetGroupAttachment:TargetGroupAttachment")


def _internet_load_balancers(view: StackView, nodes: list[Node]) -> list[tuple[Any, Node]]:
    """(load balancer, GPU node) for every internet-facing AWS load balancer (`internal` unset or false:
    ELB API CreateLoadBalancer, Scheme default internet-facing) with a listener whose target group holds a
    GPU node: by instance id, or an autoscaling group's target_group_arns."""
    by_urn = {n.urn: n for n in nodes}
    groups: dict[str, Node] = {}  # target group URN → a GPU node in it
    for att in view.of_type(*AWS_TG_ATTACHMENTS):
        tg = view.ref(att, "targetGroupArn", AWS_TARGET_GROUPS, keys=("arn", "id")).resource
        target = view.ref(att, "targetId", CAPACITY_TYPES, keys=("id", "privateIp")).resource
        if tg is not None and target is not None and target.urn in by_urn:
            groups.setdefault(tg.urn, by_urn[target.urn])
    for n in nodes:
        for v in values(n.resource.props, "targetGroupArns[]") if n.resource.resource_type == AWS_ASG else []:
            tg = view.ref(n.resource, "targetGroupArns", AWS_TARGET_GROUPS, value=v, keys=("arn", "id")).resource
            if tg is not None:
                groups.setdefault(tg.urn, n)
    # an autoscaling group's target groups attached by their own resources
    for att, group_prop, tg_prop, tg_value in (
            [(a, "autoscalingGroupName", "lbTargetGroupArn", get(a.props, "lbTargetGroupArn"))
             for a in view.of_type(AWS_ASG_TG_ATTACHMENT)] +
            [(a, "autoscalingGroupName", "trafficSource", get(a.props, "trafficSource.identifier"))
             for a in view.of_type(AWS_ASG_TRAFFIC_SOURCE)]):
        group = view.ref(att, group_prop, (AWS_ASG,), keys=("name", "id")).resource
        tg = view.ref(att, tg_prop, AWS_TARGET_GROUPS, value=tg_value, keys=("arn", "id")).resource \
            if tg_value is not None else None
        if group is not None and tg is not None and group.urn in by_urn:
            groups.setdefault(tg.urn, by_urn[group.urn])
    out: list[tuple[Any, Node]] = []
    for listener in view.of_type(*AWS_LISTENERS):
        lb = view.ref(listener, "loadBalancerArn", AWS_LBS, keys=("arn", "id")).resource
        if lb is None or as_bool(get(lb.props, "internal")) is True or get(lb.props, "internal") is UNKNOWN:
            continue
        arns = values(listener.props, "defaultActions[].targetGroupArn") + \
            values(listener.props, "defaultActions[].forward.targetGroups[].arn")
        for arn in arns:
            tg = view.ref(listener, "defaultActions", AWS_TARGET_GROUPS, value=arn, keys=("arn", "id")).resource
            if tg is not None and tg.urn in groups:
                out.append((lb, groups[tg.urn]))
                break
    return out


no_public_ip = StackValidationPolicy(
    name="no-public-ip",
    description="GPU nodes and their launch templates or configurations never get a public IP address.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_no_public_ip,
    config_schema=PolicyConfigSchema(properties={
        "includeElasticIps": {
            "type": "boolean", "default": True,
            "description": "Also reject elastic IPs bound to a GPU node (not only addresses given at launch).",
        },
    }),
    remediation_steps="Set associate_public_ip_address=false (AWS instance, launch template, launch "
                      "configuration), map_public_ip_on_launch=false on the node subnet, allocate_public_ip=false / "
                      "public_ip_assigned=false (Tencent); delete elastic IPs bound to nodes.",
)
