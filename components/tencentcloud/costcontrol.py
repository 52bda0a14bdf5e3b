"""Cost controls on Tencent Cloud: run windows and idle stop through one SCF function.

Tencent Cloud has no scheduler that starts and stops instances: `cvm.ActionTimer` only terminates
("currently only supports scheduled destruction", provider doc cvm_action_timer v1.82.42), Auto
Scaling schedules change a group's size, and Cloud Monitor alarms only notify. The documented way
to run code on a timer is a Serverless Cloud Function with timer triggers (provider doc scf_function
v1.82.42: triggers type "timer", trigger_desc a cron expression), so the cluster gets one function
(components/tencentcloud/scf_cost_controls.py) that calls the CVM API with STOP_CHARGING, under an
execution role that may start and stop only this cluster's nodes.

- The timer's cron time zone is not documented, so no cron carries the schedule's hours: the
  "windows" trigger fires every hour at each minute a window edge can fall on in UTC, and the
  function decides in the schedule's own IANA zone (shipped in the code package) whether an edge is
  now. Any whole-hour offset of the timer leaves those minutes unchanged.
- Budgets on Tencent Cloud only remind (billing.Budget has no action): `budget.stop_at_pct` adds a
  reminder at that share and the plan says nothing stops the nodes (components/tencentcloud/notes.py).
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components import run_windows
from components.clouds import OFFLINE_RENDER_ENV
from components.spec import IdleStop, Schedule
from components.tencentcloud import scf_cost_controls as handler
from components.tencentcloud.cam import service_role_document

RUNTIME = "Python3.9"
"""Set explicitly: the provider's default is Python2.7 and it sends any string (resource_tc_scf_function.go
has no ValidateFunc). Python 3.9 is a current SCF runtime (SCF documentation, "Runtime Environment",
tencentcloud.com/document/product/583/40323, which lists Python 3.10, 3.9, 3.7, 3.6 and 2.7); the vendored
SDK's API model of v1.82.42 predates it and lists older ones only."""
TIMEOUT_S = 300
"""Each API call may take up to 20 s (handler HTTP timeout), and idle stop of 64 nodes makes seven
GetMonitorData calls besides the describe and stop; the provider allows 1-900 s."""
IDLE_CRON = "0 */5 * * * * *"
"""Every 5 minutes: seconds minutes hours day month week year (SCF documentation, "Timer trigger",
cron syntax 1 with seven fields)."""
PACKAGE_DIR = Path("gpu-cluster") / "tencent-cost-controls"
"""Where `pulumi up` writes the code package: under the user's cache folder ($XDG_CACHE_HOME, else
~/.cache), outside the checkout, named by its content's hash (content-addressed: a package is written
once, and the provider updates the code only when the path changes, d.HasChange("zip_file")). The
provider reads `zip_file` as a local path at create and update (resource_tc_scf_function.go)."""
OFFLINE_CACHE = "~/.cache"
"""The cache folder an offline render names (it writes nothing), so a plan is the same on every machine."""
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def edge_minutes(events: Sequence[run_windows.Event], timezone: str) -> list[int]:
    """Minutes of the hour (UTC) at which a window edge can fall, over the zone's offsets in a year."""
    import zoneinfo

    zone = zoneinfo.ZoneInfo(timezone)
    offsets = {int(datetime.datetime(2027, month, 15, 12, tzinfo=zone).utcoffset().total_seconds() // 60)
               for month in range(1, 13)}
    return sorted({(e.minute - off) % 60 for e in events for off in offsets})


def windows_cron(events: Sequence[run_windows.Event], timezone: str) -> str:
    return f"0 {','.join(map(str, edge_minutes(events, timezone)))} * * * * *"


def late_seconds(events: Sequence[run_windows.Event], timezone: str) -> int:
    """How long after an edge the function still acts on it: EDGE_LATE_S, but less than the time to the
    trigger's next run, so that run does not apply the same edge again (it would restart a node stopped
    for idleness in between)."""
    minutes = edge_minutes(events, timezone)
    gap = min(((b - a) % 60 or 60) for a, b in zip(minutes, minutes[1:] + minutes[:1])) if minutes else 60
    return min(handler.EDGE_LATE_S, gap * 60 - 60)


def code_package(timezone: Optional[str], config: str) -> bytes:
    """index.py, its configuration and the schedule's time zone file, as a reproducible zip (fixed times
    and order)."""
    files = {"index.py": Path(handler.__file__).read_bytes(), handler.CONFIG_FILE: config.encode()}
    if timezone:
        files[handler.ZONE_FILE] = resources.files("tzdata.zoneinfo").joinpath(timezone).read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, _FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, files[name])
    return out.getvalue()


