"""What the head node and every GPU node do at boot for Slurm, as components/cloudinit.py data.

head_boot_config() is the head node's whole BootConfig. node_boot_parts() is what a GPU node adds
to the BootConfig its cloud already builds (scratch, /lustre, /data, GPU agent): merge it with
with_slurm(). Everything Slurm-related is written with `defer: true` (cloud-init's
write_files_deferred runs after the package install): the packaged slurmctld/slurmd units start on
install only when /etc/slurm/slurm.conf exists (ConditionPathExists), so deferring keeps them from
starting before the state directory, the munge key and the health check are ready. The runcmd
entries then start everything in order; on every later boot systemd does (units below).

Nothing secret is in here: the munge key is fetched at boot from the secret named in the scripts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

from components.cloudinit import SBIN, BootConfig, DataDisk, LustreMount, Step
from components.slurm import jobs, power, scripts
from components.slurm.clouds import ops
from components.slurm.conf import SLURM_USER, SlurmCluster, cgroup_conf, gres_conf, slurm_conf

HEAD_PACKAGES = ("slurmctld", "slurm-client", "munge", "iptables")
"""What the head node and the GPU nodes need, by their Ubuntu names; components/slurm/oses.py gives each
operating system's own (SlurmCluster.system)."""
WINDOW_PACKAGES = ("tzdata-legacy",)
"""slurm-window reads the schedule's time zone from the system's tz database, and Ubuntu 24.04 moved the old
alias names the spec accepts (US/Eastern, Asia/Calcutta, ...) to tzdata-legacy (Ubuntu 24.04 release notes,
"tzdata package split"; packages.ubuntu.com/noble/tzdata-legacy)."""
NODE_PACKAGES = ("slurmd", "slurm-client", "munge", "fio", "iptables")
"""iptables for the metadata guard (Ubuntu noble main: packages.ubuntu.com/noble/iptables); setpriv,
which the health check uses, is util-linux, which every Ubuntu has (Priority: required)."""

NODE_SETUP_UNIT = scripts.NODE_SETUP_UNIT
HEAD_SETUP_UNIT = "gpu-cluster-head-setup.service"
SPOT_WATCH_UNIT = "gpu-cluster-spot-watch.service"
GUARD_UNIT = "gpu-cluster-metadata-guard.service"
JOB_CREDENTIALS_SERVICE = "gpu-cluster-job-credentials.service"
JOB_CREDENTIALS_TIMER = "gpu-cluster-job-credentials.timer"
RECHECK_SERVICE = "gpu-cluster-health-recheck.service"
RECHECK_TIMER = "gpu-cluster-health-recheck.timer"
WATCH_SERVICE = "gpu-cluster-gpu-watch.service"
WATCH_TIMER = "gpu-cluster-gpu-watch.timer"
POWER_AGENT_UNIT = "gpu-cluster-power-agent.service"
WINDOW_SERVICE = "gpu-cluster-slurm-window.service"
WINDOW_TIMER = "gpu-cluster-slurm-window.timer"
WATCH_EVERY_MIN = 5
"""How often `node-health --watch` looks at the GPUs between full checks (two nvidia-smi queries)."""
RECHECK_FIRST_MIN = 30
"""After boot: later than node-setup's own check usually takes (a mount that is late waits up to
scripts.MOUNT_WAIT_S, 16 min, and a later one is then normally there; then fio)."""
RECHECK_EVERY_MIN = 15
SYSTEMD = "/etc/systemd/system"

_SETUP_UNIT = """[Unit]
Description={description} (gpu-cluster)
Wants=network-online.target
After=network-online.target munge.service
Before={before}

[Service]
Type=oneshot
ExecStart={exec}
RemainAfterExit=yes
TimeoutStartSec=3600

[Install]
WantedBy=multi-user.target
"""

