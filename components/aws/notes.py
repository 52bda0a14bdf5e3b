"""What an AWS plan must say aloud (pure: no Pulumi), added to the cluster's notes by `load_spec`.

Each note states a fact of the cloud that changes what `pulumi up` delivers, with its source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from components import catalog
from components.slurm import power
from components.headnode import FIRST_JOB, HEAD_DATA_GB, HEAD_HOST_OFFSET, HEAD_INSTANCE_TYPES
from components.spec import NAME_TAG

if TYPE_CHECKING:
    from components.catalog import Shape
    from components.spec import ClusterSpec

COST_TAG_COMMAND = (f"aws ce update-cost-allocation-tags-status --cost-allocation-tags-status "
                    f"TagKey={NAME_TAG},Status=Active")


def fsx_backup_days(spec: "ClusterSpec") -> int:
    """Days of FSx automatic backups: `snapshots.retain` capped at the service maximum, and none for a
    file system linked to S3 — FSx backs up only persistent file systems "not linked to an Amazon S3
    data repository" (FSx for Lustre user guide, "Working with backups":
    docs.aws.amazon.com/fsx/latest/LustreGuide/using-backups-fsx.html; CreateBackup API reference)."""
    lustre = spec.storage.lustre
    if lustre is None or lustre.import_path:
        return 0
    return min(spec.snapshots.retain, catalog.limit("aws", "fsx_backup_retention_days_max"))


def notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    out = [
        f"budget: it counts only resources tagged {NAME_TAG}, and AWS Budgets filters on a user tag only once "
        f"that key is an active cost-allocation tag. Activate it once per account (not per cluster, and never "
        f"by a cluster's stack, whose destroy would switch it off for every cluster): {COST_TAG_COMMAND} — "
        f"possible up to 24 h after the first tagged resource is billed "
        f"(docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/activating-tags.html)",
    ]
    out.append(vcpu_quota_note(spec, shape))
    lustre = spec.storage.lustre
    cap = catalog.limit("aws", "fsx_backup_retention_days_max")
    if lustre is not None and lustre.import_path:
        out.append(f"storage.lustre.import_path={lustre.import_path}: FSx for Lustre cannot back up a file system "
                   f"linked to S3 (FSx for Lustre user guide, \"Working with backups\"), so it has no automatic "
                   f"backups; the S3 bucket holds the durable copy of the linked data — keep results that exist only "
                   f"on /lustre in the checkpoint bucket or on /data")
    elif lustre is not None and spec.snapshots.retain > cap:
        out.append(f"snapshots.retain={spec.snapshots.retain}: FSx for Lustre keeps automatic backups at most {cap} "
                   f"days, so the file system's backups are kept {cap} days (data-volume snapshots keep "
                   f"{spec.snapshots.retain})")
    return out + slurm_notes(spec) + cost_control_notes(spec, shape)


# EC2 counts running instances as vCPUs per family group, and a new account's GPU groups start small.
# The quotas' names, as Service Quotas lists them for ec2 (e.g. "Running On-Demand Standard (A, C, D, H,
# I, M, R, T, Z) instances", quota L-1216C47A, AWS CLI user guide, service-quotas examples).
_QUOTA_GROUPS = {"p": "P", "g": "G and VT"}


def vcpu_quota_note(spec: "ClusterSpec", shape: "Shape") -> str:
    """What the GPU nodes need of the account's EC2 vCPU quota, which RunInstances enforces last."""
    group = _QUOTA_GROUPS.get(shape.family[:1].lower(), shape.family[:1].upper())
    vcpus = spec.nodes * shape.vcpu
    spot = spec.purchase != "on_demand"
    kinds = " and ".join(
        ([f"\"Running On-Demand {group} instances\""] if spec.purchase != "spot" else [])
        + ([f"\"All {group} Spot Instance Requests\""] if spot else []))
    return (f"EC2 vCPU quota: {spec.nodes} × {shape.type} is {vcpus} vCPUs of {kinds} in the region (Service Quotas, "
            f"service ec2), which a new account often has far below that; RunInstances refuses the nodes beyond it "
            f"(VcpuLimitExceeded) after the network and storage exist, so check it first: aws service-quotas "
            f"list-service-quotas --service-code ec2, and request an increase where it is short")


