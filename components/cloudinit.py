"""Node boot configuration as data: one cloud-init document for both clouds.

Built from Python structures and dumped as YAML — never string concatenation of the document — so
it always parses. Each cloud passes what differs (how to recognise its disks, how to learn the data
disk's serial, how to install the Lustre client and the GPU agent); the disk scripts, the mounts and
the order are shared.

Disks are found by what they are, never by size: instance-store NVMe by the model string the cloud
gives it, the persistent data disk by its serial (the cloud's disk id), the scratch disk as the one
blank disk that is neither of those. A disk that holds a partition table, a file system or a mount
(the root disk, anything unexpected) is never formatted. Every script stops at the first failed step
with a message naming the step (`set -euo pipefail`), so systemd and cloud-init report it.
"""

from __future__ import annotations

import base64
import gzip
import shlex
from dataclasses import dataclass, field
from typing import Optional

import yaml

SBIN = "/usr/local/sbin"
SCRATCH_SCRIPT = f"{SBIN}/gpu-cluster-scratch"
DATA_SCRIPT = f"{SBIN}/gpu-cluster-data"
SCRATCH_UNIT = "/etc/systemd/system/gpu-cluster-scratch.service"
DATA_UNIT = "/etc/systemd/system/gpu-cluster-data.service"
MD_DEVICE = "/dev/md/scratch"
DATA_WAIT_SECONDS = 900
"""How long the data-disk service waits for its disk: the disk is attached after the node runs."""

REBOOT_PENDING = "/run/gpu-cluster/reboot-pending"
"""Present when a boot step has arranged a reboot for when cloud-init is done (the AWS Lustre client
boots a kernel it has a client for); /run is a tmpfs, so it is gone after the reboot. Later steps skip
their waits for what only the reboot brings."""


def bash_script(name: str, purpose: str, body: str) -> str:
    """A boot script: strict mode, its name, and `fail` — the one way a step reports what went wrong."""
    return (f"#!/bin/bash\n# {purpose} (written by gpu-cluster).\nset -euo pipefail\nNAME={name}\n"
            'fail() { echo "$NAME: $*" >&2; exit 1; }\n' + body.lstrip("\n"))


# Functions every disk script shares. They only call lsblk for what a disk is, so a test can run the
# scripts against a stubbed device layout (tests/test_boot_disks.py).
_DISK_FUNCTIONS = r"""
# Whole disks, one path per line.
disks() { lsblk -dnpo NAME,TYPE | awk '$2 == "disk" {print $1}'; }

# True when a disk holds nothing: no partition, no file system or RAID signature, no mount.
blank() {
  [ "$(lsblk -no TYPE "$1" | wc -l)" -eq 1 ] || return 1
  [ -z "$(lsblk -no FSTYPE,MOUNTPOINT "$1" | tr -d ' \n')" ]
}

# True when a disk has the wanted model (an empty MODEL matches every disk).
has_model() { [ -z "$2" ] || [ "$(lsblk -dno MODEL "$1" | sed 's/ *$//')" = "$2" ]; }

serial_of() { lsblk -dno SERIAL "$1" | tr -d ' '; }

# The disk whose serial is $1, if attached.
disk_with_serial() {
  local dev
  for dev in $(disks); do
    if [ "$(serial_of "$dev")" = "$1" ]; then echo "$dev"; return 0; fi
  done
  return 1
}

# Collect in `found` the disks for which the function $2 holds, waiting up to two minutes for at
# least $1 of them (drives may appear a little after boot).
found=()
collect() {
  local dev
  for _ in $(seq 1 60); do
    found=()
    for dev in $(disks); do
      if "$2" "$dev"; then found+=("$dev"); fi
    done
    [ "${#found[@]}" -ge "$1" ] && return 0
    sleep 2
  done
}
"""

