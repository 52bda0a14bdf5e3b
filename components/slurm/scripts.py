"""The bash scripts a head node and a GPU node run, generated from data.

Every script starts with `set -euo pipefail`, a block of `NAME='value'` assignments (the only
place a generated value appears, each one shlex-quoted) and cloud commands rendered from token
tuples (components.slurm.shell, components.slurm.clouds). The bodies below are fixed text: they
read those variables and never have values pasted into them. Each script is idempotent (safe on
every boot) and reports a failure with a message naming what it expected and what it found.

Scripts (installed under Paths.bin):
  node-identity  GPU node: work out <cluster>-node-<i> and write it to Paths.node_name_file.
  munge-key      head: read the munge key from the secret store, or make it and store it when the
                 secret has no value yet; GPU node: wait for the key to appear. Installs it as
                 /etc/munge/munge.key (munge:munge 0400) and restarts munge.
  node-health    GPU node: GPUs, NVLink, fabric manager, EFA/RDMA, mounts, random reads; writes
                 PASS/FAIL to Paths.health_status_file and publishes the metric. --drain also
                 applies the result to Slurm at once (health-gate).
  health-gate    GPU node, slurmd's HealthCheckProgram (run before slurmd registers and every
                 HealthCheckInterval): drains the node with the failure as the reason, or resumes
                 it when the last check passed and the drain was ours.
  spot-watch     GPU node: polls the cloud's spot-interruption notice; on notice sets the node DOWN
                 so Slurm requeues its batch jobs (JobRequeue=1) before the instance goes away.
  node-setup     GPU node boot: identity, munge key, jobs' credentials, health check, slurmd options.
  head-setup     head node boot: state and shared directories, munge key.
  metadata-guard head and GPU node, before slurmctld / slurmd and every boot: closes the metadata
                 service to every user but root (an owner-match firewall rule).
  job-credentials GPU node (AWS, with a checkpoint bucket), at boot and every 15 min: temporary
                 credentials of the jobs' own role, for the AWS config that task-prolog points jobs at.
  task-prolog    slurmd's TaskProlog: points every task at that AWS config.
"""

from __future__ import annotations

from typing import Sequence

from components.cloudinit import DATA_WAIT_SECONDS, REBOOT_PENDING
from components.slurm import shell
from components.slurm.clouds import ops
from components.clouds import profile
from components.slurm.conf import SLURMCTLD_PORT, SlurmCluster
from components.slurm.fabric import fabric, fio_settings, gpu_mem_min_fraction

HEALTH_REASON_PREFIX = "gpu-cluster-health:"
NODE_SETUP_UNIT = "gpu-cluster-node-setup.service"
"""The GPU node's setup unit (components/slurm/boot.py writes it; health-recheck restarts a failed one)."""
SPOT_REASON_PREFIX = "spot-interruption:"
MUNGE_WAIT_S = 1800
MOUNT_WAIT_S = DATA_WAIT_SECONDS + 120
"""How long the boot scripts wait for a mount: longer than the data-disk unit may take (it waits
cloudinit.DATA_WAIT_SECONDS for its disk, under a TimeoutStartSec a minute longer), so /data is never
given up on first."""
POLL_S = 5
JOB_END_WAIT_S = 120
"""How long health-recheck waits for requeued jobs to leave a failing node before it resets it (Slurm's KillWait,
30 s by default, then the epilog)."""
"""How often the boot scripts look again while they wait (mounts, the fabric manager)."""
FABRIC_MANAGER_WAIT_S = 180
"""How long the health check waits for nvidia-fabricmanager while it is still `activating` at boot
(it starts only once it has initialised every NVSwitch)."""
DEFAULT_MUNGE_RESTART = ("systemctl", "restart", "munge")
METADATA_GUARD_CHAIN = "GPU-CLUSTER-METADATA"
"""The iptables chain that lets only root through to the metadata service."""
NOBODY_UID = 65534
"""Debian's and Ubuntu's `nobody` and `nogroup` (base-passwd: uid and gid 65534): the non-root user the
health check proves the metadata service closed to."""
JOB_CREDENTIALS_S = 3600
"""Lifetime of the jobs' credentials: the most a role assumed with an instance role's credentials may
have (role chaining: IAM user guide, "Methods to assume a role")."""
JOB_CREDENTIALS_EVERY_MIN = 15
"""How often root renews them: they then always have at least 45 minutes left, more than the SDKs'
15-minute early refresh (botocore credentials.py, RefreshableCredentials advisory refresh)."""
JOB_CREDENTIALS_MIN_LEFT_S = 1200
"""The health check fails when the jobs' credentials have less than this left: renewal has stopped."""


FM_STATE_FUNCTION = r'''fm_state() {
  # nvidia-fabricmanager's ActiveState: active, activating, failed, inactive (also for no such unit).
  systemctl show -p ActiveState --value nvidia-fabricmanager 2>/dev/null || true
}'''
NODE_REASON_FUNCTION = r'''node_reason() {
  # The Reason of a `scontrol show node -o` line ($1), without the " [user@time]" Slurm appends to it.
  printf '%s\n' "$1" | sed -n 's/.* Reason=\(.*\) \[.*/\1/p'
}'''
MOUNTED_FUNCTION = r'''mounted() {
  # A real mount, not systemd's automount placeholder (x-systemd.automount in fstab), which
  # `mountpoint` also reports: reaching inside triggers the automount, and an unmountable file system
  # then shows as autofs or fails.
  mountpoint -q "$1" || return 1
  local fstype
  fstype=$(timeout 90 stat -f -c %T "$1/." 2>/dev/null) || return 1
  [ "$fstype" != autofs ]
}'''


def _script(title: str, values: dict, body: str, functions: Sequence[str] = ()) -> str:
    parts = ["#!/bin/bash", f"# {title} (written by gpu-cluster).", "set -euo pipefail",
             shell.assignments(values) if values else ""]
    parts += list(functions)
    parts.append(body.strip("\n"))
    return "\n".join(p for p in parts if p) + "\n"


