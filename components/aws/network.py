"""Network role on AWS (docs/architecture.md): a VPC with one private node subnet in the cluster's zone, a public
subnet for the NAT gateway, an S3 gateway endpoint, VPC flow logs and the node security group.

With `existing_subnet_id` no VPC is created: the given subnet is looked up (for its VPC) and only the
node security group is made in that VPC. The policy pack flags such a shared subnet.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Mapping, Optional

import pulumi
import pulumi_aws as aws

from components.aws.common import assume_role_policy, policy_output, tagged

FLOW_LOG_RETENTION_DAYS = 90


@dataclass(frozen=True)
class NetworkArgs:
    region: str
    """Provider region (names the S3 gateway endpoint's service)."""
    zone: str
    """The one availability zone of the cluster; both subnets land here."""
    cidr: ipaddress.IPv4Network
    """VPC range; the node subnet takes its first half (see `subnet_cidrs`)."""
    tags: Mapping[str, str]
    """Standard cluster tags, put on every taggable resource."""
    account_id: pulumi.Input[str]
    """This account: the flow-logs service may assume the flow-log role only for its flow logs."""
    partition: pulumi.Input[str]
    """AWS partition ("aws"), for the flow-log role's source ARN."""
    ssh_cidrs: tuple[ipaddress.IPv4Network, ...] = ()
    """Ranges allowed to reach port 22. Empty (default): no inbound SSH at all; use SSM."""
    existing_subnet_id: Optional[str] = None
    """Use this subnet instead of creating a VPC (default None: create one)."""
    flow_log_traffic: str = field(default="ALL")
    """Flow-log traffic type: ALL (default; includes every REJECT) or REJECT."""


def subnet_cidrs(cidr: ipaddress.IPv4Network) -> tuple[ipaddress.IPv4Network, ipaddress.IPv4Network]:
    """(node subnet, NAT subnet): the first half of the VPC for nodes, a small block of the second half
    for the NAT gateway (/20 of a /16, down to /28 of a /24)."""
    nodes, rest = cidr.subnets(prefixlen_diff=1)
    public = next(rest.subnets(new_prefix=min(rest.prefixlen + 3, 28)))
    return nodes, public


class Network(pulumi.ComponentResource):
    """The cluster's private network, or its security group in a shared subnet."""

    vpc_id: pulumi.Output[str]
    subnet_id: pulumi.Output[str]
    subnet_cidr: pulumi.Output[str]
    """The node subnet's range (the head node's fixed address is computed from it)."""
    security_group_id: pulumi.Output[str]
    shared: bool
    """True when the subnet was given (`existing_subnet_id`) rather than created here."""
    ready: list[pulumi.Resource]
    """What a node's first boot needs of the network before it starts: the node group's rules, and
    (in a network made here) the routes out through the NAT gateway and to S3. Instances name none
    of these, so nothing else orders them, and cloud-init does not retry a failed package install."""

    def __init__(self, name: str, args: NetworkArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.shared = args.existing_subnet_id is not None

        if self.shared:
            subnet = aws.ec2.get_subnet_output(id=args.existing_subnet_id, opts=pulumi.InvokeOptions(parent=self))
            self.vpc_id = subnet.vpc_id
            self.subnet_id = pulumi.Output.from_input(args.existing_subnet_id)
            self.subnet_cidr = subnet.cidr_block
            self.ready = []
        else:
            self.vpc_id, self.subnet_id, self.ready = self._vpc(name, args, child)
            self.subnet_cidr = pulumi.Output.from_input(str(subnet_cidrs(args.cidr)[0]))

        sg_name = f"{name}-nodes"
        sg = aws.ec2.SecurityGroup(
            sg_name,
            vpc_id=self.vpc_id,
            description=f"GPU nodes of {name}: all traffic within the group (EFA), egress anywhere",
            tags=tagged(args.tags, sg_name),
            opts=child,
        )
        self.security_group_id = sg.id
        # EFA needs every protocol in and out between members of one security group, referenced by
        # the group itself (not by CIDR): EFA traffic is OS-bypass and only matches group references
        # (EC2 user guide, "Get started with EFA", step 1: the group allows all traffic to and from itself). That is the only wide rule.
        self.ready.append(aws.vpc.SecurityGroupIngressRule(
            f"{name}-nodes-in-self", security_group_id=sg.id, referenced_security_group_id=sg.id,
            ip_protocol="-1", description="all traffic from the group itself (EFA, NCCL)",
            tags=tagged(args.tags, f"{name}-nodes-in-self"), opts=child))
        self.ready.append(aws.vpc.SecurityGroupEgressRule(
            f"{name}-nodes-out-self", security_group_id=sg.id, referenced_security_group_id=sg.id,
            ip_protocol="-1", description="all traffic to the group itself (EFA, NCCL)",
            tags=tagged(args.tags, f"{name}-nodes-out-self"), opts=child))
        self.ready.append(aws.vpc.SecurityGroupEgressRule(
            f"{name}-nodes-out-any", security_group_id=sg.id, cidr_ipv4="0.0.0.0/0",
            ip_protocol="-1", description="egress through the NAT gateway and the S3 endpoint",
            tags=tagged(args.tags, f"{name}-nodes-out-any"), opts=child))
        for i, cidr in enumerate(args.ssh_cidrs):
            rule = f"{name}-nodes-ssh-{i}"
            aws.vpc.SecurityGroupIngressRule(
                rule, security_group_id=sg.id, cidr_ipv4=str(cidr), ip_protocol="tcp",
                from_port=22, to_port=22, description=f"SSH from {cidr}",
                tags=tagged(args.tags, rule), opts=child)

        self.register_outputs({
            "vpc_id": self.vpc_id,
            "subnet_id": self.subnet_id,
            "subnet_cidr": self.subnet_cidr,
            "security_group_id": self.security_group_id,
        })

    def _vpc(self, name: str, args: NetworkArgs, child: pulumi.ResourceOptions
             ) -> tuple[pulumi.Output[str], pulumi.Output[str], list[pulumi.Resource]]:
        """The VPC, its node subnet, and the routes a node's first boot needs (Network.ready)."""
        node_cidr, public_cidr = subnet_cidrs(args.cidr)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc", cidr_block=str(args.cidr), enable_dns_support=True, enable_dns_hostnames=True,
            tags=tagged(args.tags, f"{name}-vpc"), opts=child)
        nodes = aws.ec2.Subnet(
            f"{name}-subnet", vpc_id=vpc.id, cidr_block=str(node_cidr), availability_zone=args.zone,
            map_public_ip_on_launch=False, tags=tagged(args.tags, f"{name}-subnet", **{"gpu-cluster:subnet": "nodes"}),
            opts=child)
        public = aws.ec2.Subnet(
            f"{name}-public", vpc_id=vpc.id, cidr_block=str(public_cidr), availability_zone=args.zone,
            map_public_ip_on_launch=False, tags=tagged(args.tags, f"{name}-public", **{"gpu-cluster:subnet": "nat"}),
            opts=child)

        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=tagged(args.tags, f"{name}-igw"), opts=child)
        eip = aws.ec2.Eip(f"{name}-nat-ip", domain="vpc", tags=tagged(args.tags, f"{name}-nat-ip"),
                          opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id, subnet_id=public.id,
                                 tags=tagged(args.tags, f"{name}-nat"), opts=child)

        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            tags=tagged(args.tags, f"{name}-public-rt"), opts=child)
        public_rta = aws.ec2.RouteTableAssociation(f"{name}-public-rta", subnet_id=public.id,
                                                   route_table_id=public_rt.id, opts=child)
        private_rt = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)],
            tags=tagged(args.tags, f"{name}-private-rt"), opts=child)
        private_rta = aws.ec2.RouteTableAssociation(f"{name}-private-rta", subnet_id=nodes.id,
                                                    route_table_id=private_rt.id, opts=child)
        # Checkpoints and datasets go to S3 through the gateway endpoint: no NAT data-processing charge.
        s3 = aws.ec2.VpcEndpoint(
            f"{name}-s3", vpc_id=vpc.id, service_name=f"com.amazonaws.{args.region}.s3",
            vpc_endpoint_type="Gateway", route_table_ids=[private_rt.id],
            tags=tagged(args.tags, f"{name}-s3"), opts=child)

        self._flow_logs(name, args, vpc, child)
        # The private table routes through the NAT gateway (created once it is available) and the public
        # one takes the gateway to the internet; until its association exists, the node subnet uses the
        # VPC's main table, which has only the local route.
        return vpc.id, nodes.id, [public_rta, private_rta, s3]

    def _flow_logs(self, name: str, args: NetworkArgs, vpc: aws.ec2.Vpc, child: pulumi.ResourceOptions) -> None:
        """VPC flow logs to CloudWatch Logs (CKV2_AWS_11, FSBP EC2.6)."""
        group = aws.cloudwatch.LogGroup(
            f"{name}-flow-logs", retention_in_days=FLOW_LOG_RETENTION_DAYS,
            tags=tagged(args.tags, f"{name}-flow-logs"), opts=child)
        # Confused deputy: the flow-logs service may assume the role only for this account's flow logs. "We
        # recommend that you use the aws:SourceAccount and aws:SourceArn condition keys": the source account
        # the flow log's owner, the source ARN arn:aws:ec2:region:account_id:vpc-flow-log/flow-log-id, the
        # id a wildcard until the flow log exists (it names this role, so it comes after) (Amazon VPC user
        # guide, "IAM role for publishing flow logs to CloudWatch Logs":
        # docs.aws.amazon.com/vpc/latest/userguide/flow-logs-iam-role.html).
        trust = assume_role_policy(
            "vpc-flow-logs.amazonaws.com", source_account=args.account_id,
            source_arn=pulumi.Output.concat("arn:", args.partition, ":ec2:", args.region, ":", args.account_id,
                                            ":vpc-flow-log/*"))
        role = aws.iam.Role(
            f"{name}-flow-logs-role", assume_role_policy=trust,
            # Latin-1 only (CreateRole Description; the contract checks it)
            description=f"VPC flow logs of {name} to CloudWatch Logs",
            tags=tagged(args.tags, f"{name}-flow-logs-role"), opts=child)
        policy = aws.iam.RolePolicy(
            f"{name}-flow-logs-policy", role=role.id,
            policy=policy_output([{
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogGroups",
                           "logs:DescribeLogStreams"],
                "Resource": [group.arn, pulumi.Output.concat(group.arn, ":*")],
            }]),
            opts=child)
        aws.ec2.FlowLog(
            f"{name}-flow-log", vpc_id=vpc.id, traffic_type=args.flow_log_traffic,
            log_destination_type="cloud-watch-logs", log_destination=group.arn, iam_role_arn=role.arn,
            max_aggregation_interval=600, tags=tagged(args.tags, f"{name}-flow-log"),
            # The role's permission first: the flow log publishes with it from the moment it exists (it
            # only names the role, so nothing else orders the two).
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[policy])))