# Drop-in for the packaged slurmd.service: configless nodes have no /etc/slurm/slurm.conf, so the
# unit's ConditionPathExists is reset (an empty assignment resets the list, systemd.unit(5)); and
# slurmd waits for node-setup (identity, munge key, health result) and for the metadata guard: no
# job runs while the metadata service is open to it. Delegate=yes, which cgroup/v2 needs, is already
# in the packaged unit.
_SLURMD_DROPIN = """[Unit]
ConditionPathExists=
Requires={setup} {guard}
After={setup} {guard}
"""
_SLURMCTLD_DROPIN = """[Unit]
Requires={setup} {guard}
After={setup} {guard}
"""
# Early on every boot, before the network is up (network-pre.target, systemd.special(7)) and so
# before any login or job; on the first boot cloud-init starts it before anything else of Slurm's.
_GUARD_UNIT = """[Unit]
Description=Close the instance metadata service to every user but root (gpu-cluster)
DefaultDependencies=no
Wants=network-pre.target
Before=network-pre.target shutdown.target
After=local-fs.target
Conflicts=shutdown.target

[Service]
Type=oneshot
ExecStart={exec}
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""
_JOB_CREDENTIALS_UNIT = """[Unit]
Description=Renew the jobs' AWS credentials (gpu-cluster)
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
ExecStart={exec}
"""
_JOB_CREDENTIALS_TIMER_UNIT = """[Unit]
Description=Renew the jobs' AWS credentials every {every} min (gpu-cluster)

[Timer]
OnBootSec={every}min
OnUnitActiveSec={every}min

[Install]
WantedBy=timers.target
"""
_SPOT_UNIT = """[Unit]
Description=Requeue Slurm jobs on a spot interruption notice (gpu-cluster)
After=slurmd.service
Requires=slurmd.service

[Service]
ExecStart={exec}
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
"""


_RECHECK_UNIT = """[Unit]
Description=Join the cluster again or re-run a failed GPU node health check (gpu-cluster)
After={setup} slurmd.service

[Service]
Type=oneshot
ExecStart={exec}
"""
_RECHECK_TIMER_UNIT = """[Unit]
Description=Join again or re-run a failed GPU node health check every {every} min (gpu-cluster)

[Timer]
OnBootSec={first}min
OnUnitInactiveSec={every}min

[Install]
WantedBy=timers.target
"""


# The spool belongs to SlurmUser (the power programs write there) and no one else; root reads it.
_POWER_AGENT_UNIT = """[Unit]
Description=Start and stop the GPU nodes Slurm asks for (gpu-cluster)
Wants=network-online.target
After=network-online.target {guard}

[Service]
ExecStartPre=/usr/bin/install -d -o {user} -g {user} -m 0700 {spool}
ExecStart={exec}
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
"""
_WINDOW_UNIT = """[Unit]
Description=Keep the Slurm partition to the run windows (gpu-cluster)
After=slurmctld.service
Requires=slurmctld.service

[Service]
Type=oneshot
ExecStart={exec}
"""
_WINDOW_TIMER_UNIT = """[Unit]
Description=Keep the Slurm partition to the run windows, every minute (gpu-cluster)

[Timer]
OnBootSec=1min
OnUnitActiveSec={every}s
AccuracySec=5s

[Install]
WantedBy=timers.target
"""


_WATCH_UNIT = """[Unit]
Description=Watch the GPUs between health checks (gpu-cluster)
After={setup} slurmd.service

[Service]
Type=oneshot
ExecStart={exec}
"""
_WATCH_TIMER_UNIT = """[Unit]
Description=Watch the GPUs every {every} min (gpu-cluster)

[Timer]
OnBootSec={every}min
OnUnitInactiveSec={every}min

