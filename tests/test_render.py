"""The offline plan: every sample stack renders to a stack export; bad input exits 2 with no plan written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster.cli import main
from gpu_cluster.render import SAMPLE_STACKS

ROOT = Path(__file__).resolve().parent.parent
RESOURCE_KEYS = {"urn", "type", "custom", "inputs", "outputs", "parent", "protect", "dependencies"}


@pytest.mark.parametrize("stack", SAMPLE_STACKS)
def test_sample_stack_renders_as_a_stack_export(sample_plan, stack):
    plan = sample_plan(stack)
    urns = [r.urn for r in plan]
    assert len(urns) == len(set(urns)), "URNs must be unique"
    assert plan.resources[0].type == "pulumi:pulumi:Stack"
    stack_urn = plan.resources[0].urn
    assert stack_urn == f"urn:pulumi:{stack}::gpu-cluster::pulumi:pulumi:Stack::gpu-cluster-{stack}"
    known = set(urns)
    custom = list(plan.custom())
    assert len(custom) >= 15
    cloud = "aws" if stack.startswith("aws") else "tencentcloud"
    for r in custom:
        assert r.type.startswith(f"{cloud}:"), f"{stack} registers a foreign resource {r.type}"
        assert r.parent in known and r.parent != stack_urn, f"{r.urn} is not inside a component"
        assert set(r.dependencies) <= known
        assert r.provider.startswith(f"urn:pulumi:{stack}::gpu-cluster::pulumi:providers:{cloud}::")
    components = {r.type for r in plan if not r.custom and r.type != "pulumi:pulumi:Stack"}
    assert f"gpu-cluster:{cloud}:Cluster" in components and len(components) >= 6
    assert plan.stack.outputs.get("vpc_id") and plan.stack.outputs.get("subnet_id")


@pytest.mark.parametrize("stack", ["aws-entry", "tencent-scheduled"])
def test_a_plan_is_the_same_without_the_sdks_stack_traces(monkeypatch, stack):
    """A render skips the call stacks the SDK captures for the engine's source positions (the mocks never
    read them; gpu_cluster.sdk_compat.SKIP_STACK_TRACES): the plan, the ignored properties and the functions
    called (in the order their arguments resolve, which varies) are what a render that captures them
    gives, and the SDK's own capture is back afterwards."""
    import pulumi.runtime.resource as sdk

    from gpu_cluster import render as render_mod
    from gpu_cluster import sdk_compat

    stack_file = render_mod.read_stack_file(render_mod.stack_path(stack))
    captured = sdk._get_stack_trace
    assert (captured.__module__, captured.__name__) == ("pulumi.runtime.resource", "_get_stack_trace"), \
        "the SDK's own capture is in place before a render"
    fast = render_mod.render(stack_file)
    assert sdk._get_stack_trace is captured
    monkeypatch.setattr(sdk_compat, "SKIP_STACK_TRACES", False)
    calls = []
    monkeypatch.setattr(sdk, "_get_stack_trace", lambda: calls.append(1) or captured())
    full = render_mod.render(stack_file)
    assert len(calls) >= len(full.registrations) - 1, "the SDK captured a stack for each resource"

    assert _without_time(fast.plan()) == _without_time(full.plan())
    assert fast.ignore_changes() == full.ignore_changes()
    assert sorted(map(json.dumps, fast.invokes)) == sorted(map(json.dumps, full.invokes)), "in any order"


def _run_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_cluster", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def _main(capsys, *args: str) -> subprocess.CompletedProcess:
    """The command in this process (warm imports): its status and what it printed. The process-level
    behaviour (exit statuses, no traceback reaching the shell, forked workers) is tested with _run_cli."""
    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return subprocess.CompletedProcess(["gpu-cluster", *args], status, out, err)


