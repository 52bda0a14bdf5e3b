"""The provider contracts: complete for what the program uses, true to the pinned SDKs, and enforced on
every render and by every mock."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpu_cluster.stackfile import ROOT

from conftest import rendered, stack_with
from gpu_cluster import contracts
from gpu_cluster.contracts import skeleton
from gpu_cluster.engine import COMPUTED
from gpu_cluster.render import SAMPLE_STACKS

# Variants that reach the types and functions the samples do not: shared subnets, spot, own images.
VARIANTS = [(s, {}) for s in SAMPLE_STACKS] + [
    ("aws-entry", {"network": {"existing_subnet_id": "subnet-0123456789abcdef0"}, "purchase": "spot"}),
    ("aws-large", {"storage": {"lustre": {"import_path": "s3://datasets/corpora/"}}}),
    ("tencent-entry", {"network": {"existing_subnet_id": "subnet-1a2b3c4d"}, "image_id": "img-abcd1234"}),
    ("tencent-mid", {"purchase": "mixed", "storage": {"scratch": "none"}}),
]


@pytest.fixture(scope="module")
def used() -> tuple[set[str], set[str]]:
    types, functions = set(), set()
    for stack, changes in VARIANTS:
        result = rendered(stack_with(stack, changes))  # raises ContractError on any broken rule
        types |= {r.type for r in result.registrations if r.custom and not r.type.startswith("pulumi:")}
        functions |= {token for token, _ in result.invokes}
    return types, functions


def test_every_type_and_function_the_program_uses_has_a_contract(used):
    types, functions = used
    assert len(types) >= 60 and len(functions) >= 8
    missing = sorted(t for t in types | functions if contracts.contract(t) is None)
    assert missing == [], f"no provider contract for {missing}: add them to gpu_cluster/contracts/<cloud>.yaml"
    assert all(contracts.contract(t).kind == "resource" for t in types)
    assert all(contracts.contract(f).kind == "function" for f in functions)


def test_every_function_names_the_api_actions_it_calls_and_the_readme_lists_exactly_those():
    """The deployer's credentials make the program's lookups: each function's contract names the cloud API
    actions its provider Read calls, and docs/clouds.md's read-permissions section (where the README's
    deploying section sends the reader) lists those and no others."""
    root = Path(__file__).resolve().parent.parent
    readme = root.joinpath("README.md").read_text()
    deploying = readme.split("## Deploying for real", 1)[1].split("\n## ", 1)[0]
    assert "docs/clouds.md" in deploying and "Read permissions of the deployer" in deploying
    clouds = root.joinpath("docs", "clouds.md").read_text()
    section = clouds.split("\n## Read permissions of the deployer\n", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z0-9]+:[A-Z][A-Za-z0-9]+)`", section))
    calls = set()
    for token, c in contracts.all_contracts().items():
        if c.kind == "function":
            assert c.calls is not None, f"{token}: the contract names no `calls`"
            assert all(re.fullmatch(r"[a-z0-9]+:[A-Z][A-Za-z0-9]+", a) for a in c.calls), (token, c.calls)
            calls |= set(c.calls)
        else:
            assert c.calls is None, f"{token}: `calls` is for functions"
    assert len(calls) >= 15
    assert listed == calls, f"docs/clouds.md lists {sorted(listed - calls)} that no function calls; misses {sorted(calls - listed)}"


def test_every_entry_cites_the_provider_source_of_the_pinned_version():
    for token, c in contracts.all_contracts().items():
        if token.startswith("aws:"):
            assert "hashicorp/terraform-provider-aws" in c.source or "pulumi-aws" in c.source, token
        else:
            assert "terraform-provider-tencentcloud v1.82.42" in c.source, token


@pytest.mark.parametrize("cloud", ["aws", "tencentcloud"])
def test_the_installed_provider_sdk_is_the_one_the_contracts_were_read_from(cloud):
    """An SDK other than the contracts' (an upstream release, a lock file moved on) fails here, before any
    render is trusted: read the contracts again from that version's source, then change their `sdk:`."""
    package, version = contracts.sdk(cloud)
    installed = contracts.installed_sdk_version(cloud)
    assert installed == version, (f"{package} {installed} is installed, but gpu_cluster/contracts/{cloud}.yaml "
                                  f"was read from {version}")
    lock = (ROOT / "requirements.lock").read_text()
    assert f"\n{package}=={version} " in lock, f"requirements.lock pins {package}=={version}"