[Install]
WantedBy=timers.target
"""


def _file(path: str, content: str, mode: str = "0644") -> dict:
    return {"path": path, "permissions": mode, "owner": "root:root", "content": content, "defer": True}


def _guard_files(c: SlurmCluster) -> list[dict]:
    return [_file(f"{c.paths.bin}/metadata-guard", scripts.metadata_guard_script(c), "0755"),
            _file(f"{SYSTEMD}/{GUARD_UNIT}", _GUARD_UNIT.format(exec=f"{c.paths.bin}/metadata-guard"))]


def _job_credential_files(c: SlurmCluster) -> list[dict]:
    """The jobs' own credentials (GPU nodes): the renewal script, its timer and slurmd's TaskProlog."""
    if not c.job_credentials:
        return []
    b = c.paths.bin
    return [_file(f"{b}/job-credentials", scripts.job_credentials_script(c), "0755"),
            _file(f"{b}/task-prolog", scripts.task_prolog_script(c), "0755"),
            _file(f"{SYSTEMD}/{JOB_CREDENTIALS_SERVICE}", _JOB_CREDENTIALS_UNIT.format(exec=f"{b}/job-credentials")),
            _file(f"{SYSTEMD}/{JOB_CREDENTIALS_TIMER}",
                  _JOB_CREDENTIALS_TIMER_UNIT.format(every=scripts.JOB_CREDENTIALS_EVERY_MIN))]


def _job_files(c: SlurmCluster, on_gpu_node: bool = False) -> list[dict]:
    """The shipped jobs. A GPU node gets only what a job runs there (hello.py): sbatch reads a batch
    script where it is submitted, the head node, and Slurm runs it on the job's first node (sbatch(1): "Slurm
    runs a single copy of the batch script on the first node in the set of allocated nodes"); and the GPU
    nodes' user data is near its 16 KB limit."""
    return [_file(f"{c.paths.jobs}/{name}", body, "0755" if name.endswith(".sbatch") else "0644")
            for name, body in jobs.jobs(c).items() if not (on_gpu_node and name.endswith(".sbatch"))]


@dataclass(frozen=True)
class BootParts:
    """What Slurm adds to a node's BootConfig."""

    packages: tuple[str, ...]
    files: tuple[dict, ...]
    commands: tuple[tuple[str, ...], ...]
    steps: tuple[Step, ...] = ()
    """Boot steps that install what cloud-init's package module cannot (components/slurm/oses.py)."""

    def scripts(self) -> dict[str, str]:
        """Every generated shell script, by path (for shellcheck / bash -n)."""
        return {**{f["path"]: f["content"] for f in self.files if f["content"].startswith("#!/bin/bash")},
                **{f"{SBIN}/{step.name}": step.script for step in self.steps}}


