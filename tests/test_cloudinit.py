"""The nodes' boot configuration: cloud-init built from data (pure), what each cloud adds, and that every
rendered script is valid bash that shellcheck accepts."""

from __future__ import annotations

import re

import pytest
import yaml

from components import catalog
from components.aws.boot import CLOUDWATCH_AGENT_CTL, DATA_VOLUME_TAG, EBS_MODEL, NVME_MODEL, boot_config
from components.cloudinit import (APT_LOCK_DROPIN, DATA_SCRIPT, MD_DEVICE, SCRATCH_SCRIPT, SCRATCH_UNIT, BootConfig,
                                  DataDisk, decode, render, scripts)
from components.tencentcloud import boot as tencent_boot
from gpu_cluster.render import SAMPLE_STACKS
from conftest import boot_documents, load_yaml
from tests.shellcheck import code_of, lint, representatives

P5 = catalog.shape("aws", "p5.48xlarge")
G4 = catalog.shape("aws", "g4dn.xlarge")
HCC = catalog.shape("tencentcloud", "HCCPNV6.96XLARGE2304")
GT4 = catalog.shape("tencentcloud", "GT4.20XLARGE474")
PARAM = "AmazonCloudWatch-llm-large"
FSX_SOURCE = "fs-0abc.fsx.us-east-1.amazonaws.com@tcp:/abcd1234"


def _doc(text: str) -> dict:
    assert text.startswith("#cloud-config\n")
    doc = load_yaml(text)
    assert isinstance(doc, dict)
    return doc


def _file(doc: dict, path: str) -> str:
    return next(f["content"] for f in doc["write_files"] if f["path"] == path)


def test_raid0_over_exactly_the_shapes_nvme_drives_after_the_images_own_setup():
    for shape in (P5, G4):
        doc = _doc(render(boot_config(shape, "nvme", PARAM, None, data_disk=False)))
        script = _file(doc, SCRATCH_SCRIPT)
        assert f"EXPECTED={shape.nvme_count}\n" in script
        assert f"MODEL='{NVME_MODEL}'" in script
        assert "--level=0" in script and MD_DEVICE in script and "/scratch" in script
        # Idempotent on reboot: an existing array is assembled, never re-created over.
        assert script.index("mdadm --assemble") < script.index("mdadm --create")
        assert {"mdadm", "xfsprogs"} <= set(doc["packages"])
        # The DLAMI stripes the drives itself (dlami-nvme.service): the unit runs after it, and the
        # script waits for it and uses its volume when there is one.
        unit = _file(doc, SCRATCH_UNIT)
        assert "After=local-fs.target dlami-nvme.service" in unit
        assert "IMAGE_SERVICE=dlami-nvme.service" in script and "IMAGE_MOUNT=/opt/dlami/nvme" in script
        assert script.index('mountpoint -q "$IMAGE_MOUNT"') < script.index("collect \"$EXPECTED\" drive")


def test_own_image_does_not_wait_for_the_dlami_service():
    script = _file(_doc(render(boot_config(P5, "nvme", PARAM, None, data_disk=False, image_scratch=False))),
                   SCRATCH_SCRIPT)
    assert "IMAGE_SERVICE=''" in script


def test_lustre_client_is_installed_for_the_running_kernel_before_the_mount():
    doc = _doc(render(boot_config(P5, "nvme", PARAM, FSX_SOURCE, data_disk=False)))
    (lustre,) = [m for m in doc["mounts"] if m[1] == "/lustre"]
    assert lustre[0] == FSX_SOURCE and lustre[2] == "lustre"
    client = _file(doc, "/usr/local/sbin/gpu-cluster-lustre-client")
    assert 'lustre-client-modules-$kernel' in client and "fsx-lustre-client-repo.s3.amazonaws.com/ubuntu" in client
    # No client for this kernel: a loud failure, not an unmounted /lustre nobody notices.
    assert 'apt-cache show "lustre-client-modules-$kernel"' in client and "fail" in client
    runcmd = doc["runcmd"]
    assert runcmd.index(["/usr/local/sbin/gpu-cluster-lustre-client"]) < runcmd.index(["mount", "/lustre"])


