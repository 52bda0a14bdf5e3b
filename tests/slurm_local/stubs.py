"""Stand-ins for the GPU node's hardware tools and the cloud CLIs, written into a PATH directory.

Each stub reads the harness's state directory ($STUB_STATE) so a test can change what the
"hardware" reports between steps (e.g. one GPU missing), and records what it was asked in log
files the harness asserts on. They print the same output formats the real tools do, as far as the
generated scripts read them.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

STUBS: dict[str, str] = {
    # nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader,nounits, and
    # nvidia-smi nvlink --status ("GPU i: <name> (UUID: ...)" then "\t Link n: 26.562 GB/s").
    "nvidia-smi": r'''#!/bin/bash
set -euo pipefail
gpus=$(cat "$STUB_STATE/gpus")
links=$(cat "$STUB_STATE/nvlinks")
if [ "${1:-}" = nvlink ]; then
  for ((i = 0; i < gpus; i++)); do
    echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-0000000$i)"
    for ((l = 0; l < links; l++)); do echo "	 Link $l: 26.562 GB/s"; done
  done
  exit 0
fi
# `--query-gpu=index,ecc.errors.uncorrected.volatile.total`: $STUB_STATE/ecc (default 0) errors on GPU 0.
if [[ "$*" == *ecc.errors.uncorrected.volatile.total* ]]; then
  ecc=$(cat "$STUB_STATE/ecc" 2>/dev/null || echo 0)
  for ((i = 0; i < gpus; i++)); do if [ "$i" = 0 ]; then echo "$i, $ecc"; else echo "$i, 0"; fi; done
  exit 0
fi
for ((i = 0; i < gpus; i++)); do echo "$i, NVIDIA H100 80GB HBM3, 81559"; done
''',
    # fio after the first, real run (Harness.stub_fio): the JSON fields the health check reads.
    "fio-stub": r'''#!/bin/bash
echo '{"jobs": [{"read": {"iops": 250000}}]}'
''',
    # journalctl -k -b -o cat: the kernel log since boot, from $STUB_STATE/kernel-log (none by default).
    "journalctl": r'''#!/bin/bash
cat "$STUB_STATE/kernel-log" 2>/dev/null || true
''',
    "fi_info": r'''#!/bin/bash
printf 'provider: efa\n    fabric: efa\n    domain: rdmap0s0-rdm\n    type: FI_EP_RDM\n'
''',
    "systemctl": r'''#!/bin/bash
echo "systemctl $*" >> "$STUB_STATE/systemctl.log"
if [ "${1:-} ${2:-}" = "stop slurmd.service" ] && [ -s "$STUB_STATE/slurmd.pid" ]; then
  kill "$(cat "$STUB_STATE/slurmd.pid")"
fi
if [ "${1:-}" = is-active ]; then
  [ "$(cat "$STUB_STATE/fabricmanager")" = active ]
fi
# `systemctl is-failed --quiet UNIT...`: failed when a unit is listed in $STUB_STATE/failed-units.
if [ "${1:-}" = is-failed ]; then
  for unit in "${@:2}"; do
    [ "$unit" = --quiet ] && continue
    grep -qxF -- "$unit" "$STUB_STATE/failed-units" 2>/dev/null && exit 0
  done
  exit 1
fi
# `systemctl show -p ActiveState --value nvidia-fabricmanager`; "activating-then-active" answers
# activating once, then active.
if [ "${1:-}" = show ]; then
  state=$(cat "$STUB_STATE/fabricmanager")
  if [ "$state" = activating-then-active ]; then echo active > "$STUB_STATE/fabricmanager"; state=activating; fi
  echo "$state"
fi
''',
    # The node's mounts are directories in the harness root; "mounted" = listed in $STUB_STATE/mounts.
    "mountpoint": r'''#!/bin/bash
dir=${!#}
grep -qxF -- "$dir" "$STUB_STATE/mounts"
''',
    # Instance metadata: URL path after /latest/meta-data/ → file under $STUB_STATE/metadata/. A user
    # other than root (STUB_UID, set by the setpriv stub, else the real uid) is refused, as the kernel
    # would, once the iptables stub holds the metadata guard's jump for the address.
    "curl": r'''#!/bin/bash
url=""
for a in "$@"; do case "$a" in http://*|https://*) url=$a ;; esac; done
host=${url#*://}
host=${host%%/*}
[ "$host" = metadata.tencentyun.com ] && host=169.254.0.23
if [ "${STUB_UID:-$(id -u)}" != 0 ] && grep -q -- "-d ${host}/32 -j " "$STUB_STATE/output-rules" 2>/dev/null; then
  echo "curl: (7) Failed to connect to $host port 80: Connection refused" >&2
  exit 7
fi
case "$url" in
  */latest/api/token) echo stub-token; exit 0 ;;
  */latest/meta-data/*) item=${url#*/latest/meta-data/} ;;
  *) echo "stub curl: unexpected URL $url" >&2; exit 2 ;;
esac
file="$STUB_STATE/metadata/$item"
if [ -f "$file" ]; then cat "$file"; exit 0; fi
echo "curl: (22) The requested URL returned error: 404" >&2
exit 22
''',
    # iptables: records every call; keeps the rules inserted into OUTPUT (what follows `-I OUTPUT 1`)
    # in $STUB_STATE/output-rules, which `-C OUTPUT` checks and the curl stub obeys.
    "iptables": r'''#!/bin/bash
echo "iptables $*" >> "$STUB_STATE/iptables.log"
[ "${1:-}" = -w ] && shift
case "${1:-} ${2:-}" in
  "-I OUTPUT") shift 3; echo "$*" >> "$STUB_STATE/output-rules" ;;
  "-C OUTPUT") shift 2; grep -qxF -- "$*" "$STUB_STATE/output-rules" 2>/dev/null ;;
  *) exit 0 ;;
esac
''',
    # setpriv --reuid=N ... -- CMD: runs CMD telling the stubs it runs as uid N (STUB_UID).
    "setpriv": r'''#!/bin/bash
uid=""
while [ $# -gt 0 ]; do
  case "$1" in --reuid=*) uid=${1#--reuid=} ;; --) shift; break ;; -*) ;; *) break ;; esac
  shift
done
STUB_UID=$uid exec "$@"
''',
    # aws secretsmanager get/put-secret-value, sts assume-role, cloudwatch put-metric-data, and the ec2 calls of
    # Slurm power saving: describe-instances answers from $STUB_STATE/instances ("<index> <instance id> [<state>]" lines, as
    # the generated --query prints them); start- and stop-instances are appended to $STUB_STATE/ec2.log, which
    # the harness plays EC2 from (a stop stops slurmd, a start starts it).
    "aws": r'''#!/bin/bash
set -euo pipefail
echo "aws $*" >> "$STUB_STATE/aws.log"
arg() { local want=$1; shift; while [ $# -gt 0 ]; do [ "$1" = "$want" ] && { echo "$2"; return; }; shift; done; }
case "$1 $2" in
  "secretsmanager get-secret-value")
    if [ -s "$STUB_STATE/secret" ]; then cat "$STUB_STATE/secret"; echo; exit 0; fi
    echo "An error occurred (ResourceNotFoundException) when calling the GetSecretValue operation: Secrets Manager can't find the specified secret value for staging label: AWSCURRENT" >&2
    exit 254 ;;
  "secretsmanager put-secret-value")
    src=$(arg --secret-string "$@")
    cat "${src#file://}" > "$STUB_STATE/secret" ;;
  "sts assume-role")
    printf '{"AccessKeyId": "ASIASTUBJOBS", "SecretAccessKey": "stub-secret", "SessionToken": "stub-session", "Expiration": "%s"}\n' \
      "$(date -u -d "+$(arg --duration-seconds "$@") seconds" +%Y-%m-%dT%H:%M:%S+00:00)" ;;
  "cloudwatch put-metric-data")
    echo "$(arg --metric-name "$@") $(arg --value "$@") $(arg --dimensions "$@")" >> "$STUB_STATE/metrics.log" ;;
  "ec2 describe-instances")
    [[ "$*" == *"--filters Name=tag:gpu-cluster:name,Values="*" Name=tag-key,Values=gpu-cluster:node "* ]] || { echo "stub aws: unexpected filters: $*" >&2; exit 2; }
    cat "$STUB_STATE/instances" ;;
  "ec2 start-instances"|"ec2 stop-instances")
    ids=$(printf '%s\n' "$@" | awk 'p && /^--/ { p = 0 } p { print } $0 == "--instance-ids" { p = 1 }' | paste -sd' ' -)
    echo "${2%-instances} $ids" >> "$STUB_STATE/ec2.log" ;;
  *) echo "stub aws: unexpected $*" >&2; exit 2 ;;
esac
''',
    # torchrun: records its arguments and the NCCL/EFA environment it was started with.
    "torchrun": r'''#!/bin/bash
{
  echo "argv: $*"
  env | grep -E '^(FI_|NCCL_|MASTER_ADDR=|LD_LIBRARY_PATH=)' | sort
} >> "$STUB_STATE/torchrun.log"
echo "stub torchrun on $(hostname): $*"
''',
    # mpirun running all_reduce_perf: prints all_reduce_perf's table with the busbw in $STUB_STATE/busbw.
    "mpirun": r'''#!/bin/bash
echo "mpirun $*" >> "$STUB_STATE/mpirun.log"
size=$(printf '%s\n' "$@" | awk 'p { print; exit } $0 == "-e" { p = 1 }')
busbw=$(cat "$STUB_STATE/busbw")
echo "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong"
echo "           8             2     float     sum      -1    30.00    0.00    0.00      0    30.00    0.00    0.00      0"
printf '%12s %13s     float     sum      -1  1000.0  100.00  %s      0  1000.0  100.00  %s      0\n' "$size" "$((size / 4))" "$busbw" "$busbw"
''',
}


VIRTUAL_CLOCK = r'''# Sourced by every bash the tests start (BASH_ENV): `sleep N` records N and moves bash's own clock,
# $SECONDS, on by N (rounded up to a whole second) instead of waiting. The scripts' deadlines are all
# `deadline=$((SECONDS + WAIT))` loops, so they run exactly as on a node, in no time. SECONDS is unset
# first, which takes away its special meaning for good (bash(1), SECONDS): real time that passes while a
# loaded machine runs the stubs never moves the clock, so a wait takes the same number of polls every run.
# A sleep in a subshell (a pipeline, $(...)) moves only the subshell's clock: deadline loops must sleep
# in the shell that reads SECONDS, as every generated script does.
unset SECONDS
SECONDS=0
sleep() {
  local s=${1:-1} whole
  whole=${s%%.*}
  [ "$whole" = "$s" ] || whole=$((${whole:-0} + 1))
  echo "sleep $s" >> "$STUB_STATE/sleep.log"
  SECONDS=$((SECONDS + whole))
}
'''


def node_python() -> str:
    """The interpreter the scripts' `python3` is: the system's, as on a node (Ubuntu's /usr/bin/python3),
    not a version manager's shim on this machine's PATH, which starts several shells per call."""
    return "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def write_stubs(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in STUBS.items():
        path = bin_dir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    link = bin_dir / "python3"
    link.unlink(missing_ok=True)
    link.symlink_to(node_python())


def write_state(state: Path, **values: object) -> None:
    state.mkdir(parents=True, exist_ok=True)
    for key, value in values.items():
        if isinstance(value, (list, tuple)):
            text = "".join(f"{v}\n" for v in value)
        else:
            text = f"{value}\n" if value != "" else ""
        (state / key).write_text(text)


def stub_env(bin_dir: Path, state: Path, base: dict | None = None, virtual_clock: bool = False) -> dict:
    """The environment the scripts run in: the stubs first on PATH; with `virtual_clock`, `sleep` is
    VIRTUAL_CLOCK's (the real Slurm harness keeps real time: its daemons do not share the scripts' clock)."""
    env = dict(base if base is not None else os.environ)
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    env["STUB_STATE"] = str(state)
    if virtual_clock:
        clock = bin_dir / "virtual-clock.bash"
        clock.write_text(VIRTUAL_CLOCK)
        env["BASH_ENV"] = str(clock)
    return env
