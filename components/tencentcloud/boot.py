"""What a Tencent Cloud GPU node does at boot, expressed through the shared cloud-init builder.

Only what Tencent decides lives here: the CFS Turbo client, the GPU driver installer, the NVSwitch
fabric manager, and the data disk's serial (its CBS disk id). The disk scripts, mounts and document
layout come from `components/cloudinit.py`.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import Optional

from components.catalog import Shape
import pulumi

from components.cloudinit import SBIN, BootConfig, DataDisk, LustreMount, Step, bash_script, encode, render, size_problem
from components.slurm.boot import SYSTEMD

# CFS Turbo is mounted with Tencent's Turbo client, which `cfs_turbo_client_setup` installs for the
# running kernel and refuses on a kernel it does not support (CFS documentation, "Using CFS Turbo on
# Linux clients": intl.cloud.tencent.com/document/product/582/40298; its compatibility list names
# TencentOS Server 3.1 (TK4), the default image here).
TURBO_CLIENT_URL = "https://cfsturbo-client-1251013638.cos.ap-guangzhou.myqcloud.com/tools/cfs_turbo_client_setup"
TURBO_CLIENT_SH = bash_script("gpu-cluster-lustre-client", "Install Tencent's CFS Turbo (Lustre) client for the running kernel", r"""
if modprobe -n lustre 2>/dev/null; then modprobe lustre; exit 0; fi
work=$(mktemp -d)
curl -fsSL --retry 5 -o "$work/cfs_turbo_client_setup" {url} || fail "could not download the CFS Turbo client installer"
chmod 0755 "$work/cfs_turbo_client_setup"
"$work/cfs_turbo_client_setup" || fail "the CFS Turbo client does not support kernel $(uname -r); /lustre cannot be mounted"
modprobe lustre || fail "the lustre module does not load after the Turbo client install"
rm -rf "$work"
""".replace("{url}", shlex.quote(TURBO_CLIENT_URL)))

# Tencent's "install the GPU driver automatically" is a script its console passes as user data: the
# versions go to /tmp/user_define_install_info.ini, then auto_install.sh runs from Tencent's in-VPC
# mirror and takes 15-25 minutes (GPU documentation, cloud.tencent.com/document/product/560/112129:
# partly confirmed — the file keys are taken from that document as cited by others; see the plan
# notes). The versions are ours: a driver/CUDA pair that supports T4, A10, A100 and H20.
DRIVER_INSTALL_INFO = "/tmp/user_define_install_info.ini"
DRIVER_INSTALLER_URL = "https://mirrors.tencentyun.com/install/GPU/auto_install.sh"
DRIVER_VERSIONS = {"DRIVER_VERSION": "535.161.07", "CUDA_VERSION": "12.4.0", "CUDNN_VERSION": "8.9.7"}

_DRIVER_SH = r"""
if command -v nvidia-smi > /dev/null && nvidia-smi > /dev/null 2>&1; then exit 0; fi
cat > {info} <<'EOF'
{versions}EOF
curl -fsSL --retry 5 -o /tmp/auto_install.sh {url} || fail "could not download Tencent's GPU driver installer"
bash /tmp/auto_install.sh > /var/log/gpu-driver-install.log 2>&1 || fail "the GPU driver install failed; see /var/log/gpu-driver-install.log"
nvidia-smi > /dev/null || fail "nvidia-smi does not work after the driver install"
"""

# NVSwitch GPU shapes need nvidia-fabricmanager of exactly the driver's version, "otherwise GPU
# instances cannot be used properly" (Tencent documentation, "Installing nvidia-fabricmanager on GPU
# instances"); on a RHEL-compatible image (TencentOS Server 3.1) it comes from NVIDIA's CUDA
# repository for RHEL 8 (NVIDIA Fabric Manager user guide, "Installation").
_FABRIC_MANAGER_SH = bash_script("gpu-cluster-fabric-manager", "Install and start nvidia-fabricmanager matching the driver", r"""
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1) || fail "no NVIDIA driver"
# `systemctl cat` fails for a unit that does not exist (list-unit-files may exit 0 with no match on
# older systemd, such as TencentOS 3.1's 239).
if ! systemctl cat nvidia-fabricmanager.service > /dev/null 2>&1; then
  if command -v dnf > /dev/null; then
    branch=${driver%%.*}
    dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel8/x86_64/cuda-rhel8.repo
    # NVIDIA's RHEL 8 repository ships Fabric Manager in the nvidia-driver module streams, and dnf hides
    # the builds of a stream that is not enabled (modular filtering): enable the driver's branch first,
    # then install the build of exactly this driver, as NVIDIA's own driver container does beside a
    # driver it installed from the .run file, as Tencent's installer does here (NVIDIA/gpu-driver-container
    # rhel8/install.sh: extra_pkgs_install, fabricmanager_install). Enabling a stream installs nothing.
    # The package's name and release follow that script: nvidia-fabric-manager-<v>-1 before branch 580,
    # nvidia-fabricmanager-<v>-1 on 580, nvidia-fabricmanager-<v>-1.el8 from 590.
    dnf module enable -y "nvidia-driver:$branch-dkms" || fail "NVIDIA's repository has no nvidia-driver:$branch-dkms stream"
    package="nvidia-fabric-manager-$driver-1"
    if [ "$branch" -ge 590 ]; then package="nvidia-fabricmanager-$driver-1.el8"
    elif [ "$branch" -ge 580 ]; then package="nvidia-fabricmanager-$driver-1"; fi
    dnf install -y "$package" || fail "no $package in NVIDIA's repository"
  else
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y "nvidia-fabricmanager-${driver%%.*}=$driver-*" \
      || fail "no nvidia-fabricmanager $driver in the package repositories"
  fi
