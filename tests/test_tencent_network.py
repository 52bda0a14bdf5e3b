"""Tencent network: VPC, subnet in the zone, security group, NAT egress, flow logs, shared subnet."""

import ipaddress
import re

import pytest

from components.tencentcloud.addressing import node_subnet, turbo_cidr
from conftest import inputs_of, stack_with
from gpu_cluster.stackfile import SAMPLE_STACKS

VPC = "tencentcloud:Vpc/instance:Instance"
SUBNET = "tencentcloud:Subnet/instance:Instance"
RULES = "tencentcloud:Security/groupRuleSet:GroupRuleSet"
INSTANCE = "tencentcloud:Instance/instance:Instance"


def test_vpc_and_one_subnet_in_the_zone(sample_plan):
    plan = sample_plan("tencent-mid")
    assert plan.one(VPC).inputs["cidrBlock"] == "10.52.0.0/16"
    subnet = plan.one(SUBNET).inputs
    assert subnet["availabilityZone"] == "ap-shanghai-5"
    assert subnet["cidrBlock"] == "10.52.0.0/17"
    assert subnet["vpcId"] == plan.one(VPC).id
    assert all(i["subnetId"] == plan.one(SUBNET).id for i in inputs_of(plan, INSTANCE))


def test_security_group_admits_only_its_members_by_default(sample_plan):
    plan = sample_plan("tencent-entry")
    group = plan.one("tencentcloud:Security/group:Group")
    ingresses = plan.one(RULES).inputs["ingresses"]
    assert ingresses == [{"action": "ACCEPT", "protocol": "ALL", "port": "all", "sourceSecurityId": group.id,
                          "description": ingresses[0]["description"]}]
    assert not any(r.get("cidrBlock") in ("0.0.0.0/0", "::/0") for r in ingresses)
    assert all(i["orderlySecurityGroups"] == [group.id] and i["allocatePublicIp"] is False
               for i in inputs_of(plan, INSTANCE))


def test_ssh_cidrs_open_port_22_to_those_ranges_only(render_cluster):
    plan = render_cluster("tencent-entry", {"network": {"ssh_cidrs": ["203.0.113.0/24"]}})
    ssh = [r for r in plan.one(RULES).inputs["ingresses"] if r.get("port") == "22"]
    assert ssh == [{"action": "ACCEPT", "protocol": "TCP", "port": "22", "cidrBlock": "203.0.113.0/24",
                    "description": ssh[0]["description"]}]


def test_lustre_clients_accept_lnet_from_the_turbo_range(sample_plan):
    ingresses = sample_plan("tencent-large").one(RULES).inputs["ingresses"]
    assert {"port": "988", "cidrBlock": "10.51.0.0/24"}.items() <= next(r for r in ingresses if r.get("port") == "988").items()


def test_egress_leaves_through_a_standard_nat_gateway_with_enough_eips(sample_plan, render_cluster):
    plan = sample_plan("tencent-mid")
    eips = sorted(plan.of_type("tencentcloud:Eip/instance:Instance"), key=lambda r: r.name)
    nat = plan.one("tencentcloud:Nat/gateway:Gateway")
    # The default 500 Mbps: five 100 Mbps traffic-billed EIPs (the most one such EIP carries) behind a
    # standard NAT gateway (5000 Mbps; the traditional product defaults to 100).
    assert [e.inputs["internetMaxBandwidthOut"] for e in eips] == [100] * 5
    assert {e.inputs["internetChargeType"] for e in eips} == {"TRAFFIC_POSTPAID_BY_HOUR"}
    assert sorted(nat.inputs["assignedEipSets"]) == sorted(e.outputs["publicIp"] for e in eips)
    assert nat.inputs["natProductVersion"] == 2 and "bandwidth" not in nat.inputs
    small = render_cluster("tencent-mid", {"network": {"egress_mbps": 150}})
    assert sorted(e.inputs["internetMaxBandwidthOut"] for e in small.of_type("tencentcloud:Eip/instance:Instance")) == [
        50, 100]
    assert nat.inputs["vpcId"] == plan.one(VPC).id
    route = plan.one("tencentcloud:Route/tableEntry:TableEntry").inputs
    assert route["destinationCidrBlock"] == "0.0.0.0/0" and route["nextType"] == "NAT" and route["nextHub"] == nat.id
    assert plan.one(SUBNET).inputs["routeTableId"] == plan.one("tencentcloud:Route/table:Table").id


def test_flow_logs_only_when_the_account_can_have_them(sample_plan, render_cluster):
    """CreateFlowLog takes VPC and SUBNET only from allowlisted accounts (the API's ResourceType doc at
    v1.82.42), and NAT flow logs are in beta behind a ticket: none by default, the VPC's on request."""
    plan = sample_plan("tencent-mid")
    assert plan.of_type("tencentcloud:Vpc/flowLog:FlowLog") == [] and plan.of_type("tencentcloud:Cls/topic:Topic") == []
    plan = render_cluster("tencent-mid", {"network": {"flow_logs": True}})
    log = plan.one("tencentcloud:Vpc/flowLog:FlowLog").inputs
    assert log["resourceType"] == "VPC" and log["resourceId"] == plan.one(VPC).id
    assert log["storageType"] == "cls" and log["cloudLogId"] == plan.one("tencentcloud:Cls/topic:Topic").id
    assert log["trafficType"] == "ALL"
    shared = render_cluster("tencent-entry", {"network": {"existing_subnet_id": "subnet-abcd1234", "flow_logs": True}})
    log = shared.one("tencentcloud:Vpc/flowLog:FlowLog").inputs
    assert log["resourceType"] == "SUBNET" and log["resourceId"] == "subnet-abcd1234"


