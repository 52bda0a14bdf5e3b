"""The nodes' boot configuration: cloud-init built from data (pure), and what the AWS plan carries."""

import base64
import re

import yaml

from components import catalog
from components.aws.compute import NVME_MODEL, boot_config
from components.cloudinit import MD_DEVICE, SCRATCH_SCRIPT, render

P5 = catalog.shape("aws", "p5.48xlarge")
G4 = catalog.shape("aws", "g4dn.xlarge")
PARAM = "AmazonCloudWatch-llm-large"


def _doc(text: str) -> dict:
    assert text.startswith("#cloud-config\n")
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def _file(doc: dict, path: str) -> str:
    return next(f["content"] for f in doc["write_files"] if f["path"] == path)


def test_raid0_over_exactly_the_shapes_nvme_drives():
    for shape in (P5, G4):
        doc = _doc(render(boot_config(shape, "nvme", PARAM, None, 0)))
        script = _file(doc, SCRATCH_SCRIPT)
        assert f"EXPECTED={shape.nvme_count}\n" in script
        assert f"MODEL='{NVME_MODEL}'" in script
        assert "--level=0" in script and MD_DEVICE in script and "/scratch" in script
        # Idempotent on reboot: assemble an existing array before ever creating one.
        assert script.index("mdadm --assemble") < script.index("mdadm --create")
        assert {"mdadm", "xfsprogs"} <= set(doc["packages"])


def test_mounts_lustre_and_starts_the_gpu_agent():
    source = "fs-0abc.fsx.us-east-1.amazonaws.com@tcp:/abcd1234"
    doc = _doc(render(boot_config(P5, "nvme", PARAM, source, 0)))
    (lustre,) = [m for m in doc["mounts"] if m[1] == "/lustre"]
    assert lustre[0] == source and lustre[2] == "lustre"
    assert ["mount", "/lustre"] in doc["runcmd"]
    agent = doc["runcmd"][-1]
    assert agent[0].endswith("amazon-cloudwatch-agent-ctl")
    assert agent[1:] == ["-a", "fetch-config", "-m", "ec2", "-s", "-c", f"ssm:{PARAM}"]


def test_no_scratch_no_lustre_no_data_disk():
    doc = _doc(render(boot_config(G4, "none", PARAM, None, 0)))
    assert "mounts" not in doc and "packages" not in doc
    assert [f["path"] for f in doc.get("write_files", [])] == []


def test_data_disk_script_formats_only_a_blank_volume_of_its_size():
    doc = _doc(render(boot_config(P5, "nvme", PARAM, None, 1000)))
    script = _file(doc, "/usr/local/sbin/gpu-cluster-data")
    assert "WANT=$(( 1000 * 1024 * 1024 * 1024 ))" in script
    assert "MODEL='Amazon Elastic Block Store'" in script
    assert "mkfs.xfs -L data" in script and "LABEL=data /data" in script
    assert ["systemd-run", "--unit=gpu-cluster-data", "/usr/local/sbin/gpu-cluster-data"] in doc["runcmd"]


def test_launch_template_user_data_is_that_document(sample_plan):
    plan = sample_plan("aws-large")
    template = plan.one("aws:ec2/launchTemplate:LaunchTemplate").inputs
    doc = _doc(base64.b64decode(template["userData"]).decode())
    fs = plan.one("aws:fsx/lustreFileSystem:LustreFileSystem").outputs
    (lustre,) = [m for m in doc["mounts"] if m[1] == "/lustre"]
    assert lustre[0] == f"{fs['dnsName']}@tcp:/{fs['mountName']}"
    assert re.search(r"^EXPECTED=8$", _file(doc, SCRATCH_SCRIPT), re.M)


def test_boot_scripts_are_valid_bash(tmp_path):
    import subprocess

    from components.cloudinit import data_disk_script, scratch_script

    for i, script in enumerate([scratch_script(8, "Amazon EC2 NVMe Instance Storage"), scratch_script(4, None),
                                data_disk_script(1000, "Amazon Elastic Block Store"),
                                data_disk_script(1000, None, ("/dev/vdb",))]):
        path = tmp_path / f"script-{i}.sh"
        path.write_text(script)
        result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
