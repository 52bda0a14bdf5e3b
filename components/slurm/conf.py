"""The cluster's Slurm configuration files as data: slurm.conf, gres.conf and cgroup.conf.

One head node runs slurmctld; every GPU node runs slurmd in "configless" mode and fetches these
files from it (SlurmctldParameters=enable_configless; slurmd --conf-server), so the GPU nodes'
user data carries only the head node's address and the munge secret's name.

Node addressing. GPU nodes are declared State=CLOUD with no NodeAddr: "when a cloud node
registers, the node's NodeAddr and NodeHostName will automatically be set" (cloud_reg_addrs), and
Slurm hands every job step the addresses of its nodes, so no node needs DNS or another node's IP
(slurm.conf(5), cloud_dns / cloud_reg_addrs). TreeWidth=65533 makes slurmctld talk to each slurmd
directly instead of through peers whose addresses they would have to resolve (as
ParallelCluster's slurm.conf does without DNS; aws/aws-parallelcluster-cookbook @ f75d84c3
templates/default/slurm/slurm.conf.erb). Only the head node's address must be known in advance:
it is `head_address`, an IP or a name every GPU node resolves.

Every key below is documented in slurm.conf(5) / gres.conf(5) / cgroup.conf(5) of Slurm 22.05.8
(Debian bookworm slurm-wlm 22.05.8-4+deb12u3), the version the local harness runs, and kept in 23.11,
the release the nodes install from Ubuntu 24.04 (packages.ubuntu.com/noble/slurmd). Slurm 21.08
(Ubuntu 22.04) has no cgroup/v2 plugin, which is why the images are Ubuntu 24.04.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.catalog import Cloud, Shape
from components.clouds import profile
from components.slurm.clouds import ops
from components.slurm.oses import SlurmOS, slurm_os
from components.spec import Purchase, node_is_spot

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURM_USER = "slurm"
"""Debian's and Ubuntu's packages create it with the fixed uid 64030 (slurm-wlm-basic-plugins
preinst: `adduser --system --group --uid 64030 ... slurm`), so it is the same user on every node."""
DEFAULT_STATE_DIR = "/data/slurm/state"
"""slurmctld's StateSaveLocation: on the head node's persistent (snapshotted) data disk."""
HEALTH_CHECK_INTERVAL_S = 300
RESUME_TIMEOUT_S = 1800
"""ResumeTimeout: a GPU node's start is an EC2 start, the boot, the driver and fabric manager, and node-setup's
health check (fio included) before slurmd registers; Slurm sets a node that takes longer DOWN and requeues its
jobs (slurm.conf(5), ResumeTimeout). 30 minutes, as Azure CycleCloud's Slurm integration sets it (its slurm.conf:
ResumeTimeout=1800, SuspendTimeout=600)."""
SUSPEND_TIMEOUT_S = 600
"""SuspendTimeout: how long a stop may take before Slurm may resume the node again. An EC2 stop of a large GPU
instance takes minutes; power-agent also retries a start that finds the node still stopping (components/slurm/power.py)."""
POWER_SAVE_MIN_INTERVAL_S = 30
"""power_save_min_interval, as ParallelCluster sets it (aws/aws-parallelcluster-cookbook
templates/default/slurm/slurm.conf.erb: SlurmctldParameters=idle_on_node_suspend,power_save_min_interval=30)."""
REAL_MEMORY_FRACTION = 0.90
"""RealMemory as a fraction of the shape's marketed memory. slurm.conf(5): RealMemory "default value
is 1" (MB); a node registering less than it is set INVAL ("Low RealMemory"), CLOUD nodes in Slurm 23.11
down to 90 % of it (DEFAULT_CLOUD_REG_MEM_PERCENT, src/slurmctld/node_mgr.c, slurm-23-11-4-1). The
kernel shows a few percent less than the marketed size (its own structures, Ubuntu's crashkernel
reservation of up to 4 GiB)."""


@dataclass(frozen=True)
class Paths:
    """Where things live on a node. The defaults are the real ones; the local harness roots them
    in a temporary directory (Paths.rooted) and changes nothing else."""

    prefix: str = "/opt/gpu-cluster"
    """bin/ (our scripts) and jobs/ (the shipped sbatch jobs)."""
    etc: str = "/etc/gpu-cluster"
    state: str = "/var/lib/gpu-cluster"
    slurm_etc: str = "/etc/slurm"
    etc_default: str = "/etc/default"
    """/etc/default/slurmd holds SLURMD_OPTIONS for the packaged slurmd.service."""
    munge_key: str = "/etc/munge/munge.key"
    infiniband_sysfs: str = "/sys/class/infiniband"
    scratch: str = "/scratch"
    lustre: str = "/lustre"
    data: str = "/data"

    def rooted(self, root: str) -> "Paths":
        return Paths(**{k: root.rstrip("/") + v for k, v in self.__dict__.items()})

    @property
    def bin(self) -> str:
        return f"{self.prefix}/bin"

    @property
    def jobs(self) -> str:
        return f"{self.prefix}/jobs"

    @property
    def node_name_file(self) -> str:
        return f"{self.etc}/node-name"

    @property
    def health_status_file(self) -> str:
        return f"{self.state}/health"

    @property
    def health_reboot_file(self) -> str:
        """Written by health-recheck before the one reboot a failing node gets; removed once a check passes."""
        return f"{self.state}/health-reboot"

    @property
    def health_replace_file(self) -> str:
        """Written by health-recheck before it powers a node that failed after its reboot down to be replaced
        (stopped, then started on other hardware); removed once a check passes."""
        return f"{self.state}/health-replace"

    @property
    def power_spool(self) -> str:
        """Head node: where the Slurm power programs (SlurmUser) leave requests for power-agent (root)."""
        return f"{self.state}/power"

    @property
    def job_credentials_file(self) -> str:
        """The jobs' role's temporary credentials, as a credential_process answer (0644)."""
        return f"{self.state}/job-credentials.json"

    @property
    def job_aws_config(self) -> str:
        """The AWS config every task is pointed at (AWS_CONFIG_FILE, by task-prolog)."""
        return f"{self.etc}/aws-config"


@dataclass(frozen=True)
class SlurmCluster:
    """Everything the Slurm generators need about one cluster (the API's one input object)."""

    name: str
    """The cluster name (spec `name`): ClusterName, the partition, and every node name's prefix."""
    cloud: Cloud
    region: str
    shape: Shape
    """The catalogued GPU shape: gres type and count, CPUs, expected hardware."""
    nodes: int
    head_address: str
    """The head node's private IP or a DNS name every GPU node resolves (SlurmctldHost address)."""
    munge_secret_id: str
    """AWS: the Secrets Manager secret's ARN or name. Tencent: the SSM secret's name."""
    purchase: Purchase = "on_demand"
    scratch: bool = False
    """/scratch is mounted on the GPU nodes (spec storage.scratch is nvme or disk)."""
    lustre: bool = False
    """/lustre is mounted on the head and GPU nodes: shared home and job directories live there."""
    data_disk: bool = False
    """/data (a persistent data disk) is mounted on the GPU nodes."""
    state_dir: str = DEFAULT_STATE_DIR
    munge_secret_version: str = "munge-key-v1"
    """Tencent SSM version id of the key (SSM reads need one); unused on AWS."""
    job_credentials: bool = False
    """Jobs get temporary credentials of a role of their own (the checkpoint bucket), since the metadata
    service, and so the instance role, is closed to them: slurm.conf names task-prolog, and the GPU
    nodes renew the credentials (components/slurm/scripts.py job-credentials)."""
    job_role: str = ""
    """That role's id for the GPU nodes' boot (AWS: its ARN); the head node's files do not need it."""
    suspend_after_s: int | None = None
    """Slurm power saving's SuspendTime: a node with no job for this long is stopped (spec idle_stop.for_minutes
    under Slurm). None: never for idleness; the power programs still exist wherever the cloud has them, for run
    windows and for replacing a failed node (stop, then start on other hardware)."""
    windows: tuple[str, ...] = ()
    """Run windows (spec schedule.windows): outside them the partition is DOWN and the nodes are powered down."""
    timezone: str = "UTC"
    metric_namespace: str = "GpuCluster"
    metric_name: str = "NodeHealthy"
    prepaid: bool = False
    """The GPU nodes are prepaid for a term (Tencent capacity.type prepaid): a stop keeps its charges."""
    os: str = "ubuntu-24.04"
    """The head node's and the GPU nodes' operating system (components/slurm/oses.py): what installs Slurm."""
    paths: Paths = field(default_factory=Paths)

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"a Slurm cluster needs at least one GPU node, got {self.nodes}")
        if self.shape.cloud != self.cloud:
            raise ValueError(f"shape {self.shape.type} is a {self.shape.cloud} shape, not {self.cloud}")
        if not self.head_address or any(c.isspace() or c in "(),=" for c in self.head_address):
            raise ValueError(f"head_address must be an IP or host name, got {self.head_address!r}")
        slurm_os(self.os)

    @property
    def system(self) -> SlurmOS:
        return slurm_os(self.os)

    @property
    def power_saving(self) -> bool:
        """Slurm starts and stops the GPU nodes itself (ResumeProgram / SuspendProgram): on every cloud whose
        boot commands can start and stop an instance."""
        return ops(self.cloud).instance_start is not None

    @property
    def head_name(self) -> str:
        return f"{self.name}-head"

    def node_name(self, index: int) -> str:
        return f"{self.name}-node-{index}"

    @property
    def node_hostlist(self) -> str:
        """All GPU nodes as a Slurm hostlist expression, e.g. llm-node-[0-3]."""
        return hostlist(self.name + "-node-", range(self.nodes))

    @property
    def gres_type(self) -> str:
        """The gres type: the catalog's GPU model in lower case (h100, a100, t4, ...)."""
        return self.shape.gpu.lower()

    @property
    def gres(self) -> str:
        return f"gpu:{self.gres_type}:{self.shape.gpu_count}"

    @property
    def spot_indices(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.nodes) if node_is_spot(self.purchase, i))

    @property
    def jobs_output_dir(self) -> str:
        """Where the shipped jobs write their output: shared on /lustre, else local to the batch node."""
        return f"{self.paths.lustre}/jobs" if self.lustre else f"{self.paths.state}/jobs"

    @property
    def real_memory_mib(self) -> int:
        """RealMemory of a node line: without it Slurm takes 1 MB and rejects every job that asks
        for memory (--mem, --mem-per-gpu). The kernel reports less than the shape's marketed memory,
        and a node registering less than RealMemory is refused, so it is set below what any node
        reports (REAL_MEMORY_FRACTION of the catalog's mem_gib)."""
        return int(self.shape.mem_gib * 1024 * REAL_MEMORY_FRACTION)

    @property
    def shared_dirs(self) -> tuple[str, ...]:
        """Directories created on the parallel file system by the head node (mode 1777)."""
        return (f"{self.paths.lustre}/home", f"{self.paths.lustre}/jobs") if self.lustre else ()


