"""Tencent budget, alarm notice and GPU alarms."""

import json

from components.tencentcloud.budget import warn_jsons
from conftest import gpu_nodes

BUDGET = "tencentcloud:Billing/budget:Budget"
NOTICE = "tencentcloud:Monitor/alarmNotice:AlarmNotice"
POLICY = "tencentcloud:Monitor/alarmPolicy:AlarmPolicy"


def test_monthly_fixed_budget_scoped_to_the_cluster_tag(sample_plan):
    b = sample_plan("tencent-large").one(BUDGET).inputs
    assert (b["cycleType"], b["planType"], b["billType"], b["feeType"]) == ("MONTH", "FIX", "BILL", "REAL_COST")
    assert b["budgetQuota"] == "900000.00"
    assert b["dimensionsRange"] == {"tags": [{"tagKey": "gpu-cluster:name", "tagValues": ["tc-large"]}]}
    assert b["periodBegin"] < b["periodEnd"]
    assert "mlops@example.com" in b["budgetNote"]


def test_the_budget_period_starts_in_the_deployment_month_and_never_moves(monkeypatch):
    """No hard-coded start: a real `pulumi up` starts the budget this month (UTC), for ten years; the budget
    ignores both fields afterwards, so next month's update moves nothing. An offline render takes the catalogue's
    newest fact date, so the plan of a repository is the same on any day."""
    import datetime

    from components import catalog
    from components.clouds import OFFLINE_RENDER_ENV
    from components.tencentcloud import budget

    assert budget.period(datetime.date(2027, 1, 31)) == ("2027-01", "2036-12")
    assert budget.period(datetime.date(2026, 12, 5)) == ("2026-12", "2036-11")
    monkeypatch.setenv(OFFLINE_RENDER_ENV, "1")
    assert budget.deploy_date() == catalog.newest_fact_date()
    monkeypatch.delenv(OFFLINE_RENDER_ENV)
    assert budget.deploy_date() == datetime.datetime.now(datetime.timezone.utc).date()
    from conftest import rendered, stack_with

    [b] = [r for r in rendered(stack_with("tencent-large")).registrations if r.type == BUDGET]
    newest = catalog.newest_fact_date()
    assert b.inputs["periodBegin"] == f"{newest.year:04d}-{newest.month:02d}"
    assert b.ignore_changes == ["periodBegin", "periodEnd"]


def test_one_actual_warning_per_threshold_and_a_forecast_at_100(sample_plan, render_cluster):
    b = sample_plan("tencent-mid").one(BUDGET).inputs
    assert [(w["warnType"], w["calType"], w["thresholdValue"]) for w in b["warnJsons"]] == [
        ("ACTUAL", "PERCENTAGE", "50"), ("ACTUAL", "PERCENTAGE", "80"), ("ACTUAL", "PERCENTAGE", "100"),
        ("FORECAST", "PERCENTAGE", "100")]
    b = render_cluster("tencent-entry", {"budget": {"thresholds_pct": [90, 25]}}).one(BUDGET).inputs
    assert [(w["warnType"], w["thresholdValue"]) for w in b["warnJsons"]] == [
        ("ACTUAL", "25"), ("ACTUAL", "90"), ("FORECAST", "100")]
    assert warn_jsons((10,))[-1] == {"warn_type": "FORECAST", "cal_type": "PERCENTAGE", "threshold_value": "100"}


def test_alarm_notice_goes_to_the_cam_users_of_the_budget_emails(sample_plan):
    """user_ids are CAM user UIDs (provider doc monitor_alarm_notice: "User UID List"), not the
    account UIN: each budget e-mail is looked up among the CAM users."""
    from gpu_cluster.engine.tencentcloud import _cam_users

    (user,) = sample_plan("tencent-large").one(NOTICE).inputs["userNotices"]
    assert user["receiverType"] == "USER" and user["noticeWays"] == ["EMAIL"]
    expected = [_cam_users({"email": e})["userLists"][0]["uid"] for e in ("mlops@example.com", "infra-oncall@example.com")]
    assert user["userIds"] == expected and 100000000001 not in user["userIds"]
    assert (user["startTime"], user["endTime"]) == (0, 86399)


def test_an_email_no_cam_user_carries_stops_the_deployment():
    import pulumi
    import pytest

    from components.tencentcloud.budget import cam_uid

    with pytest.raises(pulumi.RunError, match="no CAM user of this account has the e-mail ops@example.com"):
        cam_uid([], "ops@example.com")


