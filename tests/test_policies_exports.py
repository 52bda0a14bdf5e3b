"""`gpu-cluster check` on any export: stack export versions 3 and 4, DIY-backend state files, foreign
programs — and a sentence with exit status 2 (never a traceback, never 1) for what it cannot read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.cli import main
from gpu_cluster.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION
from gpu_cluster.plan import Plan
from gpu_cluster.policyrun import POLICIES
from policy_fixtures import judged_violations
from policy_fixtures import FIXTURES, preview_form

ROOT = Path(__file__).resolve().parent.parent
GPU_RULES = {"dedicated-subnet", "no-spot-only-critical", "single-zone", "placement-required", "rdma-enabled",
             "budget-alarm", "no-public-ip"}


def baseline() -> dict:
    return json.loads((FIXTURES / "aws-baseline.json").read_text())


def resources(doc: dict) -> list[dict]:
    return doc["deployment"]["resources"]


def write(tmp_path: Path, doc, name: str = "export.json") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def check(path: Path, capsys) -> tuple[int, str, str]:
    code = main(["check", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def spot_doc() -> dict:
    """The baseline with its nodes on spot: one mandatory violation, so a reader that drops resources shows."""
    doc = baseline()
    for r in resources(doc):
        if r["type"] == "aws:ec2/instance:Instance":
            r["inputs"]["instanceMarketOptions"] = {"marketType": "spot"}
    return doc


# ---- what it reads ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", [3, 4])
def test_stack_export_versions(tmp_path, capsys, version):
    doc = spot_doc()
    doc["version"] = version
    code, out, _ = check(write(tmp_path, doc), capsys)
    assert code == EXIT_VIOLATION and "no-spot-only-critical" in out


def test_diy_backend_state_file(tmp_path, capsys):
    doc = spot_doc()
    state = {"version": 3, "checkpoint": {"stack": "organization/gpu-cluster/fx", "config": {},
                                          "latest": doc["deployment"]}}
    code, out, _ = check(write(tmp_path, state), capsys)
    assert code == EXIT_VIOLATION and "no-spot-only-critical" in out
    clean = {"version": 4, "checkpoint": {"stack": "fx", "latest": baseline()["deployment"]}}
    assert check(write(tmp_path, clean, "clean.json"), capsys)[0] == EXIT_OK


def test_pending_deletion_is_skipped(tmp_path, capsys):
    """A replaced node left behind for deletion (`delete: true`) is not part of the stack any more."""
    doc = baseline()
    old = json.loads(json.dumps(next(r for r in resources(doc) if r["urn"].endswith("::llm-node-0"))))
    old["inputs"]["instanceMarketOptions"] = {"marketType": "spot"}
    old["inputs"]["associatePublicIpAddress"] = True
    old["delete"] = True
    resources(doc).append(old)
    plan = Plan.from_doc(doc)
    assert plan.skipped == 1 and len({r.urn for r in plan.resources}) == len(plan.resources)
    assert judged_violations(plan) == []
    code, _, err = check(write(tmp_path, doc), capsys)
    assert code == EXIT_OK and "1 pending deletion skipped" in err


def test_property_dependencies_are_kept(tmp_path, capsys):
    """A foreign machine whose subnet id is unknown still lands in the GPU subnet through propertyDependencies."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE
    doc = baseline()
    subnet = next(r for r in resources(doc) if r["urn"].endswith("::llm-subnet"))
    web = {"urn": subnet["urn"].replace("aws:ec2/subnet:Subnet::llm-subnet", "aws:ec2/instance:Instance::web-0"),
           "custom": True, "type": "aws:ec2/instance:Instance", "inputs": {
               "instanceType": "t3.large", "subnetId": UNKNOWN_STRING_VALUE, "metadataOptions": {"httpTokens": "required"},
               "rootBlockDevice": {"encrypted": True}, "tags": {"team": "web"}},
           "dependencies": [], "propertyDependencies": {"subnetId": [subnet["urn"]]}}
    resources(doc).append(web)
    plan = Plan.from_doc(doc)
    assert plan.by_urn()[web["urn"]].property_dependencies == {"subnetId": (subnet["urn"],)}
    assert {(v.policy, v.urn) for v in judged_violations(plan)} == {("dedicated-subnet", web["urn"])}


