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
from components.cloudinit import BootConfig, DataDisk, ImageScratch, LustreMount, Step, bash_script

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

# FSx for Lustre client on Ubuntu, pinned to the running kernel (FSx for Lustre user guide,
# "Installing the Lustre client", Ubuntu: docs.aws.amazon.com/fsx/latest/LustreGuide/
# install-lustre-client.html). The repository builds one package per kernel; when the AMI's kernel is
# newer than the newest client, the install fails loudly instead of leaving /lustre unmounted unnoticed.
LUSTRE_CLIENT_SH = bash_script("gpu-cluster-lustre-client", "Install the FSx for Lustre client for the running kernel", r"""
if modprobe -n lustre 2>/dev/null; then modprobe lustre; exit 0; fi
kernel=$(uname -r)
codename=$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release)
[ -n "$codename" ] || fail "cannot tell the Ubuntu release from /etc/os-release"
keyring=/usr/share/keyrings/fsx-ubuntu-public-key.gpg
curl -fsSL --retry 5 https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc \
  | gpg --dearmor --yes -o "$keyring" || fail "could not fetch the FSx client repository key"
echo "deb [signed-by=$keyring] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu $codename main" \
  > /etc/apt/sources.list.d/fsxlustreclientrepo.list
apt-get update -q || fail "apt-get update failed"
apt-cache show "lustre-client-modules-$kernel" > /dev/null 2>&1 \
  || fail "the FSx Lustre repository has no client for kernel $kernel; /lustre cannot be mounted until one is published"
DEBIAN_FRONTEND=noninteractive apt-get install -y -q "lustre-client-modules-$kernel" || fail "installing the Lustre client failed"
modprobe lustre || fail "the lustre module does not load"
""")

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
  gpg --batch --with-colons --fingerprint | grep -q "^fpr:::::::::$FINGERPRINT:" || fail "unexpected signing key"
  gpg --batch --verify "$work/agent.deb.sig" "$work/agent.deb" || fail "the agent package signature does not verify"
  dpkg -i -E "$work/agent.deb" || fail "installing the agent failed"
  rm -rf "$work"
fi
"$CTL" -a fetch-config -m ec2 -s -c "ssm:$PARAMETER" || fail "the agent did not start with ssm:$PARAMETER"
"""


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
        lustre=LustreMount(source=lustre_source, client_script=LUSTRE_CLIENT_SH) if lustre_source else None,
        data_disk=DataDisk(serial_command=DATA_SERIAL_FROM_IMDS) if data_disk else None,
        steps=(Step("gpu-cluster-cloudwatch-agent", bash_script(
            "gpu-cluster-cloudwatch-agent", "Install and start the CloudWatch agent with the cluster's GPU metrics",
            CLOUDWATCH_AGENT_SH.format(parameter=shlex.quote(cloudwatch_parameter), ctl=CLOUDWATCH_AGENT_CTL))),),
    )