# ---------------------------------------------------------------------------------------------
_IDENTITY_BODY = r'''
if [ -z "$NODE_INDEX" ]; then
  if [ -z "$INDEX_PATH" ]; then
    echo "node-identity: no node index was written into this node's user data" >&2
    exit 1
  fi
  for _ in $(seq 1 30); do
    NODE_INDEX=$(metadata_get "$INDEX_PATH") && break
    NODE_INDEX=""
    sleep 2
  done
fi
case "$NODE_INDEX" in
  ''|*[!0-9]*)
    echo "node-identity: expected a node index (0-$((NODES - 1))) from metadata '$INDEX_PATH', got '$NODE_INDEX'" >&2
    exit 1 ;;
esac
if [ "$NODE_INDEX" -ge "$NODES" ]; then
  echo "node-identity: node index $NODE_INDEX is outside this cluster's $NODES nodes" >&2
  exit 1
fi
name="${CLUSTER_NAME}-node-${NODE_INDEX}"
mkdir -p "$(dirname "$NAME_FILE")"
printf '%s\n' "$name" > "$NAME_FILE.tmp"
mv "$NAME_FILE.tmp" "$NAME_FILE"
echo "$name"
'''


def node_identity_script(c: SlurmCluster, node_index: int | None = None) -> str:
    """Works out the node's Slurm name. `node_index` is written in when the node's own user data
    carries it (Tencent); otherwise it is read from metadata (AWS: the gpu-cluster:node tag)."""
    o = ops(c.cloud)
    if node_index is None and o.node_index_path is None:
        raise ValueError(f"{c.cloud} nodes do not share user data: pass node_index for each node")
    if node_index is not None and not 0 <= node_index < c.nodes:
        raise ValueError(f"node_index {node_index} outside 0..{c.nodes - 1}")
    return _script("Work out this GPU node's Slurm name", {
        "CLUSTER_NAME": c.name, "NODES": c.nodes,
        "NODE_INDEX": "" if node_index is None else node_index,
        "INDEX_PATH": o.node_index_path or "", "NAME_FILE": c.paths.node_name_file,
    }, _IDENTITY_BODY, [o.metadata_function])


# ---------------------------------------------------------------------------------------------
_MUNGE_BODY = r'''
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Both request forms; the cloud's secret_put reads the one it needs.
export SECRET_VALUE_INPUT="file://$work/value"
export SECRET_JSON_INPUT="file://$work/request.json"

# Prints the stored base64 key. Returns 3 when the secret has no value yet, 1 on any other error.
fetch() {
  local out rc=0
  out=$(secret_get 2>"$work/err") || rc=$?
  if [ "$rc" -ne 0 ]; then
    if grep -q -- "$SECRET_MISSING" "$work/err"; then
      return 3
    fi
    echo "munge-key: reading secret $SECRET_ID failed (exit $rc): $(head -c 2000 "$work/err")" >&2
    return 1
  fi
  printf '%s' "$out" | secret_extract
}

store_new_key() {
  dd if=/dev/urandom bs=1024 count=1 2>/dev/null | base64 -w0 > "$work/value"
  python3 - "$SECRET_ID" "$SECRET_VERSION" "$work/value" "$work/request.json" <<'PY'
import json, sys
name, version, value_file, out = sys.argv[1:5]
with open(value_file) as f:
    value = f.read()
with open(out, "w") as f:
    json.dump({"SecretName": name, "VersionId": version, "SecretString": value}, f)
PY
  if ! secret_put > "$work/put.out" 2>&1; then
    echo "munge-key: storing a new key in secret $SECRET_ID failed: $(head -c 2000 "$work/put.out")" >&2
    return 1
  fi
  echo "munge-key: generated a new munge key and stored it in secret $SECRET_ID"
}

rc=0
key=$(fetch) || rc=$?
if [ "$rc" -eq 3 ] && [ "$MODE" = head ]; then
  store_new_key
  rc=0
  # Read back what the store holds, so every node uses the same stored value.
  key=$(fetch) || rc=$?
fi
if [ "$rc" -eq 3 ]; then
  echo "munge-key: secret $SECRET_ID has no value yet; waiting up to ${WAIT_S}s for the head node to store it"
  deadline=$((SECONDS + WAIT_S))
  while [ "$rc" -eq 3 ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep "$POLL_S"
    rc=0
    key=$(fetch) || rc=$?
  done
fi
if [ "$rc" -eq 3 ]; then
  echo "munge-key: secret $SECRET_ID still has no value after ${WAIT_S}s" >&2
  exit 1
fi
[ "$rc" -eq 0 ] || exit 1

if ! printf '%s' "$key" | base64 -d > "$work/key" 2>/dev/null; then
  echo "munge-key: the value of secret $SECRET_ID is not base64" >&2
  exit 1
fi
size=$(stat -c %s "$work/key")
if [ "$size" -lt 32 ] || [ "$size" -gt 1024 ]; then
  echo "munge-key: the key in secret $SECRET_ID is $size bytes; munge needs 32-1024" >&2
  exit 1
fi
key_dir=$(dirname "$KEY_FILE")
if [ ! -d "$key_dir" ]; then
  install -d -o "$MUNGE_USER" -g "$MUNGE_USER" -m 0700 "$key_dir"
fi
if [ -f "$KEY_FILE" ] && cmp -s "$work/key" "$KEY_FILE"; then
  echo "munge-key: $KEY_FILE already holds the stored key"
else
  install -o "$MUNGE_USER" -g "$MUNGE_USER" -m 0400 "$work/key" "$KEY_FILE"
  echo "munge-key: installed the key from secret $SECRET_ID at $KEY_FILE"
fi
restart_munge
'''


def munge_key_script(c: SlurmCluster, mode: str, restart: Sequence[str] = DEFAULT_MUNGE_RESTART,
                     wait_s: int = MUNGE_WAIT_S, poll_s: int = 10, key_owner: str = "munge") -> str:
    """The munge key, from the cloud's secret store. mode "head": make and store it when the
    secret has no value yet; mode "node": wait for it. Only the secret's name is in the script."""
    if mode not in ("head", "node"):
        raise ValueError(f"mode must be head or node, got {mode!r}")
    o = ops(c.cloud)
    return _script(f"Install the cluster's munge key ({mode})", {
        "MODE": mode, "REGION": c.region, "SECRET_ID": c.munge_secret_id,
        "SECRET_VERSION": c.munge_secret_version, "SECRET_MISSING": o.secret_missing,
        "KEY_FILE": c.paths.munge_key, "MUNGE_USER": key_owner, "WAIT_S": wait_s, "POLL_S": poll_s,
    }, _MUNGE_BODY, [shell.function("secret_get", o.secret_get),
                     shell.function("secret_extract", o.secret_extract),
                     shell.function("secret_put", o.secret_put),
                     shell.function("restart_munge", tuple(restart))])


