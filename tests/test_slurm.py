"""Slurm generators (components/slurm): configuration, catalog coverage, and every generated script
linted (shellcheck, bash -n) and exercised against stub tools. Fast: no daemons (those are
`python -m tests.slurm_local`, make slurm-check)."""

from __future__ import annotations

import base64
import dataclasses
import json
import importlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from components import catalog
from components.cloudinit import DataDisk, LustreMount, render
from components.slurm import (SlurmCluster, all_scripts, cgroup_conf, fabric, from_spec, gres_conf, head_boot_config,
                              node_boot_parts, slurm_conf, with_slurm)
from components.slurm import power, scripts
from components.slurm.conf import Paths, hostlist
from components.slurm.oses import SLURM_RELEASE
from components.slurm.fabric import fabrics, sources
from components.spec import load_spec
from gpu_cluster.render import read_stack_file, stack_path
from tests.shellcheck import lint
from tests.slurm_local.stubs import stub_env, write_state, write_stubs
from conftest import load_yaml

jobs_mod = importlib.import_module("components.slurm.jobs")
SAMPLES = ["aws-entry", "aws-mid", "aws-large", "tencent-entry", "tencent-mid", "tencent-large"]
DISK = DataDisk(serial="disk-head0")
P5 = catalog.shape("aws", "p5.48xlarge")


def cluster(shape=P5, nodes=2, **kw) -> SlurmCluster:
    args = dict(name="llm", cloud=shape.cloud, region="us-east-1", shape=shape, nodes=nodes,
                head_address="10.40.0.10", munge_secret_id="llm-munge")
    args.update(kw)
    return SlurmCluster(**args)


def sample(stack: str) -> SlurmCluster:
    sf = read_stack_file(stack_path(stack))
    return from_spec(load_spec(sf.config["gpu-cluster:cluster"], sf.regions), "10.40.0.10", f"{stack}-munge")


def conf_nodes(conf: str) -> list[dict[str, str]]:
    """NodeName lines as {key: value}, with the host list expanded to a count."""
    out = []
    for line in conf.splitlines():
        if line.startswith("NodeName="):
            fields = dict(f.split("=", 1) for f in line.split())
            m = re.fullmatch(r".*\[(.*)\]", fields["NodeName"])
            count = 0
            for part in m.group(1).split(","):
                a, _, b = part.partition("-")
                count += int(b or a) - int(a) + 1
            fields["count"] = str(count)
            out.append(fields)
    return out


# --- configuration -----------------------------------------------------------------------------
def test_two_node_large_plan_declares_16_gpus_as_gres():
    c = sample("aws-large")
    conf = slurm_conf(c)
    nodes = conf_nodes(conf)
    total = sum(int(n["count"]) * int(n["Gres"].rsplit(":", 1)[1]) for n in nodes)
    assert (c.nodes, total) == (2, 16)
    assert all(n["Gres"] == "gpu:h100:8" and n["State"] == "CLOUD" for n in nodes)
    assert "GresTypes=gpu\n" in conf
    assert "NodeName=aws-large-node-[0-1] Name=gpu Type=h100 File=/dev/nvidia[0-7]\n" in gres_conf(c).replace(
        c.name, "aws-large")


@pytest.mark.parametrize("stack", SAMPLES)
def test_every_sample_stack_renders_a_head_node_and_slurm(stack):
    c = sample(stack)
    conf = slurm_conf(c)
    assert f"SlurmctldHost={c.name}-head(10.40.0.10)\n" in conf
    assert sum(int(n["count"]) for n in conf_nodes(conf)) == c.nodes
    assert conf.count("PartitionName=") == 1 and f"PartitionName={c.name} Nodes={c.node_hostlist} Default=YES" in conf
    doc = load_yaml(render(head_boot_config(c, lustre=LustreMount(source="fs@tcp:/m", client_script="#!/bin/bash\n") if c.lustre else None,
                                                 data_disk=DISK)))
    assert doc["hostname"] == f"{c.name}-head"
    # Ubuntu's packages from cloud-init; on TencentOS, OpenHPC's from a boot step (components/slurm/oses.py)
    wanted = {"slurmctld", "munge"} if c.os == "ubuntu-24.04" else {f"slurm-slurmctld-ohpc-{SLURM_RELEASE}", "munge"}
    installed = set(doc.get("packages", [])) | {w for f in doc["write_files"] if f["path"].endswith("-slurm-packages")
                                                for w in f["content"].split()}
    assert wanted <= installed
    paths = {f["path"] for f in doc["write_files"]}
    assert {"/etc/slurm/slurm.conf", "/etc/slurm/gres.conf", "/etc/slurm/cgroup.conf"} <= paths
    started = [c[-1] for c in doc["runcmd"] if c[:3] == ["systemctl", "enable", "--now"]]
    # slurmctld, then (AWS: Slurm powers the GPU nodes) the root agent that starts and stops them.
    if c.power_saving:
        assert started[-2:] == ["slurmctld.service", "gpu-cluster-power-agent.service"]
    else:
        assert started[-1] == "slurmctld.service"


def test_slurm_conf_keys_that_make_the_design_work():
    conf = slurm_conf(cluster(purchase="mixed", nodes=3))
    for line in ("SlurmctldParameters=enable_configless,cloud_reg_addrs,idle_on_node_suspend,power_save_min_interval=30",
                 "TreeWidth=65533", "PrivateData=cloud",
                 "JobRequeue=1", "ReturnToService=2", "ProctrackType=proctrack/cgroup",
                 "TaskPlugin=task/cgroup,task/affinity", "StateSaveLocation=/data/slurm/state",
                 "HealthCheckProgram=/opt/gpu-cluster/bin/health-gate"):
        assert f"\n{line}\n" in conf, line
    # mixed: node 0 on demand, the rest spot, told apart by feature
    nodes = {n["NodeName"]: n["Features"] for n in conf_nodes(conf)}
    assert nodes == {"llm-node-[0]": "p5.48xlarge,ondemand", "llm-node-[1-2]": "p5.48xlarge,spot"}
    assert cgroup_conf(cluster()) .splitlines()[1:] == [
        "CgroupPlugin=cgroup/v2", "ConstrainCores=yes", "ConstrainDevices=yes", "ConstrainRAMSpace=no"]


