"""AWS compute role: placement group, launch template (EFA layout, IMDSv2, root), nodes and purchase."""

import json

import pytest

from components.aws.compute import market, network_interfaces, wants_placement_group
from conftest import gpu_nodes, stack_with

PG = "aws:ec2/placementGroup:PlacementGroup"
LT = "aws:ec2/launchTemplate:LaunchTemplate"
INSTANCE = "aws:ec2/instance:Instance"
SUBNET = "aws:ec2/subnet:Subnet"


def _nodes(plan):
    """The GPU nodes, in node order (the Slurm head node is an instance too: tests/test_slurm_wiring.py)."""
    return sorted(gpu_nodes(plan, INSTANCE), key=lambda r: int(r.name.rsplit("-", 1)[-1]))


def _node_subnet_id(plan):
    return next(r.id for r in plan.of_type(SUBNET) if r.name.endswith("-network-subnet"))


def test_pure_layout_and_rules():
    assert [(n.network_card_index, n.device_index, n.interface_type) for n in network_interfaces(4)] == [
        (0, 0, "efa"), (1, 0, "efa"), (2, 0, "efa"), (3, 0, "efa")]
    assert [n.interface_type for n in network_interfaces(0)] == [None]
    assert wants_placement_group(2, "entry") and wants_placement_group(1, "large")
    assert not wants_placement_group(1, "mid")
    assert [market("mixed", i) for i in range(3)] == ["on_demand", "spot", "spot"]
    assert market("spot", 0) == "spot" and market("on_demand", 5) == "on_demand"


