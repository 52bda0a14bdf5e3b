"""Run a real Slurm on this machine from the configuration components/slurm generates, and check it.

    venv/bin/python -m tests.slurm_local        (make slurm-check; exit 0 = every check passed)

What it does, in order (each step prints PASS/FAIL; the first failure stops the run):
  1. Makes sure Debian's slurmctld, slurmd, munge and fio are installed (installs them
     with apt-get when missing; a failed install is a failure, never a skip), then runs the rest in
     its own mount namespace with its own /run/munge and /run/slurm, on free ports (isolate(),
     free_ports()), so two runs on one machine do not collide.
  2. Generates the head node's files and a GPU node's files for a one-node p5.48xlarge cluster on
     AWS, with every path rooted in a temporary directory, and writes them there exactly as
     generated (systemd units excepted: no systemd here; the harness starts the daemons itself).
  3. Localises slurm.conf / gres.conf only as far as one local node needs (localize(), below).
  4. Runs the generated munge-key scripts against a stub Secrets Manager: the head makes and stores
     the key, the node fetches it; starts munged with that key, then slurmctld.
  5. Runs the generated node-setup (identity from stub instance metadata, munge key, health check
     against stub nvidia-smi / fi_info / sysfs, real fio), then slurmd with the SLURMD_OPTIONS
     node-setup wrote (configless, from slurmctld).
  6. Checks: the node registers idle with gpu:h100:8 and the address it registered from; a job running
     as a non-root user cannot read the munge key; the torchrun and NCCL jobs run via sbatch; the
     node-health job drains the node with the reason when nvidia-smi shows 7 GPUs; the boot path
     (slurmd's HealthCheckProgram) drains and resumes it; a spot notice sets it DOWN and its running job
     is requeued; a restarted slurmd returns it.
  7. Slurm power saving, with the harness playing EC2 (the generated slurm-resume / slurm-suspend queue the
     request, the generated power-agent, running as root here as on the head node, calls the stub `aws ec2`;
     a stop stops slurmd, a start starts it): outside the run window the partition goes
     DOWN and the node is powered down; inside it a pending job resumes the node and runs (resume); an
     idle node is suspended after SuspendTime (suspend); a node that loses a GPU under a running job is
     drained, its job requeued, rebooted once, then powered down and started again on "new hardware",
     and the requeued job runs there (replace and requeue).
  8. A Tencent configuration: the slurm.conf, gres.conf and cgroup.conf generated for an HCCPNV6 (8 × H20)
     cluster on TencentOS (OpenHPC's Slurm), run by the same slurmctld and slurmd on a fresh state directory:
     the node registers with gpu:h20:8 and a job asking for eight H20s gets them (tencent_configuration()).
  9. Stops every daemon it started and removes the temporary directory.

Localized for speed, and said where: real fio runs once (the boot check), later checks get a stub fio;
the power-save timings (SuspendTime, SuspendTimeout, power_save_min_interval) are seconds here; a requeued
job's begin time (Slurm holds a requeued batch job about two minutes) is set to now.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import dataclasses
import time
from pathlib import Path

from components import catalog, run_windows
from components.slurm import SlurmCluster, boot, power
from components.slurm.conf import Paths, cgroup_conf, gres_conf, slurm_conf
from tests.slurm_local.stubs import stub_env, write_state, write_stubs

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "fio")
COMMANDS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged", "fio")
SHAPE = ("aws", "p5.48xlarge")
STEP_TIMEOUT_S = 90
SETUP_TIMEOUT_S = 30
SUSPEND_TIMEOUT_S = 3
IDLE_SUSPEND_S = 5
INSTANCE_ID = "i-0123456789abcdef0"
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


class Failure(Exception):
    pass


def check(cond: bool, what: str, detail: str = "") -> None:
    if not cond:
        raise Failure(f"{what}{': ' + detail if detail else ''}")
    print(f"PASS  {what}", flush=True)


def run(cmd, env=None, timeout=STEP_TIMEOUT_S, check_rc=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, **kw)
    if check_rc and r.returncode != 0:
        raise Failure(f"{' '.join(map(str, cmd))} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def ensure_packages() -> None:
    missing = [c for c in COMMANDS if shutil.which(c) is None and not Path(f"/usr/sbin/{c}").exists()]
    if not missing:
        return
    print(f"installing {' '.join(PACKAGES)} (missing: {' '.join(missing)})", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", *PACKAGES]):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise Failure(f"`{' '.join(cmd)}` failed ({r.returncode}); this check needs Debian's "
                          f"{' '.join(PACKAGES)}:\n{r.stderr[-2000:]}")
    still = [c for c in COMMANDS if shutil.which(c) is None and not Path(f"/usr/sbin/{c}").exists()]
    if still:
        raise Failure(f"still missing after apt-get install: {' '.join(still)}")


# ---------------------------------------------------------------------------------------------
# The local transformation: the only differences between the generated files and what runs here.
def memory_mib() -> int:
    """This host's memory as slurmd reports it (MemTotal, MiB), less a margin."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(int(line.split()[1]) / 1024 * 0.9)
    raise Failure("no MemTotal in /proc/meminfo")


