"""`gpu-cluster plan`: render, price and policy-check stack files into `build/plans/`.

For each stack: `<out>/<stack>.json` (the plan, a `pulumi stack export` document) and
`<out>/<stack>.report.json` (resources, monthly cost, violations, notes). By default every stack file
in stacks/ (the samples and the team's own). Exit 0 when every stack rendered cleanly, 1 on a
mandatory policy violation, 2 when a stack file is bad (no plan is written for it). `--json` prints
one JSON document instead of the tables (docs/cli-json.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

from gpu_cluster import files, ui
from gpu_cluster.pricing import total_words
from gpu_cluster.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, UserError

JOBS_ENV = "GPU_CLUSTER_JOBS"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="render, price and check stacks into build/plans/",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--stack", action="append", default=[], metavar="NAME",
                   help="a stack of stacks/ (repeatable); default: every stack file in stacks/")
    p.add_argument("--stack-file", action="append", default=[], metavar="FILE",
                   help="any Pulumi.<stack>.yaml (repeatable)")
    p.add_argument("--out", default="build/plans", metavar="DIR", help="output folder (default: build/plans)")
    p.add_argument("--policy-config", metavar="FILE", help="policy-config JSON file (Pulumi's format)")
    p.add_argument("--prices", metavar="FILE", help="price file (negotiated rates) over the price cache and the "
                   "catalog; default: each stack's gpu-cluster:prices key, if any")
    p.add_argument("--verbose", action="store_true",
                   help="every note in full (by default each stack shows its notes cut to one line)")
    p.add_argument("--json", action="store_true", help="one JSON document on standard output (docs/cli-json.md)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="stacks rendered at once, each in its own process (default: $GPU_CLUSTER_JOBS, else one "
                        "per CPU core)")
    p.set_defaults(run=run)


def stack_files(stacks: list[str], files: list[str]) -> list[Path]:
    """The stack files to plan: named stacks of stacks/, then the given files; every stack of stacks/ by
    default."""
    from gpu_cluster.stackfile import every_stack, known_stacks, stack_path

    if not stacks and not files:
        stacks = every_stack()
    paths = []
    for name in stacks:
        path = stack_path(name)
        if not path.is_file():
            raise UserError(f"--stack {name!r}: there is no stacks/Pulumi.{name}.yaml; stacks here: {', '.join(known_stacks())} "
                            f"(or give any file with --stack-file)")
        paths.append(path)
    return paths + [Path(f) for f in files]


def output_names(paths: list[Path], out: Path) -> dict[Path, str]:
    """The stack name each file's plan is written under, refusing names that would overwrite another
    file's plan: two files of one name, or a file outside stacks/ named like a stack of stacks/."""
    from gpu_cluster.stackfile import STACKS_DIR, stack_name_of

    names: dict[Path, str] = {}
    owner: dict[str, Path] = {}
    for path in paths:
        name = stack_name_of(path)
        if name in owner and owner[name].resolve() != path.resolve():
            raise UserError(f"{path} and {owner[name]} are both stack {name!r}; their plans would overwrite each "
                            f"other in {out}/ — plan them separately with different --out folders")
        sample = STACKS_DIR / path.name
        if sample.is_file() and sample.resolve() != path.resolve() and out.resolve() == Path("build/plans").resolve():
            raise UserError(f"{path} is named like the sample stack file stacks/{path.name}; its plan would overwrite "
                            f"that stack's plan in {out}/ — rename the file or give --out DIR")
        owner[name] = path
        names[path] = name
    return names


def plan_one(path: Path, policy_config: Optional[dict], prices: Optional[str]) -> tuple[str, Any, Any, Any]:
    """Render, price and check one stack file: ("ok", stack, plan document, report) or ("error", message,
    None, None). Errors are sentences, so a worker process hands them back like results."""
    from components.spec import SpecError
    from gpu_cluster.stackfile import read_stack_file, validate

    try:
        stack_file = read_stack_file(path)
        validate(stack_file)  # a bad stack file is answered before the SDKs are imported
        from gpu_cluster.plan import Plan
        from gpu_cluster.render import render
        from gpu_cluster.report import build_report

        rendered = render(stack_file)
        plan_doc = rendered.plan()
        report = build_report(rendered, Plan.from_doc(plan_doc), policy_config, prices=prices, stack_file=stack_file)
    except (UserError, SpecError) as e:
        return "error", f"{path}: {e}", None, None
    except Exception as e:  # noqa: BLE001 - a defect of the program: say where, not a traceback
        return _defect(path, e)
    return "ok", rendered.stack, plan_doc, report


def _defect(path: Path, e: BaseException) -> tuple[str, Any, Any, Any]:
    return "error", (f"{path}: the program failed under the offline mocks ({type(e).__name__}: {e}); "
                     f"this is a defect of gpu-cluster, not of the stack file"), None, None


