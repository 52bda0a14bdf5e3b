"""One benchmark run in a fresh process; prints one JSON line (see bench/__main__.py).

    python -m bench.child ours <stack> <nodes> <plan-out.json>
    python -m bench.child baseline <stack> <nodes> <plan-in.json>

`ours` renders the stack through the real __main__.py (spec, catalog, components) at `nodes` nodes;
`baseline` registers the very same resources — types, names, inputs, parents, protect, taken from
the plan `ours` wrote — directly through the Pulumi SDK under the same mocks: the SDK's own floor.
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
from pulumi.runtime.sync_await import _sync_await  # noqa: E402


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ours(stack: str, nodes: int, plan_out: str) -> dict:
    import dataclasses

    from components import tiers
    from offline.render import StackFile, read_stack_file, render, stack_path

    # DESIGN §3 caps large at 64 nodes; the benchmark measures beyond it (256) on purpose.
    tiers.RULES["large"] = dataclasses.replace(tiers.RULES["large"], max_nodes=max(nodes, 64))
    base = read_stack_file(stack_path(stack))
    config = dict(base.config)
    config["gpu-cluster:cluster"] = {**config["gpu-cluster:cluster"], "nodes": nodes}
    t0 = time.perf_counter()
    rendered = render(StackFile(stack=stack, path=base.path, config=config))
    plan = rendered.plan()
    seconds = time.perf_counter() - t0
    with open(plan_out, "w", encoding="utf-8") as f:
        json.dump(plan, f)
    return {"render_s": seconds, "resources": len(rendered.registrations)}


def baseline(stack: str, nodes: int, plan_in: str) -> dict:
    from offline.mocks import GpuClusterMocks, RecordingMonitor

    with open(plan_in, encoding="utf-8") as f:
        resources = json.load(f)["deployment"]["resources"]
    todo = [r for r in resources if r["type"] != "pulumi:pulumi:Stack" and not r["type"].startswith("pulumi:providers:")]
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
            if r["custom"]:
                made[r["urn"]] = pulumi.CustomResource(r["type"], name, dict(r.get("inputs") or {}), opts)
            else:
                made[r["urn"]] = pulumi.ComponentResource(r["type"], name, None, opts)

    _sync_await(run_pulumi_func(program))
    return {"render_s": time.perf_counter() - t0, "resources": len(monitor.registrations)}


if __name__ == "__main__":
    mode, stack, nodes, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    result = (ours if mode == "ours" else baseline)(stack, nodes, path)
    result.update(mode=mode, stack=stack, nodes=nodes, total_s=time.perf_counter() - T_START,
                  peak_rss_mib=_peak_rss_mib())
    print(json.dumps(result))
