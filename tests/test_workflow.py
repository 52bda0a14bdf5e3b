"""The PR review workflow parses and gives the pulumi/actions step what it needs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_cluster.render import SAMPLE_STACKS
from gpu_cluster.stackfile import ROOT

WORKFLOW = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "infra-review.yml"


def load() -> dict:
    doc = yaml.safe_load(WORKFLOW.read_text())
    # YAML 1.1 reads the bare key `on` as True.
    doc["on"] = doc.pop(True, doc.get("on"))
    return doc


def steps(job: dict) -> list[dict]:
    assert all(isinstance(s, dict) and ("run" in s or "uses" in s) for s in job["steps"])
    return job["steps"]


def test_runs_on_pull_requests_and_only_the_comment_job_writes_to_them():
    doc = load()
    assert "pull_request" in doc["on"]
    assert doc["permissions"] == {}
    assert doc["jobs"]["offline"]["permissions"] == {"contents": "read"}
    assert doc["jobs"]["comment"]["permissions"] == {"pull-requests": "write"}


def test_offline_job_runs_make_test_and_make_plan():
    runs = [s.get("run", "") for s in steps(load()["jobs"]["offline"])]
    assert "make test" in runs and "make plan" in runs
    assert runs.index("make test") < runs.index("make plan")


def test_every_action_is_pinned_to_a_commit_and_keeps_no_credentials():
    import re

    for job in load()["jobs"].values():
        for step in steps(job):
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False
            assert "${{" not in step.get("run", ""), f"event values reach shells only through env: {step}"


def test_zizmor_finds_nothing(tmp_path):
    """The workflow passes the GitHub Actions security auditor zizmor (offline audits, its strictest
    persona: auditor), with no finding suppressed."""
    import shutil
    import subprocess

    zizmor = shutil.which("zizmor") or str(Path(__file__).resolve().parent.parent / "venv" / "bin" / "zizmor")
    result = subprocess.run([zizmor, "--offline", "--no-progress", "--persona", "auditor", str(WORKFLOW)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr


def test_preview_job_uses_the_pulumi_action_with_the_policy_pack():
    job = load()["jobs"]["preview"]
    assert job["needs"] == "offline"
    assert set(job["strategy"]["matrix"]["stack"]) == set(SAMPLE_STACKS)
    assert job["if"] == "vars.GPU_CLUSTER_PREVIEW == 'true'"  # runs only where the team turned it on
    [action] = [s for s in steps(job) if str(s.get("uses", "")).startswith("pulumi/actions@")]
    inputs = action["with"]
    assert inputs["command"] == "preview"
    assert "matrix.stack" in inputs["stack-name"]
    assert inputs["policyPacks"] == "policies"
    assert inputs["policyPackConfigs"].endswith("${{ matrix.stack }}.policy-config.json")
    assert inputs["comment-on-pr"] is True


def test_secrets_live_only_in_the_step_that_uses_them_in_a_protected_environment():
    """The preview runs the pull request's program with cloud access: behind the environment's required
    reviewers, with AWS through OIDC (no static keys) and every secret in the one step that needs it."""
    import re

    doc = load()
    assert "secrets." not in yaml.safe_dump(doc.get("env", {}))
    for name, job in doc["jobs"].items():
        assert "secrets." not in yaml.safe_dump(job.get("env", {})), name
        users = [s for s in steps(job) if "secrets." in yaml.safe_dump(s)]
        if name != "preview":
            assert not users, f"{name} holds no secret"
    preview = doc["jobs"]["preview"]
    assert preview["environment"] == "infra-preview"
    [holder] = [s for s in steps(preview) if "secrets." in yaml.safe_dump(s)]
    assert str(holder["uses"]).startswith("pulumi/actions@")
    assert not re.search(r"AWS_(ACCESS_KEY_ID|SECRET_ACCESS_KEY)", yaml.safe_dump(doc)), "no static AWS keys"
    [oidc] = [s for s in steps(preview) if str(s.get("uses", "")).startswith("aws-actions/configure-aws-credentials@")]
    assert oidc["with"]["role-to-assume"] == "${{ vars.AWS_PREVIEW_ROLE_ARN }}"
    assert preview["permissions"]["id-token"] == "write"


def _gate_step(job: dict, prefix: str) -> dict:
    [step] = [s for s in steps(job) if str(s.get("name", "")).startswith(prefix)]
    return step


@pytest.mark.parametrize("status, fails", [("0", False), ("1", True), ("2", True), ("", True)])
def test_the_job_fails_on_the_gates_verdict_after_saving_the_review(status, fails):
    job = load()["jobs"]["offline"]
    names = [s.get("name") or s.get("uses") for s in steps(job)]
    gate = names.index(_gate_step(job, "The gate")["name"])
    verdict = names.index(_gate_step(job, "Fail on the gate's verdict")["name"])
    uploads = [i for i, s in enumerate(steps(job)) if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
    assert gate < min(uploads) and max(uploads) < verdict, "the review is saved before the job fails"
    assert gate < names.index("make test"), "the gate runs before any step runs the pull request's code"
    assert all(steps(job)[i].get("if") == "always()" for i in (verdict, *uploads))
    step = _gate_step(job, "Fail on the gate's verdict")
    result = subprocess.run(["bash", "-ec", step["run"]], env={**os.environ, "GATE_STATUS": status},
                            capture_output=True, text=True)
    assert (result.returncode != 0) == fails, result.stdout + result.stderr


def _gate_repo(tmp_path: Path) -> tuple[Path, callable]:
    """A throwaway clone with this work tree's program and one Tencent stack (cheap to render twice)."""
    clone = tmp_path / "repo"
    run = lambda *a: subprocess.run(a, cwd=clone, capture_output=True, text=True, check=True)  # noqa: E731
    subprocess.run(["git", "clone", "-q", "--no-local", str(ROOT), str(clone)], check=True, capture_output=True)
    for path in ("components", "gpu_cluster", "policies", "__main__.py", ".github"):
        subprocess.run(["rm", "-rf", str(clone / path)], check=True)
        subprocess.run(["cp", "-r", str(ROOT / path), str(clone / Path(path).parent)], check=True)
    for f in (clone / "stacks").glob("Pulumi.*.yaml"):
        if f.name != "Pulumi.tencent-entry.yaml":
            f.unlink()
    (clone / "stacks" / "Pulumi.tencent-entry.yaml").write_text((ROOT / "stacks" / "Pulumi.tencent-entry.yaml").read_text())
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "base")
    run("git", "branch", "-f", "base")
    return clone, run


