"""One benchmark run in a fresh process; prints one JSON line (see bench/__main__.py).

    python -m bench.child ours <stack> <nodes> <plan-out.json>
    python -m bench.child baseline <stack> <nodes> <plan-in.json>
    python -m bench.child typed <stack> <nodes> <plan-in.json>

`ours` renders the stack through the real __main__.py (spec, catalog, components) at `nodes` nodes.
The floors register the very same resources — types, names, inputs, parents, protect, dependencies,
taken from the plan `ours` wrote — under the same mocks, without our components, spec or catalog:
`baseline` through the Pulumi SDK's generic `CustomResource` (the engine-protocol floor), `typed`
through the provider SDK's own resource classes (`pulumi_aws.ec2.Instance`, …), which is what any
Pulumi program that uses the provider pays.
Imports happen before the clock starts on every side; `total_s` is the whole process.
"""

from __future__ import annotations

import json
import resource
import sys
import time

T_START = time.perf_counter()

import pulumi  # noqa: E402
from pulumi.runtime import settings as pulumi_settings  # noqa: E402
from pulumi.runtime.stack import run_pulumi_func  # noqa: E402
from gpu_cluster.sdk_compat import sync_await  # noqa: E402


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _provider_class(token: str):
    """`aws:cloudwatch/metricAlarm:MetricAlarm` → pulumi_aws.cloudwatch.MetricAlarm (same for Tencent)."""
    import importlib

    package, module_path, cls = token.split(":")
    module = module_path.split("/")[0].lower()
    root = {"aws": "pulumi_aws", "tencentcloud": "tencentcloud_iac_pulumi"}[package]
    return getattr(importlib.import_module(f"{root}.{module}"), cls)


def _snake(name: str) -> str:
    import re

    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _snake_keys(value):
    if isinstance(value, dict):
        return {_snake(k): _snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake_keys(v) for v in value]
    return value


def _import_provider_modules(cloud: str) -> None:
    """Import what the floors import before their clock: our components and the provider submodules
    they use (the provider SDKs load submodules lazily, on first attribute access)."""
    import importlib
    import re
    from pathlib import Path

    root = {"aws": "pulumi_aws", "tencentcloud": "tencentcloud_iac_pulumi"}[cloud]
    alias = {"aws": "aws", "tencentcloud": "tencentcloud"}[cloud]
    package = Path(__file__).resolve().parent.parent / "components" / cloud
    used = set()
    for source in package.glob("*.py"):
        importlib.import_module(f"components.{cloud}.{source.stem}")
        used |= set(re.findall(rf"\b{alias}\.([a-z_0-9]+)\.", source.read_text(encoding="utf-8")))
    for module in sorted(used):
        try:
            loaded = importlib.import_module(f"{root}.{module}")
        except ModuleNotFoundError:  # a match inside a string (e.g. "…aws.amazon.com")
            continue
        hasattr(loaded, "__all__")  # the SDKs' lazy modules load on first attribute access


def ours(stack: str, nodes: int, plan_out: str) -> dict:
    import dataclasses

    import components.cluster  # noqa: F401  (imports before the clock, as for the floors)
    from components import tiers
    from gpu_cluster.render import StackFile, read_stack_file, render, stack_path

    cloud = "aws" if stack.startswith("aws") else "tencentcloud"
    _import_provider_modules(cloud)

    # The spec caps large at 64 nodes (components/tiers.py); the benchmark measures beyond it (256) on purpose.
    tiers.RULES["large"] = dataclasses.replace(tiers.RULES["large"], max_nodes=max(nodes, 64))
    base = read_stack_file(stack_path(stack))
    config = dict(base.config)
    config["gpu-cluster:cluster"] = {**config["gpu-cluster:cluster"], "nodes": nodes}
    t0 = time.perf_counter()
    rendered = render(StackFile(stack=stack, path=base.path, config=config))
    seconds = time.perf_counter() - t0
    t1 = time.perf_counter()
    plan = rendered.plan()
    export_s = time.perf_counter() - t1
    with open(plan_out, "w", encoding="utf-8") as f:
        json.dump(plan, f)
    return {"render_s": seconds, "export_s": export_s, "resources": len(rendered.registrations)}


def baseline(stack: str, nodes: int, plan_in: str, typed: bool = False) -> dict:
    from gpu_cluster.engine import GpuClusterMocks, RecordingMonitor
    from gpu_cluster.sdk_compat import without_stack_traces

    with open(plan_in, encoding="utf-8") as f:
        resources = json.load(f)["deployment"]["resources"]
    todo = [r for r in resources if r["type"] != "pulumi:pulumi:Stack" and not r["type"].startswith("pulumi:providers:")]
    classes = {r["type"]: _provider_class(r["type"]) for r in todo if typed and r["custom"]}
    t0 = time.perf_counter()
    mocks = GpuClusterMocks()
    monitor = RecordingMonitor(mocks)
    pulumi_settings.reset_options(project="gpu-cluster", stack=stack, preview=False)
    pulumi.runtime.set_mocks(mocks, project="gpu-cluster", stack=stack, preview=False, monitor=monitor)

    def program() -> None:
        made: dict[str, pulumi.Resource] = {}
        for r in todo:
            opts = pulumi.ResourceOptions(parent=made.get(r.get("parent", "")), protect=r.get("protect", False),
                                          depends_on=[made[d] for d in r.get("dependencies", []) if d in made])
            name = r["urn"].rsplit("::", 1)[-1]
            if r["custom"] and typed:
                made[r["urn"]] = classes[r["type"]](name, opts=opts, **_snake_keys(r.get("inputs") or {}))
            elif r["custom"]:
                made[r["urn"]] = pulumi.CustomResource(r["type"], name, dict(r.get("inputs") or {}), opts)
            else:
                made[r["urn"]] = pulumi.ComponentResource(r["type"], name, None, opts)

    with without_stack_traces():  # as a render does (gpu_cluster.sdk_compat.SKIP_STACK_TRACES)
        sync_await(run_pulumi_func(program))
    return {"render_s": time.perf_counter() - t0, "resources": len(monitor.registrations)}


if __name__ == "__main__":
    mode, stack, nodes, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    if mode == "ours":
        result = ours(stack, nodes, path)
    else:
        result = baseline(stack, nodes, path, typed=mode == "typed")
    result.update(mode=mode, stack=stack, nodes=nodes, total_s=time.perf_counter() - T_START,
                  peak_rss_mib=_peak_rss_mib())
    print(json.dumps(result))
