"""Pull-request review without cloud credentials: what changes, what it costs, what it breaks.

`gpu-cluster review --base <ref>` renders every sample stack (and every stack file changed since BASE) with
the code of BASE (a git worktree) and of the work tree, then compares the two plans: resources
added / changed / replaced / deleted, monthly cost before → after, and new and fixed policy
violations — both sides priced and checked by the work tree's pricer and policy pack, so the
comparison measures the change, not the tooling. Replacement, and changes the provider refuses, are
decided from the provider contracts (gpu_cluster/contracts/); a protected stateful resource that would
be replaced or deleted gets a loud warning, and so does a replacement or deletion the provider's Delete
would refuse (a termination-protected Tencent instance). Properties the work tree's program registers
with ignore_changes (its report's `ignore_changes`) are left alone, as the engine leaves them, and
listed as kept as created.
"""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from gpu_cluster import contracts, files, ui
from gpu_cluster.commands.plan import JOBS_ENV
from gpu_cluster.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, UserError
from gpu_cluster.plan import Plan, PlanFormatError, Resource, number
from gpu_cluster.bills.tencentcloud import TC_FUNCTION, cost_controls_config
from gpu_cluster.pricing import MonthlyCost, price_plan
from gpu_cluster.stackfile import ROOT, SAMPLE_STACKS, STACK_NAME, linked_stack_file, stack_name_of

STATEFUL = frozenset({
    "aws:fsx/lustreFileSystem:LustreFileSystem", "aws:ebs/volume:Volume", "aws:s3/bucket:Bucket",
    "tencentcloud:Cfs/fileSystem:FileSystem", "tencentcloud:Cbs/storage:Storage", "tencentcloud:Cos/bucket:Bucket",
})


@dataclass(frozen=True)
class Change:
    action: str  # add | change | replace | delete
    urn: str
    type: str
    keys: tuple[str, ...] = ()
    protected: bool = False
    why: str = ""
    refused: str = ""
    """Why the provider's Delete fails on the resource as the base state holds it (replace and delete)."""

    @property
    def name(self) -> str:
        return self.urn.rsplit("::", 1)[-1]

    @property
    def dangerous(self) -> bool:
        return self.action in ("replace", "delete") and self.type in STATEFUL


@dataclass
class StackReview:
    stack: str
    base: Optional[Plan]
    head: Optional[Plan]
    changes: list[Change] = field(default_factory=list)
    cost_before: Optional[MonthlyCost] = None
    cost_after: Optional[MonthlyCost] = None
    new_violations: list[dict] = field(default_factory=list)
    fixed_violations: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kept: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    """Resources whose ignore_changes properties differ, which `pulumi up` leaves as created."""
    invalid: str = ""
    """Why the stack file no longer validates or renders in the pull request; then nothing is compared
    (its resources are not shown as deleted) and the review exits 2."""
    pack_differences: list[str] = field(default_factory=list)
    """What the pull request's own policy pack says otherwise than the base's about this stack."""

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)


def _managed(plan: Optional[Plan]) -> dict[str, Resource]:
    return {r.urn: r for r in (plan.custom() if plan else [])}