def test_slurm_power_saving_is_configured_where_slurm_powers_the_nodes():
    """AWS: the resume and suspend programs always (a failed node is replaced by a power down and up), SuspendTime
    from idle_stop on the partition, or INFINITE there (power saving on, no idle suspension); a GPU boot's
    ResumeTimeout. Tencent Cloud: no power saving at all."""
    def keys(conf: str) -> dict[str, str]:
        return dict(line.split("=", 1) for line in conf.splitlines() if "=" in line and not line.startswith(
            ("NodeName=", "PartitionName=", "#")))

    idle = slurm_conf(cluster(suspend_after_s=3600))
    k = keys(idle)
    assert (k["ResumeProgram"], k["SuspendProgram"], k["ResumeFailProgram"]) == (
        "/opt/gpu-cluster/bin/slurm-resume", "/opt/gpu-cluster/bin/slurm-suspend", "/opt/gpu-cluster/bin/slurm-suspend")
    assert (k["ResumeTimeout"], k["SuspendTimeout"], k["SuspendTime"], k["ReconfigFlags"]) == (
        "1800", "600", "3600", "KeepPartState")
    assert idle.rstrip().endswith("State=UP SuspendTime=3600")
    always = slurm_conf(cluster())
    assert always.rstrip().endswith("State=UP SuspendTime=INFINITE") and keys(always)["SuspendTime"] != "INFINITE"
    tencent = slurm_conf(dataclasses.replace(cluster(suspend_after_s=3600), cloud="tencentcloud",
                                             shape=catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304")))
    assert keys(tencent) == keys(idle)  # the same power saving on Tencent Cloud


@pytest.mark.parametrize("stack", SAMPLES)
def test_the_consumable_is_what_the_node_lines_describe(stack):
    """A node line with CPUs only makes Slurm infer one single-thread core per socket (slurm.conf(5),
    Sockets/CoresPerSocket/ThreadsPerCore): then only whole CPUs can be the consumable, not cores."""
    conf = slurm_conf(sample(stack))
    select = re.search(r"^SelectTypeParameters=(\S+)$", conf, re.M).group(1)
    for n in conf_nodes(conf):
        if not {"CoresPerSocket", "ThreadsPerCore"} <= set(n):
            assert select.startswith("CR_CPU"), (stack, select, n)


@pytest.mark.parametrize("stack", SAMPLES)
def test_node_lines_declare_memory_below_what_the_shape_reports(stack):
    """Without RealMemory Slurm takes 1 MB and refuses any job that asks for memory; above what the
    kernel reports the node would be refused at registration."""
    c = sample(stack)
    for n in conf_nodes(slurm_conf(c)):
        mib = int(n["RealMemory"])
        assert 1024 < mib <= c.shape.mem_gib * 1024 * 0.9, (stack, mib, c.shape.mem_gib)
        assert mib >= c.shape.mem_gib * 1024 * 0.85


def test_hostlist_and_inputs_are_checked():
    assert hostlist("c-node-", [0, 1, 2, 5, 7, 8]) == "c-node-[0-2,5,7-8]"
    assert gres_conf(cluster(shape=catalog.shape("aws", "g4dn.xlarge"), nodes=1)).endswith("File=/dev/nvidia0\n")
    with pytest.raises(ValueError, match="head_address"):
        cluster(head_address="10.0.0.1)(x")
    with pytest.raises(ValueError, match="data disk"):
        head_boot_config(cluster(), data_disk=None)
    with pytest.raises(ValueError, match="node_index"):
        node_boot_parts(cluster(shape=catalog.shape("tencentcloud", "GN7.2XLARGE32"), nodes=1))


def test_munge_key_is_never_in_user_data():
    for c, idx in ((cluster(), None), (cluster(shape=catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304"),
                                               region="ap-shanghai"), 1)):
        node = render(with_slurm(head_boot_config(c, data_disk=DISK), node_boot_parts(c, idx)))
        head = render(head_boot_config(c, data_disk=DISK))
        for text in (node, head):
            assert "SECRET_ID='llm-munge'" in text  # only the secret's name travels
            assert not re.search(r"[A-Za-z0-9+/]{40,}={0,2}", text), "a long base64 blob in user data"
            assert "dd if=/dev/urandom bs=1024 count=1" in text  # made at boot, on the head only
        assert "MODE='node'" in node and "MODE='head'" in head


# --- the catalog ---------------------------------------------------------------------------------
@pytest.mark.parametrize("cloud", catalog.CLOUDS)
def test_fabric_rows_cover_exactly_the_catalog(cloud):
    assert set(fabrics(cloud)) == set(catalog.shapes(cloud))


def test_fabric_rows_are_sourced_and_consistent():
    src = sources()
    for cloud in catalog.CLOUDS:
        for f in fabrics(cloud).values():
            shape = catalog.shape(cloud, f.type)
            assert f.source and all(k in src for k in f.source), f.type
            assert set(f.unconfirmed) <= set(f.__dataclass_fields__), f.type
            assert f.fabric_manager <= f.nvlink, f"{f.type}: fabric manager without NVLink"
            if shape.interconnect == "nvswitch":
                assert f.nvlink and f.fabric_manager, f.type
            if shape.interconnect == "pcie":
                assert not f.nvlink, f.type
            assert (f.allreduce_busbw_gbps is None) == (f.allreduce_message_bytes is None) == (f.allreduce_pass_fraction is None)
    p5 = fabric("aws", "p5.48xlarge")
    assert (p5.allreduce_busbw_gbps, p5.allreduce_message_bytes, p5.allreduce_threshold_gbps) == (487.09, 2 ** 34, 414.03)
    assert fabric("aws", "p4de.24xlarge").allreduce_busbw_gbps == 78.33
    assert "allreduce_busbw_gbps" in fabric("aws", "p4d.24xlarge").unconfirmed
    assert fabric("aws", "p5.48xlarge").nccl_env["FI_PROVIDER"] == "efa"
    with pytest.raises(KeyError, match="no row"):
        fabric("aws", "p9.huge")


# --- every generated script: shellcheck and bash -n -------------------------------------------------
def _every_script() -> dict[str, str]:
    out = {}
    for cloud in catalog.CLOUDS:
        for i, shape in enumerate(catalog.shapes(cloud).values()):
            # alternate the variants across shapes: every script sees both, every shape one
            for purchase, lustre in ((("on_demand", False), ("mixed", True))[i % 2],):
                c = cluster(shape=shape, nodes=3, purchase=purchase, lustre=lustre, scratch=shape.has_nvme,
                            data_disk=lustre)
                for label, body in all_scripts(c, None if cloud == "aws" else 1).items():
                    out[f"{cloud}-{shape.type}-{purchase}-{label}"] = body
    return out


def test_every_generated_script_passes_shellcheck_and_bash_n(tmp_path):
    scripts = _every_script()
    passed, report, linted = lint(scripts, tmp_path, "-S", "style")
    assert passed, report
    assert len(set(scripts.values())) > 60  # distinct scripts over every shape, both purchases, head and node
    assert linted >= 20, "one of each kind of script: setup, health, munge, gate, jobs, for head and node"


def test_hello_py_compiles():
    compile(jobs_mod.HELLO_PY, "hello.py", "exec")


# --- scripts run against stub tools -------------------------------------------------------------------
@pytest.fixture
def node(tmp_path):
    """A GPU node laid out under tmp_path with stub hardware and cloud tools."""
    c = cluster(nodes=2, purchase="spot", scratch=True, lustre=True, data_disk=True,
                paths=Paths().rooted(str(tmp_path)))
    bin_dir, state = tmp_path / "stub-bin", tmp_path / "stub-state"
    write_stubs(bin_dir)
    (state / "metadata/tags/instance").mkdir(parents=True)
    (state / "metadata/instance-id").write_text("i-0abc")
    (state / "metadata/tags/instance/gpu-cluster:node").write_text("1")
    write_state(state, gpus=8, nvlinks=18, fabricmanager="active", busbw="450.0", secret="",
                mounts=[c.paths.scratch, c.paths.lustre, c.paths.data])
    for i in range(32):
        (Path(c.paths.infiniband_sysfs) / f"rdmap{i}").mkdir(parents=True)
    for d in (c.paths.scratch, c.paths.lustre, c.paths.data):
        Path(d).mkdir(parents=True, exist_ok=True)
    # fio and scontrol stubs for the fast suite (the harness runs the real ones)
    (bin_dir / "fio").write_text('#!/bin/bash\necho "fio $*" >> "$STUB_STATE/fio.log"\n'
                                 'echo \'{"jobs": [{"read": {"iops": 1234.5}}]}\'\n')
    # scontrol requeue ends the node's jobs ($STUB_STATE/jobs, one id a line, which squeue -w lists).
    (bin_dir / "scontrol").write_text('#!/bin/bash\necho "scontrol $*" >> "$STUB_STATE/scontrol.log"\n'
                                      'if [ "$1" = show ]; then cat "$STUB_STATE/node" 2>/dev/null || true; fi\n'
                                      'if [ "$1" = requeue ]; then : > "$STUB_STATE/jobs"; fi\n')
    (bin_dir / "squeue").write_text('#!/bin/bash\ncat "$STUB_STATE/jobs" 2>/dev/null || true\n')
    for name in ("fio", "scontrol", "squeue"):
        (bin_dir / name).chmod(0o755)
    env = stub_env(bin_dir, state, virtual_clock=True)  # waits take no time; sleep.log says how long
    return c, env, state, tmp_path


def _run(path: Path, script: str, env, *args, timeout=60):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(0o755)
    return subprocess.run([str(path), *args], env=env, capture_output=True, text=True, timeout=timeout)


def _health(node, guard=True, **state):
    c, env, st, root = node
    write_state(st, **state)
    if guard:  # as at boot: the guard's unit runs before node-setup and slurmd
        assert _run(root / "bin/metadata-guard", scripts.metadata_guard_script(c), env).returncode == 0
    _run(root / "bin/node-identity", scripts.node_identity_script(c), env)
    _run(Path(c.paths.bin) / "health-gate", scripts.health_gate_script(c), env)
    r = _run(root / "bin/node-health", scripts.node_health_script(c), env)
    return r, Path(c.paths.health_status_file).read_text()


def test_health_passes_on_a_healthy_node_and_publishes_1(node):
    r, status = _health(node)
    assert r.returncode == 0 and status == "PASS\n", r.stderr
    c, env, st, root = node
    assert Path(c.paths.node_name_file).read_text() == "llm-node-1\n"  # from the gpu-cluster:node tag
    assert (st / "metrics.log").read_text() == "NodeHealthy 1 ClusterName=llm,NodeName=llm-node-1,InstanceId=i-0abc\n"
    assert (st / "fio.log").read_text().count("--rw=randread") == 2  # /scratch and /lustre, not /data


@pytest.mark.parametrize("state, reason", [
    ({"gpus": 7}, "expected 8 GPUs, nvidia-smi lists 7"),
    ({"nvlinks": 0}, "GPU 0 has no active NVLink link"),
    ({"fabricmanager": "inactive"}, "nvidia-fabricmanager is inactive, not active"),
    ({"fabricmanager": "failed"}, "nvidia-fabricmanager is failed, not active"),
])
def test_health_fails_with_the_reason(node, state, reason):
    r, status = _health(node, **state)
    assert r.returncode == 1 and status.startswith("FAIL\n") and reason in status, status + r.stderr
    assert (node[2] / "metrics.log").read_text().startswith("NodeHealthy 0 ")


def test_health_waits_for_a_fabric_manager_still_starting(node):
    r, status = _health(node, fabricmanager="activating-then-active")
    assert r.returncode == 0 and status == "PASS\n", r.stderr
    assert "nvidia-fabricmanager active" in r.stdout
    assert (node[2] / "sleep.log").read_text() == f"sleep {scripts.POLL_S}\n", "one poll's wait, then active"


def _autofs_stat(node, directory: str) -> None:
    """`stat -f` answers autofs for `directory`: systemd's automount placeholder whose file system
    did not mount (mountpoint still says yes)."""
    bin_dir = Path(node[1]["PATH"].split(":")[0])
    (bin_dir / "stat").write_text(f'#!/bin/bash\nif [ "${{!#}}" = {directory}/. ]; then echo autofs; exit 0; fi\n'
                                  'exec /usr/bin/stat "$@"\n')
    (bin_dir / "stat").chmod(0o755)


def test_an_automount_placeholder_is_not_a_mounted_lustre(node):
    c = node[0]
    _autofs_stat(node, c.paths.lustre)
    wait = scripts.MOUNT_WAIT_S
    try:
        scripts.MOUNT_WAIT_S = 1
        r, status = _health(node)
    finally:
        scripts.MOUNT_WAIT_S = wait
    assert r.returncode == 1 and f"{c.paths.lustre} is not mounted" in status, status
    assert (node[2] / "fio.log").read_text().count("--rw=randread") == 1, "fio on /scratch only"


def test_head_setup_starts_slurmctld_without_a_lustre_that_cannot_mount(node):
    """The shared directories on /lustre are optional for the head: an automount that fails leaves
    head-setup successful (slurmctld Requires= it) and the directories uncreated."""
    c, env, st, root = node
    _autofs_stat(node, c.paths.lustre)
    Path(c.paths.munge_key).parent.mkdir(parents=True, exist_ok=True)
    script = scripts.head_setup_script(c, wait_mounts=[]).replace(
        f"MOUNT_WAIT_S='{scripts.MOUNT_WAIT_S}'", "MOUNT_WAIT_S='1'")
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin/munge-key").write_text("#!/bin/bash\nexit 0\n")
    (root / "bin/munge-key").chmod(0o755)
    script = script.replace(f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'").replace("SLURM_USER='slurm'", "SLURM_USER='root'")
    r = _run(root / "head-setup", script, env)
    assert r.returncode == 0, r.stderr
    assert "slurmctld starts without the shared directories" in r.stderr
    assert not (Path(c.paths.lustre) / "home").exists()


def test_a_failed_check_is_rerun_by_the_timer_until_it_passes(node):
    """health-recheck (a systemd timer on every GPU node) runs node-health again while the result
    is FAIL; on PASS it leaves the node alone."""
    c, env, st, root = node
    r, status = _health(node, gpus=7)
    assert status.startswith("FAIL")
    write_state(st, gpus=8)
    recheck = _run(root / "bin/health-recheck", scripts.health_recheck_script(c).replace(
        f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'"), env)
    assert recheck.returncode == 0 and "passes now" in recheck.stdout, recheck.stderr
    assert Path(c.paths.health_status_file).read_text() == "PASS\n"
    before = (st / "metrics.log").read_text()
    again = _run(root / "bin/health-recheck", scripts.health_recheck_script(c).replace(
        f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'"), env)
    assert again.returncode == 0 and (st / "metrics.log").read_text() == before, "PASS: nothing re-run"


@pytest.mark.parametrize("failed", [scripts.NODE_SETUP_UNIT, "slurmd.service"])
def test_a_node_that_could_not_join_joins_again_at_the_next_recheck(node, failed):
    """A node whose setup failed (say, no munge key within MUNGE_WAIT_S) or whose slurmd failed used to
    stay out of the cluster for good: the recheck timer starts slurmd again, which runs node-setup first."""
    c, env, st, root = node
    (st / "failed-units").write_text(failed + "\n")
    script = scripts.health_recheck_script(c).replace(f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'")
    r = _run(root / "bin/health-recheck", script, env)
    assert r.returncode == 0 and "joining the cluster again" in r.stdout, r.stderr
    calls = (st / "systemctl.log").read_text().splitlines()
    assert calls[-1] == "systemctl start --no-block slurmd.service", calls
    assert not (st / "metrics.log").exists() or "NodeHealthy" not in (st / "metrics.log").read_text(), \
        "node-setup runs the check itself once it has joined"


def test_a_slurmd_stopped_on_purpose_stays_down(node):
    """spot-watch stops slurmd (inactive, not failed) on an interruption notice: the recheck must not
    bring the doomed node back into service."""
    c, env, st, root = node
    (st / "failed-units").write_text("")
    _health(node)  # a passing check: nothing for the recheck to do
    script = scripts.health_recheck_script(c).replace(f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'")
    r = _run(root / "bin/health-recheck", script, env)
    assert r.returncode == 0 and "joining" not in r.stdout
    assert "start --no-block slurmd.service" not in (st / "systemctl.log").read_text()


def _watch(node):
    c, env, st, root = node
    return subprocess.run([str(root / "bin/node-health"), "--watch"], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("state,reason", [
    ({"gpus": 7}, "expected 8 GPUs, nvidia-smi lists 7"),
    ({"ecc": 2}, "GPU 0 has 2 uncorrectable ECC error(s) since the driver loaded"),
    # An Xid the catalog resolves by a reset, among ones it does not (13: an application's fault; 63: a row
    # remapped, as the driver logs them).
    ({"kernel-log": ["NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
                     "NVRM: Xid (PCI:0000:53:00): 13, pid=4242, Graphics Exception",
                     "NVRM: Xid (PCI:0000:53:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]},
     "kernel log: NVRM: Xid (PCI:0000:53:00): 79,"),
])
def test_the_gpu_watch_drains_a_node_that_lost_a_gpu_or_has_uncorrectable_errors(node, state, reason):
    """Between full checks (node-health --watch, a timer), a GPU that falls off the bus or reports uncorrectable ECC errors writes FAIL,
    publishes NodeHealthy=0 and drains the node (health-gate), so the recheck owns it from then on."""
    c, env, st, root = node
    r, status = _health(node)
    assert status == "PASS\n"
    write_state(st, **state)
    w = _watch(node)
    assert w.returncode == 1 and reason in w.stderr, w.stderr
    assert Path(c.paths.health_status_file).read_text().splitlines() == ["FAIL", reason]
    assert (st / "metrics.log").read_text().splitlines()[-1].startswith("NodeHealthy 0 ClusterName=")
    assert f"state=drain reason={scripts.HEALTH_REASON_PREFIX} {reason}" in (st / "scontrol.log").read_text()


def test_the_gpu_watch_leaves_healthy_or_already_failing_nodes_and_unreadable_counters_alone(node):
    c, env, st, root = node
    _health(node)
    before = (st / "metrics.log").read_text()
    assert _watch(node).returncode == 0 and (st / "metrics.log").read_text() == before, "healthy: nothing published"
    write_state(st, ecc="[N/A]")
    assert _watch(node).returncode == 0, "a counter that cannot be read is not judged"
    r, status = _health(node, gpus=7)  # a failing full check: drained already, the recheck's business
    write_state(st, ecc=3)
    after = (st / "metrics.log").read_text()
    assert _watch(node).returncode == 0 and (st / "metrics.log").read_text() == after
    assert Path(c.paths.health_status_file).read_text().startswith("FAIL\nexpected 8 GPUs")


def test_a_node_that_still_fails_has_its_jobs_requeued_is_rebooted_once_then_replaced_then_left(node):
    """Self-healing: a node drained by its own check that still fails at the recheck has its jobs requeued and is
    rebooted once (a reset clears a GPU off the bus or ECC errors); failing after that, it is powered down by
    name for Slurm to stop it and start it again on other hardware; failing even then, it is left for a person.
    Never for someone else's drain, never powered down when it is a spot node (a one-time spot instance cannot
    be stopped) or where Slurm does not power nodes; a passing check clears both marks."""
    c, env, st, root = node
    _health(node, gpus=7)
    script = scripts.health_recheck_script(c).replace(f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'")
    ours = f"Reason={scripts.HEALTH_REASON_PREFIX} expected 8 GPUs, nvidia-smi lists 7 [root@2026-12-05T09:00:00]"
    reboot, replace = Path(c.paths.health_reboot_file), Path(c.paths.health_replace_file)

    def recheck(state: str, reason: str = ours, features: str = "p5.48xlarge,ondemand", jobs: str = "",
                text: str = script):
        (st / "node").write_text(f"NodeName={c.node_name(0)} Arch=x86_64 AvailableFeatures={features} "
                                 f"State={state} {reason}\n")
        (st / "jobs").write_text(jobs)
        for log in ("systemctl.log", "scontrol.log"):
            (st / log).write_text("")
        r = _run(root / "bin/health-recheck", text, env)
        return r, (st / "systemctl.log").read_text(), (st / "scontrol.log").read_text()

    r, calls, ctl = recheck("IDLE+DRAIN", "Reason=maintenance [admin@2026-12-05T09:00:00]")
    assert "systemctl reboot" not in calls and "requeue" not in ctl and not reboot.exists(), "someone else's drain"
    r, calls, ctl = recheck("MIXED+DRAIN", jobs="42\n43_1\n")
    assert "scontrol requeue 42,43_1" in ctl and "requeueing the jobs on" in r.stdout
    assert calls.splitlines()[-1] == "systemctl reboot" and reboot.exists() and not replace.exists(), r.stderr
    r, calls, ctl = recheck("IDLE+DRAIN", features="p5.48xlarge,spot")
    assert "systemctl reboot" not in calls and "power_down" not in ctl and "left drained" in r.stderr, "a spot node"
    tencent = scripts.health_recheck_script(dataclasses.replace(c, cloud="tencentcloud", shape=catalog.shape(
        "tencentcloud", "HCCPNV6.96XLARGE2304"))).replace(f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'")
    assert "POWER_SAVING='1'" in tencent  # Slurm powers Tencent nodes too: the same replacement
    r, calls, ctl = recheck("IDLE+DRAIN")
    assert "systemctl reboot" not in calls and f"update nodename={c.node_name(1)} state=power_down_force" in ctl
    assert replace.exists() and "powering" in r.stdout
    r, calls, ctl = recheck("IDLE+DRAIN")
    assert "systemctl reboot" not in calls and "power_down" not in ctl and "left drained" in r.stderr
    write_state(st, gpus=8)
    r, calls, ctl = recheck("IDLE+DRAIN")
    assert "passes now" in r.stdout and not reboot.exists() and not replace.exists()  # node-health cleared both


def test_the_recheck_restarts_a_fabric_manager_that_failed_at_boot(node):
    c, env, st, root = node
    r, status = _health(node, fabricmanager="failed")
    assert "nvidia-fabricmanager is failed" in status
    recheck = _run(root / "bin/health-recheck", scripts.health_recheck_script(c).replace(
        f"BIN='{c.paths.bin}'", f"BIN='{root}/bin'"), env)
    assert "systemctl restart nvidia-fabricmanager" in (st / "systemctl.log").read_text()
    assert "restarting it" in recheck.stdout


def test_health_counts_efa_devices_and_mounts(node):
    c = node[0]
    shutil.rmtree(Path(c.paths.infiniband_sysfs) / "rdmap31")
    scripts_mod_wait = scripts.MOUNT_WAIT_S
    try:
        scripts.MOUNT_WAIT_S = 1
        r, status = _health(node, mounts=[c.paths.scratch, c.paths.data])
    finally:
        scripts.MOUNT_WAIT_S = scripts_mod_wait
    assert "expected 32 efa devices" in status and "found 31" in status
    assert f"{c.paths.lustre} is not mounted" in status


def test_health_rejects_the_wrong_gpu_model(node):
    c, env, st, root = node
    a10 = cluster(shape=catalog.shape("aws", "g5.xlarge"), nodes=1, paths=c.paths)
    write_state(st, gpus=1)
    _run(root / "bin/node-identity", scripts.node_identity_script(a10), env)
    (st / "metadata/tags/instance/gpu-cluster:node").write_text("0")
    _run(root / "bin/node-identity", scripts.node_identity_script(a10), env)
    r = _run(root / "bin/node-health", scripts.node_health_script(a10), env)
    assert r.returncode == 1 and "is 'NVIDIA H100 80GB HBM3', expected a A10G" in r.stderr


def test_gate_drains_on_fail_and_resumes_only_its_own_drain(node):
    c, env, st, root = node
    _health(node, gpus=7)
    gate = Path(c.paths.bin) / "health-gate"
    r = subprocess.run([str(gate)], env=env, capture_output=True, text=True)
    log = (st / "scontrol.log").read_text()
    assert r.returncode == 0 and "state=drain reason=gpu-cluster-health: expected 8 GPUs" in log
    _health(node, gpus=8)
    (st / "scontrol.log").write_text("")
    (st / "node").write_text("NodeName=llm-node-1 State=IDLE+DRAIN Reason=spot-interruption: x [root@t]\n")
    subprocess.run([str(gate)], env=env, check=True, capture_output=True)
    assert "state=resume" not in (st / "scontrol.log").read_text()  # not our drain: left alone
    (st / "node").write_text("NodeName=llm-node-1 State=IDLE+DRAIN Reason=gpu-cluster-health: old [root@t]\n")
    subprocess.run([str(gate)], env=env, check=True, capture_output=True)
    assert "scontrol update nodename=llm-node-1 state=resume" in (st / "scontrol.log").read_text()


def test_munge_head_makes_and_stores_the_key_node_waits(node):
    c, env, st, root = node
    key_file = Path(c.paths.munge_key)
    owner = "root"
    node_script = scripts.munge_key_script(c, "node", restart=("true",), wait_s=2, poll_s=1, key_owner=owner)
    r = _run(root / "node-munge", node_script, env)
    assert r.returncode == 1 and "still has no value after 2s" in r.stderr and not key_file.exists()
    assert (st / "sleep.log").read_text() == "sleep 1\nsleep 1\n", "2 s of waiting in 1-s polls"
    assert "put-secret-value" not in (st / "aws.log").read_text()  # a GPU node never makes a key
    r = _run(root / "head-munge", scripts.munge_key_script(c, "head", restart=("true",), key_owner=owner), env)
    assert r.returncode == 0, r.stderr
    stored = (st / "secret").read_text()
    assert len(base64.b64decode(stored)) == 1024 and key_file.read_bytes() == base64.b64decode(stored)
    assert oct(key_file.stat().st_mode & 0o777) == "0o400"
    assert "file://" in (st / "aws.log").read_text() and stored not in (st / "aws.log").read_text()
    key_file.unlink()
    r = _run(root / "node-munge", node_script, env)
    assert r.returncode == 0 and key_file.read_bytes() == base64.b64decode(stored)


def test_munge_never_makes_a_key_on_other_errors(node):
    c, env, st, root = node
    aws = Path(env["PATH"].split(":")[0]) / "aws"
    aws.write_text('#!/bin/bash\necho "$*" >> "$STUB_STATE/aws.log"\n'
                   'echo "An error occurred (AccessDeniedException)" >&2; exit 254\n')
    r = _run(root / "head-munge", scripts.munge_key_script(c, "head", restart=("true",), key_owner="root"), env)
    assert r.returncode == 1 and "AccessDeniedException" in r.stderr
    assert "put-secret-value" not in (st / "aws.log").read_text()


def test_munge_on_tencent_uses_ssm_versions(node):
    c, env, st, root = node
    tc = cluster(shape=catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304"), region="ap-shanghai", paths=c.paths)
    tccli = Path(tc.paths.prefix) / "tccli/bin/tccli"
    tccli.parent.mkdir(parents=True)
    tccli.write_text(r'''#!/bin/bash
echo "tccli $*" >> "$STUB_STATE/tccli.log"
case "$2" in
  GetSecretValue)
    if [ -s "$STUB_STATE/secret" ]; then printf '{"SecretName": "x", "SecretString": "%s"}\n' "$(cat "$STUB_STATE/secret")"; exit 0; fi
    echo "[TencentCloudSDKException] code:ResourceNotFound message:The secret version does not exist" >&2; exit 255 ;;
  PutSecretValue)
    for a in "$@"; do case "$a" in file://*) python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["SecretString"], end="")' "${a#file://}" > "$STUB_STATE/secret" ;; esac; done ;;
esac
''')
    tccli.chmod(0o755)
    script = scripts.munge_key_script(tc, "head", restart=("true",), key_owner="root").replace(
        "/opt/gpu-cluster/tccli/bin/tccli", str(tccli))
    r = _run(root / "tc-munge", script, env)
    assert r.returncode == 0, r.stderr
    log = (st / "tccli.log").read_text()
    assert "ssm GetSecretValue --region ap-shanghai --use-cvm-role --SecretName llm-munge --VersionId munge-key-v1" in log
    assert "ssm PutSecretValue --region ap-shanghai --use-cvm-role --cli-input-json file://" in log
    assert Path(tc.paths.munge_key).read_bytes() == base64.b64decode((st / "secret").read_text())


@pytest.mark.parametrize("busbw, rc, verdict", [("450.10", 0, "PASS: busbw 450.10 GB/s >= 414.03 GB/s"),
                                                ("300.00", 1, "FAIL: busbw 300.00 GB/s < 414.03 GB/s")])
def test_nccl_job_judges_two_nodes_against_the_published_figure(node, busbw, rc, verdict):
    c, env, st, root = node
    write_state(st, busbw=busbw)
    fake = root / "all_reduce_perf"
    fake.write_text("#!/bin/bash\n")
    fake.chmod(0o755)
    job_env = dict(env, ALL_REDUCE_BIN=str(fake), MPIRUN="mpirun", SLURM_JOB_NUM_NODES="2")
    r = _run(root / "nccl.sbatch", jobs_mod.nccl_allreduce_job(c), job_env)
    assert r.returncode == rc and verdict in r.stdout + r.stderr, r.stdout + r.stderr
    mpirun = (st / "mpirun.log").read_text()
    assert "-n 16 -N 8" in mpirun and "-x FI_PROVIDER" in mpirun and "-e 17179869184" in mpirun


def test_nccl_job_explains_a_missing_binary(node):
    c, env, st, root = node
    r = _run(root / "nccl.sbatch", jobs_mod.nccl_allreduce_job(c), dict(env, SLURM_JOB_NUM_NODES="2"))
    assert r.returncode == 2 and "no all_reduce_perf found" in r.stderr


def test_spot_watch_sets_the_node_down_on_notice_only(node):
    c, env, st, root = node
    _run(root / "bin/node-identity", scripts.node_identity_script(c), env)
    watch = scripts.spot_watch_script(c, poll_s=0, max_polls=2)
    r = _run(root / "spot-watch", watch, env)
    assert r.returncode == 0 and not (st / "scontrol.log").exists()
    (st / "metadata/spot").mkdir()
    (st / "metadata/spot/instance-action").write_text('{"action": "terminate"}')
    r = _run(root / "spot-watch", watch, env)
    assert "scontrol update nodename=llm-node-1 state=down reason=spot-interruption: " in (st / "scontrol.log").read_text()
    assert "systemctl stop slurmd.service" in (st / "systemctl.log").read_text()  # cannot re-register


@pytest.mark.parametrize("seeded", [True, False])
def test_the_aws_cli_is_installed_only_once_snapd_has_seeded(tmp_path, seeded):
    """Ubuntu 24.04 has no `aws`: the setup installs the snap, after `snap wait system seed.loaded`
    (snapd refuses installs before it has seeded), and stops if the wait fails."""
    from components.slurm.clouds import AWS
    from components.slurm.shell import command

    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "snap").write_text('#!/bin/bash\necho "snap $*" >> "$LOG"\n'
                                f'[ "$1" != wait ] || exit {0 if seeded else 1}\n')
    (stubs / "snap").chmod(0o755)
    bash = shutil.which("bash")
    (stubs / "bash").symlink_to(bash)  # the PATH holds no `aws`, and only what the setup may call
    script = "set -euo pipefail\n" + "\n".join(command(c) for c in AWS.cli_setup) + "\necho done\n"
    r = subprocess.run([bash, "-c", script], env={"PATH": str(stubs), "LOG": str(tmp_path / "log")},
                       capture_output=True, text=True, timeout=30)
    calls = (tmp_path / "log").read_text().splitlines()
    if seeded:
        assert r.returncode == 0 and r.stdout == "done\n"
        assert calls == ["snap wait system seed.loaded", "snap install aws-cli --classic"]
    else:
        assert r.returncode != 0 and calls == ["snap wait system seed.loaded"]


@pytest.mark.parametrize("stack", ["aws-large", "tencent-large"])
def test_the_head_node_waits_for_data_longer_than_the_disk_unit_does(stack):
    """slurmctld's state is on /data: if head-setup gave up before the data-disk unit did (it waits for
    the attachment, made only once the instance runs), slurmctld would stay down until restarted."""
    c = sample(stack)
    doc = load_yaml(render(head_boot_config(c, lustre=LustreMount(source="fs@tcp:/m", client_script="#!/bin/bash\n")
                                                 if c.lustre else None, data_disk=DISK)))
    files = {f["path"]: f["content"] for f in doc["write_files"]}
    setup = files[f"{c.paths.bin}/head-setup"]
    data = next(v for k, v in files.items() if k.endswith("gpu-cluster-data"))
    unit = next(v for k, v in files.items() if k.endswith("gpu-cluster-data.service"))
    head_wait = int(re.search(r"^MOUNT_WAIT_S='?(\d+)'?$", setup, re.M).group(1))
    disk_wait = int(re.search(r"^WAIT='?(\d+)'?$", data, re.M).group(1))
    unit_timeout = int(re.search(r"^TimeoutStartSec=(\d+)$", unit, re.M).group(1))
    assert head_wait > max(disk_wait, unit_timeout), (head_wait, disk_wait, unit_timeout)


# --- jobs cannot reach the munge key -------------------------------------------------------------------
METADATA_JUMP = f"-d 169.254.169.254/32 -j {scripts.METADATA_GUARD_CHAIN}"


def test_the_guard_lets_only_root_reach_the_metadata_service_and_is_idempotent(node):
    c, env, st, root = node
    guard = scripts.metadata_guard_script(c)
    for _ in range(2):  # every boot runs it again
        r = _run(root / "bin/metadata-guard", guard, env)
        assert r.returncode == 0, r.stderr
    assert (st / "output-rules").read_text() == METADATA_JUMP + "\n", "one jump, however often it runs"
    chain = [line for line in (st / "iptables.log").read_text().splitlines()
             if f"-A {scripts.METADATA_GUARD_CHAIN} " in line]
    assert chain[:2] == [f"iptables -w -A {scripts.METADATA_GUARD_CHAIN} -m owner --uid-owner 0 -j RETURN",
                         f"iptables -w -A {scripts.METADATA_GUARD_CHAIN} -j REJECT"]
    # Root still reads the metadata; a job (nobody) does not, nor the secret through the role.
    ask = ["curl", "-fsS", "-X", "PUT", "http://169.254.169.254/latest/api/token"]
    as_root = subprocess.run(ask, env=env, capture_output=True, text=True)
    as_job = subprocess.run(["setpriv", f"--reuid={scripts.NOBODY_UID}", "--", *ask], env=env,
                            capture_output=True, text=True)
    assert as_root.returncode == 0 and as_job.returncode == 7, (as_root.stderr, as_job.stderr)


def test_health_fails_while_the_metadata_service_answers_a_job(node):
    r, status = _health(node, guard=False)
    assert r.returncode == 1 and "the metadata service answers a non-root user" in status, status
    r, status = _health(node)
    assert r.returncode == 0 and status == "PASS\n", status + r.stderr
    assert "ok: metadata service closed to non-root users" in r.stdout


@pytest.fixture
def job_node(node):
    c, env, st, root = node
    c = cluster(nodes=2, purchase="spot", scratch=True, lustre=True, data_disk=True, paths=c.paths,
                job_credentials=True, job_role="arn:aws:iam::123456789012:role/llm-compute-job-role-1")
    return c, env, st, root


def test_jobs_get_their_own_roles_credentials_through_the_aws_config(job_node):
    c, env, st, root = job_node
    r = _run(root / "bin/job-credentials", scripts.job_credentials_script(c), env)
    assert r.returncode == 0, r.stderr
    assert "sts assume-role --region us-east-1 --role-arn arn:aws:iam::123456789012:role/llm-compute-job-role-1 " \
           "--role-session-name llm-jobs --duration-seconds 3600" in (st / "aws.log").read_text()
    creds = Path(c.paths.job_credentials_file)
    answer = json.loads(creds.read_text())
    assert answer["Version"] == 1 and answer["AccessKeyId"] == "ASIASTUBJOBS" and answer["Expiration"]
    assert oct(creds.stat().st_mode & 0o777) == "0o644"  # every job on the node reads them
    config = Path(c.paths.job_aws_config).read_text()
    assert config == f"[default]\nregion = us-east-1\ncredential_process = /bin/cat {creds}\n"
    # The health check sees them, with time left; a node whose renewal stopped is drained.
    r, status = _health((c, env, st, root))
    assert r.returncode == 0 and status == "PASS\n", status + r.stderr
    answer["Expiration"] = "2026-01-01T00:00:00+00:00"
    creds.write_text(json.dumps(answer))
    r, status = _health((c, env, st, root))
    assert r.returncode == 1 and "jobs' credentials in" in status, status


def test_the_task_prolog_points_tasks_at_the_jobs_config_unless_they_name_their_own(job_node):
    c, env, st, root = job_node
    path = root / "bin/task-prolog"
    r = _run(path, scripts.task_prolog_script(c), {k: v for k, v in env.items() if k != "AWS_CONFIG_FILE"})
    assert r.returncode == 0 and r.stdout == f"export AWS_CONFIG_FILE={c.paths.job_aws_config}\n", r.stderr
    r = subprocess.run([str(path)], env=dict(env, AWS_CONFIG_FILE="/home/me/.aws/config"), capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout == ""
    assert f"TaskProlog={c.paths.bin}/task-prolog\n" in slurm_conf(c)
    assert "TaskProlog" not in slurm_conf(cluster())


def test_a_node_without_its_job_role_is_refused():
    with pytest.raises(ValueError, match="job credentials need a job role"):
        node_boot_parts(cluster(job_credentials=True))


@pytest.mark.parametrize("cloud_shape", [P5, catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304")])
def test_slurm_waits_for_the_guard_on_every_node_and_the_head(cloud_shape):
    c = cluster(shape=cloud_shape, region="ap-shanghai" if cloud_shape.cloud == "tencentcloud" else "us-east-1")
    idx = None if cloud_shape.cloud == "aws" else 0
    parts = node_boot_parts(c, idx)
    head = head_boot_config(c, data_disk=DISK)
    for files, daemon in ((parts.files, "slurmd"), (head.files, "slurmctld")):
        by_path = {f["path"]: f["content"] for f in files}
        dropin = by_path[f"/etc/systemd/system/{daemon}.service.d/gpu-cluster.conf"]
        assert "gpu-cluster-metadata-guard.service" in dropin.split("Requires=")[1].splitlines()[0]
        unit = by_path["/etc/systemd/system/gpu-cluster-metadata-guard.service"]
        assert "Before=network-pre.target" in unit and "WantedBy=multi-user.target" in unit
        guard = by_path["/opt/gpu-cluster/bin/metadata-guard"]
        ip = "169.254.169.254" if cloud_shape.cloud == "aws" else "169.254.0.23"
        assert f"METADATA_IP='{ip}'" in guard
    for commands in (parts.commands, head.commands):
        started = [cmd[-1] for cmd in commands if cmd[:3] == ("systemctl", "enable", "--now")]
        assert started[0] == "gpu-cluster-metadata-guard.service", "the guard first, before anything of Slurm's"
    assert "iptables" in parts.packages and "iptables" in head.packages


# ---- Slurm power saving on the head node (the real Slurm runs them in make slurm-check) --------------------

def _power_env(tmp_path, instances: str, start_fails: int = 0):
    """Stub aws (tests/slurm_local/stubs.py) with the cluster's instances, and an scontrol that expands a hostlist
    and logs updates. `start_fails`: how many start-instances calls fail first (a node still stopping)."""
    bin_dir, state = tmp_path / "stub-bin", tmp_path / "stub-state"
    write_stubs(bin_dir)
    write_state(state, instances=instances, fails=start_fails)
    (bin_dir / "scontrol").write_text(
        '#!/bin/bash\necho "scontrol $*" >> "$STUB_STATE/scontrol.log"\n'
        'if [ "$1 $2" = "show hostnames" ]; then python3 -c "import sys; p, r = sys.argv[1].split(\'[\'); '
        'a, b = r.rstrip(\']\').split(\'-\'); [print(f\'{p}{i}\') for i in range(int(a), int(b) + 1)]" "$3"; fi\n'
        'if [ "$1 $2" = "show nodes" ]; then cat "$STUB_STATE/nodes" 2> /dev/null; fi\n')
    real_aws = (bin_dir / "aws").read_text().replace(
        '  "ec2 describe-instances")\n',
        '  "ec2 describe-instances")\n    [ -e "$STUB_STATE/describe-fails" ] && { echo "An error occurred (RequestLimitExceeded)" >&2; exit 254; }\n')
    (bin_dir / "aws").write_text(real_aws.replace(
        '  "ec2 start-instances"|"ec2 stop-instances")',
        '  "ec2 start-instances"|"ec2 stop-instances")\n'
        '    left=$(cat "$STUB_STATE/fails"); if [ "$2" = start-instances ] && [ "$left" -gt 0 ]; then\n'
        '      echo $((left - 1)) > "$STUB_STATE/fails"; echo "An error occurred (IncorrectInstanceState)" >&2; exit 254; fi\n'
        '    if [ "$2" = stop-instances ] && [ -e "$STUB_STATE/stop-fails" ]; then\n'
        '      echo "An error occurred (UnauthorizedOperation)" >&2; exit 254; fi'))
    for name in ("scontrol", "aws"):
        (bin_dir / name).chmod(0o755)
    return stub_env(bin_dir, state, virtual_clock=True), state


def test_the_power_programs_queue_requests_that_the_root_agent_carries_out(tmp_path):
    """slurmctld's resume/suspend programs (SlurmUser) only queue the hostlist; power-agent (root) starts the named
    nodes' instances, sets DOWN what it cannot start (a terminated node; a start refused every try), stops what
    suspend names, and ignores a request that is not a hostlist."""
    c = cluster(nodes=3, paths=Paths().rooted(str(tmp_path / "node")))
    env, st = _power_env(tmp_path, "0\ti-000\n2\ti-222\nNone\ti-head\n", start_fails=2)
    spool = Path(c.paths.power_spool)
    spool.mkdir(parents=True)
    r = _run(tmp_path / "slurm-resume", power.request_script(c, "resume"), env, "llm-node-[0-2]")
    [request] = list(spool.iterdir())
    assert r.returncode == 0 and request.name.endswith(".resume") and request.read_text() == "llm-node-[0-2]"
    agent = tmp_path / "power-agent"
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    assert r.returncode == 0 and not list(spool.iterdir()), r.stderr
    # Node 1 has no instance (terminated): DOWN with the reason, its jobs go elsewhere; the others start, once
    # the instances that were still stopping can (two refusals, then the third try).
    assert (st / "ec2.log").read_text() == "start i-000\nstart i-222\n"  # one at a time: one failure is one node's
    assert "scontrol update nodename=llm-node-1 state=down reason=gpu-cluster-power: no instance" in (st / "scontrol.log").read_text()
    assert (st / "sleep.log").read_text().split() == ["sleep", "30", "sleep", "30"]
    assert "--filters Name=tag:gpu-cluster:name,Values=llm Name=tag-key,Values=gpu-cluster:node" in (st / "aws.log").read_text()
    # A start refused every try (no capacity): powered down again, for Slurm to try it for a later job.
    write_state(st, fails=99)
    _run(tmp_path / "slurm-resume", power.request_script(c, "resume"), env, "llm-node-[0-0]")
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    assert "scontrol update nodename=llm-node-0 state=power_down_force" in (st / "scontrol.log").read_text()
    assert "could not start i-000" in r.stderr and not list(spool.iterdir())
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[2-2]")
    (spool / "0-1.resume").write_text("llm-node-0; reboot")
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    assert (st / "ec2.log").read_text().splitlines()[-1] == "stop i-222" and "ignored a malformed request" in r.stderr
    # A stop that fails is kept and tried again at the next poll (a node Slurm counts as stopped must not bill).
    write_state(st, **{"stop-fails": 1})
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[0-0]")
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    [kept] = list(spool.iterdir())
    assert kept.name.endswith(".suspend.work") and "could not stop llm-node-0" in r.stderr
    (st / "stop-fails").unlink()
    _run(agent, power.agent_script(c, max_polls=1), env)
    assert not list(spool.iterdir()) and (st / "ec2.log").read_text().splitlines()[-1] == "stop i-000"
    # The instance list failing (throttled): a resume's nodes are powered down to be tried again, not left to
    # turn DOWN at ResumeTimeout; a suspend is kept for the next poll.
    write_state(st, **{"describe-fails": 1})
    _run(tmp_path / "slurm-resume", power.request_script(c, "resume"), env, "llm-node-[0-1]")
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    log = (st / "scontrol.log").read_text()
    assert all(f"scontrol update nodename=llm-node-{i} state=power_down_force" in log.split("show hostnames")[-1]
               for i in (0, 1)) and "cannot list the instances" in r.stderr and not list(spool.iterdir())
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[2-2]")
    _run(agent, power.agent_script(c, max_polls=1), env)
    [kept] = list(spool.iterdir())
    assert kept.name.endswith(".suspend.work")
    (st / "describe-fails").unlink()
    _run(agent, power.agent_script(c, max_polls=1), env)
    assert not list(spool.iterdir())


def test_the_agent_starts_and_stops_tencent_nodes_with_tccli(tmp_path):
    """On Tencent Cloud power-agent finds the nodes with DescribeInstances (the cluster's name tag and the node tag:
    at most 5 values a filter, so the states that cannot start are dropped from the answer by --filter), starts them
    with StartInstances and stops them with StopInstances in the mode that stops the charging (KEEP_CHARGING for
    prepaid nodes), never asks to start a running node or stop a stopped one (Tencent refuses both), and reconciles
    a RUNNING node Slurm counts as down once it has been up before."""
    from components.slurm.clouds import TC_GONE_STATES, TCCLI

    c = cluster(nodes=4, cloud="tencentcloud", region="ap-shanghai", shape=catalog.shape("tencentcloud", "GT4.20XLARGE474"),
                paths=Paths().rooted(str(tmp_path / "node")))
    env, st = _power_env(tmp_path, "")
    tccli = tmp_path / "stub-bin/tccli"
    tccli.write_text('#!/bin/bash\nprintf "%s\\n" "$*" >> "$STUB_STATE/tccli.log"\n'
                     'case "$1 $2" in\n  "cvm DescribeInstances") cat "$STUB_STATE/tencent-instances" ;;\n'
                     '  "cvm StartInstances"|"cvm StopInstances") a=("$@"); for i in "${!a[@]}"; do\n'
                     '    if [ "${a[$i]}" = --InstanceIds ]; then echo "$2 ${a[$((i + 1))]}" >> "$STUB_STATE/cvm.log"; fi; done ;;\n'
                     '  *) exit 2 ;;\nesac\n')
    tccli.chmod(0o755)
    write_state(st, **{"tencent-instances": "0\tins-000\tSTOPPED\n1\tins-111\tRUNNING\n2\tins-222\tSTOPPED\n"
                                            "3\tins-333\tRUNNING\n"})
    spool = Path(c.paths.power_spool)
    spool.mkdir(parents=True)

    def agent(cluster_: SlurmCluster) -> str:
        return power.agent_script(cluster_, max_polls=1, reconcile_polls=1, reconcile_grace_s=0).replace(TCCLI, str(tccli))

    assert TCCLI in power.agent_script(c)
    # node 1 has been up in Slurm (then powered down, its instance still running); node 3 never was
    write_state(st, nodes=["NodeName=llm-node-1 Arch=x86_64 State=IDLE ThreadsPerCore=1"])
    _run(tmp_path / "power-agent", agent(c), env)
    write_state(st, nodes=["NodeName=llm-node-1 Arch=x86_64 State=IDLE+POWERED_DOWN ThreadsPerCore=1",
                           "NodeName=llm-node-3 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1"])
    _run(tmp_path / "slurm-resume", power.request_script(c, "resume"), env, "llm-node-[0-1]")
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[2-3]")
    _run(tmp_path / "power-agent", agent(c), env)  # (node 1 seen powered down and RUNNING: stopped at the next look)
    r = _run(tmp_path / "power-agent", agent(c), env)
    assert r.returncode == 0 and not list(spool.iterdir()), r.stderr
    calls = (st / "tccli.log").read_text().splitlines()
    describe = [line for line in calls if line.startswith("cvm DescribeInstances")]
    assert describe and all("--region ap-shanghai --use-cvm-role" in line for line in calls)
    filters = json.loads(describe[0].split("--Filters ", 1)[1].split(" --Limit", 1)[0])
    assert filters == [{"Name": "tag:gpu-cluster:name", "Values": ["llm"]}, {"Name": "tag-key", "Values": ["gpu-cluster:node"]}]
    assert len(filters) <= 10 and all(len(f["Values"]) <= 5 for f in filters)  # DescribeInstances' limits
    assert all(f"InstanceState!='{s}'" in describe[0] for s in TC_GONE_STATES)
    stops = [line for line in calls if line.startswith("cvm StopInstances")]
    assert stops and all("--StopType SOFT_FIRST --StoppedMode STOP_CHARGING" in line for line in stops)
    # node 0 started; node 1 already running (no call) and node 2 already stopped (no call); node 3 stopped by the
    # suspend; then node 1 (Slurm: powered down, the cloud: RUNNING, up before) reconciled; node 3 never joined
    assert (st / "cvm.log").read_text().splitlines() == [
        'StartInstances ["ins-000"]', 'StopInstances ["ins-333"]', 'StopInstances ["ins-111"]']
    prepaid = dataclasses.replace(c, prepaid=True)
    assert "STOPPED_MODE='KEEP_CHARGING'" in power.agent_script(prepaid)
    assert "STOPPED_MODE" not in power.agent_script(cluster())  # AWS: no such argument


def test_the_agent_stops_the_running_instance_of_a_node_slurm_counts_as_powered_down(tmp_path):
    """A node POWERED_DOWN in Slurm whose instance runs bills while no job can use it (a stop lost with its
    request, an instance started by hand): every RECONCILE_POLLS the agent stops it, once seen so for ResumeTimeout
    and only if it has been up in Slurm before. A node powering up (a resume under way), an idle node, a stopped
    instance and a node that never registered are left alone."""
    c = cluster(nodes=5, paths=Paths().rooted(str(tmp_path / "node")))
    env, st = _power_env(tmp_path, "0\ti-000\trunning\n1\ti-111\trunning\n2\ti-222\tstopped\n3\ti-333\trunning\n"
                                   "4\ti-444\trunning\n")
    Path(c.paths.power_spool).mkdir(parents=True)
    agent = tmp_path / "power-agent"
    # Nodes 0 to 3 have been up in Slurm; node 4 never registered (a new node in its first boot, or one made without
    # Slurm): it is never stopped by this.
    write_state(st, nodes=[f"NodeName=llm-node-{i} Arch=x86_64 State=IDLE ThreadsPerCore=1" for i in range(4)])
    _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1), env)
    write_state(st, nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE+POWERED_DOWN ThreadsPerCore=1",
                           "NodeName=llm-node-4 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1",
                           "NodeName=llm-node-1 Arch=x86_64 State=IDLE+POWERED_DOWN+POWERING_UP ThreadsPerCore=1",
                           "NodeName=llm-node-2 Arch=x86_64 State=IDLE+POWERED_DOWN ThreadsPerCore=1",
                           "NodeName=llm-node-3 Arch=x86_64 State=IDLE ThreadsPerCore=1"])
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    assert r.returncode == 0 and not (st / "ec2.log").exists(), "not before RECONCILE_POLLS polls"
    # Seen once: not yet (a new node is powered down in Slurm until its first boot ends and slurmd registers) ...
    r = _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1), env)
    seen = Path(f"{c.paths.power_spool}-seen")
    assert r.returncode == 0 and not (st / "ec2.log").exists() and sorted(p.name for p in seen.iterdir()) == [
        "llm-node-0"], r.stderr
    # ... nor while the grace (ResumeTimeout) runs ...
    r = _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1), env)
    assert not (st / "ec2.log").exists() and power.RECONCILE_GRACE_S == 1800
    # ... and a node that registers in the meantime starts over.
    write_state(st, nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE ThreadsPerCore=1"])
    _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, reconcile_grace_s=0), env)
    assert not (st / "ec2.log").exists() and not list(seen.iterdir())
    write_state(st, nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE+POWERED_DOWN ThreadsPerCore=1",
                           "NodeName=llm-node-4 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1"])
    _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, reconcile_grace_s=0), env)
    r = _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, reconcile_grace_s=0), env)
    assert r.returncode == 0 and (st / "ec2.log").read_text() == "stop i-000\n", r.stderr
    assert "reconciled llm-node-0: Slurm counts it powered down but i-000 was running" in r.stderr
    assert not list(seen.iterdir())


def test_the_window_timer_closes_the_partition_and_powers_nodes_down_outside_and_opens_it_inside(tmp_path):
    import datetime
    import zoneinfo

    env, st = _power_env(tmp_path, "")
    today = datetime.datetime.now(zoneinfo.ZoneInfo("Asia/Shanghai")).weekday()
    days = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
    (tmp_path / "stub-bin/scontrol").write_text(
        '#!/bin/bash\necho "scontrol $*" >> "$STUB_STATE/scontrol.log"\n'
        'case "$1 $2" in "show partition") echo "PartitionName=llm AllowGroups=ALL State=$(cat "$STUB_STATE/part")";;\n'
        '"show nodes") cat "$STUB_STATE/nodes";; esac\n')
    write_state(st, part="UP", nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE+CLOUD Gres=gpu:h100:8",
                                      "NodeName=llm-node-1 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN Gres=gpu:h100:8",
                                      "NodeName=other-node-1 Arch=x86_64 State=IDLE Gres=gpu:h100:8"])
    outside = cluster(windows=(f"{days[(today + 3) % 7]} 00:00-24:00",), timezone="Asia/Shanghai")
    r = _run(tmp_path / "slurm-window", power.window_script(outside), env)
    log = (st / "scontrol.log").read_text()
    assert r.returncode == 0 and "scontrol update partitionname=llm state=down" in log, r.stderr
    assert "scontrol update nodename=llm-node-0 state=power_down_force" in log  # only the node still up, only ours
    write_state(st, part="DOWN", **{"scontrol.log": ""})
    inside = cluster(windows=(f"{days[today]} 00:00-24:00",), timezone="Asia/Shanghai")
    r = _run(tmp_path / "slurm-window", power.window_script(inside), env)
    assert (st / "scontrol.log").read_text().splitlines()[-1] == "scontrol update partitionname=llm state=up"
    write_state(st, part="UP", **{"scontrol.log": ""})
    _run(tmp_path / "slurm-window", power.window_script(inside), env)
    assert "update" not in (st / "scontrol.log").read_text()  # nothing to change: nothing done


def test_a_stop_asked_for_during_a_first_boot_waits_until_the_boot_has_had_its_time(tmp_path):
    """A job given to a node still in its first boot waits ResumeTimeout, then Slurm asks to stop it: stopped then, the
    boot (driver, packages, health check; cloud-init runs it once) would end half done. A node never up in Slurm that
    started less than FIRST_BOOT_S ago keeps running; reconcile stops it once that time has passed, if it never
    came up. A node that has been up is stopped at once."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    c = cluster(nodes=2, paths=Paths().rooted(str(tmp_path / "node")))
    env, st = _power_env(tmp_path, f"0\ti-000\trunning\t{now}\n1\ti-111\trunning\t{now}\n")
    Path(c.paths.power_spool).mkdir(parents=True)
    agent = tmp_path / "power-agent"
    write_state(st, nodes=["NodeName=llm-node-1 Arch=x86_64 State=IDLE ThreadsPerCore=1"])  # node 1 has been up
    _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1), env)
    write_state(st, nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1",
                           "NodeName=llm-node-1 Arch=x86_64 State=IDLE+POWERED_DOWN ThreadsPerCore=1"])
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[0-1]")
    r = _run(agent, power.agent_script(c, max_polls=1), env)
    assert r.returncode == 0 and (st / "ec2.log").read_text() == "stop i-111\n", r.stderr
    assert "llm-node-0: i-000 has never been up in Slurm" in r.stderr and not list(Path(c.paths.power_spool).iterdir())
    deferred = Path(f"{c.paths.power_spool}-deferred")
    assert [p.name for p in deferred.iterdir()] == ["llm-node-0"]
    r = _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1), env)  # still within FIRST_BOOT_S
    assert (st / "ec2.log").read_text() == "stop i-111\n" and power.FIRST_BOOT_S == 7200
    r = _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, first_boot_s=0), env)
    assert (st / "ec2.log").read_text().splitlines()[-1] == "stop i-000", r.stderr
    assert "it did not come up in Slurm within its first boot" in r.stderr and not list(deferred.iterdir())


def test_a_spot_node_is_never_asked_to_stop(tmp_path):
    """A one-time spot instance cannot be stopped: a stop Slurm asks for (a failed resume) is dropped with a word
    in the log, not sent and queued again forever; the on-demand node beside it is stopped."""
    c = cluster(nodes=2, purchase="mixed", paths=Paths().rooted(str(tmp_path / "node")))
    assert c.spot_indices == (1,)
    env, st = _power_env(tmp_path, "0\ti-000\trunning\n1\ti-111\trunning\n")
    Path(c.paths.power_spool).mkdir(parents=True)
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[0-1]")
    r = _run(tmp_path / "power-agent", power.agent_script(c, max_polls=1), env)
    assert (st / "ec2.log").read_text() == "stop i-000\n" and "llm-node-1: a spot node cannot be stopped" in r.stderr
    assert not list(Path(c.paths.power_spool).iterdir())
    # nor by reconcile, once it has been up and Slurm counts it powered down while it runs
    agent = tmp_path / "power-agent"
    write_state(st, nodes=["NodeName=llm-node-1 Arch=x86_64 State=IDLE ThreadsPerCore=1"])
    _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, reconcile_grace_s=0), env)
    write_state(st, nodes=["NodeName=llm-node-1 Arch=x86_64 State=DOWN+POWERED_DOWN ThreadsPerCore=1"])
    for _ in range(2):
        _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, reconcile_grace_s=0), env)
    assert (st / "ec2.log").read_text() == "stop i-000\n"


def test_a_resume_cancels_a_deferred_stop_and_a_deferral_waits_out_a_reboot(tmp_path):
    """A stop deferred during a first boot is cancelled by a resume of the node (a window opened, a job came) and
    kept while the instance is pending or rebooting; an empty start time is no start time (not today's midnight)."""
    import datetime

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    c = cluster(nodes=1, paths=Paths().rooted(str(tmp_path / "node")))
    env, st = _power_env(tmp_path, f"0\ti-000\trunning\t{now}\n")
    Path(c.paths.power_spool).mkdir(parents=True)
    agent, deferred = tmp_path / "power-agent", Path(f"{c.paths.power_spool}-deferred")
    write_state(st, nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1"])
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[0-0]")
    _run(agent, power.agent_script(c, max_polls=1), env)
    assert [p.name for p in deferred.iterdir()] == ["llm-node-0"]
    write_state(st, instances=f"0\ti-000\tpending\t{now}\n")  # rebooting: kept
    _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, first_boot_s=0), env)
    assert [p.name for p in deferred.iterdir()] == ["llm-node-0"] and not (st / "ec2.log").exists()
    write_state(st, instances=f"0\ti-000\trunning\t{now}\n",
                nodes=["NodeName=llm-node-0 Arch=x86_64 State=ALLOCATED+CLOUD+POWERING_UP ThreadsPerCore=1"])
    _run(tmp_path / "slurm-resume", power.request_script(c, "resume"), env, "llm-node-[0-0]")
    r = _run(agent, power.agent_script(c, max_polls=1, reconcile_polls=1, first_boot_s=0), env)
    assert not list(deferred.iterdir()) and not (st / "ec2.log").exists(), r.stderr
    # no start time at all: the stop is made (never deferred)
    write_state(st, instances="0\ti-000\trunning\n",
                nodes=["NodeName=llm-node-0 Arch=x86_64 State=IDLE+CLOUD+POWERED_DOWN ThreadsPerCore=1"])
    _run(tmp_path / "slurm-suspend", power.request_script(c, "suspend"), env, "llm-node-[0-0]")
    _run(agent, power.agent_script(c, max_polls=1), env)
    assert (st / "ec2.log").read_text() == "stop i-000\n" and not list(deferred.iterdir())


def test_where_two_instances_carry_a_node_index_the_newest_is_the_node(tmp_path):
    """During a replacement made before the old instance is gone, two instances carry one gpu-cluster:node index:
    the agent acts on the newest, not on whichever the cloud lists first."""
    c = cluster(nodes=1, paths=Paths().rooted(str(tmp_path / "node")))
    env, st = _power_env(tmp_path, "0\ti-old\tstopped\t2026-11-01T10:00:00+00:00\n"
                                   "0\ti-new\tstopped\t2026-12-01T10:00:00+00:00\n")
    Path(c.paths.power_spool).mkdir(parents=True)
    _run(tmp_path / "slurm-resume", power.request_script(c, "resume"), env, "llm-node-[0-0]")
    r = _run(tmp_path / "power-agent", power.agent_script(c, max_polls=1), env)
    assert (st / "ec2.log").read_text() == "start i-new\n", r.stderr
