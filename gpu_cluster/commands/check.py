"""`gpu-cluster check PLAN`: the policy pack on a plan, a `pulumi stack export` or a DIY-backend state file.

Exit 0 when no mandatory policy is violated, 1 when one is, 2 when the file cannot be read or judged
(missing, not JSON, not an export of version 3 or 4, malformed, or holding no resources) — always as
one sentence naming the file, never a traceback.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpu_cluster import ui
from gpu_cluster.errors import EXIT_OK, EXIT_VIOLATION, UserError

PROGRESS_FROM = 5_000
"""From this many resources on, each step of the judging is reported as it starts."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="run the policy pack on a plan, `pulumi stack export` or state file",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("plan", metavar="PLAN", help="plan, stack-export (version 3 or 4) or DIY-backend state JSON file")
    p.add_argument("--policy-config", metavar="FILE", help="policy-config JSON file (Pulumi's format)")
    p.add_argument("--strict", action="store_true",
                   help="every policy in strict mode: a property a rule needs that is unknown fails it")
    p.add_argument("--json", action="store_true", help="one JSON document on standard output (docs/cli-json.md)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpu_cluster.plan import Plan
    from gpu_cluster.policyrun import POLICIES, format_violations, load_policy_config, run_policies, strict_config

    config = load_policy_config(args.policy_config)
    if args.strict:
        config = strict_config(config)
    started = time.perf_counter()
    ui.note(f"reading {args.plan}")
    plan = Plan.load(Path(args.plan))
    real = [r for r in plan.resources if r.type != "pulumi:pulumi:Stack" and not r.type.startswith("pulumi:providers:")]
    if not real:
        skipped = f" ({plan.skipped} pending deletion)" if plan.skipped else ""
        raise UserError(f"{args.plan} holds no resources to judge{skipped}: it is the export of an empty or "
                        f"never-deployed stack; export the stack after `pulumi up`, or check a plan from "
                        f"`gpu-cluster plan`")
    skipped = f", {plan.skipped:,} pending deletion skipped" if plan.skipped else ""
    ui.note(f"read {len(plan.resources):,} resources{skipped} in {time.perf_counter() - started:.1f} s; "
            f"judging with {len(POLICIES)} policies…")
    progress = None
    if len(plan.resources) >= PROGRESS_FROM:
        progress = lambda step: ui.note(f"  {step}")  # noqa: E731
    try:
        violations = run_policies(plan, config, progress=progress)
    except RuntimeError as e:
        raise UserError(f"{args.plan}: a policy could not judge this file: {e}") from None
    status = EXIT_VIOLATION if any(v.enforcement == "mandatory" for v in violations) else EXIT_OK
    if args.json:
        from gpu_cluster.commands.plan import JSON_VERSION

        ui.json_document({"version": JSON_VERSION, "command": "check", "file": str(args.plan), "exit_status": status,
                          "resources": len(plan.resources), "violations": [v.as_dict() for v in violations]})
    else:
        ui.line(format_violations(violations))
    ui.note(f"judged {len(plan.resources):,} resources in {time.perf_counter() - started:.1f} s")
    return status