def localize(conf: str, root: Path, hostname: str, cpus: int, ports: tuple[int, int]) -> str:
    """slurm.conf for one local node: the controller is this host, the node has this host's CPUs and memory,
    daemons' files live under `root`, and process tracking needs no cgroup delegation (there is no
    systemd here to delegate a cgroup v2 subtree, and this kernel mounts cgroup v1)."""
    swaps = [
        (r"^SlurmctldHost=[^(]+\(", f"SlurmctldHost={hostname}("),
        (r" CPUs=\d+ ", f" CPUs={cpus} "),
        (r" RealMemory=\d+ ", f" RealMemory={memory_mib()} "),
        (r"^ProctrackType=.*$", "ProctrackType=proctrack/linuxproc"),
        (r"^TaskPlugin=.*$", "TaskPlugin=task/none"),
        (r"^SlurmdSpoolDir=/", f"SlurmdSpoolDir={root}/"),
        (r"^(Slurmctld|Slurmd)PidFile=/", rf"\1PidFile={root}/"),
        (r"^(Slurmctld|Slurmd)LogFile=/", rf"\1LogFile={root}/"),
        (r"^SlurmctldPort=\d+$", f"SlurmctldPort={ports[0]}"),
        (r"^SlurmdPort=\d+$", f"SlurmdPort={ports[1]}"),
        (r"power_save_min_interval=\d+", "power_save_min_interval=0,power_save_interval=1"),
        # Pending jobs are looked at every 2 s instead of Slurm's default minute (sched_interval=60), so a
        # requeued job whose begin time passed starts at once.
        (r"^(JobRequeue=1)$", "\\1\nSchedulerParameters=sched_interval=2"),
        (r"^SuspendTimeout=\d+$", f"SuspendTimeout={SUSPEND_TIMEOUT_S}"),
    ]
    power = "SuspendProgram=" in conf  # no power saving (Tencent's configuration): nothing of it to localize
    out = conf
    for pattern, repl in swaps:
        out, n = re.subn(pattern, repl, out, flags=re.M)
        if n == 0 and (power or not pattern.startswith(("power_save", "^SuspendTimeout"))):
            raise Failure(f"localize: nothing matched {pattern!r} in the generated slurm.conf")
    return out


def localize_gres(gres: str, root: Path) -> str:
    """gres.conf: the GPU device files are empty files under `root` (no /dev/nvidia* here)."""
    out, n = re.subn(r"File=/dev/", f"File={root}/dev/", gres)
    if n == 0:
        raise Failure("localize_gres: no File=/dev/ in the generated gres.conf")
    return out


def localize_cgroup(cgroup: str) -> str:
    """cgroup.conf: this kernel mounts cgroup v1 (hybrid), on which Slurm's cgroup/v2 plugin
    refuses to start ("Hybrid mode is not supported"); v1 here, nothing else changed. `autodetect` (the
    TencentOS configuration: components/slurm/oses.py) picks v1 here by itself and is kept."""
    if re.search(r"^CgroupPlugin=autodetect$", cgroup, flags=re.M):
        return cgroup
    out, n = re.subn(r"^CgroupPlugin=cgroup/v2$", "CgroupPlugin=cgroup/v1", cgroup, flags=re.M)
    if n == 0:
        raise Failure("localize_cgroup: no CgroupPlugin=cgroup/v2 in the generated cgroup.conf")
    return out


