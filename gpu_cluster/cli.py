"""`gpu-cluster`: plan, check and review GPU training clusters without a cloud account.

Exit statuses (the contract scripts rely on): 0 clean · 1 a mandatory policy violation · 2 bad input
or an unreadable file (printed as sentences, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional

from gpu_cluster import commands, ui
from gpu_cluster.errors import EXIT_BAD_INPUT, UserError

EPILOG = ("exit statuses: 0 clean, 1 a mandatory policy violation (recommend: no candidate fits), "
          "2 bad input or an unreadable file. Each command's code: gpu_cluster/commands/<command>.py")


def version() -> str:
    """The installed package's version (pyproject.toml), or "unknown" when run from a tree not installed."""
    from importlib import metadata

    try:
        return metadata.version("gpu-cluster")
    except metadata.PackageNotFoundError:
        return "unknown (not installed: run make venv)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpu-cluster", description=__doc__.splitlines()[0].split(": ", 1)[1],
                                     epilog=EPILOG)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands.NAMES:
        importlib.import_module(f"gpu_cluster.commands.{name}").add_parser(sub)
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except UserError as e:
        ui.error(str(e))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        ui.error("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