def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _value_at(inputs: dict, path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _governing(c: Optional[contracts.Contract], path: str) -> Optional[contracts.Rule]:
    """The rule of a changed path, or of the nearest enclosing argument that has one."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        rule = c.rule_at(".".join(parts[:n])) if c else None
        if rule is not None and (rule.force_new or rule.force_new_if or rule.immutable or rule.shrink):
            return rule
    return None


def _package_change(before: Resource, after: Resource, base: Optional[Plan], head: Optional[Plan]) -> str:
    """What a new code package of the Tencent cost controls changes: the keys of its configuration (the
    run windows, the nodes, the idle rule), or only the code."""
    old = cost_controls_config(before, base) if base is not None else None
    new = cost_controls_config(after, head) if head is not None else None
    if old is None or new is None:
        return "zipFile"
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return f"zipFile ({'config.json ' + ', '.join(changed) if changed else 'code only'})"


def _differing(before: Resource, after: Resource) -> list[str]:
    return sorted(k for k in set(before.inputs) | set(after.inputs) if before.inputs.get(k) != after.inputs.get(k))


def _ignored(path: str, ignore: Sequence[str]) -> bool:
    return any(path == i or path.startswith(i + ".") for i in ignore)


def diff_resource(before: Resource, after: Resource, ignore: Sequence[str] = (), base: Optional[Plan] = None,
                  head: Optional[Plan] = None) -> Optional[Change]:
    """What `pulumi up` does to one resource, from its provider contract: replace it when a force-new
    argument changes or a shrink-replaces one shrinks, fail when the provider cannot make the change.
    Properties the program registers with ignore_changes (`ignore`) are left as they are, as the engine
    leaves them."""
    keys = [k for k in _differing(before, after) if not _ignored(k, ignore)]
    if not keys:
        return None
    if after.type == TC_FUNCTION and "zipFile" in keys:
        keys = [_package_change(before, after, base, head) if k == "zipFile" else k for k in keys]
    c = contracts.contract(after.type)
    forced, blocked = [], []
    for path in contracts.changed_paths(before.inputs, after.inputs):
        if _ignored(path, ignore):
            continue
        rule = _governing(c, path)
        old, new = _value_at(before.inputs, path), _value_at(after.inputs, path)
        shrinks = rule is not None and rule.shrink and (number(new) or 0) < (number(old) or 0)
        replaces = rule is not None and (rule.force_new or
                                         bool(rule.force_new_if and after.inputs.get(rule.force_new_if)))
        if replaces or (shrinks and rule.shrink == "replace"):
            forced.append(f"{path}: {_show(old)} → {_show(new)}" + (" (shrinks)" if shrinks else ""))
        elif rule is not None and (rule.immutable or shrinks):
            blocked.append(f"{path}: {_show(old)} → {_show(new)} — the provider cannot make this change "
                           f"({'it only grows' if shrinks else 'fixed at creation'}; {c.source.split(';')[0]})")
    if forced:
        return Change("replace", after.urn, after.type, tuple(keys), before.protect, ", ".join(forced + blocked))
    return Change("change", after.urn, after.type, tuple(keys), before.protect, ", ".join(blocked))


# What lifts a Delete refusal in this program (the contract says why the provider refuses).
_LIFT = {
    "disableApiTermination": "lift it first with a `pulumi up` that sets criticality: standard (the provider turns "
                             "termination protection off in place, ModifyInstancesAttribute), then make this change "
                             "and set criticality back",
}


def _refusal(before: Resource) -> str:
    """Why the provider's Delete fails on this resource as the state holds it, or ""."""
    c = contracts.contract(before.type)
    for arg, why in (c.delete_refused_while.items() if c else ()):
        if before.inputs.get(arg) is True:
            return f"{arg} is true and {why}" + (f"; {_LIFT[arg]}" if arg in _LIFT else "")
    return ""


def diff_plans(base: Optional[Plan], head: Optional[Plan],
               ignore_changes: Optional[Mapping[str, Sequence[str]]] = None) -> list[Change]:
    """Every resource's change from BASE to HEAD; `ignore_changes` is the head program's (URN →
    properties, the report's `ignore_changes`)."""
    before, after = _managed(base), _managed(head)
    ignore_changes = ignore_changes or {}
    changes: list[Change] = []
    for urn, r in after.items():
        if urn not in before:
            changes.append(Change("add", urn, r.type))
        else:
            change = diff_resource(before[urn], r, ignore_changes.get(urn, ()), base, head)
            if change and change.action == "replace":
                change = replace(change, refused=_refusal(before[urn]))
            if change:
                changes.append(change)
    changes += [Change("delete", urn, r.type, protected=r.protect, refused=_refusal(r))
                for urn, r in before.items() if urn not in after]
    order = {"replace": 0, "delete": 1, "add": 2, "change": 3}
    return sorted(changes, key=lambda c: (order[c.action], c.urn))


def _violation_key(v: dict) -> tuple[str, str, str]:
    return v["policy"], v.get("urn") or "", v["message"]


def _inline_old_configs(tree: Path, plans: Any) -> None:
    """A base rendered before the cost controls' configuration was a component output kept it only in the
    code package it wrote under its own build/: read it from there while the base's tree exists, into
    the base plan in memory, so both sides are priced alike. Nothing is written."""
    import zipfile

    from gpu_cluster.bills.tencentcloud import COST_CONTROLS

    for plan in plans:
        by_urn = plan.by_urn()
        for r in plan.of_type(TC_FUNCTION):
            component, rel = by_urn.get(r.parent), r.props.get("zipFile")
            if component is None or component.type != COST_CONTROLS or "config" in component.outputs:
                continue
            path = tree / rel if isinstance(rel, str) and not rel.startswith(("/", "~")) else None
            try:
                with zipfile.ZipFile(path) as package:  # type: ignore[arg-type]
                    component.outputs["config"] = package.read("config.json").decode("utf-8")
            except (OSError, KeyError, TypeError, UnicodeDecodeError, zipfile.BadZipFile):
                continue


def kept_as_created(base: Optional[Plan], head: Optional[Plan],
                    ignore_changes: Mapping[str, Sequence[str]]) -> list[tuple[str, tuple[str, ...]]]:
    """(name, properties) of the resources whose ignored properties differ: `pulumi up` keeps the values
    in the state, and a replacement keeps them too (the engine puts the old values of ignored properties
    back whenever there is a state: pulumi/pulumi step_generator.go, processIgnoreChanges); only a
    resource created anew gets the new ones."""
    before, after = _managed(base), _managed(head)
    out = []
    for urn, r in after.items():
        if urn in before and ignore_changes.get(urn):
            keys = tuple(k for k in _differing(before[urn], r) if _ignored(k, ignore_changes[urn]))
            if keys:
                out.append((r.name, keys))
    return out


def review_stack(stack: str, base: Optional[Plan], head: Optional[Plan],
                 ignore_changes: Optional[Mapping[str, Sequence[str]]] = None) -> StackReview:
    """Compare two plans of one stack with the work tree's pricer and policy pack."""
    from gpu_cluster.policyrun import run_policies

    ignore_changes = ignore_changes or {}
    review = StackReview(stack=stack, base=base, head=head, changes=diff_plans(base, head, ignore_changes),
                         kept=kept_as_created(base, head, ignore_changes))
    review.cost_before = price_plan(base) if base else None
    review.cost_after = price_plan(head) if head else None
    before = {_violation_key(v.as_dict()): v.as_dict() for v in (run_policies(base) if base else [])}
    after = {_violation_key(v.as_dict()): v.as_dict() for v in (run_policies(head) if head else [])}
    review.new_violations = [v for k, v in after.items() if k not in before]
    review.fixed_violations = [v for k, v in before.items() if k not in after]
    return review


def _money(value: float, currency: str) -> str:
    return f"{value:,.2f} {currency}"


def _cost_line(review: StackReview) -> str:
    b, a = review.cost_before, review.cost_after
    if a is None and b is None:
        return "no priced resources"
    cur = (a or b).currency
    if not any(c.items and any(i.monthly is not None for i in c.items) for c in (a, b) if c):
        return f"unpriced ({len(a.unpriced) if a else 0} item(s) without a public price)"
    before = b.total if b else 0.0
    after = a.total if a else 0.0
    delta = after - before
    line = f"{_money(before, cur)} → {_money(after, cur)} ({'+' if delta >= 0 else '−'}{_money(abs(delta), cur)})"
    unpriced = len(a.unpriced) if a else 0
    if unpriced:
        line += f"; after is at least that: unpriced (no public price), not included: {a.unpriced_summary}"
    if (a and a.estimate) or (b and b.estimate):
        line += "; includes estimates"
    return line


def _controls_lines(review: StackReview) -> list[str]:
    """Each cost control on either side: the monthly cost with and without it, before → after."""
    b, a = review.cost_before, review.cost_after
    cur = (a or b).currency if (a or b) else ""
    sides = {"before": {c["control"]: c for c in (b.controls if b else [])},
             "after": {c["control"]: c for c in (a.controls if a else [])}}
    names = list(dict.fromkeys([*sides["before"], *sides["after"]]))
    if not names or (sides["before"] == sides["after"] and not review.changes):
        return []

    def show(c: Optional[dict]) -> str:
        if c is None:
            return "—"
        with_ = "not estimated" if c["monthly_with"] is None else _money(c["monthly_with"], cur)
        without = "unknown" if c["monthly_without"] is None else _money(c["monthly_without"], cur)
        return f"{with_} with, {without} without"

    out = ["", "| cost control | before | after | note |", "|---|---|---|---|"]
    for n in names:
        note = (sides["after"].get(n) or sides["before"].get(n))["note"]
        out.append(f"| {n} | {md(show(sides['before'].get(n)))} | {md(show(sides['after'].get(n)))} | {md(note)} |")
    return out


_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|~"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;",
                                                                               "\n": " ", "\r": " "})


_INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
                        r"\u2060-\u206f\ufeff\ufff9-\ufffb]")
"""Control, format and direction characters (U+202E turns text around, U+2028 breaks a line), shown as ?."""


def _visible(text: object) -> str:
    return _INVISIBLE.sub("?", str(text).replace("\n", " ").replace("\r", " "))


_LINKY = re.compile(r"(?:[A-Za-z][A-Za-z0-9+.-]*://|www\.)\S+|[\w.+-]+@[\w-]+(?:\.[\w-]+)+|(?<![\w&])[@#][\w-]+")
"""What GitHub would turn into a link, a mention or a reference by itself (URLs, www., e-mail addresses,
@someone, #123): shown as code instead."""


def md(text: object) -> str:
    """Text from a stack file or a program's message, safe in Markdown prose and table cells (never at the
    start of a line: each starts with our own text): what would make emphasis, code, a link or image
    (`[`, `]`; `(` acts only after `]`), a table cell's end or HTML is escaped (CommonMark: any ASCII
    punctuation may be backslash-escaped; < > & as entities); what GitHub links by itself becomes code;
    control and direction characters become ?, a line break a space."""
    text = _visible(text)
    out, last = [], 0
    for m in _LINKY.finditer(text):
        out += [text[last:m.start()].translate(_MD_SPECIAL), code(m.group())]
        last = m.end()
    out.append(text[last:].translate(_MD_SPECIAL))
    return "".join(out)


