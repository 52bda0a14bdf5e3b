"""`gpu-cluster review --base REF`: a pull-request review of every stack, without cloud credentials.

Renders every stack file in stacks/ (the samples and the team's own) and every one changed or removed
since REF, or only the stacks named with `--stack`, with the code of REF and of the work tree (or the
pull request's checkout, `--head DIR`), prices and judges both sides with this program's pricer and
policy pack, and writes Markdown: resources added / changed / replaced / deleted, monthly cost before →
after, new and fixed policy violations. Exit 2 when a stack file no longer validates or renders in the
pull request (the review says "invalid stack file" and why), when REF is not a commit, or when the
review runs out of its --timeout; else 1 when the pull request adds a mandatory policy violation to any
stack; else 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("review", help="Markdown review of every stack between a git ref and the work tree",
                       description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--base", required=True, metavar="REF", help="git ref to compare against (e.g. origin/main)")
    p.add_argument("--stack", action="append", default=[], metavar="NAME",
                   help="review only this stack (repeatable; default: every sample stack and every stack file "
                        "changed since REF)")
    p.add_argument("--out", default="build/review.md", metavar="FILE", help="output file (default: build/review.md)")
    p.add_argument("--head", metavar="DIR", default=None,
                   help="the checkout to review (a pull request's), judged by this program's pricer and policy "
                        "pack; default: this program's own work tree")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                   help="wall-clock budget of the whole review; past it the review stops and exits 2 "
                        "(default: 900)")
    p.add_argument("--json", action="store_true", help="one JSON document on standard output (docs/cli-json.md)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpu_cluster.review import DEFAULT_BUDGET_S, review_command

    return review_command(args.base, Path(args.out), args.stack, head=Path(args.head) if args.head else None,
                          budget_s=DEFAULT_BUDGET_S if args.timeout is None else args.timeout, as_json=args.json)
