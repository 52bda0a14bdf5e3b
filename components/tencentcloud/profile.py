"""Tencent Cloud as the cloud-neutral code sees it (components/clouds.py): pure, no Pulumi import."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from components import catalog
from components.clouds import CloudProfile
from components.lustre import lustre_capacity_ok

if TYPE_CHECKING:
    import pulumi

    from components.catalog import Shape
    from components.spec import Cluster, ClusterSpec, Lustre, Network


def turbo_type(throughput_per_tib: int) -> Optional[str]:
    """CFS Turbo storage type (TB / TP) offering `throughput_per_tib`, or None."""
    for kind, row in catalog.limit("tencentcloud", "cfs_turbo").items():
        if row["throughput_per_tib"] == throughput_per_tib:
            return kind
    return None


class TencentCloudProfile(CloudProfile):
    name = "tencentcloud"
    region_examples = ("ap-shanghai", "ap-guangzhou")
    rdma_name = "RDMA"
    capacity_types = ("none", "prepaid")
    snapshot_intervals = "snapshot_interval_hours"

    def network_problems(self, spec: "ClusterSpec") -> list[str]:
        problems = []
        if spec.purchase != "on_demand" and spec.storage.scratch == "disk":
            problems.append(f"cluster.storage.scratch='disk' with purchase={spec.purchase} on tencentcloud: the "
                            f"provider deletes a data disk with its instance only for pay-as-you-go (POSTPAID_BY_HOUR) "
                            f"instances (resource_tc_instance.go), so a spot node's scratch disk would outlive it and "
                            f"keep costing; allowed: scratch: none, or purchase: on_demand")
        if spec.capacity.type == "prepaid" and spec.storage.scratch == "disk":
            problems.append("cluster.storage.scratch='disk' with capacity.type='prepaid': the provider deletes a data "
                            "disk with its instance only for pay-as-you-go instances (resource_tc_instance.go: "
                            "delete_with_instance), and a prepaid node goes to the recycle bin with its disks; allowed: "
                            "scratch: none or nvme")
        return problems

    def lustre_problems(self, region: str, lustre: "Lustre") -> list[str]:
        problems = []
        cap, tput = lustre.capacity_gib, lustre.throughput_per_tib
        turbo = catalog.limit("tencentcloud", "cfs_turbo")
        kind = turbo_type(tput)
        if kind is None:
            problems.append(f"cluster.storage.lustre.throughput_per_tib={tput} is not a CFS Turbo class; allowed: "
                            + ", ".join(f"{r['throughput_per_tib']} ({k})" for k, r in turbo.items()))
        else:
            row = turbo[kind]
            if not lustre_capacity_ok(cap, [], row["step_gib"], minimum=row["min_gib"]):
                problems.append(f"cluster.storage.lustre.capacity_gib={cap} is not a CFS Turbo {kind} size; allowed: "
                                f"{row['min_gib']} and up in steps of {row['step_gib']} GiB")
        if lustre.import_path:
            problems.append(f"cluster.storage.lustre.import_path={lustre.import_path!r}: data repository "
                            f"associations exist on AWS only; allowed on tencentcloud: null")
        turbo_regions = catalog.limit("tencentcloud", "cfs_turbo_regions")
        if region and region not in turbo_regions:
            problems.append(f"cluster.storage.lustre: CFS Turbo is not sold in tencentcloud:region={region!r}; "
                            f"allowed regions: {', '.join(turbo_regions)}")
        return problems

    def min_lustre_gib(self) -> int:
        return catalog.limit("tencentcloud", "cfs_turbo")["TB"]["min_gib"]

    def storage_problems(self, spec: "ClusterSpec", lustre: Optional["Lustre"]) -> list[str]:
        if lustre is not None and spec.scheduler == "slurm" and spec.image_id is not None:
            # On an own image the Slurm boot installs Ubuntu 24.04's packages (slurm_os); the CFS Turbo client installs
            # only on the default kernels of TencentOS Server 3.1/2.4/2.2, CentOS 7.2-7.9 and Ubuntu 16.04-20.04 (CFS
            # documentation, "Using CFS Turbo on Linux clients": intl.cloud.tencent.com/document/product/582/40298).
            return [f"cluster.storage.lustre with scheduler: slurm and cluster.image_id={spec.image_id} on "
                    "tencentcloud: on an own image the Slurm boot installs Ubuntu 24.04's packages, and Tencent's CFS "
                    "Turbo client does not install there (it supports the default kernels of TencentOS Server 3.1, "
                    "CentOS 7 and Ubuntu up to 20.04), so no node could mount /lustre and every node would be drained; "
                    "allowed: image_id: null (TencentOS, with OpenHPC's Slurm), storage.lustre: null with Slurm, or "
                    "scheduler: none with the file system"]
        if lustre is not None and spec.network.existing_subnet_id:
            return ["cluster.storage.lustre with cluster.network.existing_subnet_id on tencentcloud: CFS Turbo "
                    "needs its own CCN range beside the cluster's VPC, which is only known when the stack "
                    "creates the VPC; allowed: lustre: null, or no existing_subnet_id"]
        return []

    def stopping_saves(self, shape: "Shape") -> bool:
        """Tencent keeps charging a stopped instance that has local disks (CVM documentation, "No charges
        when shut down", intl.cloud.tencent.com/document/product/213/19918)."""
        return not shape.has_nvme

    def stop_problems(self, spec: "ClusterSpec", shape: "Shape") -> list[str]:
        if self.stopping_saves(shape):
            return []
        return [f"cluster.{key} on {shape.type}: Tencent Cloud keeps charging a stopped instance that has local disks "
                f"(CVM documentation, \"No charges when shut down\"), so stopping it saves nothing; allowed: a shape "
                f"without local NVMe, or leave {key} out"
                for key, on in (("schedule", spec.schedule is not None), ("idle_stop", spec.idle_stop is not None)) if on]

    def default_scheduler_note(self) -> str:
        return ("scheduler: slurm is the default on tencentcloud since December 2026 (it was none on the default image): "
                "a cluster deployed before, whose stack says nothing about scheduler, keeps nodes made without Slurm "
                "(their user data is kept, even by `pulumi up --replace`), which never join it, which the power agent "
                "does not stop on its own, and which its schedule and idle_stop, Slurm's now, no longer stop (the SCF "
                "function goes); set scheduler: none to keep such "
                "a cluster as it was, or recreate its nodes (`pulumi destroy --target <node urn> --target-dependents`, "
                "then `pulumi up`: docs/clouds.md)")

    def slurm_os(self, spec: "ClusterSpec") -> str:
        """The default image, TencentOS Server 3.1, gets Slurm from OpenHPC 2 (components/slurm/oses.py); a stack's
        own image_id is an Ubuntu 24.04 image with the NVIDIA driver (README, "Your own image")."""
        return "el8-openhpc" if spec.image_id is None else "ubuntu-24.04"

    def filled_network(self, network: "Network") -> "Network":
        if network.egress_mbps is None:
            network = network.model_copy(update={"egress_mbps": catalog.limit("tencentcloud", "egress_mbps")["default"]})
        if network.flow_logs is None:
            network = network.model_copy(update={"flow_logs": False})
        return network

    def lustre_regions(self) -> Optional[tuple[str, ...]]:
        return tuple(catalog.limit("tencentcloud", "cfs_turbo_regions"))

    def lustre_size_at_least(self, tier_gib: int, throughput_per_tib: int, want_gib: float) -> int:
        row = catalog.limit("tencentcloud", "cfs_turbo")[turbo_type(throughput_per_tib)]
        size = max(tier_gib, row["min_gib"])
        while size < want_gib:
            size += row["step_gib"]
        return size

    def default_zone(self, region: str) -> str:
        return f"{region}-5"

    def notes(self, spec: "ClusterSpec", shape: "Shape") -> list[str]:
        from components.tencentcloud import notes

        return notes.notes(spec, shape)

    def region_of_zone(self, zone: str) -> str:
        """ap-shanghai-5 → ap-shanghai: a zone is its region and a number (CVM documentation, "Regions and
        Availability Zones")."""
        return zone.rsplit("-", 1)[0]

    def build(self, cluster: "Cluster", opts: Optional["pulumi.ResourceOptions"] = None) -> Any:
        from components.tencentcloud.cluster import ClusterComponent

        return ClusterComponent(cluster.name, cluster, opts)


TENCENTCLOUD = TencentCloudProfile()