def code(text: object) -> str:
    """A code span holding `text`: a backtick cannot close it (it becomes '), a pipe cannot end a table
    cell (GitHub reads \\| as | even in a code span), a line break becomes a space; inside a code span
    nothing else is Markdown or HTML."""
    inner = _visible(text).replace("`", "'").replace("|", "\\|")
    return f"`{inner}`"


def render_markdown(reviews: list[StackReview], base_ref: str) -> str:
    out = [f"## gpu-cluster review against {code(base_ref)}", ""]
    out += _alert_lines(reviews)
    out += ["| stack | added | changed | replaced | deleted | monthly cost | new violations | fixed |",
            "|---|---|---|---|---|---|---|---|"]
    for r in reviews:
        if r.invalid:
            out.append(f"| {code(r.stack)} | — | — | — | — | invalid stack file | — | — |")
            continue
        out.append(f"| {code(r.stack)} | {r.count('add')} | {r.count('change')} | {r.count('replace')} | "
                   f"{r.count('delete')} | {md(_cost_line(r))} | {len(r.new_violations)} | {len(r.fixed_violations)} |")
    for r in reviews:
        out += _stack_section(r)
    return "\n".join(out) + "\n"


def _alert_lines(reviews: list[StackReview]) -> list[str]:
    """The alerts above the table: invalid stack files, stateful resources lost, deletes the provider refuses."""
    out: list[str] = []
    invalid = [r for r in reviews if r.invalid]
    if invalid:
        out += ["> [!IMPORTANT]", "> **Invalid stack file: the pull request breaks these stacks (nothing else is "
                "compared for them).**"]
        out += [f"> - {code(r.stack)}: invalid stack file: {code(r.invalid)}" for r in invalid]
        out.append("")
    dangerous = [(r.stack, c) for r in reviews for c in r.changes if c.dangerous]
    if dangerous:
        out += ["> [!CAUTION]", "> **Stateful resources would be replaced or deleted — data loss.**"]
        for stack, c in dangerous:
            guard = " It is `protect`ed, so `pulumi up` will refuse until it is unprotected." if c.protected else ""
            out.append(f"> - {code(stack)}: **{c.action}** {code(c.type)} {code(c.name)}"
                       f"{' (' + md(c.why) + ')' if c.why else ''}.{guard}")
        out.append("")
    refused = [(r.stack, c) for r in reviews for c in r.changes if c.refused]
    if refused:
        out += ["> [!WARNING]", "> **`pulumi up` would fail here: the provider cannot delete these as they are.**"]
        out += [f"> - {code(stack)}: **{c.action}** {code(c.type)} {code(c.name)}: {md(c.refused)}."
                for stack, c in refused]
        out.append("")
    return out


def _stack_section(r: StackReview) -> list[str]:
    """One stack's section below the table (nothing when there is nothing to say about it)."""
    out: list[str] = []
    controls = [] if r.invalid else _controls_lines(r)
    if not (r.changes or r.new_violations or r.fixed_violations or r.notes or controls or r.kept
            or r.invalid or r.pack_differences):
        return out
    out += ["", f"### {code(r.stack)}", ""]
    if r.invalid:
        out.append(f"- **invalid stack file**: {code(r.invalid)}")
    out += [f"- note: {md(n)}" for n in r.notes]
    if r.kept:
        out.append("- kept as created (the program ignores changes to these, so `pulumi up` leaves them; "
                   "a replacement keeps them too; only a resource created anew gets the new values): "
                   + ", ".join(f"{code(name)} ({md(', '.join(keys))})" for name, keys in r.kept))
    if r.invalid:
        return out
    out.append(f"- monthly cost: {md(_cost_line(r))}")
    out += controls
    if r.changes:
        out += ["", "| action | type | name | what |", "|---|---|---|---|"]
        for c in r.changes:
            what = c.why or ", ".join(c.keys)
            mark = " ⚠️" if c.dangerous or c.refused else ""
            out.append(f"| {c.action}{mark} | {code(c.type)} | {code(c.name)} | {md(what)} |")
    for title, vs in (("New policy violations", r.new_violations), ("Fixed policy violations", r.fixed_violations)):
        if vs:
            out += ["", f"**{title}**", ""]
            out += [f"- {code(v['policy'])} ({md(v['enforcement'])}): {md(v['message'])}" for v in vs]
    if r.pack_differences:
        out += ["", "**The pull request's own policy pack differs** (the base branch's pack decides the status)", ""]
        out += [f"- {md(d)}" for d in r.pack_differences]
    return out