fi
systemctl enable --now nvidia-fabricmanager.service || fail "nvidia-fabricmanager does not start"
""")


# RDMA on HCC nodes. Tencent's rdma-agent service configures the RDMA NICs; it "is installed by default on HCC
# GPU instances" created from its public Linux images that support RDMA (Tencent Cloud documentation,
# tencentcloud.com/document/product/1236/77056), and an HCC node has one primary NIC and eight RDMA bond NICs
# (TKE documentation, "rdma-agent", cloud.tencent.com/document/product/457/116719). The step waits for the agent,
# then proves every RDMA device's port ACTIVE with a GID at the index NCCL is told to use, and writes NCCL's
# settings to /etc/nccl.conf, which NCCL reads in every process, Slurm job or not ("NCCL_CONF_FILE ... /etc/
# nccl.conf": NCCL documentation, "Environment Variables"). The exact device count is not published, so it is
# not judged here; the Slurm health check counts them where the catalog knows the number.
RDMA_AGENT_WAIT_S = 600
_RDMA_SH = r"""
root=${GPU_CLUSTER_TEST_ROOT:-}
for ((w = 0; w < {wait}; w += 5)); do systemctl is-active --quiet rdma-agent && break; sleep 5; done
systemctl is-active --quiet rdma-agent || fail "rdma-agent is not active: the image lacks Tencent's RDMA stack"
n=0
for dev in "$root"/sys/class/infiniband/*; do
  [ -e "$dev" ] || continue
  n=$((n + 1))
  state=$(cat "$dev/ports/1/state" 2>/dev/null || echo missing)
  case "$state" in *ACTIVE*) ;; *) fail "RDMA device ${dev##*/} port 1 is $state, not ACTIVE" ;; esac
  case "$(cat "$dev/ports/1/gids/{gid_index}" 2>/dev/null || true)" in
    ''|0000:0000:0000:0000:0000:0000:0000:0000) fail "RDMA device ${dev##*/} has no GID at index {gid_index}" ;;
  esac