_SCRATCH_RAID_SH = r"""
EXPECTED={expected}
MODEL={model}
IMAGE_SERVICE={image_service}
IMAGE_MOUNT={image_mount}
{functions}
{serial_function}
mountpoint -q /scratch && exit 0
DATA_SERIAL=$(data_disk_serial || true)

# Some machine images stripe the drives themselves at boot. Wait for that service to finish, then
# use its volume instead of tearing it down.
if [ -n "$IMAGE_SERVICE" ]; then
  for _ in $(seq 1 150); do
    state=$(systemctl show -p ActiveState --value "$IMAGE_SERVICE" 2>/dev/null || true)
    [ "$state" = activating ] || break
    sleep 2
  done
  if mountpoint -q "$IMAGE_MOUNT"; then
    mkdir -p /scratch
    mount --bind "$IMAGE_MOUNT" /scratch
    exit 0
  fi
fi

# A drive: an NVMe disk of the instance-store model, never one with partitions or a mount (the root
# disk) and never the persistent data disk.
drive() {{
  case "$1" in /dev/nvme*) ;; *) return 1 ;; esac
  has_model "$1" "$MODEL" || return 1
  [ "$(lsblk -no TYPE "$1" | wc -l)" -eq 1 ] || return 1
  [ -z "$(lsblk -no MOUNTPOINT "$1" | tr -d ' \n')" ] || return 1
  [ -z "$DATA_SERIAL" ] || [ "$(serial_of "$1")" != "$DATA_SERIAL" ]
}}
collect "$EXPECTED" drive
members=("${{found[@]}}")
[ "${{#members[@]}}" -eq "$EXPECTED" ] || fail "expected $EXPECTED local NVMe drives, found ${{#members[@]}}: ${{members[*]:-none}}"

raid=0
for dev in "${{members[@]}}"; do
  if [ "$(lsblk -no FSTYPE "$dev" | head -n 1 | tr -d ' ')" = linux_raid_member ]; then raid=$((raid + 1)); fi
done
if [ "$raid" -eq "$EXPECTED" ]; then
  mdadm --assemble {md} "${{members[@]}}" || fail "could not assemble the existing array from ${{members[*]}}"
else
  for dev in "${{members[@]}}"; do blank "$dev" || fail "$dev is not blank; refusing to build the array over it"; done
  mdadm --create {md} --level=0 --raid-devices="$EXPECTED" --run "${{members[@]}}" || fail "mdadm --create failed"
  mkfs.xfs -f -L scratch {md} || fail "mkfs.xfs on {md} failed"
fi
mkdir -p /scratch
mount -o noatime {md} /scratch || fail "could not mount {md} at /scratch"
chmod 1777 /scratch
"""

_SCRATCH_DISK_SH = r"""
MODEL={model}
{functions}
{serial_function}
mountpoint -q /scratch && exit 0
DATA_SERIAL=$(data_disk_serial || true)

# The scratch disk: the one blank disk of the cloud's disk model that is not the data disk.
scratch_disk() {{
  has_model "$1" "$MODEL" && blank "$1" || return 1
  [ -z "$DATA_SERIAL" ] || [ "$(serial_of "$1")" != "$DATA_SERIAL" ]
}}
dev=$(blkid -L scratch 2>/dev/null || true)
if [ -z "$dev" ]; then
  collect 1 scratch_disk
  [ "${{#found[@]}}" -eq 1 ] || fail "expected one blank scratch disk, found ${{#found[@]}}: ${{found[*]:-none}}"
  dev=${{found[0]}}
  mkfs.xfs -L scratch "$dev" || fail "mkfs.xfs on $dev failed"
fi
mkdir -p /scratch
mount -o noatime "$dev" /scratch || fail "could not mount $dev at /scratch"
chmod 1777 /scratch
"""

