"""The cluster's cost controls on Tencent Cloud, run by SCF (Python 3.9, standard library only).

Shipped as `index.py` of the function's code package (components/tencentcloud/costcontrol.py) with
the schedule's time zone file and its configuration, `config.json` (the node ids, the windows, the
idle rule). Two timer triggers call `main`:

- "windows" fires every hour at the minutes a run window may begin or end; the function starts the
  stopped nodes when a window begins now (in the schedule's own time zone) and stops the running ones
  when it ends. It acts only at a window's edge (or up to 25 minutes after it, for a late or retried
  invocation), like the AWS schedules, so a node started by hand outside the windows is left alone
  until the next edge.
- "idle" fires every 5 minutes; a GPU node whose 5-minute GPU utilisation (Cloud Monitor QCE/CVM
  GpuUtil) stayed below the threshold in every period of the last `for_minutes` is stopped. A period
  without data is not idle: a node that reports nothing is never stopped.

Stopping uses StoppedMode STOP_CHARGING and StopType SOFT_FIRST (forced when a soft stop fails);
STOP_CHARGING ends compute charges of pay-as-you-go nodes with cloud disks (CVM API StopInstances;
CVM documentation "No charges when shut down",
intl.cloud.tencent.com/document/product/213/19918). Requests are signed with TC3-HMAC-SHA256 (Tencent Cloud API 3.0
documentation, "Calling Method → Signature v3", with its worked example) using the temporary keys SCF puts in
the environment for the function's execution role (SCF documentation, "Roles and Authorization").
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import time
import urllib.request
import zoneinfo
from typing import Any, Callable, Optional

CONFIG_FILE = "config.json"
"""The function's configuration, in its code package: SCF's documentation limits an environment
variable's value to letters, digits and "_" of at most 64 bytes (SCF documentation, "Environment
variables", tencentcloud.com/document/product/583/32748; the API model, scf/v20180416 models.go
`Variable.Value`, says only that it is not empty), which a list of node ids and windows does not fit."""
ZONE_FILE = "zone.tzif"
EDGE_TOLERANCE_S = 120
"""A window edge counts as "now" from two minutes before it (timer triggers fire within the minute)..."""
EDGE_LATE_S = 1500
"""...to 25 minutes after it: a failed call raises, and SCF retries an asynchronous invocation (a timer's)
in the background 3 times (SCF FAQ, "Scalability and availability": "异步调用的函数将在后台自动重试 3 次");
a retry that comes late still acts on the edge. Acting again changes nothing (only nodes in the other
state are started or stopped); where the trigger runs again sooner (edges at :00 and :15), the
configuration's `late_s` is shorter than that (costcontrol.late_seconds), so the next run never applies
the same edge again to a node stopped or started in between."""
IDLE_PERIOD_S = 300
MONITOR_BATCH = 10
"""GetMonitorData takes at most 10 instances a request (Cloud Monitor documentation, "Pulling cloud
product monitoring data with the API")."""
CVM = ("cvm", "2017-03-12")
MONITOR = ("monitor", "2018-07-24")


def sign(secret_id: str, secret_key: str, service: str, host: str, timestamp: int, payload: str,
         method: str = "POST", query: str = "", content_type: str = "application/json") -> str:
    """The Authorization header of a TC3-HMAC-SHA256 request (API 3.0 "Signature v3")."""
    canonical = "\n".join([method, "/", query, f"content-type:{content_type}\nhost:{host}\n", "content-type;host",
                           hashlib.sha256(payload.encode()).hexdigest()])
    date = datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).strftime("%Y-%m-%d")
    scope = f"{date}/{service}/tc3_request"
    to_sign = "\n".join(["TC3-HMAC-SHA256", str(timestamp), scope, hashlib.sha256(canonical.encode()).hexdigest()])

    def mac(key: bytes, msg: str) -> bytes:
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    key = mac(mac(mac(("TC3" + secret_key).encode(), date), service), "tc3_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"TC3-HMAC-SHA256 Credential={secret_id}/{scope}, SignedHeaders=content-type;host, Signature={signature}"


Call = Callable[[tuple[str, str], str, dict], dict]


def api(region: str, env: Optional[dict] = None) -> Call:
    """call(service, action, params) → the Response object, with the execution role's keys."""
    env = os.environ if env is None else env

    def call(service: tuple[str, str], action: str, params: dict) -> dict:
        name, version = service
        host = f"{name}.tencentcloudapi.com"
        payload, now = json.dumps(params), int(time.time())
        headers = {"Authorization": sign(env["TENCENTCLOUD_SECRETID"], env["TENCENTCLOUD_SECRETKEY"], name, host, now,
                                         payload),
                   "Content-Type": "application/json", "Host": host, "X-TC-Action": action,
                   "X-TC-Timestamp": str(now), "X-TC-Version": version, "X-TC-Region": region}
        if env.get("TENCENTCLOUD_SESSIONTOKEN"):
            headers["X-TC-Token"] = env["TENCENTCLOUD_SESSIONTOKEN"]
        request = urllib.request.Request(f"https://{host}/", data=payload.encode(), headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=20) as answer:  # noqa: S310 (a fixed https endpoint)
            body = json.loads(answer.read())["Response"]
        if "Error" in body:
            raise RuntimeError(f"{action}: {body['Error'].get('Code')}: {body['Error'].get('Message')}")
        return body

    return call


def edge_now(events: list, zone: datetime.tzinfo, now: float, late_s: float = EDGE_LATE_S) -> Optional[str]:
    """The action of the latest window edge from `late_s` before `now` to EDGE_TOLERANCE_S after it, or
    None. `events` are [action, days (0 = Monday), minute of the day] in the schedule's time zone."""
    local = datetime.datetime.fromtimestamp(now, zone)
    best: Optional[tuple[float, str]] = None
    for action, days, minute in events:
        for shift in (-1, 0, 1):  # an edge just before or after midnight
            day = local + datetime.timedelta(days=shift)
            if day.weekday() not in days:
                continue
            edge = day.replace(hour=minute // 60, minute=minute % 60, second=0, microsecond=0)
            # Absolute instants (aware datetimes of one zone subtract as wall clocks): an edge in a
            # spring-forward gap falls an hour later, as the clock reads then.
            gap = now - edge.timestamp()  # > 0: the edge has passed
            if -EDGE_TOLERANCE_S <= gap <= late_s and (best is None or gap < best[0]):
                best = (gap, action)
    return best[1] if best else None


def states(call: Call, ids: list) -> dict:
    """InstanceState by id (DescribeInstancesStatus takes up to 100 ids a request)."""
    out = {}
    for first in range(0, len(ids), 100):
        answer = call(CVM, "DescribeInstancesStatus", {"InstanceIds": ids[first:first + 100], "Limit": 100})
        out.update({s["InstanceId"]: s["InstanceState"] for s in answer.get("InstanceStatusSet", [])})
    return out


def stop(call: Call, ids: list) -> None:
    if ids:
        # SOFT_FIRST: a forced stop when the guest ignores the soft one; the API's default, SOFT, only asks
        # ("SOFT：仅软关机 ... 默认取值：SOFT", StopInstances StopType, CVM API 2017-03-12), and a node that
        # ignored it would keep running and billing.
        call(CVM, "StopInstances", {"InstanceIds": ids, "StoppedMode": "STOP_CHARGING", "StopType": "SOFT_FIRST"})


def idle_nodes(points: list, below_pct: float, for_minutes: int, now: float) -> list:
    """Nodes whose every 5-minute GpuUtil value of the last `for_minutes` is below the threshold, with
    no period missing (GetMonitorData DataPoints: Dimensions, Timestamps, Values)."""
    periods = for_minutes * 60 // IDLE_PERIOD_S
    out = []
    for point in points:
        node = next((d["Value"] for d in point.get("Dimensions", []) if d.get("Name") == "InstanceId"), None)
        recent = [v for t, v in zip(point.get("Timestamps", []), point.get("Values", []))
                  if t > now - for_minutes * 60 - IDLE_PERIOD_S and v is not None]
        if node and len(recent) >= periods and all(v < below_pct for v in recent[-periods:]):
            out.append(node)
    return out


def run(config: dict, trigger: str, call: Call, now: float, zone: Optional[datetime.tzinfo]) -> dict:
    """What one trigger does; returns what it did (SCF logs the return value)."""
    if trigger == "windows":
        action = edge_now(config["events"], zone, now, config.get("late_s", EDGE_LATE_S))
        if action is None:
            return {"windows": "no window edge now"}
        current = states(call, config["nodes"])
        if action == "start":
            ids = [i for i, s in current.items() if s == "STOPPED"]
            if ids:
                call(CVM, "StartInstances", {"InstanceIds": ids})
        else:
            ids = [i for i, s in current.items() if s == "RUNNING"]
            stop(call, ids)
        return {"windows": action, "instances": ids}
    if trigger == "idle":
        idle = config["idle"]
        start = datetime.datetime.fromtimestamp(now - idle["for_minutes"] * 60 - IDLE_PERIOD_S, datetime.timezone.utc)
        end = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
        points = []
        nodes = config["gpu_nodes"]
        for first in range(0, len(nodes), MONITOR_BATCH):
            answer = call(MONITOR, "GetMonitorData", {
                "Namespace": "QCE/CVM", "MetricName": "GpuUtil", "Period": IDLE_PERIOD_S,
                "StartTime": start.isoformat(timespec="seconds"), "EndTime": end.isoformat(timespec="seconds"),
                "Instances": [{"Dimensions": [{"Name": "InstanceId", "Value": i}]}
                              for i in nodes[first:first + MONITOR_BATCH]]})
            points += answer.get("DataPoints", [])
        candidates = idle_nodes(points, idle["below_pct"], idle["for_minutes"], now)
        running = states(call, candidates) if candidates else {}
        ids = [i for i in candidates if running.get(i) == "RUNNING"]
        stop(call, ids)
        return {"idle_stopped": ids}
    raise ValueError(f"unknown trigger {trigger!r}")


def main(event: dict, context: Any = None) -> dict:
    """SCF entry point (handler index.main). The timer event names its trigger in TriggerName."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, CONFIG_FILE), encoding="utf-8") as f:
        config = json.load(f)
    zone = None
    if config.get("events"):
        with open(os.path.join(here, ZONE_FILE), "rb") as f:
            zone = zoneinfo.ZoneInfo.from_file(f, key=config["timezone"])
    return run(config, event.get("TriggerName", ""), api(config["region"]), time.time(), zone)
