"""The cluster's network on Tencent Cloud: VPC, one subnet in the zone, security group, NAT, flow logs.

Nothing is reachable from the internet: nodes get no public IP, egress leaves through a NAT gateway
with its own EIP, and the security group's only wide rule is "all traffic from members of this
group". SSH is opened only to `ssh_cidrs` (empty by default: use TAT / the console instead).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Mapping, Optional

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components.tencentcloud.addressing import node_subnet

_FLOW_LOG_DAYS = 30
STANDARD_NAT = 2
"""nat_product_version 2: the standard NAT gateway, whose bandwidth is fixed at 5000 Mbps (the provider
refuses any other `bandwidth`; the traditional product, 1, defaults to 100 Mbps): provider doc
nat_gateway v1.82.42 and resource_tc_nat_gateway.go."""
EIP_MAX_MBPS = 100
"""Largest `internet_max_bandwidth_out` of a TRAFFIC_POSTPAID_BY_HOUR EIP (VPC API AllocateAddresses,
InternetMaxBandwidthOut: "TRAFFIC_POSTPAID_BY_HOUR: 1 Mbps to 100 Mbps")."""


def eip_bandwidths(egress_mbps: int) -> list[int]:
    """The EIPs that give the NAT gateway `egress_mbps` of egress: full 100 Mbps ones and the rest.
    A single connection leaves through one EIP, so it gets at most 100 Mbps."""
    full, rest = divmod(egress_mbps, EIP_MAX_MBPS)
    return [EIP_MAX_MBPS] * full + ([rest] if rest else [])


@dataclass(frozen=True)
class NetworkArgs:
    cluster_name: str
    """Prefix of every resource name."""
    zone: str
    """The one availability zone of the cluster (e.g. ap-shanghai-5)."""
    cidr: ipaddress.IPv4Network
    """VPC range; the cluster subnet takes its first half."""
    tags: Mapping[str, str]
    """Tags for every taggable resource."""
    ssh_cidrs: tuple[ipaddress.IPv4Network, ...] = ()
    """Ranges allowed to reach TCP 22. Default: none (no inbound from outside the group at all)."""
    existing_subnet_id: Optional[str] = None
    """Use this subnet (and its VPC) instead of creating a VPC, subnet and NAT. Default: create them."""
    egress_mbps: int = 500
    """Internet egress of the NAT gateway, Mbps (1-1000: up to ten 100 Mbps EIPs); the spec's default."""
    lustre_cidr: Optional[ipaddress.IPv4Network] = None
    """CFS Turbo's CCN range, allowed to reach the nodes' Lustre port. Default: no file system."""
    flow_logs: bool = False
    """Flow logs of the VPC (of the subnet, in a shared one): only for accounts Tencent has allowlisted."""
    flow_log_days: int = field(default=_FLOW_LOG_DAYS)
    """Days the CLS topic keeps the flow logs."""


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    subnet_cidr: pulumi.Output[str]
    security_group_id: pulumi.Output[str]
    shared_subnet: bool
    """True when the cluster runs in a subnet it did not create (existing_subnet_id)."""
    ready: list[pulumi.Resource]
    """What a node's first boot needs of the network before it starts: the security group's rules and
    (in a network made here) the route out through the NAT gateway. Instances name neither, so nothing
    else orders them, and the first boot downloads the driver and clients."""

    def __init__(self, name: str, args: NetworkArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix, tags = args.cluster_name, dict(args.tags)
        self.shared_subnet = args.existing_subnet_id is not None

        if args.existing_subnet_id:
            flow_log_target = self._use_existing_subnet(args)
        else:
            flow_log_target = self._create_vpc(args, prefix, tags, child)
        self._security_group(args, prefix, tags, child)
        if args.flow_logs:
            self._flow_logs(args, prefix, tags, child, flow_log_target)

        self.register_outputs({"vpc_id": self.vpc_id, "subnet_id": self.subnet_id, "subnet_cidr": self.subnet_cidr,
                               "security_group_id": self.security_group_id})

    def _use_existing_subnet(self, args: NetworkArgs) -> tuple[str, pulumi.Output[str]]:
        """Look up the stack file's subnet and its VPC; the flow log target is the subnet."""
        found = tencentcloud.vpc.get_subnets_output(subnet_id=args.existing_subnet_id,
                                                    opts=pulumi.InvokeOutputOptions(parent=self))
        subnet = found.instance_lists.apply(lambda subnets: _the_subnet(args.existing_subnet_id, subnets))
        self.vpc_id = subnet.vpc_id
        self.subnet_id = pulumi.Output.from_input(args.existing_subnet_id)
        self.subnet_cidr = subnet.cidr_block
        flow_log_target = ("SUBNET", self.subnet_id)
        self.ready = []
        return flow_log_target

    def _create_vpc(self, args: NetworkArgs, prefix: str, tags: dict[str, str],
                    child: pulumi.ResourceOptions) -> tuple[str, pulumi.Output[str]]:
        """The cluster's own VPC, NAT egress and subnet; the flow log target is the VPC."""
        vpc = tencentcloud.vpc.Instance(f"{prefix}-vpc", name=prefix, cidr_block=str(args.cidr),
                                        tags=tags, opts=child)
        # Egress only: a standard NAT gateway (5000 Mbps; the traditional product defaults to 100)
        # with as many traffic-billed EIPs as the egress bandwidth needs, routed from the cluster
        # subnet's own table (the VPC's default table is left alone for other subnets).
        eips = [tencentcloud.eip.Instance(
            f"{prefix}-nat-eip" if i == 0 else f"{prefix}-nat-eip-{i}", name=f"{prefix}-nat-{i}",
            internet_charge_type="TRAFFIC_POSTPAID_BY_HOUR", internet_max_bandwidth_out=mbps,
            tags=tags, opts=child) for i, mbps in enumerate(eip_bandwidths(args.egress_mbps))]
        nat = tencentcloud.nat.Gateway(f"{prefix}-nat", name=prefix, vpc_id=vpc.id, zone=args.zone,
                                       nat_product_version=STANDARD_NAT,
                                       assigned_eip_sets=[eip.public_ip for eip in eips], tags=tags,
                                       opts=child)
        routes = tencentcloud.route.Table(f"{prefix}-routes", name=prefix, vpc_id=vpc.id, tags=tags,
                                          opts=child)
        egress = tencentcloud.route.TableEntry(f"{prefix}-egress", route_table_id=routes.id,
                                               destination_cidr_block="0.0.0.0/0", next_type="NAT",
                                               next_hub=nat.id, description="internet egress via NAT",
                                               opts=child)
        self.ready = [egress]
        subnet_cidr = node_subnet(args.cidr)
        subnet = tencentcloud.subnet.Instance(f"{prefix}-subnet", name=prefix, vpc_id=vpc.id,
                                              availability_zone=args.zone, cidr_block=str(subnet_cidr),
                                              route_table_id=routes.id, tags=tags, opts=child)
        self.vpc_id, self.subnet_id = vpc.id, subnet.id
        self.subnet_cidr = pulumi.Output.from_input(str(subnet_cidr))
        flow_log_target = ("VPC", vpc.id)
        return flow_log_target

    def _security_group(self, args: NetworkArgs, prefix: str, tags: dict[str, str],
                        child: pulumi.ResourceOptions) -> None:
        group = tencentcloud.security.Group(f"{prefix}-sg", name=prefix, tags=tags,
                                            description=f"gpu-cluster {prefix}: members talk freely; nothing else in",
                                            opts=child)
        ingresses = [{"action": "ACCEPT", "protocol": "ALL", "port": "all", "source_security_id": group.id,
                      "description": "all traffic between cluster members (NCCL, MPI, SSH)"}]
        if args.lustre_cidr is not None:
            # LNet (the Lustre transport) listens on TCP 988 and servers may connect back to clients.
            ingresses.append({"action": "ACCEPT", "protocol": "TCP", "port": "988",
                              "cidr_block": str(args.lustre_cidr), "description": "CFS Turbo (LNet)"})
        ingresses += [{"action": "ACCEPT", "protocol": "TCP", "port": "22", "cidr_block": str(c),
                       "description": "SSH from ssh_cidrs"} for c in args.ssh_cidrs]
        self.ready.append(tencentcloud.security.GroupRuleSet(
            f"{prefix}-sg-rules", security_group_id=group.id, ingresses=ingresses,
            egresses=[{"action": "ACCEPT", "protocol": "ALL", "port": "all", "cidr_block": "0.0.0.0/0",
                       "description": "egress (through NAT)"}],
            opts=child))
        self.security_group_id = group.id

    def _flow_logs(self, args: NetworkArgs, prefix: str, tags: dict[str, str], child: pulumi.ResourceOptions,
                   flow_log_target: tuple[str, pulumi.Output[str]]) -> None:
        # Flow logs into a CLS topic, only when the account can have them: CreateFlowLog takes VPC and SUBNET
        # (and CCN, DCG) only from accounts Tencent has allowlisted by ticket ("当选择VPC，SUBNET，CCN，DCG时，
        # 请通过工单加入白名单": vendored tencentcloud-sdk-go vpc/v20170312 CreateFlowLogRequestParams,
        # provider v1.82.42), and its Flow Logs pages say NAT gateway flow logs are in beta behind a ticket
        # too (cloud.tencent.com/document/product/682/19260). Created by default it would fail most
        # accounts' first `pulumi up` (the plan says so; network.flow_logs turns it on).
        logset = tencentcloud.cls.Logset(f"{prefix}-logs", logset_name=prefix, tags=tags, opts=child)
        topic = tencentcloud.cls.Topic(f"{prefix}-flow-logs", logset_id=logset.id,
                                       topic_name=f"{prefix}-flow-logs", period=args.flow_log_days, tags=tags,
                                       opts=child)
        resource_type, resource_id = flow_log_target
        tencentcloud.vpc.FlowLog(f"{prefix}-flow-log", flow_log_name=prefix, resource_type=resource_type,
                                 resource_id=resource_id, vpc_id=self.vpc_id, traffic_type="ALL",
                                 storage_type="cls", cloud_log_id=topic.id, tags=tags, opts=child)


def _the_subnet(subnet_id: str, subnets: list) -> object:
    """The looked-up subnet, or a sentence (not an IndexError) when the id does not exist."""
    if not subnets:
        raise pulumi.RunError(f"network.existing_subnet_id={subnet_id}: no such subnet in this region; "
                              f"check the id, or leave it out to let the stack create a dedicated subnet")
    return subnets[0]