_DATA_SH = r"""
WAIT={wait}
{functions}
{serial_function}
mountpoint -q /data && exit 0
serial=$(data_disk_serial) || fail "could not learn the data disk's serial"
[ -n "$serial" ] || fail "the data disk's serial is empty"
dev=""
for _ in $(seq 1 $((WAIT / 5))); do
  dev=$(disk_with_serial "$serial") && break
  sleep 5
done
[ -n "$dev" ] || fail "data disk with serial $serial was not attached within $WAIT s"
if blank "$dev"; then
  mkfs.xfs -L data "$dev" || fail "mkfs.xfs on $dev failed"
elif [ "$(lsblk -no FSTYPE "$dev" | head -n 1 | tr -d ' ')" != xfs ]; then
  fail "$dev (serial $serial) holds something other than an XFS file system; refusing to format it"
fi
mkdir -p /data
mount -o noatime "$dev" /data || fail "could not mount $dev at /data"
"""

_UNIT = """[Unit]
Description={description} (gpu-cluster)
After=local-fs.target{after}
Before=cloud-final.service

[Service]
Type=oneshot
ExecStart={script}
RemainAfterExit=yes
TimeoutStartSec={timeout}

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class ImageScratch:
    """Local NVMe the machine image stripes by itself at boot (the AWS Deep Learning AMI's
    `dlami-nvme.service` mounts its volume at /opt/dlami/nvme)."""

    service: str
    mountpoint: str


@dataclass(frozen=True)
class DataDisk:
    """The persistent data disk, attached after the node starts and mounted at /data."""

    serial: str = ""
    """The disk's serial as lsblk shows it (Tencent CBS: the disk id); empty: ask `serial_command`."""
    serial_command: str = ""
    """A bash snippet printing the serial (AWS: the volume id from an instance tag, without the dash)."""

    def function(self) -> str:
        body = self.serial_command or f"echo {shlex.quote(self.serial)}"
        return "data_disk_serial() {\n" + "\n".join(f"  {line}" for line in body.strip().splitlines()) + "\n}\n"


@dataclass(frozen=True)
class LustreMount:
    """Where the parallel file system comes from, and how the node gets its client."""

    source: str
    """`mount -t lustre` source, e.g. `<dns>@tcp:/<mount name>` (FSx) or `<ip>@tcp0:/<fs id>/cfs` (CFS Turbo)."""
    client_script: str
    """A bash script that makes the `lustre` kernel module available (runs before the first mount)."""
    options: str = "relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network-online.target"
    files: tuple[dict, ...] = ()
    """write_files entries the client install needs (e.g. a systemd unit it starts)."""


@dataclass(frozen=True)
class Step:
    """A boot step: a script written under /usr/local/sbin and run in order after the mounts."""

    name: str
    script: str


@dataclass(frozen=True)
class BootConfig:
    """What a node must do at boot; everything a cloud decides is a field here."""

    nvme_devices: int
    """Local NVMe drives of the shape (0: none)."""
    nvme_model: Optional[str]
    """Model string of instance-store drives (AWS: "Amazon EC2 NVMe Instance Storage"); None: any NVMe
    disk that is not partitioned, mounted or the data disk."""
    scratch: str
    """nvme | disk | none (see spec.Storage.scratch)."""
    disk_model: Optional[str] = None
    """Model string of the cloud's network disks (AWS: "Amazon Elastic Block Store"); None: any model."""
    image_scratch: Optional[ImageScratch] = None
    lustre: Optional[LustreMount] = None
    data_disk: Optional[DataDisk] = None
    packages: tuple[str, ...] = ()
    files: tuple[dict, ...] = ()
    """Extra cloud-init write_files entries (e.g. an agent configuration)."""
    steps: tuple[Step, ...] = ()
    """Scripts run last, in order (install and start the GPU agent, a driver, ...)."""
    commands: tuple[tuple[str, ...], ...] = field(default_factory=tuple)
    """Commands run after the steps, each an argv."""
    hostname: Optional[str] = None
    """Set the host name at every boot (cloud-init set_hostname; the Slurm head node must be
    called what slurm.conf's SlurmctldHost says). None: leave the cloud's host name."""
    apt_lock_wait_s: int = 0
    """Debian-family images: seconds every apt-get waits for the dpkg lock (an apt.conf.d drop-in).
    0: no drop-in."""


