"""What a Tencent Cloud plan must say aloud (pure: no Pulumi), added to the cluster's notes by `load_spec`.

Each note states a fact of the cloud that changes what `pulumi up` delivers, with its source.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from components.headnode import FIRST_JOB, HEAD_DATA_GB, HEAD_HOST_OFFSET, HEAD_INSTANCE_TYPES
from components.slurm import power
from components.slurm.oses import SLURM_RELEASE, slurm_os
from components.tencentcloud.profile import TENCENTCLOUD
from components.tiers import H100_COMPUTE

if TYPE_CHECKING:
    from components.catalog import Shape
    from components.spec import ClusterSpec


def notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    return (_shape_and_network_notes(spec, shape) + _image_notes(spec, shape) + _account_notes(spec)
            + _criticality_and_lustre_notes(spec) + slurm_notes(spec) + cost_control_notes(spec, shape))


def _shape_and_network_notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    """What the shape is and what Tencent must enable for it and for the flow logs."""
    out = []
    if spec.tier == "large" and shape.gpu not in H100_COMPUTE:
        out.append(
            f"tier large on tencentcloud: {shape.type} has {shape.gpu_label} — the HCC RDMA shape Tencent documents "
            f"for this tier, with an H100-class memory and interconnect but a small fraction of an H100's dense "
            f"compute (gpu-cluster catalog shows the figures); no H800/H100/H200 HCC shape has a primary source we "
            f"could read. For H100-class compute use cloud=aws (p5.48xlarge)")
    if not spec.network.flow_logs:
        out.append("network.flow_logs=false: no flow logs. Tencent takes VPC and subnet flow logs only from accounts it "
                   "has allowlisted by ticket (CreateFlowLog ResourceType, VPC API 2017-03-12; NAT gateway flow logs "
                   "are in beta behind a ticket too: Flow Logs FAQ, cloud.tencent.com/document/product/682/19260); "
                   "set network.flow_logs: true once your account is")
    else:
        where = ("the subnet's" if spec.network.existing_subnet_id else "the VPC's")
        out.append(f"network.flow_logs=true: {where} flows go to a CLS topic; the account must be allowlisted for "
                   f"them (a ticket to Tencent), or `pulumi up` stops at the flow log")
    if shape.hpc:
        out.append(f"{shape.type} is an HCC shape sold to accounts Tencent enables for it (imroc/tke-guide, a Tencent "
                   f"engineer's guide): have it enabled for the account before `pulumi up`")
        out.append("RDMA: every HCC node's boot step gpu-cluster-rdma waits for Tencent's rdma-agent, checks that every "
                   "RDMA device's port is ACTIVE with a GID at NCCL_IB_GID_INDEX, and writes NCCL's RoCE settings to "
                   "/etc/nccl.conf for every process; a failure stops the step with the reason (journalctl -u "
                   "gpu-cluster-rdma) and, with Slurm, the health check drains the node. Not verifiable offline: "
                   "the image carrying the RDMA stack, and the NCCL values, which the catalog marks unconfirmed "
                   "(gpu-cluster catalog)")
    return out


def _image_notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    """What the public image installs at boot, or what the stack file's own image must carry."""
    out = []
    if spec.image_id is None:
        out.append("image: the newest public TencentOS Server 3.1 (TK4) image compatible with the shape (on the CFS "
                   "Turbo client's compatibility list); the NVIDIA driver, CUDA and cuDNN are installed at first boot "
                   "by Tencent's installer (cloud.tencent.com/document/product/560/112129; its file format is taken "
                   "from that page as others cite it, unconfirmed), which takes 15-25 minutes"
                   + ("; nvidia-fabricmanager follows for this NVSwitch shape" if shape.interconnect == "nvswitch" else ""))
        if spec.scheduler == "slurm":
            system = slurm_os(TENCENTCLOUD.slurm_os(spec))
            out.append(f"scheduler: slurm on TencentOS — the head node and the GPU nodes install Slurm {SLURM_RELEASE} "
                       f"from OpenHPC 2's EL 8 repository and libjwt from EPEL 8, each repository's signing key "
                       f"trusted only with the fingerprint pinned in components/slurm/oses.py, so head and nodes run "
                       f"one release (OpenHPC's key ships with this program; EPEL's is fetched over https); the nodes "
                       f"need egress (the NAT gateway) to repos.openhpc.community and Fedora's EPEL mirrors. Not verifiable offline: "
                       + "; ".join(system.unconfirmed)
                       + ". A node whose install fails never registers, and Slurm keeps its jobs off it")
    else:
        if spec.storage.lustre is not None:
            out.append(f"image_id={spec.image_id}: /lustre needs Tencent's CFS Turbo client to support the image's "
                       f"kernel; its compatibility list (CFS documentation, \"Using CFS Turbo on Linux clients\") "
                       f"names TencentOS Server 3.1 and not Ubuntu 22.04, and says nothing we could read of 24.04. "
                       f"Where it does not, the node boots without /lustre and its boot step "
                       f"gpu-cluster-lustre-client says why (with Slurm, whose boot takes an own image to be "
                       f"Ubuntu 24.04, the spec refuses the file system)")
        if shape.interconnect == "nvswitch":
            out.append(f"image_id={spec.image_id}: {shape.type} has NVSwitch, so the image must carry "
                       f"nvidia-fabricmanager of exactly its driver's version, enabled; the boot installs neither "
                       f"on your own image (Tencent documentation, \"Installing nvidia-fabricmanager on GPU "
                       f"instances\": without it \"GPU instances cannot be used properly\")")
    return out