def test_plan_file_has_every_resource_field(tmp_path, capsys):
    result = _main(capsys, "plan", "--stack", "aws-entry", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    doc = json.loads((tmp_path / "aws-entry.json").read_text())
    assert doc["version"] == 3
    for r in doc["deployment"]["resources"][1:]:
        if not r["type"].startswith("pulumi:providers:"):
            assert RESOURCE_KEYS <= set(r), r["urn"]
    report = json.loads((tmp_path / "aws-entry.report.json").read_text())
    assert {"stack", "cloud", "tier", "nodes", "gpus", "resources", "monthly_cost", "violations"} <= set(report)
    assert (report["stack"], report["cloud"], report["tier"], report["nodes"], report["gpus"]) == (
        "aws-entry", "aws", "entry", 1, 1)
    # What the program registers with ignore_changes, which a stack export cannot hold: the node keeps
    # the launch template version it was created with (components/aws/compute.py).
    [node] = [r["urn"] for r in doc["deployment"]["resources"] if r["urn"].endswith("::ml-entry-compute-node-0")]
    assert report["ignore_changes"][node] == ["launchTemplate"]
    assert set(report["ignore_changes"]) <= {r["urn"] for r in doc["deployment"]["resources"]}
    assert "aws-entry" in result.stdout and "g4dn.xlarge" in result.stdout
    # One stack planned: every resource is listed, by component, protected ones marked.
    managed = [r for r in doc["deployment"]["resources"][1:] if r["custom"] and not r["type"].startswith("pulumi:")]
    listed = {}
    for line in result.stdout.splitlines():
        words = line.split()
        types = [w for w in words if w.startswith("aws:")]
        if types:
            listed[words[words.index(types[-1]) + 1]] = (types[-1], words[-1] == "protected")
    assert listed == {r["urn"].rsplit("::", 1)[1]: (r["type"], r["protect"]) for r in managed}


BAD_STACK = """\
config:
  aws:region: us-east-1
  gpu-cluster:cluster:
    name: bad
    cloud: aws
    zone: us-west-2a
    tier: mid
    instance_type: g5.12xlarge
    nodes: 0
    budget: {monthly_limit: 100, emails: []}
"""


def test_bad_stack_file_exits_2_with_sentences_and_writes_no_plan(tmp_path):
    path = tmp_path / "Pulumi.bad.yaml"
    path.write_text(BAD_STACK)
    result = _run_cli("plan", "--stack-file", str(path), "--out", str(tmp_path / "plans"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr + result.stdout
    assert "cluster.nodes=0" in result.stderr and "cluster.budget.emails=[]" in result.stderr
    assert not (tmp_path / "plans").exists()


@pytest.mark.parametrize("content,fragment", [
    ("config: [", "not valid YAML"),
    ("config: {aws:region: us-east-1}", "no `gpu-cluster:cluster` value"),
    ("name: x", "no `config:` mapping"),
])
def test_unreadable_stack_files_exit_2(tmp_path, capsys, content, fragment):
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(content)
    result = _main(capsys, "plan", "--stack-file", str(path), "--out", str(tmp_path / "plans"))
    assert result.returncode == 2 and fragment in result.stderr and not (tmp_path / "plans").exists()


def test_missing_stack_file_exits_2(tmp_path, capsys):
    result = _main(capsys, "plan", "--stack-file", str(tmp_path / "nope.yaml"), "--out", str(tmp_path))
    assert result.returncode == 2 and "does not exist" in result.stderr


def _make(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_cli_keeps_its_exit_statuses_and_make_reports_failure(tmp_path, capsys):
    """The command returns 0 / 1 / 2; make passes success as 0 and any failure as 2 (GNU make's own)."""
    violating = ROOT / "tests" / "fixtures" / "policies" / "acceptance" / "shared-subnet.export.json"
    result = _run_cli("check", str(violating))
    assert result.returncode == 1 and "dedicated-subnet" in result.stdout
    # Status 2 of a real process: make plan below, and test_policies_exports' broken file.
    assert _main(capsys, "check", str(tmp_path / "missing.json")).returncode == 2
    made = _make("check", f"PLAN={violating}")
    assert made.returncode == 2 and "dedicated-subnet" in made.stdout
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(BAD_STACK)
    result = _make("plan", f"STACK_FILE={bad}")
    assert result.returncode == 2 and "cluster.nodes=0" in result.stderr and "Traceback" not in result.stderr


def test_make_reads_without_running_anything(tmp_path):
    """`make -n plan` only prints; plain `make` is the help; variables never reach a shell line."""
    dry = _make("-n", "plan", "STACK=aws-entry")
    assert dry.returncode == 0 and "gpu-cluster plan" in dry.stdout
    assert "venv/bin/gpu-cluster" in dry.stdout and not (ROOT / "build" / "plans" / "never").exists()
    help_text = _make().stdout
    for target in ("help", "plan", "check", "review", "catalog", "test", "bench", "clean"):
        assert f"make {target} " in help_text
    marker = tmp_path / "injected"
    made = _make("review", f"BASE=HEAD; touch {marker}")
    assert not marker.exists()
    # The review's bad input, from a real process: one sentence naming the value, status 2 through make.
    assert made.returncode == 2 and f"error: BASE='HEAD; touch {marker}' is not a commit" in made.stderr
    assert "Traceback" not in made.stderr


def _without_time(doc: dict) -> str:
    """A plan as its file is written, but for its timestamp: keys in their order, so an order that varies
    between processes or renders shows too."""
    doc["deployment"]["manifest"].pop("time")
    return json.dumps(doc, indent=1)


def test_several_stacks_render_in_worker_processes_to_the_same_plans_as_one_by_one(tmp_path, capsys):
    """`plan --jobs 2` forks a worker per stack; the plans and reports equal a sequential run's (here, in
    this process) under another hash seed too (the SDK gathers dependencies in sets; the plan sorts them),
    and a bad stack among good ones is reported by name while the others are written. aws-large: several
    nodes, a placement group, FSx and the Slurm head node, where most sets are gathered."""
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text(BAD_STACK)
    args = ("plan", "--stack", "aws-large", "--stack-file", str(bad), "--stack", "tencent-entry")
    seed = "8" if os.environ.get("PYTHONHASHSEED") == "7" else "7"  # not this process's seed
    together = subprocess.run([sys.executable, "-m", "gpu_cluster", *args, "--jobs", "2", "--out", str(tmp_path / "together")],
                              cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONHASHSEED": seed})
    alone = _main(capsys, *args, "--jobs", "1", "--out", str(tmp_path / "alone"))
    for result in (together, alone):
        assert result.returncode == 2 and f"{bad}: " in result.stderr and "cluster.nodes=0" in result.stderr
        assert "Traceback" not in result.stderr
    for stack in ("aws-large", "tencent-entry"):
        assert _without_time(json.loads((tmp_path / "together" / f"{stack}.json").read_text())) == \
            _without_time(json.loads((tmp_path / "alone" / f"{stack}.json").read_text()))
        assert (tmp_path / "together" / f"{stack}.report.json").read_text() == (
            tmp_path / "alone" / f"{stack}.report.json").read_text()
    assert not (tmp_path / "together" / "bad.json").exists()
    # Which resources keep properties as created: by URN, not in the order they happened to register.
    kept = list(json.loads((tmp_path / "together" / "aws-large.report.json").read_text())["ignore_changes"])
    assert len(kept) == 3 and kept == sorted(kept), kept
    assert together.stdout.index("aws-large") < together.stdout.index("tencent-entry"), "rows in the given order"


def test_jobs_below_one_is_refused_in_one_sentence(tmp_path, capsys, monkeypatch):
    result = _main(capsys, "plan", "--stack", "aws-entry", "--jobs", "0", "--out", str(tmp_path))
    assert result.returncode == 2 and "--jobs 0: allowed: 1 or more" in result.stderr
    monkeypatch.setenv("GPU_CLUSTER_JOBS", "two")
    result = _main(capsys, "plan", "--stack", "aws-entry", "--out", str(tmp_path))
    assert result.returncode == 2 and "GPU_CLUSTER_JOBS='two': allowed: a whole number" in result.stderr
    assert not list(tmp_path.iterdir()), "nothing rendered, nothing written"


DYING_PLAN = """
import os, sys
import gpu_cluster.commands.plan as plan_cmd
from gpu_cluster import cli
real = plan_cmd.plan_one
def dying(path, policy_config, prices):
    if path.name == "Pulumi.aws-entry.yaml":
        os._exit(3)
    if path.name == "Pulumi.tencent-entry.yaml":
        raise SystemExit(4)
    return real(path, policy_config, prices)
plan_cmd.plan_one = dying
if sys.argv[2] == "dies-while-handing-out":
    # The race a busy machine opens: the first worker dies before the last stack is handed to the pool.
    import time
    from concurrent.futures import ProcessPoolExecutor
    submit = ProcessPoolExecutor.submit
    def late_submit(self, *args):
        if self._pending_work_items:  # not the first stack: wait for the dying worker to break the pool
            deadline = time.monotonic() + 60
            while not self._broken and time.monotonic() < deadline:
                time.sleep(0.01)
            assert self._broken, "the pool never broke"
        return submit(self, *args)
    ProcessPoolExecutor.submit = late_submit
sys.exit(cli.main(["plan", "--stack", "aws-entry", "--stack", "tencent-entry", "--stack", "tencent-scheduled",
                   "--jobs", "2", "--out", sys.argv[1]]))
"""


@pytest.mark.parametrize("when", ["dies-while-rendering", "dies-while-handing-out"])
def test_a_worker_that_dies_is_reported_for_its_stack_and_the_command_ends(tmp_path, when):
    """A render that kills its process (os._exit) or raises SystemExit: the stack is named, the command
    returns 2 instead of waiting for ever, and the stacks around it are planned, also when the pool
    breaks before every stack was handed to it. (In a fresh process: the workers are forked, and a test
    runner's own threads must not be forked with them.)"""
    result = subprocess.run([sys.executable, "-c", DYING_PLAN, str(tmp_path), when], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "Pulumi.aws-entry.yaml: the process rendering it stopped" in result.stderr
    assert "Pulumi.tencent-entry.yaml" in result.stderr and "SystemExit" in result.stderr
    assert (tmp_path / "tencent-scheduled.json").is_file(), "the stacks around it are still planned"
    assert not (tmp_path / "aws-entry.json").exists()
