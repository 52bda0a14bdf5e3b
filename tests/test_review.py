"""PR review of two crafted plans: a replaced file system, an added node, a fixed violation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_cluster import review as review_mod
from gpu_cluster.plan import Plan
from gpu_cluster.render import ROOT, SAMPLE_STACKS
from gpu_cluster.review import diff_plans, render_markdown, review_stack

P5_NODE_MONTH = 55.04 * 730      # catalog: p5.48xlarge on-demand, us-east-1
ROOT_DISK_MONTH = 500 * 0.08     # aws-large root_gb 500, gp3 $0.08/GB-month
DATA_DISK_MONTH = 1000 * 0.08    # aws-large data_disk_gb 1000, gp3
FSX_500_TO_1000 = 4800 * (0.849 - 0.471)  # catalog: FSx PERSISTENT_2 per GB-month at 1000 vs 500 MB/s/TiB


@pytest.fixture(scope="module")
def review():
    from conftest import render_plan

    base = render_plan("aws-large", {"network": {"ssh_cidrs": ["0.0.0.0/0"]}})
    head = render_plan("aws-large", {"nodes": 3, "storage": {"lustre": {"throughput_per_tib": 1000}}})
    return review_stack("aws-large", base, head)


def test_fsx_throughput_change_is_a_replacement_with_a_loud_warning(review):
    replaced = {c.type: c for c in review.changes if c.action == "replace"}
    # The file system, and the Slurm head node: a third node changes slurm.conf, which only a new head node
    # reads (user_data_replace_on_change; its state stays on its data volume, components/aws/head.py).
    assert {t: c.keys for t, c in replaced.items()} == {
        "aws:fsx/lustreFileSystem:LustreFileSystem": ("perUnitStorageThroughput",),
        "aws:ec2/instance:Instance": ("userDataBase64",)}
    fsx, head = replaced["aws:fsx/lustreFileSystem:LustreFileSystem"], replaced["aws:ec2/instance:Instance"]
    assert fsx.protected and fsx.dangerous
    assert head.name == "llm-large-head-instance" and not head.protected
    md = render_markdown([review], "main")
    assert "[!CAUTION]" in md and "Stateful resources would be replaced" in md
    assert "perUnitStorageThroughput: 500 → 1000" in md and "`protect`ed" in md


def test_an_added_node_adds_one_node_month(review):
    added = {(c.type, c.name) for c in review.changes if c.action == "add"}
    assert ("aws:ec2/instance:Instance", "llm-large-compute-node-2") in added
    assert ("aws:ebs/volume:Volume", "llm-large-storage-data-2") in added
    # Closing SSH deletes its rule; nothing else goes.
    assert [(c.type, c.name) for c in review.changes if c.action == "delete"] == [
        ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "llm-large-network-nodes-ssh-0")]
    delta = review.cost_after.total - review.cost_before.total
    assert delta == pytest.approx(P5_NODE_MONTH + ROOT_DISK_MONTH + DATA_DISK_MONTH + FSX_500_TO_1000, abs=0.05)


def test_closing_ssh_is_a_fixed_violation_and_the_third_node_outgrows_the_budget(review):
    assert [v["policy"] for v in review.fixed_violations] == ["no-public-ssh"]
    # 3 × p5 ≈ 120k USD a month against a 95k budget: the advisory rule speaks up.
    assert [(v["policy"], v["enforcement"]) for v in review.new_violations] == [("budget-covers-estimate", "advisory")]


def test_unchanged_plans_review_clean(sample_plan):
    plan = sample_plan("tencent-mid")
    assert diff_plans(plan, plan) == []
    same = review_stack("tencent-mid", plan, plan)
    assert (same.new_violations, same.fixed_violations) == ([], [])


def test_adding_a_schedule_shows_the_cost_with_and_without_it_on_both_sides():
    from conftest import render_plan

    alone = {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5, "for_minutes": 60}}
    base = render_plan("aws-scheduled", {**alone, "schedule": None})
    head = render_plan("aws-scheduled", alone)
    review = review_stack("aws-scheduled", base, head)
    added = {c.type for c in review.changes if c.action == "add"}
    assert {"aws:scheduler/schedule:Schedule", "aws:scheduler/scheduleGroup:ScheduleGroup"} <= added
    assert review.cost_after.total < review.cost_before.total
    md = render_markdown([review], "main")
    [row] = [line for line in md.splitlines() if line.startswith("| schedule |")]
    after = next(c for c in review.cost_after.controls if c["control"] == "schedule")
    assert row.split(" | ")[1] == "—"  # no schedule before
    assert f"{after['monthly_with']:,.2f} USD with, {after['monthly_without']:,.2f} USD without" in row
    assert "| idle_stop |" in md and "| budget.stop_at_pct |" in md
    # With Slurm the windows are the head node's and the GPU node's tag says their hours: cheaper all the same.
    slurm = review_stack("aws-scheduled", render_plan("aws-scheduled", {"schedule": None}), render_plan("aws-scheduled"))
    assert slurm.cost_after.total < slurm.cost_before.total
    assert "| schedule |" in render_markdown([slurm], "main")


def test_a_new_tencent_schedule_names_what_its_package_changes(sample_plan):
    """The schedule travels in the function's code package: the review says which part changed."""
    from conftest import render_plan

    no_slurm = {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5}}  # the windows are the function's
    head = render_plan("tencent-scheduled", {**no_slurm, "schedule": {"windows": ["Mon-Fri 08:00-20:00"]}})
    review = review_stack("tencent-scheduled", render_plan("tencent-scheduled", no_slurm), head)
    [function] = [c for c in review.changes if c.type == "tencentcloud:Scf/function:Function"]
    assert function.action == "change" and "zipFile (config.json events)" in function.keys
    assert review.cost_after.total != review.cost_before.total  # fewer hours a week


