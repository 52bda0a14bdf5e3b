"""gpu-cluster-guardrails: CrossGuard policies for GPU training clusters on AWS and Tencent Cloud.

`ALL_POLICIES` is the one list both `policies/__main__.py` (the pack `pulumi preview --policy-pack`
serves) and the offline runner (`offline/policyrun.py`) use, so every rule has one implementation.
"""

from __future__ import annotations

from .budget import budget_alarm, budget_covers_estimate
from .compute import imdsv2_required, no_spot_only_critical, placement_required, rdma_enabled
from .network import dedicated_subnet, no_public_ssh, single_zone
from .storage import checkpoint_bucket_private, snapshot_schedule, stateful_protected, storage_encrypted

PACK_NAME = "gpu-cluster-guardrails"
PACK_DESCRIPTION = ("Guardrails for GPU training clusters on AWS and Tencent Cloud: dedicated subnets, "
                    "on-demand capacity for critical clusters, packed placement with full RDMA, one zone, "
                    "snapshots, encryption, private buckets, protected state and budgets.")

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
    imdsv2_required,
    storage_encrypted,
    checkpoint_bucket_private,
    stateful_protected,
]
