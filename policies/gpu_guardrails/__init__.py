"""gpu-cluster-guardrails: CrossGuard policies for GPU training clusters on AWS and Tencent Cloud.

`ALL_POLICIES` is the one list both `policies/__main__.py` (the pack `pulumi preview --policy-pack`
serves) and the offline runner (`gpu_cluster/policyrun.py`) use, so every rule has one implementation.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

from .budget import budget_alarm, budget_covers_estimate
from .compute import IMDS_TYPES, imdsv2_required, no_spot_only_critical, placement_required, rdma_enabled
from .network import dedicated_subnet, no_public_ip, no_public_ssh, single_zone
from .stack import STRICT_PROPERTY
from .storage import (STATEFUL_TYPES, checkpoint_bucket_private, snapshot_schedule, stateful_protected,
                      storage_encrypted)

PACK_NAME = "gpu-cluster-guardrails"
PACK_DESCRIPTION = ("Guardrails for GPU training clusters on AWS and Tencent Cloud: dedicated subnets, "
                    "on-demand capacity for critical clusters, packed placement with full RDMA, one zone, "
                    "no public addresses or admin ports, snapshots, encryption, private buckets, protected "
                    "state and budgets.")

ALL_POLICIES = [
    dedicated_subnet,
    no_spot_only_critical,
    single_zone,
    placement_required,
    rdma_enabled,
    snapshot_schedule,
    budget_alarm,
    budget_covers_estimate,
    no_public_ssh,
    no_public_ip,
    imdsv2_required,
    storage_encrypted,
    checkpoint_bucket_private,
    stateful_protected,
]


for _policy in ALL_POLICIES:  # every rule takes `strict` (docs/policies.md, "Unknowns")
    _policy.config_schema.properties.setdefault("strict", STRICT_PROPERTY)


def applies_to(policy: Any, config: Optional[Mapping[str, Any]] = None) -> Optional[frozenset]:
    """The resource types a resource policy can report on (None: any type), given its config.

    The engine calls every resource policy for every resource; a policy returns at once for a type it
    does not judge. The offline runner uses this to skip those calls (same verdicts, less work)."""
    if policy is imdsv2_required:
        return frozenset(IMDS_TYPES)
    if policy is stateful_protected:
        types = (config or {}).get("types")
        return frozenset(t for t in types if isinstance(t, str)) if types else frozenset(STATEFUL_TYPES)
    return None