def test_foreign_program_gets_storage_words_not_gpu_rules(tmp_path, capsys):
    """A web project: no GPU rule speaks, and the storage rules talk about storage, not checkpoints."""
    stack = "urn:pulumi:prod::web::pulumi:pulumi:Stack::web-prod"
    prov = "urn:pulumi:prod::web::pulumi:providers:aws::default_7_0_0"
    def res(type_, name, **inputs):
        return {"urn": f"urn:pulumi:prod::web::{type_}::{name}", "type": type_, "custom": True, "id": name,
                "parent": stack, "provider": f"{prov}::p1", "inputs": inputs, "outputs": {"arn": f"arn:{name}"}}
    doc = {"version": 3, "deployment": {"manifest": {}, "resources": [
        {"urn": stack, "type": "pulumi:pulumi:Stack", "custom": False},
        {"urn": prov, "type": "pulumi:providers:aws", "custom": True, "id": "p1", "inputs": {"region": "eu-west-1"}},
        res("aws:s3/bucket:Bucket", "site", bucket="site-assets"),
        res("aws:lambda/function:Function", "api", runtime="python3.12", handler="app.handler", memorySize=512),
        res("aws:ec2/instance:Instance", "web-0", instanceType="t3.small", subnetId="subnet-0123",
            metadataOptions={"httpTokens": "required"}, rootBlockDevice={"encrypted": True}),
        res("aws:dynamodb/table:Table", "sessions", hashKey="id", billingMode="PAY_PER_REQUEST"),
    ]}}
    violations = judged_violations(Plan.from_doc(doc))
    assert violations and not {v.policy for v in violations} & GPU_RULES
    assert {v.policy for v in violations} == {"checkpoint-bucket-private", "stateful-protected"}
    assert all("checkpoint" not in v.message.lower() for v in violations)
    code, out, err = check(write(tmp_path, doc), capsys)
    assert code == EXIT_VIOLATION and "Traceback" not in out + err


def test_preview_form_of_a_rendered_plan_is_judged_alike():
    """A first preview of a real render (ids unknown) gets the same verdicts as the resolved render."""
    from conftest import rendered, stack_with

    for stack in ("aws-large", "tencent-large"):
        doc = rendered(stack_with(stack, {"purchase": "spot"})).plan()
        resolved = {(v.policy, v.urn) for v in judged_violations(Plan.from_doc(doc))}
        assert resolved and resolved == {(v.policy, v.urn) for v in judged_violations(Plan.from_doc(preview_form(doc)))}


# ---- what it refuses ------------------------------------------------------------------------------

def deep(n: int) -> str:
    return '{"version": 3, "deployment": {"resources": [{"urn": "urn:pulumi:s::p::t:m:T::x", "type": "t:m:T", "inputs": {"a": ' \
        + "[" * n + "]" * n + "}}]}}"


def bad_resource(**changes) -> dict:
    doc = baseline()
    node = next(r for r in resources(doc) if r["urn"].endswith("::llm-node-0"))
    for k, v in changes.items():
        if v is None:
            node.pop(k, None)
        else:
            node[k] = v
    return doc


