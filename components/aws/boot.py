"""What an AWS GPU node does at boot, expressed through the shared cloud-init builder.

Only what AWS decides lives here: how its disks are recognised, where the node learns its data
volume's id, how the FSx Lustre client and the CloudWatch agent are installed. The Deep Learning
AMI ships the NVIDIA driver, EFA, aws-ofi-nccl and DCGM, but its release notes list neither the
Lustre client nor the CloudWatch agent (docs.aws.amazon.com/dlami/latest/devguide/, "Base OSS Nvidia
Driver GPU AMI (Ubuntu 24.04)" release notes), so both are installed here.
"""

from __future__ import annotations

import shlex
from typing import Optional

from components.catalog import Shape
from components.cloudinit import REBOOT_PENDING, BootConfig, DataDisk, ImageScratch, LustreMount, Step, bash_script

NVME_MODEL = "Amazon EC2 NVMe Instance Storage"
EBS_MODEL = "Amazon Elastic Block Store"
"""Model strings of instance-store and EBS NVMe devices (EC2 user guide, "Amazon EBS and NVMe":
docs.aws.amazon.com/ebs/latest/userguide/nvme-ebs-volumes.html)."""

DLAMI_SCRATCH = ImageScratch(service="dlami-nvme.service", mountpoint="/opt/dlami/nvme")
"""The DLAMI stripes the instance-store drives itself at every boot (dlami-nvme.service, mounted at
/opt/dlami/nvme; DLAMI release notes `nvme_location`), and may still be running when user data starts:
the scratch unit is ordered after it and uses its volume when it exists."""

DATA_VOLUME_TAG = "gpu-cluster:data-volume"
"""Instance tag holding the node's data volume id. The node reads it from the instance metadata
(instance_metadata_tags enabled; ':' is allowed in such keys — EC2 user guide, "Work with instance
tags in instance metadata")."""

# The NVMe serial of an EBS volume is its volume id without the dash (EC2 user guide, "Amazon EBS and
# NVMe": "NVMe EBS volumes have the EBS volume ID set as the serial number").
DATA_SERIAL_FROM_IMDS = f"""token=$(curl -fsS --retry 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' \\
  http://169.254.169.254/latest/api/token)
volume=$(curl -fsS --retry 5 -H "X-aws-ec2-metadata-token: $token" \\
  http://169.254.169.254/latest/meta-data/tags/instance/{DATA_VOLUME_TAG})
echo "${{volume//-/}}"
"""

KERNEL_SWITCHED = "/var/lib/gpu-cluster/lustre-kernel"
"""The kernel a node switched to for the Lustre client: it switches once, never in a loop."""
REBOOT_UNIT = "gpu-cluster-reboot-for-lustre.service"

APT_LOCK_WAIT_S = 600
"""How long the boot's apt-get waits for the dpkg lock on the Ubuntu images (the Lustre client and the
CloudWatch agent installs; the Lustre script retries `apt-get update` as long, since the package
lists' lock never waits)."""
APT_UPDATE_POLL_S = 10
"""Seconds between the Lustre script's `apt-get update` tries."""