def test_a_new_stack_is_all_additions(sample_plan):
    plan = sample_plan("aws-entry")
    changes = diff_plans(None, plan)
    assert changes and {c.action for c in changes} == {"add"}
    assert len(changes) == sum(1 for _ in plan.custom())


def test_a_data_volume_grows_in_place_and_nothing_else_changes(sample_plan):
    """A bigger data disk is an in-place change of the volume alone: the boot config finds the volume by
    its id, so the launch template and the node do not change with its size."""
    from conftest import render_plan

    review = review_stack("aws-entry", sample_plan("aws-entry"), render_plan("aws-entry", {"storage": {"data_disk_gb": 400}}))
    assert [(c.action, c.type, c.name, c.keys) for c in review.changes] == [
        ("change", "aws:ebs/volume:Volume", "ml-entry-storage-data-0", ("size",))]
    assert review.cost_after.total - review.cost_before.total == pytest.approx(200 * 0.08)  # 200 GB more gp3
    [row] = [line for line in render_markdown([review], "main").splitlines() if line.startswith("| `aws-entry` |")]
    assert row.startswith("| `aws-entry` | 0 | 1 | 0 | 0 |") and "(+16.00 USD)" in row


def _clone_with_this_code(tmp_path: Path):
    """A throwaway clone whose last commit holds this work tree's program, and a `git` runner in it."""
    root = Path(__file__).resolve().parent.parent
    clone = tmp_path / "repo"
    run = lambda *a, cwd=clone: subprocess.run(a, cwd=cwd, capture_output=True, text=True, check=True)  # noqa: E731
    run("git", "clone", "-q", "--no-local", str(root), str(clone), cwd=tmp_path)
    # The clone has what is committed; bring the work tree's code over so the test checks this code.
    for path in ("components", "gpu_cluster", "policies", "stacks", "__main__.py"):
        subprocess.run(["cp", "-r", str(root / path), str(clone / Path(path).parent)], check=True)
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base", "--allow-empty")
    return clone, run


