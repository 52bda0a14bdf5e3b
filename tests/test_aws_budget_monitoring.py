"""AWS budget and monitoring roles, plus the cluster's conventions (tokens, parents, tags, outputs)."""

import json

from components.aws.monitoring import agent_config
from conftest import gpu_nodes, head_node

BUDGET = "aws:budgets/budget:Budget"
TOPIC = "aws:sns/topic:Topic"
ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
ROLES = {"Cluster", "Network", "Compute", "Storage", "Backup", "Budget", "Monitoring", "Head"}


def test_budget_notifications_per_threshold_plus_forecast(sample_plan):
    plan = sample_plan("aws-large")
    budget = plan.one(BUDGET).inputs
    topic_arn = plan.one(TOPIC).outputs["arn"]
    assert (budget["budgetType"], budget["timeUnit"], budget["limitUnit"]) == ("COST", "MONTHLY", "USD")
    assert float(budget["limitAmount"]) == 95000
    assert budget["costFilters"] == [{"name": "TagKeyValue", "values": ["user:gpu-cluster:name$llm-large"]}]
    got = sorted((n["notificationType"], n["threshold"]) for n in budget["notifications"])
    assert got == [("ACTUAL", 50), ("ACTUAL", 80), ("ACTUAL", 100), ("FORECASTED", 100)]
    for n in budget["notifications"]:
        assert n["thresholdType"] == "PERCENTAGE" and n["comparisonOperator"] == "GREATER_THAN"
        assert n["subscriberEmailAddresses"] == ["mlops@example.com", "infra-oncall@example.com"]
        assert n["subscriberSnsTopicArns"] == [topic_arn]

    # The account-wide cost-allocation tag is not the cluster's to own (its destroy would switch the tag
    # off for every cluster): no stack creates it, and the plan says how to activate it once.
    assert not plan.of_type("aws:costexplorer/costAllocationTag:CostAllocationTag")
    emails = sorted(r.inputs["endpoint"] for r in plan.of_type("aws:sns/topicSubscription:TopicSubscription")
                    if r.inputs["protocol"] == "email" and r.inputs["topic"] == topic_arn)
    assert emails == ["infra-oncall@example.com", "mlops@example.com"]
    policy = json.loads(plan.one("aws:sns/topicPolicy:TopicPolicy").inputs["policy"])
    publishers = {s["Principal"].get("Service") for s in policy["Statement"] if s["Action"] == "SNS:Publish"}
    assert publishers == {"budgets.amazonaws.com", "cloudwatch.amazonaws.com"}


def test_alarms_per_node_on_agent_metrics_to_the_topic(sample_plan):
    plan = sample_plan("aws-large")
    topic_arn = plan.one(TOPIC).outputs["arn"]
    node_ids = sorted(r.id for r in gpu_nodes(plan, "aws:ec2/instance:Instance"))
    head_id = head_node(plan, "aws:ec2/instance:Instance").id
    alarms = [r.inputs for r in plan.of_type(ALARM)]
    # Per GPU node: idle, hot, status and the Slurm health check; the head node's status check.
    assert len(alarms) == 4 * len(node_ids) + 1
    by_metric = {}
    for a in alarms:
        assert a["alarmActions"] == [topic_arn]
        by_metric.setdefault(a["metricName"], []).append(a)
    assert set(by_metric) == {"nvidia_smi_utilization_gpu", "nvidia_smi_temperature_gpu", "StatusCheckFailed",
                              "NodeHealthy"}
    for metric, found in by_metric.items():
        expected = sorted(node_ids + [head_id]) if metric == "StatusCheckFailed" else node_ids
        assert sorted(a["dimensions"]["InstanceId"] for a in found) == expected
    for idle in by_metric["nvidia_smi_utilization_gpu"]:
        assert idle["namespace"] == "CWAgent" and idle["comparisonOperator"] == "LessThanThreshold"
        assert idle["threshold"] == 10 and idle["period"] * idle["evaluationPeriods"] == 2 * 3600
        # A node that sends no GPU metrics at all is not "fine": the alarm leaves OK (INSUFFICIENT_DATA)
        # and says so to the topic.
        assert idle["treatMissingData"] == "missing" and idle["insufficientDataActions"] == [topic_arn]
    for hot in by_metric["nvidia_smi_temperature_gpu"]:
        assert hot["namespace"] == "CWAgent" and hot["comparisonOperator"] == "GreaterThanThreshold"
    for status in by_metric["StatusCheckFailed"]:
        assert status["namespace"] == "AWS/EC2"


def test_agent_config_publishes_what_the_alarms_watch(sample_plan):
    config = json.loads(agent_config())
    metrics = config["metrics"]
    assert metrics["namespace"] == "CWAgent"
    assert {"utilization_gpu", "temperature_gpu"} <= set(metrics["metrics_collected"]["nvidia_gpu"]["measurement"])
    assert metrics["append_dimensions"] == {"InstanceId": "${aws:InstanceId}"}
    assert metrics["aggregation_dimensions"] == [["InstanceId"]]
    param = sample_plan("aws-large").one("aws:ssm/parameter:Parameter").inputs
    assert param["name"] == "AmazonCloudWatch-llm-large" and json.loads(param["insecureValue"]) == config


