"""GPU instance families and their RDMA interfaces, kept in the pack so it runs standalone.

The pack runs inside `pulumi preview --policy-pack policies` in its own virtualenv, without the
project's `components` package, so it carries this small table itself. Sources: AWS EC2 user guide
"Elastic Fabric Adapter — supported instance types" (efa-acc-inst-types) and
intl.cloud.tencent.com/document/product/560/19701 (GPU instance families); see
components/catalog/instances.yaml for the full rows. Unknown families are treated as non-GPU.
"""

from __future__ import annotations

from typing import Optional

# AWS GPU families (the part of the instance type before the dot).
AWS_GPU_FAMILIES = frozenset({
    "g3", "g3s", "g4dn", "g4ad", "g5", "g5g", "g6", "g6e", "g6f", "gr6", "gr6f",
    "p2", "p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200",
})

# EFA interfaces (network cards) per AWS type; each must carry an `efa` or `efa-only` interface
# for NCCL to use the full fabric. p6-* rows: 8 cards, from the EFA guide (unconfirmed here).
AWS_EFA_INTERFACES = {
    "p5.48xlarge": 32, "p5e.48xlarge": 32, "p5en.48xlarge": 16,
    "p4d.24xlarge": 4, "p4de.24xlarge": 4,
    "p6-b200.48xlarge": 8,
    "p3dn.24xlarge": 1,
    "g4dn.8xlarge": 1, "g4dn.12xlarge": 1, "g4dn.16xlarge": 1, "g4dn.metal": 1,
    "g5.8xlarge": 1, "g5.12xlarge": 1, "g5.16xlarge": 1, "g5.24xlarge": 1, "g5.48xlarge": 1,
    "g6.8xlarge": 1, "g6.12xlarge": 1, "g6.16xlarge": 1, "g6.24xlarge": 1, "g6.48xlarge": 1,
    "g6e.8xlarge": 1, "g6e.12xlarge": 1, "g6e.16xlarge": 1, "g6e.24xlarge": 1, "g6e.48xlarge": 2,
}

# Tencent GPU families (the part of the instance type before the dot). HCC families are bare-metal
# shapes whose RDMA network exists only inside an HPC cluster (`hpcClusterId`).
TENCENT_GPU_PREFIXES = ("GN", "GT", "GI", "GNV", "PNV", "HCCPNV", "HCCG")


def family(instance_type: Optional[str]) -> str:
    return instance_type.split(".", 1)[0] if isinstance(instance_type, str) else ""


def is_gpu_type(instance_type: Optional[str]) -> bool:
    fam = family(instance_type)
    if not fam:
        return False
    if fam in AWS_GPU_FAMILIES:
        return True
    return fam.startswith(TENCENT_GPU_PREFIXES) and fam[:1].isupper()


def is_tencent_hcc(instance_type: Optional[str]) -> bool:
    """A Tencent HCC (RDMA) shape: it must run in an HPC cluster to get its RDMA network."""
    return family(instance_type).startswith("HCC")


def efa_interfaces(instance_type: Optional[str], overrides: Optional[dict] = None) -> int:
    """EFA interfaces an AWS type offers (0: none); `overrides` (type → count) comes from policy config."""
    if not isinstance(instance_type, str):
        return 0
    if overrides and instance_type in overrides:
        try:
            return int(float(overrides[instance_type]))
        except (TypeError, ValueError):
            return 0
    return AWS_EFA_INTERFACES.get(instance_type, 0)
