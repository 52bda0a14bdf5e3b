"""The pack loads where users run it, and says over the wire what the offline runner says.

This starts the pack the way the Pulumi CLI does for a Python policy pack: the CLI's analyzer launcher
(pulumi/pulumi sdk/python/dist/pulumi-analyzer-policy-python) runs, in the pack directory,

    <virtualenv from PulumiPolicy.yaml>/bin/python -u -m pulumi.policy <engine address> .

and reads the port of the analyzer's gRPC server from the first line of its standard output. The test
does exactly that on an isolated copy of `policies/` whose virtualenv is built (by uv) from
`policies/requirements.lock` alone (nothing of the project's own environment), then speaks the analyzer
protocol to it (pulumi's analyzer.proto, as generated in the `pulumi` package: GetAnalyzerInfo,
Configure, Analyze, AnalyzeStack) and asserts that, on every policy fixture in both its forms
(resolved ids, and a first preview's unknown ids), the pack reports exactly the violations — policy,
resource, enforcement level and message — that `gpu_cluster.policyrun.run_policies` reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from gpu_cluster.plan import Plan
from gpu_cluster.policyrun import POLICIES, analyzed, reconciled_config, run_policies
from policy_fixtures import FORMS, case_files, load

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {"advisory": analyzer_pb2.ADVISORY, "mandatory": analyzer_pb2.MANDATORY,
          "remediate": analyzer_pb2.REMEDIATE, "disabled": analyzer_pb2.DISABLED}
NAMES = {v: k for k, v in LEVELS.items()}


def _pack_env() -> dict[str, str]:
    """The environment of a process of the pack's own venv: nothing of the project's."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}


