"""Node boot configuration as data: one cloud-init document for both clouds.

Built from Python structures and dumped as YAML — never string concatenation — so it always
parses. Each cloud passes what differs (how to recognise instance-store NVMe, the Lustre mount
source, the GPU metrics agent command); the RAID0 script, the mounts and the order are shared.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Optional

import yaml

SCRATCH_SCRIPT = "/usr/local/sbin/gpu-cluster-scratch"
DATA_SCRIPT = "/usr/local/sbin/gpu-cluster-data"
SCRATCH_UNIT = "/etc/systemd/system/gpu-cluster-scratch.service"
MD_DEVICE = "/dev/md/scratch"

# Idempotent on reboot: an existing array is assembled and mounted, never re-created. Instance
# store is wiped on stop/start, in which case the devices are blank again and the array is built
# anew. The AWS Deep Learning AMI may already have striped the drives at /opt/dlami/nvme; then that
# volume is bind-mounted at /scratch instead of being destroyed.
_SCRATCH_SH = r"""#!/bin/bash
# Stripe the instance's local NVMe drives into one RAID0 array at /scratch (written by gpu-cluster).
set -euo pipefail
EXPECTED={expected}
MODEL={model}
mountpoint -q /scratch && exit 0
mkdir -p /scratch
if mountpoint -q /opt/dlami/nvme; then
  mount --bind /opt/dlami/nvme /scratch
  exit 0
fi
devices=()
for _ in $(seq 1 60); do
  devices=()
  for dev in /dev/nvme*n1; do
    [ -b "$dev" ] || continue
    model=$(cat "/sys/block/$(basename "$dev")/device/model" 2>/dev/null | sed 's/ *$//')
    if [ -n "$MODEL" ]; then
      [ "$model" = "$MODEL" ] || continue
    else
      # No model to match: take NVMe disks that hold no partition, file system or mount.
      [ -z "$(lsblk -no FSTYPE,MOUNTPOINT "$dev" | tr -d ' \n')" ] || continue
      [ "$(lsblk -no TYPE "$dev" | wc -l)" -eq 1 ] || continue
    fi
    devices+=("$dev")
  done
  [ "${{#devices[@]}}" -ge "$EXPECTED" ] && break
  sleep 2
done
if [ "${{#devices[@]}}" -ne "$EXPECTED" ]; then
  echo "gpu-cluster-scratch: expected $EXPECTED NVMe drives, found ${{#devices[@]}}" >&2
  exit 1
fi
if ! mdadm --assemble {md} "${{devices[@]}}" 2>/dev/null; then
  mdadm --create {md} --level=0 --raid-devices="$EXPECTED" --force --run "${{devices[@]}}"
  mkfs.xfs -f -L scratch {md}
fi
mount -o noatime,nodiratime {md} /scratch
chmod 1777 /scratch
"""

_SCRATCH_UNIT = """[Unit]
Description=Stripe local NVMe into RAID0 at /scratch (gpu-cluster)
After=local-fs.target
Before=cloud-final.service

[Service]
Type=oneshot
ExecStart={script}
RemainAfterExit=yes

[Install]
WantedBy=multi-user.target
"""


# The persistent data disk is attached after the node starts (a separate, protected disk resource),
# so it is found and mounted in the background. It is recognised as a whole disk of exactly the
# requested size, of the cloud's disk model when it has one, that is blank or already labelled
# `data` — never the root disk (partitioned), an excluded device (a scratch disk) nor the RAID
# members (they carry a RAID signature). Formatted on first boot only; mounted at /data by label.
_DATA_SH = r"""#!/bin/bash
# Mount the persistent data disk at /data (written by gpu-cluster).
set -euo pipefail
mountpoint -q /data && exit 0
mkdir -p /data
WANT=$(( {size_gib} * 1024 * 1024 * 1024 ))
MODEL={model}
EXCLUDE={exclude}
for _ in $(seq 1 120); do
  blkid -L data >/dev/null 2>&1 && break
  for dev in $(lsblk -dpno NAME,TYPE | awk '$2 == "disk" {{print $1}}'); do
    case " $EXCLUDE " in *" $dev "*) continue ;; esac
    if [ -n "$MODEL" ]; then
      model=$(sed 's/ *$//' "/sys/block/$(basename "$dev")/device/model" 2>/dev/null || true)
      [ "$model" = "$MODEL" ] || continue
    fi
    [ "$(blockdev --getsize64 "$dev")" -eq "$WANT" ] || continue
    [ "$(lsblk -no TYPE "$dev" | wc -l)" -eq 1 ] || continue
    [ -z "$(lsblk -no FSTYPE,MOUNTPOINT "$dev" | tr -d ' \n')" ] || continue
    mkfs.xfs -L data "$dev"
    break 2
  done
  sleep 5
