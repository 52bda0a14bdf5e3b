"""The disk-setup scripts, run for real against stubbed device layouts of every catalogued shape.

The scripts learn what a disk is only through lsblk/blkid/mountpoint (and the AWS instance metadata
through curl), and change things only through mdadm/mkfs.xfs/mount/mkdir/chmod: stubs of those on
PATH give each script a device layout and record what it does. The properties: the RAID0 takes exactly
the instance-store drives, the data disk is found by its id, the root disk is never touched, and a
failed step ends the script with a message instead of being swallowed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from components import catalog
from components.aws.boot import DATA_VOLUME_TAG, boot_config
from components.cloudinit import DATA_SCRIPT, DATA_WAIT_SECONDS, MD_DEVICE, SCRATCH_SCRIPT, BootConfig, DataDisk, scripts

EBS = "Amazon Elastic Block Store"
STORE = "Amazon EC2 NVMe Instance Storage"
VOLUME = "vol-0a1b2c3d4e5f60718"

# The stubs are small POSIX shell scripts (dash starts faster than bash) reading answer files written
# from the layout with the shell's own `read` (no `cat` process: the scripts' wait loops call them
# hundreds of times).
_LAST_ARG = 'for last; do :; done\n'
_ANSWER = """answer() { while IFS= read -r line || [ -n "$line" ]; do printf '%s\\n' "$line"; done < "$1"; }
"""
_LSBLK = "#!/bin/sh\n" + _ANSWER + r"""if [ "$1" = -dnpo ]; then answer "$LAYOUT/disks"; exit; fi
""" + _LAST_ARG + r"""dev=${last##*/}
[ -d "$LAYOUT/dev/$dev" ] || exit 32
answer "$LAYOUT/dev/$dev/$1_$2"
"""
_BLKID = "#!/bin/sh\n" + _ANSWER + r"""[ "$1" = -L ] && [ -f "$LAYOUT/label/$2" ] && { answer "$LAYOUT/label/$2"; exit; }
exit 2
"""
# A mount point is marked by a .mounted file in its mirror under $LAYOUT/mounted (so a parent of a
# mount point is not one).
_MOUNTPOINT = r"""#!/bin/sh
""" + _LAST_ARG + r"""[ -e "$LAYOUT/mounted$last/.mounted" ]
"""
_SYSTEMCTL = "#!/bin/sh\n" + _ANSWER + r"""if [ "$1" = show ]; then
""" + _LAST_ARG + r"""  if [ -f "$LAYOUT/service/$last" ]; then answer "$LAYOUT/service/$last"; exit; fi
  echo inactive
fi
exit 0
"""
_CURL = "#!/bin/sh\n" + _ANSWER + _LAST_ARG + r"""case "$last" in
  */api/token) echo token ;;
  http://169.254.169.254/latest/meta-data/tags/instance/*)
    key=${last#http://169.254.169.254/latest/meta-data/tags/instance/}
    [ -f "$LAYOUT/tag/$key" ] || exit 22
    answer "$LAYOUT/tag/$key" ;;
  *) exit 22 ;;
