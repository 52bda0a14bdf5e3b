"""Monitoring role on AWS (docs/architecture.md): per-node CloudWatch alarms to the alert topic — GPUs idle (money
burning), GPUs too hot, and the EC2 status check; with Slurm also a failed boot health check per node and the
head node's status check.

The GPU metrics come from the CloudWatch agent's `nvidia_gpu` section (namespace CWAgent, metric names
`nvidia_smi_<measurement>`; CloudWatch user guide, "Collect NVIDIA GPU metrics"). The agent publishes every GPU
with dimensions index/name/arch/host; `agent_config` adds `append_dimensions: InstanceId` and
`aggregation_dimensions: [["InstanceId"]]`, so the agent also publishes one series per node with the
single dimension InstanceId, aggregated over its GPUs. The alarms watch that series: one alarm per node
whatever the GPU count, with dimensions known before boot (the GPU index/name/host are not).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.aws.common import tagged
from components.slurm import SlurmCluster

NAMESPACE = "CWAgent"
GPU_UTILISATION = "nvidia_smi_utilization_gpu"
GPU_TEMPERATURE = "nvidia_smi_temperature_gpu"
GPU_MEASUREMENTS = ("utilization_gpu", "utilization_memory", "memory_used", "memory_total",
                    "temperature_gpu", "power_draw")
IDLE_BELOW_PCT = 10
IDLE_PERIOD_S, IDLE_PERIODS = 300, 24  # 24 × 5 min = 2 h below the threshold
HOT_ABOVE_C = 85
METRICS_INTERVAL_S = 60


def _agent_silent_queries(node: dict) -> list:
    """1 for every 5 minutes in which the instance reports its CPU (EC2 sends it only while the instance
    runs) and the agent no GPU utilisation; 0 otherwise."""
    def metric(id_: str, namespace: str, name: str) -> aws.cloudwatch.MetricAlarmMetricQueryArgs:
        return aws.cloudwatch.MetricAlarmMetricQueryArgs(
            id=id_, return_data=False,
            metric=aws.cloudwatch.MetricAlarmMetricQueryMetricArgs(
                namespace=namespace, metric_name=name, dimensions=node, period=300, stat="SampleCount"))

    return [metric("cpu", "AWS/EC2", "CPUUtilization"), metric("gpu", NAMESPACE, GPU_UTILISATION),
            aws.cloudwatch.MetricAlarmMetricQueryArgs(
                id="silent", return_data=True, label="running without GPU metrics",
                expression="IF(FILL(cpu, 0) > 0 AND FILL(gpu, 0) == 0, 1, 0)")]


def agent_config() -> str:
    """The CloudWatch agent configuration (JSON) the nodes fetch from SSM at boot."""
    return json.dumps({
        "agent": {"metrics_collection_interval": METRICS_INTERVAL_S},
        "metrics": {
            "namespace": NAMESPACE,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["InstanceId"]],
            "metrics_collected": {
                "nvidia_gpu": {"measurement": list(GPU_MEASUREMENTS),
                               "metrics_collection_interval": METRICS_INTERVAL_S},
                "mem": {"measurement": ["mem_used_percent"]},
                "disk": {"measurement": ["used_percent"], "resources": ["/", "/scratch"]},
            },
        },
    }, indent=2)


@dataclass(frozen=True)
class NodeHealth:
    """The Slurm boot health check's metric (components/slurm/scripts.py node-health): published once per
    check in the cluster's metric namespace and name, with the dimensions ClusterName, NodeName and
    InstanceId, value 1 healthy, 0 not."""

    slurm: pulumi.Output[SlurmCluster]


@dataclass(frozen=True)
class MonitoringArgs:
    node_ids: Sequence[pulumi.Input[str]]
    """Instance ids, in node order; one set of alarms each."""
    topic_arn: pulumi.Input[str]
    """Where alarms (and their recovery) are sent."""
    tags: Mapping[str, str]
    stopped_by_controls: bool = False
    """Cost controls stop the nodes on purpose: a stopped node sends no metrics, which is then no alarm."""
    health: Optional[NodeHealth] = None
    """scheduler slurm: alarm when a node's health check fails. None: no scheduler."""
    head_id: Optional[pulumi.Input[str]] = None
    """The Slurm head node, watched by its EC2 status check. None: no head node."""