def test_make_review_against_a_base_ref(tmp_path):
    """`gpu-cluster review` on a throwaway clone whose last commit changes a stack file and the code of the
    Tencent cost controls: BASE is rendered from its own git tree, the work tree beside it, and only the
    named stacks are reviewed. (What a diff holds is tested in this process above; here, Tencent stacks:
    their renders cost a fraction of AWS's, whose SDK a fresh process spends a second importing.)"""
    from conftest import render_plan

    clone, run = _clone_with_this_code(tmp_path)
    # tc-lab without Slurm on both sides: its run windows are then the cost-controls function's (with Slurm, the
    # samples' default, power saving's, and no function is deployed).
    lab = clone / "stacks" / "Pulumi.tencent-scheduled.yaml"
    lab.write_text(lab.read_text().replace("    idle_stop:\n", "    scheduler: none\n    idle_stop:\n"
                                           "      gpu_util_below_pct: 5\n", 1))
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "tc-lab without Slurm")
    stack = clone / "stacks" / "Pulumi.tencent-entry.yaml"
    assert "data_disk_gb: 200" in stack.read_text()
    stack.write_text(stack.read_text().replace("data_disk_gb: 200", "data_disk_gb: 400"))
    # A new version of the Tencent cost-controls code: base and head name different code packages.
    handler = clone / "components" / "tencentcloud" / "scf_cost_controls.py"
    handler.write_text(handler.read_text() + "# a comment: new code, the same schedule\n")
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "grow the data disk")
    # The two stacks named out of their sample order; tc-lab carries the cost-controls package.
    only = [a for s in ("tencent-scheduled", "tencent-entry") for a in ("--stack", s)]
    result = subprocess.run([sys.executable, "-m", "gpu_cluster", "review", "--base", "HEAD~1", *only, "--out",
                             str(tmp_path / "review.md")], cwd=clone, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    md = (tmp_path / "review.md").read_text()
    changes = [line for line in md.splitlines() if line.startswith("| change |")]
    assert changes == [
        "| change | `tencentcloud:Cbs/storage:Storage` | `tc-entry-data-0` | storageSize |",
        "| change | `tencentcloud:Scf/function:Function` | `tc-lab-cost-controls` | zipFile (code only) |",
    ], "the disk and the code package, nothing else: both sides render alike in their own processes"
    row = next(line for line in md.splitlines() if line.startswith("| `tencent-entry` |"))
    assert row.startswith("| `tencent-entry` | 0 | 1 | 0 | 0 |"), row
    here = review_stack("tencent-entry", render_plan("tencent-entry"),
                        render_plan("tencent-entry", {"storage": {"data_disk_gb": 400}}))
    assert f"(+{here.cost_after.total - here.cost_before.total:,.2f} CNY)" in row, "priced as in this process"
    # The base's package is priced from the base tree's copy: the same schedule, the same cost.
    row = next(line for line in md.splitlines() if line.startswith("| `tencent-scheduled` |"))
    assert row.startswith("| `tencent-scheduled` | 0 | 1 | 0 | 0 |") and "+0.00 CNY" in row, row
    assert [line.split(" | ")[0] for line in md.splitlines() if line.startswith(("| `aws-", "| `tencent-"))] == [
        "| `tencent-entry`", "| `tencent-scheduled`"], "only the named stacks, sample stacks in their order"
    assert "review of 2 stack(s)" in result.stdout


def test_a_review_covers_every_sample_stack_and_every_changed_stack_file(tmp_path, monkeypatch):
    monkeypatch.setattr(review_mod, "changed_stacks", lambda base, head=None: ["aws-entry", "zz-new", "a-new"])
    assert review_mod.review_stacks("HEAD") == [*SAMPLE_STACKS, "a-new", "zz-new"]
    assert review_mod.review_stacks("HEAD", ["tencent-mid", "aws-large", "aws-large"]) == ["aws-large", "tencent-mid"]


@pytest.mark.parametrize("name", ["no-such-stack", "../aws-entry", "-x"])
def test_a_review_of_an_unknown_stack_is_one_sentence(name, tmp_path, capsys):
    from gpu_cluster.cli import main

    capsys.readouterr()
    assert main(["review", "--base", "HEAD", f"--stack={name}", "--out", str(tmp_path / "r.md")]) == 2
    err = capsys.readouterr().err
    assert f"--stack {name!r}: there is no stacks/Pulumi.{name}.yaml" in err and "aws-entry, aws-large" in err
    assert "Traceback" not in err
    assert not (tmp_path / "r.md").exists()


def test_deleting_a_protected_tencent_node_is_refused_until_criticality_lifts_it(sample_plan):
    """Tencent's provider terminates without lifting termination protection (resource_tc_instance.go
    v1.82.42): one node fewer on a critical cluster fails, unless a first `pulumi up` lifted it."""
    from conftest import render_plan

    critical, fewer = sample_plan("tencent-large"), render_plan("tencent-large", {"nodes": 1})
    review = review_stack("tencent-large", critical, fewer)
    [gone] = [c for c in review.changes if c.action == "delete" and c.type == "tencentcloud:Instance/instance:Instance"]
    assert gone.name == "tc-large-node-1" and "disableApiTermination is true" in gone.refused
    assert "criticality: standard" in gone.refused
    md = render_markdown([review], "main")
    assert "`pulumi up` would fail here" in md and "`tc-large-node-1`: " in md
    # The remedy the warning names: criticality: standard turns protection off in place, refusing nothing ...
    lifted = render_plan("tencent-large", {"criticality": "standard"})
    first = {c.name: c for c in diff_plans(critical, lifted)
             if c.type == "tencentcloud:Instance/instance:Instance" and "-node-" in c.name}
    assert set(first) == {"tc-large-node-0", "tc-large-node-1"}
    assert {(c.action, c.refused, "disableApiTermination" in c.keys) for c in first.values()} == {("change", "", True)}
    # ... after which the smaller cluster goes through.
    after = [c for c in diff_plans(lifted, render_plan("tencent-large", {"nodes": 1, "criticality": "standard"}))
             if c.refused]
    assert after == []
    assert "would fail" not in render_markdown([review_stack("tencent-large", lifted, lifted)], "main")


def test_a_slurm_change_replaces_the_tencent_head_node_and_nothing_refuses_it(slurm_plan):
    """The head node's user data replaces it (userDataReplaceOnChange: a conditional force-new in the
    contract), and a critical cluster's head node is not protected, so the replacement can delete it."""
    from conftest import rendered, slurm_stack_with

    base = slurm_plan("tencent-large")
    program = rendered(slurm_stack_with("tencent-large", {"nodes": 3}))
    head, ignored = Plan.from_doc(program.plan()), program.ignore_changes()
    [replaced] = [c for c in diff_plans(base, head, ignored)
                  if c.action == "replace" and c.type == "tencentcloud:Instance/instance:Instance"]
    assert replaced.name == "tc-large-head" and replaced.why.startswith("userData: ")
    assert replaced.refused == ""
    # The nodes' user data differs too, but the program ignores it after creation (ignore_changes): the
    # engine leaves the running nodes alone, and the review says so instead of listing a change.
    old_nodes = ("tc-large-node-0", "tc-large-node-1")
    assert {c.name for c in diff_plans(base, head)} >= set(old_nodes), "without ignore_changes they differ"
    review = review_stack("tencent-large", base, head, ignored)
    assert not [c for c in review.changes if c.name in old_nodes]
    assert review.kept == [(n, ("userData",)) for n in old_nodes]
    md = render_markdown([review], "main")
    assert "kept as created" in md and "`tc-large-node-0` (userData)" in md
    # The engine restores ignored properties from the state whenever there is one, replacements included
    # (pulumi/pulumi step_generator.go processIgnoreChanges): the review must not promise otherwise.
    assert "a replacement keeps them too" in md and "replaced resources get the new values" not in md


def _review(clone: Path, out: Path, *stacks: str) -> subprocess.CompletedProcess:
    only = [a for s in stacks for a in ("--stack", s)]
    return subprocess.run([sys.executable, "-m", "gpu_cluster", "review", "--base", "HEAD~1", *only, "--out", str(out)],
                          cwd=clone, capture_output=True, text=True, timeout=300)


def test_a_pull_request_adding_a_user_stack_with_a_mandatory_violation_fails_the_review(tmp_path):
    """The gate: a team's own stack file (not a sample) that opens SSH to the internet makes review exit 1,
    and review.md lists the violation as new."""
    clone, run = _clone_with_this_code(tmp_path)
    team = (clone / "stacks" / "Pulumi.tencent-entry.yaml").read_text().replace("name: tc-entry", "name: tc-team")
    (clone / "stacks" / "Pulumi.team.yaml").write_text(team.replace("ssh_cidrs: []", 'ssh_cidrs: ["0.0.0.0/0"]'))
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "a team stack")
    result = _review(clone, tmp_path / "review.md", "team")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "team: new mandatory violation no-public-ssh" in result.stdout
    md = (tmp_path / "review.md").read_text()
    assert "- `no-public-ssh` (mandatory):" in md and "| `team` | " in md
    # A later pull request repairs a stack that no longer validated at its base: a note, not a failure.
    (clone / "stacks" / "Pulumi.team.yaml").write_text(team.replace("nodes: 1", "nodes: 0"))
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "break it")
    (clone / "stacks" / "Pulumi.team.yaml").write_text(team)
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "repair it")
    result = _review(clone, tmp_path / "review.md", "team")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "base: stack team does not render at HEAD\\~1" in (tmp_path / "review.md").read_text(), result.stdout + result.stderr


