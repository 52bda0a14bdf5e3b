"""Render a stack file to a plan: the real `__main__.py` under recording mocks (docs/architecture.md).

The plan is a Pulumi stack export (`{"version": 3, "deployment": {...}}`), so everything that reads
plans — the policy runner, the pricer, the review — works on `pulumi stack export` files too.
"""

from __future__ import annotations

import contextlib
import datetime
import heapq
import json
import logging
import os
import runpy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pulumi
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.stack import run_pulumi_func

from components.spec import Cluster
from gpu_cluster import contracts
from gpu_cluster.engine import GpuClusterMocks, RecordingMonitor, Registration, resolve
from gpu_cluster.sdk_compat import ensure_event_loop, sync_await, without_stack_traces
# The stack file, read and validated without the SDKs (re-exported: the commands and tests use them here).
from gpu_cluster.stackfile import (CLUSTER_KEY, OUR_KEYS, PROJECT, ROOT, SAMPLE_STACKS, STACK_NAME,  # noqa: F401
                                   STACKS_DIR, StackFile, StackFileError, read_stack_file, stack_name_of,
                                   stack_path, validate)

MAIN = ROOT / "__main__.py"

# The program's pulumi.log messages are the cluster's notes, which the commands print themselves.
_QUIET = logging.getLogger("gpu-cluster.offline.engine")
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False

def _provider_versions() -> dict[str, str]:
    """Provider plugin versions the default providers carry: the installed SDKs' own versions (the lock
    files pin them; tests/test_contracts.py holds them equal to the versions the contracts were read from)."""
    from gpu_cluster import contracts

    from components.catalog import CLOUDS

    return {c: contracts.installed_sdk_version(c) or contracts.sdk(c)[1] for c in CLOUDS}


_PROVIDER_VERSIONS = _provider_versions()


@dataclass
class Rendered:
    stack: str
    cluster: Cluster
    registrations: list[Registration]
    outputs: dict[str, Any]
    component_outputs: dict[str, dict[str, Any]]
    invokes: list[tuple[str, dict]] = field(default_factory=list)
    """Every function the program called, with its arguments."""

    def plan(self) -> dict[str, Any]:
        """The stack-export document."""
        return to_stack_export(self)

    def ignore_changes(self) -> dict[str, list[str]]:
        """URN → the properties the program registers with ignore_changes (which `pulumi up` leaves as
        they were created). A stack export has no place for them, so the report carries them. By URN:
        the order resources register in varies between runs (the SDK resolves their inputs as they come)."""
        return dict(sorted((r.urn, sorted(r.ignore_changes)) for r in self.registrations
                           if r.custom and r.ignore_changes))


def _config_strings(config: Mapping[str, Any]) -> dict[str, str]:
    """Config as the engine hands it to a program: objects as JSON, scalars as strings."""
    out = {}
    for key, value in config.items():
        if isinstance(value, (dict, list)):
            out[key] = json.dumps(value)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


@contextlib.contextmanager
def _offline():
    """While the program renders under the mocks, components write no file (OFFLINE_RENDER_ENV)."""
    from components.clouds import OFFLINE_RENDER_ENV

    before = os.environ.get(OFFLINE_RENDER_ENV)
    os.environ[OFFLINE_RENDER_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OFFLINE_RENDER_ENV, None)
        else:
            os.environ[OFFLINE_RENDER_ENV] = before


def _unretrieved_quietly(loop: Any, context: dict) -> None:
    """A failed render leaves Outputs whose futures hold the exception nobody awaits; asyncio would print each with
    its traceback when it is collected ("Future exception was never retrieved"), after the caller has already said
    in one sentence what failed. Those are dropped; anything else goes to asyncio's own handler."""
    if str(context.get("message", "")).startswith("Future exception was never retrieved"):
        return
    loop.default_exception_handler(context)


