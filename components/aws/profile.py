"""AWS as the cloud-neutral code sees it (components/clouds.py): pure, no Pulumi import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from components import catalog
from components.clouds import CloudProfile
from components.lustre import lustre_capacity_ok, nearest_size

if TYPE_CHECKING:
    import pulumi

    from components.catalog import Shape
    from components.spec import Budget, Cluster, ClusterSpec, Lustre, Snapshots


class AwsProfile(CloudProfile):
    name = "aws"
    region_examples = ("us-east-1", "us-west-2")
    rdma_name = "EFA"
    capacity_types = ("none", "odcr", "capacity_block")
    snapshot_intervals = "dlm_interval_hours"

    def network_problems(self, spec: "ClusterSpec") -> list[str]:
        problems = []
        egress = spec.network.egress_mbps
        if egress is not None:
            problems.append(f"cluster.network.egress_mbps={egress}: AWS NAT gateways scale their bandwidth by "
                            f"themselves (up to 100 Gbps); allowed on aws: leave it out")
        if spec.network.flow_logs is not None:
            problems.append(f"cluster.network.flow_logs={spec.network.flow_logs}: an AWS cluster always logs its "
                            f"VPC's flows (CloudWatch Logs); allowed on aws: leave it out")
        return problems

    def lustre_problems(self, region: str, lustre: "Lustre") -> list[str]:
        problems = []
        cap, tput = lustre.capacity_gib, lustre.throughput_per_tib
        inc = catalog.limit("aws", "fsx_lustre_persistent2_capacity_gib")
        if not lustre_capacity_ok(cap, inc["first"], inc["step"]):
            problems.append(f"cluster.storage.lustre.capacity_gib={cap} is not an FSx for Lustre PERSISTENT_2 size; "
                            f"allowed: {', '.join(map(str, inc['first']))}, then steps of {inc['step']} "
                            f"(e.g. {nearest_size(cap, inc['first'], inc['step'])})")
        allowed = catalog.limit("aws", "fsx_lustre_persistent2_throughput_per_tib")
        if tput not in allowed:
            problems.append(f"cluster.storage.lustre.throughput_per_tib={tput} is not a PERSISTENT_2 throughput; "
                            f"allowed: {', '.join(map(str, allowed))} MB/s/TiB")
        return problems

    def min_lustre_gib(self) -> int:
        return catalog.limit("aws", "fsx_lustre_persistent2_capacity_gib")["first"][0]

    def snapshot_problems(self, snapshots: "Snapshots") -> list[str]:
        most = catalog.limit("aws", "dlm_retain_count_max")
        if snapshots.retain > most:
            return [f"cluster.snapshots.retain={snapshots.retain} exceeds AWS DLM's maximum; allowed: 1-{most}"]
        return []

    def budget_problems(self, budget: "Budget") -> list[str]:
        problems = []
        notifications = catalog.limit("aws", "budget_notifications_max")
        if len(budget.thresholds_pct) + 1 > notifications:
            problems.append(f"cluster.budget.thresholds_pct has {len(budget.thresholds_pct)} thresholds; AWS Budgets "
                            f"allows {notifications} notifications per budget, one of them the 100 % forecast: "
                            f"allowed: at most {notifications - 1}")
        subscribers = catalog.limit("aws", "budget_subscribers_max")
        if len(budget.emails) > subscribers:
            problems.append(f"cluster.budget.emails has {len(budget.emails)} addresses; AWS Budgets allows "
                            f"{subscribers} e-mail subscribers per notification: allowed: at most {subscribers} "
                            f"(use a mailing list)")
        return problems

    def lustre_size_at_least(self, tier_gib: int, throughput_per_tib: int, want_gib: float) -> int:
        inc = catalog.limit("aws", "fsx_lustre_persistent2_capacity_gib")
        sizes = list(inc["first"])
        while sizes[-1] < max(tier_gib, want_gib):
            sizes.append(sizes[-1] + inc["step"])
        return next(s for s in sizes if s >= max(tier_gib, want_gib))

    def default_zone(self, region: str) -> str:
        return f"{region}a"

    def capacity_block_regions(self, shape: "Shape") -> tuple[str, ...]:
        """From the catalog's capacity_block limits (EC2 user guide, "Capacity Blocks for ML")."""
        return tuple(catalog.limit("aws", "capacity_block")["offered"].get(shape.type, ()))

    def notes(self, spec: "ClusterSpec", shape: "Shape") -> list[str]:
        from components.aws import notes

        return notes.notes(spec, shape)

    def region_of_zone(self, zone: str) -> str:
        """us-east-1a → us-east-1: an availability zone is its region and one letter (EC2 user guide,
        "Regions and Zones")."""
        return zone[:-1]

    def build(self, cluster: "Cluster", opts: Optional["pulumi.ResourceOptions"] = None) -> Any:
        from components.aws.cluster import ClusterComponent

        return ClusterComponent(cluster.name, cluster, opts)


AWS = AwsProfile()