def slurm_notes(spec: "ClusterSpec") -> list[str]:
    """What scheduler: slurm adds on AWS (components/aws/head.py)."""
    if spec.scheduler != "slurm":
        return []
    jobs_bucket = (f"; jobs reach the checkpoint bucket with the role {spec.name}-compute-job-role's credentials, "
                   f"renewed by root every 15 minutes" if spec.storage.checkpoint_bucket else "")
    return [
        f"scheduler: slurm — a head node ({HEAD_INSTANCE_TYPES['aws']}, on demand, Canonical's Ubuntu 24.04 like the "
        f"GPU nodes' Deep Learning AMI) runs slurmctld at the cluster subnet's host {HEAD_HOST_OFFSET} (stack output "
        f"head_address), its state on its own {HEAD_DATA_GB} GB volume, snapshotted with the data volumes. The munge "
        f"key is made by the head node at its first boot and kept in the Secrets Manager secret {spec.name}-munge-key: "
        f"no plan, state or user data holds it. Only root reaches the metadata service (and so the node role and the "
        f"key) on the head and GPU nodes{jobs_bucket}. First job: `aws ssm start-session --target <head_node_id>`, "
        f"then `sudo sbatch /opt/gpu-cluster/jobs/{FIRST_JOB}` (stack outputs connect_head, submit_job)",
        "scheduler: slurm — cloud-init writes slurm.conf only at a machine's first boot, so a change of the Slurm "
        "configuration (nodes, purchase, /lustre) replaces the head node: a few minutes without scheduling while the "
        "new one boots at the same address with the same state volume; running jobs keep running. GPU nodes keep "
        "their boot config (roll one with `pulumi up --replace`); they fetch slurm.conf from the head node",
        "scheduler: slurm — every GPU node's boot health check (GPUs and their ECC errors, NVLink, EFA, mounts, fio) "
        "and a 5-minute GPU watch between checks drain a failing node in Slurm and publish GpuCluster/NodeHealthy; a "
        "CloudWatch alarm per node reports a failed check to the alarm topic. A drained node still failing at its "
        "15-minute recheck has its jobs requeued and is rebooted once; failing after that, Slurm powers it down (EC2 "
        "stops it) and starts it again, on other hardware, when a job needs it; failing even then, it stays drained "
        "for you to replace (`pulumi up --replace`). Slurm power saving (the head node's role may start and stop "
        "the GPU nodes, and only them) is what stops and starts them",
    ]


def _idle_stop_notes(spec: "ClusterSpec") -> list[str]:
    """How idle stop acts: a CloudWatch alarm on GPU use without a scheduler, Slurm power saving with Slurm."""
    if spec.idle_stop is None:
        return []
    if spec.scheduler == "slurm":
        return power.idle_stop_note(spec, "EC2 StopInstances", "StartInstances", "CloudWatch alarm")
    return [f"idle_stop: a CloudWatch alarm per node stops it (EC2 stop action) when its GPU utilisation averages "
            f"below {spec.idle_stop.gpu_util_below_pct} % in every 5 minutes for {spec.idle_stop.for_minutes} "
            f"min; a node that sends no metric is never stopped. CloudWatch creates the service-linked role for "
            f"EC2 alarm actions itself at the first such alarm, so whoever runs `pulumi up` needs "
            f"iam:CreateServiceLinkedRole (CloudWatch API reference, PutMetricAlarm)"]


def _schedule_notes(spec: "ClusterSpec") -> list[str]:
    """How the run windows act: Slurm keeps to them with Slurm, EventBridge schedules without."""
    if spec.schedule is None:
        return []
    windows = f"{'; '.join(spec.schedule.windows)}, {spec.schedule.timezone}"
    if spec.scheduler == "slurm":
        return power.schedule_note(spec)
    return [f"schedule: EventBridge Scheduler starts the GPU nodes when a window opens and stops them when it closes "
            f"({windows}); a node started by hand outside the windows runs until the next stop, and so do the nodes "
            f"the first `pulumi up` launches outside a window"]


