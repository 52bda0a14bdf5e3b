"""The PR review workflow parses and gives the pulumi/actions step what it needs."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpu_cluster.render import SAMPLE_STACKS

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
    """The workflow passes the GitHub Actions security auditor zizmor (offline audits)."""
    import shutil
    import subprocess

    zizmor = shutil.which("zizmor") or str(Path(__file__).resolve().parent.parent / "venv" / "bin" / "zizmor")
    result = subprocess.run([zizmor, "--offline", "--no-progress", str(WORKFLOW)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings" in result.stdout + result.stderr


def test_preview_job_uses_the_pulumi_action_with_the_policy_pack():
    job = load()["jobs"]["preview"]
    assert job["needs"] == "offline"
    assert set(job["strategy"]["matrix"]["stack"]) == set(SAMPLE_STACKS)
    assert job["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    [action] = [s for s in steps(job) if str(s.get("uses", "")).startswith("pulumi/actions@")]
    inputs = action["with"]
    assert inputs["command"] == "preview"
    assert "matrix.stack" in inputs["stack-name"]
    assert inputs["policyPacks"] == "policies"
    assert inputs["policyPackConfigs"].endswith("${{ matrix.stack }}.policy-config.json")
    assert inputs["comment-on-pr"] is True
    assert action["if"] == "env.PULUMI_ACCESS_TOKEN != ''"  # runs only when credentials are configured