done
[ "$n" -ge {expected} ] || fail "$n RDMA devices, {expected} expected"
printf '%s' {nccl} > "$root"/etc/nccl.conf
echo "$NAME: $n RDMA devices ACTIVE"
"""


def rdma_step(shape: Shape) -> Step:
    """The HCC node's RDMA check — at least the catalogue's RDMA interface count (1 where unpublished), each port
    ACTIVE with a GID — and NCCL settings (the catalogue's fabric row: components/catalog/fabric.yaml)."""
    from components.slurm.fabric import fabric

    env = fabric(shape.cloud, shape.type).nccl_env
    nccl = shlex.quote("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
    return Step("gpu-cluster-rdma", bash_script(
        "gpu-cluster-rdma", "Check the HCC node's RDMA devices and write NCCL's RDMA settings",
        _RDMA_SH.replace("{wait}", str(RDMA_AGENT_WAIT_S)).replace("{gid_index}", str(env["NCCL_IB_GID_INDEX"]))
        .replace("{expected}", str(shape.rdma_interfaces or 1))
        .replace("{nccl}", nccl)))


def driver_step() -> Step:
    versions = "".join(f"{k}={v}\n" for k, v in DRIVER_VERSIONS.items())
    return Step("gpu-cluster-gpu-driver", bash_script(
        "gpu-cluster-gpu-driver", "Install the NVIDIA driver, CUDA and cuDNN with Tencent's installer",
        _DRIVER_SH.replace("{info}", DRIVER_INSTALL_INFO).replace("{versions}", versions)
        .replace("{url}", shlex.quote(DRIVER_INSTALLER_URL))))


def boot_config(*, shape: Shape, scratch: str, lustre_source: Optional[str], install_driver: bool,
                data_disk_id: Optional[str] = None) -> BootConfig:
    """What one node does at boot (its data disk is known by id)."""
    steps = []
    if install_driver:
        steps.append(driver_step())
        if shape.interconnect == "nvswitch":
            steps.append(Step("gpu-cluster-fabric-manager", _FABRIC_MANAGER_SH))
    if shape.hpc:
        steps.append(rdma_step(shape))
    return BootConfig(
        nvme_devices=shape.nvme_count,
        nvme_model=None,  # Tencent publishes no model string for local NVMe: blank, unmounted NVMe disks
        scratch=scratch,
        lustre=lustre_mount(lustre_source),
        data_disk=data_disk(data_disk_id),
        steps=tuple(steps),
    )


def lustre_mount(source: Optional[str]) -> Optional[LustreMount]:
    """/lustre from CFS Turbo, through Tencent's Turbo client."""
    return LustreMount(source=source, client_script=TURBO_CLIENT_SH) if source else None


def data_disk(disk_id: Optional[str]) -> Optional[DataDisk]:
    """A CBS disk's serial is its disk id: /dev/disk/by-id/virtio-<disk id> (Cloud Block Storage
    documentation, "Initializing Cloud Disks": intl.cloud.tencent.com/document/product/362/6734)."""
    return DataDisk(serial=disk_id) if disk_id else None


def user_data(boot: BootConfig, what: str) -> str:
    """`boot` as the instance's user_data: base64 of the gzipped #cloud-config (components/cloudinit.py
    encode), at most 16 KB of base64 (provider doc instance v1.82.42, user_data)."""
    encoded = encode(render(boot))
    problem = size_problem(encoded, "base64", what)
    if problem:
        raise pulumi.RunError(problem)
    return encoded


# The Slurm part of a GPU node's boot lives in the cluster's private boot bucket (components/slurm/bundle.py: it does
# not fit the 16 KB of user data). The node reads it with its instance role's temporary keys, which the metadata
# service hands out under cam/security-credentials/<role> (TmpSecretId, TmpSecretKey, Token: CVM documentation,
# "Querying Instance Metadata", intl.cloud.tencent.com/document/product/213/4934), signed as COS's XML API asks
# (COS documentation, "Request Signature", intl.cloud.tencent.com/document/api/436/7778: KeyTime, SignKey =
# HMAC-SHA1(SecretKey, KeyTime), HttpString "get\n<path>\n<params>\n<headers>\n", StringToSign
# "sha1\n<KeyTime>\n<SHA1(HttpString)>\n"; the temporary key's token in x-cos-security-token), from the bucket's
# default domain, which a CVM instance in the region reaches over the private network. Python 3.6's standard
# library only: this runs before anything is installed. The script runs only when its SHA-256 is the one pinned here.
COS_GET_PY = r'''
import hashlib, hmac, json, sys, time, urllib.parse, urllib.request


def _hmac(key, message):
    return hmac.new(key.encode(), message.encode(), hashlib.sha1).hexdigest()


def authorization(secret_id, secret_key, key_time, method, path, host):
    """COS's Authorization header for a request signed on its path and its host header only."""
    http = "%s\n%s\n\nhost=%s\n" % (method.lower(), path, host)
    to_sign = "sha1\n%s\n%s\n" % (key_time, hashlib.sha1(http.encode()).hexdigest())
    return ("q-sign-algorithm=sha1&q-ak=%s&q-sign-time=%s&q-key-time=%s&q-header-list=host&q-url-param-list="
            "&q-signature=%s" % (secret_id, key_time, key_time, _hmac(_hmac(secret_key, key_time), to_sign)))


if __name__ == "__main__":
    endpoint, bucket, region, key, out, credentials = sys.argv[1:7]
    with open(credentials) as f:
        c = json.load(f)
    base = endpoint % {"bucket": bucket, "region": region}
    now = int(time.time())
    key_time = "%d;%d" % (now - 60, now + 600)
    auth = authorization(c["TmpSecretId"], c["TmpSecretKey"], key_time, "get", "/" + key,
                         urllib.parse.urlsplit(base).netloc)
    request = urllib.request.Request("%s/%s" % (base, key),
                                     headers={"Authorization": auth, "x-cos-security-token": c["Token"]})
    with urllib.request.urlopen(request, timeout=60) as response, open(out, "wb") as f:
        f.write(response.read())
'''
COS_ENDPOINT = "https://%(bucket)s.cos.%(region)s.myqcloud.com"
"""A bucket's default domain (COS documentation, "Regions and Access Endpoints": <BucketName-APPID>.cos.<Region>
.myqcloud.com)."""
SLURM_FETCH_TRIES, SLURM_FETCH_RETRY_S = 20, 15
"""The role's keys, and the object, may take a moment after the node starts: 5 minutes of tries."""
_SLURM_FETCH_SH = r"""
root=${GPU_CLUSTER_TEST_ROOT:-}
metadata=${GPU_CLUSTER_METADATA_URL:-http://metadata.tencentyun.com/latest/meta-data}
# EL 8 images may have no python3 before anything is installed; dnf's own platform-python is always there.
py=$(command -v python3 || echo /usr/libexec/platform-python)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/get.py" <<'PY'
{python}
PY
for ((try = 1; ; try++)); do
  if curl -fsS -m 5 -o "$work/credentials" "$metadata/cam/security-credentials/{role}" \
      && "$py" "$work/get.py" "${GPU_CLUSTER_COS_ENDPOINT:-{endpoint}}" {bucket} {region} {key} "$work/slurm-boot" \
         "$work/credentials"; then
    break
  fi
  [ "$try" -lt {tries} ] || fail "could not read {key} from bucket {bucket} with the instance role {role}"
  sleep {retry}
done
echo "{sha256}  $work/slurm-boot" | sha256sum -c --quiet - || fail "{key} is not the Slurm boot this node was made with"
bash "$work/slurm-boot" || fail "the Slurm boot {key} failed; it runs again at the next boot and every 15 min"
mkdir -p "$(dirname "$root{done}")"
date -u +%Y-%m-%dT%H:%M:%SZ > "$root{done}"
# done: the retry timer has nothing more to do
if [ -z "$root" ]; then systemctl disable --now {timer} > /dev/null 2>&1 || true; fi
"""


_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")


SLURM_BOOT_DONE = "/var/lib/gpu-cluster/slurm-boot.done"
"""Written once this machine's Slurm boot has run to the end without a failure; until then the unit runs it again."""
SLURM_BOOT_UNIT, SLURM_BOOT_TIMER = "gpu-cluster-slurm-boot.service", "gpu-cluster-slurm-boot.timer"
SLURM_BOOT_RETRY_MIN = 15
_SLURM_BOOT_UNIT = """[Unit]
Description=Fetch and run this machine's Slurm boot until it has once run through (gpu-cluster)
Wants=network-online.target
After=network-online.target
ConditionPathExists=!{done}

[Service]
Type=oneshot
ExecStart={exec}
TimeoutStartSec=3600

[Install]
WantedBy=multi-user.target
"""
_SLURM_BOOT_TIMER = """[Unit]
Description=Try this machine's Slurm boot again every {every} min until it has run through (gpu-cluster)

[Timer]
OnBootSec={every}min
OnUnitInactiveSec={every}min

[Install]
WantedBy=timers.target
"""


def slurm_fetch_script(*, bucket: str, key: str, sha256: str, region: str, role: str) -> str:
    """The script that fetches the machine's Slurm boot from the boot bucket, checks its hash, runs it, and marks it
    done (SLURM_BOOT_DONE) only when it ran through."""
    for name, value in (("bucket", bucket), ("key", key), ("region", region), ("role", role)):
        if not _SAFE.match(value):
            raise ValueError(f"slurm_fetch_script: {name} {value!r} is not a plain name")
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError(f"slurm_fetch_script: {sha256!r} is not a SHA-256")
    return bash_script(
        "gpu-cluster-slurm-boot", "Fetch this machine's Slurm boot from the cluster's boot bucket and run it",
        _SLURM_FETCH_SH.replace("{python}", COS_GET_PY.strip("\n")).replace("{endpoint}", COS_ENDPOINT)
        .replace("{bucket}", bucket).replace("{region}", region).replace("{key}", key).replace("{role}", role)
        .replace("{sha256}", sha256).replace("{tries}", str(SLURM_FETCH_TRIES))
        .replace("{retry}", str(SLURM_FETCH_RETRY_S)).replace("{done}", SLURM_BOOT_DONE)
        .replace("{timer}", SLURM_BOOT_TIMER))


def with_slurm_boot(base: BootConfig, packages: tuple[str, ...], boot_object: tuple[str, str, str], region: str,
                    role: str) -> BootConfig:
    """`base` (a node's or the head node's own boot) plus its Slurm part from the boot bucket: the packages cloud-init
    installs, and a unit that fetches and runs the rest (slurm_fetch_script), at first boot after the machine's own
    steps, and again at every boot and every SLURM_BOOT_RETRY_MIN until it has run through once: a package mirror
    or the bucket out of reach for a while does not leave the machine without Slurm for good."""
    bucket, key, sha = boot_object
    script = f"{SBIN}/gpu-cluster-slurm-boot"
    files = (
        {"path": script, "permissions": "0755", "owner": "root:root",
         "content": slurm_fetch_script(bucket=bucket, key=key, sha256=sha, region=region, role=role)},
        {"path": f"{SYSTEMD}/{SLURM_BOOT_UNIT}", "permissions": "0644", "owner": "root:root",
         "content": _SLURM_BOOT_UNIT.replace("{done}", SLURM_BOOT_DONE).replace("{exec}", script)},
        {"path": f"{SYSTEMD}/{SLURM_BOOT_TIMER}", "permissions": "0644", "owner": "root:root",
         "content": _SLURM_BOOT_TIMER.replace("{every}", str(SLURM_BOOT_RETRY_MIN))},
    )
    commands = (("systemctl", "daemon-reload"), ("systemctl", "enable", SLURM_BOOT_UNIT, SLURM_BOOT_TIMER),
                ("systemctl", "start", SLURM_BOOT_UNIT), ("systemctl", "start", SLURM_BOOT_TIMER))
    return dataclasses.replace(base, packages=tuple(base.packages) + tuple(packages),
                               files=tuple(base.files) + files, commands=tuple(base.commands) + commands)
