"""The offline commands' bodies. Every user error ends here as sentences and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from components.spec import SpecError
from offline.plan import Plan, PlanFormatError
from offline.render import SAMPLE_STACKS, StackFile, StackFileError, read_stack_file, render, stack_path

EXIT_OK, EXIT_VIOLATION, EXIT_BAD_INPUT = 0, 1, 2


def _err(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def _stack_files(args: argparse.Namespace) -> list[Path]:
    stacks = list(args.stack)
    files = [Path(f) for f in args.stack_file]
    if not stacks and not files:
        stacks = list(SAMPLE_STACKS)
    return [stack_path(s) for s in stacks] + files


def cmd_plan(args: argparse.Namespace) -> int:
    from offline.policyrun import load_policy_config
    from offline.report import build_report

    out = Path(args.out)
    try:
        policy_config = load_policy_config(args.policy_config)
    except ValueError as e:
        _err(str(e))
        return EXIT_BAD_INPUT
    status = EXIT_OK
    paths = _stack_files(args)
    rows: list[list[str]] = []
    notes: list[str] = []
    violations_seen: list[tuple[str, dict]] = []
    listings: list[str] = []
    for path in paths:
        try:
            stack_file: StackFile = read_stack_file(path)
            rendered = render(stack_file)
            plan_doc = rendered.plan()
            report = build_report(rendered, Plan.from_doc(plan_doc), policy_config)
        except (StackFileError, SpecError) as e:
            _err(f"{path}: {e}")
            status = EXIT_BAD_INPUT
            continue
        except Exception as e:  # noqa: BLE001 - the program itself failed: say where, not a traceback
            _err(f"{path}: the program failed under the offline mocks: {type(e).__name__}: {e}")
            status = EXIT_BAD_INPUT
            continue
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{rendered.stack}.json").write_text(json.dumps(plan_doc, indent=1) + "\n", encoding="utf-8")
        (out / f"{rendered.stack}.report.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        cost = report["monthly_cost"]
        mandatory = [v for v in report["violations"] if v["enforcement"] == "mandatory"]
        if mandatory and status == EXIT_OK:
            status = EXIT_VIOLATION
        rows.append([
            rendered.stack, report["cloud"], report["tier"], report["shape"], str(report["nodes"]),
            str(report["gpus"]), str(report["resources"]),
            ("unpriced*" if cost["unpriced"] and not cost["items"] else
             f"{cost['total']:,.0f} {cost['currency']}" + ("*" if cost["unpriced"] else "")),
            f"{report['budget']['monthly_limit']:,.0f} {report['budget']['currency']}",
            f"{len(mandatory)}/{len(report['violations'])}",
        ])
        notes += [f"{rendered.stack}: {n}" for n in report["notes"]]
        if len(paths) == 1:
            listings.append(_listing(Plan.from_doc(plan_doc)))
        violations_seen += [(rendered.stack, v) for v in report["violations"]]
    if rows:
        print(_table(rows, ["stack", "cloud", "tier", "shape", "nodes", "GPUs", "resources",
                            "monthly estimate", "budget", "violations (mandatory/all)"]))
        if any(r[7].endswith("*") for r in rows):
            print("* excludes unpriced items (no public price in the catalog); see the report's monthly_cost.unpriced")
    for listing in listings:
        print(listing)
    for note in notes:
        print(f"note: {note}")
    for stack, v in violations_seen:
        print(f"{v['enforcement']}: [{stack}] {v['policy']}: {v['message']}")
    if rows:
        print(f"plans written to {out}/")
    return status


def _listing(plan: Plan) -> str:
    """Every resource of a one-stack plan, by component: what `pulumi up` would create."""
    by_urn = plan.by_urn()
    groups: dict[str, list[str]] = {}
    for r in plan.custom():
        parent = by_urn.get(r.parent)
        owner = f"{parent.type} {parent.name}" if parent else "(stack)"
        flags = " [protected]" if r.protect else ""
        groups.setdefault(owner, []).append(f"    {r.type:<60} {r.name}{flags}")
    lines = [f"\n{plan.stack_name}: {sum(len(v) for v in groups.values())} resources"]
    for owner in sorted(groups):
        lines.append(f"  {owner}")
        lines += sorted(groups[owner])
    return "\n".join(lines)


def cmd_check(args: argparse.Namespace) -> int:
    from offline.policyrun import format_violations, load_policy_config, run_policies

    try:
        plan = Plan.load(Path(args.plan))
        config = load_policy_config(args.policy_config)
    except (PlanFormatError, ValueError) as e:
        _err(str(e))
        return EXIT_BAD_INPUT
    try:
        violations = run_policies(plan, config)
    except RuntimeError as e:
        _err(f"{args.plan}: a policy could not judge this file: {e}")
        return EXIT_BAD_INPUT
    print(format_violations(violations))
    return EXIT_VIOLATION if any(v.enforcement == "mandatory" for v in violations) else EXIT_OK


def cmd_review(args: argparse.Namespace) -> int:
    from offline.review import review_command

    return review_command(args.base, Path(args.out))


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "plan": cmd_plan,
    "check": cmd_check,
    "review": cmd_review,
}