def node_boot_parts(c: SlurmCluster, node_index: Optional[int] = None) -> BootParts:
    """A GPU node's Slurm boot: scripts, jobs, systemd units, packages and start commands.
    node_index: None when all nodes share one user data (AWS launch template: the index comes
    from the gpu-cluster:node tag); the node's index when each node has its own (Tencent)."""
    o, b = ops(c.cloud), c.paths.bin
    files = [
        *_guard_files(c),
        _file(f"{b}/node-identity", scripts.node_identity_script(c, node_index), "0755"),
        _file(f"{b}/munge-key", scripts.munge_key_script(c, "node"), "0755"),
        _file(f"{b}/node-health", scripts.node_health_script(c), "0755"),
        _file(f"{b}/health-gate", scripts.health_gate_script(c), "0755"),
        _file(f"{b}/spot-watch", scripts.spot_watch_script(c), "0755"),
        _file(f"{b}/node-setup", scripts.node_setup_script(c), "0755"),
        _file(f"{b}/health-recheck", scripts.health_recheck_script(c), "0755"),
        _file(f"{SYSTEMD}/{RECHECK_SERVICE}", _RECHECK_UNIT.format(setup=NODE_SETUP_UNIT, exec=f"{b}/health-recheck")),
        _file(f"{SYSTEMD}/{RECHECK_TIMER}", _RECHECK_TIMER_UNIT.format(first=RECHECK_FIRST_MIN, every=RECHECK_EVERY_MIN)),
        _file(f"{SYSTEMD}/{WATCH_SERVICE}", _WATCH_UNIT.format(setup=NODE_SETUP_UNIT, exec=f"{b}/node-health --watch")),
        _file(f"{SYSTEMD}/{WATCH_TIMER}", _WATCH_TIMER_UNIT.format(every=WATCH_EVERY_MIN)),
        _file(f"{SYSTEMD}/{NODE_SETUP_UNIT}", _SETUP_UNIT.format(
            description="Join the Slurm cluster", before="slurmd.service", exec=f"{b}/node-setup")),
        _file(f"{SYSTEMD}/slurmd.service.d/gpu-cluster.conf",
              _SLURMD_DROPIN.format(setup=NODE_SETUP_UNIT, guard=GUARD_UNIT)),
        _file(f"{SYSTEMD}/{SPOT_WATCH_UNIT}", _SPOT_UNIT.format(exec=f"{b}/spot-watch")),
        *_job_credential_files(c),
        *_job_files(c, on_gpu_node=True),
    ]
    commands = (("systemctl", "daemon-reload"),
                ("systemctl", "enable", "--now", GUARD_UNIT),
                ("systemctl", "enable", "--now", NODE_SETUP_UNIT),
                ("systemctl", "enable", "--now", "slurmd.service"),
                ("systemctl", "enable", "--now", SPOT_WATCH_UNIT),
                ("systemctl", "enable", "--now", RECHECK_TIMER),
                ("systemctl", "enable", "--now", WATCH_TIMER),
                *((("systemctl", "enable", "--now", JOB_CREDENTIALS_TIMER),) if c.job_credentials else ()))
    packages, steps = _install(c, NODE_PACKAGES + o.node_packages)
    return BootParts(packages=packages, files=tuple(files), commands=commands, steps=steps)


def _install(c: SlurmCluster, needs: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[Step, ...]]:
    """(cloud-init packages, boot steps) that install `needs` on the cluster's operating system."""
    step = c.system.install_step(needs)
    return ((), (step,)) if step else (c.system.names(needs), ())


def with_slurm(boot: BootConfig, parts: BootParts) -> BootConfig:
    """`boot` plus the Slurm parts: packages and files added, Slurm's commands run after the
    node's own (mounts and agents first, so the health check finds them)."""
    return dataclasses.replace(boot, packages=tuple(boot.packages) + parts.packages,
                               files=tuple(boot.files) + parts.files, steps=tuple(boot.steps) + parts.steps,
                               commands=tuple(boot.commands) + parts.commands)


def head_files(c: SlurmCluster) -> tuple[dict, ...]:
    b, etc = c.paths.bin, c.paths.slurm_etc
    return (
        _file(f"{etc}/slurm.conf", slurm_conf(c)),
        _file(f"{etc}/gres.conf", gres_conf(c)),
        _file(f"{etc}/cgroup.conf", cgroup_conf(c)),
        _file(f"{b}/munge-key", scripts.munge_key_script(c, "head"), "0755"),
        _file(f"{b}/head-setup", scripts.head_setup_script(c), "0755"),
        _file(f"{SYSTEMD}/{HEAD_SETUP_UNIT}", _SETUP_UNIT.format(
            description="Prepare slurmctld", before="slurmctld.service", exec=f"{b}/head-setup")),
        _file(f"{SYSTEMD}/slurmctld.service.d/gpu-cluster.conf",
              _SLURMCTLD_DROPIN.format(setup=HEAD_SETUP_UNIT, guard=GUARD_UNIT)),
        *_guard_files(c),
        *_power_files(c),
        *_job_files(c),
    )


