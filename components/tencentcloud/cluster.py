"""One GPU training cluster on Tencent Cloud: network, storage, head node, compute, backup, budget, monitoring.

Order follows the data: the network first; storage before compute (the nodes' boot config mounts
the CFS Turbo file system, and the persistent disks exist before the nodes they attach to); the Slurm
head node (scheduler slurm) before the GPU nodes, whose boot names its address and the munge-key
secret; backup after storage; monitoring after the nodes and the budget's alarm notice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components.headnode import HEAD_DATA_GB, head_address, submit_command
from components.slurm import from_spec, node_boot_parts, power
from components.spec import Cluster, ClusterSpec, node_cost_tags
from components.tencentcloud.profile import turbo_type
from components.tencentcloud import boot
from components.tencentcloud.head import HEAD_INSTANCE_TYPE, Head, HeadArgs, secret_name
from components.tencentcloud.addressing import turbo_cidr
from components.tencentcloud.backup import Backup, BackupArgs
from components.tencentcloud.budget import Budget, BudgetArgs
from components.tencentcloud.compute import SCRATCH_DISK_GB, Compute, ComputeArgs, spot_max_price
from components.tencentcloud.costcontrol import CostControlArgs, CostControls
from components.tencentcloud.monitoring import Monitoring, MonitoringArgs
from components.tencentcloud.network import Network, NetworkArgs
from components.tencentcloud.storage import Storage, StorageArgs, TurboArgs

PUBLIC_IMAGE_OS = "TencentOS Server 3.1 (TK4)"
"""Default image: the newest public TencentOS Server 3.1 (TK4) image compatible with the shape. It is
on the CFS Turbo client's compatibility list (CFS documentation, "Using CFS Turbo on Linux clients";
Ubuntu 22.04 is not), and Tencent's HCC guides use it for RDMA shapes, whose RDMA drivers the public
images carry. It has no GPU driver: the boot config installs one (components/tencentcloud/boot.py)."""


def first_image(images: list, instance_type: str) -> str:
    """The id of the newest image the lookup found (the provider sorts them newest first and returns
    them only in `images`: data_source_tc_images.go), or a sentence when there is none."""
    if not images:
        raise pulumi.RunError(f"no public image with os_name containing {PUBLIC_IMAGE_OS!r} is compatible with "
                              f"{instance_type} in this region; set cluster.image_id to an image that is")
    return images[0].image_id


def reminder_thresholds(thresholds_pct: tuple[int, ...], stop_at_pct: Optional[int]) -> tuple[int, ...]:
    """The budget's ACTUAL reminders; budget.stop_at_pct becomes one more (Tencent budgets cannot act:
    billing.Budget has no action, provider doc billing_budget v1.82.42), and the plan says so."""
    if stop_at_pct is None or stop_at_pct in thresholds_pct:
        return thresholds_pct
    return tuple(sorted((*thresholds_pct, stop_at_pct)))


class ClusterComponent(pulumi.ComponentResource):
    exports: dict[str, pulumi.Output]

    def __init__(self, name: str, cluster: Cluster, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        spec, shape, tags = cluster.spec, cluster.shape, cluster.tags
        s = _Setting(name=name, cluster=cluster, tags=tags, child=child, component=self)
        lustre = spec.storage.lustre
        lustre_cidr = turbo_cidr(spec.network.cidr) if lustre else None

        network = _network(s, lustre_cidr)
        storage = _storage(s, network, lustre_cidr)
        image_id = _image(s, shape.type)
        head = slurm = None
        if spec.scheduler == "slurm":
            head, slurm = _head(s, network, storage)
        user_data = _node_user_data(s, storage, head, slurm)
        compute = _compute(s, network, storage, head, image_id, user_data)
        _backup(s, storage)
        budget = _budget(s)
        _monitoring_and_cost_controls(s, compute, budget, head)

        self.exports = _exports(cluster, network, storage, compute, budget, head, slurm)
        self.register_outputs(self.exports)


@dataclass(frozen=True)
class _Setting:
    """What every role of the cluster is built from: the cluster, its tags, and the cluster component
    (`child`: the options that parent a role to it)."""
    name: str
    cluster: Cluster
    tags: dict[str, str]
    child: pulumi.ResourceOptions
    component: pulumi.ComponentResource

    @property
    def spec(self) -> ClusterSpec:
        return self.cluster.spec


def _network(s: _Setting, lustre_cidr: Optional[str]) -> Network:
    name, spec = s.name, s.spec
    return Network(f"{name}-network", NetworkArgs(
        cluster_name=name, zone=spec.zone, cidr=spec.network.cidr, tags=s.tags,
        ssh_cidrs=spec.network.ssh_cidrs, existing_subnet_id=spec.network.existing_subnet_id,
        egress_mbps=spec.network.egress_mbps, lustre_cidr=lustre_cidr,
        flow_logs=bool(spec.network.flow_logs)), opts=s.child)


def _storage(s: _Setting, network: Network, lustre_cidr: Optional[str]) -> Storage:
    name, cluster, spec = s.name, s.cluster, s.spec
    lustre = spec.storage.lustre
    return Storage(f"{name}-storage", StorageArgs(
        cluster_name=name, region=cluster.region, zone=spec.zone, vpc_id=network.vpc_id,
        tags=s.tags, nodes=spec.nodes, data_disk_gb=spec.storage.data_disk_gb,
        turbo=TurboArgs(storage_type=turbo_type(lustre.throughput_per_tib),
                        capacity_gib=lustre.capacity_gib, cidr=lustre_cidr) if lustre else None,
        checkpoint_bucket=spec.storage.checkpoint_bucket,
        head_data_gb=HEAD_DATA_GB if spec.scheduler == "slurm" else 0), opts=s.child)


def _image(s: _Setting, instance_type: str) -> pulumi.Input[str]:
    """The stack file's image, or the newest public image for `instance_type` (looked up)."""
    return s.spec.image_id or tencentcloud.images.get_instance_output(
        image_types=["PUBLIC_IMAGE"], os_name=PUBLIC_IMAGE_OS, instance_type=instance_type,
        opts=pulumi.InvokeOutputOptions(parent=s.component)).images.apply(
            lambda found: first_image(found, instance_type))


