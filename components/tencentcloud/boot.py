"""What a Tencent node does at boot, expressed through the shared cloud-init builder.

Only the Tencent-specific parts live here (scratch disk device, Turbo mount source, GPU driver
installer); the RAID0 script, mounts and document layout come from `components/cloudinit.py`.
"""

from __future__ import annotations

from typing import Optional

from components.cloudinit import BootConfig, LustreMount, render

SCRATCH_DISK_DEVICE = "/dev/vdb"
"""The first data disk declared on a CVM (virtio); the persistent CBS disk is attached later and
comes after it. Unconfirmed for bare-metal HCC hosts, which never get a scratch disk here."""

# Tencent's "install GPU driver automatically" is a user-data script: write the versions to
# /tmp/user_define_install_info.ini and run auto_install.sh from Tencent's in-VPC mirror; it takes
# 10-25 minutes after boot (cloud.tencent.com/document/product/560/112129, facts/tencentcloud.md
# "Images and drivers"; partly confirmed). The versions are ours: a driver/CUDA pair that supports
# T4, A10, A100 and H20.
DRIVER_INSTALL_INFO = "/tmp/user_define_install_info.ini"
DRIVER_INSTALLER_URL = "https://mirrors.tencentyun.com/install/GPU/auto_install.sh"
DRIVER_VERSIONS = {"DRIVER_VERSION": "535.161.07", "CUDA_VERSION": "12.4.0", "CUDNN_VERSION": "8.9.7"}


def driver_install() -> tuple[tuple[dict, ...], tuple[tuple[str, ...], ...]]:
    """(write_files entries, commands) that install the NVIDIA driver, CUDA and cuDNN at first boot."""
    info = "".join(f"{k}={v}\n" for k, v in DRIVER_VERSIONS.items())
    files = ({"path": DRIVER_INSTALL_INFO, "permissions": "0644", "owner": "root:root", "content": info},)
    commands = (("bash", "-c", f"curl -fsSL --retry 5 {DRIVER_INSTALLER_URL} -o /tmp/auto_install.sh "
                               f"&& bash /tmp/auto_install.sh > /var/log/gpu-driver-install.log 2>&1"),)
    return files, commands


def user_data(*, nvme_devices: int, scratch: str, lustre_source: Optional[str], install_driver: bool,
              data_disk_gb: int = 0) -> str:
    """The #cloud-config document of a node."""
    files, commands = driver_install() if install_driver else ((), ())
    return render(BootConfig(
        nvme_devices=nvme_devices,
        nvme_model=None,  # Tencent publishes no model string for HCC local NVMe: take blank NVMe disks
        scratch=scratch,
        scratch_disk=SCRATCH_DISK_DEVICE if scratch == "disk" else None,
        lustre=LustreMount(source=lustre_source) if lustre_source else None,
        # CBS disks are virtio and carry no model string; the scratch disk may have the same size.
        data_disk_gb=data_disk_gb,
        data_disk_exclude=(SCRATCH_DISK_DEVICE,) if scratch == "disk" else (),
        files=files,
        commands=commands,
    ))
