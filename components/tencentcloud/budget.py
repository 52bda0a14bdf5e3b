"""Spend control on Tencent Cloud: a monthly billing budget and the alarm notice for the cluster.

Who hears about it: Tencent delivers budget reminders and Cloud Monitor alarms to CAM users (via
the e-mail bound to each user), never to raw e-mail addresses (`monitor.AlarmNotice.user_notices.
user_ids` are CAM user UIDs; `billing.Budget` has no receiver field at all: budget reminders go to the
account's message-center subscribers). So the alarm notice goes to the CAM users that carry the
spec's e-mail addresses, looked up at deploy time, and the addresses are written into the budget note.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Mapping, Optional

import pulumi
import tencentcloud_iac_pulumi as tencentcloud

from components import catalog
from components.clouds import OFFLINE_RENDER_ENV
from components.spec import NAME_TAG

FORECAST_PCT = 100

# A budget needs a validity window (period_begin / period_end, "YYYY-MM" for monthly budgets, provider doc
# billing_budget v1.82.42). It begins in the month of the first `pulumi up` and runs ten years; the budget then
# ignores both fields, so later updates never move its start. An offline render (the plan, the tests, the
# review) takes the month of the catalogue's newest dated fact instead of the clock, so the same repository
# renders the same plan on any day.
PERIOD_YEARS = 10


def period(today: datetime.date) -> tuple[str, str]:
    """(period_begin, period_end) of a budget made `today`: this month to the month before the same month
    PERIOD_YEARS later (2026-12 → 2036-11)."""
    end_year, end_month = today.year + PERIOD_YEARS, today.month - 1
    if end_month == 0:
        end_year, end_month = end_year - 1, 12
    return f"{today.year:04d}-{today.month:02d}", f"{end_year:04d}-{end_month:02d}"


def deploy_date() -> datetime.date:
    """Today (UTC) for a real deployment; the catalogue's newest fact date for an offline render."""
    if os.environ.get(OFFLINE_RENDER_ENV) == "1":
        return catalog.newest_fact_date()
    return datetime.datetime.now(datetime.timezone.utc).date()


def warn_jsons(thresholds_pct: tuple[int, ...]) -> list[dict]:
    """One ACTUAL reminder per threshold and one FORECAST reminder at 100 % (the facts' FORECAST,
    not FORECASTED), all as percentages of the quota."""
    actual = [{"warn_type": "ACTUAL", "cal_type": "PERCENTAGE", "threshold_value": str(t)} for t in thresholds_pct]
    return actual + [{"warn_type": "FORECAST", "cal_type": "PERCENTAGE", "threshold_value": str(FORECAST_PCT)}]


def cam_uid(users: list, email: str) -> int:
    """The UID of the CAM user whose e-mail is `email` (tencentcloud.cam.get_users filters the account's
    sub-users by exact e-mail: data_source_tc_cam_users.go), or a sentence when none has it."""
    uids = [u.uid for u in users or [] if u.uid]
    if not uids:
        raise pulumi.RunError(
            f"budget.emails: no CAM user of this account has the e-mail {email}; Tencent Cloud sends alarms only to "
            f"CAM users — create one with that address (CAM console → Users) or remove it from budget.emails")
    return int(uids[0])


@dataclass(frozen=True)
class BudgetArgs:
    cluster_name: str
    """Prefix of every resource name; the budget counts only resources tagged gpu-cluster:name=<this>."""
    monthly_limit: float
    """Quota per month, in the account's settlement currency."""
    thresholds_pct: tuple[int, ...]
    """ACTUAL reminders, % of the quota; a FORECAST reminder at 100 % is always added."""
    emails: tuple[str, ...]
    """Who should hear; recorded in the budget note (Tencent needs them bound to CAM users)."""
    tags: Mapping[str, str]


class Budget(pulumi.ComponentResource):
    budget_id: pulumi.Output[str]
    notice_id: pulumi.Output[str]
    """Cloud Monitor alarm notice used by the GPU alarms."""

    def __init__(self, name: str, args: BudgetArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-cluster:tencentcloud:Budget", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix = args.cluster_name

        # Filtering by tag needs gpu-cluster:name enabled as a cost allocation tag
        # (billing.AllocationTag). That switch is account-wide and shared by every cluster, so it is
        # left to the account owner rather than owned (and deleted) by one cluster's stack.
        begin, end = period(deploy_date())
        budget = tencentcloud.billing.Budget(
            f"{prefix}-budget",
            budget_name=prefix,
            cycle_type="MONTH",
            plan_type="FIX",
            budget_quota=f"{args.monthly_limit:.2f}",
            bill_type="BILL",
            fee_type="REAL_COST",
            period_begin=begin,
            period_end=end,
            warn_jsons=warn_jsons(args.thresholds_pct),
            dimensions_range={"tags": [{"tag_key": NAME_TAG, "tag_values": [prefix]}]},
            budget_note=f"gpu-cluster {prefix}; notify: {', '.join(args.emails)} "
                        f"(bind these addresses to CAM users to receive reminders)",
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["periodBegin", "periodEnd"]),
        )
        # Alarm notices go to CAM users by UID, not by e-mail and not by UIN (provider doc
        # monitor_alarm_notice v1.82.42: "User UID List"): each address of budget.emails is looked up
        # among the account's CAM users, and an address no user carries stops `pulumi up` with a
        # sentence instead of creating a notice that reaches nobody.
        uids = [tencentcloud.cam.get_users_output(email=email, opts=pulumi.InvokeOutputOptions(parent=self))
                .user_lists.apply(lambda users, email=email: cam_uid(users, email)) for email in args.emails]
        notice = tencentcloud.monitor.AlarmNotice(
            f"{prefix}-notice",
            name=prefix,
            notice_type="ALL",
            notice_language="en-US",
            user_notices=[{
                "receiver_type": "USER",
                "notice_ways": ["EMAIL"],
                "user_ids": uids,
                "start_time": 0,
                "end_time": 86399,
            }],
            opts=child,
        )
        self.budget_id, self.notice_id = budget.id, notice.id
        self.register_outputs({"budget_id": self.budget_id, "notice_id": self.notice_id})