def test_large_has_one_cluster_placement_group_and_32_efa_cards(sample_plan):
    plan = sample_plan("aws-large")
    group = plan.one(PG)
    assert group.inputs["strategy"] == "cluster"
    nodes = _nodes(plan)
    assert len(nodes) == 2
    assert {n.inputs["placementGroup"] for n in nodes} == {group.outputs["name"]}

    template = plan.one(LT).inputs
    assert template["instanceType"] == "p5.48xlarge"
    assert template["placement"]["groupName"] == group.outputs["name"]
    nics = template["networkInterfaces"]
    assert len(nics) == 32
    assert sorted(int(n["networkCardIndex"]) for n in nics) == list(range(32))
    # EFA (with ENA) on every card: the one EFA interface type the provider's schema validates.
    assert all(n["interfaceType"] == "efa" for n in nics)
    primary = [n for n in nics if n["networkCardIndex"] == 0]
    assert primary[0]["interfaceType"] == "efa" and primary[0]["deviceIndex"] == 0
    assert {n["subnetId"] for n in nics} == {_node_subnet_id(plan)}
    sg = next(r.id for r in plan.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-network-nodes"))
    assert all(n["securityGroups"] == [sg] and n["deleteOnTermination"] == "true" for n in nics)
    # No public IP: never requested (several interfaces) and the subnet maps none.
    assert not any(n.get("associatePublicIpAddress") == "true" for n in nics)


def test_imdsv2_encrypted_root_and_nodes_in_zone(sample_plan):
    plan = sample_plan("aws-large")
    template = plan.one(LT).inputs
    assert template["metadataOptions"]["httpTokens"] == "required"
    root = template["blockDeviceMappings"][0]
    assert root["deviceName"] == "/dev/sda1"
    assert root["ebs"] == {"volumeType": "gp3", "volumeSize": 500, "encrypted": "true", "deleteOnTermination": "true"}
    assert template["imageId"].startswith("ami-")
    for node in _nodes(plan):
        assert node.inputs["metadataOptions"]["httpTokens"] == "required"
        assert node.inputs["rootBlockDevice"]["encrypted"] is True
        assert node.inputs["launchTemplate"]["id"] == plan.one(LT).id
        assert node.inputs["availabilityZone"] == "us-east-1a"
        assert node.outputs["subnetId"] == _node_subnet_id(plan)
        assert "associatePublicIpAddress" not in node.inputs and "subnetId" not in node.inputs
        assert node.inputs["disableApiTermination"] is True  # critical
        assert "instanceMarketOptions" not in node.inputs  # on_demand
        # RunInstances takes Monitoring from the instance, never from the template (buildInstanceOpts):
        # the template may not promise a monitoring the nodes do not get.
        assert (template.get("monitoring") or {}).get("enabled", False) == node.inputs.get("monitoring", False)
    # Everything with a zone is in the cluster's zone.
    zones = {r.props["availabilityZone"] for r in plan.custom() if r.props.get("availabilityZone")}
    assert zones == {"us-east-1a"}


def test_entry_single_node_has_no_placement_group_and_plain_ena(sample_plan):
    plan = sample_plan("aws-entry")
    assert not plan.of_type(PG)
    template = plan.one(LT).inputs
    assert template["instanceType"] == "g4dn.xlarge"
    assert "groupName" not in template["placement"]
    assert template["networkInterfaces"] == [{
        "deviceIndex": 0, "networkCardIndex": 0, "subnetId": _node_subnet_id(plan),
        "securityGroups": template["networkInterfaces"][0]["securityGroups"],
        "deleteOnTermination": "true", "associatePublicIpAddress": "false"}]
    (node,) = [n.inputs for n in _nodes(plan)]
    assert "placementGroup" not in node and node["disableApiTermination"] is False


def test_mid_p4d_has_four_efa_cards_and_no_group_for_one_node(sample_plan):
    plan = sample_plan("aws-mid")
    nics = plan.one(LT).inputs["networkInterfaces"]
    assert [(n["networkCardIndex"], n["interfaceType"]) for n in nics] == [(0, "efa"), (1, "efa"), (2, "efa"), (3, "efa")]
    assert not plan.of_type(PG)


@pytest.mark.parametrize("purchase, expected", [
    ("mixed", ["on_demand", "spot", "spot"]),
    ("spot", ["spot", "spot", "spot"]),
])
def test_purchase_maps_to_per_node_market(render_cluster, purchase, expected):
    plan = render_cluster("aws-entry", {"nodes": 3, "purchase": purchase, "image_id": "ami-0123456789abcdef0"})
    nodes = _nodes(plan)
    seen = []
    for node in nodes:
        options = node.inputs.get("instanceMarketOptions")
        if options is None:
            seen.append("on_demand")
            continue
        assert options == {"marketType": "spot", "spotOptions": {
            "instanceInterruptionBehavior": "terminate", "spotInstanceType": "one-time"}}
        seen.append("spot")
        assert node.inputs["tags"]["gpu-cluster:market"] == "spot"
    assert seen == expected
    # Three entry nodes are packed too; the given image replaces the DLAMI lookup.
    assert plan.one(PG).inputs["strategy"] == "cluster"
    assert plan.one(LT).inputs["imageId"] == "ami-0123456789abcdef0"


def test_instance_role_is_least_privilege(sample_plan):
    plan = sample_plan("aws-large")
    attached = sorted(r.inputs["policyArn"] for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                      if "-compute-" in r.name)
    assert attached == ["arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy"]
    roles = {r.name: r for r in plan.of_type("aws:iam/role:Role")}
    node_role, job_role = roles["llm-large-compute-node-role"], roles["llm-large-compute-job-role"]
    inline = {r.name: json.loads(r.inputs["policy"]) for r in plan.of_type("aws:iam/rolePolicy:RolePolicy")
              if "-compute-" in r.name}
    bucket_arn = plan.one("aws:s3/bucket:Bucket").outputs["arn"]
    secret_arn = plan.one("aws:secretsmanager/secret:Secret").outputs["arn"]

    def grants(*names):
        return {(a, s["Resource"]) for n in names for s in inline[n]["Statement"]
                for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}

    # The node role: read the munge key, assume the jobs' role; no bucket (jobs reach it through their
    # own role, since the metadata service is closed to them).
    assert grants("llm-large-compute-node-role-munge-key", "llm-large-compute-node-role-job-role") == {
        ("secretsmanager:GetSecretValue", secret_arn), ("sts:AssumeRole", job_role.outputs["arn"])}
    # Session Manager and nothing else of Systems Manager (no parameter reads, no Run Command).
    assert grants("llm-large-compute-node-role-session-manager") == {
        (a, "*") for a in ("ssm:UpdateInstanceInformation", "ssmmessages:CreateControlChannel",
                           "ssmmessages:CreateDataChannel", "ssmmessages:OpenControlChannel",
                           "ssmmessages:OpenDataChannel")}
    # The jobs' role: the checkpoint bucket only, and only the node role may assume it.
    assert {res for _, res in grants("llm-large-compute-job-role-checkpoints")} == {bucket_arn, bucket_arn + "/*"}
    assert json.loads(job_role.inputs["assumeRolePolicy"])["Statement"] == [
        {"Effect": "Allow", "Principal": {"AWS": node_role.outputs["arn"]}, "Action": "sts:AssumeRole"}]
    assert set(inline) == {"llm-large-compute-node-role-munge-key", "llm-large-compute-node-role-job-role",
                           "llm-large-compute-job-role-checkpoints", "llm-large-compute-node-role-session-manager"}
    assert not [a for a, _ in grants(*inline) if "*" in a]


def test_no_role_of_any_aws_sample_reads_every_ssm_parameter(sample_plan):
    """AmazonSSMManagedInstanceCore let every process on a node read any SSM parameter of the account
    (ssm:GetParameter(s) on *); no role of the program may attach it or grant that."""
    for stack in ("aws-entry", "aws-mid", "aws-large", "aws-reserved", "aws-scheduled"):
        plan = sample_plan(stack)
        attached = [r.inputs["policyArn"] for r in plan.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")]
        assert not [a for a in attached if "AmazonSSMManagedInstanceCore" in a or a.endswith("AmazonSSMFullAccess")]
        for r in plan.of_type("aws:iam/rolePolicy:RolePolicy"):
            for statement in json.loads(r.inputs["policy"])["Statement"]:
                actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
                resources = [statement["Resource"]] if isinstance(statement["Resource"], str) else statement["Resource"]
                if "*" in resources:
                    assert not [a for a in actions if a.startswith(("ssm:GetParameter", "ssm:*"))], (stack, r.name)


def test_every_aws_slurm_node_closes_the_metadata_service_to_jobs(sample_plan):
    """A job that reached the node role could read the munge key and forge credentials for root on every
    node. On every AWS sample: IMDS hop limit 1 (no container a hop away), the guard in the boot of the
    head and every GPU node, and slurmd's TaskProlog pointing jobs at their own role's credentials."""
    from conftest import boot_documents, load_yaml

    for stack in ("aws-entry", "aws-mid", "aws-large", "aws-reserved", "aws-scheduled"):
        plan = sample_plan(stack)
        machines = [*plan.of_type("aws:ec2/launchTemplate:LaunchTemplate"), *plan.of_type("aws:ec2/instance:Instance")]
        assert machines and all(m.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1 for m in machines), stack
        docs = [load_yaml(text) for _, text in boot_documents(plan)]
        assert len(docs) == 2, stack  # the launch template's and the head node's
        for doc in docs:
            paths = {f["path"] for f in doc["write_files"]}
            assert "/opt/gpu-cluster/bin/metadata-guard" in paths, stack
        node_doc = next(d for d in docs if any(f["path"].endswith("/node-setup") for f in d["write_files"]))
        head_doc = next(d for d in docs if d is not node_doc)
        conf = next(f["content"] for f in head_doc["write_files"] if f["path"] == "/etc/slurm/slurm.conf")
        assert "TaskProlog=/opt/gpu-cluster/bin/task-prolog\n" in conf, stack
        job = next(f["content"] for f in node_doc["write_files"] if f["path"] == "/opt/gpu-cluster/bin/job-credentials")
        job_role = next(r for r in plan.of_type("aws:iam/role:Role") if r.name.endswith("-compute-job-role"))
        assert f"JOB_ROLE='{job_role.outputs['arn']}'" in job, stack


def test_critical_mixed_protects_only_the_on_demand_node(render_cluster):
    plan = render_cluster("aws-large", {"criticality": "critical", "purchase": "mixed", "nodes": 3})
    nodes = _nodes(plan)
    assert [(n.inputs.get("instanceMarketOptions") or {}).get("marketType") for n in nodes] == [None, "spot", "spot"]
    # EC2 refuses termination protection on spot instances.
    assert [n.inputs["disableApiTermination"] for n in nodes] == [True, False, False]


def test_nodes_ignore_template_changes_so_a_new_image_never_replaces_them():
    from conftest import rendered, stack_with

    regs = rendered(stack_with("aws-large")).registrations
    nodes = [r for r in regs if r.type == "aws:ec2/instance:Instance" and "gpu-cluster:node" in r.inputs["tags"]]
    assert len(nodes) == 2 and all(r.ignore_changes == ["launchTemplate"] for r in nodes)
    assert all(r.inputs["launchTemplate"]["version"] == "$Default" for r in nodes)
    # The Slurm head node ignores only a newer Ubuntu image (components/aws/head.py).
    others = [(r.name, r.ignore_changes) for r in regs if r.ignore_changes and r not in nodes]
    assert others == [("llm-large-head-instance", ["ami"])], "only the nodes (and the head node's image) ignore changes"


def test_the_shape_is_checked_as_offered_in_this_accounts_zone_before_anything_is_made():
    """Zone names are per account: a p5 zone in one account may have none in another. The preview asks
    DescribeInstanceTypeOfferings for the shape in the zone, and stops in one sentence when it is not."""
    import pulumi

    from components.aws.common import offered_in_zone
    from conftest import rendered, stack_with

    token = "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"
    result = rendered(stack_with("aws-large"))
    asked = {tuple(f["values"][0] for f in a["filters"]) for t, a in result.invokes if t == token}
    assert all(a["locationType"] == "availability-zone" for t, a in result.invokes if t == token)
    # The GPU shape and the Slurm head node's type, each in the cluster's zone.
    assert asked == {("p5.48xlarge", "us-east-1a"), ("m7i.large", "us-east-1a")}
    [template] = [r for r in result.registrations if r.type == LT]
    assert template.inputs["instanceType"] == "p5.48xlarge"
    assert offered_in_zone("p5.48xlarge", "us-east-1a", ["p5.48xlarge"]) == "p5.48xlarge"
    # Reserved capacity answers for its own zone: no offering lookup there.
    reserved = rendered(stack_with("aws-reserved"))
    assert {a["filters"][0]["values"][0] for t, a in reserved.invokes if t == token} <= {"m7i.large"}
    with pytest.raises(pulumi.RunError, match=r"cluster.instance_type=p5.48xlarge is not offered in "
                                              r"cluster.zone=us-east-1a for this account"):
        offered_in_zone("p5.48xlarge", "us-east-1a", [])


def test_a_shape_the_zone_does_not_offer_fails_the_render_in_one_sentence(monkeypatch):
    """Through the program: the lookup finding nothing stops the render (as it stops `pulumi preview`)."""
    import pulumi

    from conftest import stack_with
    from gpu_cluster import engine as mocks
    from gpu_cluster.render import render

    token = "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings"
    def offering_all_but(missing):
        return lambda args: {"id": "us-east-1", "instanceTypes": [
            v for f in args["filters"] if f["name"] == "instance-type" for v in f["values"] if v != missing]}

    monkeypatch.setitem(mocks.LOOKUPS, token, offering_all_but("p5.48xlarge"))
    with pytest.raises(pulumi.RunError, match=r"p5.48xlarge is not offered in cluster.zone=us-east-1a"):
        render(stack_with("aws-large"))
    # Only the head node's type missing: the same stop, naming the head node and the way out.
    monkeypatch.setitem(mocks.LOOKUPS, token, offering_all_but("m7i.large"))
    with pytest.raises(pulumi.RunError, match=r"the Slurm head node's type m7i.large is not offered .* scheduler: none"):
        render(stack_with("aws-large"))


@pytest.mark.parametrize("stack, vcpus, kinds", [
    ("aws-large", 384, ['"Running On-Demand P instances"']),
    ("aws-entry", 4, ['"Running On-Demand G and VT instances"']),
])
def test_the_plan_says_what_the_nodes_need_of_the_vcpu_quota(stack, vcpus, kinds):
    """RunInstances enforces the vCPU quota last, after the network and the storage exist: the plan names
    the quota and the count before `pulumi up`."""
    from gpu_cluster.render import read_stack_file, stack_path, validate

    notes = validate(read_stack_file(stack_path(stack))).notes
    [note] = [n for n in notes if n.startswith("EC2 vCPU quota:")]
    assert f"is {vcpus} vCPUs of " in note and all(k in note for k in kinds)
    mixed = validate(stack_with("aws-large", {"purchase": "mixed"}))
    [note] = [n for n in mixed.notes if n.startswith("EC2 vCPU quota:")]
    assert '"Running On-Demand P instances"' in note and '"All P Spot Instance Requests"' in note