def _account_notes(spec: "ClusterSpec") -> list[str]:
    """Alarms, services to activate and the budget's tag: what the account must have."""
    out = []
    out.append("alarms: Tencent Cloud sends them to CAM users only, so every budget.emails address must belong to a CAM "
               "user of the account (checked at `pulumi up`); budget reminders go to the account's message-center "
               "subscribers for budgets (billing.Budget has no receiver)")
    out.append("GPU alarms watch GpuUtil, GpuTemp and GpuMemUsage, the Cloud Monitor data API's names; the alarm API's "
               "names for cvm_device are published nowhere we could read, so `pulumi up` checks them with "
               "monitor.get_alarm_metric first and stops if one is missing")
    services = ["KMS (every cloud disk is encrypted: \"When you use the cloud disk encryption feature for the first "
                "time, you must activate KMS\", CBS documentation, \"Cloud disk encryption\"), and the CVM_QcsRole "
                "service role with the QcloudKMSAccessForCVMRole policy (\"When using CBS encrypted disk, it is "
                "necessary to add CVM_QcsRole role and QcloudKMSAccessForCVMRole strategy to the account\": provider "
                "doc cbs_storage v1.82.42; the console creates it the first time a disk is encrypted there). On the "
                "international site, CBS lists disk encryption as a beta to ask Tencent for (tencentcloud.com/document/"
                "product/362/33139)"]
    if spec.scheduler == "slurm":
        services.append("Secrets Manager (SSM) with its SSM_QCSRole service role (SSM documentation, \"Quick "
                        "start\"), for the munge key")
    if (spec.schedule is not None or spec.idle_stop is not None) and not power.plan_tags(spec):
        services.append("Serverless Cloud Function with its SCF_QcsRole service role, for the cost controls "
                        "(the SCF API has the error FailedOperation.QcsRoleNotFound; a sub-account that deploys "
                        f"also needs cam:PassRole on the role {spec.name}-cost-controls, which the function runs as)")
    out.append("one-time account setup before the first `pulumi up`: activate " + "; ".join(services))
    out.append(f"budget: it counts only costs tagged gpu-cluster:name={spec.name}, and Tencent's bills carry a tag "
               f"only once its key is a cost allocation tag (Billing Center, Cost Allocation Tags: tencentcloud.com/"
               f"document/product/555/32276); set gpu-cluster:name as one once per account, or the budget counts "
               f"nothing and never reminds")
    return out