def render(stack_file: StackFile, program: Path = MAIN) -> Rendered:
    """Run `program` under the recording mocks with the stack file's config."""
    cluster = validate(stack_file)
    mocks = GpuClusterMocks()
    monitor = RecordingMonitor(mocks)
    pulumi_settings.reset_options(project=PROJECT, stack=stack_file.stack, preview=False)
    pulumi.runtime.set_all_config(_config_strings(stack_file.config), [])
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack_file.stack, preview=False,
                             monitor=monitor, logger=_QUIET)
    ensure_event_loop().set_exception_handler(_unretrieved_quietly)
    with without_stack_traces(), _offline():
        sync_await(run_pulumi_func(lambda: runpy.run_path(str(program), run_name="__main__")))
    problems = list(mocks.problems)
    for reg in monitor.registrations:
        if reg.custom and not reg.type.startswith("pulumi:providers:"):
            problems += contracts.check_resource(reg.type, reg.name, reg.inputs, reg.delete_before_replace)
    if problems:
        raise contracts.ContractError(problems)
    root = pulumi_settings.get_root_resource()
    outputs = {k: resolve(v) for k, v in getattr(root, "outputs", {}).items()}
    return Rendered(stack=stack_file.stack, cluster=cluster, registrations=monitor.registrations,
                    outputs=outputs, component_outputs=monitor.component_outputs, invokes=mocks.invokes)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, pulumi.Resource):
        return f"<resource {type(value).__name__}>"
    return str(value)


def _stable_order(registrations: list[Registration]) -> list[Registration]:
    """Parents and dependencies first (as in a real export), ties by URN: the same plan every render.

    The engine sees registrations in the order their inputs resolve, which varies between runs.
    """
    by_urn = {r.urn: r for r in registrations}
    needs = {r.urn: {u for u in (r.parent, *r.dependencies) if u in by_urn} for r in registrations}
    users: dict[str, list[str]] = {u: [] for u in by_urn}
    for urn, deps in needs.items():
        for dep in deps:
            users[dep].append(urn)
    ready = [u for u, deps in needs.items() if not deps]
    heapq.heapify(ready)
    out: list[Registration] = []
    while ready:
        urn = heapq.heappop(ready)
        out.append(by_urn[urn])
        for user in users[urn]:
            needs[user].discard(urn)
            if not needs[user]:
                heapq.heappush(ready, user)
    return out


def to_stack_export(rendered: Rendered) -> dict[str, Any]:
    """The plan in `pulumi stack export` format (version 3), with default providers made explicit."""
    stack, project = rendered.stack, PROJECT
    stack_urn = f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"
    resources: list[dict[str, Any]] = [{
        "urn": stack_urn, "custom": False, "type": "pulumi:pulumi:Stack",
        "outputs": _jsonable(rendered.outputs),
    }]
    providers: dict[str, str] = {}
    region = rendered.cluster.region
    for reg in _stable_order(rendered.registrations):
        package = reg.type.split(":", 1)[0]
        provider_ref = reg.provider
        if reg.custom and not provider_ref and package in _PROVIDER_VERSIONS:
            if package not in providers:
                version = _PROVIDER_VERSIONS[package]
                urn = f"urn:pulumi:{stack}::{project}::pulumi:providers:{package}::default_{version.replace('.', '_')}"
                pid = f"{package}-default-provider"
                providers[package] = f"{urn}::{pid}"
                resources.append({
                    "urn": urn, "custom": True, "id": pid, "type": f"pulumi:providers:{package}",
                    "inputs": {"region": region, "version": version},
                    "outputs": {"region": region, "version": version},
                })
            provider_ref = providers[package]
        entry: dict[str, Any] = {
            "urn": reg.urn,
            "custom": reg.custom,
            "type": reg.type,
            "inputs": _jsonable(reg.inputs),
            "outputs": _jsonable(reg.outputs if reg.custom else rendered.component_outputs.get(reg.urn, {})),
            "parent": reg.parent or stack_urn,
            "protect": reg.protect,
            # The SDK gathers dependencies in sets, whose order changes with each process's hash seed.
            "dependencies": sorted(reg.dependencies),
        }
        if reg.retain_on_delete:  # as `pulumi stack export` writes it (omitted when false)
            entry["retainOnDelete"] = True
        if reg.property_dependencies:
            entry["propertyDependencies"] = {k: sorted(v) for k, v in sorted(reg.property_dependencies.items())}
        if reg.custom:
            entry["id"] = reg.id
            entry["provider"] = provider_ref
        resources.append(entry)
    return {
        "version": 3,
        "deployment": {
            "manifest": {
                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "magic": "gpu-cluster-offline",
                "version": f"pulumi {pulumi.__version__ if hasattr(pulumi, '__version__') else '3'} (mocks)",
            },
            "resources": resources,
        },
    }
