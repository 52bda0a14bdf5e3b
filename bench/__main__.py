"""`make bench`: render cost of the large tier at 1, 8, 64 and 256 nodes against the SDK's floor.

Each measurement is a fresh process (bench/child.py), repeated --runs times and interleaved; the
table gives medians. `render` is the time from handing the stack to the program until every
registration is done (imports excluded on every side); `process` is the whole process. Two floors
register the very same resources from our plan without our code: through the provider SDK's typed
classes (what every Pulumi program using the provider pays) and through the Pulumi SDK's generic
CustomResource (the engine protocol alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STACKS = ("aws-large", "tencent-large")
MODES = ("ours", "typed", "baseline")


def run_child(mode: str, stack: str, nodes: int, plan: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "bench.child", mode, stack, str(nodes), str(plan)], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(stack: str, nodes: int, runs: int, tmp: Path) -> dict:
    plan = tmp / f"{stack}-{nodes}.json"
    rows: dict[str, list[dict]] = {mode: [] for mode in MODES}
    for _ in range(runs):  # interleave so drift hits every side alike
        for mode in MODES:
            rows[mode].append(run_child(mode, stack, nodes, plan))
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("render_s", "total_s", "peak_rss_mib")}
           for m, rs in rows.items()}
    counts = {m: rs[0]["resources"] for m, rs in rows.items()}
    if len(set(counts.values())) != 1:
        raise SystemExit(f"{stack} × {nodes}: the floors registered a different resource count: {counts}")
    return {"stack": stack, "nodes": nodes, "resources": counts["ours"], **med}


def machine() -> str:
    mem = ""
    try:
        kb = int(next(line for line in open("/proc/meminfo") if line.startswith("MemTotal")).split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores{mem}, {platform.machine()}, Python {platform.python_version()}"


def table(results: list[dict]) -> str:
    lines = ["| stack | nodes | resources | ours render s | typed floor s | ours/typed | raw floor s | ours/raw | "
             "ours process s | ours peak RSS MiB | typed RSS MiB | raw RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        o, t, b = r["ours"], r["typed"], r["baseline"]
        lines.append(f"| {r['stack']} | {r['nodes']} | {r['resources']} | {o['render_s']:.2f} | {t['render_s']:.2f} | "
                     f"{o['render_s'] / t['render_s']:.2f} | {b['render_s']:.2f} | {o['render_s'] / b['render_s']:.2f} | "
                     f"{o['total_s']:.2f} | {o['peak_rss_mib']:.0f} | {t['peak_rss_mib']:.0f} | {b['peak_rss_mib']:.0f} |")
    return "\n".join(lines)


def growth(results: list[dict]) -> str:
    out = []
    for stack in STACKS:
        by = {r["nodes"]: r for r in results if r["stack"] == stack}
        if 64 in by and 256 in by:
            g = by[256]["ours"]["render_s"] / by[64]["ours"]["render_s"]
            gt = by[256]["typed"]["render_s"] / by[64]["typed"]["render_s"]
            gb = by[256]["baseline"]["render_s"] / by[64]["baseline"]["render_s"]
            res = by[256]["resources"] / by[64]["resources"]
            out.append(f"- {stack}: time(256)/time(64) = {g:.2f} (typed floor {gt:.2f}, raw floor {gb:.2f}; "
                       f"resources ×{res:.2f})")
    return "\n".join(out)


def time_make_plan() -> float:
    """`gpu-cluster plan` of every sample stack, one command (what `make plan` runs after setup; the stacks
    render in one worker process per core)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([sys.executable, "-m", "gpu_cluster", "plan", "--out", tmp], cwd=ROOT,
                              capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"gpu-cluster plan failed:\n{proc.stderr}")
    return time.perf_counter() - t0


def time_review(runs: int) -> dict:
    """`gpu-cluster review --base HEAD` of the sample stacks, warm (after one untimed run): the median
    wall time and how many cores its processes kept busy (their CPU time over the wall time)."""
    walls, cores = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(runs + 1):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "gpu_cluster", "review", "--base", "HEAD", "--out",
                                   f"{tmp}/review.md"], cwd=ROOT, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                raise SystemExit(f"gpu-cluster review failed:\n{proc.stderr}")
            if i:  # the first run only warms the page cache: BASE's worktree is a new folder each run
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                walls.append(wall)
                cores.append(cpu / wall)
    return {"wall_s": statistics.median(walls), "cores": statistics.median(cores)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,8,64,256")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--stacks", default=",".join(STACKS))
    parser.add_argument("--parts", default="render,plan,check,review",
                        help="what to measure (comma-separated): render, plan, check, review")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    out: dict = {"machine": machine(), "runs": args.runs}
    print(f"machine: {machine()}; {args.runs} runs per measurement, medians\n")
    if "render" in parts:
        sizes = [int(s) for s in args.sizes.split(",")]
        results = []
        with tempfile.TemporaryDirectory(prefix="gpu-cluster-bench-") as tmp:
            for stack in args.stacks.split(","):
                for n in sizes:
                    results.append(measure(stack, n, args.runs, Path(tmp)))
                    print(f"  measured {stack} × {n} nodes", file=sys.stderr, flush=True)
        out["results"] = results
        print(table(results))
        print("\ngrowth (ours):\n" + growth(results))
    if "plan" in parts:
        from gpu_cluster.render import SAMPLE_STACKS

        out["plan_s"] = time_make_plan()
        print(f"\ngpu-cluster plan, the {len(SAMPLE_STACKS)} sample stacks, one command, one worker per core: {out['plan_s']:.1f} s")
    if "check" in parts:
        from bench import check_speed

        out["check"] = check_speed.measure(runs=args.runs)
        print("\ngpu-cluster check of a synthetic export:\n" + check_speed.report(out["check"]))
    if "review" in parts:
        out["review"] = time_review(args.runs)
        print(f"\ngpu-cluster review --base HEAD, warm: {out['review']['wall_s']:.1f} s, "
              f"{out['review']['cores']:.2f} cores busy on average (target < 10 s, both cores)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