class Monitoring(pulumi.ComponentResource):
    """GPU idle / temperature and instance health alarms for every node."""

    alarm_arns: list[pulumi.Output[str]]

    def __init__(self, name: str, args: MonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Monitoring", name, None, opts)
        self._name, self._args = name, args
        self._child = pulumi.ResourceOptions(parent=self)
        self._actions = [args.topic_arn]
        self.alarm_arns = []
        for i, node_id in enumerate(args.node_ids):
            self._node_alarms(i, node_id)
        if args.head_id is not None:
            self._alarm(f"{name}-head-status",
                        alarm_description="EC2 status check of the Slurm head node failing (instance or host): no "
                                          "scheduling until it recovers",
                        namespace="AWS/EC2", metric_name="StatusCheckFailed", dimensions={"InstanceId": args.head_id},
                        statistic="Maximum", period=60, evaluation_periods=3, threshold=1,
                        comparison_operator="GreaterThanOrEqualToThreshold",
                        treat_missing_data="notBreaching" if args.stopped_by_controls else "missing")
        self.register_outputs({"alarm_arns": self.alarm_arns})

    def _alarm(self, alarm_name: str, **kwargs) -> None:
        created = aws.cloudwatch.MetricAlarm(
            alarm_name, alarm_actions=self._actions, ok_actions=self._actions,
            tags=tagged(self._args.tags, alarm_name), opts=self._child, **kwargs)
        self.alarm_arns.append(created.arn)

    def _node_alarms(self, i: int, node_id: pulumi.Input[str]) -> None:
        """A GPU node's alarms, in this order: idle, hot, status, agent silence, health check."""
        name, args, actions = self._name, self._args, self._actions
        node = {"InstanceId": node_id}
        # No data at all is not "fine": with treat_missing_data=missing the alarm goes to
        # INSUFFICIENT_DATA when the agent sends nothing (not installed, stopped, no nvidia-smi), and
        # that state notifies too (CloudWatch user guide, "Configuring how CloudWatch alarms treat
        # missing data").
        self._alarm(f"{name}-node-{i}-gpu-idle",
                    alarm_description=f"GPUs of {name} node {i} below {IDLE_BELOW_PCT} % for 2 h: paid but idle "
                                      f"(INSUFFICIENT_DATA: the node sends no GPU metrics — check the CloudWatch agent)",
                    namespace=NAMESPACE, metric_name=GPU_UTILISATION, dimensions=node, statistic="Average",
                    period=IDLE_PERIOD_S, evaluation_periods=IDLE_PERIODS, threshold=IDLE_BELOW_PCT,
                    comparison_operator="LessThanThreshold", treat_missing_data="missing",
                    insufficient_data_actions=[] if args.stopped_by_controls else actions)
        self._alarm(f"{name}-node-{i}-gpu-hot",
                    alarm_description=f"A GPU of {name} node {i} above {HOT_ABOVE_C} °C for 10 min",
                    namespace=NAMESPACE, metric_name=GPU_TEMPERATURE, dimensions=node, statistic="Maximum",
                    period=300, evaluation_periods=2, threshold=HOT_ABOVE_C,
                    comparison_operator="GreaterThanThreshold", treat_missing_data="notBreaching")
        self._alarm(f"{name}-node-{i}-status",
                    alarm_description=f"EC2 status check of {name} node {i} failing (instance or host)",
                    namespace="AWS/EC2", metric_name="StatusCheckFailed", dimensions=node, statistic="Maximum",
                    period=60, evaluation_periods=3, threshold=1,
                    comparison_operator="GreaterThanOrEqualToThreshold",
                    treat_missing_data="notBreaching" if args.stopped_by_controls else "missing")
        if args.stopped_by_controls:
            # The idle alarm's INSUFFICIENT_DATA is silenced here (a stopped node sends nothing), so a dead
            # CloudWatch agent on a running node would go unreported. This alarm fires when the instance
            # reports its own CPU (it is running) but the agent sends no GPU metric, for 15 minutes
            # (CloudWatch user guide, "Metric math syntax and functions": FILL, IF, AND).
            self._alarm(f"{name}-node-{i}-agent-silent",
                        alarm_description=f"{name} node {i} runs but its CloudWatch agent sends no GPU metrics for "
                                          f"15 min: idle stop and the GPU alarms are blind until it does",
                        metric_queries=_agent_silent_queries(node),
                        evaluation_periods=3, threshold=1, comparison_operator="GreaterThanOrEqualToThreshold",
                        treat_missing_data="notBreaching")
        if args.health is not None:
            self._health_alarm(i, node_id)

    def _health_alarm(self, i: int, node_id: pulumi.Input[str]) -> None:
        # The check runs at boot and whenever node-health.sbatch runs, so data is sparse: only a
        # published 0 alarms; no data is nothing to report (the status alarm covers a dead node).
        # CloudWatch matches a metric by all its dimensions (CloudWatch user guide, "Dimensions").
        c = self._args.health.slurm
        self._alarm(f"{self._name}-node-{i}-unhealthy",
                    alarm_description=f"GPU node {i} failed its boot health check (GPUs, NVLink, EFA, mounts): Slurm "
                                      f"has drained it; the reason is in `sinfo -R` on the head node",
                    namespace=c.apply(lambda s: s.metric_namespace), metric_name=c.apply(lambda s: s.metric_name),
                    dimensions={"ClusterName": c.apply(lambda s: s.name),
                                "NodeName": c.apply(lambda s, i=i: s.node_name(i)), "InstanceId": node_id},
                    statistic="Minimum", period=300, evaluation_periods=1, threshold=1,
                    comparison_operator="LessThanThreshold", treat_missing_data="notBreaching")