def cache_dir() -> Path:
    """The user's cache folder (XDG Base Directory specification: $XDG_CACHE_HOME, else ~/.cache)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


def write_package(data: bytes, cache: Optional[Path] = None) -> str:
    """The package's path for `zip_file`, written there once (atomically, never through a symbolic link
    for the file itself). An offline render (OFFLINE_RENDER_ENV) writes nothing and names the default
    cache folder as ~/.cache."""
    rel = PACKAGE_DIR / f"cost-controls-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    if os.environ.get(OFFLINE_RENDER_ENV) and cache is None:
        return f"{OFFLINE_CACHE}/{rel.as_posix()}"
    path = (cache if cache is not None else cache_dir()) / rel
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        tmp.replace(path)
    return str(path)


def handler_config(region: str, node_ids: list, gpu_node_ids: list, schedule: Optional[Schedule],
                   idle: Optional[IdleStop]) -> str:
    events = run_windows.events([run_windows.parse(w) for w in schedule.windows]) if schedule else []
    return json.dumps({
        "region": region, "nodes": node_ids, "gpu_nodes": gpu_node_ids,
        "timezone": schedule.timezone if schedule else None,
        "events": [[e.action, list(e.days), e.minute] for e in events],
        "late_s": late_seconds(events, schedule.timezone) if schedule else handler.EDGE_LATE_S,
        "idle": {"below_pct": idle.gpu_util_below_pct, "for_minutes": idle.for_minutes} if idle else None,
    }, sort_keys=True, separators=(",", ":"))


def role_document() -> str:
    """Trust: SCF assumes the role."""
    return service_role_document("scf.qcloud.com")


def policy_document(region: str, owner_uin: str, node_ids: list) -> str:
    """Start and stop these instances only; read their state and GPU metric (CAM resource format
    qcs::cvm:<region>:uin/<owner>:instance/<id>: CVM documentation, "Authorizable Resource Types")."""
    instances = [f"qcs::cvm:{region}:uin/{owner_uin}:instance/{i}" for i in node_ids]
    return json.dumps({"version": "2.0", "statement": [
        {"effect": "allow", "action": ["name/cvm:StartInstances", "name/cvm:StopInstances"], "resource": instances},
        {"effect": "allow", "action": ["name/cvm:DescribeInstancesStatus", "name/monitor:GetMonitorData"],
         "resource": ["*"]},
    ]}, sort_keys=True)


@dataclass(frozen=True)
class CostControlArgs:
    cluster_name: str
    region: str
    node_ids: Sequence[pulumi.Input[str]]
    """Every instance the windows start and stop (GPU nodes, and the head node where there is one)."""
    gpu_node_ids: Sequence[pulumi.Input[str]]
    """The instances idle stop watches."""
    tags: Mapping[str, str]
    schedule: Optional[Schedule] = None
    idle_stop: Optional[IdleStop] = None


class CostControls(pulumi.ComponentResource):
    function_name: pulumi.Output[str]

    def __init__(self, name: str, args: CostControlArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:CostControls", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix = args.cluster_name
        owner = tencentcloud.user.get_info_output(opts=pulumi.InvokeOutputOptions(parent=self)).owner_uin
        role = tencentcloud.cam.Role(f"{prefix}-cost-controls-role", name=f"{prefix}-cost-controls",
                                     document=role_document(),
                                     description=f"Starts and stops the nodes of {prefix} (gpu-cluster cost controls)",
                                     tags=dict(args.tags), opts=child)
        policy = tencentcloud.cam.Policy(
            f"{prefix}-cost-controls-policy", name=f"{prefix}-cost-controls",
            document=pulumi.Output.all(owner, *args.node_ids).apply(
                lambda v: policy_document(args.region, v[0], list(v[1:]))),
            description=f"Start and stop the nodes of {prefix}", opts=child)
        attach = tencentcloud.cam.RolePolicyAttachment(f"{prefix}-cost-controls-attach", role_id=role.id,
                                                       policy_id=policy.id, opts=child)

        triggers = []
        if args.schedule is not None:
            events = run_windows.events([run_windows.parse(w) for w in args.schedule.windows])
            triggers.append({"name": "windows", "type": "timer",
                             "trigger_desc": windows_cron(events, args.schedule.timezone)})
        if args.idle_stop is not None:
            triggers.append({"name": "idle", "type": "timer", "trigger_desc": IDLE_CRON})
        config = pulumi.Output.all(pulumi.Output.all(*args.node_ids), pulumi.Output.all(*args.gpu_node_ids)).apply(
            lambda v: handler_config(args.region, list(v[0]), list(v[1]), args.schedule, args.idle_stop))
        function = tencentcloud.scf.Function(
            f"{prefix}-cost-controls",
            name=f"{prefix}-cost-controls",
            # Letters, digits, spaces, commas and periods only (the contract's pattern, from the API model).
            description=f"gpu cluster {prefix.replace('-', ' ')}, run windows and idle stop",
            runtime=RUNTIME,
            handler="index.main",
            timeout=TIMEOUT_S,
            # The package carries the node ids, so it is written once they are known (before the function
            # is created; a preview shows it unknown), and a replaced node updates the function's code.
            zip_file=config.apply(lambda c: write_package(code_package(args.schedule.timezone if args.schedule
                                                                       else None, c))),
            role=role.name,
            # Reach the public API endpoints: without a VPC the provider still sends the public-network
            # switch, and its default is off (resource_tc_scf_function.go: enable_public_net, Default false,
            # sent as PublicNetStatus DISABLE; SCF documentation, "Function overview": a function with the
            # public network disabled "cannot access public network resources").
            enable_public_net=True,
            triggers=triggers,
            tags=dict(args.tags),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[attach]))
        self.function_name = function.name
        # The configuration the package carries, as an output of this component: a plan or a stack export
        # holds it, so the pricer and the review read the schedule there, not in a file on disk.
        self.register_outputs({"function_name": self.function_name, "config": config})