# ---------------------------------------------------------------------------------------------
_HEALTH_BODY = r'''
DRAIN=0
WATCH=0
case "${1:-}" in
  --drain) DRAIN=1 ;;
  # --watch (a timer, between full checks): GPUs and ECC only, and only on a node whose last check
  # passed (a failing one is drained already; health-recheck owns it). Nothing is written unless they fail.
  --watch) DRAIN=1; WATCH=1 ;;
  "") ;;
  *) echo "usage: node-health [--drain | --watch]" >&2; exit 64 ;;
esac
failures=()
fail() { failures+=("$1"); echo "node-health: FAIL: $1" >&2; }
ok() { echo "node-health: ok: $1"; }

NODE_NAME=$(cat "$NODE_NAME_FILE" 2>/dev/null || true)
if [ -z "$NODE_NAME" ]; then
  echo "node-health: $NODE_NAME_FILE is missing: run node-identity first" >&2
  exit 1
fi
if [ "$WATCH" = 1 ] && [ "$(sed -n 1p "$STATUS_FILE" 2>/dev/null || true)" != PASS ]; then
  exit 0
fi

# The result: the status file the health gate reads, then the metric; with --drain, applied.
finish() {
  mkdir -p "$(dirname "$STATUS_FILE")"
  if [ "${#failures[@]}" -eq 0 ]; then
    printf 'PASS\n' > "$STATUS_FILE.tmp"
    rm -f "$REBOOT_MARK" "$REPLACE_MARK"  # health-recheck's reboot and replacement start over
    METRIC_VALUE=1
  else
    reason=$(printf '%s; ' "${failures[@]}")
    reason=${reason%; }
    printf 'FAIL\n%s\n' "${reason:0:400}" > "$STATUS_FILE.tmp"
    METRIC_VALUE=0
  fi
  mv "$STATUS_FILE.tmp" "$STATUS_FILE"

  published=1
  if INSTANCE_ID=$(metadata_get instance-id); then
    # Both metric forms; the cloud's metric_put reads the one it needs.
    export METRIC_DIMENSIONS="ClusterName=${CLUSTER_NAME},NodeName=${NODE_NAME},InstanceId=${INSTANCE_ID}"
    METRIC_JSON=$(printf '[{"MetricName":"%s","Value":%s}]' "$METRIC_NAME" "$METRIC_VALUE")
    export METRIC_JSON
    if ! metric_out=$(metric_put 2>&1); then
      echo "node-health: publishing metric $METRIC_NAMESPACE/$METRIC_NAME failed: $(printf '%s' "$metric_out" | head -c 300)" >&2
      published=0
    fi
  else
    echo "node-health: could not read the instance id from metadata; metric not published" >&2
    published=0
  fi

  if [ "$DRAIN" = 1 ]; then
    "$HEALTH_GATE"
  fi
  if [ "${#failures[@]}" -gt 0 ]; then
    echo "node-health: $NODE_NAME is UNHEALTHY (${#failures[@]} failure(s))" >&2
    exit 1
  fi
  echo "node-health: $NODE_NAME is healthy"
  [ "$published" = 1 ] || exit 2
}

# 1. GPUs: count, model and memory (nvidia-smi --query-gpu).
if ! gpus=$(timeout 120 nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits 2>&1); then
  fail "nvidia-smi failed: $(printf '%s' "$gpus" | head -c 300)"
  gpus=""
fi
count=0
while IFS=, read -r index name mem; do
  [ -n "${index// /}" ] || continue
  count=$((count + 1))
  name=$(echo "$name" | sed 's/^ *//; s/ *$//')
  mem=${mem// /}
  if ! printf ' %s ' "$name" | grep -Eq "[^A-Za-z0-9]${GPU_MODEL}[^A-Za-z0-9]"; then
    fail "GPU ${index// /} is '$name', expected a $GPU_MODEL"
  fi
  case "$mem" in ''|*[!0-9]*) fail "GPU ${index// /} reports memory '$mem'"; continue ;; esac
  if [ "$mem" -lt "$GPU_MEM_MIN_MIB" ]; then
    fail "GPU ${index// /} has ${mem} MiB, expected at least ${GPU_MEM_MIN_MIB} MiB"
  fi
done <<< "$gpus"
if [ "$count" -ne "$EXPECTED_GPUS" ]; then
  fail "expected $EXPECTED_GPUS GPUs, nvidia-smi lists $count"
else
  ok "$count x $GPU_MODEL"
fi
# Uncorrectable ECC errors since the driver loaded: the GPU needs a reset (NVML nvmlDeviceGetTotalEccErrors,
# UNCORRECTED, VOLATILE). A counter that cannot be read ([N/A]: ECC off) is not judged.
if ecc=$(timeout 60 nvidia-smi --query-gpu=index,ecc.errors.uncorrected.volatile.total --format=csv,noheader,nounits 2>/dev/null); then
  while IFS=, read -r index errors; do
    errors=${errors// /}
    case "$errors" in ''|*[!0-9]*|0) ;; *) fail "GPU ${index// /} has $errors uncorrectable ECC error(s) since the driver loaded" ;; esac
  done <<< "$ecc"
fi
# Xids whose remedy is a reset (NVIDIA Xid catalog: 48, 74, 79, 94, 95).
xid=$(journalctl -k -b -o cat 2>/dev/null | grep -oE 'NVRM: Xid \([^)]*\): (48|74|79|94|95),' | sort -u | head -3 | tr '\n' ' ' || true)
[ -z "$xid" ] || fail "kernel log: ${xid% }"
if [ "$WATCH" = 1 ]; then
  [ "${#failures[@]}" -gt 0 ] || exit 0
  finish
fi

# 2. NVLink: every GPU has active links, none inactive (and the published count, when known).
if [ "$NVLINK" = 1 ]; then
  if ! links=$(timeout 120 nvidia-smi nvlink --status 2>&1); then
    fail "nvidia-smi nvlink --status failed: $(printf '%s' "$links" | head -c 300)"
  else
    summary=$(printf '%s\n' "$links" | awk '
      /^GPU [0-9]+:/ { gpu = $2; sub(":", "", gpu); seen[gpu] = 1; n++ }
      /Link [0-9]+:/ { if ($0 ~ /inactive/) inactive[gpu]++; else if ($0 ~ /GB\/s/) active[gpu]++ }
      END { for (g in seen) printf "%s %d %d\n", g, active[g] + 0, inactive[g] + 0; if (n == 0) print "none" }' | sort -n)
    if [ "$summary" = none ]; then
      fail "nvidia-smi nvlink --status lists no GPU: NVLink expected on this shape"
    else
      nv_gpus=0
      while read -r g act inact; do
        nv_gpus=$((nv_gpus + 1))
        if [ "$inact" -gt 0 ]; then fail "GPU $g has $inact inactive NVLink link(s)"; fi
        if [ "$act" -eq 0 ]; then fail "GPU $g has no active NVLink link"; fi
        if [ -n "$NVLINK_LINKS" ] && [ "$act" -ne "$NVLINK_LINKS" ]; then
          fail "GPU $g has $act active NVLink links, expected $NVLINK_LINKS"
        fi
      done <<< "$summary"
      if [ "$nv_gpus" -ne "$EXPECTED_GPUS" ]; then
        fail "NVLink status covers $nv_gpus GPUs, expected $EXPECTED_GPUS"
      else
        ok "NVLink up on $nv_gpus GPUs"
      fi
    fi
  fi
fi

# 3. Fabric manager (NVSwitch shapes).
if [ "$FABRIC_MANAGER" = 1 ]; then
  # It may still be starting at boot (it waits for the NVSwitches): wait, bounded, while it does.
  deadline=$((SECONDS + FM_WAIT_S))
  fm=$(fm_state)
  while [ "$fm" = activating ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep "$POLL_S"
    fm=$(fm_state)
  done
  if [ "$fm" = active ]; then
    ok "nvidia-fabricmanager active"
  else
    fail "nvidia-fabricmanager is ${fm:-unknown to systemd}, not active (required on NVSwitch shapes)"
  fi
fi

# 4. EFA / RDMA devices.
if [ "$RDMA_KIND" != none ]; then
  devices=0
  if [ -d "$IB_SYSFS" ]; then
    devices=$(find "$IB_SYSFS" -mindepth 1 -maxdepth 1 | wc -l)
  fi
  if [ -n "$RDMA_EXPECTED" ] && [ "$devices" -ne "$RDMA_EXPECTED" ]; then
    fail "expected $RDMA_EXPECTED $RDMA_KIND devices in $IB_SYSFS, found $devices"
  elif [ "$devices" -lt 1 ]; then
    fail "no $RDMA_KIND device in $IB_SYSFS"
  else
    ok "$devices $RDMA_KIND devices"
  fi
  if [ "$RDMA_KIND" = efa ]; then
    # The EFA installer puts fi_info in /opt/amazon/efa/bin, on PATH only for login shells (AWS EFA
    # user guide, "Verify the EFA installer"); this runs from a systemd unit.
    fi_info=$(command -v fi_info || echo /opt/amazon/efa/bin/fi_info)
    # A match in the shell, not `| grep -q`: grep stops at the first match, and with pipefail the writer's
    # SIGPIPE would fail the check on a long listing.
    if ! fi_out=$(timeout 60 "$fi_info" -p efa -t FI_EP_RDM 2>&1) || [[ "$fi_out" != *"provider: efa"* ]]; then
      fail "libfabric lists no EFA provider (fi_info -p efa -t FI_EP_RDM): $(printf '%s' "$fi_out" | head -c 300)"
    else
      ok "libfabric EFA provider present"
    fi
  fi
fi

# 5. Mounts (waiting for the ones still being attached at boot), then random reads.
for dir in "${MOUNTS[@]}"; do
  deadline=$((SECONDS + MOUNT_WAIT_S))
  until mounted "$dir" || [ "$SECONDS" -ge "$deadline" ]; do sleep "$POLL_S"; done
  if mounted "$dir"; then ok "$dir mounted"; else fail "$dir is not mounted (waited ${MOUNT_WAIT_S}s)"; fi
done
for dir in "${FIO_DIRS[@]}"; do
  mounted "$dir" || continue
  test_dir="$dir/.gpu-cluster-health-$NODE_NAME"
  if ! mkdir -p "$test_dir" 2>/dev/null; then
    fail "cannot write to $dir"
    continue
  fi
  if ! fio_json=$(timeout $((FIO_RUNTIME_S * 3 + 120)) fio --name=gpu-cluster-randread --directory="$test_dir" \
      --rw=randread --bs="$FIO_BS" --size="${FIO_SIZE_MIB}M" --runtime="$FIO_RUNTIME_S" --time_based \
      --ioengine=psync --direct=1 --output-format=json 2>&1); then
    fail "fio random read on $dir failed: $(printf '%s' "$fio_json" | tail -c 300)"
  else
    iops=$(printf '%s' "$fio_json" | python3 -c 'import json,sys; print(int(json.load(sys.stdin)["jobs"][0]["read"]["iops"]))' 2>/dev/null || echo "")
    if [ -z "$iops" ]; then
      fail "fio on $dir gave no read IOPS"
    elif [ "$iops" -le 0 ] || { [ -n "$FIO_MIN_IOPS" ] && [ "$iops" -lt "$FIO_MIN_IOPS" ]; }; then
      fail "fio random read on $dir: $iops IOPS${FIO_MIN_IOPS:+, expected at least $FIO_MIN_IOPS}"
    else
      ok "fio random read on $dir: $iops IOPS"
    fi
  fi
  rm -rf "$test_dir"
done

# 6. The metadata service is closed to non-root users (metadata-guard): a job must not get the
#    instance role's credentials, with which it could read the munge key.
if setpriv --reuid="$NOBODY_UID" --regid="$NOBODY_UID" --clear-groups -- \
    bash -c "$(declare -f metadata_get); metadata_get instance-id" > /dev/null 2>&1; then
  fail "the metadata service answers a non-root user: metadata-guard is not in force"
else
  ok "metadata service closed to non-root users"
fi

# 7. Jobs' credentials (job-credentials), with time left.
if [ -n "$JOB_CREDENTIALS_FILE" ]; then
  if left=$(python3 - "$JOB_CREDENTIALS_FILE" <<'PY' 2>&1
import datetime, json, sys
with open(sys.argv[1]) as f:
    expiration = json.load(f)["Expiration"]
left = datetime.datetime.fromisoformat(expiration.replace("Z", "+00:00")) - datetime.datetime.now(datetime.timezone.utc)
print(int(left.total_seconds()))
PY
  ) && [ "$left" -ge "$JOB_CREDENTIALS_MIN_LEFT_S" ]; then
    ok "jobs' credentials valid for ${left}s"
  else
    fail "jobs' credentials in $JOB_CREDENTIALS_FILE are missing or expire (${left:0:200}s left; at least ${JOB_CREDENTIALS_MIN_LEFT_S}s expected)"
  fi
fi

finish
'''