def test_plans_carry_the_installed_provider_versions(sample_plan):
    from gpu_cluster import render

    assert render._PROVIDER_VERSIONS == {c: contracts.installed_sdk_version(c) for c in ("aws", "tencentcloud")}
    for stack, cloud in (("aws-entry", "aws"), ("tencent-entry", "tencentcloud")):
        versions = {r.inputs.get("version") for r in sample_plan(stack).resources
                    if r.type == f"pulumi:providers:{cloud}"}
        assert versions == {contracts.sdk(cloud)[1]}, (stack, versions)


def _sdk_paths(arguments: dict, prefix: str = "") -> set[str]:
    out = set()
    for name, entry in arguments.items():
        out.add(prefix + name)
        out |= _sdk_paths((entry or {}).get("fields") or {}, f"{prefix}{name}.")
    return out


@pytest.mark.parametrize("token", sorted(contracts.all_contracts()))
def test_contract_matches_the_pinned_sdk(token):
    """Every argument a contract names exists in the installed SDK, and nothing the SDK requires is
    missing from `required`: an SDK upgrade that changes them fails here, not in `pulumi up`."""
    c = contracts.contract(token)
    sdk = skeleton.skeleton(token)
    if c.kind == "resource":
        sdk_paths = _sdk_paths(sdk["arguments"])
        ours = {path for path, _ in c.paths()}
        assert ours <= sdk_paths, sorted(ours - sdk_paths)
        assert set(sdk["computed"]) <= c.computed, sorted(set(sdk["computed"]) - c.computed)
    else:
        assert set(c.arguments) <= set(sdk["arguments"]), sorted(set(c.arguments) - set(sdk["arguments"]))
        assert c.returns <= set(sdk["returns"]), sorted(c.returns - set(sdk["returns"]))
    assert set(sdk["required"]) <= set(c.required), sorted(set(sdk["required"]) - set(c.required))


def test_every_mock_computes_only_what_its_provider_computes():
    for token, compute in COMPUTED.items():
        outputs = compute("x", {"cidrBlock": "10.1.0.0/24", "fileSystemId": "fs-1", "topic": "arn:t"}, "id-1")
        values, problems = contracts.resource_outputs(token, outputs)
        assert problems == [], problems
        assert values == outputs


def test_a_mock_that_invents_an_output_is_a_failed_render():
    """The Tencent image lookup once answered a top-level imageId, which the provider's Read never sets
    (data_source_tc_images.go): every node then got no image, and `pulumi up` would have failed."""
    token = "tencentcloud:Images/getInstance:getInstance"
    result, problems = contracts.function_result(token, {"osName": "TencentOS"}, {"imageId": "img-1", "images": []})
    assert "imageId" not in result and result["osName"] == "TencentOS"
    assert problems and "returns imageId, which the provider never sets" in problems[0]


def test_the_check_names_resource_argument_rule_and_source():
    lt = "aws:ec2/launchTemplate:LaunchTemplate"
    [unknown] = contracts.check_resource(lt, "tmpl", {"networkInterfaces": [{"interfaceTyp": "efa"}]})
    assert "resource 'tmpl' (aws:ec2/launchTemplate:LaunchTemplate)" in unknown
    assert "networkInterfaces.interfaceTyp is not an argument" in unknown and "terraform-provider-aws" in unknown
    [value] = contracts.check_resource(lt, "tmpl", {"networkInterfaces": [{"interfaceType": "efa-x"}]})
    assert "networkInterfaces.interfaceType='efa-x' is not a documented value; allowed: efa, interface" in value
    [required] = contracts.check_resource("aws:ec2/placementGroup:PlacementGroup", "pg", {"strategy": None})
    assert "required argument strategy is null" in required
    [missing] = contracts.check_resource("tencentcloud:Instance/instance:Instance", "node",
                                         {"availabilityZone": "ap-shanghai-5", "instanceType": "GN7.2XLARGE32"})
    assert "one of the arguments imageId, launchTemplateId is required and none is set" in missing
    [rng] = contracts.check_resource("aws:fsx/lustreFileSystem:LustreFileSystem", "fs",
                                     {"subnetIds": "subnet-1", "deploymentType": "PERSISTENT_2",
                                      "automaticBackupRetentionDays": 120})
    assert "automaticBackupRetentionDays=120 is outside the documented range 0..90" in rng
    [unknown_type] = contracts.check_resource("aws:ec2/fleet:Fleet", "fleet", {})
    assert "no provider contract for this type" in unknown_type


ROLE = "aws:iam/role:Role"
TRUST = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow"}]}