def _stack_review(name: str, new=(), failed=False):
    r = review_mod.StackReview(stack=name, base=None, head=None)
    r.new_violations = [{"policy": p, "enforcement": e, "message": "m"} for p, e in new]
    return r


def test_the_review_status_two_wins_over_one_and_advisories_pass():
    status = review_mod.review_status
    assert status([_stack_review("a", [("budget-covers-estimate", "advisory")])], []) == 0
    assert status([_stack_review("a"), _stack_review("b", [("no-public-ssh", "mandatory")])], []) == 1
    assert status([_stack_review("b", [("no-public-ssh", "mandatory")])], [("head", "c", "invalid")]) == 2


def test_a_pull_request_that_breaks_a_stack_file_exits_2_and_shows_why_not_deletions(tmp_path):
    """The gate on a broken file: exit 2, "invalid stack file" with its reason, no CAUTION and no deletion
    of the stack's resources; a symbolic link as a stack file is refused the same way, and the review's
    JSON says so too."""
    import json

    clone, run = _clone_with_this_code(tmp_path)
    stack = clone / "stacks" / "Pulumi.tencent-entry.yaml"
    stack.write_text(stack.read_text().replace("nodes: 1", "nodes: 0"))
    (clone / "stacks" / "Pulumi.zz-link.yaml").symlink_to("/etc/hostname")
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "break it")
    result = subprocess.run([sys.executable, "-m", "gpu_cluster", "review", "--base", "HEAD~1", "--stack",
                             "tencent-entry", "--stack", "zz-link", "--out", str(tmp_path / "review.md"), "--json"],
                            cwd=clone, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    md = (tmp_path / "review.md").read_text()
    assert "`tencent-entry`: invalid stack file: `invalid stack file:   - cluster.nodes=0: must be at least 1" in md
    assert "| `tencent-entry` | — | — | — | — | invalid stack file |" in md
    assert "CAUTION" not in md and not [line for line in md.splitlines() if line.startswith("| delete")]
    assert "is a symbolic link; stack files in stacks/ must be regular files" in md
    doc = json.loads(result.stdout)
    assert doc["exit_status"] == 2 and [s["status"] for s in doc["stacks"]] == ["invalid", "invalid"]


def test_a_stack_file_name_that_is_not_utf8_is_refused_in_printable_words(tmp_path):
    """An adversarial review found that stacks/Pulumi.<0xff>.yaml crashed the gate with a traceback while
    writing review.md: the name now comes back escaped, is refused, and every message is UTF-8."""
    (tmp_path / "stacks").mkdir()
    os.close(os.open(os.path.join(os.fsencode(tmp_path), b"stacks", b"Pulumi.\xff.yaml"), os.O_CREAT | os.O_WRONLY))
    [name] = review_mod._stacks_in(tmp_path)
    assert name == "\\xff"
    [why] = review_mod._refused_in_head([name], tmp_path).values()
    assert "is not a stack name" in why
    why.encode("utf-8")


def test_a_renderer_that_dies_fails_its_stacks_instead_of_passing_them(tmp_path):
    """A renderer killed before it says anything (out of memory, a crash) must not read as "the stack file
    was removed": each stack it was given fails, and the gate exits 2."""
    import time

    stack = tmp_path / "stacks" / "Pulumi.team.yaml"
    proc = subprocess.Popen([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = review_mod.Run(proc, [stack], "", json=True)
    side = review_mod._finish_side(run, tmp_path / "plans", ["team"], time.monotonic() + 60, 60)
    assert side.failures == {"team": "the renderer gave neither a plan nor a reason (killed by SIGKILL)"}
    reviews, failed = review_mod._review_each(["team"], "main", review_mod.Side(), side, {}, time.monotonic() + 60, 60)
    assert review_mod.review_status(list(reviews.values()), failed) == 2


def test_the_base_tools_pack_judges_a_pull_request_that_weakens_a_rule(tmp_path):
    """A pull request that opens SSH and deletes the rule that catches it: the base checkout's
    gpu-cluster reviews the pull request's checkout (--head), its pack reports the violation (exit 1),
    and the review shows what the pull request's own pack would have said otherwise."""
    clone, run = _clone_with_this_code(tmp_path)
    stack = clone / "stacks" / "Pulumi.tencent-entry.yaml"
    stack.write_text(stack.read_text().replace("ssh_cidrs: []", 'ssh_cidrs: ["0.0.0.0/0"]'))
    pack = clone / "policies" / "gpu_guardrails" / "network.py"
    text = pack.read_text()
    assert "lets {who} reach port" in text
    pack.write_text(text.replace("lets {who} reach port", "is fine on port"))
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qam", "open ssh, soften the pack")
    result = subprocess.run([sys.executable, "-m", "gpu_cluster", "review", "--base", "HEAD~1", "--head", str(clone),
                             "--stack", "tencent-entry", "--out", str(tmp_path / "review.md")],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    md = (tmp_path / "review.md").read_text()
    assert "- `no-public-ssh` (mandatory): 'tc-entry-sg-rules' lets the whole internet reach port 22" in md
    assert "The pull request's own policy pack differs" in md
    assert "would not report no-public-ssh on tc-entry-sg-rules: 'tc-entry-sg-rules' lets the whole internet" in md
    assert "would also report no-public-ssh on tc-entry-sg-rules: 'tc-entry-sg-rules' is fine on port 22" in md


def test_a_review_that_runs_out_of_its_budget_exits_2_saying_so(tmp_path, capsys):
    from gpu_cluster.cli import main

    capsys.readouterr()
    status = main(["review", "--base", "HEAD", "--stack", "tencent-entry", "--timeout", "0.001",
                   "--out", str(tmp_path / "r.md")])
    err = capsys.readouterr().err
    assert status == 2 and "the review ran out of its 0.001-second budget" in err and "Traceback" not in err


def test_a_base_from_before_the_config_was_in_the_plan_is_read_from_its_own_package_once(tmp_path):
    """An older base kept the Tencent cost controls' schedule only in the code package it wrote under its
    own build/: the review reads it from the base's tree into the base plan in memory (nothing is copied
    into this checkout), so both sides price the schedule alike."""
    import io
    import zipfile

    from conftest import render_plan
    from gpu_cluster.bills.tencentcloud import COST_CONTROLS, cost_controls_config

    # its own copy, which this test changes; without Slurm, so that the function keeps the windows
    plan = render_plan("tencent-scheduled", {"scheduler": "none", "idle_stop": {"gpu_util_below_pct": 5}})
    [component] = [r for r in plan.resources if r.type == COST_CONTROLS]
    config = component.outputs.pop("config")
    function = plan.one("tencentcloud:Scf/function:Function")
    function.inputs["zipFile"] = rel = "build/tencent-cost-controls/cost-controls-old.zip"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("config.json", config)
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_bytes(buffer.getvalue())
    assert cost_controls_config(function, plan) is None
    review_mod._inline_old_configs(tmp_path, [plan])
    assert cost_controls_config(function, plan) == json.loads(config)
    assert not (ROOT / rel).exists()