def node_health_script(c: SlurmCluster) -> str:
    """The GPU node's health check; every expected value comes from the catalog (instances.yaml
    for the GPUs and EFA/RDMA count, fabric.yaml for NVLink, fabric manager and fio). Xid events since boot
    whose remedy is a GPU reset (48 double-bit ECC, 74 NVLink, 79 fallen off the bus, 94/95 contained and
    uncontained ECC: NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) fail
    the check and the watch."""
    o, f, fio, shape = ops(c.cloud), fabric(c.cloud, c.shape.type), fio_settings(), c.shape
    mounts = [d for d, on in ((c.paths.scratch, c.scratch), (c.paths.lustre, c.lustre),
                              (c.paths.data, c.data_disk)) if on]
    fio_dirs = [d for d, on in ((c.paths.scratch, c.scratch), (c.paths.lustre, c.lustre)) if on]
    if not shape.rdma:
        rdma_kind, rdma_expected = "none", ""
    else:
        rdma_kind = profile(c.cloud).rdma_name.lower()
        rdma_expected = "" if shape.rdma_interfaces is None else shape.rdma_interfaces
    values = {
        "CLUSTER_NAME": c.name, "REGION": c.region,
        "NODE_NAME_FILE": c.paths.node_name_file, "STATUS_FILE": c.paths.health_status_file,
        "HEALTH_GATE": f"{c.paths.bin}/health-gate",
        "REBOOT_MARK": c.paths.health_reboot_file, "REPLACE_MARK": c.paths.health_replace_file,
        "EXPECTED_GPUS": shape.gpu_count, "GPU_MODEL": shape.gpu,
        "GPU_MEM_MIN_MIB": int(shape.gpu_mem_gib * 1024 * gpu_mem_min_fraction()),
        "NVLINK": int(f.nvlink), "NVLINK_LINKS": "" if f.nvlink_links_per_gpu is None else f.nvlink_links_per_gpu,
        "FABRIC_MANAGER": int(f.fabric_manager),
        "RDMA_KIND": rdma_kind, "RDMA_EXPECTED": rdma_expected, "IB_SYSFS": c.paths.infiniband_sysfs,
        "MOUNT_WAIT_S": MOUNT_WAIT_S, "FM_WAIT_S": FABRIC_MANAGER_WAIT_S, "POLL_S": POLL_S,
        "FIO_SIZE_MIB": fio.size_mib, "FIO_RUNTIME_S": fio.runtime_s, "FIO_BS": fio.block_size,
        "FIO_MIN_IOPS": "" if fio.min_iops is None else fio.min_iops,
        "METRIC_NAMESPACE": c.metric_namespace, "METRIC_NAME": c.metric_name,
        "METRIC_VALUE": "", "METRIC_DIMENSIONS": "", "METRIC_JSON": "", "INSTANCE_ID": "",
        "NOBODY_UID": NOBODY_UID,
        "JOB_CREDENTIALS_FILE": c.paths.job_credentials_file if c.job_credentials else "",
        "JOB_CREDENTIALS_MIN_LEFT_S": JOB_CREDENTIALS_MIN_LEFT_S,
    }
    return _script("GPU node health check", values, _HEALTH_BODY, [
        shell.array("MOUNTS", mounts), shell.array("FIO_DIRS", fio_dirs), MOUNTED_FUNCTION, FM_STATE_FUNCTION,
        o.metadata_function, shell.function("metric_put", o.metric_put)])