done
grep -q '^LABEL=data ' /etc/fstab || echo 'LABEL=data /data xfs defaults,nofail,noatime 0 2' >> /etc/fstab
mount /data
"""


def data_disk_script(size_gib: int, model: Optional[str], exclude: tuple[str, ...] = ()) -> str:
    return _DATA_SH.format(size_gib=size_gib, model=shlex.quote(model or ""),
                           exclude=shlex.quote(" ".join(exclude)))


@dataclass(frozen=True)
class LustreMount:
    """Where the parallel file system comes from: `source` as mount(8) takes it for `-t lustre`."""

    source: str
    options: str = "relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target"


@dataclass(frozen=True)
class BootConfig:
    """What a node must do at boot; everything a cloud decides is a field here."""

    nvme_devices: int
    """Local NVMe drives of the shape (0: none)."""
    nvme_model: Optional[str]
    """Model string of instance-store drives (AWS: "Amazon EC2 NVMe Instance Storage"); None: any blank NVMe disk."""
    scratch: str
    """nvme | disk | none (see spec.Storage.scratch)."""
    scratch_disk: Optional[str] = None
    """Device of the non-persistent scratch disk when scratch == "disk"."""
    lustre: Optional[LustreMount] = None
    packages: tuple[str, ...] = ()
    data_disk_gb: int = 0
    """Size of the persistent data disk attached after boot, mounted at /data (0: none)."""
    data_disk_model: Optional[str] = None
    """Model string of the cloud's network disks (AWS: "Amazon Elastic Block Store"); None: any model."""
    data_disk_exclude: tuple[str, ...] = ()
    """Devices that are never the data disk (e.g. a scratch disk of the same size)."""
    files: tuple[dict, ...] = ()
    """Extra cloud-init write_files entries (e.g. an agent configuration)."""
    commands: tuple[tuple[str, ...], ...] = ()
    """Commands run last, each an argv (e.g. start the GPU metrics agent)."""
    hostname: Optional[str] = None
    """Set the host name at every boot (cloud-init set_hostname; the Slurm head node must be
    called what slurm.conf's SlurmctldHost says). None: leave the cloud's host name."""


def scratch_script(devices: int, model: Optional[str]) -> str:
    return _SCRATCH_SH.format(expected=devices, model=shlex.quote(model or ""), md=MD_DEVICE)


def render(boot: BootConfig) -> str:
    """The `#cloud-config` document for `boot`."""
    files: list[dict] = []
    runcmd: list[list[str]] = []
    mounts: list[list[str]] = []
    packages = list(boot.packages)

    if boot.scratch == "nvme" and boot.nvme_devices > 0:
        packages += ["mdadm", "xfsprogs"]
        files += [
            {"path": SCRATCH_SCRIPT, "permissions": "0755", "owner": "root:root",
             "content": scratch_script(boot.nvme_devices, boot.nvme_model)},
            {"path": SCRATCH_UNIT, "permissions": "0644", "owner": "root:root",
             "content": _SCRATCH_UNIT.format(script=SCRATCH_SCRIPT)},
        ]
        runcmd += [["systemctl", "daemon-reload"],
                   ["systemctl", "enable", "--now", "gpu-cluster-scratch.service"]]
    elif boot.scratch == "disk" and boot.scratch_disk:
        mounts.append([boot.scratch_disk, "/scratch", "xfs", "defaults,nofail,noatime", "0", "2"])
        runcmd.append(["bash", "-c", f"blkid {shlex.quote(boot.scratch_disk)} || mkfs.xfs -L scratch "
                                     f"{shlex.quote(boot.scratch_disk)}; mkdir -p /scratch; mount -a"])

    if boot.lustre is not None:
        mounts.append([boot.lustre.source, "/lustre", "lustre", boot.lustre.options, "0", "0"])
        runcmd += [["mkdir", "-p", "/lustre"], ["mount", "/lustre"]]

    if boot.data_disk_gb > 0:
        files.append({"path": DATA_SCRIPT, "permissions": "0755", "owner": "root:root",
                      "content": data_disk_script(boot.data_disk_gb, boot.data_disk_model, boot.data_disk_exclude)})
        # In the background: the disk is attached only after the node is running.
        runcmd.append(["systemd-run", "--unit=gpu-cluster-data", DATA_SCRIPT])

    files += list(boot.files)
    runcmd += [list(c) for c in boot.commands]

    doc: dict = {"package_update": bool(packages)}
    if boot.hostname:
        doc["hostname"] = boot.hostname
    if packages:
        doc["packages"] = sorted(set(packages))
    if files:
        doc["write_files"] = files
    if mounts:
        doc["mounts"] = mounts
    if runcmd:
        doc["runcmd"] = runcmd
    return "#cloud-config\n" + yaml.safe_dump(doc, sort_keys=False, width=1000)
