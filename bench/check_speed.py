"""How fast `gpu-cluster check` reads and judges a large export: prints resources per second.

Stand-alone: `venv/bin/python bench/check_speed.py [--resources 38000] [--runs 3]`. It builds a
synthetic `pulumi stack export` of about that many resources from the policy fixtures (the AWS and
Tencent baselines and every case file, each copy renamed so its URNs and ids are its own and its
references stay inside it), writes it to a temporary file and times

- `read`: `Plan.load` (JSON text to checked resources),
- `judge`: `run_policies` with every policy of the pack (the pricer left out: it is not the pack),
- `check`: the whole `gpu-cluster check FILE` command in a fresh process (interpreter start and
  imports included),

each the median of --runs runs. The target is 5,000 resources/s for read + judge (a 38,000-resource
export in under 10 s on a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))


def copies() -> list[dict]:
    """Every fixture as a stack export (baselines first)."""
    from policy_fixtures import BASELINES, FIXTURES, build, case_files

    docs = [json.loads((FIXTURES / b).read_text()) for b in BASELINES]
    docs += [build(json.loads(p.read_text())) for p in case_files()]
    return docs


def renamed(doc: dict, k: int) -> list[dict]:
    """The resources of `doc` (without its stack and providers) as copy number `k`: URNs and ids suffixed."""
    resources = [r for r in doc["deployment"]["resources"]
                 if r["type"] != "pulumi:pulumi:Stack" and not r["type"].startswith("pulumi:providers:")]
    ids = {r["id"] for r in resources if r.get("id")}
    urns = {r["urn"] for r in resources}
    text = json.dumps(resources)
    for value in sorted(ids | urns, key=len, reverse=True):
        text = text.replace(json.dumps(value), json.dumps(f"{value}-c{k}"))
    return json.loads(text)


def synthetic(target: int) -> dict:
    docs = copies()
    head = [r for r in docs[0]["deployment"]["resources"] if r["type"] == "pulumi:pulumi:Stack"]
    providers = {r["urn"]: r for d in docs for r in d["deployment"]["resources"] if r["type"].startswith("pulumi:providers:")}
    resources = head + list(providers.values())
    k = 0
    while len(resources) < target:
        for doc in docs:
            resources += renamed(doc, k)
            k += 1
            if len(resources) >= target:
                break
    return {"version": 3, "deployment": {"manifest": {"magic": "bench/check_speed.py"}, "resources": resources[:target]}}


def measure(resources: int = 38_000, runs: int = 3) -> dict:
    """Median seconds of read, judge and the whole `check` process on a synthetic export."""
    from gpu_cluster.plan import Plan
    from gpu_cluster.policyrun import run_policies

    doc = synthetic(resources)
    with tempfile.TemporaryDirectory(prefix="check-speed-") as tmp:
        path = Path(tmp) / "export.json"
        path.write_text(json.dumps(doc))
        size = path.stat().st_size
        reads, judges, checks, found = [], [], [], 0
        for _ in range(runs):
            t0 = time.perf_counter()
            plan = Plan.load(path)
            t1 = time.perf_counter()
            found = len(run_policies(plan, pricer=lambda p: None))
            t2 = time.perf_counter()
            reads.append(t1 - t0)
            judges.append(t2 - t1)
            t3 = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "gpu_cluster", "check", str(path)], cwd=ROOT,
                                  capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
            checks.append(time.perf_counter() - t3)
            if proc.returncode not in (0, 1):
                raise SystemExit(f"gpu-cluster check failed on the synthetic export:\n{proc.stderr}")
    read, judge, check = (statistics.median(x) for x in (reads, judges, checks))
    return {"resources": len(plan.resources), "mb": size / 1e6, "violations": found, "read_s": read,
            "judge_s": judge, "check_s": check}


def report(m: dict) -> str:
    n = m["resources"]
    return "\n".join([
        f"export: {n:,} resources, {m['mb']:.1f} MB; {m['violations']:,} violations found",
        f"read   {m['read_s']:6.2f} s   {n / m['read_s']:10,.0f} resources/s",
        f"judge  {m['judge_s']:6.2f} s   {n / m['judge_s']:10,.0f} resources/s",
        f"read + judge {m['read_s'] + m['judge_s']:6.2f} s   {n / (m['read_s'] + m['judge_s']):10,.0f} resources/s"
        f"   (target ≥ 5,000/s)",
        f"gpu-cluster check (whole process) {m['check_s']:6.2f} s   {n / m['check_s']:10,.0f} resources/s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resources", type=int, default=38_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(report(measure(args.resources, args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