def test_mock_ids_take_the_forms_the_provider_gives_them(sample_plan, render_cluster):
    """What each Create sets as the id (v1.82.42): CLS ids are UUIDs, composite ids join their parts
    with "#", a route entry's is "<number>.<route table id>" — a program that reads one gets that."""
    logged = render_cluster("tencent-mid", {"network": {"flow_logs": True}})
    uuid = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
    logset, topic = logged.one("tencentcloud:Cls/logset:Logset"), logged.one("tencentcloud:Cls/topic:Topic")
    assert re.fullmatch(uuid, logset.id) and re.fullmatch(uuid, topic.id) and logset.id != topic.id
    assert topic.inputs["logsetId"] == logset.id
    assert re.fullmatch(r"fl-[0-9a-z]{8}#" + re.escape(logged.one(VPC).id),
                        logged.one("tencentcloud:Vpc/flowLog:FlowLog").id)
    plan = sample_plan("tencent-large")
    entry = plan.one("tencentcloud:Route/tableEntry:TableEntry")
    assert re.fullmatch(r"[0-9]+\." + re.escape(entry.inputs["routeTableId"]), entry.id)
    joined = {"tencentcloud:Cbs/snapshotPolicyAttachment:SnapshotPolicyAttachment": ("storageId", "snapshotPolicyId"),
              "tencentcloud:Cfs/autoSnapshotPolicyAttachment:AutoSnapshotPolicyAttachment": (
                  "autoSnapshotPolicyId", "fileSystemIds"),
              "tencentcloud:Ccn/attachmentV2:AttachmentV2": ("ccnId", "instanceType", "instanceRegion", "instanceId")}
    for attachment in plan.of_type("tencentcloud:Cbs/storageAttachment:StorageAttachment"):
        assert attachment.id == attachment.inputs["storageId"]
    for type_, keys in joined.items():
        found = plan.of_type(type_)
        assert found, type_
        assert all(r.id == "#".join(r.inputs[k] for k in keys) for r in found), type_



def test_existing_subnet_is_used_and_nothing_networky_is_created(render_cluster):
    plan = render_cluster("tencent-entry", {"network": {"existing_subnet_id": "subnet-abcd1234"}})
    for type_ in (VPC, SUBNET, "tencentcloud:Nat/gateway:Gateway", "tencentcloud:Eip/instance:Instance"):
        assert plan.of_type(type_) == []
    for node in inputs_of(plan, INSTANCE):  # the GPU node and the Slurm head node
        assert node["subnetId"] == "subnet-abcd1234"
        assert node["vpcId"].startswith("vpc-")


def test_every_network_resource_is_tagged(sample_plan):
    plan = sample_plan("tencent-mid")
    for type_ in (VPC, SUBNET, "tencentcloud:Security/group:Group", "tencentcloud:Nat/gateway:Gateway",
                  "tencentcloud:Eip/instance:Instance", "tencentcloud:Cls/topic:Topic"):
        for r in plan.of_type(type_):
            assert r.inputs["tags"]["gpu-cluster:name"] == "tc-mid", type_
            assert r.inputs["tags"]["managed-by"] == "pulumi", type_


def test_node_subnet_is_the_first_half_and_turbo_range_never_overlaps_the_vpc():
    for cidr in ("10.50.0.0/16", "10.51.0.0/16", "172.31.0.0/16", "192.168.0.0/16", "192.168.4.0/24"):
        vpc = ipaddress.ip_network(cidr)
        assert node_subnet(vpc) == next(vpc.subnets(prefixlen_diff=1))
        turbo = turbo_cidr(vpc)
        assert not turbo.overlaps(vpc) and turbo.is_private and turbo.prefixlen == 24, cidr
    assert str(turbo_cidr(ipaddress.ip_network("10.50.0.0/16"))) == "10.51.0.0/24"


@pytest.mark.parametrize("stack", [s for s in SAMPLE_STACKS if s.startswith("tencent-")])
def test_every_node_boots_after_its_route_out_and_its_rules(sample_plan, stack):
    """The first boot downloads the driver installer and the Turbo client: no instance may start before
    the NAT route entry and the security group's rules exist (a group without rules lets nothing out)."""
    plan = sample_plan(stack)
    ready = {plan.one("tencentcloud:Route/tableEntry:TableEntry").urn,
             plan.one("tencentcloud:Security/groupRuleSet:GroupRuleSet").urn}
    instances = plan.of_type("tencentcloud:Instance/instance:Instance")
    assert instances
    for instance in instances:
        assert ready <= set(instance.dependencies), instance.name


def test_the_tencent_head_node_waits_for_the_network_too(slurm_plan):
    plan = slurm_plan("tencent-large")
    [head] = [r for r in plan.of_type("tencentcloud:Instance/instance:Instance") if r.name == "tc-large-head"]
    assert plan.one("tencentcloud:Route/tableEntry:TableEntry").urn in head.dependencies
    assert plan.one("tencentcloud:Security/groupRuleSet:GroupRuleSet").urn in head.dependencies


def test_the_notes_say_whether_there_are_flow_logs_and_what_they_need():
    from components.spec import SpecError
    from gpu_cluster.render import read_stack_file, stack_path, validate

    mid = validate(read_stack_file(stack_path("tencent-mid")))
    assert mid.spec.network.flow_logs is False
    assert any(n.startswith("network.flow_logs=false: no flow logs") and "allowlisted" in n for n in mid.notes)
    on = validate(stack_with("tencent-entry", {"network": {"existing_subnet_id": "subnet-abcd1234", "flow_logs": True}}))
    assert any(n.startswith("network.flow_logs=true: the subnet's flows") for n in on.notes)
    with pytest.raises(SpecError, match=r"cluster.network.flow_logs=False: an AWS cluster always logs"):
        validate(stack_with("aws-entry", {"network": {"flow_logs": False}}))