# ---------------------------------------------------------------------------------------------
_GATE_BODY = r'''
# slurmd runs this with a minimal environment: make sure the usual directories are searched.
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Messages go to stdout too: slurmd logs a failing HealthCheckProgram's output.
say() { echo "health-gate: $*"; echo "health-gate: $*" >&2; }
NODE_NAME=$(cat "$NODE_NAME_FILE" 2>/dev/null || true)
if [ -z "$NODE_NAME" ]; then
  say "$NODE_NAME_FILE is missing"
  exit 1
fi
if [ ! -s "$STATUS_FILE" ]; then
  result=FAIL
  reason="no health check result in $STATUS_FILE"
else
  result=$(sed -n 1p "$STATUS_FILE")
  reason=$(sed -n 2p "$STATUS_FILE")
fi
if [ "$result" = PASS ]; then
  if ! node=$(scontrol show node "$NODE_NAME" -o 2>&1); then
    say "scontrol show node $NODE_NAME failed: $node"
    exit 1
  fi
  current=$(node_reason "$node")
  case "$current" in
    "$REASON_PREFIX"*)
      scontrol update nodename="$NODE_NAME" state=resume
      say "$NODE_NAME passed its health check: resumed" ;;
  esac
  exit 0
fi
if ! out=$(scontrol update nodename="$NODE_NAME" state=drain reason="$REASON_PREFIX ${reason:-health check failed}" 2>&1); then
  say "could not drain $NODE_NAME ($reason): $out"
  exit 1
fi
say "drained $NODE_NAME: ${reason:-health check failed}"
'''


