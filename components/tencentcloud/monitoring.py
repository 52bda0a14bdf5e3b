"""GPU and health alarms on Tencent Cloud Monitor, bound to the cluster's nodes.

Namespace `cvm_device` with monitor type `MT_QCE` (provider doc monitor_alarm_policy v1.82.42). The GPU
metric names are those of the Cloud Monitor data API for CVM (GpuUtil, GpuMemUsage, GpuTemp: "CVM
monitoring metrics", intl.cloud.tencent.com/document/product/248/6843). No Tencent page lists the
alarm API's names for `cvm_device`, so the program asks the cloud at deploy time
(`monitor.get_alarm_metric`) and stops with a sentence when one of them is not offered, instead of
creating an alarm that never fires. The metrics need Tencent's monitoring agent on the node, which
public images install unless `disable_monitor_service` is set (provider doc instance).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

IDLE_PCT = 5
IDLE_HOURS = 2
HOT_CELSIUS = 85
MEMORY_FULL_PCT = 95
_HOUR = 3600
_RENOTIFY_SECONDS = _HOUR


def offered(rules: list[dict], metrics: list) -> list[dict]:
    """`rules`, once every metric they watch is one the alarm API offers for `cvm_device`, with a period
    and a number of periods it allows (monitor.get_alarm_metric: metric_config period, continue_period,
    "The data period allowed for configuration", data_source_tc_monitor_alarm_metric.go v1.82.42). A
    set the API leaves empty is not held against a rule."""
    configs_of: dict[str, list] = {}
    for m in metrics or []:  # a name the API returns twice: the configurations of both
        configs_of.setdefault(m.metric_name, []).extend(m.metric_configs or [])
    missing = sorted({r["metric_name"] for r in rules} - set(configs_of))
    if missing:
        raise pulumi.RunError(f"Cloud Monitor offers no alarm metric {', '.join(missing)} in namespace cvm_device "
                              f"(monitor.get_alarm_metric); the GPU alarms cannot be created as written")
    for rule in rules:
        configs = configs_of[rule["metric_name"]]
        for key, allowed in (("period", {p for c in configs for p in c.periods or []}),
                             ("continue_period", {p for c in configs for p in c.continue_periods or []})):
            if allowed and rule[key] not in allowed:
                raise pulumi.RunError(f"Cloud Monitor allows {rule['metric_name']} alarms a {key} of "
                                      f"{', '.join(str(p) for p in sorted(allowed))} only (monitor.get_alarm_metric), "
                                      f"not {rule[key]}; the GPU alarms cannot be created as written")
    return rules


def gpu_rules() -> list[dict]:
    """Metric rules: GPU idle for IDLE_HOURS, GPU too hot, GPU memory full."""
    base = {"rule_type": "STATIC", "is_power_notice": 0, "notice_frequency": _RENOTIFY_SECONDS}
    return [
        # Hourly averages, two in a row: "idle for 2 h" without a long chain of 5-minute periods.
        {**base, "metric_name": "GpuUtil", "description": f"GPU utilisation below {IDLE_PCT} % for {IDLE_HOURS} h",
         "operator": "lt", "value": str(IDLE_PCT), "period": _HOUR, "continue_period": IDLE_HOURS, "unit": "%"},
        {**base, "metric_name": "GpuTemp", "description": f"GPU temperature above {HOT_CELSIUS} °C",
         "operator": "gt", "value": str(HOT_CELSIUS), "period": 60, "continue_period": 5, "unit": "°C"},
        {**base, "metric_name": "GpuMemUsage", "description": f"GPU memory above {MEMORY_FULL_PCT} %",
         "operator": "gt", "value": str(MEMORY_FULL_PCT), "period": 60, "continue_period": 5, "unit": "%"},
    ]


@dataclass(frozen=True)
class MonitoringArgs:
    cluster_name: str
    """Prefix of every resource name."""
    node_ids: Sequence[pulumi.Input[str]]
    """Instances the policy watches."""
    notice_id: pulumi.Input[str]
    """Alarm notice (Budget) that receives the alarms."""
    region: str
    """The provider region, in which the nodes run."""


class Monitoring(pulumi.ComponentResource):
    policy_id: pulumi.Output[str]

    def __init__(self, name: str, args: MonitoringArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Monitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix = args.cluster_name
        policy = tencentcloud.monitor.AlarmPolicy(
            f"{prefix}-gpu-alarms",
            policy_name=f"{prefix}-gpu",
            namespace="cvm_device",
            monitor_type="MT_QCE",
            project_id=0,
            enable=1,
            # The lookup's monitor_type as the provider's doc example and acceptance test pass it (the test
            # asserts metrics come back); the API documents the filter as MT_QCE (contract notes).
            conditions={"is_union_rule": 0, "rules": tencentcloud.monitor.get_alarm_metric_output(
                module="monitor", monitor_type="Monitoring", namespace="cvm_device",
                opts=pulumi.InvokeOutputOptions(parent=self)).metrics.apply(lambda m: offered(gpu_rules(), m))},
            # Instance health: unreachable or rebooted unexpectedly (event names from the provider's example).
            event_conditions=[{"metric_name": "ping_unreachable", "continue_period": 0, "period": 0,
                               "notice_frequency": 0, "is_power_notice": 0},
                              {"metric_name": "guest_reboot", "continue_period": 0, "period": 0,
                               "notice_frequency": 0, "is_power_notice": 0}],
            notice_ids=[args.notice_id],
            # No policy_tags: they are not the policy's own tags (the resource has none) but a second way
            # of binding objects, every instance carrying the tag, the head node too; Create binds only
            # the first tag and policy_tag is ForceNew (resource_tc_monitor_alarm_policy.go v1.82.42).
            opts=child,
        )
        # Cloud Monitor binds CVM objects by the dimension {"unInstanceId": <instance id>}, written compact
        # as in the provider doc's example, with the region Read reports back, so the stored set matches
        # (provider doc monitor_policy_binding_object; Read sets dimensions_json and region from the API).
        # Delete unbinds every object of the policy (UnBindingAllPolicyObject) and the binding's id is
        # the policy id, so a replacement that creates first and deletes second would unbind the new
        # nodes too: the old binding goes first.
        tencentcloud.monitor.PolicyBindingObject(
            f"{prefix}-gpu-alarms-nodes",
            policy_id=policy.id,
            dimensions=[{"dimensions_json": pulumi.Output.from_input(node_id).apply(
                lambda i: json.dumps({"unInstanceId": i}, separators=(",", ":"))), "region": args.region}
                for node_id in args.node_ids],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(delete_before_replace=True)),
        )
        self.policy_id = policy.id
        self.register_outputs({"policy_id": self.policy_id})