APT_LOCK_DROPIN = "/etc/apt/apt.conf.d/90gpu-cluster-lock-wait"
"""Unscoped DPkg::Lock::Timeout: apt's own default wait (120 s without a terminal) is set for the `apt`
command only (Binary::apt::DPkg::Lock::Timeout, apt-private/private-cmndline.cc), so apt-get in a boot
script fails at once while unattended-upgrades holds the dpkg lock. It covers the dpkg lock alone, not
the package lists' lock `apt-get update` takes. cloud-init's package step waits by itself."""


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""libyaml's emitter when PyYAML has it (its wheels do): the same YAML, some fifty times faster than the
pure-Python one on a node's boot document."""


def _q(value: Optional[str]) -> str:
    return shlex.quote(value or "")


_NO_DATA_DISK = DataDisk()


def scratch_raid_script(boot: BootConfig) -> str:
    image = boot.image_scratch
    return bash_script("gpu-cluster-scratch", "Stripe the instance's local NVMe drives into one RAID0 array at /scratch",
                       _SCRATCH_RAID_SH.format(
        expected=boot.nvme_devices, model=_q(boot.nvme_model), md=MD_DEVICE,
        image_service=_q(image.service if image else ""), image_mount=_q(image.mountpoint if image else ""),
        serial_function=(boot.data_disk or _NO_DATA_DISK).function(), functions=_DISK_FUNCTIONS))


def scratch_disk_script(boot: BootConfig) -> str:
    return bash_script("gpu-cluster-scratch", "Mount the non-persistent scratch disk at /scratch", _SCRATCH_DISK_SH.format(
        model=_q(boot.disk_model), serial_function=(boot.data_disk or _NO_DATA_DISK).function(),
        functions=_DISK_FUNCTIONS))


def data_disk_script(disk: DataDisk) -> str:
    return bash_script("gpu-cluster-data", "Mount the persistent data disk at /data", _DATA_SH.format(
        wait=DATA_WAIT_SECONDS, functions=_DISK_FUNCTIONS, serial_function=disk.function()))


def scripts(boot: BootConfig) -> dict[str, str]:
    """Every script the document writes, by path (for shellcheck and the stubbed-disk tests)."""
    return {f["path"]: f["content"] for f in _files(boot) if f["content"].startswith("#!/bin/bash")}


def _script(path: str, content: str) -> dict:
    return {"path": path, "permissions": "0755", "owner": "root:root", "content": content}


def _unit(path: str, description: str, script: str, after: str = "", timeout: str = "infinity") -> dict:
    return {"path": path, "permissions": "0644", "owner": "root:root",
            "content": _UNIT.format(description=description, after=f" {after}" if after else "", script=script,
                                    timeout=timeout)}


def _files(boot: BootConfig) -> list[dict]:
    files: list[dict] = []
    if boot.scratch == "nvme" and boot.nvme_devices > 0:
        after = boot.image_scratch.service if boot.image_scratch else ""
        files += [_script(SCRATCH_SCRIPT, scratch_raid_script(boot)),
                  _unit(SCRATCH_UNIT, "Stripe local NVMe into RAID0 at /scratch", SCRATCH_SCRIPT, after, "600")]
    elif boot.scratch == "disk":
        files += [_script(SCRATCH_SCRIPT, scratch_disk_script(boot)),
                  _unit(SCRATCH_UNIT, "Mount the scratch disk at /scratch", SCRATCH_SCRIPT, timeout="300")]
    if boot.data_disk is not None:
        files += [_script(DATA_SCRIPT, data_disk_script(boot.data_disk)),
                  _unit(DATA_UNIT, "Mount the persistent data disk at /data", DATA_SCRIPT,
                        timeout=str(DATA_WAIT_SECONDS + 60))]
    if boot.lustre is not None:
        files.append(_script(f"{SBIN}/gpu-cluster-lustre-client", boot.lustre.client_script))
        files += list(boot.lustre.files)
    files += [_script(f"{SBIN}/{step.name}", step.script) for step in boot.steps]
    if boot.apt_lock_wait_s:
        files.append({"path": APT_LOCK_DROPIN, "permissions": "0644",
                      "content": f'DPkg::Lock::Timeout "{boot.apt_lock_wait_s}";\n'})
    return files + list(boot.files)