esac
"""
_RECORD = r"""#!/bin/sh
name=${0##*/}
{ printf '%s' "$name"; printf '\t%s' "$@"; printf '\n'; } >> "$CALLS"
[ ! -e "$LAYOUT/failing/$name" ]
"""


def _write_layout(root: Path, layout: dict) -> None:
    """The answer files each stub reads."""
    for d in ("dev", "label", "mounted", "service", "tag", "failing"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "disks").write_text("".join(f"{d['name']} disk\n" for d in layout["disks"]))
    for d in layout["disks"]:
        dev = root / "dev" / Path(d["name"]).name
        dev.mkdir()
        parts = d.get("parts", [])
        nodes = [{"type": "disk", **d}] + [{"type": "part", **p} for p in parts]
        for col in ("SERIAL", "MODEL"):
            (dev / f"-dno_{col}").write_text(f"{d.get(col.lower(), '')}\n")
        for cols in ("TYPE", "FSTYPE", "MOUNTPOINT", "FSTYPE,MOUNTPOINT"):
            lines = [" ".join(str(n.get(c.lower(), "")) for c in cols.split(",")) for n in nodes]
            (dev / f"-no_{cols}").write_text("\n".join(lines) + "\n")
        if d.get("label"):
            (root / "label" / d["label"]).write_text(d["name"] + "\n")
    for path in layout.get("mounted", []):
        marker = root / "mounted" / path.lstrip("/") / ".mounted"
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("")
    for name, state in layout.get("services", {}).items():
        (root / "service" / name).write_text(state + "\n")
    for key, value in layout.get("tags", {}).items():
        (root / "tag" / key).write_text(value + "\n")
    for name in layout.get("failing", []):
        (root / "failing" / name).write_text("")


@pytest.fixture
def stubs(tmp_path):
    """A bin/ of stubbed commands; returns run(script, layout) → (returncode, stderr, calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    programs = {"lsblk": _LSBLK, "blkid": _BLKID, "mountpoint": _MOUNTPOINT, "systemctl": _SYSTEMCTL,
                "curl": _CURL,
                **{n: _RECORD for n in ("mdadm", "mkfs.xfs", "mount", "mkdir", "chmod", "sleep")}}
    for name, body in programs.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    runs = iter(range(1_000_000))

    def run(script: str, layout: dict) -> tuple[int, str, list[list[str]]]:
        root = tmp_path / f"layout-{next(runs)}"
        _write_layout(root, layout)
        calls = root / "calls"
        calls.write_text("")
        (root / "script.sh").write_text(script)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "LAYOUT": str(root), "CALLS": str(calls)}
        result = subprocess.run(["bash", str(root / "script.sh")], env=env, capture_output=True, text=True,
                                timeout=120)
        return result.returncode, result.stderr, [line.split("\t") for line in calls.read_text().splitlines()]

    return run


def aws_layout(shape, data: bool = True, scratch_disk: bool = False) -> dict:
    """Nitro EBS and instance store as Ubuntu shows them: NVMe devices, in no particular order."""
    disks = [{"name": "/dev/nvme0n1", "model": EBS, "serial": "vol0rootrootrootroot",
              "parts": [{"fstype": "ext4", "mountpoint": "/"}, {"fstype": "vfat", "mountpoint": "/boot/efi"}]}]
    n = 1
    if data:
        disks.append({"name": f"/dev/nvme{n}n1", "model": EBS, "serial": VOLUME.replace("-", "")})
        n += 1
    if scratch_disk:
        disks.append({"name": f"/dev/nvme{n}n1", "model": EBS, "serial": "vol0scratchscratch00"})
        n += 1
    for i in range(shape.nvme_count):
        disks.append({"name": f"/dev/nvme{n + i}n1", "model": STORE, "serial": f"AWS{i:017d}"})
    return {"disks": disks, "tags": {DATA_VOLUME_TAG: VOLUME}}


def touched(calls: list[list[str]]) -> set[str]:
    return {a for c in calls if c[0] in ("mdadm", "mkfs.xfs", "mount") for a in c if a.startswith("/dev/")}


AWS_NVME_SHAPES = [s for s in catalog.shapes("aws").values() if s.nvme_count]


@pytest.mark.parametrize("shape", AWS_NVME_SHAPES, ids=lambda s: s.type)
def test_raid0_takes_exactly_the_instance_store_drives(stubs, shape):
    layout = aws_layout(shape)
    script = scripts(boot_config(shape, "nvme", "AmazonCloudWatch-x", None, data_disk=True, image_scratch=False))
    code, err, calls = stubs(script[SCRATCH_SCRIPT], layout)
    assert code == 0, err
    store = sorted(d["name"] for d in layout["disks"] if d["model"] == STORE)
    (create,) = [c for c in calls if c[:2] == ["mdadm", "--create"]]
    assert sorted(a for a in create if a.startswith("/dev/nvme")) == store
    assert f"--raid-devices={shape.nvme_count}" in create and "--level=0" in create
    assert ["mkfs.xfs", "-f", "-L", "scratch", MD_DEVICE] in calls
    assert ["mount", "-o", "noatime", MD_DEVICE, "/scratch"] in calls
    assert "/dev/nvme0n1" not in touched(calls)                      # the root disk
    assert layout["disks"][1]["name"] not in touched(calls)          # the data volume


def test_a_missing_drive_fails_loudly(stubs):
    shape = catalog.shape("aws", "g5.xlarge")
    layout = aws_layout(shape)
    layout["disks"].pop()  # its instance-store drive did not appear (the script waits two minutes for it)
    code, err, calls = stubs(scripts(boot_config(shape, "nvme", "p", None, data_disk=False,
                                                 image_scratch=False))[SCRATCH_SCRIPT], layout)
    assert code == 1 and "expected 1 local NVMe drives, found 0: none" in err
    assert not [c for c in calls if c[0] in ("mdadm", "mkfs.xfs")]
    assert [c for c in calls if c[0] == "sleep"] == [["sleep", "2"]] * 60, "two minutes of looking first"


def test_a_failed_step_ends_the_script_with_its_reason(stubs):
    shape = catalog.shape("aws", "p4d.24xlarge")
    layout = {**aws_layout(shape), "failing": ["mkfs.xfs"]}
    code, err, calls = stubs(scripts(boot_config(shape, "nvme", "p", None, data_disk=False,
                                                 image_scratch=False))[SCRATCH_SCRIPT], layout)
    assert code == 1 and "mkfs.xfs on /dev/md/scratch failed" in err
    assert not [c for c in calls if c[0] == "mount"]


def test_reboot_assembles_the_existing_array_and_formats_nothing(stubs):
    shape = catalog.shape("aws", "p4d.24xlarge")
    layout = aws_layout(shape)
    for d in layout["disks"]:
        if d["model"] == STORE:
            d["fstype"] = "linux_raid_member"
    code, err, calls = stubs(scripts(boot_config(shape, "nvme", "p", None, data_disk=False,
                                                 image_scratch=False))[SCRATCH_SCRIPT], layout)
    assert code == 0, err
    assert [c[:3] for c in calls if c[0] == "mdadm"] == [["mdadm", "--assemble", MD_DEVICE]]
    assert not [c for c in calls if c[0] == "mkfs.xfs"]


def test_a_drive_holding_data_is_never_striped_over(stubs):
    shape = catalog.shape("aws", "g5.xlarge")
    layout = aws_layout(shape, data=False)
    layout["disks"][-1]["fstype"] = "ext4"
    code, err, calls = stubs(scripts(boot_config(shape, "nvme", "p", None, data_disk=False,
                                                 image_scratch=False))[SCRATCH_SCRIPT], layout)
    assert code == 1 and "is not blank" in err and not [c for c in calls if c[0] in ("mdadm", "mkfs.xfs")]


def test_the_dlami_volume_is_used_once_its_service_is_done(stubs):
    shape = catalog.shape("aws", "p5.48xlarge")
    layout = {**aws_layout(shape), "mounted": ["/opt/dlami/nvme"], "services": {"dlami-nvme.service": "active"}}
    code, err, calls = stubs(scripts(boot_config(shape, "nvme", "p", None, data_disk=False))[SCRATCH_SCRIPT], layout)
    assert code == 0, err
    assert calls == [["mkdir", "-p", "/scratch"], ["mount", "--bind", "/opt/dlami/nvme", "/scratch"]]


@pytest.mark.parametrize("shape", list(catalog.shapes("aws").values()), ids=lambda s: s.type)
def test_aws_data_volume_is_found_by_its_id_and_formatted_once(stubs, shape):
    layout = aws_layout(shape, scratch_disk=True)
    # A scratch disk of the same size and model sits beside it: only the volume id tells them apart.
    script = scripts(boot_config(shape, "disk", "p", None, data_disk=True))[DATA_SCRIPT]
    code, err, calls = stubs(script, layout)
    assert code == 0, err
    data_dev = next(d["name"] for d in layout["disks"] if d["serial"] == VOLUME.replace("-", ""))
    assert [c for c in calls if c[0] == "mkfs.xfs"] == [["mkfs.xfs", "-L", "data", data_dev]]
    assert ["mount", "-o", "noatime", data_dev, "/data"] in calls
    assert touched(calls) == {data_dev}
    # Already formatted (the next boot): mounted as it is.
    next(d for d in layout["disks"] if d["name"] == data_dev)["fstype"] = "xfs"
    code, err, calls = stubs(script, layout)
    assert code == 0 and not [c for c in calls if c[0] == "mkfs.xfs"]


def test_a_data_volume_with_a_foreign_file_system_is_refused(stubs):
    shape = catalog.shape("aws", "g4dn.xlarge")
    layout = aws_layout(shape)
    layout["disks"][1]["fstype"] = "ext4"
    code, err, calls = stubs(scripts(boot_config(shape, "nvme", "p", None, data_disk=True))[DATA_SCRIPT], layout)
    assert code == 1 and "refusing to format it" in err and not [c for c in calls if c[0] == "mkfs.xfs"]


def test_a_data_volume_that_never_attaches_is_reported(stubs):
    shape = catalog.shape("aws", "g4dn.xlarge")
    layout = aws_layout(shape, data=False)
    script = scripts(boot_config(shape, "nvme", "p", None, data_disk=True))[DATA_SCRIPT]
    # The script looks for the volume every 5 s for DATA_WAIT_SECONDS; 3 looks prove the same ending.
    assert f"WAIT={DATA_WAIT_SECONDS}\n" in script
    code, err, calls = stubs(script.replace(f"WAIT={DATA_WAIT_SECONDS}\n", "WAIT=15\n"), layout)
    assert code == 1 and f"serial {VOLUME.replace('-', '')} was not attached within 15 s" in err
    assert [c for c in calls if c[0] == "sleep"] == [["sleep", "5"]] * 3


def test_aws_scratch_disk_is_the_blank_ebs_disk_that_is_not_the_data_volume(stubs):
    shape = catalog.shape("aws", "g4dn.xlarge")
    layout = aws_layout(shape, scratch_disk=True)
    code, err, calls = stubs(scripts(boot_config(shape, "disk", "p", None, data_disk=True))[SCRATCH_SCRIPT], layout)
    assert code == 0, err
    scratch = next(d["name"] for d in layout["disks"] if d["serial"] == "vol0scratchscratch00")
    assert touched(calls) == {scratch}


def tencent_layout(shape, data_id: str = "disk-1a2b3c4d", scratch_disk: bool = False) -> dict:
    """Virtio CBS disks (serial = disk id, /dev/disk/by-id/virtio-<id>) and any local NVMe."""
    disks = [{"name": "/dev/vda", "model": "", "serial": "disk-rootroot", "parts": [{"fstype": "ext4", "mountpoint": "/"}]}]
    if data_id:
        disks.append({"name": "/dev/vdb", "model": "", "serial": data_id})
    if scratch_disk:
        disks.append({"name": "/dev/vdc", "model": "", "serial": "disk-scratch1"})
    disks += [{"name": f"/dev/nvme{i}n1", "model": "", "serial": f"NVME{i}"} for i in range(shape.nvme_count)]
    return {"disks": disks}


TENCENT_SHAPES = list(catalog.shapes("tencentcloud").values())


@pytest.mark.parametrize("shape", TENCENT_SHAPES, ids=lambda s: s.type)
def test_tencent_disks_by_layout(stubs, shape):
    scratch = "nvme" if shape.nvme_count else "disk"
    boot = BootConfig(nvme_devices=shape.nvme_count, nvme_model=None, scratch=scratch,
                      data_disk=DataDisk(serial="disk-1a2b3c4d"))
    layout = tencent_layout(shape, scratch_disk=scratch == "disk")
    code, err, calls = stubs(scripts(boot)[SCRATCH_SCRIPT], layout)
    assert code == 0, err
    expected = ({f"/dev/nvme{i}n1" for i in range(shape.nvme_count)} if scratch == "nvme" else {"/dev/vdc"})
    assert touched(calls) - {MD_DEVICE} == expected
    code, err, calls = stubs(scripts(boot)[DATA_SCRIPT], layout)
    assert code == 0, err and touched(calls) == {"/dev/vdb"}
    assert "/dev/vda" not in touched(calls)