MALFORMED = {
    "empty file": ("", "is not JSON"),
    "not json": ("{\"version\": 3, ", "is not JSON"),
    "NaN": ('{"version": 3, "deployment": {"resources": [], "x": NaN}}', "NaN is not a number JSON allows"),
    "Infinity": ('{"version": 3, "deployment": {"resources": [{"urn": "urn:pulumi:s::p::t:m:T::x", "type": "t:m:T", '
                 '"inputs": {"n": -Infinity}}]}}', "is not a number JSON allows"),
    "overflowing number": ('{"version": 3, "deployment": {"resources": [{"urn": "urn:pulumi:s::p::t:m:T::x", '
                           '"type": "t:m:T", "inputs": {"n": 1e999}}]}}', "too large to be a finite number"),
    "absurd nesting": (deep(100_000), "nests deeper"),
    "deep but parseable": (deep(200), "nests deeper than 64 levels"),
    "a list": ("[]", "expected a JSON object"),
    "null": ("null", "got nothing (null)"),
    "version 1": ({"version": 1, "deployment": {"resources": []}}, "understands stack export / checkpoint versions 3 and 4"),
    "version as text": ({"version": "3", "deployment": {"resources": []}}, "\"version\": \"3\""),
    "no deployment": ({"version": 3, "resources": []}, "neither \"deployment\""),
    "resources not a list": ({"version": 3, "deployment": {"resources": {"a": 1}}}, "resources must be a list"),
    "checkpoint not an object": ({"version": 3, "checkpoint": []}, "\"checkpoint\" must be an object"),
    "zero resources": ({"version": 3, "deployment": {"resources": []}}, "holds no resources to judge"),
    "never deployed": ({"version": 3, "checkpoint": {"stack": "s", "latest": None}}, "holds no resources to judge"),
    "only the stack": ({"version": 3, "deployment": {"resources": [
        {"urn": "urn:pulumi:s::p::pulumi:pulumi:Stack::p-s", "type": "pulumi:pulumi:Stack"}]}}, "holds no resources"),
    "resource not an object": ({"version": 3, "deployment": {"resources": ["urn:pulumi:s::p::t:m:T::x"]}},
                               "resource 0 must be an object"),
    "no urn": (bad_resource(urn=None), "a Pulumi URN looks like"),
    "inputs a list": (bad_resource(inputs=[1, 2]), "inputs must be an object"),
    "dependencies a string": (bad_resource(dependencies="urn:x"), "dependencies must be a list of URNs"),
    "protect a string": (bad_resource(protect="yes"), "protect must be true or false"),
    "propertyDependencies a list": (bad_resource(propertyDependencies=["a"]), "propertyDependencies must be an object"),
    "type a number": (bad_resource(type=7), "expected a type token"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_exports_are_a_sentence_and_exit_2(tmp_path, capsys, name):
    content, fragment = MALFORMED[name]
    path = write(tmp_path, content)
    code, out, err = check(path, capsys)
    assert code == EXIT_BAD_INPUT, out + err
    assert fragment in err and str(path) in err
    assert "Traceback" not in err and len(err.strip().splitlines()[-1]) < 400


def test_duplicate_urns_and_binary_files(tmp_path, capsys):
    doc = baseline()
    resources(doc).append(json.loads(json.dumps(resources(doc)[3])))
    code, _, err = check(write(tmp_path, doc), capsys)
    assert code == EXIT_BAD_INPUT and "appears twice" in err
    binary = tmp_path / "state.json.gz"
    binary.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
    assert check(binary, capsys)[0] == EXIT_BAD_INPUT


def test_a_broken_file_never_reaches_a_traceback_in_a_real_process(tmp_path):
    """The installed entry point, end to end: status 2 and one line on stderr."""
    path = write(tmp_path, deep(100_000))
    proc = subprocess.run([sys.executable, "-m", "gpu_cluster", "check", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_BAD_INPUT and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("error:")


def test_every_policy_runs_on_every_fixture_type_without_crashing():
    """Every policy sees every resource type of the fixtures with every property unknown or absent."""
    from pulumi_policy.proxy import UNKNOWN_STRING_VALUE
    from policy_fixtures import build, case_files

    seen = {}
    for path in case_files():
        for r in resources(build(json.loads(path.read_text()))):
            seen.setdefault(r["type"], r)
    for fill in (lambda v: UNKNOWN_STRING_VALUE, None):
        docs = []
        for r in seen.values():
            r = json.loads(json.dumps(r))
            r["inputs"] = {k: fill(v) for k, v in r.get("inputs", {}).items()} if fill else {}
            r.pop("id", None)
            docs.append(r)
        violations = judged_violations(Plan.from_doc({"version": 3, "deployment": {"resources": docs}}))
        assert all(not v.message.startswith("can't run") for v in violations)
        assert {v.policy for v in violations} <= {p.name for p in POLICIES}


def test_long_reads_report_progress(tmp_path, capsys, monkeypatch):
    """Large files say what they read and each step of the judging on stderr; results stay on stdout."""
    import gpu_cluster.commands.check as check_command
    monkeypatch.setattr(check_command, "PROGRESS_FROM", 10)
    code, out, err = check(write(tmp_path, baseline()), capsys)
    n = len(resources(baseline()))
    assert code == EXIT_OK and out.startswith("no policy violations")
    assert f"read {n} resources" in err and "judging with 14 policies" in err
    assert "resource policies" in err and "no-public-ssh" in err and f"judged {n} resources" in err
    monkeypatch.setattr(check_command, "PROGRESS_FROM", 10 * n)
    _, _, quiet = check(write(tmp_path, baseline()), capsys)
    assert "no-public-ssh" not in quiet