def cost_control_notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    """What stops what, and what a stop costs, on AWS."""
    out = []
    what = "the GPU nodes"
    slurm = spec.scheduler == "slurm"
    out += _schedule_notes(spec)
    out += _idle_stop_notes(spec)
    if spec.budget.stop_at_pct is not None:
        starter = ("the Slurm head node's role, so Slurm's resume program" if slurm else
                   "the schedules' role, so the run windows" if spec.schedule is not None else None)
        hold = (f" and a second action attaches a Deny of ec2:StartInstances to {starter} does not start them again "
                f"(each start it refuses powers the node down again); reverse both actions in the AWS Budgets console "
                f"once the budget allows, and before removing stop_at_pct (IAM refuses to delete the Deny while it is "
                f"attached to a role that stays)" if starter else "; nothing starts them again: start them by hand once "
                "the budget allows")
        out.append(f"budget.stop_at_pct={spec.budget.stop_at_pct}: an AWS Budgets action runs the AWS-StopEC2Instance "
                   f"automation on {what} when actual spend reaches {spec.budget.stop_at_pct} % of "
                   f"{spec.budget.monthly_limit:g} a month{hold}. AWS Budgets refreshes spend up to three times a day, "
                   f"so the nodes may run some hours past the threshold (AWS Cost Management user guide, \"Managing your costs with AWS Budgets\")")
    if spec.schedule is not None or spec.idle_stop is not None or spec.budget.stop_at_pct is not None:
        stopped = ("a stopped node keeps its EBS volumes (billed) and loses /scratch: instance-store NVMe data does "
                   "not survive a stop (EC2 user guide, \"Instance store volume lifetime\")" if spec.storage.scratch ==
                   "nvme" else "a stopped node keeps its EBS volumes (billed)")
        out.append(f"stopping: {stopped}; FSx, the NAT gateway and the bucket keep billing. A stopped {shape.type} "
                   f"starts again only when the zone has the capacity (InsufficientInstanceCapacity otherwise)")
    cap = spec.capacity
    if cap.type == "odcr":
        out.append(f"capacity.type=odcr: an On-Demand Capacity Reservation for {spec.nodes} x {shape.type} in the "
                   f"placement group, billed at the on-demand rate while it is active whether the nodes run or not "
                   f"(EC2 user guide, \"Capacity Reservation pricing and billing\"); destroying the stack cancels it")
    elif cap.type == "capacity_block" and cap.reservation_id is None:
        out.append(f"capacity.type=capacity_block, step 1 of 2: `pulumi up` buys a Capacity Block of {spec.nodes} x "
                   f"{shape.type} for {cap.duration_hours} h from {cap.start_date} (paid up front, cannot be "
                   f"cancelled: `pulumi destroy` only forgets it, provider doc ec2_capacity_block_reservation) and "
                   f"launches no GPU node, because EC2 launches into a block only once it is active. The offering "
                   f"lookup (data source aws_ec2_capacity_block_offering) fails unless exactly one offering matches, "
                   f"and it cannot ask for a zone: when several zones offer the block that day, `pulumi preview` "
                   f"stops before buying anything; choose another start_date. Then set "
                   f"capacity.reservation_id to the stack output capacity_reservation_id: updates launch the "
                   f"nodes only once the block is active (blocks start at 11:30 UTC, EC2 user guide, \"Find and "
                   f"purchase Capacity Blocks\", \"Use Capacity Blocks\")")
    elif cap.type == "capacity_block":
        out.append(f"capacity.type=capacity_block: the Capacity Block {cap.reservation_id} is bought (the stack no "
                   f"longer holds the purchase). Each update reads it (data source "
                   f"aws_ec2_capacity_block_reservation, filtered by {shape.type} and {spec.zone}: a wrong id or a "
                   f"block of another shape or zone fails the preview, before anything is created) and launches the "
                   f"nodes only while its state is active; before its start (11:30 UTC on its start day) an update "
                   f"launches none, so run `pulumi up` again then. This offline plan shows the block active. EC2 "
                   f"starts terminating instances in a block 30 minutes before it ends, so keep checkpoints on "
                   f"/lustre, /data or the bucket (EC2 user guide, \"Use Capacity Blocks\")")
    return out
