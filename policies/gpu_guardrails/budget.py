"""Cost guardrails: someone hears about GPU spend, and the budget covers what the stack will cost."""

from __future__ import annotations

from typing import Any

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, StackValidationPolicy

from .props import UNKNOWN, as_number, as_str, get, items, short
from .stack import StackView, config_value, view_of

AWS_BUDGET = "aws:budgets/budget:Budget"
TC_BUDGET = "tencentcloud:Billing/budget:Budget"


def _subscribed(notification: Any) -> bool:
    for key in ("subscriberEmailAddresses", "subscriberSnsTopicArns"):
        value = get(notification, key)
        if value is UNKNOWN or any(v is UNKNOWN or as_str(v) for v in items(value)):
            return True
    return False


def _budget_alarm(args: Any, report_violation: Any) -> None:
    view = view_of(args.resources)
    nodes = view.gpu_nodes()
    if not nodes:
        return
    forecast = config_value(args, "requireForecast", False) is True
    ok = False
    for b in view.of_type(AWS_BUDGET):
        notes = get(b.props, "notifications")
        if notes is UNKNOWN:
            ok = True
        for n in items(notes):
            if _subscribed(n) and (not forecast or get(n, "notificationType") in ("FORECASTED", UNKNOWN)):
                ok = True
    for b in view.of_type(TC_BUDGET):
        # Tencent sends budget alerts to the account's message-center contacts: a warning is a subscription.
        warns = get(b.props, "warnJsons")
        if warns is UNKNOWN or any(not forecast or get(w, "warnType") in ("FORECAST", UNKNOWN) for w in items(warns)):
            ok = True
    if not ok:
        machines = sum(n.count for n in nodes)
        report_violation(
            f"The stack runs {machines} GPU node(s) (first: '{short(nodes[0].urn)}') but no budget notifies anyone"
            f"{' of a forecast overrun' if forecast else ''}; add an aws.budgets.Budget with a notification to an "
            f"e-mail address or SNS topic (Tencent: a billing.Budget with warn_jsons).", nodes[0].urn)


budget_alarm = StackValidationPolicy(
    name="budget-alarm",
    description="A stack with GPU nodes has a budget whose notification reaches a subscriber.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_budget_alarm,
    config_schema=PolicyConfigSchema(properties={
        "requireForecast": {
            "type": "boolean", "default": False,
            "description": "Require a forecast notification (AWS FORECASTED / Tencent FORECAST), not only actual spend.",
        },
    }),
    remediation_steps="Set cluster.budget (monthly_limit, emails); the program creates the budget and its notifications.",
)


def _limits(view: StackView) -> list[tuple[Any, float, str]]:
    """(budget, monthly limit, currency or '' when the provider does not say)."""
    out = []
    for b in view.of_type(AWS_BUDGET):
        limit = as_number(get(b.props, "limitAmount"))
        if limit is not None and get(b.props, "timeUnit", "MONTHLY") == "MONTHLY":
            out.append((b, limit, as_str(get(b.props, "limitUnit")) or "USD"))
    for b in view.of_type(TC_BUDGET):
        limit = as_number(get(b.props, "budgetQuota"))
        if limit is not None and get(b.props, "cycleType", "MONTH") == "MONTH":
            out.append((b, limit, ""))
    return out


def _budget_covers_estimate(args: Any, report_violation: Any) -> None:
    estimate = get(args.get_config(), "monthlyEstimate")
    total = as_number(get(estimate, "total"))
    currency = as_str(get(estimate, "currency")) or ""
    if total is None:
        args.not_applicable("no monthly estimate in the policy config (monthlyEstimate); the offline runner "
                            "supplies it, `pulumi preview` needs it in --policy-pack-config")
    tolerance = as_number(config_value(args, "tolerancePct", 0)) or 0.0
    tencent_currency = as_str(config_value(args, "tencentBudgetCurrency", "CNY")) or "CNY"
    unpriced = get(estimate, "unpriced")
    unpriced_n = len(items(unpriced)) if not isinstance(unpriced, (int, float)) else int(unpriced)
    view = view_of(args.resources)
    for b, limit, unit in _limits(view):
        unit = unit or tencent_currency
        if unit != currency:
            continue
        named = as_str(get(estimate, "unpricedItems")) or ""
        if total > limit * (1 + tolerance / 100):
            note = f" ({unpriced_n} item(s) could not be priced, so the real figure is higher)" if unpriced_n else ""
            report_violation(
                f"The estimated monthly cost {total:,.0f} {currency}{note} exceeds budget '{short(b.urn)}' of "
                f"{limit:,.0f} {unit}; raise cluster.budget.monthly_limit or shrink the cluster (nodes, tier, "
                f"purchase).", b.urn)
        elif unpriced_n:
            # Within the budget only as far as it is priced: the estimate cannot say the budget covers the cluster.
            report_violation(
                f"The estimated monthly cost is incomplete: at least {total:,.0f} {currency}, and {unpriced_n} item(s) "
                f"could not be priced{' (' + named + ')' if named else ''}, so whether budget '{short(b.urn)}' of "
                f"{limit:,.0f} {unit} covers the cluster is unknown; price them with a price file (gpu-cluster "
                f"prices) and plan again.", b.urn)


budget_covers_estimate = StackValidationPolicy(
    name="budget-covers-estimate",
    description="The estimated monthly cost of the stack stays within its monthly budget.",
    enforcement_level=EnforcementLevel.ADVISORY,
    validate=_budget_covers_estimate,
    config_schema=PolicyConfigSchema(properties={
        "monthlyEstimate": {
            "type": "object",
            "properties": {
                "total": {"type": "number", "minimum": 0},
                "currency": {"type": "string"},
                "unpriced": {"type": "integer", "minimum": 0},
                "unpricedItems": {"type": "string"},
            },
            "description": "The stack's estimated monthly cost; filled in by the offline runner from the "
                           "pricer, or by CI from build/plans/<stack>.report.json for `pulumi preview`.",
        },
        "tolerancePct": {
            "type": "number", "minimum": 0, "default": 0,
            "description": "How far (in %) the estimate may exceed the budget before this policy reports.",
        },
        "tencentBudgetCurrency": {
            "type": "string", "default": "CNY",
            "description": "Currency of Tencent budgets (the provider does not record it): the account's.",
        },
    }),
    remediation_steps="Raise cluster.budget.monthly_limit to the estimate, or reduce nodes / tier / use spot.",
)
