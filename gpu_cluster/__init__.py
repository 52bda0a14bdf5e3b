"""The `gpu-cluster` command-line tool: renders stack files under mocks into plans, prices them,
runs the policy pack on them, reviews changes, and lists the catalog (docs/architecture.md)."""