def _criticality_and_lustre_notes(spec: "ClusterSpec") -> list[str]:
    """What termination protection and the CFS Turbo file system mean for later changes."""
    out = []
    if spec.criticality == "critical":
        out.append("criticality: critical — the on-demand GPU nodes are termination-protected, and the provider "
                   "(v1.82.42, resourceTencentCloudInstanceDelete) terminates without lifting that: `pulumi destroy`, "
                   "fewer nodes or a change that replaces a node fails until a `pulumi up` with criticality: standard "
                   "has turned it off in place (`gpu-cluster review` warns of such a change)"
                   + ("; the Slurm head node is not protected, since a Slurm change replaces it"
                      if spec.scheduler == "slurm" else ""))
    if spec.storage.lustre is not None:
        out.append("storage.lustre: the CFS Turbo file system gets a snapshot policy; Tencent's pages disagree on "
                   "whether Turbo file systems take snapshots (CFS documentation, \"Snapshot use limits\": only the "
                   "Standard type; \"Scheduled snapshots\": all file systems) — if `pulumi up` stops at the "
                   "policy attachment, the file system has no snapshots and its data needs the bucket")
    if spec.storage.lustre is not None:
        out.append(f"storage.lustre.capacity_gib={spec.storage.lustre.capacity_gib} sets the CFS Turbo size at creation "
                   f"only: the provider (v1.82.42) cannot change it. To grow the file system, scale it up in the CFS "
                   f"console or with the ScaleUpFileSystem API (up only), then set capacity_gib to the new size")
        out.append("storage.lustre: the provider waits 3 × TENCENTCLOUD_READ_RETRY_TIMEOUT minutes (9 by default) for "
                   "CFS Turbo to finish creating (resource_tc_cfs_file_system.go Create, v1.82.42); how long a Turbo "
                   "file system takes is unconfirmed, so set TENCENTCLOUD_READ_RETRY_TIMEOUT=10 (30 minutes; it "
                   "lengthens the provider's other read retries too) before the first `pulumi up`, or, if it stops "
                   "while the file system is still creating, run `pulumi up --refresh` once it is available")
    return out


def slurm_notes(spec: "ClusterSpec") -> list[str]:
    """What scheduler: slurm adds on Tencent Cloud (components/tencentcloud/head.py), and what it cannot do."""
    if spec.scheduler != "slurm":
        return []
    out = [
        f"scheduler: slurm — a head node ({HEAD_INSTANCE_TYPES['tencentcloud']}, pay-as-you-go, the GPU nodes' image) "
        f"runs slurmctld at the cluster subnet's host {HEAD_HOST_OFFSET} (stack output head_address), its state on its "
        f"own {HEAD_DATA_GB} GB CBS disk in the snapshot policy. The munge key is made by the head node at its first "
        f"boot and kept in the SSM secret {spec.name}-munge-key (no plan, state or user data holds it); the head node "
        f"and the GPU nodes reach it through their CAM instance roles. A change of the Slurm configuration replaces "
        f"the head node (same address, same state disk). First job: run `sudo sbatch "
        f"/opt/gpu-cluster/jobs/{FIRST_JOB}` on the head node through TAT or the console (stack outputs connect_head, "
        f"submit_job)",
        "scheduler: slurm — no alarm watches the Slurm health check on Tencent Cloud: the check publishes NodeHealthy "
        "with Cloud Monitor's PutMonitorData (\"will be disused soon\": tencentcloud.com/document/api/248/35974), and "
        "alarm policies take only cloud-product metrics (CreateAlarmPolicy MonitorType: \"Valid values: MT_QCE\": "
        "tencentcloud.com/document/api/248/39326; provider doc monitor_alarm_policy v1.82.42 has no other). A failing "
        "node is still drained in Slurm: `sinfo -R` on the head node names the reason",
        f"scheduler: slurm — each GPU node's Slurm boot (its scripts and units, more than Tencent's 16 KB of user data "
        f"holds) is an object of the private, encrypted bucket {spec.name}-boot-<appid>; the node's user data fetches "
        f"it with its instance role (GetObject on that bucket's slurm/ objects only) and runs it only if its SHA-256 "
        f"is the one the user data pins. The plan shows every file it writes. Like every bucket here it is protected: "
        f"unprotect it before `pulumi destroy`",
        "scheduler: slurm — Slurm power saving starts and stops the GPU nodes (the head node's power agent, with a "
        "CAM policy that may start and stop those instances only, made after them; StopInstances with STOP_CHARGING, "
        "KEEP_CHARGING for prepaid nodes); a node that has been up in Slurm and is then seen powered down with its "
        "instance running for 30 min (ResumeTimeout) is stopped, since it bills with no job able to use it; a node "
        "that never registered (still in its first boot, or made without Slurm) is never stopped that way",
    ]
    out += power.idle_stop_note(spec, "CVM StopInstances with STOP_CHARGING", "StartInstances", "Cloud Monitor alarm")
    out += power.schedule_note(spec)
    if spec.storage.checkpoint_bucket:
        out.append("scheduler: slurm — only root reaches the metadata service on the head and GPU nodes (so no job can "
                   "read the munge key through the CAM role), and jobs get no role of their own on Tencent Cloud yet: "
                   "a job reaches the checkpoint bucket only with credentials you give it")
    return out


