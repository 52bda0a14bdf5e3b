"""Every private symbol of the Pulumi SDKs this program uses, in one place, each with its reason.

The offline engine runs the real program under `pulumi.runtime.set_mocks`; a few things it needs have no
public API. Each is named here once, and tests/test_sdk_compat.py has a test per symbol, so an SDK
upgrade (the lock files pin pulumi and pulumi-policy) that moves one fails there, by name, rather than
somewhere in a render. Nothing else in the repository imports a private SDK name.
"""

from __future__ import annotations

import contextlib
from typing import Any, Awaitable, Callable, Iterator

from pulumi.runtime import resource as _resource
from pulumi.runtime.proto import source_pb2 as _source_pb2
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await
from pulumi_policy.policy import _NotApplicableError

NotApplicableError = _NotApplicableError
"""What pulumi-policy raises inside a policy that does not apply to the resource at hand (its
`ResourceValidationPolicy` type filter); the offline policy runner treats it as "no verdict", as the
pack's gRPC server does."""


def sync_await(awaitable: Awaitable[Any]) -> Any:
    """Run an awaitable to completion on the SDK's own event loop: a render's program and the Output
    futures it leaves (the SDK's `_sync_await`, which its mocks use the same way)."""
    return _sync_await(awaitable)


def ensure_event_loop() -> Any:
    """The SDK's event loop, made when there is none: the recording monitor's callbacks run on the mocks'
    threads and deserialize properties there (`_ensure_event_loop`)."""
    return _ensure_event_loop()


def pulumi_name(getter: Callable[..., Any]) -> str | None:
    """The camelCase name the SDK's `@pulumi.getter(name=...)` records on a generated property getter
    (`_pulumi_name`): how an Args class's Python names map to the provider's schema names."""
    return getattr(getter, "_pulumi_name", None)


SKIP_STACK_TRACES = True
"""Whether a render skips the call stack the SDK captures for every resource it registers. The SDK sends
it to the engine as the resource's source position (`pulumi.runtime.resource._get_stack_trace`), for
diagnostics; the mocks' monitor never reads it, and capturing it, source lines and file URIs included,
was measured at a seventh of a render's CPU (docs/benchmarks.md). tests/test_render.py asserts that a
plan is the same either way."""


@contextlib.contextmanager
def without_stack_traces() -> Iterator[None]:
    """While rendering, the SDK captures an empty stack trace: the one it sends itself when it finds no
    caller frame. The SDK's own function is back when the render ends (not thread-safe: renders run one
    at a time per process)."""
    real = getattr(_resource, "_get_stack_trace", None)
    if not SKIP_STACK_TRACES or real is None:
        yield
        return
    _resource._get_stack_trace = _source_pb2.StackTrace
    try:
        yield
    finally:
        _resource._get_stack_trace = real