def _power_files(c: SlurmCluster) -> list[dict]:
    """Slurm power saving on the head node: the resume and suspend programs, and the run windows' timer."""
    if not c.power_saving:
        return []
    b = c.paths.bin
    files = [_file(f"{b}/slurm-resume", power.request_script(c, "resume"), "0755"),
             _file(f"{b}/slurm-suspend", power.request_script(c, "suspend"), "0755"),
             _file(f"{b}/power-agent", power.agent_script(c), "0755"),
             _file(f"{SYSTEMD}/{POWER_AGENT_UNIT}", _POWER_AGENT_UNIT.format(
                 spool=c.paths.power_spool, user=SLURM_USER, exec=f"{b}/power-agent", guard=GUARD_UNIT))]
    if c.windows:
        files += [_file(f"{b}/slurm-window", power.window_script(c), "0755"),
                  _file(f"{SYSTEMD}/{WINDOW_SERVICE}", _WINDOW_UNIT.format(exec=f"{b}/slurm-window")),
                  _file(f"{SYSTEMD}/{WINDOW_TIMER}", _WINDOW_TIMER_UNIT.format(every=power.WINDOW_EVERY_S))]
    return files


def _head_install(c: SlurmCluster) -> tuple[tuple[str, ...], tuple[Step, ...]]:
    return _install(c, HEAD_PACKAGES + ops(c.cloud).head_packages
                    + (WINDOW_PACKAGES if c.power_saving and c.windows else ()))


def head_boot_parts(c: SlurmCluster) -> BootParts:
    """What Slurm adds to the head node's boot: packages, its files, and the commands that start slurmctld (and,
    where Slurm powers the GPU nodes, the power agent and the run windows' timer)."""
    packages, steps = _head_install(c)
    return BootParts(
        packages=packages, files=head_files(c), steps=steps,
        commands=(("systemctl", "daemon-reload"),
                  ("systemctl", "enable", "--now", GUARD_UNIT),
                  ("systemctl", "enable", "--now", HEAD_SETUP_UNIT),
                  ("systemctl", "enable", "--now", "slurmctld.service"),
                  *((("systemctl", "enable", "--now", POWER_AGENT_UNIT),) if c.power_saving else ()),
                  *((("systemctl", "enable", "--now", WINDOW_TIMER),) if c.power_saving and c.windows else ())))


def head_base_config(c: SlurmCluster, *, lustre: Optional[LustreMount] = None, data_disk: Optional[DataDisk] = None,
                     disk_model: Optional[str] = None) -> BootConfig:
    """The head node's BootConfig without Slurm's parts: its host name (= SlurmctldHost's name), /lustre when the
    cluster has one, the persistent data disk at /data holding slurmctld's state. `data_disk` (how the boot finds
    it: cloudinit.DataDisk) is required when state_dir is under /data (the default); `lustre` carries the cloud's
    mount source and client install."""
    if c.state_dir.startswith(c.paths.data + "/") and data_disk is None:
        raise ValueError(f"slurmctld state {c.state_dir} is on /data: give the head node a data disk")
    if c.lustre and lustre is None:
        raise ValueError("the cluster has /lustre: pass its mount (lustre)")
    return BootConfig(nvme_devices=0, nvme_model=None, scratch="none", disk_model=disk_model, lustre=lustre,
                      data_disk=data_disk, hostname=c.head_name)


def head_boot_config(c: SlurmCluster, *, lustre: Optional[LustreMount] = None, data_disk: Optional[DataDisk] = None,
                     disk_model: Optional[str] = None) -> BootConfig:
    """The head node's whole BootConfig: head_base_config with head_boot_parts."""
    return with_slurm(head_base_config(c, lustre=lustre, data_disk=data_disk, disk_model=disk_model),
                      head_boot_parts(c))


def all_scripts(c: SlurmCluster, node_index: Optional[int] = None) -> dict[str, str]:
    """Every generated bash script (head and node, jobs included), by a unique label."""
    out = {f"node:{p}": s for p, s in node_boot_parts(c, node_index).scripts().items()}
    out.update({f"head:{p}": s for p, s in head_boot_parts(c).scripts().items()})
    return out