def cost_control_notes(spec: "ClusterSpec", shape: "Shape") -> list[str]:
    """What stops what on Tencent Cloud, and what it cannot do."""
    out = []
    function = f"the SCF function {spec.name}-cost-controls"
    slurm_powers = bool(power.plan_tags(spec))  # then the windows and idle stop are Slurm's (slurm_notes)
    if spec.schedule is not None and not slurm_powers:
        nodes = "the nodes and the Slurm head node" if spec.scheduler == "slurm" else "the nodes"
        out.append(f"schedule: {function} starts {nodes} when a window opens and stops them with STOP_CHARGING when "
                   f"it closes ({'; '.join(spec.schedule.windows)}, {spec.schedule.timezone}); Tencent Cloud has no "
                   f"instance scheduler (cvm.ActionTimer only terminates), so a timer trigger runs it at each minute "
                   f"an edge can fall on; the nodes the first `pulumi up` creates outside a window run until the "
                   f"next stop")
    if spec.idle_stop is not None and not slurm_powers:
        out.append(f"idle_stop: every 5 minutes {function} stops (STOP_CHARGING) a node whose Cloud Monitor GpuUtil "
                   f"stayed below {spec.idle_stop.gpu_util_below_pct} % in every 5-minute period of the last "
                   f"{spec.idle_stop.for_minutes} min; a node with missing data is never stopped")
    if spec.budget.stop_at_pct is not None:
        out.append(f"budget.stop_at_pct={spec.budget.stop_at_pct}: Tencent Cloud budgets only remind (billing.Budget "
                   f"has no action), so nothing stops the nodes at that spend: the budget reminds at "
                   f"{spec.budget.stop_at_pct} % as well, and stopping is yours")
    if spec.schedule is not None or spec.idle_stop is not None:
        out.append("stopping with STOP_CHARGING ends the CPU, GPU and memory charges of a pay-as-you-go node with cloud "
                   "disks; its disks, CFS, EIPs and the NAT gateway keep billing, and starting it again may fail "
                   "while the zone lacks the shape (CVM documentation, \"No charges when shut down\", "
                   "intl.cloud.tencent.com/document/product/213/19918)")
    if spec.capacity.type == "prepaid":
        months = spec.capacity.months or 1
        renew = ("then renewed automatically one month at a time (provider doc instance v1.82.42, "
                 "instance_charge_type_prepaid_renew_flag: NOTIFY_AND_AUTO_RENEW renews \"on a monthly basis\")"
                 if spec.capacity.auto_renew else "not renewed automatically (a reminder only)")
        out.append(f"capacity.type=prepaid: monthly prepaid nodes, a first term of {months} month(s), {renew}. Tencent Cloud "
                   f"International sells CVM only pay-as-you-go (provider doc instance v1.82.42: \"TencentCloud "
                   f"International only supports POSTPAID_BY_HOUR and CDHPAID\"), so this needs a China-site "
                   f"account; a prepaid node cannot be deleted before its term ends: `pulumi destroy` moves it to the "
                   f"recycle bin")
    return out