# ---- the command: worktree of BASE, renders on both sides --------------------------------------

class ReviewError(UserError):
    pass


def _git(*args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if result.returncode != 0:
        raise ReviewError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout


def changed_stacks(base: str, head: Path = ROOT) -> list[str]:
    """Stack files added, changed or removed between BASE and the tree `head` (tracked or not)."""
    names = _git("diff", "--name-only", base, "--", "stacks/", cwd=head).split("\n")
    names += _git("ls-files", "--others", "--exclude-standard", "--", "stacks/", cwd=head).split("\n")
    return sorted({stack_name_of(Path(n)) for n in names
                   if Path(n).name.startswith("Pulumi.") and n.endswith(".yaml")})


# The renderer's package at a revision: `gpu_cluster` now, `offline` before the command-line tool.
_RENDERERS = ("gpu_cluster", "offline")

DEFAULT_BUDGET_S = 900
"""A review's wall-clock budget by default (--timeout): the ten sample stacks take about 10 s a side here."""


@dataclass
class Side:
    """One side of the review: the plans it rendered and, per stack, why one did not render."""

    plans: dict[str, Plan] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    note: str = ""
    ignore_changes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    """Per stack, the report's `ignore_changes` (absent in reports of older revisions)."""


@dataclass
class Run:
    """A side's renderer process, and how to read what it says."""

    proc: Optional[subprocess.Popen]
    files: list[Path]
    note: str
    json: bool = False
    """The renderer answers `plan --json` (this program and later): its result is read from that
    document; an older base is read from its `error:` lines once."""


def _speaks_json(tree: Path, package: str) -> bool:
    plan_command = tree / package / "commands" / "plan.py"
    return plan_command.is_file() and '"--json"' in plan_command.read_text(encoding="utf-8", errors="replace")


def side_env() -> dict[str, str]:
    """The environment of a side's renderer. The two sides render at once, one process each (a side's own
    workers would only contend for the cores). A side's program gets none of a CI runner's GITHUB_*
    variables: GITHUB_OUTPUT, GITHUB_ENV and GITHUB_PATH are files through which it could set the gate's
    verdict or the next steps' environment, and GITHUB_TOKEN is the job's token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env[JOBS_ENV] = "1"
    return env


def _start_side(tree: Path, stacks: list[str], out: Path) -> Run:
    files = [tree / "stacks" / f"Pulumi.{s}.yaml" for s in stacks]
    present = [f for f in files if f.is_file()]
    package = next((p for p in _RENDERERS if (tree / p / "__main__.py").is_file()), None)
    if package is None:
        return Run(None, present, "no offline renderer at this revision; every resource counts as added")
    if not present:
        return Run(None, present, "")
    speaks_json = _speaks_json(tree, package)
    args = [sys.executable, "-m", package, "plan", "--out", str(out), *(["--json"] if speaks_json else [])]
    for f in present:
        args += ["--stack-file", str(f)]
    return Run(subprocess.Popen(args, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=side_env(),
                                start_new_session=True),
               present, "", speaks_json)


def _failures(stderr: str, files: list[Path]) -> dict[str, str]:
    """Each failed stack's whole reason, from an older renderer's `error: <file>: ...` blocks."""
    blocks: list[str] = []
    for line in stderr.splitlines():
        if line.startswith("error: "):
            blocks.append(line[len("error: "):])
        elif blocks and line.startswith("  "):
            blocks[-1] += "\n" + line
        elif blocks and line.strip() and not line.startswith(("[", "note:")):
            blocks[-1] += "\n" + line
    out = {}
    for f in files:
        prefix = f"{f}: "
        for block in blocks:
            if block.startswith(prefix):
                out[stack_name_of(f)] = block[len(prefix):]
    return out


def _json_failures(stdout: str, files: list[Path]) -> Optional[dict[str, str]]:
    """Each failed stack's reason from the renderer's `plan --json` document; None when it printed none."""
    try:
        doc = json.loads(stdout)
        entries = doc["stacks"]
    except (ValueError, KeyError, TypeError):
        return None
    out = {}
    by_file = {str(f): f for f in files}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("status") == "ok" or entry.get("file") not in by_file:
            continue
        f, why = by_file[entry["file"]], str(entry.get("error") or "it did not render")
        out[stack_name_of(f)] = why[len(f"{f}: "):] if why.startswith(f"{f}: ") else why
    return out


def _stop(run: Run) -> None:
    if run.proc is not None and run.proc.poll() is None:
        os.killpg(run.proc.pid, 9)
        run.proc.wait()


def _finish_side(run: Run, out: Path, stacks: list[str], deadline: float, budget_s: float) -> Side:
    side = Side(note=run.note)
    if run.proc is not None:
        try:
            stdout, stderr = run.proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _stop(run)
            raise ReviewError(f"the review ran out of its {budget_s:g}-second budget while rendering; no verdict "
                              f"(raise it with --timeout SECONDS)") from None
        failures = _json_failures(stdout, run.files) if run.json else None
        side.failures = failures if failures is not None else _failures(stderr, run.files)
        if run.proc.returncode == 2 and not side.failures:
            side.note = stderr.strip().splitlines()[-1] if stderr.strip() else "the renderer failed"
    for s in stacks:
        path = out / f"{s}.json"
        if path.is_file():
            try:
                side.plans[s] = Plan.load(path)
            except PlanFormatError as e:
                side.failures[s] = str(e)
        report = out / f"{s}.report.json"
        if s in side.plans and report.is_file():
            side.ignore_changes[s] = json.loads(report.read_text(encoding="utf-8")).get("ignore_changes") or {}
    # A stack file the renderer was given must come back as a plan or a reason. Anything else (the process
    # killed, out of memory, a crash before it wrote a word) is a failure of that stack: read as "the stack
    # file was removed", it would pass the gate with nothing judged.
    if run.proc is not None:
        given = {stack_name_of(f) for f in run.files}
        for s in stacks:
            if s in given and s not in side.plans and s not in side.failures:
                side.failures[s] = f"the renderer gave neither a plan nor a reason ({_exit_status(run.proc.returncode)})"
    return side


def _exit_status(code: Optional[int]) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _at_base(base: str, path: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", f"{base}:{path}"], cwd=ROOT, capture_output=True).returncode == 0


def review_stacks(base: str, only: Sequence[str] = (), head: Path = ROOT) -> list[str]:
    """The stacks a review renders, sample stacks first: `only` (each must have a stack file in `head` or
    at BASE), else every stack file of `head`'s stacks/ (the samples and the team's own) and every stack
    file changed or removed since BASE."""
    for name in only:
        relative = f"stacks/Pulumi.{name}.yaml"
        if not STACK_NAME.fullmatch(name) or not (head / relative).is_file() and not _at_base(base, relative):
            raise ReviewError(f"--stack {name!r}: there is no {relative} in the work tree or at {base}; stacks here: "
                              f"{', '.join(_stacks_in(head))}")
    order = {s: i for i, s in enumerate(SAMPLE_STACKS)}
    chosen = set(only) if only else set(_stacks_in(head)) | set(changed_stacks(base, head))
    return sorted(chosen, key=lambda s: (order.get(s, len(order)), s))


def _stacks_in(tree: Path) -> list[str]:
    """The stack names of the stack files in `tree`'s stacks/; a file name that is not UTF-8 comes back with
    its bytes escaped (\\xff), so it is refused as a stack name and can be printed."""
    return sorted(_printable(stack_name_of(p)) for p in (tree / "stacks").glob("Pulumi.*.yaml"))


def _printable(name: str) -> str:
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _refused_in_head(stacks: Sequence[str], head: Path) -> dict[str, str]:
    """Head stacks refused before anything renders them: a name that is no stack name, or a file in stacks/
    that is a symbolic link or resolves outside the tree."""
    out = {}
    for s in stacks:
        path = head / "stacks" / f"Pulumi.{s}.yaml"
        if not STACK_NAME.fullmatch(s):
            out[s] = (f"stacks/{path.name}: {s!r} is not a stack name; allowed: up to 100 letters, digits, '-', '_' "
                      f"and '.', not starting with '.'")
        elif path.is_symlink() or path.exists():
            refused = linked_stack_file(path, head / "stacks")
            if refused is None and not path.is_file():
                refused = f"stacks/{path.name} is not a regular file (a folder?); a stack file must be a file"
            if refused:
                out[s] = refused
    return out


def _their_verdicts(head: Path, plan_dir: Path, stacks: Iterable[str], deadline: float,
                    budget_s: float) -> dict[str, Optional[set[tuple[str, str, str]]]]:
    """When the pull request changes policies/, its own pack judges its plans too (its `check --json`, in its
    tree): per stack, the violations it reports (None: it gave no verdict). Empty when policies/ is the base's."""
    if not (head / "policies").is_dir() or _same_tree(head / "policies", ROOT / "policies"):
        return {}
    out: dict[str, Optional[set[tuple[str, str, str]]]] = {}
    for stack in stacks:
        path = plan_dir / f"{stack}.json"
        if not path.is_file():
            continue
        try:
            result = subprocess.run([sys.executable, "-m", "gpu_cluster", "check", "--json", str(path)], cwd=head,
                                    capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
            out[stack] = {_violation_key(v) for v in json.loads(result.stdout)["violations"]}
        except subprocess.TimeoutExpired:
            raise ReviewError(f"the review ran out of its {budget_s:g}-second budget while the pull request's policy "
                              f"pack judged {stack}; no verdict (raise it with --timeout SECONDS)") from None
        except (ValueError, KeyError, TypeError):
            out[stack] = None
    return out


def _pack_differences(review: StackReview, theirs: Optional[set[tuple[str, str, str]]]) -> list[str]:
    """What the pull request's own pack says otherwise than this (the base's) pack about one stack."""
    from gpu_cluster.policyrun import run_policies

    if theirs is None:
        return ["the pull request's policy pack gave no verdict on this stack"]
    ours = {_violation_key(v.as_dict()) for v in (run_policies(review.head) if review.head else [])}
    return ([f"would not report {p} on {urn.rsplit('::', 1)[-1]}: {m}" for p, urn, m in sorted(ours - theirs)]
            + [f"would also report {p} on {urn.rsplit('::', 1)[-1]}: {m}" for p, urn, m in sorted(theirs - ours)])


def _same_tree(a: Path, b: Path) -> bool:
    """The same files with the same bytes under a and b (caches and virtualenvs aside)."""
    def files_of(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and not p.is_symlink() and not {"__pycache__", "venv", ".venv"} & set(p.relative_to(root).parts)}
    return files_of(a) == files_of(b)


def review_command(base: str, out: Path, only: Sequence[str] = (), head: Optional[Path] = None,
                   budget_s: float = DEFAULT_BUDGET_S, as_json: bool = False) -> int:
    """Render both sides in parallel, compare with this program's pricer and policy pack, write `out`.
    `head`: the tree to review (a pull request's checkout), by default this program's own."""
    started = time.monotonic()
    deadline = started + budget_s
    head = Path(head).resolve() if head is not None else ROOT
    _check_review_args(base, budget_s, head)
    files.output_file(out, "--out")
    stacks = review_stacks(base, only, head)
    refused = _refused_in_head(stacks, head)
    rendered = [s for s in stacks if s not in refused]
    base_side, head_side, theirs = _render_both_sides(base, head, rendered, deadline, budget_s)
    head_side.failures.update(refused)
    reviews, failed = _review_each(stacks, base, base_side, head_side, refused, deadline, budget_s)
    for s, verdict in theirs.items():
        reviews[s].pack_differences = _pack_differences(reviews[s], verdict)
    status = review_status(list(reviews.values()), failed)
    files.write_text(out, render_markdown(list(reviews.values()), base), "--out")
    if as_json:
        ui.json_document(review_json(list(reviews.values()), base, status))
        return status
    _say_review(reviews, failed, stacks, base, out)
    return status


def _check_review_args(base: str, budget_s: float, head: Path) -> None:
    if base.startswith("-"):
        raise ReviewError(f"BASE={base!r} is not a git ref (it starts with '-')")
    if budget_s <= 0:
        raise ReviewError(f"--timeout {budget_s:g}: allowed: a number of seconds above 0")
    if not (head / "stacks").is_dir():
        raise ReviewError(f"--head {head}: there is no stacks/ folder in it; give the checkout of the pull request")
    try:
        _git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{base}^{{commit}}", cwd=head)
    except ReviewError:
        raise ReviewError(f"BASE={base!r} is not a commit in this repository") from None


def _render_both_sides(base: str, head: Path, rendered: list[str], deadline: float,
                       budget_s: float) -> tuple[Side, Side, dict[str, Optional[set[tuple[str, str, str]]]]]:
    """The plans of BASE (in a worktree, removed after) and of `head`, rendered side by side, and the
    pull request's own policy pack's verdicts on the head's plans."""
    with tempfile.TemporaryDirectory(prefix="gpu-cluster-review-") as tmp:
        tree = Path(tmp) / "base"
        _git("worktree", "add", "--detach", "--quiet", str(tree), f"{base}^{{commit}}", cwd=head)
        try:
            ui.note(f"rendering {len(rendered)} stack(s) at {base} and in {'the work tree' if head == ROOT else head}, "
                    f"side by side")
            base_run = _start_side(tree, rendered, Path(tmp) / "base-plans")
            head_run = _start_side(head, rendered, Path(tmp) / "head-plans")
            try:
                base_side = _finish_side(base_run, Path(tmp) / "base-plans", rendered, deadline, budget_s)
                head_side = _finish_side(head_run, Path(tmp) / "head-plans", rendered, deadline, budget_s)
            finally:
                _stop(base_run)
                _stop(head_run)
            _inline_old_configs(tree, base_side.plans.values())
            theirs = _their_verdicts(head, Path(tmp) / "head-plans", head_side.plans, deadline, budget_s)
        finally:
            _git("worktree", "remove", "--force", str(tree), cwd=head)
    return base_side, head_side, theirs


def _review_each(stacks: list[str], base: str, base_side: Side, head_side: Side, refused: dict[str, str],
                 deadline: float, budget_s: float) -> tuple[dict[str, StackReview], list[tuple[str, str, str]]]:
    """The review of every stack, and the stacks the pull request breaks ("head", stack, why)."""
    reviews: dict[str, StackReview] = {}
    failed = []
    for s in stacks:
        if s in head_side.failures:
            # The pull request breaks this stack: say why, and compare nothing (no deletions, no cost).
            reviews[s] = review = StackReview(stack=s, base=base_side.plans.get(s), head=None,
                                              invalid=head_side.failures[s])
            failed.append(("head", s, head_side.failures[s]))
        else:
            review = review_stack(s, base_side.plans.get(s), head_side.plans.get(s), head_side.ignore_changes.get(s))
            reviews[s] = review
        if s in base_side.failures:
            # A base that fails is a stack this change repairs (or removes): a note only.
            review.notes.append(f"base: stack {s} does not render at {base}: {base_side.failures[s]}")
        if s not in base_side.plans and s not in base_side.failures and s not in refused:
            review.notes.append(f"no plan at {base}: " + (base_side.note or "a new stack"))
        if s not in head_side.plans and s not in head_side.failures:
            review.notes.append("no plan in the work tree: " + (head_side.note or "the stack file was removed"))
        if time.monotonic() > deadline:
            raise ReviewError(f"the review ran out of its {budget_s:g}-second budget while comparing the plans; no "
                              f"verdict (raise it with --timeout SECONDS)")
    return reviews, failed


def _say_review(reviews: dict[str, StackReview], failed: list[tuple[str, str, str]], stacks: list[str], base: str,
                out: Path) -> None:
    """The review in a few lines on the terminal (the Markdown file has it all)."""
    ui.line(f"review of {len(stacks)} stack(s) against {base} written to {out}")
    for r in reviews.values():
        ui.line(f"  {r.stack}: invalid stack file" if r.invalid else
                f"  {r.stack}: +{r.count('add')} ~{r.count('change')} ±{r.count('replace')} -{r.count('delete')}; "
                f"{_cost_line(r)}")
    for label, stack, why in failed:
        ui.line(f"{label}: stack {stack} is invalid: {why}")
    if any(c.dangerous for r in reviews.values() for c in r.changes):
        ui.warn("stateful resources would be replaced or deleted; see the review")
    if any(c.refused for r in reviews.values() for c in r.changes):
        ui.warn("the provider would refuse to delete resources this change replaces or removes; see the review")
    _say_status(reviews.values(), failed)


def review_status(reviews: Sequence[StackReview], failed: Sequence[tuple[str, str, str]]) -> int:
    """2 when a stack does not render in the pull request (a base that fails while its head renders is
    repaired, not failed), else 1 when the head adds a mandatory policy violation to any stack, else 0.
    2 wins over 1."""
    if failed:
        return EXIT_BAD_INPUT
    return EXIT_VIOLATION if _new_mandatory(reviews) else EXIT_OK


def _new_mandatory(reviews: Iterable[StackReview]) -> list[tuple[str, dict]]:
    return [(r.stack, v) for r in reviews for v in r.new_violations if v.get("enforcement") == "mandatory"]


def _say_status(reviews: Iterable[StackReview], failed: Sequence[tuple[str, str, str]]) -> None:
    for stack, v in _new_mandatory(reviews):
        ui.line(f"{stack}: new mandatory violation {v['policy']}: {v['message']}")


def review_json(reviews: Sequence[StackReview], base: str, status: int) -> dict:
    """`review --json` (docs/cli-json.md)."""
    from gpu_cluster.commands.plan import JSON_VERSION

    def cost(c: Optional[MonthlyCost]) -> Optional[dict]:
        return None if c is None else {"total": c.total, "currency": c.currency, "unpriced": len(c.unpriced)}

    stacks = []
    for r in reviews:
        entry: dict[str, Any] = {"stack": r.stack, "status": "invalid" if r.invalid else "ok"}
        if r.invalid:
            entry["error"] = r.invalid
        else:
            entry.update({action: r.count(action) for action in ("add", "change", "replace", "delete")})
            entry.update({"cost_before": cost(r.cost_before), "cost_after": cost(r.cost_after),
                          "new_violations": r.new_violations, "fixed_violations": r.fixed_violations,
                          "dangerous": [c.name for c in r.changes if c.dangerous],
                          "pack_differences": r.pack_differences})
        entry["notes"] = r.notes
        stacks.append(entry)
    return {"version": JSON_VERSION, "command": "review", "base": base, "exit_status": status, "stacks": stacks}
