"""`gpu-cluster review --base REF`: a pull-request review of every stack, without cloud credentials.

Renders each sample stack (and every stack file changed since REF), or only the stacks named with
`--stack`, with the code of REF and of the work tree, and writes Markdown: resources added / changed / replaced / deleted, monthly cost before
→ after, new and fixed policy violations. Exit 2 when a stack in the work tree could not be rendered
(the reason is in the review and on standard output) or REF is not a commit, else 1 when the work tree
adds a mandatory policy violation to any stack, else 0.
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
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpu_cluster.review import review_command

    return review_command(args.base, Path(args.out), args.stack)
