"""AWS network role: VPC, subnets in the zone, NAT, S3 endpoint, flow logs, node security group."""

import ipaddress

import pytest

from components.aws.network import subnet_cidrs
from gpu_cluster.stackfile import SAMPLE_STACKS

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
LT = "aws:ec2/launchTemplate:LaunchTemplate"


def _node_sg(plan):
    return next(r for r in plan.of_type(SG) if r.name.endswith("-network-nodes"))


def _rules_of(plan, type_, sg_id):
    return [r.inputs for r in plan.of_type(type_) if r.inputs["securityGroupId"] == sg_id]


def test_subnet_cidrs_split_the_vpc():
    assert subnet_cidrs(ipaddress.ip_network("10.40.0.0/16")) == (
        ipaddress.ip_network("10.40.0.0/17"), ipaddress.ip_network("10.40.128.0/20"))
    nodes, public = subnet_cidrs(ipaddress.ip_network("192.168.7.0/24"))
    assert (str(nodes), str(public)) == ("192.168.7.0/25", "192.168.7.128/28")


def test_vpc_subnets_nat_endpoint_and_flow_logs(sample_plan):
    plan = sample_plan("aws-large")
    vpc = plan.one(VPC).inputs
    assert vpc["cidrBlock"] == "10.40.0.0/16" and vpc["enableDnsSupport"] and vpc["enableDnsHostnames"]
    subnets = {r.name.rsplit("-", 1)[-1]: r.inputs for r in plan.of_type(SUBNET)}
    assert set(subnets) == {"subnet", "public"}
    assert {s["availabilityZone"] for s in subnets.values()} == {"us-east-1a"}
    assert subnets["subnet"]["cidrBlock"] == "10.40.0.0/17"
    assert not any(s["mapPublicIpOnLaunch"] for s in subnets.values())

    nat = plan.one("aws:ec2/natGateway:NatGateway").inputs
    public_id = next(r.id for r in plan.of_type(SUBNET) if r.name.endswith("-public"))
    assert nat["subnetId"] == public_id
    private_rt = next(r for r in plan.of_type("aws:ec2/routeTable:RouteTable") if r.name.endswith("private-rt"))
    assert private_rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "natGatewayId": plan.one("aws:ec2/natGateway:NatGateway").id}]

    endpoint = plan.one("aws:ec2/vpcEndpoint:VpcEndpoint").inputs
    assert endpoint["serviceName"] == "com.amazonaws.us-east-1.s3" and endpoint["vpcEndpointType"] == "Gateway"
    assert endpoint["routeTableIds"] == [private_rt.id]

    flow_log = plan.one("aws:ec2/flowLog:FlowLog")
    # It publishes with its role from the start: the role's policy exists before it does.
    [policy] = [r for r in plan.of_type("aws:iam/rolePolicy:RolePolicy") if r.name.endswith("-flow-logs-policy")]
    assert policy.urn in flow_log.dependencies
    flow = flow_log.inputs
    assert flow["vpcId"] == plan.one(VPC).id
    assert flow["trafficType"] in ("ALL", "REJECT") and flow["logDestinationType"] == "cloud-watch-logs"
    assert flow["logDestination"] == plan.one("aws:cloudwatch/logGroup:LogGroup").outputs["arn"]


def test_node_security_group_only_wide_rule_is_itself(sample_plan):
    plan = sample_plan("aws-large")
    sg = _node_sg(plan)
    ingress = _rules_of(plan, INGRESS, sg.id)
    egress = _rules_of(plan, EGRESS, sg.id)
    # Exactly one all-traffic ingress rule, and it references the group itself (EFA).
    wide = [r for r in ingress if r["ipProtocol"] == "-1"]
    assert len(wide) == 1 and wide[0]["referencedSecurityGroupId"] == sg.id and "cidrIpv4" not in wide[0]
    # Everything else inbound is the Lustre client ports, from the file system's group only.
    fsx_sg = plan.one("aws:fsx/lustreFileSystem:LustreFileSystem").inputs["securityGroupIds"][0]
    rest = [r for r in ingress if r["ipProtocol"] != "-1"]
    assert {(r["referencedSecurityGroupId"], r["ipProtocol"], r["fromPort"], r["toPort"]) for r in rest} == {
        (fsx_sg, "tcp", 988, 988), (fsx_sg, "tcp", 1018, 1023)}
    # Egress: to itself (EFA) and anywhere (NAT / S3).
    assert {r.get("referencedSecurityGroupId") or r.get("cidrIpv4") for r in egress} == {sg.id, "0.0.0.0/0"}
    # No ingress from anywhere on any security group of the cluster.
    assert not [r for r in plan.of_type(INGRESS) if r.inputs.get("cidrIpv4") == "0.0.0.0/0"]


def test_ssh_cidrs_open_port_22_to_those_ranges_only(render_cluster):
    plan = render_cluster("aws-entry", {"network": {"ssh_cidrs": ["203.0.113.0/24"]}})
    sg = _node_sg(plan)
    ssh = [r for r in _rules_of(plan, INGRESS, sg.id) if r["ipProtocol"] == "tcp"]
    assert ssh == [{**ssh[0], "cidrIpv4": "203.0.113.0/24", "fromPort": 22, "toPort": 22}]
    assert len(ssh) == 1


def test_existing_subnet_creates_no_vpc_and_places_nodes_there(render_cluster):
    plan = render_cluster("aws-large", {"network": {"existing_subnet_id": "subnet-0123456789abcdef0"}})
    assert not plan.of_type(VPC) and not plan.of_type(SUBNET) and not plan.of_type("aws:ec2/flowLog:FlowLog")
    nics = plan.one(LT).inputs["networkInterfaces"]
    assert {n["subnetId"] for n in nics} == {"subnet-0123456789abcdef0"}
    assert plan.one("aws:fsx/lustreFileSystem:LustreFileSystem").inputs["subnetIds"] == "subnet-0123456789abcdef0"
    # The security group is still made, in the subnet's VPC.
    assert _node_sg(plan).inputs["vpcId"].startswith("vpc-")
    assert plan.stack.outputs["subnet_id"] == "subnet-0123456789abcdef0"


AWS_STACKS = [s for s in SAMPLE_STACKS if s.startswith("aws-")]


@pytest.mark.parametrize("stack", AWS_STACKS)
def test_every_node_boots_after_its_routes_out_and_its_rules(sample_plan, stack):
    """The first boot installs packages and the CloudWatch agent, and cloud-init does not retry: no
    instance may start before the NAT route, the S3 endpoint and the group's rules exist (until the
    private table's association does, the subnet uses the VPC's main table: local route only)."""
    plan = sample_plan(stack)
    ready = {r.urn for r in plan.custom() if r.name.endswith(
        ("-network-private-rta", "-network-public-rta", "-network-s3", "-network-nodes-in-self",
         "-network-nodes-out-self", "-network-nodes-out-any"))}
    assert len(ready) == 6
    instances = plan.of_type("aws:ec2/instance:Instance")
    assert instances
    for instance in instances:
        assert ready <= set(instance.dependencies), instance.name


def test_in_a_shared_subnet_the_nodes_wait_for_the_rules_only(render_cluster):
    plan = render_cluster("aws-large", {"network": {"existing_subnet_id": "subnet-0123456789abcdef0"}})
    rules = {r.urn for r in plan.custom() if "-network-nodes-" in r.name and r.type in (INGRESS, EGRESS)}
    assert len(rules) == 3
    for instance in plan.of_type("aws:ec2/instance:Instance"):
        assert rules <= set(instance.dependencies), instance.name
