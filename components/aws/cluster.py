"""The AWS cluster (docs/architecture.md): network → storage → backup → budget → head node → compute →
monitoring → cost controls. The head node (scheduler slurm) comes before the GPU nodes: they name its
address and its munge-key secret.

Every role is its own component (`gpu-cluster:aws:<Role>`), parented here and named
`<cluster name>-<role>`. `exports` are the stack outputs `__main__.py` publishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_aws as aws

from components.aws import monitoring as monitoring_module
from components.aws.backup import BACKUP_TAG, Backup, BackupArgs
from components.aws.notes import fsx_backup_days
from components.aws.budget import Budget, BudgetArgs
from components.aws.compute import Compute, ComputeArgs
from components.aws.common import instance_arns
from components.aws.costcontrol import CostControlArgs, CostControls
from components.aws.head import Head, HeadArgs, secret_name
from components.aws.monitoring import Monitoring, MonitoringArgs, NodeHealth
from components.aws.network import Network, NetworkArgs
from components.aws.storage import Storage, StorageArgs
from components.headnode import HEAD_DATA_GB, head_address, submit_command
from components.slurm import from_spec, power
from components.spec import Cluster, ClusterSpec, node_cost_tags


class ClusterComponent(pulumi.ComponentResource):
    """One GPU training cluster on AWS, complete: network, nodes, storage, backups, budget, alarms."""

    exports: dict[str, pulumi.Output]

    def __init__(self, name: str, cluster: Cluster, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:aws:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec, tags = cluster.spec, cluster.tags
        invoke = pulumi.InvokeOptions(parent=self)
        account_id = aws.get_caller_identity_output(opts=invoke).account_id
        partition = aws.get_partition_output(opts=invoke).partition
        s = _Setting(name=name, cluster=cluster, tags=tags, child=child, account_id=account_id,
                     partition=partition)

        network = _network(s)
        slurm = spec.scheduler == "slurm"
        backup_tags = {BACKUP_TAG: name}
        storage = _storage(s, network, slurm, backup_tags)
        if storage.data_volume_ids or storage.head_volume_id is not None:
            _backup(s, backup_tags)
        budget = _budget(s)
        head = slurm_input = None
        if slurm:
            head, slurm_input = _head(s, network, storage)
        compute = _compute(s, network, storage, head, slurm_input)
        _monitoring_and_cost_controls(s, compute, budget, head, slurm_input)

        self.exports = _exports(cluster, network, storage, compute, budget, head, slurm_input)
        self.register_outputs(self.exports)


@dataclass(frozen=True)
class _Setting:
    """What every role of the cluster is built from: the cluster, its tags, the options that parent a
    role to the cluster component, and the account and partition the cluster looked up."""
    name: str
    cluster: Cluster
    tags: dict[str, str]
    child: pulumi.ResourceOptions
    account_id: pulumi.Output[str]
    partition: pulumi.Output[str]

    @property
    def spec(self) -> ClusterSpec:
        return self.cluster.spec


def _network(s: _Setting) -> Network:
    spec = s.spec
    return Network(f"{s.name}-network", NetworkArgs(
        region=s.cluster.region, zone=spec.zone, cidr=spec.network.cidr, ssh_cidrs=spec.network.ssh_cidrs,
        existing_subnet_id=spec.network.existing_subnet_id, account_id=s.account_id, partition=s.partition,
        tags=s.tags), s.child)


def _storage(s: _Setting, network: Network, slurm: bool, backup_tags: dict[str, str]) -> Storage:
    spec = s.spec
    return Storage(f"{s.name}-storage", StorageArgs(
        zone=spec.zone, vpc_id=network.vpc_id, subnet_id=network.subnet_id,
        node_security_group_id=network.security_group_id, lustre=spec.storage.lustre,
        fsx_backup_retention_days=fsx_backup_days(spec),
        checkpoint_bucket=spec.storage.checkpoint_bucket, data_disk_gb=spec.storage.data_disk_gb,
        nodes=spec.nodes, backup_tags=backup_tags, tags=s.tags, head_data_gb=HEAD_DATA_GB if slurm else 0),
        s.child)


def _backup(s: _Setting, backup_tags: dict[str, str]) -> None:
    spec = s.spec
    Backup(f"{s.name}-backup", BackupArgs(
        partition=s.partition, account_id=s.account_id, region=s.cluster.region, target_tags=backup_tags,
        every_hours=spec.snapshots.every_hours, retain=spec.snapshots.retain, tags=s.tags), s.child)


def _budget(s: _Setting) -> Budget:
    spec = s.spec
    return Budget(f"{s.name}-budget", BudgetArgs(
        cluster_name=s.name, monthly_limit=spec.budget.monthly_limit, currency=spec.budget.currency,
        thresholds_pct=spec.budget.thresholds_pct, emails=spec.budget.emails, account_id=s.account_id,
        tags=s.tags), s.child)


def _head(s: _Setting, network: Network, storage: Storage) -> tuple[Head, pulumi.Output]:
    """The Slurm head node, and the Slurm settings every node's boot config is rendered from."""
    name, cluster, spec = s.name, s.cluster, s.spec
    slurm_input = network.subnet_cidr.apply(
        lambda cidr: from_spec(cluster, head_address(cidr), secret_name(name)))
    head = Head(f"{name}-head", HeadArgs(
        cluster_name=name, zone=spec.zone, subnet_id=network.subnet_id,
        security_group_id=network.security_group_id, partition=s.partition, tags=s.tags, slurm=slurm_input,
        data_volume_id=storage.head_volume_id, termination_protection=spec.criticality == "critical",
        lustre_dns_name=storage.fsx_dns_name, lustre_mount_name=storage.fsx_mount_name,
        after=network.ready), s.child)
    return head, slurm_input