# FSx for Lustre client on Ubuntu (FSx for Lustre user guide, "Installing the Lustre client", Ubuntu:
# docs.aws.amazon.com/fsx/latest/LustreGuide/install-lustre-client.html). The repository builds one
# package per kernel, `lustre-client-modules-<uname -r>`, and can trail the kernels the images boot.
# Then, as the guide says for a kernel it has no client for, the node boots a kernel it has one for:
# the newest of the same flavour with a client in the FSx repository and an image and headers in
# Ubuntu's archive. Before it reboots it checks that every driver the node runs now (NVIDIA, EFA,
# GDRCopy) is built for that kernel (DKMS rebuilds them when its headers are installed; a driver from
# a kernel-versioned package gets the same package for the new kernel); otherwise it stays on its
# kernel without /lustre and says why (the health check then drains the node with that reason).
# GRUB boots the chosen kernel from then on (GRUB_DEFAULT as a "submenu>entry" title path,
# GNU GRUB manual, "Simple configuration handling"), and the reboot waits for cloud-init to finish.
LUSTRE_CLIENT_SH = bash_script("gpu-cluster-lustre-client", "Install the FSx for Lustre client", "\n".join((
    f"SWITCHED={shlex.quote(KERNEL_SWITCHED)}", f"PENDING={shlex.quote(REBOOT_PENDING)}",
    f"REBOOT_UNIT={shlex.quote(REBOOT_UNIT)}", "GRUB_DROPIN=/etc/default/grub.d/99-gpu-cluster-lustre.cfg",
    "GRUB_CFG=/boot/grub/grub.cfg", "KEYRING=/usr/share/keyrings/fsx-ubuntu-public-key.gpg",
    "SOURCES=/etc/apt/sources.list.d/fsxlustreclientrepo.list")) + r"""
if modprobe -n lustre 2>/dev/null; then modprobe lustre; exit 0; fi
kernel=$(uname -r)
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
[ -n "$codename" ] || fail "cannot tell the Ubuntu release from /etc/os-release"
curl -fsSL --retry 5 https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc \
  | gpg --dearmor --yes -o "$KEYRING" || fail "could not fetch the FSx client repository key"
echo "deb [signed-by=$KEYRING] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $codename main" > "$SOURCES"
# apt-get update takes /var/lib/apt/lists/lock without waiting (apt's DPkg::Lock::Timeout covers only
# the dpkg lock), and apt-daily holds it at many a first boot: try again for as long as the dpkg wait.
for _ in $(seq 1 {update_tries}); do
  if apt-get update -q; then updated=1; break; fi
  sleep {update_poll}
done
[ "${updated:-0}" = 1 ] || fail "apt-get update failed for {update_minutes} minutes (apt-daily holding /var/lib/apt/lists/lock?)"
export DEBIAN_FRONTEND=noninteractive
if apt-cache show "lustre-client-modules-$kernel" > /dev/null 2>&1; then
  apt-get install -y -q "lustre-client-modules-$kernel" || fail "installing the Lustre client failed"
  modprobe lustre || fail "the lustre module does not load"
  exit 0
fi
if [ -s "$SWITCHED" ]; then
  fail "kernel $kernel has no FSx Lustre client, although this node switched to kernel $(cat "$SWITCHED") for one; /lustre stays unmounted"
fi
flavour=${kernel#*-*-}
# The drivers this node runs, and the package of each one that is built per kernel.
drivers=()
driver_packages=()
for module in nvidia efa gdrdrv; do
  file=$(modinfo -n "$module" 2>/dev/null) || continue
  drivers+=("$module:$file")
  owner=$(dpkg -S "$file" 2>/dev/null | cut -d: -f1 || true)
  case "$owner" in *"$kernel"*) driver_packages+=("$owner") ;; esac
done
# One package per `apt-cache show`: given several, it succeeds when any one exists.
has() { apt-cache show "$1" > /dev/null 2>&1; }
target=""
packages=()
for version in $(apt-cache pkgnames lustre-client-modules- | sed -n "s/^lustre-client-modules-\(.*-$flavour\)\$/\1/p" | sort -V -r); do
  want=("linux-image-$version" "linux-headers-$version" "lustre-client-modules-$version")
  for package in "${driver_packages[@]}"; do want+=("${package//$kernel/$version}"); done
  complete=1
  for package in "${want[@]}"; do has "$package" || { complete=0; break; }; done
  if [ "$complete" = 1 ]; then
    target=$version
    packages=("${want[@]}")
    break
  fi
done
[ -n "$target" ] || fail "the FSx Lustre repository has no client for kernel $kernel, nor for any $flavour kernel in the Ubuntu archive; /lustre cannot be mounted"
if has "linux-modules-extra-$target"; then packages+=("linux-modules-extra-$target"); fi
apt-get install -y -q "${packages[@]}" || fail "installing kernel $target with its Lustre client failed"
# Without its drivers the other kernel must never boot, not even at a later ordinary reboot.
undo() { apt-get purge -y -q "linux-image-$target" "linux-headers-$target" > /dev/null 2>&1 || true; }
for entry in "${drivers[@]}"; do
  module=${entry%%:*}
  file=${entry#*:}
  built=$(modinfo -k "$target" -n "$module" 2>/dev/null) || built=""
  case "$file:$built" in
    *:) ;;  # not built for it at all
    */updates/*:*/updates/*) continue ;;
    */updates/*:*) ;;  # only the kernel's own module, not the one DKMS built for this node
    *) continue ;;
  esac
  undo
  fail "driver $module is not built for kernel $target, so the node stays on kernel $kernel, which has no FSx Lustre client; /lustre stays unmounted"
done
printf 'GRUB_DEFAULT="Advanced options for Ubuntu>Ubuntu, with Linux %s"\n' "$target" > "$GRUB_DROPIN"
update-grub || fail "update-grub failed"
if ! grep -qF "submenu 'Advanced options for Ubuntu'" "$GRUB_CFG" || ! grep -qF "'Ubuntu, with Linux $target'" "$GRUB_CFG"; then
  rm -f "$GRUB_DROPIN"
  update-grub || true
  undo
  fail "GRUB has no entry 'Advanced options for Ubuntu>Ubuntu, with Linux $target'; the node stays on kernel $kernel without /lustre"
fi
mkdir -p "$(dirname "$SWITCHED")" "$(dirname "$PENDING")"
echo "$target" > "$SWITCHED"
touch "$PENDING"
systemctl start --no-block "$REBOOT_UNIT"
echo "$NAME: kernel $kernel has no FSx Lustre client; booting kernel $target, which has one, once cloud-init is done"
""".replace("{update_tries}", str(APT_LOCK_WAIT_S // APT_UPDATE_POLL_S)).replace("{update_poll}", str(APT_UPDATE_POLL_S))
    .replace("{update_minutes}", str(APT_LOCK_WAIT_S // 60)))

# Reboots the node into the kernel chosen above once cloud-init's final stage (the rest of the first
# boot: Slurm setup, agents) is done, and the disk units it started without waiting (a data disk being
# formatted); enabled nowhere, started only by the client script.
REBOOT_UNIT_FILE = """[Unit]
Description=Reboot into the kernel with the FSx Lustre client (gpu-cluster)
After=cloud-final.service gpu-cluster-data.service gpu-cluster-scratch.service

[Service]
Type=oneshot
ExecStart=/usr/bin/systemctl reboot
"""


CLOUDWATCH_AGENT_CTL = "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl"

# The CloudWatch agent package for Ubuntu, its signature checked against Amazon's published key
# fingerprint (CloudWatch user guide, "Download the CloudWatch agent package" and "Verifying the
# signature of the CloudWatch agent package"), then started with its configuration from SSM
# Parameter Store (`amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c ssm:<name>`).
CLOUDWATCH_AGENT_SH = r"""
PARAMETER={parameter}
CTL={ctl}
FINGERPRINT=937616F3450B7D806CBD9725D58167303B789C72
if [ ! -x "$CTL" ]; then
  arch=$(dpkg --print-architecture)
  base="https://s3.amazonaws.com/amazoncloudwatch-agent"
  work=$(mktemp -d)
  curl -fsSL --retry 5 -o "$work/agent.deb" "$base/ubuntu/$arch/latest/amazon-cloudwatch-agent.deb" || fail "download failed"
  curl -fsSL --retry 5 -o "$work/agent.deb.sig" "$base/ubuntu/$arch/latest/amazon-cloudwatch-agent.deb.sig" || fail "download failed"
  curl -fsSL --retry 5 -o "$work/agent.gpg" "$base/assets/amazon-cloudwatch-agent.gpg" || fail "download failed"
  export GNUPGHOME="$work/gnupg"
  mkdir -m 700 "$GNUPGHOME"
  gpg --batch --quiet --import "$work/agent.gpg"
  # grep -c reads all of gpg's output (grep -q would stop early and, with pipefail, SIGPIPE gpg).
  gpg --batch --with-colons --fingerprint | grep -c "^fpr:::::::::$FINGERPRINT:" > /dev/null || fail "unexpected signing key"
  gpg --batch --verify "$work/agent.deb.sig" "$work/agent.deb" || fail "the agent package signature does not verify"
  # apt-get, not dpkg -i: it waits for the dpkg lock (APT_LOCK_DROPIN, components/cloudinit.py).
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$work/agent.deb" || fail "installing the agent failed"
  rm -rf "$work"
fi
"$CTL" -a fetch-config -m ec2 -s -c "ssm:$PARAMETER" || fail "the agent did not start with ssm:$PARAMETER"
"""


def lustre_mount(source: str) -> LustreMount:
    """/lustre from FSx, with the client install (and the unit that may reboot into a kernel for it)."""
    return LustreMount(source=source, client_script=LUSTRE_CLIENT_SH, files=(
        {"path": f"/etc/systemd/system/{REBOOT_UNIT}", "permissions": "0644", "owner": "root:root",
         "content": REBOOT_UNIT_FILE},))


def boot_config(shape: Shape, scratch: str, cloudwatch_parameter: str, lustre_source: Optional[str],
                data_disk: bool, image_scratch: bool = True) -> BootConfig:
    """What every node does at boot: /scratch, /data (by volume id), /lustre, then the GPU metrics agent.

    `image_scratch`: the image may stripe the local NVMe itself (the default DLAMI does).
    """
    return BootConfig(
        nvme_devices=shape.nvme_count,
        nvme_model=NVME_MODEL,
        scratch=scratch,
        disk_model=EBS_MODEL,
        image_scratch=DLAMI_SCRATCH if image_scratch else None,
        lustre=lustre_mount(lustre_source) if lustre_source else None,
        data_disk=DataDisk(serial_command=DATA_SERIAL_FROM_IMDS) if data_disk else None,
        steps=(Step("gpu-cluster-cloudwatch-agent", bash_script(
            "gpu-cluster-cloudwatch-agent", "Install and start the CloudWatch agent with the cluster's GPU metrics",
            CLOUDWATCH_AGENT_SH.format(parameter=shlex.quote(cloudwatch_parameter), ctl=CLOUDWATCH_AGENT_CTL))),),
        apt_lock_wait_s=APT_LOCK_WAIT_S,
    )