def _head(s: _Setting, network: Network, storage: Storage) -> tuple[Head, pulumi.Output]:
    """The Slurm head node, and the Slurm settings every node's boot config is rendered from."""
    name, cluster, spec = s.name, s.cluster, s.spec
    slurm = network.subnet_cidr.apply(lambda cidr: from_spec(cluster, head_address(cidr), secret_name(name)))
    head = Head(f"{name}-head", HeadArgs(
        cluster_name=name, region=cluster.region, zone=spec.zone, vpc_id=network.vpc_id,
        subnet_id=network.subnet_id, security_group_id=network.security_group_id,
        image_id=_image(s, HEAD_INSTANCE_TYPE), tags=s.tags, slurm=slurm, data_disk_id=storage.head_disk_id,
        lustre_source=storage.mount_target, after=network.ready, nodes=spec.nodes),
        opts=s.child)
    return head, slurm


def _node_user_data(s: _Setting, storage: Storage, head: Optional[Head],
                    slurm: Optional[pulumi.Output]) -> list[pulumi.Output]:
    name, spec, shape = s.name, s.spec, s.cluster.shape
    install_driver = spec.image_id is None

    # One document per node: each names its own data disk by id and, with Slurm, its own Slurm boot object (the
    # head component keeps them in the boot bucket: they do not fit the user data). Only rendering happens in apply().
    def node_user_data(i: int, lustre_source, disk_id, slurm_input, boot_object, role) -> str:
        node_boot = boot.boot_config(shape=shape, scratch=spec.storage.scratch, lustre_source=lustre_source,
                                     install_driver=install_driver, data_disk_id=disk_id)
        if slurm_input is not None:
            node_boot = boot.with_slurm_boot(node_boot, node_boot_parts(slurm_input, i).packages, boot_object,
                                             s.cluster.region, role)
        return boot.user_data(node_boot, f"{name}-node-{i}")

    user_data = []
    for i in range(spec.nodes):
        disk = storage.data_disk_ids[i] if i < len(storage.data_disk_ids) else None
        user_data.append(pulumi.Output.all(
            storage.mount_target, disk, slurm, head.node_boot[i] if head else None,
            head.node_role_name if head else None).apply(lambda v, i=i: node_user_data(i, *v)))
    return user_data