# ---------------------------------------------------------------------------------------------
class Harness:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="gpu-cluster-slurm-"))
        self.root.chmod(0o755)
        self.state = self.root / "stub-state"
        self.stub_bin = self.root / "stub-bin"
        self.procs: dict[str, subprocess.Popen] = {}
        self.hostname = socket.gethostname().split(".")[0]
        self.paths = Paths().rooted(str(self.root))
        shape = catalog.shape(*SHAPE)
        self.cluster = SlurmCluster(
            name="local", cloud=SHAPE[0], region="us-east-1", shape=shape, nodes=1,
            head_address="127.0.0.1", munge_secret_id="local-munge-key", purchase="on_demand",
            scratch=True, lustre=True, data_disk=True,
            state_dir=f"{self.paths.data}/slurm/state", paths=self.paths,
            job_credentials=True, job_role="arn:aws:iam::123456789012:role/local-compute-job-role",
            suspend_after_s=3600, windows=("Mon-Fri 08:00-20:00",), timezone="UTC")
        self.ports = tuple(free_ports(2))
        self.ec2_seen = 0
        self.slurmd_cmd: list[str] = []
        self.slurmd_env: dict = {}
        # munged on its default socket: a configless slurmd asks munge for a credential before it
        # has fetched slurm.conf, so it cannot be pointed at another socket (AuthInfo).
        self.munge_socket = Path("/run/munge/munge.socket.2")
        self.created_run_munge = False
        self.run_slurm = Path("/run/slurm")  # configless slurmd links /run/slurm/conf to its cache
        self.created_run_slurm = not self.run_slurm.exists()
        self.conf = Path(self.paths.slurm_etc) / "slurm.conf"
        self.env = stub_env(self.stub_bin, self.state)
        self.env["SLURM_CONF"] = str(self.conf)
        self.node = self.cluster.node_name(0)

    # -- files -------------------------------------------------------------------------------
    def write_files(self, files) -> int:
        """Writes generated cloud-init write_files entries where they say (systemd units aside)."""
        written = 0
        for f in files:
            if f["path"].startswith(boot.SYSTEMD):
                continue
            path = Path(f["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f["content"])
            path.chmod(int(f["permissions"], 8))
            written += 1
        return written

    def install(self) -> None:
        """The head node's files (the GPU node's come later: both have a bin/munge-key)."""
        c, root = self.cluster, self.root
        written = self.write_files(boot.head_files(c))
        generated = slurm_conf(c)
        Path(self.paths.slurm_etc, "slurm.conf").write_text(
            localize(generated, root, self.hostname, os.cpu_count() or 1, self.ports))
        self.check_power_programs(generated)
        Path(self.paths.slurm_etc, "gres.conf").write_text(localize_gres(gres_conf(c), root))
        Path(self.paths.slurm_etc, "cgroup.conf").write_text(localize_cgroup(cgroup_conf(c)))
        for d in ("dev", "var/spool/slurmd", "run", "var/log/slurm", "run/munge", "var/lib/munge", "var/log/munge"):
            (root / d).mkdir(parents=True, exist_ok=True)
        for i in range(c.shape.gpu_count):
            (root / f"dev/nvidia{i}").touch()
        for d in (self.paths.scratch, self.paths.lustre, self.paths.data):
            Path(d).mkdir(parents=True, exist_ok=True)
        ib = Path(self.paths.infiniband_sysfs)
        for i in range(c.shape.rdma_interfaces or 0):
            (ib / f"rdmap{i}s0").mkdir(parents=True, exist_ok=True)
        write_stubs(self.stub_bin)
        (self.state / "metadata/tags/instance").mkdir(parents=True, exist_ok=True)
        (self.state / "metadata/spot").mkdir(parents=True, exist_ok=True)
        write_state(self.state, gpus=8, nvlinks=18, fabricmanager="active", busbw="480.5",
                    mounts=[self.paths.scratch, self.paths.lustre, self.paths.data], secret="")
        (self.state / "metadata/instance-id").write_text(INSTANCE_ID)
        (self.state / "instances").write_text(f"0\t{INSTANCE_ID}\n")
        (self.state / "ec2.log").touch()
        (self.state / "metadata/tags/instance/gpu-cluster:node").write_text("0")
        for d in ("run/munge", "var/lib/munge", "var/log/munge"):
            shutil.chown(root / d, "munge", "munge")
        Path(c.state_dir).mkdir(parents=True, exist_ok=True)
        check(written >= 9, f"wrote the {written} generated head node files under {root}")

    def check_power_programs(self, conf: str) -> None:
        """slurm.conf names the generated request programs, as they are (they need nothing of the harness's)."""
        programs = dict(re.findall(r"^(ResumeProgram|SuspendProgram|ResumeFailProgram)=(.*)$", conf, flags=re.M))
        check(programs == {"ResumeProgram": f"{self.paths.bin}/slurm-resume",
                           "SuspendProgram": f"{self.paths.bin}/slurm-suspend",
                           "ResumeFailProgram": f"{self.paths.bin}/slurm-suspend"},
              "slurm.conf names the resume, suspend and resume-fail programs", str(programs))

    def stub_fio(self) -> None:
        """Later health checks get a stub fio (the boot check ran the real one): a real run takes 20 s."""
        shutil.copy(self.stub_bin / "fio-stub", self.stub_bin / "fio")

    def play_ec2(self) -> None:
        """The harness is EC2: a stop-instances of the node's instance stops slurmd, a start-instances starts it
        (the instance boots: node-setup's result is what the last check left, and slurmd registers)."""
        calls = (self.state / "ec2.log").read_text().splitlines()
        for call in calls[self.ec2_seen:]:
            action, _, ids = call.partition(" ")
            if ids.split() != [INSTANCE_ID]:
                raise Failure(f"the power program named {ids!r}, not the node's instance {INSTANCE_ID}")
            if action == "stop":
                self.stop("slurmd")
            elif action == "start" and "slurmd" not in self.procs:
                self.boot_slurmd()
        self.ec2_seen = len(calls)

    def boot_slurmd(self) -> None:
        """slurmd as on an instance that has just booted: slurmctld takes a resumed node only once its boot time
        is later than the resume request (slurm.conf(5), ResumeProgram: "a responding slurmd and an updated
        BootTime"), so slurmd runs in a time namespace whose CLOCK_BOOTTIME starts now (unshare(1) --boottime)."""
        time.sleep(2)  # so that the boot time, in whole seconds, is past the resume request's
        uptime = int(float(Path("/proc/uptime").read_text().split()[0]))
        self.start("slurmd", ["unshare", "--time", f"--boottime=-{uptime}", *self.slurmd_cmd], env=self.slurmd_env)

    def ec2_calls(self) -> list[str]:
        return (self.state / "ec2.log").read_text().splitlines()

    # -- daemons -----------------------------------------------------------------------------
    def start(self, name: str, cmd: list[str], env=None) -> None:
        log = open(self.root / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(cmd, env=env or self.env, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)

    def stop(self, name: str) -> None:
        p = self.procs.pop(name, None)
        if p is None or p.poll() is not None:
            return
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=10)

    def daemon_log(self, name: str) -> str:
        path = self.root / f"{name}.out"
        return path.read_text()[-3000:] if path.exists() else ""

    def wait_for(self, what: str, fn, timeout: float = STEP_TIMEOUT_S, interval: float = 0.5):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.slurmd_cmd:
                self.play_ec2()
            last = fn()
            if last:
                return last
            for name, p in self.procs.items():
                if p.poll() is not None:
                    raise Failure(f"{name} exited ({p.returncode}) while waiting for {what}:\n{self.daemon_log(name)}")
            time.sleep(interval)
        raise Failure(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")

    def node_info(self) -> dict[str, str]:
        r = run(["scontrol", "show", "node", self.node, "-o"], env=self.env, check_rc=False)
        out: dict[str, str] = {}
        for m in re.finditer(r"(\w+)=(.*?)(?= \w+=|$)", r.stdout.strip()):
            out[m.group(1)] = m.group(2)
        return out

    def node_state(self) -> str:
        return self.node_info().get("State", "")

    def node_idle(self) -> bool:
        """Registered and free: IDLE, not DRAIN/DOWN, and not a CLOUD node still powered down."""
        flags = set(self.node_state().split("+"))
        return "IDLE" in flags and not flags & {"DRAIN", "DOWN", "POWERED_DOWN", "POWERING_UP", "NOT_RESPONDING"}

    def sbatch(self, job: str, *extra: str, wait: bool = True, env=None) -> tuple[int, str, str]:
        cmd = ["sbatch", "--parsable", *extra]
        cmd.append(f"{self.paths.jobs}/{job}" if not job.startswith("--") else job)
        r = run(cmd, env=env or self.env, check_rc=False, timeout=STEP_TIMEOUT_S)
        job_id = r.stdout.strip().split(";")[0]
        if wait and r.returncode == 0:
            # As `sbatch --wait` would, without its polling backoff (up to 10 s between looks).
            state = self.wait_for(f"job {job_id} to end", lambda: (lambda st: st if st in ENDED else None)(self.job_state(job_id)),
                                  interval=0.3)
            code = re.search(r" ExitCode=(\d+):", run(["scontrol", "show", "job", job_id], env=self.env).stdout)
            r = subprocess.CompletedProcess(cmd, 0 if state == "COMPLETED" else int(code.group(1)) if code and code.group(1) != "0" else 1,
                                            r.stdout, r.stderr)
        output = ""
        out_file = Path(self.cluster.jobs_output_dir) / f"{job.split('.')[0]}-{job_id}.out"
        if out_file.exists():
            output = out_file.read_text()
        return r.returncode, job_id, output

    # -- the run -----------------------------------------------------------------------------
    def run_all(self) -> None:
        c, env = self.cluster, self.env
        self.install()
        for name in ("head-setup", "munge-key"):
            assert Path(self.paths.bin, name).exists()

        # Munge key: the head makes it (secret empty), stores it, installs it.
        r = run([f"{self.paths.bin}/head-setup"], env=env, check_rc=False, timeout=SETUP_TIMEOUT_S)
        check(r.returncode == 0, "head-setup (state dir, shared dirs, munge key) succeeded", r.stdout + r.stderr)
        check("generated a new munge key" in r.stdout, "the head generated the munge key when the secret had none")
        stored = (self.state / "secret").read_text().strip()
        key = Path(self.paths.munge_key).read_bytes()
        import base64
        check(base64.b64decode(stored) == key and len(key) == 1024,
              "the stored secret is the installed 1024-byte key (base64)")
        check(oct(Path(self.paths.munge_key).stat().st_mode & 0o777) == "0o400", "munge.key is mode 0400")
        check(all(Path(d).is_dir() for d in c.shared_dirs), f"shared dirs on /lustre: {', '.join(c.shared_dirs)}")

        if self.munge_socket.exists():
            raise Failure(f"{self.munge_socket} exists: a munged is already running here; stop it first")
        if not self.munge_socket.parent.is_dir():
            self.munge_socket.parent.mkdir(parents=True)
            self.created_run_munge = True
        shutil.chown(self.munge_socket.parent, "munge", "munge")
        self.start("munged", ["runuser", "-u", "munge", "--", "munged", "-F", f"--key-file={self.paths.munge_key}",
                              f"--socket={self.munge_socket}", f"--pid-file={self.root}/run/munge/munged.pid",
                              f"--log-file={self.root}/var/log/munge/munged.log",
                              f"--seed-file={self.root}/var/lib/munge/munged.seed"], env=os.environ.copy())
        self.wait_for("the munge socket", lambda: self.munge_socket.exists())
        shutil.chown(Path(c.state_dir), "slurm", "slurm")
        self.start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        # power-agent, the head node's root service that carries out slurmctld's power requests (its unit makes
        # the spool SlurmUser's, 0700, first).
        spool = Path(c.paths.power_spool)
        spool.mkdir(parents=True, exist_ok=True)
        shutil.chown(spool, "slurm", "slurm")
        spool.chmod(0o700)
        self.start("power-agent", [f"{self.paths.bin}/power-agent"])
        self.wait_for("slurmctld to answer", lambda: run(["scontrol", "ping"], env=env, check_rc=False).returncode == 0
                      and "UP" in run(["scontrol", "ping"], env=env, check_rc=False).stdout)
        check(True, "slurmctld is up with the generated slurm.conf (localized)")

        # GPU node boot: the metadata guard first (its unit runs before node-setup and slurmd), then
        # identity from metadata, munge key fetched (already stored), jobs' credentials, health check.
        written = self.write_files(boot.node_boot_parts(c).files)
        check(written >= 9, f"wrote the {written} generated GPU node files")
        self.check_metadata_guard()
        r = run([f"{self.paths.bin}/node-setup"], env=env, check_rc=False, timeout=180)
        check(r.returncode == 0, "node-setup succeeded", r.stdout + r.stderr)
        check(Path(self.paths.node_name_file).read_text().strip() == self.node,
              f"node identity from the gpu-cluster:node tag: {self.node}")
        check("already holds the stored key" in r.stdout, "the node fetched the same munge key from the secret")
        status = Path(self.paths.health_status_file).read_text().splitlines()
        check(status[:1] == ["PASS"], "the boot health check passed with 8 H100s, 18 NVLinks each, 32 EFA, mounts, fio",
              "\n".join(status) + r.stderr)
        check(re.search(r"fio random read on .*/scratch: \d+ IOPS", r.stdout) is not None, "real fio random read on /scratch")
        check("ok: metadata service closed to non-root users" in r.stdout and "ok: jobs' credentials valid for" in r.stdout,
              "the health check found the metadata service closed to a non-root user and the jobs' credentials valid")
        metrics = (self.state / "metrics.log").read_text()
        check(f"NodeHealthy 1 ClusterName=local,NodeName={self.node},InstanceId={INSTANCE_ID}" in metrics,
              "published NodeHealthy=1 with ClusterName/NodeName/InstanceId dimensions")
        self.stub_fio()

        options = Path(self.paths.etc_default, "slurmd").read_text()
        m = re.fullmatch(r'SLURMD_OPTIONS="(.*)"\n', options)
        check(m is not None and "--conf-server 127.0.0.1:6817" in m.group(1), "SLURMD_OPTIONS: configless from the head", options)
        # slurmd runs configless: no -f; it fetches slurm.conf, gres.conf and cgroup.conf from slurmctld.
        slurmd_env = self.slurmd_env = {k: v for k, v in env.items() if k != "SLURM_CONF"}
        # The controller listens on this run's port (localize()).
        self.slurmd_cmd = ["slurmd", "-D", *m.group(1).replace(":6817", f":{self.ports[0]}").split()]
        self.start("slurmd", self.slurmd_cmd, env=slurmd_env)
        self.wait_for("the node to register idle", self.node_idle)
        info = self.node_info()
        check(info.get("Gres") == "gpu:h100:8", "the node registered with Gres=gpu:h100:8", info.get("Gres", ""))
        check(info.get("NodeAddr") == "127.0.0.1", "cloud_reg_addrs set NodeAddr from the registration", info.get("NodeAddr", ""))
        check("ondemand" in info.get("AvailableFeatures", ""), "the on-demand node carries the ondemand feature")

        # A job runs as its user with the jobs' AWS config from slurmd's TaskProlog, and cannot read the key.
        out_file = Path(c.jobs_output_dir, "as-nobody.out")
        rc, job, _ = self.sbatch("--wrap=echo AWS_CONFIG_FILE=$AWS_CONFIG_FILE; "
                                 f"if cat {self.paths.munge_key} > /dev/null 2>&1; then echo KEY-READ; else echo KEY-DENIED; fi",
                                 "--uid=nobody", "--chdir=/tmp", f"--output={out_file}")
        out = out_file.read_text() if out_file.exists() else ""
        check(rc == 0 and f"AWS_CONFIG_FILE={self.paths.job_aws_config}" in out,
              "a job's tasks get the jobs' AWS config from the generated TaskProlog", out)
        check("KEY-DENIED" in out, "a job running as a non-root user cannot read the munge key", out)

        # Shipped jobs.
        rc, job, out = self.sbatch("torchrun-hello.sbatch")
        log = (self.state / "torchrun.log").read_text() if (self.state / "torchrun.log").exists() else ""
        check(rc == 0, "torchrun-hello.sbatch completed", out)
        check("--nnodes=1 --nproc-per-node=8" in log and "--rdzv-endpoint=127.0.0.1:29500" in log,
              "torchrun got 8 GPUs per node and the first node's registered address as rendezvous", log)
        check("FI_PROVIDER=efa" in log and "FI_EFA_USE_DEVICE_RDMA=1" in log and "NCCL_SOCKET_IFNAME=^docker,lo,veth" in log,
              "torchrun ran with the p5 EFA environment", log)

        fake_bin = self.root / "nccl-tests/all_reduce_perf"
        fake_bin.parent.mkdir(parents=True, exist_ok=True)
        fake_bin.write_text("#!/bin/bash\n")
        fake_bin.chmod(0o755)
        job_env = dict(env, ALL_REDUCE_BIN=str(fake_bin), MPIRUN="mpirun")
        # Local transformation: 2 CPUs here, so one task per node instead of one per GPU.
        rc, job, out = self.sbatch("nccl-allreduce.sbatch", "--ntasks-per-node=1", env=job_env)
        check(rc == 0 and "UNJUDGED: busbw 480.5 GB/s on one node" in out,
              "nccl-allreduce.sbatch ran all_reduce_perf to 16 GiB (one node: reported, not judged)", out)

        # A node that lost a GPU: the node-health job drains it with the reason.
        write_state(self.state, gpus=7)
        rc, job, out = self.sbatch("node-health.sbatch")
        check(rc != 0, "node-health.sbatch fails when nvidia-smi shows 7 GPUs", out)
        info = self.wait_for("the node to be drained", lambda: (lambda i: i if "DRAIN" in i.get("State", "") else None)(self.node_info()))
        check("gpu-cluster-health: expected 8 GPUs, nvidia-smi lists 7" in info.get("Reason", ""),
              f"drained with the reason: {info.get('Reason', '')}")
        metrics = (self.state / "metrics.log").read_text().splitlines()
        check(metrics[-1].startswith("NodeHealthy 0 "), "published NodeHealthy=0")
        # Still failing, drained by us and idle: the recheck timer reboots it once (real scontrol output).
        r = run([f"{self.paths.bin}/health-recheck"], env=env, check_rc=False, timeout=180)
        calls = (self.state / "systemctl.log").read_text().splitlines()
        check(calls[-1:] == ["systemctl reboot"] and Path(c.paths.health_reboot_file).exists(),
              "health-recheck rebooted the idle node it had drained, once", r.stdout + r.stderr)

        # The GPU is back: re-running the check resumes the node (the drain was ours).
        write_state(self.state, gpus=8)
        r = run([f"{self.paths.bin}/node-health", "--drain"], env=env, check_rc=False, timeout=120)
        check(r.returncode == 0, "node-health --drain passes again", r.stderr)
        self.wait_for("the node to be resumed", self.node_idle)
        check(True, "the node was resumed after a passing check")

        # Boot path: a failed check before slurmd starts; slurmd's HealthCheckProgram drains it.
        write_state(self.state, nvlinks=17)
        r = run([f"{self.paths.bin}/node-health"], env=env, check_rc=False, timeout=120)
        check(r.returncode == 1, "node-health fails when a GPU shows 17 of 18 NVLinks", r.stderr)
        self.stop("slurmd")
        self.start("slurmd", self.slurmd_cmd, env=slurmd_env)
        info = self.wait_for("HealthCheckProgram to drain the node", lambda: (lambda i: i if "DRAIN" in i.get("State", "") else None)(self.node_info()))
        check("has 17 active NVLink links, expected 18" in info.get("Reason", ""),
              f"health-gate (HealthCheckProgram) drained it at slurmd start: {info.get('Reason', '')}")
        write_state(self.state, nvlinks=18)
        run([f"{self.paths.bin}/node-health"], env=env, check_rc=False, timeout=120)
        self.stop("slurmd")
        self.start("slurmd", self.slurmd_cmd, env=slurmd_env)
        self.wait_for("HealthCheckProgram to resume the node", self.node_idle)
        check(True, "health-gate resumed it at slurmd start once the check passed")

        # Between checks: the GPU watch (node-health --watch) drains a node whose GPU reports uncorrectable ECC errors.
        write_state(self.state, ecc=2)
        r = run([f"{self.paths.bin}/node-health", "--watch"], env=env, check_rc=False, timeout=60)
        info = self.wait_for("the GPU watch to drain the node", lambda: (lambda i: i if "DRAIN" in i.get("State", "") else None)(self.node_info()))
        check(r.returncode == 1 and "GPU 0 has 2 uncorrectable ECC error(s)" in info.get("Reason", ""),
              f"node-health --watch drained the node between checks: {info.get('Reason', '')}", r.stderr)
        write_state(self.state, ecc=0)
        run([f"{self.paths.bin}/node-health", "--drain"], env=env, check_rc=False, timeout=120)
        self.wait_for("the node to be resumed after the GPU was reset", self.node_idle)
        check(True, "a passing full check resumed the node the watch had drained")

        # Spot interruption: a running batch job is requeued when the node is set DOWN.
        rc, job, _ = self.sbatch("--wrap=sleep 600", f"--output={self.root}/wrap-%j.out", wait=False)
        check(rc == 0 and job.isdigit(), f"submitted a long batch job {job}")
        self.wait_for("the job to run", lambda: "JobState=RUNNING" in run(["scontrol", "show", "job", job], env=env).stdout)
        (self.state / "metadata/spot/instance-action").write_text('{"action": "terminate", "time": "2026-12-01T20:00:00Z"}')
        (self.state / "slurmd.pid").write_text(str(self.procs["slurmd"].pid))
        r = run([f"{self.paths.bin}/spot-watch"], env=env, check_rc=False, timeout=60)
        slurmd = self.procs.pop("slurmd")
        slurmd.wait(timeout=30)  # spot-watch stopped it (systemctl stop slurmd.service)
        check(r.returncode == 0 and "interruption notice" in r.stdout, "spot-watch saw the notice", r.stderr)
        # The DOWN is brief: slurmd's last messages count as a response and ReturnToService=2 puts
        # the node back at once (slurmctld: "node_did_resp: ... returned to service"). What must
        # hold is the requeue, and the reason slurmctld recorded.
        job_info = self.wait_for("the job to be requeued", lambda: (lambda s: s if "Restarts=1" in s else None)(
            run(["scontrol", "show", "job", job], env=env).stdout))
        ctld_log = Path(self.root, "var/log/slurm/slurmctld.log").read_text()
        check(f"node {self.node} reason set to: spot-interruption:" in ctld_log and
              f"requeue job JobId={job} due to failure of node {self.node}" in ctld_log,
              "spot-watch set the node DOWN with the spot reason and slurmctld requeued its job")
        check("JobState=PENDING" in job_info, "the interrupted job was requeued (Restarts=1, pending)")

        # The replacement node boots (slurmd registers): ReturnToService=2 returns it; the job runs again.
        (self.state / "metadata/spot/instance-action").unlink()
        self.start("slurmd", self.slurmd_cmd, env=slurmd_env)
        self.skip_requeue_hold(job)
        self.wait_for("the requeued job to run again", lambda: self.job_state(job) == "RUNNING")
        check(True, "the node returned to service on registration and the requeued job runs again")
        run(["scancel", job], env=env, check_rc=False)
        self.wait_for("the node to be idle", self.node_idle)
        self.power_saving()
        self.tencent_configuration()

    def tencent_configuration(self) -> None:
        """The slurm.conf, gres.conf and cgroup.conf generated for a Tencent HCC stack on its default image (8 × H20,
        TencentOS with OpenHPC's Slurm: cgroup autodetect; the same power saving as on AWS), run by the same real
        Slurm on a fresh state directory: the node registers with its gres, and a job gets all eight GPUs. The
        node's own files stay those the AWS run wrote (the Tencent boot differs in its cloud calls and package
        install, which the tests under tests/ cover with stubs)."""
        for name in ("slurmd", "power-agent", "slurmctld"):
            self.stop(name)
        self.slurmd_cmd_before, self.slurmd_cmd = self.slurmd_cmd, []  # no EC2 to play from here on
        tc = dataclasses.replace(
            self.cluster, cloud="tencentcloud", region="ap-shanghai",
            shape=catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304"), lustre=False, job_credentials=False,
            job_role="", suspend_after_s=None, windows=(), state_dir=f"{self.paths.data}/slurm/state-tencent",
            os="el8-openhpc")
        generated = slurm_conf(tc)
        check("SuspendProgram=" in generated and "ResumeProgram=" in generated,
              "tencent: the generated slurm.conf has Slurm power saving, as on AWS")
        check("CgroupPlugin=autodetect" in cgroup_conf(tc), "tencent: cgroup.conf leaves the hierarchy to autodetect")
        self.conf.write_text(localize(generated, self.root, self.hostname, os.cpu_count() or 1, self.ports))
        Path(self.paths.slurm_etc, "gres.conf").write_text(localize_gres(gres_conf(tc), self.root))
        Path(self.paths.slurm_etc, "cgroup.conf").write_text(localize_cgroup(cgroup_conf(tc)))
        Path(tc.state_dir).mkdir(parents=True, exist_ok=True)
        shutil.chown(Path(tc.state_dir), "slurm", "slurm")
        self.start("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self.wait_for("slurmctld to answer with the Tencent configuration",
                      lambda: "UP" in run(["scontrol", "ping"], env=self.env, check_rc=False).stdout)
        self.start("slurmd", self.slurmd_cmd_before, env=self.slurmd_env)
        self.wait_for("the node to register idle with the Tencent configuration", self.node_idle)
        info = self.node_info()
        check(info.get("Gres") == "gpu:h20:8", "tencent: the node registered with Gres=gpu:h20:8", info.get("Gres", ""))
        out_file = self.root / "tencent-gpus.out"  # (no /lustre here: the jobs' directory is a node's own)
        rc, _, _ = self.sbatch("--wrap=echo GPUS=$SLURM_GPUS_ON_NODE", "--gres=gpu:h20:8", "--chdir=/tmp",
                               f"--output={out_file}")
        out = out_file.read_text() if out_file.exists() else ""
        # (the device files here are plain files, so Slurm sets no device indexes; the count is the allocation)
        check(rc == 0 and "GPUS=8" in out, "tencent: a job asking for 8 H20s got all eight", out)

    def job_state(self, job: str) -> str:
        m = re.search(r"JobState=(\S+)", run(["scontrol", "show", "job", job], env=self.env).stdout)
        return m.group(1) if m else ""

    def skip_requeue_hold(self, job: str) -> None:
        """Slurm holds a requeued batch job about two minutes (its EligibleTime); the harness sets it to now."""
        run(["scontrol", "update", f"jobid={job}", "StartTime=now"], env=self.env)

    def window_script(self, inside: bool) -> str:
        """The generated slurm-window, for a window that holds this moment (every day, all day) or one that
        does not (only a day other than today): the script is the same, only its windows differ."""
        other = run_windows.DAYS[(time.gmtime().tm_wday + 3) % 7]
        windows = ("Mon-Sun 00:00-24:00",) if inside else (f"{other} 00:00-24:00",)
        path = self.root / f"slurm-window-{'inside' if inside else 'outside'}"
        path.write_text(power.window_script(dataclasses.replace(self.cluster, windows=windows)))
        path.chmod(0o755)
        return str(path)

    def power_saving(self) -> None:
        """Slurm power saving with the generated programs; the harness plays EC2 (play_ec2)."""
        env = self.env
        check([f for f in Path(self.paths.bin).iterdir() if f.name in ("slurm-resume", "slurm-suspend")] != [],
              "the head node's slurm-resume and slurm-suspend are installed")
        # A run window closes: the partition goes DOWN and the idle node is powered down (the cloud stops it).
        r = run([self.window_script(inside=False)], env=env, check_rc=False)
        check(r.returncode == 0 and "partition" not in r.stderr, "slurm-window ran outside the window", r.stdout + r.stderr)
        part = run(["scontrol", "show", "partition", "local", "-o"], env=env).stdout
        check(" State=DOWN " in part, "outside the run window the partition is DOWN (jobs queue and wait)", part)
        self.wait_for("the node to be powered down", lambda: "POWERED_DOWN" in self.node_state())
        check(self.ec2_calls()[-1:] == [f"stop {INSTANCE_ID}"], "slurm-suspend stopped the node's instance",
              str(self.ec2_calls()))
        rc, job, _ = self.sbatch("--wrap=hostname", f"--output={self.root}/wrap-%j.out", wait=False)
        time.sleep(2)
        check(self.job_state(job) == "PENDING" and not self.ec2_calls()[-1].startswith("start"),
              "a job submitted outside the window waits, and nothing starts the node")
        # The window opens: the partition is UP; the pending job makes slurmctld resume the node.
        run([self.window_script(inside=True)], env=env)
        self.wait_for("the job to run on the resumed node", lambda: self.job_state(job) == "COMPLETED")
        check(f"start {INSTANCE_ID}" in self.ec2_calls(), "resume: the pending job made slurm-resume start the "
              "instance, the node registered and the job ran")
        self.replace_and_requeue()
        self.idle_suspend()

    def idle_suspend(self) -> None:
        """An idle node is suspended after SuspendTime (idle_stop.for_minutes), shortened to seconds here."""
        self.wait_for("the node to be idle", self.node_idle)
        self.conf.write_text(re.sub(r"SuspendTime=\d+", f"SuspendTime={IDLE_SUSPEND_S}", self.conf.read_text()))
        run(["scontrol", "reconfigure"], env=self.env)
        stops = self.ec2_calls().count(f"stop {INSTANCE_ID}")
        self.wait_for("the idle node to be suspended", lambda: "POWERED_DOWN" in self.node_state()
                      and self.ec2_calls().count(f"stop {INSTANCE_ID}") > stops)
        check(True, f"suspend: slurmctld stopped the node after {IDLE_SUSPEND_S} s without a job (SuspendTime)")

    def replace_and_requeue(self) -> None:
        """A node that loses a GPU under a running job: drained, its job requeued, rebooted once, then powered
        down and started again ("new hardware": 8 GPUs), where the requeued job runs."""
        env, c = self.env, self.cluster
        rc, job, _ = self.sbatch("--wrap=sleep 600", f"--output={self.root}/wrap-%j.out", wait=False)
        self.wait_for("the job to run on the resumed node", lambda: self.job_state(job) == "RUNNING")
        write_state(self.state, gpus=7)
        run([f"{self.paths.bin}/node-health", "--watch"], env=env, check_rc=False, timeout=60)
        info = self.wait_for("the GPU watch to drain the node", lambda: (lambda i: i if "DRAIN" in i.get("State", "") else None)(self.node_info()))
        check("expected 8 GPUs, nvidia-smi lists 7" in info.get("Reason", ""), f"the watch drained the node: {info.get('Reason')}")
        r = run([f"{self.paths.bin}/health-recheck"], env=env, check_rc=False, timeout=180)
        job_info = run(["scontrol", "show", "job", job], env=env).stdout
        check("Restarts=1" in job_info and f"requeueing the jobs on {self.node}: {job}" in r.stdout,
              "health-recheck requeued the job on the failing node", r.stdout + r.stderr)
        calls = (self.state / "systemctl.log").read_text().splitlines()
        check(calls[-1:] == ["systemctl reboot"] and Path(c.paths.health_reboot_file).exists(),
              "then rebooted the node once", r.stdout + r.stderr)
        # After its reboot it still fails: powered down to be replaced (the cloud stops it; its next start
        # lands on other hardware, which here has all 8 GPUs).
        stops = self.ec2_calls().count(f"stop {INSTANCE_ID}")
        r = run([f"{self.paths.bin}/health-recheck"], env=env, check_rc=False, timeout=180)
        check("powering" in r.stdout and Path(c.paths.health_replace_file).exists(),
              "failing after its reboot, health-recheck powered the node down to be replaced", r.stdout + r.stderr)
        self.wait_for("the instance to be stopped", lambda: self.ec2_calls().count(f"stop {INSTANCE_ID}") > stops)
        write_state(self.state, gpus=8)
        run([f"{self.paths.bin}/node-health"], env=env, check_rc=False, timeout=120)
        self.skip_requeue_hold(job)
        starts = self.ec2_calls().count(f"start {INSTANCE_ID}")
        self.wait_for("the requeued job to run on the replaced node", lambda: self.job_state(job) == "RUNNING")
        check(self.ec2_calls().count(f"start {INSTANCE_ID}") > starts,
              "replace and requeue: the requeued job resumed the node on new hardware and runs there")
        run(["scancel", job], env=env, check_rc=False)

    def check_metadata_guard(self) -> None:
        """The generated guard puts its rule in place (the iptables stub records it; the stub metadata
        service then refuses every uid but 0), and a job's user gets neither metadata nor the secret."""
        env, guard = self.env, f"{self.paths.bin}/metadata-guard"
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
        token = ["curl", "-fsS", "-X", "PUT", "http://169.254.169.254/latest/api/token"]
        r = run([*nobody, *token], env=env, check_rc=False)
        check(r.returncode == 0, "before the guard, a non-root user gets an IMDS token (what the guard must stop)")
        for _ in range(2):
            r = run([guard], env=env, check_rc=False)
            check(r.returncode == 0, "metadata-guard succeeded (run twice, as on two boots)", r.stdout + r.stderr)
        rules = (self.state / "output-rules").read_text().splitlines()
        check(rules == ["-d 169.254.169.254/32 -j GPU-CLUSTER-METADATA"], "exactly one OUTPUT jump to the guard's chain", str(rules))
        r = run([*nobody, *token], env=env, check_rc=False)
        check(r.returncode == 7, "after the guard, a non-root user's IMDS request is refused", r.stderr)
        r = run(token, env=env, check_rc=False)
        check(r.returncode == 0, "root still reaches the metadata service", r.stderr)

    def cleanup(self) -> None:
        run(["scancel", "--full", "--user=root"], env=self.env, check_rc=False, timeout=30)
        for name in ("slurmd", "power-agent", "slurmctld", "munged"):
            self.stop(name)
        if self.created_run_slurm:
            shutil.rmtree(self.run_slurm, ignore_errors=True)
        if self.created_run_munge:
            shutil.rmtree(self.munge_socket.parent, ignore_errors=True)
        if os.environ.get("SLURM_CHECK_KEEP") != "1":
            shutil.rmtree(self.root, ignore_errors=True)


ISOLATED = "GPU_CLUSTER_SLURM_CHECK_ISOLATED"
"""Set in the child that runs in its own mount and network namespaces (isolate())."""


def isolate() -> None:
    """This run's own /run/munge and /run/slurm (private tmpfs mounts in the mount namespace unshare(1) made), so two
    runs on one machine never share munged's default socket (which configless slurmd must use: it asks munge before
    it has slurm.conf) or slurmd's config cache; free_ports() gives each its own slurmctld and slurmd ports."""
    subprocess.run(["mount", "--make-rprivate", "/"], check=True)
    for d in ("/run/munge", "/run/slurm"):
        Path(d).mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", d], check=True)


def free_ports(n: int) -> list[int]:
    """n TCP ports free on this machine now (the kernel's choice for port 0)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def main() -> int:
    started = time.monotonic()
    if os.geteuid() != 0:
        print("FAIL  slurm-check runs daemons and installs packages: run it as root", file=sys.stderr)
        return 1
    if os.environ.get(ISOLATED) != "1":
        try:
            ensure_packages()
        except Failure as e:
            print(f"FAIL  {e}", file=sys.stderr)
            return 1
        return subprocess.call(["unshare", "--mount", "--fork", sys.executable, "-m", "tests.slurm_local"],
                               env={**os.environ, ISOLATED: "1"})
    h = None
    try:
        isolate()
        h = Harness()
        h.run_all()
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL  {e}", file=sys.stderr)
        if h is not None:
            for name in ("slurmctld", "slurmd", "munged", "power-agent"):
                log = h.daemon_log(name)
                if log:
                    print(f"--- {name} output ---\n{log}", file=sys.stderr)
            for f in sorted(Path(h.root, "var/log/slurm").glob("*.log")):
                print(f"--- {f} ---\n{f.read_text()[-3000:]}", file=sys.stderr)
        return 1
    finally:
        if h is not None:
            h.cleanup()
    print(f"slurm-check: all checks passed in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
