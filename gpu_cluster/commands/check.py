"""`gpu-cluster check PLAN`: the policy pack on a plan or on a `pulumi stack export` file.

Exit 0 when no mandatory policy is violated, 1 when one is, 2 when the file cannot be read or judged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu_cluster import ui
from gpu_cluster.errors import EXIT_OK, EXIT_VIOLATION, UserError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="run the policy pack on a plan or `pulumi stack export` file",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("plan", metavar="PLAN", help="plan or stack-export JSON file")
    p.add_argument("--policy-config", metavar="FILE", help="policy-config JSON file (Pulumi's format)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpu_cluster.plan import Plan
    from gpu_cluster.policyrun import format_violations, load_policy_config, run_policies

    config = load_policy_config(args.policy_config)
    ui.note(f"reading {args.plan}")
    plan = Plan.load(Path(args.plan))
    ui.note(f"judging {len(plan.resources)} resources")
    try:
        violations = run_policies(plan, config)
    except RuntimeError as e:
        raise UserError(f"{args.plan}: a policy could not judge this file: {e}") from None
    ui.line(format_violations(violations))
    return EXIT_VIOLATION if any(v.enforcement == "mandatory" for v in violations) else EXIT_OK