def test_the_cloudwatch_agent_is_installed_verified_and_started():
    doc = _doc(render(boot_config(P5, "nvme", PARAM, None, data_disk=False)))
    agent = _file(doc, "/usr/local/sbin/gpu-cluster-cloudwatch-agent")
    assert "amazon-cloudwatch-agent.deb" in agent and "gpg --batch --verify" in agent
    assert "937616F3450B7D806CBD9725D58167303B789C72" in agent  # Amazon's published key fingerprint
    assert f'CTL={CLOUDWATCH_AGENT_CTL}' in agent and '-a fetch-config -m ec2 -s -c "ssm:$PARAMETER"' in agent
    assert f"PARAMETER={PARAM}" in agent
    assert doc["runcmd"][-1] == ["/usr/local/sbin/gpu-cluster-cloudwatch-agent"]


def test_no_scratch_no_lustre_no_data_disk():
    doc = _doc(render(boot_config(G4, "none", PARAM, None, data_disk=False)))
    assert "mounts" not in doc and "packages" not in doc
    assert [f["path"] for f in doc["write_files"]] == ["/usr/local/sbin/gpu-cluster-cloudwatch-agent", APT_LOCK_DROPIN]


def test_aws_data_volume_is_found_by_the_volume_id_in_the_instance_tags():
    doc = _doc(render(boot_config(P5, "nvme", PARAM, None, data_disk=True)))
    script = _file(doc, DATA_SCRIPT)
    assert f"meta-data/tags/instance/{DATA_VOLUME_TAG}" in script and '${volume//-/}' in script
    assert "WANT=" not in script and "getsize64" not in script  # never by size
    assert ["systemctl", "enable", "--now", "--no-block", "gpu-cluster-data.service"] in doc["runcmd"]


def test_tencent_nodes_name_their_own_data_disk_and_install_turbo_and_the_driver():
    text = render(tencent_boot.boot_config(shape=HCC, scratch="none", lustre_source="10.51.0.12@tcp0:/1234abcd/cfs",
                                           install_driver=True, data_disk_id="disk-1a2b3c4d"))
    doc = _doc(text)
    assert "echo disk-1a2b3c4d" in _file(doc, DATA_SCRIPT)
    turbo = _file(doc, "/usr/local/sbin/gpu-cluster-lustre-client")
    assert "cfs_turbo_client_setup" in turbo
    steps = [c[0].rsplit("/", 1)[-1] for c in doc["runcmd"] if c[0].startswith("/usr/local/sbin/")]
    # The driver before the fabric manager that must match it (NVSwitch shape), then the HCC RDMA check.
    assert steps[-3:] == ["gpu-cluster-gpu-driver", "gpu-cluster-fabric-manager", "gpu-cluster-rdma"]
    no_nvswitch = _doc(render(tencent_boot.boot_config(shape=GT4, scratch="disk", lustre_source=None,
                                                       install_driver=True)))
    assert "/usr/local/sbin/gpu-cluster-fabric-manager" not in [f["path"] for f in no_nvswitch["write_files"]]


@pytest.mark.parametrize("driver, package", [("535.161.07", "nvidia-fabric-manager-535.161.07-1"),
                                             ("580.65.06", "nvidia-fabricmanager-580.65.06-1"),
                                             ("590.44.01", "nvidia-fabricmanager-590.44.01-1.el8")])
