"""One test per private SDK symbol gpu_cluster/sdk_compat.py uses: an SDK upgrade that moves or changes
one fails here, by name. And no other module of the program imports a private SDK name."""

from __future__ import annotations

import asyncio
import inspect
import re

from gpu_cluster import sdk_compat
from gpu_cluster.stackfile import ROOT


def test_sync_await_runs_an_awaitable_on_the_sdks_loop():
    async def answer():
        await asyncio.sleep(0)
        return 42

    assert sdk_compat.sync_await(answer()) == 42


def test_ensure_event_loop_gives_a_usable_loop():
    loop = sdk_compat.ensure_event_loop()
    assert isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_closed()
    assert sdk_compat.ensure_event_loop() is loop


def test_not_applicable_error_is_what_pulumi_policy_raises_for_a_policy_that_does_not_apply():
    import pulumi_policy.policy as policy

    assert issubclass(sdk_compat.NotApplicableError, Exception)
    assert "raise _NotApplicableError" in inspect.getsource(policy), "the SDK still raises it"


def test_pulumi_name_reads_the_schema_name_of_a_generated_getter():
    import pulumi_aws as aws

    assert sdk_compat.pulumi_name(aws.ec2.InstanceMetadataOptionsArgs.http_put_response_hop_limit.fget) == \
        "httpPutResponseHopLimit"
    assert sdk_compat.pulumi_name(lambda: None) is None


def test_the_stack_trace_capture_is_swapped_only_while_rendering_and_restored():
    import pulumi.runtime.resource as sdk

    real = sdk._get_stack_trace
    assert (real.__module__, real.__name__) == ("pulumi.runtime.resource", "_get_stack_trace")
    assert not inspect.signature(real).parameters, "called with no arguments, as the swap assumes"
    with sdk_compat.without_stack_traces():
        assert sdk._get_stack_trace is not real and sdk._get_stack_trace().ByteSize() == 0
    assert sdk._get_stack_trace is real


def test_no_other_module_imports_a_private_sdk_name():
    private = re.compile(r"^\s*from (pulumi[\w.]*|pulumi_policy[\w.]*|pulumi_aws[\w.]*|tencentcloud_iac_pulumi[\w.]*) "
                         r"import .*\b_[a-z]\w*|\._(sync_await|ensure_event_loop|get_stack_trace|pulumi_name)\b|"
                         r"_NotApplicableError", re.M)
    offenders = []
    for folder in ("gpu_cluster", "components", "policies", "bench"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "sdk_compat.py" or "venv" in path.parts:
                continue
            if private.search(path.read_text(encoding="utf-8")):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