def render(boot: BootConfig) -> str:
    """The `#cloud-config` document for `boot`."""
    runcmd: list[list[str]] = [["systemctl", "daemon-reload"]]
    mounts: list[list[str]] = []
    packages = list(boot.packages)

    if boot.scratch == "nvme" and boot.nvme_devices > 0:
        packages += ["mdadm", "xfsprogs"]
        runcmd.append(["systemctl", "enable", "--now", "gpu-cluster-scratch.service"])
    elif boot.scratch == "disk":
        packages.append("xfsprogs")
        runcmd.append(["systemctl", "enable", "--now", "gpu-cluster-scratch.service"])
    if boot.data_disk is not None:
        packages.append("xfsprogs")
        # Without waiting: the disk is attached only after the node is running.
        runcmd.append(["systemctl", "enable", "--now", "--no-block", "gpu-cluster-data.service"])
    if boot.lustre is not None:
        mounts.append([boot.lustre.source, "/lustre", "lustre", boot.lustre.options, "0", "0"])
        runcmd += [[f"{SBIN}/gpu-cluster-lustre-client"], ["mkdir", "-p", "/lustre"], ["mount", "/lustre"]]
    runcmd += [[f"{SBIN}/{step.name}"] for step in boot.steps]
    runcmd += [list(c) for c in boot.commands]

    doc: dict = {"package_update": bool(packages)}
    if boot.hostname:
        doc["hostname"] = boot.hostname
    if packages:
        doc["packages"] = sorted(set(packages))
    files = _files(boot)
    if files:
        doc["write_files"] = files
    if mounts:
        doc["mounts"] = mounts
    doc["runcmd"] = runcmd
    return "#cloud-config\n" + yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, width=1000)


USER_DATA_LIMIT = 16 * 1024
"""User data size limit on both clouds, 16 KB: EC2 counts the raw bytes before base64 ("User data is
limited to 16 KB, in raw form, before it is base64-encoded": EC2 user guide, "Run commands when you
launch an EC2 instance with user data input"); Tencent counts the base64 text (provider doc instance
v1.82.42, user_data: "Must be base64 encoded and up to 16 KB")."""


def encode(document: str) -> str:
    """A cloud-config document as base64 of its gzip (fixed mtime, so every render is byte-identical).

    A GPU node with Slurm carries ~36 KB of scripts, over the 16 KB limit; compressed it is ~14 KB
    (the largest sample, aws-large; `size_problem` refuses a render over the limit).
    cloud-init decompresses gzip user data before anything else, whatever the cloud ("Content found to
    be gzip compressed will be uncompressed ... useful because user-data size may be limited based on
    cloud platform": cloud-init documentation, "User-data formats", Gzip compressed content)."""
    return base64.b64encode(gzip.compress(document.encode(), compresslevel=9, mtime=0)).decode()


def decode(user_data: str) -> str:
    """The document `encode` made (plain base64 documents too): what a node's cloud-init reads."""
    raw = base64.b64decode(user_data)
    return (gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw).decode()


def size_problem(user_data: str, counted: str, what: str) -> str | None:
    """A sentence when `user_data` (as `encode` made it) is over the limit; counted: "raw" (AWS) or
    "base64" (Tencent)."""
    size = len(base64.b64decode(user_data)) if counted == "raw" else len(user_data)
    if size <= USER_DATA_LIMIT:
        return None
    return (f"the user data of {what} is {size} bytes ({counted}) compressed, over the {USER_DATA_LIMIT}-byte "
            f"limit; fewer shipped jobs or boot steps would fit")
