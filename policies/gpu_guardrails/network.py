"""Network guardrails: a dedicated subnet per cluster, one zone per cluster, no SSH/RDP from anywhere."""

from __future__ import annotations

from typing import Any, Iterable, Optional

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy, StackValidationPolicy

from .props import CLUSTER_TAG, as_int, as_str, get, items, short, tags_of
from .stack import (COMPUTE_TYPES, SUBNET_TYPES, TC_HPC_CLUSTER, TC_INSTANCE, StackView, config_list,
                    config_value, is_default_vpc)


# ---- dedicated-subnet ---------------------------------------------------------------------------

def _dedicated_subnet(args: Any, report_violation: Any) -> None:
    view = StackView(args.resources)
    allowed = {v for v in config_list(args, "allowedSharedSubnetIds") if isinstance(v, str)}
    cluster_subnets: dict[str, str] = {}  # subnet URN → the cluster whose GPU nodes it hosts
    for node in view.gpu_nodes():
        name, cluster = short(node.urn), node.cluster or "(untagged)"
        if not node.subnets:
            if node.cloud == "aws":
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
                continue  # unknown during preview and no dependency edge: nothing to judge
            if is_default_vpc(view, subnet):
                report_violation(
                    f"GPU node '{name}' runs in subnet '{short(subnet.urn)}' of a default VPC; create a VPC "
                    f"and a subnet for cluster '{cluster}' instead.", node.urn)
                continue
            owner = tags_of(subnet.props).get(CLUSTER_TAG)
            if node.cluster and owner != node.cluster:
                report_violation(
                    f"GPU node '{name}' runs in subnet '{short(subnet.urn)}', which is not tagged "
                    f"{CLUSTER_TAG}={node.cluster}; give cluster '{node.cluster}' its own subnet tagged so.",
                    node.urn)
                continue
            cluster_subnets.setdefault(subnet.urn, node.cluster)
    for res in view.of_type(*COMPUTE_TYPES):
        lt = view.launch_template_of(res)
        tags = tags_of(res.props) or (tags_of(lt.resource.props) if lt.resource is not None else {})
        mine = tags.get(CLUSTER_TAG, "")
        for ref in view.subnets_of(res, lt):
            if ref.resource is None or ref.resource.urn not in cluster_subnets:
                continue
            owner = cluster_subnets[ref.resource.urn]
            if mine != owner:
                report_violation(
                    f"'{short(res.urn)}' is not part of cluster '{owner or '(untagged)'}' but runs in its subnet "
                    f"'{short(ref.resource.urn)}'; move it to a subnet of its own so the GPU cluster's "
                    f"subnet stays dedicated.", res.urn)
                break


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
    view = StackView(args.resources)
    include_storage = config_value(args, "includeStorage", True) is not False
    for cluster, nodes in view.clusters().items():
        members: dict[str, tuple[Any, list[str]]] = {}
        for node in nodes:
            members[node.urn] = (node.resource, view.zones_of(node.resource))
            if node.resource.resource_type == TC_INSTANCE:
                hpc = view.ref(node.resource, "hpcClusterId", (TC_HPC_CLUSTER,)).resource
                if hpc is not None:
                    members.setdefault(hpc.urn, (hpc, view.zones_of(hpc)))
        if cluster and include_storage:
            for res in view.of_type(*_ZONED_TYPES):
                if tags_of(res.props).get(CLUSTER_TAG) == cluster:
                    members.setdefault(res.urn, (res, view.zones_of(res)))
        home = _home_zone([z for node in nodes for z in view.zones_of(node.resource)],
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
    """The first GPU node's zone, or else the most common zone."""
    if node_zones:
        return node_zones[0]
    if not all_zones:
        return None
    return max(sorted(set(all_zones)), key=all_zones.count)


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

_WORLD = ("0.0.0.0/0", "::/0")


def _covers(protocol: Any, from_port: Any, to_port: Any, port: int) -> bool:
    proto = str(protocol).lower() if protocol is not None else "-1"
    if proto in ("-1", "all"):
        return True
    if proto not in ("tcp", "6"):
        return False
    lo, hi = as_int(from_port), as_int(to_port)
    if lo is None or hi is None:
        return False
    return lo <= port <= hi


def _tencent_port_covers(spec: Any, port: int) -> bool:
    text = as_str(spec)
    if text is None or text.strip().upper() in ("", "ALL"):
        return True
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            lo, _, hi = part.partition("-")
            if lo.isdigit() and hi.isdigit() and int(lo) <= port <= int(hi):
                return True
        elif part.isdigit() and int(part) == port:
            return True
    return False


def _tencent_proto_ok(protocol: Any) -> bool:
    proto = as_str(protocol)
    return proto is None or proto.upper() in ("TCP", "ALL")


def _open_ports(args: Any, ports: list[int]) -> Iterable[tuple[int, str]]:
    t, p = args.resource_type, args.props
    if t == "aws:ec2/securityGroup:SecurityGroup":
        for rule in items(get(p, "ingress")):
            cidrs = [as_str(c) for c in items(get(rule, "cidrBlocks")) + items(get(rule, "ipv6CidrBlocks"))]
            for cidr in (c for c in cidrs if c in _WORLD):
                for port in ports:
                    if _covers(get(rule, "protocol"), get(rule, "fromPort"), get(rule, "toPort"), port):
                        yield port, cidr
    elif t == "aws:ec2/securityGroupRule:SecurityGroupRule":
        if get(p, "type") == "ingress":
            cidrs = [as_str(c) for c in items(get(p, "cidrBlocks")) + items(get(p, "ipv6CidrBlocks"))]
            for cidr in (c for c in cidrs if c in _WORLD):
                for port in ports:
                    if _covers(get(p, "protocol"), get(p, "fromPort"), get(p, "toPort"), port):
                        yield port, cidr
    elif t == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        for cidr in (as_str(get(p, "cidrIpv4")), as_str(get(p, "cidrIpv6"))):
            if cidr in _WORLD:
                for port in ports:
                    if _covers(get(p, "ipProtocol"), get(p, "fromPort"), get(p, "toPort"), port):
                        yield port, cidr
    elif t == "tencentcloud:Security/groupRule:GroupRule":
        cidr = as_str(get(p, "cidrIp"))
        if get(p, "type") == "ingress" and str(get(p, "policy", "ACCEPT")).upper() == "ACCEPT" and cidr in _WORLD:
            for port in ports:
                if _tencent_proto_ok(get(p, "ipProtocol")) and _tencent_port_covers(get(p, "portRange"), port):
                    yield port, cidr
    elif t == "tencentcloud:Security/groupRuleSet:GroupRuleSet":
        for rule in items(get(p, "ingresses")):
            cidr = as_str(get(rule, "cidrBlock")) or as_str(get(rule, "ipv6CidrBlock"))
            if str(get(rule, "action", "")).upper() == "ACCEPT" and cidr in _WORLD:
                for port in ports:
                    if _tencent_proto_ok(get(rule, "protocol")) and _tencent_port_covers(get(rule, "port"), port):
                        yield port, cidr
    elif t == "tencentcloud:Security/groupLiteRule:GroupLiteRule":
        for rule in items(get(p, "ingresses")):
            parts = (as_str(rule) or "").split("#")
            if len(parts) == 4 and parts[0].upper() == "ACCEPT" and parts[1] in _WORLD:
                for port in ports:
                    if _tencent_proto_ok(parts[3]) and _tencent_port_covers(parts[2], port):
                        yield port, parts[1]


def _no_public_ssh(args: Any, report_violation: Any) -> None:
    ports = [n for n in (as_int(v) for v in config_list(args, "ports")) if n is not None] or [22, 3389]
    seen = set()
    for port, cidr in _open_ports(args, ports):
        if (port, cidr) in seen:
            continue
        seen.add((port, cidr))
        report_violation(
            f"'{args.name}' opens port {port} to {cidr}; remove that rule and reach the nodes through SSM "
            f"Session Manager / TAT, or allow only named ranges (cluster.network.ssh_cidrs).")


no_public_ssh = ResourceValidationPolicy(
    name="no-public-ssh",
    description="No security group rule opens SSH (22) or RDP (3389) to 0.0.0.0/0 or ::/0.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_no_public_ssh,
    config_schema=PolicyConfigSchema(properties={
        "ports": {
            "type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 65535}, "default": [22, 3389],
            "description": "Ports that must never be reachable from the whole internet.",
        },
    }),
    remediation_steps="Delete the rule, or narrow its source to your VPN or office ranges.",
)
