"""Offline commands: `python -m offline plan|check|review` (DESIGN §5, §6).

Exit status: 0 clean · 1 a mandatory policy violation · 2 bad input (printed as sentences, never a
traceback).
"""

from __future__ import annotations

import argparse
import sys

from offline import cli


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m offline", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="render, price and check stacks; write build/plans/<stack>.json")
    p.add_argument("--stack", action="append", default=[], help="sample stack name (repeatable); default: all six")
    p.add_argument("--stack-file", action="append", default=[], help="path to any Pulumi.<stack>.yaml")
    p.add_argument("--out", default="build/plans", help="output folder (default: build/plans)")
    p.add_argument("--policy-config", help="policy-config JSON file (Pulumi's format)")

    c = sub.add_parser("check", help="run the policy pack on a plan or `pulumi stack export` file")
    c.add_argument("plan", help="plan / stack-export JSON file")
    c.add_argument("--policy-config", help="policy-config JSON file (Pulumi's format)")

    r = sub.add_parser("review", help="Markdown review of every stack between a base ref and the work tree")
    r.add_argument("--base", required=True, help="git ref to compare against (e.g. origin/main, HEAD~1)")
    r.add_argument("--out", default="build/review.md", help="output file (default: build/review.md)")

    args = parser.parse_args(argv)
    return cli.COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