def test_an_auto_named_role_is_checked_in_the_name_pulumi_gives_it():
    """IAM role names are 1-64 characters; with `name` unset the bridge names the role <logical name>-<7
    random hex>, so a 57-character logical name is one too many, and an explicit name is checked as given."""
    assert contracts.check_resource(ROLE, "r" * 56, {"assumeRolePolicy": TRUST}) == []
    [long] = contracts.check_resource(ROLE, "r" * 57, {"assumeRolePolicy": TRUST})
    assert "with name unset, Pulumi names it" in long and "(65 characters)" in long and "role.go" in long
    assert contracts.check_resource(ROLE, "r" * 57, {"assumeRolePolicy": TRUST, "name": "short"}) == []
    [given] = contracts.check_resource(ROLE, "r", {"assumeRolePolicy": TRUST, "name": "r" * 65})
    assert "does not match the documented form" in given


def test_the_longest_names_and_windows_stay_within_the_documented_limits():
    """Cluster names may have 24 characters; aws-scheduled has the longest role names (the cost controls'
    `<cluster>-cost-controls-budget-stop-role`, 63 characters once auto-named). With the 14 windows a
    schedule may have and the longest time zone, the schedules' names and descriptions (at most 512
    characters) also keep their contract: the render checks them all."""
    from components.spec import _time_zones

    zone = max(_time_zones(), key=len)
    windows = [f"{day} {hours}" for day in ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
               for hours in ("00:00-11:00", "12:00-23:00")]
    # Without Slurm, whose power saving keeps the windows on the head node instead of in schedules.
    regs = rendered(stack_with("aws-scheduled", {"name": "a" * 24, "schedule": {"timezone": zone, "windows": windows},
                                                 "scheduler": "none",
                                                 "idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 60}})
                    ).registrations
    roles = [r for r in regs if r.type == ROLE]
    assert roles and max(len(r.name) + contracts.AUTONAME_SUFFIX for r in roles) == 63
    schedules = [r for r in regs if r.type == "aws:scheduler/schedule:Schedule"]
    assert schedules and all(r.inputs["scheduleExpressionTimezone"] == zone for r in schedules)
    assert all(all(w in r.inputs["description"] for w in windows) for r in schedules)
    assert max(len(r.inputs["description"]) for r in schedules) <= 512


def test_cam_ids_are_numbers_as_the_provider_sets_them_and_the_attachment_needs_them():
    """The provider parses a role policy attachment's policy_id as a number (strconv.Atoi) and fails the
    create otherwise; CAM role and policy ids are numbers, so the mocks answer numbers and the check
    refuses anything else."""
    attach = "tencentcloud:Cam/rolePolicyAttachment:RolePolicyAttachment"
    [bad] = contracts.check_resource(attach, "a", {"roleId": "4611686018427387905", "policyId": "tc-lab-policy-1a2b"})
    assert "policyId='tc-lab-policy-1a2b' does not match the documented form [0-9]+" in bad
    regs = rendered(stack_with("tencent-scheduled")).registrations
    roles = {r.name: r.id for r in regs if r.type == "tencentcloud:Cam/role:Role"}
    policies = {r.name: r.id for r in regs if r.type == "tencentcloud:Cam/policy:Policy"}
    assert roles and all(i.isdigit() and len(i) == 19 for i in roles.values())
    assert all(i.isdigit() and len(i) == 9 for i in policies.values())
    attachments = [r.inputs for r in regs if r.type == attach]
    # each policy attached once, to its own role: <cluster>-<who>-role takes <cluster>-<who>[-power]-policy
    by_id = {i: n for n, i in policies.items()}
    assert sorted(a["policyId"] for a in attachments) == sorted(policies.values())
    assert all(by_id[a["policyId"]].startswith(next(n for n, i in roles.items() if i == a["roleId"])[:-len("role")])
               for a in attachments)


def test_ids_the_provider_builds_from_arguments_are_mocked_in_its_form():
    """COS bucket, SCF function and role policy attachment ids are made of their own arguments (each
    Create's d.SetId); the bucket URL names the stack's region, not a fixed one."""
    # without Slurm, whose power saving stops the nodes, the schedule is the cost-controls function's
    stack = stack_with("tencent-scheduled", {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5}})
    regs = {r.type: r for r in rendered(stack).registrations}
    bucket = regs["tencentcloud:Cos/bucket:Bucket"]
    assert bucket.id == bucket.inputs["bucket"] and bucket.id.endswith("-1250000000")
    assert stack.config["tencentcloud:region"] == "ap-guangzhou"
    assert bucket.outputs["cosBucketUrl"] == f"{bucket.id}.cos.ap-guangzhou.myqcloud.com"
    function = regs["tencentcloud:Scf/function:Function"]
    assert function.id == f"default+{function.inputs['name']}" and "namespace" not in function.inputs
    attach = regs["tencentcloud:Cam/rolePolicyAttachment:RolePolicyAttachment"]
    assert attach.id == f"{attach.inputs['roleId']}#{attach.inputs['policyId']}"


def test_numbers_compare_by_value_and_booleans_also_as_text():
    assert contracts.check_resource("aws:cloudwatch/logGroup:LogGroup", "g", {"retentionInDays": 90.0}) == []
    assert contracts.check_resource("aws:ec2/launchTemplate:LaunchTemplate", "t",
                                    {"networkInterfaces": [{"associatePublicIpAddress": "false"}]}) == []


def test_the_review_takes_replacement_and_refusals_from_the_contracts():
    from gpu_cluster.plan import Resource
    from gpu_cluster.review import diff_resource

    def pair(type_, before, after):
        return (Resource(urn="urn:pulumi:s::p::t::r", type=type_, custom=True, inputs=before),
                Resource(urn="urn:pulumi:s::p::t::r", type=type_, custom=True, inputs=after))

    fsx = "aws:fsx/lustreFileSystem:LustreFileSystem"
    assert diff_resource(*pair(fsx, {"storageCapacity": 4800}, {"storageCapacity": 7200})).action == "change"
    shrink = diff_resource(*pair(fsx, {"storageCapacity": 4800}, {"storageCapacity": 2400}))
    assert shrink.action == "replace" and "storageCapacity: 4800 → 2400 (shrinks)" in shrink.why
    cfs = diff_resource(*pair("tencentcloud:Cfs/fileSystem:FileSystem", {"capacity": 40960}, {"capacity": 61440}))
    assert cfs.action == "change" and "the provider cannot make this change" in cfs.why
    node = "tencentcloud:Instance/instance:Instance"
    # user data is updated in place on Tencent (force-new only with userDataReplaceOnChange).
    assert diff_resource(*pair(node, {"userDataRaw": "a"}, {"userDataRaw": "b"})).action == "change"
    assert diff_resource(*pair(node, {"hpcClusterId": "hpc-1"}, {"hpcClusterId": "hpc-2"})).action == "replace"
    lt = diff_resource(*pair("aws:ec2/launchTemplate:LaunchTemplate", {"name": "a"}, {"name": "b"}))
    assert lt.action == "replace"


@pytest.mark.parametrize("type_, inputs, bad", [
    # The DLM API takes only letters, digits, spaces, _ and - (lifecycle_policy.go; PolicyDescription)
    ("aws:dlm/lifecyclePolicy:LifecyclePolicy", {"executionRoleArn": "arn", "policyDetails": {}},
     "ml-backup: data volumes every 24 h, keep 7"),
    # IAM CreateRole takes Latin-1 descriptions only (roleDescriptionType); the provider checks curly quotes only
    ("aws:iam/role:Role", {"assumeRolePolicy": "{}"}, "VPC flow logs of ml → CloudWatch Logs"),
])
def test_descriptions_the_api_refuses_fail_the_render_and_the_samples_keep_to_them(type_, inputs, bad):
    [problem] = contracts.check_resource(type_, "r", {**inputs, "description": bad})
    assert "description=" in problem and "does not match the documented form" in problem
    for stack in ("aws-entry", "aws-scheduled"):
        descriptions = [r.inputs["description"] for r in rendered(stack_with(stack)).registrations
                        if r.type == type_ and "description" in r.inputs]
        assert descriptions and not [d for d in descriptions
                                     if contracts.check_resource(type_, "r", {**inputs, "description": d})]


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_a_disk_attachment_is_released_before_its_replacement_takes_the_disk(stack):
    """Both providers attach a replaced node's disk to the new node without detaching it from the old one
    (their contracts' delete_before_replace): every attachment is registered to go first, head nodes too."""
    from conftest import slurm_rendered

    attachments = ("aws:ec2/volumeAttachment:VolumeAttachment", "tencentcloud:Cbs/storageAttachment:StorageAttachment")
    regs = [r for r in slurm_rendered(stack).registrations if r.type in attachments]
    assert regs, stack
    assert [r.name for r in regs if not r.delete_before_replace] == []
    for type_ in {r.type for r in regs}:
        [problem] = contracts.check_resource(type_, "a", regs[0].inputs, delete_before_replace=False)
        assert "register it with delete_before_replace=True" in problem