def hostlist(prefix: str, indices) -> str:
    """Slurm hostlist of prefix+index for consecutive runs, e.g. c-node-[0-2,5]."""
    idx = sorted(set(indices))
    if not idx:
        raise ValueError("empty host list")
    runs: list[str] = []
    start = prev = idx[0]
    for i in idx[1:] + [None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return f"{prefix}[{','.join(runs)}]"


def _lines(pairs: list[tuple[str, object]]) -> str:
    return "".join(f"{k}={v}\n" for k, v in pairs)


def slurm_conf(c: SlurmCluster) -> str:
    # Over 60 lines on purpose: slurm.conf as one table of keys, each with the reason and source for its
    # value beside it, in the file's own order.
    """/etc/slurm/slurm.conf on the head node (served to every GPU node by configless slurmctld)."""
    head = [
        ("ClusterName", c.name),
        ("SlurmctldHost", f"{c.head_name}({c.head_address})"),
        ("SlurmUser", SLURM_USER),
        ("SlurmctldPort", SLURMCTLD_PORT),
        ("SlurmdPort", SLURMD_PORT),
        ("AuthType", "auth/munge"),
        ("CredType", "cred/munge"),
        ("StateSaveLocation", c.state_dir),
        ("SlurmdSpoolDir", "/var/spool/slurmd"),
        # The Debian/Ubuntu units expect these PID files (PIDFile= in slurmctld/slurmd.service).
        ("SlurmctldPidFile", "/run/slurmctld.pid"),
        ("SlurmdPidFile", "/run/slurmd.pid"),
        ("SlurmctldLogFile", "/var/log/slurm/slurmctld.log"),
        ("SlurmdLogFile", "/var/log/slurm/slurmd.log"),
        # cloud_reg_addrs: NodeAddr from the node's registration. Slurm 23.11 (Ubuntu 24.04) made that
        # the default and logs the option as defunct at start, harmlessly; 22.05 (Debian 12, which
        # `make slurm-check` runs) needs it.
        # With power saving: idle_on_node_suspend marks a suspended node idle "regardless of current state" (a
        # drained node powered down to be replaced can be resumed later); power_save_min_interval as ParallelCluster.
        ("SlurmctldParameters", "enable_configless,cloud_reg_addrs"
         + (f",idle_on_node_suspend,power_save_min_interval={POWER_SAVE_MIN_INTERVAL_S}" if c.power_saving else "")),
        ("TreeWidth", 65533),
        # Slurm up to 23.02 hides CLOUD nodes that have not registered yet from scontrol and sinfo
        # "even for SlurmUser and root" without it, and the health gate must drain a node before it
        # registers; 23.11 shows them anyway and no longer reads the value.
        ("PrivateData", "cloud"),
        ("ProctrackType", "proctrack/cgroup"),
        ("TaskPlugin", "task/cgroup,task/affinity"),
        ("SelectType", "select/cons_tres"),
        # The node lines give CPUs only (the catalogue's vCPUs; no primary source here gives every
        # shape's sockets, cores and threads), and slurm.conf(5) infers Sockets=CPUs, CoresPerSocket=1,
        # ThreadsPerCore=1 from that alone: with CR_Core the scheduler would hand out hyperthreads as
        # if they were cores. The CPU is the consumable instead, as in ParallelCluster's slurm.conf
        # (aws-parallelcluster-cookbook templates/default/slurm/slurm.conf.erb: cons_tres, CR_CPU).
        ("SelectTypeParameters", "CR_CPU"),
        ("GresTypes", "gpu"),
        ("MpiDefault", "none"),
        # RDMA/EFA registers large pinned buffers: keep slurmd's unlimited MEMLOCK (the Debian unit
        # sets LimitMEMLOCK=infinity) instead of the submitting shell's.
        ("PropagateResourceLimitsExcept", "MEMLOCK"),
        # Batch jobs are requeued when their node fails or is set DOWN (a spot interruption).
        ("JobRequeue", 1),
        # A DOWN node (e.g. a replaced spot node) returns to service when its slurmd registers
        # with a valid configuration; a DRAINED node (failed health check) stays drained.
        ("ReturnToService", 2),
        ("SlurmdTimeout", 300),
        ("HealthCheckProgram", f"{c.paths.bin}/health-gate"),
        ("HealthCheckInterval", HEALTH_CHECK_INTERVAL_S),
        ("HealthCheckNodeState", "ANY"),
    ]
    if c.job_credentials:
        head.append(("TaskProlog", f"{c.paths.bin}/task-prolog"))
    if c.power_saving:
        head += _power_lines(c)
    out = ["# Written by gpu-cluster (components/slurm). Served to the GPU nodes by configless slurmctld.\n",
           _lines(head)]
    spot = set(c.spot_indices)
    for market in ("ondemand", "spot"):
        idx = [i for i in range(c.nodes) if (i in spot) == (market == "spot")]
        if not idx:
            continue
        out.append(_lines([
            ("NodeName", f"{hostlist(c.name + '-node-', idx)} CPUs={c.shape.vcpu} RealMemory={c.real_memory_mib} "
                         f"Gres={c.gres} State=CLOUD Features={c.shape.type},{market}"),
        ]))
    suspend = ""
    if c.power_saving:
        # The partition's SuspendTime wins over the cluster's for its nodes; INFINITE: "will disable suspending
        # of nodes in this partition" (slurm.conf(5), PartitionName / SuspendTime).
        suspend = f" SuspendTime={c.suspend_after_s if c.suspend_after_s else 'INFINITE'}"
    out.append(_lines([
        ("PartitionName", f"{c.name} Nodes={c.node_hostlist} Default=YES MaxTime=INFINITE State=UP{suspend}"),
    ]))
    return "".join(out)


def _power_lines(c: SlurmCluster) -> list[tuple[str, object]]:
    """Slurm power saving (slurm.conf(5); Slurm's "Power Saving Guide", slurm.schedmd.com/power_save.html):
    slurmctld runs the suspend program on nodes idle for SuspendTime and the resume program on powered-down
    nodes that jobs were given, each with the nodes as a hostlist, as SlurmUser."""
    b = c.paths.bin
    return [
        ("SuspendProgram", f"{b}/slurm-suspend"),
        ("ResumeProgram", f"{b}/slurm-resume"),
        # A node that did not register within ResumeTimeout is set DOWN and its jobs requeued; it is stopped
        # again rather than left running unused, as ParallelCluster does (ResumeFailProgram=slurm_suspend).
        ("ResumeFailProgram", f"{b}/slurm-suspend"),
        ("ResumeTimeout", RESUME_TIMEOUT_S),
        ("SuspendTimeout", SUSPEND_TIMEOUT_S),
        ("ResumeRate", 0),
        ("SuspendRate", 0),
        # Power saving is on once any SuspendTime is not INFINITE (slurm.conf(5)); the partition line says
        # whether idle nodes of this cluster are suspended (its SuspendTime wins). A node is never powered down
        # for idleness when the partition says INFINITE; the window and the replacement power them down by name.
        ("SuspendTime", c.suspend_after_s or RESUME_TIMEOUT_S),
        # Partition state (UP / DOWN, set by the run window) survives `scontrol reconfigure`.
        ("ReconfigFlags", "KeepPartState"),
    ]


def gres_conf(c: SlurmCluster) -> str:
    """gres.conf: the shape's GPUs by device file (/dev/nvidia<i>, one per GPU). Written out rather
    than AutoDetect=nvml: Debian's and Ubuntu's Slurm packages are built without NVML."""
    last = c.shape.gpu_count - 1
    files = "/dev/nvidia0" if last == 0 else f"/dev/nvidia[0-{last}]"
    return ("# Written by gpu-cluster (components/slurm).\n"
            f"NodeName={c.node_hostlist} Name=gpu Type={c.gres_type} File={files}\n")


def cgroup_conf(c: SlurmCluster) -> str:
    """cgroup.conf: the operating system's cgroup plugin (components/slurm/oses.py), jobs confined to
    their cores and to the GPUs they were allocated (ConstrainDevices: "constrain the job's allowed
    devices based on GRES allocated resources")."""
    return ("# Written by gpu-cluster (components/slurm).\n"
            + _lines([("CgroupPlugin", c.system.cgroup_plugin), ("ConstrainCores", "yes"),
                      ("ConstrainDevices", "yes"), ("ConstrainRAMSpace", "no")]))


def from_spec(cluster, head_address: str, munge_secret_id: str, **overrides) -> SlurmCluster:
    """The SlurmCluster of a validated stack (components.spec.Cluster, every default filled in)."""
    spec = cluster.spec
    return SlurmCluster(
        name=spec.name, cloud=spec.cloud, region=cluster.region, shape=cluster.shape, nodes=spec.nodes,
        head_address=head_address, munge_secret_id=munge_secret_id, purchase=spec.purchase,
        scratch=spec.storage.scratch in ("nvme", "disk"), lustre=spec.storage.lustre is not None,
        data_disk=spec.storage.data_disk_gb > 0,
        job_credentials=spec.storage.checkpoint_bucket and ops(spec.cloud).job_credentials is not None,
        suspend_after_s=spec.idle_stop.for_minutes * 60 if spec.idle_stop is not None else None,
        windows=tuple(spec.schedule.windows) if spec.schedule is not None else (),
        timezone=spec.schedule.timezone if spec.schedule is not None else "UTC",
        os=profile(spec.cloud).slurm_os(spec), prepaid=spec.capacity.type == "prepaid",
        **overrides)