def health_gate_script(c: SlurmCluster) -> str:
    """slurmd's HealthCheckProgram: applies the last health result to the node in Slurm. Fast
    (it only reads a file and calls scontrol): slurmd kills a HealthCheckProgram after 60 s."""
    return _script("Apply the GPU node health result to Slurm", {
        "NODE_NAME_FILE": c.paths.node_name_file, "STATUS_FILE": c.paths.health_status_file,
        "REASON_PREFIX": HEALTH_REASON_PREFIX,
    }, _GATE_BODY, [NODE_REASON_FUNCTION])


# ---------------------------------------------------------------------------------------------
_RECHECK_BODY = r'''
# Joining again. A node-setup that failed (no munge key within its wait, a secret that could not be
# read) leaves slurmd down, since slurmd Requires= it; so does a slurmd that failed. Starting slurmd
# runs node-setup again first (Requires= and After=, systemd.unit(5)). A slurmd stopped on purpose
# (spot-watch, on an interruption notice) is inactive, not failed, and stays down.
if systemctl is-failed --quiet "$SETUP_UNIT" slurmd.service; then
  echo "health-recheck: $SETUP_UNIT or slurmd.service failed; joining the cluster again"
  systemctl reset-failed "$SETUP_UNIT" slurmd.service || true
  if ! systemctl start --no-block slurmd.service; then
    echo "health-recheck: could not start slurmd.service; trying again at the next recheck" >&2
  fi
  exit 0
fi
# A node drained by a one-off failure at boot (a slow mount, a late fabric manager) comes back by
# itself: while the last result is not PASS, run the check again; health-gate resumes the node when
# it passes. Slurm never places a job on a drained node, so no job can do this.
result=$(sed -n 1p "$STATUS_FILE" 2>/dev/null || true)
if [ "$result" = PASS ]; then
  exit 0
fi
# A fabric manager that failed at boot stays failed (systemd does not restart it): once more.
if [ "$FABRIC_MANAGER" = 1 ] && [ "$(fm_state)" = failed ]; then
  echo "health-recheck: nvidia-fabricmanager failed; restarting it"
  systemctl restart nvidia-fabricmanager || echo "health-recheck: nvidia-fabricmanager did not restart" >&2
fi
if "$BIN/node-health" --drain; then
  echo "health-recheck: the health check passes now; the node is resumed"
  exit 0
fi
echo "health-recheck: the health check still fails (see $STATUS_FILE); the node stays drained" >&2
# Our own drain only: requeue its jobs, reboot once, then power down (replaced), then leave it (docs/slurm.md).
NODE_NAME=$(cat "$NODE_NAME_FILE" 2>/dev/null || true)
node=$(scontrol show node "$NODE_NAME" -o 2>/dev/null) || exit 0
case "$(node_reason "$node")" in
  "$REASON_PREFIX"*) ;;
  *) exit 0 ;;
esac
# A one-time spot node cannot be stopped.
case "$node" in *AvailableFeatures=*spot*) POWER_SAVING=0 ;; esac
if [ -e "$REBOOT_MARK" ] && { [ "$POWER_SAVING" != 1 ] || [ -e "$REPLACE_MARK" ]; }; then
  echo "health-recheck: it failed after its reboot and replacement too: left drained; replace it (pulumi up --replace)" >&2
  exit 0
fi
jobs=$(squeue -h -w "$NODE_NAME" -o %i | paste -sd, -)
if [ -n "$jobs" ]; then
  echo "health-recheck: requeueing the jobs on $NODE_NAME: $jobs"
  scontrol requeue "$jobs" || echo "health-recheck: could not requeue every job of $jobs" >&2
fi
for ((i = 0; i * POLL_S < JOB_END_WAIT_S; i++)); do
  [ -z "$(squeue -h -w "$NODE_NAME" -o %i)" ] && break
  sleep "$POLL_S"
done
mkdir -p "$(dirname "$REBOOT_MARK")"
if [ -e "$REBOOT_MARK" ]; then
  date -u +%Y-%m-%dT%H:%M:%SZ > "$REPLACE_MARK"
  echo "health-recheck: it failed after its reboot ($(cat "$REBOOT_MARK")): powering $NODE_NAME down to be replaced"
  scontrol update nodename="$NODE_NAME" state=power_down_force
  exit 0
fi
date -u +%Y-%m-%dT%H:%M:%SZ > "$REBOOT_MARK"
echo "health-recheck: rebooting $NODE_NAME once to reset its GPUs"
systemctl reboot
'''


def health_recheck_script(c: SlurmCluster) -> str:
    """Run by a systemd timer on every GPU node: joins the cluster again when node-setup or slurmd failed,
    and runs the health check again while it fails."""
    return _script("Join again after a failed setup; re-run a failed GPU node health check", {
        "BIN": c.paths.bin, "STATUS_FILE": c.paths.health_status_file, "SETUP_UNIT": NODE_SETUP_UNIT,
        "NODE_NAME_FILE": c.paths.node_name_file, "REBOOT_MARK": c.paths.health_reboot_file,
        "REPLACE_MARK": c.paths.health_replace_file, "REASON_PREFIX": HEALTH_REASON_PREFIX,
        "POWER_SAVING": int(c.power_saving), "POLL_S": POLL_S, "JOB_END_WAIT_S": JOB_END_WAIT_S,
        "FABRIC_MANAGER": int(fabric(c.cloud, c.shape.type).fabric_manager),
    }, _RECHECK_BODY, [FM_STATE_FUNCTION, NODE_REASON_FUNCTION])