def _gate(clone: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(clone / ".github" / "scripts" / "review-gate"), "base", str(out), "--python",
                           sys.executable], cwd=clone, capture_output=True, text=True, timeout=300)


def test_the_gate_script_fails_a_user_stack_with_a_mandatory_violation_and_a_broken_file(tmp_path):
    """What the workflow runs, here: the base's gpu-cluster reviews the pull request's checkout. A team's
    own new stack that opens SSH to the internet exits 1; a broken stack file exits 2 (2 wins); a clean
    change exits 0."""
    clone, run = _gate_repo(tmp_path)
    team = (clone / "stacks" / "Pulumi.tencent-entry.yaml").read_text().replace("name: tc-entry", "name: tc-team")
    (clone / "stacks" / "Pulumi.team.yaml").write_text(team.replace("ssh_cidrs: []", 'ssh_cidrs: ["0.0.0.0/0"]'))
    run("git", "add", "-A")
    run("git", "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "a team stack")
    out = tmp_path / "review" / "review.md"
    result = _gate(clone, out)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "- `no-public-ssh` (mandatory):" in out.read_text()
    entry = clone / "stacks" / "Pulumi.tencent-entry.yaml"
    entry.write_text(entry.read_text().replace("nodes: 1", "nodes: 0"))
    result = _gate(clone, out)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "invalid stack file" in out.read_text()
    run("git", "checkout", "-q", "--", "stacks")
    (clone / "stacks" / "Pulumi.team.yaml").write_text(team)
    result = _gate(clone, out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [w for w in run("git", "worktree", "list").stdout.splitlines()[1:]], "the base worktree is removed"
    # The review is never written inside the pull request's checkout (it could hold build/ as a link).
    inside = _gate(clone, clone / "build" / "review.md")
    assert inside.returncode == 2 and "inside the pull request's checkout" in inside.stderr


def test_the_comment_script_edits_only_its_own_marked_comment(tmp_path):
    stub = tmp_path / "bin" / "gh"
    stub.parent.mkdir()
    stub.write_text('#!/bin/bash\necho "gh $*" >> "$GH_LOG"\n'
                    'if [ "$3" != PATCH ] && [ "$3" != POST ]; then cat "$GH_FOUND"; fi\n')
    stub.chmod(0o755)
    review = tmp_path / "review.md"
    review.write_text("## gpu-cluster review\n")
    log, found = tmp_path / "gh.log", tmp_path / "found"
    env = {**os.environ, "PATH": f"{stub.parent}:{os.environ['PATH']}", "GH_LOG": str(log), "GH_FOUND": str(found),
           "GH_REPO": "o/r", "PR_NUMBER": "7", "GH_TOKEN": "t"}
    script = str(ROOT / ".github" / "scripts" / "comment-review")
    found.write_text("123\n456\n")
    assert subprocess.run([script, str(review)], env=env, capture_output=True, text=True).returncode == 0
    calls = log.read_text().splitlines()
    assert 'select(.user.login == "github-actions[bot]" and (.body | startswith("<!-- gpu-cluster-review -->")))' in calls[0]
    assert calls[1].startswith("gh api --method PATCH repos/o/r/issues/comments/123 -F body=@")
    found.write_text("")
    log.unlink()
    assert subprocess.run([script, str(review)], env=env, capture_output=True, text=True).returncode == 0
    assert log.read_text().splitlines()[1].startswith("gh api --method POST repos/o/r/issues/7/comments -F body=@")


CODEOWNERS = ROOT / ".github" / "CODEOWNERS"


def _matches(pattern: str, path: str) -> bool:
    """CODEOWNERS' gitignore-style patterns as that file uses them: `*` (any path), `/folder/` (under it),
    `/path` with `*` not crossing a folder."""
    import fnmatch

    name = pattern.lstrip("/")
    if name.endswith("/"):
        return path.startswith(name)
    if not pattern.startswith("/") and "/" not in name:
        return any(fnmatch.fnmatchcase(part, name) for part in path.split("/"))
    return fnmatch.fnmatchcase(path, name) and path.count("/") == name.count("/")


def owners(path: str) -> list[str]:
    """The owners of `path` by .github/CODEOWNERS: the last matching line wins (GitHub, "About code
    owners")."""
    result: list[str] = []
    for line in CODEOWNERS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pattern, *who = line.split()
            if _matches(pattern, path):
                result = who
    return result


@pytest.mark.parametrize("path", ["components/aws/compute.py", "gpu_cluster/review.py", "__main__.py",
                                  "policies/gpu_guardrails/network.py", "policies/requirements.txt", "Makefile",
                                  "requirements.txt", "requirements-test.txt", "pyproject.toml",
                                  ".github/workflows/infra-review.yml", ".github/scripts/review-gate",
                                  ".github/CODEOWNERS", "Pulumi.yaml", "tests/test_review.py", "stacks/prices.yaml"])
def test_everything_that_decides_a_render_or_a_verdict_needs_a_code_owner(path):
    assert owners(path) == ["@your-org/gpu-cluster-owners"], path


def test_a_stack_file_alone_needs_no_code_owner_the_gate_judges_it():
    assert owners("stacks/Pulumi.team.yaml") == []


def test_every_job_has_a_time_limit():
    """A hostile stack file must not hold a runner for GitHub's default six hours."""
    for name, job in load()["jobs"].items():
        assert 0 < job.get("timeout-minutes", 0) <= 30, name