@pytest.fixture(scope="module")
def analyzer(tmp_path_factory):
    """A running analyzer of an isolated copy of the pack, and a stub to talk to it."""
    pack = tmp_path_factory.mktemp("pack") / "policies"
    shutil.copytree(ROOT / "policies", pack, ignore=shutil.ignore_patterns("venv", "__pycache__", "*.pyc"))
    env = _pack_env()
    python = pack / "venv" / "bin" / "python"
    # uv installs the lock file exactly as `make policy-venv` does; the venv gets nothing but what it pins.
    subprocess.run([sys.executable, "-m", "uv", "venv", "--quiet", "--python", sys.executable, str(pack / "venv")],
                   check=True, env=env, timeout=300)
    subprocess.run([sys.executable, "-m", "uv", "pip", "install", "--quiet", "--python", str(python), "--require-hashes",
                    "-r", str(pack / "requirements.lock")], check=True, env=env, timeout=900)
    proc = subprocess.Popen([str(python), "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."], cwd=pack, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().strip()
        assert line.isdigit(), f"the pack printed {line!r} instead of its port; stderr: {proc.stderr.read()}"
        channel = grpc.insecure_channel(f"127.0.0.1:{line}", options=[("grpc.max_receive_message_length", 64 << 20)])
        grpc.channel_ready_future(channel).result(timeout=60)
        yield analyzer_pb2_grpc.AnalyzerStub(channel), python
        channel.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def struct(value: dict) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(value)
    return s


def _props(res, stack: bool) -> dict:
    props = ({**res.outputs, **res.inputs} if res.inputs else dict(res.outputs)) if stack else \
        dict(res.inputs if res.inputs else res.outputs)
    if res.id and "id" not in props:
        props["id"] = res.id  # what the offline runner adds, as a live engine's outputs would carry it
    return props


def _options(res) -> analyzer_pb2.AnalyzerResourceOptions:
    return analyzer_pb2.AnalyzerResourceOptions(protect=res.protect, parent=res.parent)


def _provider(res, by_urn) -> dict:
    if not res.provider:
        return {}
    urn = res.provider.rsplit("::", 1)[0] if res.provider.count("::") > 3 else res.provider
    prov = by_urn.get(urn)
    if prov is None:
        return {}
    return {"provider": analyzer_pb2.AnalyzerProviderResource(type=prov.type, properties=struct(prov.props),
                                                               urn=prov.urn, name=prov.name)}


def over_the_wire(stub, plan: Plan, config_key: bytes, answered: dict) -> set[tuple[str, str, str, str]]:
    """(policy, urn, enforcement, message) of every diagnostic the analyzer returns for `plan`, configured
    as `config_key` says; `answered` keeps the calls made so far, by configuration and request."""
    by_urn = plan.by_urn()
    descriptions = {p.name: p.description for p in POLICIES}
    found = set()

    def collect(response, urn_default: str) -> None:
        for d in response.diagnostics:
            message = d.message
            prefix = descriptions.get(d.policyName, "") + "\n"
            if message.startswith(prefix):
                message = message[len(prefix):]
            elif message == descriptions.get(d.policyName):
                pass
            found.add((d.policyName, d.urn or urn_default, NAMES[d.enforcementLevel], message))

    # The engine analyzes resources as their steps run, several at once; so does this, and a unary call
    # then costs the server's work instead of a round trip's wait. A request byte for byte equal to one
    # already answered under the same configuration (most fixtures change one resource of a baseline)
    # gets that answer again: `Analyze` judges the request alone, so asking twice would only cost time.
    pending = []
    for res in analyzed(plan):
        request = analyzer_pb2.AnalyzeRequest(
            type=res.type, properties=struct(_props(res, False)), urn=res.urn, name=res.name,
            options=_options(res), **_provider(res, by_urn))
        key = (config_key, request.SerializeToString(deterministic=True))
        if key not in answered:
            answered[key] = stub.Analyze.future(request)
        pending.append((answered[key], res.urn))
    stack = analyzer_pb2.AnalyzeStackRequest(resources=[
        analyzer_pb2.AnalyzerResource(
            type=r.type, properties=struct(_props(r, True)), urn=r.urn, name=r.name, options=_options(r),
            parent=r.parent, dependencies=list(r.dependencies),
            propertyDependencies={k: analyzer_pb2.AnalyzerPropertyDependencies(urns=list(v))
                                  for k, v in r.property_dependencies.items()},
            **_provider(r, by_urn))
        # What `check` hands the pack: a resource read with `.get()` (`external`) is left out, as
        # gpu_cluster.policyrun does (the engine sends it like a created one: docs/policies.md, "Unknowns").
        for r in plan.resources if not r.external])
    key = (config_key, b"stack", stack.SerializeToString(deterministic=True))
    if key not in answered:
        answered[key] = stub.AnalyzeStack.future(stack)
    pending.append((answered[key], ""))
    for call, urn in pending:
        collect(call.result(), urn)
    return found


def offline(plan: Plan, config) -> set[tuple[str, str, str, str]]:
    return {(v.policy, v.urn, v.enforcement, v.message) for v in run_policies(plan, config)}


def test_the_pack_describes_its_14_policies(analyzer):
    stub, _ = analyzer
    info = stub.GetAnalyzerInfo(empty_pb2.Empty())
    assert info.name == "gpu-cluster-guardrails" and info.supportsConfig
    assert [(p.name, p.description, NAMES[p.enforcementLevel]) for p in info.policies] == \
        [(p.name, p.description, p.enforcement_level.value) for p in POLICIES]
    assert len(info.policies) == 14
    for p, mine in zip(info.policies, POLICIES):
        assert set(p.configSchema.properties.keys()) == set(mine.config_schema.properties)


def test_the_pack_venv_holds_only_its_requirements(analyzer):
    """The pack runs on pulumi + pulumi-policy alone: not the providers, not the project's packages."""
    _, python = analyzer
    out = subprocess.run([str(python), "-c", "import importlib.util as u; print([m for m in "
                          "('pulumi_aws', 'tencentcloud_iac_pulumi', 'gpu_cluster', 'components', 'rich') "
                          "if u.find_spec(m)])"], capture_output=True, text=True, check=True,
                         cwd=python.parent.parent.parent, env=_pack_env()).stdout.strip()
    assert out == "[]"


def configuration(plan: Plan, config) -> analyzer_pb2.ConfigureAnalyzerRequest:
    """The Configure request the engine sends for `plan` under `config`."""
    settings = reconciled_config(plan, config)
    return analyzer_pb2.ConfigureAnalyzerRequest(policyConfig={
        name: analyzer_pb2.PolicyConfig(enforcementLevel=LEVELS[level.value], properties=struct(props))
        for name, (level, props) in settings.items()})


def test_verdicts_over_grpc_equal_the_offline_runner_on_every_fixture(analyzer):
    stub, _ = analyzer
    checked = violations = 0
    mismatches = []
    answered: dict = {}
    # The fixtures share a few dozen configurations: the analyzer is configured once for each and then
    # judges every fixture that has it (a configuration holds until the next Configure, as in the engine).
    by_config: dict[bytes, tuple] = {}
    for path in case_files():
        for form in FORMS:
            plan, config, _ = load(path, form)
            request = configuration(plan, config)
            key = request.SerializeToString(deterministic=True)
            by_config.setdefault(key, (request, []))[1].append((f"{path.parent.name}/{path.stem} [{form}]", plan, config))
    for key, (request, cases) in by_config.items():
        stub.Configure(request)
        for case, plan, config in cases:
            wire = over_the_wire(stub, plan, key, answered)
            mine = offline(plan, config)
            checked += 1
            violations += len(mine)
            if wire != mine:
                mismatches.append((case, sorted(wire ^ mine)[:4]))
    assert not mismatches, json.dumps(mismatches[:5], indent=1)
    assert checked == 2 * len(case_files()) and violations > 200