def _plan_in_worker(job: tuple[Path, Optional[dict], Optional[str]]) -> tuple[str, Any, Any, Any]:
    try:
        return plan_one(*job)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit inside a render must not kill the worker silently
        return _defect(job[0], e)


def jobs_default() -> int:
    """`--jobs` when it is not given: GPU_CLUSTER_JOBS (the review sets 1 for each of its two sides,
    which render at once), else one per CPU core."""
    value = os.environ.get(JOBS_ENV, "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise UserError(f"{JOBS_ENV}={value!r}: allowed: a whole number of stacks at once, 1 or more")
        return int(value)
    return os.cpu_count() or 1


def rendered_in_order(paths: list[Path], policy_config: Optional[dict], prices: Optional[str],
                      jobs: int) -> Iterator[tuple[str, Any, Any, Any]]:
    """plan_one for every path, in order. The render is CPU-bound Python, so several stacks render in
    forked worker processes at once (Linux; elsewhere, and for one stack, in this process). The workers
    are forked here, before the caller starts anything else (a progress display's thread): a fork
    copies only the forking thread, and a lock another thread held would stay locked in the child.
    A worker that dies is reported for its stack, never waited for."""
    work = [(p, policy_config, prices) for p in paths]
    if jobs <= 1 or len(paths) <= 1 or sys.platform != "linux":
        return map(_plan_in_worker, work)
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(min(jobs, len(paths)), mp_context=context)
    futures: list[Optional[Future]] = []
    for job in work:  # forks every worker now
        try:
            futures.append(pool.submit(_plan_in_worker, job))
        except BrokenProcessPool:  # a worker died before every stack was handed out
            futures.append(None)

    def alone(job: tuple[Path, Optional[dict], Optional[str]]) -> tuple[str, Any, Any, Any]:
        # A dead worker breaks the whole pool: each stack it took down is tried again in its own process
        # (the broken pool shut down first), so the one whose render kills its process is the one named.
        with ProcessPoolExecutor(1, mp_context=context) as single:
            try:
                return single.submit(_plan_in_worker, job).result()
            except BrokenProcessPool:
                return "error", (f"{job[0]}: the process rendering it stopped; this is a defect of gpu-cluster or "
                                 f"the machine ran out of memory, not a fault of the stack file"), None, None

    def results() -> Iterator[tuple[str, Any, Any, Any]]:
        # A pool that broke while the stacks were handed out is shut down before any result is waited
        # for: a stack submitted just as it broke may hold a future that never completes.
        broken = None in futures
        try:
            if broken:
                pool.shutdown(wait=True, cancel_futures=True)
            for job, future in zip(work, futures):
                if not broken:
                    try:
                        yield future.result()
                        continue
                    except BrokenProcessPool:
                        broken = True
                        pool.shutdown(wait=True, cancel_futures=True)
                finished = (future is not None and future.done() and not future.cancelled()
                            and future.exception() is None)
                yield future.result() if finished else alone(job)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    return results()


JSON_VERSION = 1
"""The version of the `--json` documents of plan, check and review (docs/cli-json.md)."""


def run(args: argparse.Namespace) -> int:
    from gpu_cluster.plan import Plan

    out = files.output_dir(Path(args.out), "--out", create=False)
    policy_config = None
    if args.policy_config:
        from gpu_cluster.policyrun import load_policy_config  # the policy pack: only when a config needs it

        policy_config = load_policy_config(args.policy_config)
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs {args.jobs}: allowed: 1 or more stacks at once")
    jobs = args.jobs or jobs_default()
    paths = stack_files(args.stack, args.stack_file)
    output_names(paths, out)
    status = EXIT_OK
    results: list[dict] = []
    listings: list[Plan] = []
    rendered = rendered_in_order(paths, policy_config, args.prices, jobs)
    with ui.steps("planning", len(paths)) as progress:
        for path in paths:
            progress.start(f"rendering {path}")
            kind, stack, plan_doc, report = next(rendered)
            if kind == "error":
                progress.error(stack)
                status = EXIT_BAD_INPUT
                results.append({"file": str(path), "status": "invalid", "error": stack})
                progress.advance()
                continue
            files.write_text(out / f"{stack}.json", json.dumps(plan_doc, indent=1) + "\n", "plan file")
            files.write_text(out / f"{stack}.report.json", json.dumps(report, indent=1) + "\n", "report")
            mandatory = [v for v in report["violations"] if v["enforcement"] == "mandatory"]
            if mandatory and status == EXIT_OK:
                status = EXIT_VIOLATION
            results.append({"file": str(path), "status": "ok", "stack": stack, "plan": str(out / f"{stack}.json"),
                            "report": str(out / f"{stack}.report.json"), "summary": report})
            if len(paths) == 1:
                listings.append(Plan.from_doc(plan_doc))
            progress.advance()
    if args.json:
        ui.json_document({"version": JSON_VERSION, "command": "plan", "exit_status": status,
                          "stacks": [_json_stack(r) for r in results]})
        return status
    for plan in listings:
        print_listing(plan)
    ok = [r for r in results if r["status"] == "ok"]
    for r in ok:
        print_stack(r["stack"], r["summary"], args.verbose, r["report"])
    if ok:
        summary_table([r["summary"] | {"stack": r["stack"]} for r in ok])
        ui.line(f"plans written to {out}/")
    return status


def _json_stack(result: dict) -> dict:
    """A stack's entry in `plan --json`: where its plan went and what its report says, or why it failed."""
    if result["status"] != "ok":
        return {"file": result["file"], "status": "invalid", "error": result["error"]}
    report = result["summary"]
    return {"file": result["file"], "status": "ok", "stack": result["stack"], "plan": result["plan"],
            "report": result["report"], "monthly_cost": report["monthly_cost"], "violations": report["violations"]}


def grouped_notes(notes: list[str]) -> list[str]:
    """The notes once each, in their first order (a note may be added by two components)."""
    return list(dict.fromkeys(notes))


def print_stack(stack: str, report: dict, verbose: bool, report_path: str) -> None:
    """One stack's block: its violations and cost controls in full, its notes deduplicated, each cut to one
    line unless `verbose` (the report keeps every one in full)."""
    cost = report["monthly_cost"]
    notes = grouped_notes(report["notes"])
    ui.heading(f"{stack}: {len(notes)} note(s)" + ("" if verbose else f" (in full: --verbose or {report_path})"))
    if "total" in cost:
        ui.line(f"  cost: {total_words(cost['total'], cost['currency'], cost.get('unpriced_summary', ''))} a month")
    for v in report["violations"]:
        ui.line(f"  {v['enforcement']}: {v['policy']}: {v['message']}")
    for c in cost.get("controls", []):
        ui.line(f"  cost control: {control_line(c, cost['currency'])}")
    for n in notes:
        ui.line(f"  note: {n}") if verbose else ui.clipped(f"  note: {n}")


def summary_table(reports: list[dict]) -> None:
    """The stacks side by side, last, in at most 80 columns: no cell is folded on a terminal that wide."""
    rows = []
    unpriced = False
    for report in reports:
        cost = report["monthly_cost"]
        unpriced = unpriced or bool(cost["unpriced"])
        mandatory = [v for v in report["violations"] if v["enforcement"] == "mandatory"]
        rows.append([report["stack"], report["shape"], f"{report['nodes']}×{report['gpus'] // max(report['nodes'], 1)}",
                     _money(cost), f"{_amount(report['budget']['monthly_limit'])} {report['budget']['currency']}",
                     f"{len(mandatory)}/{len(report['violations'])}"])
    ui.table(["stack", "shape", "GPUs", "a month", "budget", "viol."], rows,
             right=("GPUs", "a month", "budget", "viol."))
    ui.line("GPUs: nodes × GPUs per node; viol.: policy violations, mandatory/all"
            + ("; ≥ …*: a lower bound, unpriced items left out (each stack's cost line names them)" if unpriced else ""))


def control_line(control: dict, currency: str) -> str:
    """"schedule: 319.13 USD a month with it, 791.23 USD without (the nodes run 261 of 730 h a month)"."""
    def money(v: Optional[float], missing: str) -> str:
        return missing if v is None else f"{v:,.2f} {currency}"
    return (f"{control['control']}: {money(control['monthly_with'], 'not estimated')} a month with it, "
            f"{money(control['monthly_without'], 'unknown')} without ({control['note']})")


def _amount(value: float) -> str:
    """A whole amount for the summary table: 518, 82,970, 12.35M (the report has the exact figure)."""
    return f"{value:,.0f}" if value < 1_000_000 else f"{value / 1_000_000:,.2f}M"


def _money(cost: dict) -> str:
    if cost["unpriced"] and not cost["items"]:
        return "unpriced*"
    return ("≥" if cost["unpriced"] else "") + f"{_amount(cost['total'])} {cost['currency']}" + ("*" if cost["unpriced"] else "")


def print_listing(plan) -> None:
    """Every resource of a one-stack plan, by component: what `pulumi up` would create."""
    by_urn = plan.by_urn()
    groups: dict[str, list[tuple[str, str, str]]] = {}
    for r in plan.custom():
        parent = by_urn.get(r.parent)
        owner = f"{parent.type} {parent.name}" if parent else "(stack)"
        groups.setdefault(owner, []).append((r.type, r.name, "protected" if r.protect else ""))
    total = sum(len(v) for v in groups.values())
    rows = [(owner if i == 0 else "", *row) for owner in sorted(groups) for i, row in enumerate(sorted(groups[owner]))]
    ui.table(["component", "type", "name", ""], rows, title=f"{plan.stack_name}: {total} resources")