# ---------------------------------------------------------------------------------------------
_SPOT_BODY = r'''
NODE_NAME=$(cat "$NODE_NAME_FILE" 2>/dev/null || true)
if [ -z "$NODE_NAME" ]; then
  echo "spot-watch: $NODE_NAME_FILE is missing" >&2
  exit 1
fi
polls=0
while :; do
  if notice=$(metadata_get "$NOTICE_PATH" 2>/dev/null) && [ -n "$notice" ]; then
    notice=$(printf '%s' "$notice" | tr -d '\n' | head -c 200)
    echo "spot-watch: interruption notice for $NODE_NAME: $notice"
    # DOWN (not DRAIN): Slurm kills and requeues the node's batch jobs now (JobRequeue=1), while
    # the instance still has its notice period; ReturnToService=2 lets a replacement rejoin.
    scontrol update nodename="$NODE_NAME" state=down reason="$REASON_PREFIX $notice"
    # Stop slurmd so this node cannot re-register (ReturnToService=2 would bring a responding
    # node straight back) and take new jobs during the notice period.
    systemctl stop slurmd.service
    exit 0
  fi
  polls=$((polls + 1))
  if [ "$MAX_POLLS" -gt 0 ] && [ "$polls" -ge "$MAX_POLLS" ]; then
    exit 0
  fi
  sleep "$POLL_S"
done
'''


def spot_watch_script(c: SlurmCluster, poll_s: int = 5, max_polls: int = 0) -> str:
    """Watches the spot-interruption notice (AWS gives 2 minutes, Tencent a termination time).
    max_polls=0: forever (the systemd service); the harness bounds it."""
    o = ops(c.cloud)
    return _script("Requeue this node's jobs when its spot instance is reclaimed", {
        "NODE_NAME_FILE": c.paths.node_name_file, "NOTICE_PATH": o.spot_notice_path,
        "REASON_PREFIX": SPOT_REASON_PREFIX, "POLL_S": poll_s, "MAX_POLLS": max_polls,
    }, _SPOT_BODY, [o.metadata_function])


# ---------------------------------------------------------------------------------------------
_GUARD_BODY = r'''
# Only root reaches the metadata service. It hands out the instance role's credentials, and the role
# reads the munge key: a job holding the key could forge munge credentials for any user, root
# included, on every node. Jobs get the access they need another way (job-credentials). Idempotent:
# the chain is rebuilt, and OUTPUT jumps to it once, first.
export PATH="${PATH:+$PATH:}/usr/sbin:/usr/bin:/sbin:/bin"
iptables -w -N "$CHAIN" 2>/dev/null || true
iptables -w -F "$CHAIN"
iptables -w -A "$CHAIN" -m owner --uid-owner 0 -j RETURN
iptables -w -A "$CHAIN" -j REJECT
if ! iptables -w -C OUTPUT -d "$METADATA_IP/32" -j "$CHAIN" 2>/dev/null; then
  iptables -w -I OUTPUT 1 -d "$METADATA_IP/32" -j "$CHAIN"
fi
if ! iptables -w -C OUTPUT -d "$METADATA_IP/32" -j "$CHAIN"; then
  echo "metadata-guard: the rule sending $METADATA_IP to $CHAIN is not in OUTPUT" >&2
  exit 1
fi
echo "metadata-guard: the metadata service ($METADATA_IP) is closed to every user but root"
'''


def metadata_guard_script(c: SlurmCluster) -> str:
    """Closes the metadata service to every user but root, before slurmd or slurmctld starts and on
    every boot (the owner-match rule AWS ParallelCluster applies with Imds Secured, its default:
    ParallelCluster user guide, HeadNode section, Imds / Secured)."""
    return _script("Close the metadata service to every user but root", {
        "CHAIN": METADATA_GUARD_CHAIN, "METADATA_IP": ops(c.cloud).metadata_ipv4,
    }, _GUARD_BODY)


_JOB_CREDENTIALS_BODY = r'''
umask 077
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if ! job_credentials > "$work/credentials.json" 2> "$work/err"; then
  echo "job-credentials: getting credentials of $JOB_ROLE failed: $(head -c 2000 "$work/err")" >&2
  exit 1
fi
# The credential_process answer (AWS CLI user guide, "Sourcing credentials with an external process"):
# Version 1 and an Expiration, so the SDKs ask again before it passes.
if ! python3 - "$work/credentials.json" "$work/process.json" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    c = json.load(f)
answer = {"Version": 1, **{k: c[k] for k in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")}}
with open(sys.argv[2], "w") as f:
    json.dump(answer, f)
PY
then
  echo "job-credentials: the answer for $JOB_ROLE has no AccessKeyId, SecretAccessKey, SessionToken and Expiration" >&2
  exit 1
fi
# Readable by every job on the node: they hold the jobs' role only (the checkpoint bucket).
install -d -m 0755 "$(dirname "$CREDENTIALS_FILE")" "$(dirname "$CONFIG_FILE")"
install -m 0644 "$work/process.json" "$CREDENTIALS_FILE.tmp"
mv -f "$CREDENTIALS_FILE.tmp" "$CREDENTIALS_FILE"
printf '[default]\nregion = %s\ncredential_process = /bin/cat %s\n' "$REGION" "$CREDENTIALS_FILE" > "$work/config"
install -m 0644 "$work/config" "$CONFIG_FILE.tmp"
mv -f "$CONFIG_FILE.tmp" "$CONFIG_FILE"
echo "job-credentials: credentials of $JOB_ROLE for jobs in $CREDENTIALS_FILE"
'''


def job_credentials_script(c: SlurmCluster) -> str:
    """Run as root at boot and every JOB_CREDENTIALS_EVERY_MIN: the jobs' role's temporary credentials,
    and the AWS config whose credential_process hands them out."""
    o = ops(c.cloud)
    if o.job_credentials is None or not c.job_credentials or not c.job_role:
        raise ValueError(f"job credentials need a job role on a cloud that has one: cloud {c.cloud!r}, "
                         f"job_credentials={c.job_credentials}, job_role={c.job_role!r}")
    return _script("Credentials of the jobs' own role", {
        "REGION": c.region, "JOB_ROLE": c.job_role, "SESSION_NAME": f"{c.name}-jobs"[:64],
        "DURATION_S": JOB_CREDENTIALS_S, "CREDENTIALS_FILE": c.paths.job_credentials_file,
        "CONFIG_FILE": c.paths.job_aws_config,
    }, _JOB_CREDENTIALS_BODY, [shell.command(cmd) for cmd in o.cli_setup]
        + [shell.function("job_credentials", o.job_credentials)])


