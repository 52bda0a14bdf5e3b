"""One module per `gpu-cluster` subcommand; each defines `add_parser(subparsers)` and `run(args) -> int`.

`NAMES` is the order `gpu-cluster --help` lists them in. Command modules import their heavy
dependencies (Pulumi, the provider SDKs, cloud SDKs) inside `run`, so `--help` stays instant.
"""

NAMES = ("plan", "check", "review", "catalog", "prices", "recommend")
