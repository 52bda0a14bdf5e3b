"""Run a real Slurm on this machine from the configuration components/slurm generates, and check it.

    venv/bin/python -m tests.slurm_local        (make slurm-check; exit 0 = every check passed)

What it does, in order (each step prints PASS/FAIL; the first failure stops the run):
  1. Makes sure Debian's slurmctld, slurmd, munge and fio are installed (installs them
     with apt-get when missing; a failed install is a failure, never a skip).
  2. Generates the head node's files and a GPU node's files for a one-node p5.48xlarge cluster on
     AWS, with every path rooted in a temporary directory, and writes them there exactly as
     generated (systemd units excepted: no systemd here; the harness starts the daemons itself).
  3. Localises slurm.conf / gres.conf only as far as one local node needs (localize(), below).
  4. Runs the generated munge-key scripts against a stub Secrets Manager: the head makes and stores
     the key, the node fetches it; starts munged with that key, then slurmctld.
  5. Runs the generated node-setup (identity from stub instance metadata, munge key, health check
     against stub nvidia-smi / fi_info / sysfs, real fio), then slurmd with the SLURMD_OPTIONS
     node-setup wrote (configless, from slurmctld).
  6. Checks: the node registers idle with gpu:h100:8 and the address it registered from; the
     torchrun and NCCL jobs run via sbatch; the node-health job drains the node with the reason when
     nvidia-smi shows 7 GPUs; the boot path (slurmd's HealthCheckProgram) drains and resumes it;
     a spot notice sets it DOWN and its running job is requeued; a restarted slurmd returns it.
  7. Stops every daemon it started and removes the temporary directory.
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
import time
from pathlib import Path

from components import catalog
from components.slurm import SlurmCluster, boot
from components.slurm.conf import Paths, cgroup_conf, gres_conf, slurm_conf
from tests.slurm_local.stubs import stub_env, write_state, write_stubs

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "fio")
COMMANDS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged", "fio")
SHAPE = ("aws", "p5.48xlarge")
STEP_TIMEOUT_S = 90
SETUP_TIMEOUT_S = 30


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


def localize(conf: str, root: Path, hostname: str, cpus: int) -> str:
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
    ]
    out = conf
    for pattern, repl in swaps:
        out, n = re.subn(pattern, repl, out, flags=re.M)
        if n == 0:
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
    refuses to start ("Hybrid mode is not supported"); v1 here, nothing else changed."""
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
            head_address="127.0.0.1", munge_secret_id="local-munge-key", purchase="spot",
            scratch=True, lustre=True, data_disk=True,
            state_dir=f"{self.paths.data}/slurm/state", paths=self.paths,
            job_credentials=True, job_role="arn:aws:iam::123456789012:role/local-compute-job-role")
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
        Path(self.paths.slurm_etc, "slurm.conf").write_text(
            localize(slurm_conf(c), root, self.hostname, os.cpu_count() or 1))
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
        (self.state / "metadata/instance-id").write_text("i-0123456789abcdef0")
        (self.state / "metadata/tags/instance/gpu-cluster:node").write_text("0")
        for d in ("run/munge", "var/lib/munge", "var/log/munge"):
            shutil.chown(root / d, "munge", "munge")
        Path(c.state_dir).mkdir(parents=True, exist_ok=True)
        check(written >= 9, f"wrote the {written} generated head node files under {root}")

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

    def wait_for(self, what: str, fn, timeout: float = STEP_TIMEOUT_S, interval: float = 1.0):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
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
        if wait:
            cmd.append("--wait")
        cmd.append(f"{self.paths.jobs}/{job}" if not job.startswith("--") else job)
        r = run(cmd, env=env or self.env, check_rc=False, timeout=STEP_TIMEOUT_S)
        job_id = r.stdout.strip().split(";")[0]
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
        check(f"NodeHealthy 1 ClusterName=local,NodeName={self.node},InstanceId=i-0123456789abcdef0" in metrics,
              "published NodeHealthy=1 with ClusterName/NodeName/InstanceId dimensions")

        options = Path(self.paths.etc_default, "slurmd").read_text()
        m = re.fullmatch(r'SLURMD_OPTIONS="(.*)"\n', options)
        check(m is not None and "--conf-server 127.0.0.1:6817" in m.group(1), "SLURMD_OPTIONS: configless from the head", options)
        # slurmd runs configless: no -f; it fetches slurm.conf, gres.conf and cgroup.conf from slurmctld.
        slurmd_env = {k: v for k, v in env.items() if k != "SLURM_CONF"}
        self.slurmd_cmd = ["slurmd", "-D", *m.group(1).split()]
        self.start("slurmd", self.slurmd_cmd, env=slurmd_env)
        self.wait_for("the node to register idle", self.node_idle)
        info = self.node_info()
        check(info.get("Gres") == "gpu:h100:8", "the node registered with Gres=gpu:h100:8", info.get("Gres", ""))
        check(info.get("NodeAddr") == "127.0.0.1", "cloud_reg_addrs set NodeAddr from the registration", info.get("NodeAddr", ""))
        check("spot" in info.get("AvailableFeatures", ""), "the spot node carries the spot feature")

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
        self.wait_for("the requeued job to run again", lambda: "JobState=RUNNING" in run(["scontrol", "show", "job", job], env=env).stdout,
                      timeout=180)
        check(True, "the node returned to service on registration and the requeued job runs again")
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
        for name in ("slurmd", "slurmctld", "munged"):
            self.stop(name)
        if self.created_run_slurm:
            shutil.rmtree(self.run_slurm, ignore_errors=True)
        if self.created_run_munge:
            shutil.rmtree(self.munge_socket.parent, ignore_errors=True)
        if os.environ.get("SLURM_CHECK_KEEP") != "1":
            shutil.rmtree(self.root, ignore_errors=True)


def main() -> int:
    started = time.monotonic()
    if os.geteuid() != 0:
        print("FAIL  slurm-check runs daemons and installs packages: run it as root", file=sys.stderr)
        return 1
    h = None
    try:
        ensure_packages()
        h = Harness()
        h.run_all()
    except (Failure, subprocess.TimeoutExpired) as e:
        print(f"FAIL  {e}", file=sys.stderr)
        if h is not None:
            for name in ("slurmctld", "slurmd", "munged"):
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