_TASK_PROLOG_BODY = r'''
# slurmstepd sets what this prints as `export NAME=value` in the task's environment (slurm.conf(5),
# TaskProlog). A job that names its own AWS config keeps it.
if [ -z "${AWS_CONFIG_FILE:-}" ]; then
  echo "export AWS_CONFIG_FILE=$CONFIG_FILE"
fi
'''


def task_prolog_script(c: SlurmCluster) -> str:
    return _script("Slurm TaskProlog: the jobs' AWS config", {"CONFIG_FILE": c.paths.job_aws_config},
                   _TASK_PROLOG_BODY)


# ---------------------------------------------------------------------------------------------
_NODE_SETUP_BODY = r'''
"$BIN/node-identity" >/dev/null
NODE_NAME=$(cat "$NODE_NAME_FILE")
"$BIN/munge-key"
# A failure here does not stop the boot: the health check finds no credentials and drains the node
# until the renewal timer has made them.
if [ "$JOB_CREDENTIALS" = 1 ] && ! "$BIN/job-credentials"; then
  echo "node-setup: no credentials for jobs yet; the node stays drained until they are renewed" >&2
fi
mkdir -p "$(dirname "$SLURMD_DEFAULTS")"
printf 'SLURMD_OPTIONS="--conf-server %s -N %s"\n' "$CONF_SERVER" "$NODE_NAME" > "$SLURMD_DEFAULTS.tmp"
mv "$SLURMD_DEFAULTS.tmp" "$SLURMD_DEFAULTS"
# On /lustre when the cluster has one: a file system that cannot mount must not keep slurmd down
# (the health check reports it and drains the node).
if mkdir -p "$JOBS_OUTPUT" 2>/dev/null; then
  chmod 1777 "$JOBS_OUTPUT"
else
  echo "node-setup: cannot create $JOBS_OUTPUT; job output there fails until it can be" >&2
fi
# A node about to reboot (into a kernel with a Lustre client) checks itself after the reboot; until
# then health-gate finds no result and keeps it drained.
if [ -e "$REBOOT_PENDING" ]; then
  echo "node-setup: $NODE_NAME reboots when the first boot is done; its health check runs after the reboot"
  exit 0
fi
# A failed check does not stop the boot: slurmd starts, and its HealthCheckProgram (health-gate)
# drains the node with the reason before it registers, so no job ever lands on it.
if ! "$BIN/node-health"; then
  echo "node-setup: $NODE_NAME failed its health check; it will be drained (see $STATUS_FILE)" >&2
fi
'''


def node_setup_script(c: SlurmCluster) -> str:
    o = ops(c.cloud)
    return _script("GPU node: join the Slurm cluster", {
        "BIN": c.paths.bin, "NODE_NAME_FILE": c.paths.node_name_file,
        "STATUS_FILE": c.paths.health_status_file, "SLURMD_DEFAULTS": f"{c.paths.etc_default}/slurmd",
        "CONF_SERVER": f"{c.head_address}:{SLURMCTLD_PORT}", "JOBS_OUTPUT": c.jobs_output_dir,
        "REBOOT_PENDING": REBOOT_PENDING, "JOB_CREDENTIALS": int(c.job_credentials),
    }, _NODE_SETUP_BODY, [shell.command(cmd) for cmd in o.cli_setup])


_HEAD_SETUP_BODY = r'''
for dir in "${WAIT_MOUNTS[@]}"; do
  deadline=$((SECONDS + MOUNT_WAIT_S))
  until mounted "$dir" || [ "$SECONDS" -ge "$deadline" ]; do sleep "$POLL_S"; done
  if ! mounted "$dir"; then
    echo "head-setup: $dir is not mounted after ${MOUNT_WAIT_S}s; slurmctld's state must live on it" >&2
    exit 1
  fi
done
shared=1
for dir in "${SOFT_MOUNTS[@]}"; do
  if [ -e "$REBOOT_PENDING" ]; then
    echo "head-setup: the node reboots when the first boot is done (for $dir); slurmctld starts without the shared directories until then" >&2
    shared=0
    break
  fi
  deadline=$((SECONDS + MOUNT_WAIT_S))
  until mounted "$dir" || [ "$SECONDS" -ge "$deadline" ]; do sleep "$POLL_S"; done
  if ! mounted "$dir"; then
    echo "head-setup: $dir is not mounted after ${MOUNT_WAIT_S}s; slurmctld starts without the shared directories on it" >&2
    shared=0
  fi
done
mkdir -p "$STATE_DIR"
chown "$SLURM_USER:$SLURM_USER" "$STATE_DIR"
chmod 0700 "$STATE_DIR"
if [ "$shared" = 1 ]; then
  for dir in "${SHARED_DIRS[@]}"; do
    if mkdir -p "$dir" 2>/dev/null; then
      chmod 1777 "$dir"
    else
      echo "head-setup: cannot create $dir; slurmctld starts without it" >&2
    fi
  done
fi
"$BIN/munge-key"
'''


def head_setup_script(c: SlurmCluster, wait_mounts: Sequence[str] | None = None) -> str:
    """Head node boot before slurmctld: its state directory on persistent storage, the shared
    directories on /lustre, the munge key."""
    o = ops(c.cloud)
    # The state's file system is required; /lustre only holds the shared directories, so a missing
    # Lustre client must not keep slurmctld down.
    if wait_mounts is None:
        wait_mounts = [m for m in (c.paths.data, c.paths.lustre) if c.state_dir.startswith(m + "/")]
    soft_mounts = [c.paths.lustre] if c.lustre and c.paths.lustre not in wait_mounts else []
    return _script("Head node: prepare slurmctld", {
        "BIN": c.paths.bin, "STATE_DIR": c.state_dir, "SLURM_USER": "slurm",
        "MOUNT_WAIT_S": MOUNT_WAIT_S, "POLL_S": POLL_S, "REBOOT_PENDING": REBOOT_PENDING,
    }, _HEAD_SETUP_BODY, [shell.array("WAIT_MOUNTS", wait_mounts), shell.array("SOFT_MOUNTS", soft_mounts),
                          shell.array("SHARED_DIRS", c.shared_dirs), MOUNTED_FUNCTION]
        + [shell.command(cmd) for cmd in o.cli_setup])