def test_fabric_manager_comes_from_the_drivers_module_stream(tmp_path, driver, package):
    """On TencentOS (dnf) the pinned Fabric Manager build is visible only once its nvidia-driver stream is
    enabled (modular filtering): the script enables the driver's branch, then installs that exact build."""
    import shutil
    import subprocess

    bin_dir, log = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    stubs = {
        "nvidia-smi": f'echo {driver}',
        # No unit before the install; `enable --now` afterwards succeeds.
        "systemctl": 'echo "systemctl $*" >> "$LOG"; [ "$1" != cat ]',
        "dnf": 'echo "dnf $*" >> "$LOG"; [ "$*" != "$DNF_FAILS" ]',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    for tool in ("bash", "head", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    script = tmp_path / "fm"
    script.write_text(tencent_boot._FABRIC_MANAGER_SH)

    def run(dnf_fails: str = ""):
        log.write_text("")
        r = subprocess.run([str(bin_dir / "bash"), str(script)], capture_output=True, text=True, timeout=30,
                           env={"PATH": str(bin_dir), "LOG": str(log), "DNF_FAILS": dnf_fails})
        return r, [c for c in log.read_text().splitlines() if c.startswith("dnf")]

    r, calls = run()
    branch = driver.split(".")[0]
    assert r.returncode == 0, r.stderr
    assert calls[1:] == [f"dnf module enable -y nvidia-driver:{branch}-dkms", f"dnf install -y {package}"]
    assert "systemctl enable --now nvidia-fabricmanager.service" in log.read_text()
    # A stream NVIDIA does not publish stops the step, with its name, before any install.
    r, calls = run(f"module enable -y nvidia-driver:{branch}-dkms")
    assert r.returncode == 1 and f"nvidia-driver:{branch}-dkms" in r.stderr
    assert not [c for c in calls if " install " in c]


@pytest.mark.parametrize("stack", [s for s in SAMPLE_STACKS if s.startswith("aws-")])
def test_every_aws_boot_waits_for_the_dpkg_lock_and_nothing_bypasses_apt(stack):
    """A first boot's apt-daily or unattended-upgrades holds the dpkg lock: apt-get in a boot script would
    fail at once (apt's own wait is for the `apt` command only), so every AWS boot (nodes and head node) waits
    through an unscoped apt.conf.d drop-in, and no script calls dpkg -i, which never waits."""
    from conftest import slurm_rendered
    from gpu_cluster.plan import Plan

    plan = Plan.from_doc(slurm_rendered(stack).plan())
    docs = [_doc(d) for _, d in boot_documents(plan)]
    assert len(docs) == 2, "the nodes' template and the head node"
    for doc in docs:
        assert _file(doc, APT_LOCK_DROPIN) == 'DPkg::Lock::Timeout "600";\n'
        scripts = [f["content"] for f in doc["write_files"] if f["content"].startswith("#!/bin/bash")]
        assert scripts and not any(re.search(r"^\s*dpkg -i", c, re.M) for c in scripts)
    # TencentOS has no apt: no drop-in there.
    tencent = _doc(render(tencent_boot.boot_config(shape=GT4, scratch="none", lustre_source=None, install_driver=True)))
    assert APT_LOCK_DROPIN not in [f["path"] for f in tencent["write_files"]]


def test_launch_template_user_data_is_that_document(sample_plan):
    plan = sample_plan("aws-large")
    template = plan.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    doc = _doc(decode(template["userData"]))
    fs = plan.one("aws:fsx/lustreFileSystem:LustreFileSystem").outputs
    (lustre,) = [m for m in doc["mounts"] if m[1] == "/lustre"]
    assert lustre[0] == f"{fs['dnsName']}@tcp:/{fs['mountName']}"
    assert "EXPECTED=8\n" in _file(doc, SCRATCH_SCRIPT)
    # The template lets the node read its own tags (the data volume id), and each node carries it.
    assert template["metadataOptions"]["instanceMetadataTags"] == "enabled"
    volumes = {r.id for r in plan.of_type("aws:ebs/volume:Volume")}
    nodes = plan.of_type("aws:ec2/instance:Instance")  # the GPU nodes and the Slurm head node
    assert {n.inputs["tags"][DATA_VOLUME_TAG] for n in nodes} == volumes


def _rendered_scripts(sample_plan) -> dict[str, str]:
    """Every boot script of every sample stack (GPU nodes and Slurm head nodes), and of the variants the
    samples do not cover; each distinct script once. The Slurm scripts (under /opt/gpu-cluster) are
    tests/test_slurm.py's: it lints every one its generators make for the sample stacks."""
    out: dict[str, str] = {}
    seen: set[str] = set()

    def add(where: str, document: str) -> None:
        for f in _doc(document).get("write_files", []):
            if f["path"].startswith("/opt/gpu-cluster/"):
                continue
            if f["content"].startswith("#!/bin/bash") and f["content"] not in seen:
                seen.add(f["content"])
                out[f"{where}:{f['path']}"] = f["content"]

    for stack in SAMPLE_STACKS:
        for r, document in boot_documents(sample_plan(stack)):
            add(stack if r.type == "aws:ec2/launchTemplate:LaunchTemplate" else f"{stack}:{r.name}", document)
    variants = [boot_config(G4, "disk", PARAM, FSX_SOURCE, data_disk=True)]
    for i, boot in enumerate(variants):
        out.update({f"variant-{i}:{p}": s for p, s in scripts(boot).items()})
    out["tencent:scratch-disk"] = scripts(BootConfig(
        nvme_devices=0, nvme_model=None, scratch="disk", data_disk=DataDisk(serial="disk-1a2b3c4d")))[SCRATCH_SCRIPT]
    return out


def test_every_boot_script_is_valid_bash_and_passes_shellcheck(sample_plan, tmp_path):
    scripts = _rendered_scripts(sample_plan)
    assert len(scripts) >= 20
    passed, report, linted = lint(scripts, tmp_path, "--shell=bash", "--severity=style")
    assert passed, report
    assert linted >= 5, "scratch, data disk, Lustre, agents: each kind of boot script"


def test_cloud_inits_own_yaml_loader_reads_every_boot_document_as_the_tests_do(sample_plan, slurm_plan):
    """cloud-init parses user data with PyYAML's pure-Python SafeLoader (cloudinit/safeyaml.py); the tests
    read boot documents with libyaml's (conftest.load_yaml), which is faster. Both read every boot document
    of every sample stack, with and without Slurm, to the same value."""
    documents = {d for stack in SAMPLE_STACKS for plan in (sample_plan(stack), slurm_plan(stack))
                 for _, d in boot_documents(plan)}
    assert len(documents) >= 20
    for text in documents:
        assert yaml.load(text, Loader=yaml.SafeLoader) == load_yaml(text)  # noqa: S506 - a safe loader


@pytest.mark.parametrize("model", [EBS_MODEL])
def test_scratch_disk_script_excludes_the_data_disk(model):
    boot = boot_config(G4, "disk", PARAM, None, data_disk=True)
    script = scripts(boot)[SCRATCH_SCRIPT]
    assert f"MODEL='{model}'" in script and 'DATA_SERIAL=$(data_disk_serial || true)' in script
    assert "blkid -L scratch" in script and "/dev/sdg" not in script


def test_scripts_that_differ_only_in_data_are_linted_once_and_a_finding_names_its_script(tmp_path):
    body = "#!/bin/bash\n# shellcheck shell=bash\nset -euo pipefail\n# catalog row {row}\nGPUS='{n}'\necho \"$GPUS\"\n"
    a, b = body.format(row="p5.48xlarge", n=8), body.format(row="g5.xlarge", n=1)
    assert code_of(a) == code_of(b) and "# shellcheck shell=bash" in code_of(a) and code_of(a).startswith("#!/bin/bash")
    assert code_of("X='$HOME'\n") != code_of("X='home'\n"), "a constant that could draw a finding is kept"
    assert list(representatives({"b": b, "a": a})) == ["a"]
    broken = "#!/bin/bash\nrm $1\n"  # SC2086: double quote to prevent globbing and word splitting
    passed, report, linted = lint({"node-a": a, "node-b": b, "head-broken": broken}, tmp_path, "--severity=style")
    assert not passed and "head-broken" in report and "SC2086" in report and linted == 2
    passed, report, _ = lint({"head-unparsable": "#!/bin/bash\nif then\n"}, tmp_path)
    assert not passed and report.startswith("bash -n head-unparsable: ")