def _compute(s: _Setting, network: Network, storage: Storage, head: Optional[Head],
             slurm_input: Optional[pulumi.Output]) -> Compute:
    name, cluster, spec = s.name, s.cluster, s.spec
    return Compute(f"{name}-compute", ComputeArgs(
        cluster_name=name, shape=cluster.shape, nodes=spec.nodes, tier=spec.tier, zone=spec.zone,
        subnet_id=network.subnet_id, security_group_id=network.security_group_id, partition=s.partition,
        root_gb=spec.storage.root_gb, scratch=spec.storage.scratch,
        agent_config=monitoring_module.agent_config(), tags=s.tags, purchase=spec.purchase,
        termination_protection=spec.criticality == "critical", image_id=spec.image_id,
        bucket_arn=storage.bucket_arn, lustre_dns_name=storage.fsx_dns_name,
        lustre_mount_name=storage.fsx_mount_name, data_volume_ids=storage.data_volume_ids,
        data_disk_gb=spec.storage.data_disk_gb, capacity=spec.capacity, slurm=slurm_input,
        munge_secret_arn=head.secret_arn if head else None, power_tags={**power.plan_tags(spec), **node_cost_tags(spec)},
        after=[*network.ready, *([head.instance] if head else [])]), s.child)


def _monitoring_and_cost_controls(s: _Setting, compute: Compute, budget: Budget, head: Optional[Head],
                                  slurm_input: Optional[pulumi.Output]) -> None:
    name, cluster, spec, tags = s.name, s.cluster, s.spec, s.tags
    slurm = spec.scheduler == "slurm"
    controls = spec.schedule is not None or spec.idle_stop is not None or spec.budget.stop_at_pct is not None
    Monitoring(f"{name}-monitoring", MonitoringArgs(
        node_ids=compute.node_ids, topic_arn=budget.topic_arn, tags=tags, stopped_by_controls=controls,
        health=NodeHealth(slurm_input) if slurm else None,
        head_id=head.instance_id if head else None), s.child)

    # Slurm power saving (components/slurm/power.py): slurmctld alone starts and stops the GPU nodes, the head
    # node runs all the time, and the run windows and idle stop live in the head node's configuration; the
    # budget stop still stops the GPU nodes, and its hold keeps the head node's role from starting them again.
    # Without Slurm: the windows start and stop the GPU nodes and the head node; idle stop and the budget stop
    # only ever stop GPU nodes.
    slurm_powers = bool(power.plan_tags(spec))
    if slurm_powers and head is not None:
        head.allow_power(cluster.region, instance_arns(s.partition, s.account_id, cluster.region, compute.node_ids))
    every_node = compute.node_ids + ([head.instance_id] if head else [])
    if controls:
        CostControls(f"{name}-cost-controls", CostControlArgs(
            cluster_name=name, region=cluster.region, account_id=s.account_id, partition=s.partition,
            node_ids=compute.node_ids if slurm_powers else every_node, gpu_node_ids=compute.node_ids, tags=tags,
            topic_arn=budget.topic_arn,
            schedule=None if slurm_powers else spec.schedule, idle_stop=None if slurm_powers else spec.idle_stop,
            budget_name=budget.budget_name, stop_at_pct=spec.budget.stop_at_pct, emails=spec.budget.emails,
            starter_role=head.role if slurm_powers and head is not None else None), s.child)


def _exports(cluster: Cluster, network: Network, storage: Storage, compute: Compute, budget: Budget,
             head: Optional[Head], slurm_input: Optional[pulumi.Output]) -> dict[str, pulumi.Output]:
    """The stack outputs of the cluster."""
    exports = {
        "vpc_id": network.vpc_id,
        "subnet_id": network.subnet_id,
        "placement_group": compute.placement_group,
        "node_ids": pulumi.Output.all(*compute.node_ids),
        "fsx_dns_name": storage.fsx_dns_name,
        "fsx_mount_name": storage.fsx_mount_name,
        "checkpoint_bucket": storage.bucket_name,
        "budget_name": budget.budget_name,
        "alarm_topic_arn": budget.topic_arn,
        "connect": (pulumi.Output.concat("aws ssm start-session --target ", compute.node_ids[0],
                                         " --region ", cluster.region) if compute.node_ids else
                    pulumi.Output.from_input("no nodes yet: the Capacity Block is bought; when it starts, set "
                                             "capacity.reservation_id to capacity_reservation_id and run "
                                             "pulumi up again")),
    }
    if head is not None:
        exports.update({
            "head_node_id": head.instance_id,
            "head_address": head.private_ip,
            "munge_secret": head.secret_arn,
            "connect_head": pulumi.Output.concat("aws ssm start-session --target ", head.instance_id,
                                                 " --region ", cluster.region),
            "submit_job": slurm_input.apply(submit_command),
        })
    if compute.reservation_id is not None:
        exports["capacity_reservation_id"] = compute.reservation_id
    return exports