def _compute(s: _Setting, network: Network, storage: Storage, head: Optional[Head], image_id: pulumi.Input[str],
             user_data: list[pulumi.Output]) -> Compute:
    name, spec, shape = s.name, s.spec, s.cluster.shape
    powered = power.plan_tags(spec)  # Slurm starts and stops the nodes
    return Compute(f"{name}-compute", ComputeArgs(
        cluster_name=name, zone=spec.zone, instance_type=shape.type, nodes=spec.nodes, purchase=spec.purchase,
        vpc_id=network.vpc_id, subnet_id=network.subnet_id, security_group_id=network.security_group_id,
        image_id=image_id, user_data=user_data, root_gb=spec.storage.root_gb, tags=s.tags, hpc=shape.hpc,
        family=shape.family,
        critical=spec.criticality == "critical", spot_max_price=spot_max_price(shape.price_hourly),
        scratch_disk_gb=SCRATCH_DISK_GB if spec.storage.scratch == "disk" else 0,
        data_disk_ids=storage.data_disk_ids, capacity=spec.capacity,
        cam_role_name=head.node_role_name if head else None,
        node_tags={**powered, **node_cost_tags(spec)}, slurm_powers=bool(powered),
        after=[*network.ready, *([head.instance, *head.boot_objects] if head else [])]),
        opts=s.child)


def _backup(s: _Setting, storage: Storage) -> None:
    spec = s.spec
    Backup(f"{s.name}-backup", BackupArgs(
        cluster_name=s.name, every_hours=spec.snapshots.every_hours, retain_days=spec.snapshots.retain,
        data_disk_ids=storage.data_disk_ids, file_system_id=storage.file_system_id,
        head_disk_id=storage.head_disk_id), opts=s.child)


def _budget(s: _Setting) -> Budget:
    spec = s.spec
    return Budget(f"{s.name}-budget", BudgetArgs(
        cluster_name=s.name, monthly_limit=spec.budget.monthly_limit,
        thresholds_pct=reminder_thresholds(spec.budget.thresholds_pct, spec.budget.stop_at_pct),
        emails=spec.budget.emails, tags=s.tags), opts=s.child)


def _monitoring_and_cost_controls(s: _Setting, compute: Compute, budget: Budget, head: Optional[Head]) -> None:
    name, cluster, spec = s.name, s.cluster, s.spec
    Monitoring(f"{name}-monitoring", MonitoringArgs(
        cluster_name=name, node_ids=compute.node_ids, notice_id=budget.notice_id,
        region=cluster.region), opts=s.child)

    # Under Slurm power saving (components/slurm/power.py) slurmctld alone starts and stops the GPU nodes, and the
    # run windows and idle stop live in the head node's configuration. Without Slurm the windows start and stop the
    # head node with the GPU nodes, and idle stop only ever stops GPU nodes. (A Tencent budget only reminds.)
    slurm_powers = bool(power.plan_tags(spec))
    if slurm_powers and head is not None:
        head.allow_power(cluster.region, compute.node_ids)
    every_node = compute.node_ids + ([head.instance_id] if head else [])
    if (spec.schedule is not None or spec.idle_stop is not None) and not slurm_powers:
        CostControls(f"{name}-cost-controls", CostControlArgs(
            cluster_name=name, region=cluster.region, node_ids=every_node, gpu_node_ids=compute.node_ids,
            tags=s.tags, schedule=spec.schedule, idle_stop=spec.idle_stop), opts=s.child)


def _exports(cluster: Cluster, network: Network, storage: Storage, compute: Compute, budget: Budget,
             head: Optional[Head], slurm: Optional[pulumi.Output]) -> dict[str, pulumi.Output]:
    """The stack outputs of the cluster."""
    exports = {
        "vpc_id": network.vpc_id,
        "subnet_id": network.subnet_id,
        "hpc_cluster_id": compute.hpc_cluster_id,
        "node_ids": pulumi.Output.all(*compute.node_ids),
        "cfs_mount_target": storage.mount_target,
        "checkpoint_bucket": storage.bucket,
        "budget_id": budget.budget_id,
        "connect": pulumi.Output.concat(
            "no public IPs: run commands with TAT (tat.Command + tat.Invoker) or log in from the CVM "
            "console (OrcaTerm) on ", compute.node_ids[0], f" in {cluster.region}"),
    }
    if head is not None:
        # TAT runs a shell command as root on an instance, the command base64-encoded (TAT API RunCommand:
        # Content, InstanceIds; tencentcloud.com/document/api/1147/46686).
        exports.update({
            "head_node_id": head.instance_id,
            "head_address": head.private_ip,
            "munge_secret": head.secret_name,
            "connect_head": pulumi.Output.concat(
                "no public IP: log in from the CVM console (OrcaTerm) on ", head.instance_id,
                f", or run a command there with TAT: tccli tat RunCommand --region {cluster.region} "
                f"--InstanceIds '[\"", head.instance_id, "\"]' --Content \"$(printf %s '<command>' | base64)\""),
            "submit_job": slurm.apply(submit_command),
        })
    return exports