def test_components_tokens_parents_and_tags(sample_plan):
    plan = sample_plan("aws-large")
    components = {r.urn: r for r in plan.resources if r.type.startswith("gpu-cluster:aws:")}
    assert {r.type.rsplit(":", 1)[-1] for r in components.values()} == ROLES
    for r in components.values():
        assert r.name == "llm-large" or r.name == f"llm-large-{r.type.rsplit(':', 1)[-1].lower()}"
    for r in plan.custom():
        parent = components.get(r.parent)
        assert parent is not None and parent.type != "gpu-cluster:aws:Cluster", r.urn
        assert r.name.startswith(parent.name + "-"), r.urn
        if "tags" in r.inputs:
            assert {"gpu-cluster:name": "llm-large", "gpu-cluster:tier": "large", "gpu-cluster:criticality": "critical",
                    "managed-by": "pulumi", "team": "pretraining"}.items() <= r.inputs["tags"].items(), r.urn


def test_stack_outputs(sample_plan):
    plan = sample_plan("aws-large")
    out = plan.stack.outputs
    assert set(out) == {"vpc_id", "subnet_id", "placement_group", "node_ids", "fsx_dns_name", "fsx_mount_name",
                        "checkpoint_bucket", "budget_name", "alarm_topic_arn", "connect",
                        "head_node_id", "head_address", "munge_secret", "connect_head", "submit_job"}
    assert out["node_ids"] == [r.id for r in sorted(gpu_nodes(plan, "aws:ec2/instance:Instance"), key=lambda r: r.name)]
    assert out["connect"] == f"aws ssm start-session --target {out['node_ids'][0]} --region us-east-1"
    assert out["fsx_dns_name"].endswith(".fsx.us-east-1.amazonaws.com") and out["fsx_mount_name"]
    assert out["checkpoint_bucket"] == plan.one("aws:s3/bucket:Bucket").outputs["bucket"]


def test_nothing_sends_to_the_alert_topic_before_its_policy_lets_it(sample_plan):
    """Budgets and CloudWatch may publish only under the topic's policy: the budget, the budget actions
    and every alarm that notifies the topic are created after it."""
    plan = sample_plan("aws-scheduled")
    [policy] = plan.of_type("aws:sns/topicPolicy:TopicPolicy")
    topic = plan.one("aws:sns/topic:Topic")
    senders = [r for r in plan.custom() if topic.outputs["arn"] in str(r.inputs) and r.type != policy.type
               and r.type != "aws:sns/topicSubscription:TopicSubscription"]
    assert {r.type for r in senders} >= {"aws:budgets/budget:Budget", "aws:budgets/budgetAction:BudgetAction",
                                         "aws:cloudwatch/metricAlarm:MetricAlarm"}
    for r in senders:
        assert policy.urn in r.dependencies, r.name


def test_a_dead_agent_is_reported_where_the_idle_alarm_is_silenced(sample_plan):
    """Cost-controlled stacks silence the idle alarm's 'no data' (a stopped node sends nothing), so a node
    that runs without its CloudWatch agent has an alarm of its own: EC2 reports its CPU (it runs) while the
    agent sends no GPU metric."""
    for stack in ("aws-entry", "aws-scheduled"):  # idle stop by default / run windows
        plan = sample_plan(stack)
        topic = plan.one(TOPIC).outputs["arn"]
        node_ids = sorted(r.id for r in gpu_nodes(plan, "aws:ec2/instance:Instance"))
        silent = [r.inputs for r in plan.of_type(ALARM) if r.name.endswith("-agent-silent")]
        assert sorted(q["metric"]["dimensions"]["InstanceId"] for a in silent for q in a["metricQueries"]
                      if q.get("metric") and q["metric"]["namespace"] == "AWS/EC2") == node_ids, stack
        for a in silent:
            queries = {q["id"]: q for q in a["metricQueries"]}
            assert queries["silent"]["expression"] == "IF(FILL(cpu, 0) > 0 AND FILL(gpu, 0) == 0, 1, 0)"
            assert queries["cpu"]["metric"]["metricName"] == "CPUUtilization"
            assert queries["gpu"]["metric"]["metricName"] == "nvidia_smi_utilization_gpu"
            assert a["alarmActions"] == [topic] and a["treatMissingData"] == "notBreaching"
    # Without cost controls the idle alarm itself reports missing data: no second alarm.
    assert not [r for r in sample_plan("aws-large").of_type(ALARM) if r.name.endswith("-agent-silent")]


def test_the_head_nodes_root_volume_carries_the_cluster_tags(sample_plan):
    """The budget filters on the cluster's tag: an untagged root volume would be left out of it."""
    for stack in ("aws-entry", "aws-large"):
        root = head_node(sample_plan(stack), "aws:ec2/instance:Instance").inputs["rootBlockDevice"]
        assert root["tags"]["gpu-cluster:name"] and root["tags"]["Name"].endswith("-head-root")
