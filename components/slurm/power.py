"""Slurm power saving on the head node: slurmctld starts and stops the GPU nodes, and the run windows
tell slurmctld when nodes may run.

One mechanism owns each state change of a GPU node (docs/architecture.md, "Who starts and stops a node"):
- slurmctld runs `slurm-resume` on powered-down nodes that jobs were given, and `slurm-suspend` on nodes
  idle for SuspendTime (spec idle_stop.for_minutes), on nodes that failed to resume (ResumeFailProgram), and
  on nodes powered down by name (`scontrol update nodename=... state=power_down_force`): the only calls that
  start or stop a GPU instance while Slurm runs.
- `slurm-window` (a timer on the head node, every minute) only tells slurmctld: outside every window the
  partition is DOWN (jobs queue and wait) and nodes still up are powered down (their jobs requeued); inside,
  the partition is UP and pending jobs resume nodes.
- A node that fails its health check after its one reboot powers itself down by name (health-recheck): the
  stop, and the start on new hardware when a job needs it, are slurmctld's.

The programs run as SlurmUser with almost no environment (slurm.conf(5), SuspendProgram: "The program
executes as SlurmUser"). They only hand the request to root: each writes it as a file into a spool directory
of SlurmUser's, and `power-agent`, a root service on the head node, carries it out with the head node's role.
So the metadata service stays closed to every user but root on the head node too, and the cloud CLI runs as
root (Ubuntu's AWS CLI is a snap, which cannot run for a system user without a home directory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from components import run_windows
from components.slurm import shell
from components.slurm.clouds import ops
from components.slurm.conf import RESUME_TIMEOUT_S, SlurmCluster
from components.slurm.scripts import _script
from components.spec import NAME_TAG

if TYPE_CHECKING:
    from components.spec import ClusterSpec

POWER_TAG = "gpu-cluster:power"
"""On a GPU node instance: "slurm" when Slurm starts and stops it (the plan's word for who acts)."""
RUN_HOURS_TAG = "gpu-cluster:run-hours-a-week"
"""On a GPU node instance under Slurm power saving with run windows: the hours a week the windows allow
(run_windows.weekly_hours), which the pricer counts instead of a whole month."""
IDLE_MINUTES_TAG = "gpu-cluster:idle-stop-minutes"
"""On a GPU node instance under Slurm power saving with idle_stop: SuspendTime in minutes."""
POWER_REASON_PREFIX = "gpu-cluster-power:"
WINDOW_EVERY_S = 60
START_TRIES, START_RETRY_S = 6, 30
"""A node still stopping cannot be started yet (EC2: IncorrectInstanceState): the resume program tries again
every 30 s for 3 minutes, within SuspendTimeout's margin."""

_POWER_BODY = r'''
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/snap/bin"
say() { echo "power-agent: $*" >&2; logger -t gpu-cluster-power -- "$*" 2> /dev/null || true; }
# A node whose instance is gone stays DOWN for a person (pulumi up creates it again). One that could not start
# (no capacity, a budget hold) is powered down again, so Slurm may try it for a later job after SuspendTimeout.
down() { scontrol update nodename="$1" state=down reason="$REASON_PREFIX $2" || say "could not set $1 down"; }
retry_later() { say "$1: $2; powered down to be tried again"; scontrol update nodename="$1" state=power_down_force || true; }
started_within() {  # seconds: whether $started (the instance's start, ISO 8601) is less than that long ago
  local t
  [ -n "$started" ] || return 1  # (date -d "" is today's midnight)
  t=$(date -d "$started" +%s 2> /dev/null) || return 1
  [ $(($(date +%s) - t)) -lt "$1" ]
}
instance_of() {  # index: "id state started" of its instance in $found; the newest where two carry the index (a
  # replacement made before the old one is gone); ISO 8601 times in one form compare as text
  printf '%s\n' "$found" | awk -v i="$1" '$1 == i && (n == 0 || $4 > best) { n = 1; best = $4; line = $2 " " $3 " " $4 }
    END { if (n) print line }'
}
listed() {  # name item...: whether name is one of the items
  local x=$1
  shift
  printf '%s\n' "$@" | grep -qxF -- "$x"
}
is_spot() { [[ " $SPOT_NODES " == *" $1 "* ]]; }
oneline() { printf '%s' "$1" | tr -s '\n' ' ' | tail -c 200; }
target() {  # id: the instance the next instance_start / instance_stop acts on
  # shellcheck disable=SC2034  # each cloud's instance_start / instance_stop reads one of the two forms
  INSTANCE_IDS=("$1") INSTANCE_IDS_JSON="[\"$1\"]"
}
lookup() {  # sets $found; says why when the cloud refuses
  local err
  err=$(mktemp)
  if found=$(instance_lookup 2> "$err"); then rm -f "$err"; return 0; fi
  say "cannot list the instances of $CLUSTER: $(tr -s '\n' ' ' < "$err" | tail -c 300)"
  rm -f "$err"
  return 1
}
act() {  # mode hostlist; a stop that fails is queued again (a stopped node must not go on billing)
  local mode=$1 n index id state try out
  local -a nodes
  mapfile -t nodes < <(scontrol show hostnames "$2")
  if ! lookup; then
    # a resume request is not kept: its nodes are powered down again, for Slurm to try them for a later job
    # (left POWERING_UP they would end DOWN at ResumeTimeout); a suspend request is kept and acted on again
    if [ "$mode" = resume ]; then for n in "${nodes[@]}"; do retry_later "$n" "the instance list failed"; done; fi
    return 1
  fi
  for n in "${nodes[@]}"; do
    index=${n#"$NODE_PREFIX"}
    id="" state="" started=""
    read -r id state started < <(instance_of "$index") || true
    if [ "$index" = "$n" ] || [ -z "$id" ]; then
      say "$n has no instance (terminated?): pulumi up creates it again"
      [ "$mode" = suspend ] || down "$n" "no instance; pulumi up creates it again"
      continue
    fi
    if [ "$mode" = resume ]; then rm -f "$DEFERRED/$n"; fi  # a resume cancels a stop deferred for its first boot
    # Already as Slurm wants it: done (Tencent refuses to start a running instance or stop a stopped one,
    # UnsupportedOperation.InstanceStateRunning / InstanceStateStopped; a node still in its first boot is running).
    case "$mode:${state,,}" in
      resume:running|resume:pending|resume:starting|suspend:stopped)
        say "$mode $n: $id is already ${state,,}"; continue ;;
    esac
    # A one-time spot node cannot be stopped (EC2 user guide, "Stop a Spot Instance"; the spec refuses idle stops and
    # windows on spot nodes): a stop Slurm asks for after a failed resume is dropped, the node stays DOWN in Slurm.
    if [ "$mode" = suspend ] && is_spot "$n"; then
      say "suspend $n: a spot node cannot be stopped; left to Slurm"
      continue
    fi
    # A node that has never been up in Slurm and started less than FIRST_BOOT_S ago is in its first boot (a job given
    # to it waits ResumeTimeout, then Slurm asks to stop it): stopped now, the boot (driver, packages, health check)
    # would end half done. The stop is deferred to reconcile, which makes it once the first boot has had its time.
    if [ "$mode" = suspend ] && [ ! -e "$JOINED/$n" ] && started_within "$FIRST_BOOT_S"; then
      mkdir -p "$DEFERRED"
      [ -e "$DEFERRED/$n" ] || say "suspend $n: $id has never been up in Slurm and started at $started: its stop waits for its first boot"
      echo "$id" > "$DEFERRED/$n"
      continue
    fi
    target "$id"
    for ((try = 1; try <= TRIES; try++)); do
      if [ "$mode" = resume ]; then out=$(instance_start 2>&1) && break; else out=$(instance_stop 2>&1) && break; fi
      if [ "$try" -lt "$TRIES" ]; then sleep "$RETRY_S"; fi
    done
    out=$(oneline "$out")
    if [ "$try" -le "$TRIES" ]; then
      say "$mode $n: $id"
    elif [ "$mode" = resume ]; then
      retry_later "$n" "could not start $id: $out"
    else
      say "could not stop $n ($id): $out; trying again"
      return 1
    fi
  done
}
# A node Slurm counts as powered down (not powering up or down) whose instance is running bills while no job can use
# it (a stop lost with its request, an instance started by hand): it is stopped, every RECONCILE_POLLS. Only a node
# that has been up in Slurm before (its mark in $JOINED, made when the agent sees it up): Slurm also counts a CLOUD
# node powered down from slurmctld's start until its slurmd first registers, which follows a new node's whole first
# boot, and a node made without Slurm (a cluster deployed before Slurm was its default) never registers. And only
# once it has been seen so for RECONCILE_GRACE_S (ResumeTimeout): the first sighting is kept in $SEEN/<node>.
reconcile() {
  local n index id state started first now kind
  local -a down=() powered_down=() up=()
  mkdir -p "$SEEN" "$JOINED"
  while read -r kind n; do
    case "$kind" in
      up) touch "$JOINED/$n"; up+=("$n") ;;
      rising) up+=("$n") ;;
      down) powered_down+=("$n"); if [ -e "$JOINED/$n" ]; then down+=("$n"); fi ;;
    esac
  done < <(scontrol show nodes -o 2> /dev/null | awk '{
    name = ""; state = ""
    for (i = 1; i <= NF; i++) {
      if ($i ~ /^NodeName=/) name = substr($i, 10)
      if ($i ~ /^State=/) state = substr($i, 7)
    }
    if (name == "") next
    if (state ~ /POWERED_DOWN/ && state !~ /POWERING_/) print "down", name
    else if (state ~ /POWERING_UP/) print "rising", name
    else if (state !~ /POWER|NOT_RESPONDING|\*/) print "up", name
  }')
  found=""
  if [ "${#down[@]}" -gt 0 ] || compgen -G "$DEFERRED/*" > /dev/null; then lookup || return 0; fi
  now=$(date +%s)
  # Stops deferred during a first boot (act): made once it has had FIRST_BOOT_S, if the node still never came up.
  for f in "$DEFERRED"/*; do
    [ -e "$f" ] || continue
    n=${f##*/}
    index=${n#"$NODE_PREFIX"}
    id="" state="" started=""
    read -r id state started < <(instance_of "$index") || true
    # dropped once the node came up or is being started, or its instance is stopped or gone; kept otherwise (a
    # node still powering down, an instance pending or rebooting)
    if [ -e "$JOINED/$n" ] || [ -z "$id" ] || listed "$n" "${up[@]}"; then rm -f "$f"; continue; fi
    case "${state,,}" in stopped|stopping) rm -f "$f"; continue ;; esac
    if [ "${state,,}" != running ] || ! listed "$n" "${powered_down[@]}"; then continue; fi
    started_within "$FIRST_BOOT_S" && continue
    target "$id"
    if out=$(instance_stop 2>&1); then say "stopped $n ($id): it did not come up in Slurm within its first boot"; rm -f "$f"
    else say "could not stop $id of $n: $(oneline "$out")"; fi
  done
  for n in "${down[@]}"; do
    if is_spot "$n"; then continue; fi  # (a spot node cannot be stopped: act)
    index=${n#"$NODE_PREFIX"}
    id="" state="" started=""
    read -r id state started < <(instance_of "$index") || true
    [ "$index" != "$n" ] && [ "${state,,}" = running ] || continue
    first=$(cat "$SEEN/$n" 2> /dev/null || true)
    case "$first" in ''|*[!0-9]*) echo "$now" > "$SEEN/$n"; continue ;; esac
    [ $((now - first)) -ge "$RECONCILE_GRACE_S" ] || continue
    target "$id"
    if out=$(instance_stop 2>&1); then
      say "reconciled $n: Slurm counts it powered down but $id was running; stopped it"
      rm -f "$SEEN/$n"
    else say "could not stop $id of powered-down $n: $(oneline "$out")"; fi
  done
  # a node no longer seen powered down and running starts over
  for f in "$SEEN"/*; do
    [ -e "$f" ] || continue
    n=${f##*/}
    listed "$n" "${down[@]}" || rm -f "$f"
  done
}
# Requests are files <time>-<pid>.<mode> holding a hostlist, taken oldest first. A request being acted on is
# <name>.<mode>.work, so one the agent was stopped in the middle of is acted on again; a failed stop is too.
polls=0
while :; do
  for f in $(find "$SPOOL" -maxdepth 1 -type f \( -name '*.resume' -o -name '*.suspend' -o -name '*.work' \) -printf '%f\n' | sort); do
    case "$f" in *.work) work=$SPOOL/$f ;; *) work=$SPOOL/$f.work; mv -f "$SPOOL/$f" "$work" ;; esac
    mode=${work%.work}
    mode=${mode##*.}
    hosts=$(head -c 4096 "$work")
    case "$mode:$hosts" in
      resume:*|suspend:*) ;;
      *) say "ignored a malformed request: $f"; rm -f "$work"; continue ;;
    esac
    case "$hosts" in *[!A-Za-z0-9\[\],-]*|'') say "ignored a malformed request: $f"; rm -f "$work"; continue ;; esac
    if act "$mode" "$hosts" || [ "$mode" = resume ]; then rm -f "$work"; fi
  done
  polls=$((polls + 1))
  if [ $((polls % RECONCILE_POLLS)) -eq 0 ]; then reconcile; fi
  if [ "$MAX_POLLS" -gt 0 ] && [ "$polls" -ge "$MAX_POLLS" ]; then exit 0; fi
  sleep "$POLL_S"
done
'''

_REQUEST_BODY = r'''
# Hand the request to power-agent (root): one file, written whole, then renamed into place.
hostlist=${1:?usage: slurm-$MODE <hostlist>}
name="$SPOOL/$(date +%s%N)-$$"
printf '%s' "$hostlist" > "$name.tmp"
mv "$name.tmp" "$name.$MODE"
'''


def plan_tags(spec: "ClusterSpec") -> dict[str, str]:
    """The tags that say, on every GPU node instance of a validated stack, that Slurm powers it and within what
    (for the pricer, the policy pack and the review, which read plans, not user data)."""
    if spec.scheduler != "slurm" or ops(spec.cloud).instance_start is None:
        return {}
    tags = {POWER_TAG: "slurm"}
    if spec.schedule is not None:
        hours = run_windows.weekly_hours([run_windows.parse(w) for w in spec.schedule.windows])
        tags[RUN_HOURS_TAG] = f"{hours:g}"
    if spec.idle_stop is not None:
        tags[IDLE_MINUTES_TAG] = str(spec.idle_stop.for_minutes)
    return tags


def request_script(c: SlurmCluster, mode: str) -> str:
    """slurm-resume (mode resume) or slurm-suspend (mode suspend): slurmctld's ResumeProgram and SuspendProgram /
    ResumeFailProgram, run as SlurmUser with the nodes as a Slurm hostlist: they only queue the request."""
    if mode not in ("resume", "suspend"):
        raise ValueError(f"mode must be resume or suspend, not {mode!r}")
    return _script(f"Slurm {mode} program: ask power-agent to {'start' if mode == 'resume' else 'stop'} GPU nodes",
                   {"MODE": mode, "SPOOL": c.paths.power_spool}, _REQUEST_BODY)


RECONCILE_POLLS = 30
"""How often (in polls of POLL_S) power-agent looks for the instance of a node Slurm counts as powered down: a minute."""
RECONCILE_GRACE_S = RESUME_TIMEOUT_S
"""How long a node must have been seen powered down in Slurm with its instance running before power-agent stops it:
Slurm's ResumeTimeout, the time a node has to register."""
FIRST_BOOT_S = 7200
"""How long after its start a node that has never been up in Slurm is left to its first boot before a stop Slurm asks
for is made: Tencent's driver installer alone takes 15-25 minutes (components/tencentcloud/boot.py), then the CFS Turbo
client, the Slurm packages, the wait for rdma-agent (up to 10 min) and for the mounts (up to 17 min), and the health
check; ResumeTimeout (30 min) is what Slurm gives a resume, not a first boot."""


def stopped_mode(c: SlurmCluster) -> str:
    """Tencent StopInstances' StoppedMode: STOP_CHARGING ends a pay-as-you-go node's compute charges; a prepaid node is
    paid for its term whatever it does, and the API takes STOP_CHARGING only for pay-as-you-go instances
    (StoppedMode: "该参数只针对部分按量计费实例生效", CVM API 2017-03-12 StopInstances)."""
    return "KEEP_CHARGING" if c.prepaid else "STOP_CHARGING"


def agent_script(c: SlurmCluster, poll_s: int = 2, max_polls: int = 0, reconcile_polls: int = RECONCILE_POLLS,
                 reconcile_grace_s: int = RECONCILE_GRACE_S, first_boot_s: int = FIRST_BOOT_S) -> str:
    """power-agent: the root service on the head node that starts and stops the GPU node instances Slurm asked
    for, and stops the instance of a node Slurm counts as powered down. max_polls=0: forever (the systemd
    service); the tests bound it."""
    o = ops(c.cloud)
    if o.instance_lookup is None or o.instance_start is None or o.instance_stop is None:
        raise ValueError(f"no power saving commands for {c.cloud}")
    return _script("Start and stop the GPU node instances Slurm asks for (power saving)", {
        "SPOOL": c.paths.power_spool, "REGION": c.region, "CLUSTER": c.name,
        "CLUSTER_FILTER": o.cluster_filter.format(tag=NAME_TAG, cluster=c.name),
        "NODE_PREFIX": f"{c.name}-node-", "REASON_PREFIX": POWER_REASON_PREFIX,
        "TRIES": START_TRIES, "RETRY_S": START_RETRY_S, "POLL_S": poll_s, "MAX_POLLS": max_polls,
        "RECONCILE_POLLS": reconcile_polls, "RECONCILE_GRACE_S": reconcile_grace_s,
        "SEEN": f"{c.paths.power_spool}-seen", "JOINED": f"{c.paths.power_spool}-joined",
        "DEFERRED": f"{c.paths.power_spool}-deferred", "FIRST_BOOT_S": first_boot_s,
        "SPOT_NODES": " ".join(c.node_name(i) for i in c.spot_indices),
        **({"STOPPED_MODE": stopped_mode(c)} if "$STOPPED_MODE" in o.instance_stop else {}),
    }, _POWER_BODY, [shell.function("instance_lookup", o.instance_lookup),
                     shell.function("instance_start", o.instance_start),
                     shell.function("instance_stop", o.instance_stop)])


_WINDOW_BODY = r'''
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Inside a window now? The windows are the stack's schedule: (days Mon=0..Sun=6, start and end minute), in
# the schedule's time zone (Python's zoneinfo and the system's tz database follow daylight saving).
if ! inside=$(python3 - "$TIMEZONE" "$WINDOWS" <<'PY'
import datetime, sys, zoneinfo
now = datetime.datetime.now(zoneinfo.ZoneInfo(sys.argv[1]))
minute = now.hour * 60 + now.minute
for w in sys.argv[2].split(";"):
    days, start, end = w.split(" ")
    if str(now.weekday()) in days.split(",") and int(start) <= minute < int(end):
        print("yes")
        break
else:
    print("no")
PY
); then
  # Fail safe: no time, no window (the nodes do not run on unknown hours).
  echo "slurm-window: cannot tell the time in $TIMEZONE; the partition goes down" >&2
  scontrol update partitionname="$PARTITION" state=down || true
  exit 1
fi
state=$(scontrol show partition "$PARTITION" -o | sed -n 's/.* State=\([A-Z_]*\).*/\1/p')
if [ "$inside" = yes ]; then
  if [ "$state" != UP ]; then
    scontrol update partitionname="$PARTITION" state=up
    echo "slurm-window: a run window is open: $PARTITION is up; pending jobs start their nodes"
  fi
  exit 0
fi
if [ "$state" != DOWN ]; then
  scontrol update partitionname="$PARTITION" state=down
  echo "slurm-window: outside the run windows: $PARTITION is down; jobs wait for the next window"
fi
# Every node still up (not powered down, nor on its way down) is powered down now: its jobs are requeued.
up=$(scontrol show nodes -o | awk -v p="$NODE_PREFIX" '{
  name = ""; state = ""
  for (i = 1; i <= NF; i++) {
    if ($i ~ /^NodeName=/) name = substr($i, 10)
    if ($i ~ /^State=/) state = substr($i, 7)
  }
  if (index(name, p) == 1 && state !~ /POWERED_DOWN|POWERING_DOWN|POWER_DOWN/) print name
}' | paste -sd, -)
if [ -n "$up" ]; then
  scontrol update nodename="$up" state=power_down_force
  echo "slurm-window: outside the run windows: powering down $up"
fi
'''


def window_script(c: SlurmCluster) -> str:
    """slurm-window: run every minute on the head node (a systemd timer) when the stack has run windows."""
    if not c.windows:
        raise ValueError("the cluster has no run windows")
    parsed = [run_windows.parse(w) for w in c.windows]
    encoded = ";".join(f"{','.join(map(str, w.days))} {w.start} {w.end}" for w in parsed)
    return _script("Keep the Slurm partition to the run windows", {
        "PARTITION": c.name, "NODE_PREFIX": f"{c.name}-node-", "TIMEZONE": c.timezone, "WINDOWS": encoded,
    }, _WINDOW_BODY)


def idle_stop_note(spec: "ClusterSpec", stop_call: str, start_call: str, alarm: str) -> list[str]:
    """What Slurm power saving does with the stack's idle_stop, told the same way on every cloud (`stop_call` /
    `start_call`: the cloud API calls power-agent makes; `alarm`: the cloud's alarms, which stop nothing then)."""
    if spec.idle_stop is None or not plan_tags(spec):
        return []
    return [f"idle_stop with Slurm: Slurm power saving stops a GPU node that has had no job for "
            f"{spec.idle_stop.for_minutes} min (SuspendTime; the head node's power agent calls {stop_call}) "
            f"and starts it again for the next job that needs it ({start_call}; the job waits for the boot "
            f"and the health check, ResumeTimeout 30 min). A job in a CPU-only phase keeps its node; no "
            f"{alarm} stops anything (docs/slurm.md, \"What happens to a job\")"]


def schedule_note(spec: "ClusterSpec") -> list[str]:
    """What Slurm power saving does with the stack's run windows, on every cloud."""
    if spec.schedule is None or not plan_tags(spec):
        return []
    windows = f"{'; '.join(spec.schedule.windows)}, {spec.schedule.timezone}"
    return [f"schedule with Slurm: outside the run windows ({windows}) the head node's slurm-window timer sets "
            f"the Slurm partition DOWN, so jobs queue and wait, and powers down every GPU node still up (its "
            f"running jobs are requeued); inside them the partition is UP and pending jobs start their nodes. "
            f"Slurm alone starts and stops the GPU nodes; the head node runs all the time, so jobs can be "
            f"submitted at any hour. The cost estimate counts the GPU nodes for the windows' hours, at most"]