def test_gpu_alarms_idle_two_hours_and_hot_bound_to_every_node(sample_plan):
    plan = sample_plan("tencent-large")
    policy = plan.one(POLICY)
    i = policy.inputs
    assert (i["namespace"], i["monitorType"]) == ("cvm_device", "MT_QCE")
    assert i["noticeIds"] == [plan.one(NOTICE).id]
    rules = {r["metricName"]: r for r in i["conditions"]["rules"]}
    idle, hot = rules["GpuUtil"], rules["GpuTemp"]
    assert idle["operator"] == "lt" and idle["period"] * idle["continuePeriod"] == 2 * 3600
    assert hot["operator"] == "gt" and float(hot["value"]) >= 80
    binding = plan.one("tencentcloud:Monitor/policyBindingObject:PolicyBindingObject").inputs
    assert binding["policyId"] == policy.id
    bound = {json.loads(d["dimensionsJson"])["unInstanceId"] for d in binding["dimensions"]}
    # The GPU nodes, not the Slurm head node: it has no GPU metrics to watch.
    assert bound == {n.id for n in gpu_nodes(plan, "tencentcloud:Instance/instance:Instance")}
    # Tags on an alarm policy would bind every instance carrying them (the head node too), and only the
    # first one (resource_tc_monitor_alarm_policy.go Create): the binding object is the only binding.
    assert "policyTags" not in i
    # Written as Read reports it back (compact JSON, the region), so the next `pulumi up` plans nothing.
    assert all(d["region"] == "ap-shanghai" and d["dimensionsJson"] == json.dumps(json.loads(d["dimensionsJson"]),
               separators=(",", ":")) for d in binding["dimensions"])


def test_the_node_binding_is_deleted_before_its_replacement_is_created():
    """Its Delete unbinds every object of the policy, and old and new share the policy's id: created
    first, the new binding would be undone by the old one's delete, and no alarm would fire."""
    from conftest import rendered, stack_with
    from gpu_cluster import contracts

    binding = "tencentcloud:Monitor/policyBindingObject:PolicyBindingObject"
    regs = [r for r in rendered(stack_with("tencent-large", {"nodes": 3})).registrations if r.type == binding]
    assert len(regs) == 1 and regs[0].delete_before_replace and len(regs[0].inputs["dimensions"]) == 3
    [problem] = contracts.check_resource(binding, "b", regs[0].inputs, delete_before_replace=False)
    assert "register it with delete_before_replace=True" in problem and "UnBindingAllPolicyObject" in problem


def test_exports():
    from conftest import rendered, slurm_stack_with
    from gpu_cluster.render import read_stack_file, stack_path
    plain = {"vpc_id", "subnet_id", "hpc_cluster_id", "node_ids", "cfs_mount_target", "checkpoint_bucket", "budget_id",
             "connect"}
    slurm = {"head_node_id", "head_address", "munge_secret", "connect_head", "submit_job"}
    assert set(rendered(read_stack_file(stack_path("tencent-large"))).outputs) == plain | slurm
    target = rendered(read_stack_file(stack_path("tencent-large"))).outputs["cfs_mount_target"]
    assert target.endswith("/cfs") and "@tcp0:/" in target
    out = rendered(slurm_stack_with("tencent-large")).outputs
    assert set(out) == plain | {"head_node_id", "head_address", "munge_secret", "connect_head", "submit_job"}
    assert out["hpc_cluster_id"].startswith("hpc-") and len(out["node_ids"]) == 2
    assert out["cfs_mount_target"] == target  # Slurm and CFS Turbo together on TencentOS
    assert out["checkpoint_bucket"] == "tc-large-checkpoints-1250000000"
    assert "TAT" in out["connect"] and out["node_ids"][0] in out["connect"]


def test_a_period_the_alarm_api_does_not_allow_stops_the_deployment():
    """get_alarm_metric says which periods and how many of them a metric's alarm may take; a rule outside
    them would fail CreateAlarmPolicy, so it stops at the lookup, in one sentence."""
    from types import SimpleNamespace

    import pulumi
    import pytest

    from components.tencentcloud.monitoring import gpu_rules, offered

    def metric(name, periods, continues):
        return SimpleNamespace(metric_name=name, metric_configs=[SimpleNamespace(periods=periods, continue_periods=continues)])

    rules = gpu_rules()
    names = [r["metric_name"] for r in rules]
    assert offered(rules, [metric(n, [60, 300, 3600], [1, 2, 5]) for n in names]) == rules
    assert offered(rules, [metric(n, [], []) for n in names]) == rules  # nothing said: nothing held against them
    with pytest.raises(pulumi.RunError, match=r"allows GpuUtil alarms a period of 60, 300 only .* not 3600"):
        offered(rules, [metric(n, [60, 300], [1, 2, 5]) for n in names])
    with pytest.raises(pulumi.RunError, match=r"allows GpuTemp alarms a continue_period of 1, 2, 3 only .* not 5"):
        offered(rules, [metric(n, [60, 300, 3600], [1, 2, 3]) for n in names])
