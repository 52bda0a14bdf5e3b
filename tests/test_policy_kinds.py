"""The policy pack's one table of capacity kinds and its generated list of subnet inputs, against the SDKs.

Every property path the pack reads through `kinds.KINDS` must exist in the locked SDK's own classes
(pulumi-aws, tencentcloud-iac-pulumi; pulumi-aws-native for the aws-native types, a test-only
dependency), `placements.py` must be what the SDKs generate today, and every kind must have a failing and
a passing fixture.
"""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from gpu_cluster import sdkschema
from gpu_cluster.policyrun import POLICIES  # noqa: F401  (puts policies/ on sys.path)
from gpu_guardrails import kinds, placements
from policy_fixtures import FIXTURES, case_files


def kind_paths(kind: kinds.Kind) -> list[str]:
    """Every path a kind names, relative to the resource."""
    fields = [*kind.instance_types, *kind.requirements, *kind.count, *kind.runs, *kind.subnets, *kind.enis,
              *kind.zones, *kind.public, *kind.public_bandwidth, *kind.ipv6]
    fields += [p for p in (kind.charge, kind.hpc, kind.stopped[0]) if p]
    if kind.each:
        fields = [f"{kind.each}.{p}" for p in fields] + [kind.each]
    return fields + list(kind.tags)


PATHS = [(k.token, p) for k in kinds.KINDS.values() for p in kind_paths(k)]


@pytest.mark.parametrize("token, path", PATHS, ids=[f"{t.split(':')[-1]}:{p}" for t, p in PATHS])
def test_every_path_of_the_kinds_table_exists_in_the_sdk(token, path):
    assert sdkschema.path_exists(token, path) is None, sdkschema.path_exists(token, path)


def test_the_path_check_refuses_what_the_sdk_does_not_have():
    assert sdkschema.path_exists("aws:ec2/instance:Instance", "ec2SshKey") is not None
    assert sdkschema.path_exists("aws:ec2/instance:Instance", "subnetId[]") is not None  # not a list
    assert sdkschema.path_exists("aws:autoscaling/group:Group",
                                 "mixedInstancesPolicy.launchTemplate.overrides[].instanceRequirements."
                                 "acceleratorManufacturers[]") is None
    assert sdkschema.path_exists("aws:autoscaling/group:Group", "mixedInstancesPolicy.nope") is not None
    assert sdkschema.path_exists("aws:nope/nope:Nope", "x") is not None


def test_placements_is_what_the_sdks_generate():
    assert sdkschema.GENERATED.read_text(encoding="utf-8") == sdkschema.placements_source(), \
        "run `make policy-coverage` and review the difference"


def test_the_reviewed_lists_name_types_of_the_generated_list():
    generated = set(placements.SUBNET_INPUTS)
    assert kinds.PLUMBING <= generated, sorted(kinds.PLUMBING - generated)
    assert kinds.CLUSTER_MEMBERS <= generated, sorted(kinds.CLUSTER_MEMBERS - generated)
    assert not kinds.PLUMBING & kinds.CLUSTER_MEMBERS
    # Every capacity kind that names a subnet is in the generated list with the same paths or more.
    for kind in kinds.KINDS.values():
        if kind.token.startswith("aws-native:"):
            continue  # not a locked provider: its types are not in the generated list
        paths = set(placements.SUBNET_INPUTS.get(kind.token, ()))
        own = {f"{kind.each}.{p}" if kind.each else p for p in kind.subnets}
        assert own <= paths, (kind.token, sorted(own - paths))


@lru_cache(maxsize=None)
def _fixture_types() -> dict[str, set[str]]:
    """type token → {"fail", "pass"}: the kinds each fixture adds, by whether it expects violations on them."""
    seen: dict[str, set[str]] = {}
    for path in case_files():
        case = json.loads(path.read_text())
        names_with_violations = {name for _, name in case["expect"]}
        for add in case.get("add", []):
            verdict = "fail" if add["name"] in names_with_violations else "pass"
            seen.setdefault(add["type"], set()).add(verdict)
    for base in ("aws-baseline.json", "tencent-baseline.json"):
        for r in json.loads((FIXTURES / base).read_text())["deployment"]["resources"]:
            seen.setdefault(r["type"], set()).add("pass")
    return seen


@pytest.mark.parametrize("token", sorted(kinds.KINDS))
def test_every_capacity_kind_has_a_failing_and_a_passing_fixture(token):
    assert _fixture_types().get(token, set()) >= {"fail", "pass"}, token


def test_the_generated_docs_are_current():
    from gpu_cluster import policydocs

    assert policydocs.POLICIES_DOC.read_text(encoding="utf-8") == policydocs.policies_doc(), "make policy-coverage"
    assert policydocs.COVERAGE_DOC.read_text(encoding="utf-8") == policydocs.coverage_doc(), "make policy-coverage"


# ---- every property the pack reads, as the fixtures exercise it, exists in the SDK -----------------------

class _Recorded(dict):
    """A resource's properties that note every key read and found, as a schema path ("a.b[].c")."""

    def __init__(self, data: dict, token: str, prefix: str, seen: set):
        super().__init__(data)
        self._token, self._prefix, self._seen = token, prefix, seen

    def _wrap(self, key: str, value):
        path = f"{self._prefix}{key}"
        self._seen.add((self._token, path))
        if key in ("tags", "tagsAll", "instanceTags") or path.endswith((".tags", "policy")):
            return value  # a map of user keys, or a JSON document: no schema below
        return _wrapped(value, self._token, path, self._seen)

    def __getitem__(self, key):
        return self._wrap(key, super().__getitem__(key))

    def get(self, key, default=None):
        return self._wrap(key, super().__getitem__(key)) if key in self else default


class _RecordedList(list):
    def __init__(self, data: list, token: str, path: str, seen: set):
        super().__init__(data)
        self._token, self._path, self._seen = token, path, seen

    def __getitem__(self, i):
        return _wrapped(super().__getitem__(i), self._token, f"{self._path}[]", self._seen)


def _wrapped(value, token: str, path: str, seen: set):
    if isinstance(value, dict):
        return _Recorded(value, token, path + ".", seen)
    if isinstance(value, list):
        return _RecordedList(value, token, path, seen)
    return value


def test_every_property_the_pack_reads_on_the_fixtures_exists_in_the_sdk(monkeypatch):
    """The pack's rules and the fixtures could agree on a property name no provider emits (an `ec2SshKey`
    the real resource never has) and every test would pass: every key a rule reads and finds, on every
    fixture, must be a property (or nested field) of that type in the locked SDK."""
    from gpu_cluster import policyrun
    from policy_fixtures import judged_violations, load

    seen: set = set()
    stacked, analyzed = policyrun._Converted.stacked, policyrun._Converted.analyzed
    monkeypatch.setattr(policyrun._Converted, "stacked",
                        lambda self, res: _Recorded(stacked(self, res), res.type, "", seen))
    monkeypatch.setattr(policyrun._Converted, "analyzed",
                        lambda self, res: _Recorded(analyzed(self, res), res.type, "", seen))
    for path in case_files():
        plan, config, _ = load(path)
        judged_violations(plan, config)
    checked, wrong = 0, []
    for token, path in sorted(seen):
        if token.split(":", 1)[0] not in sdkschema.PACKAGES or path == "id":
            continue  # another provider's type, or the runner's physical id (not a schema property)
        checked += 1
        why = sdkschema.path_exists(token, path)
        if why is not None:
            wrong.append(why)
    assert checked > 300
    assert not wrong, "\n".join(sorted(set(wrong)))
