"""What shared code asks a cloud: one profile per cloud package, behind one interface.

The cloud-neutral code (components/spec.py validates and fills in a stack's cluster, components/cluster.py
builds it, the catalog names regions) asks `profile(cloud)` and never branches on the cloud's name. Each
cloud package defines its profile in components/<cloud>/profile.py: what its cloud refuses in a spec,
what it fills in, what the plan must say aloud, and how its cluster is built. Profiles are pure (no
Pulumi import) so a stack file is validated before any SDK loads; `build` imports the cloud's SDK only
when it is called. Adding a cloud: docs/architecture.md, "Add a cloud".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    import pulumi

    from components.catalog import Cloud, Shape
    from components.spec import Budget, Cluster, ClusterSpec, Lustre, Network, Snapshots


OFFLINE_RENDER_ENV = "GPU_CLUSTER_OFFLINE_RENDER"
"""Set by the offline engine (gpu_cluster/render.py) while it renders a stack under mocks: a component
that would write a file for the provider to read (the Tencent function's code package) writes nothing
then, and passes the path it would use."""


class CloudProfile:
    """The interface. A method's default is what a cloud without that rule does."""

    name: "Cloud"
    region_examples: tuple[str, ...]
    """Regions named in messages as examples (`aws:region: us-east-1`), the first one alone."""
    rdma_name: str
    """What the cloud calls a GPU node's RDMA network interfaces (EFA, RDMA)."""
    capacity_types: tuple[str, ...]
    """capacity.type values the cloud sells (spec.Capacity)."""
    snapshot_intervals: str
    """The catalog limit listing the snapshot intervals its snapshot service takes."""

    # ---- validating a spec: each list of problems is inserted where load_spec always put it ----------
    def network_problems(self, spec: "ClusterSpec") -> list[str]:
        """Network and purchase settings the cloud refuses."""
        return []

    def lustre_problems(self, region: str, lustre: "Lustre") -> list[str]:
        """The parallel file system's size, class and region."""
        raise NotImplementedError

    def min_lustre_gib(self) -> int:
        """The smallest parallel file system the cloud sells (a size left out in a tier without a default)."""
        raise NotImplementedError

    def snapshot_problems(self, snapshots: "Snapshots") -> list[str]:
        return []

    def budget_problems(self, budget: "Budget") -> list[str]:
        return []

    def storage_problems(self, spec: "ClusterSpec", lustre: Optional["Lustre"]) -> list[str]:
        """Combinations of storage and network the cloud cannot build."""
        return []

    def stop_problems(self, spec: "ClusterSpec", shape: "Shape") -> list[str]:
        """Stopping nodes that would save nothing (schedule, idle_stop)."""
        return []

    # ---- filling in defaults ------------------------------------------------------------------------
    def stopping_saves(self, shape: "Shape") -> bool:
        """Whether a stopped node of this shape stops costing (an idle stop is offered by default only then)."""
        return True

    def slurm_os(self, spec: "ClusterSpec") -> str:
        """The operating system the Slurm boot installs on (components/slurm/oses.py): the head node runs the GPU
        nodes' image family."""
        return "ubuntu-24.04"

    @property
    def slurm_power_saving(self) -> bool:
        """Whether Slurm starts and stops this cloud's GPU nodes itself (power saving: idle_stop and run windows
        under Slurm, and the replacement of a failed node): wherever the boot has the commands for it
        (components/slurm/clouds.py CloudOps.instance_start), the one place that says so."""
        from components.slurm.clouds import ops

        return ops(self.name).instance_start is not None

    def default_scheduler_note(self) -> str:
        """A note for a stack that leaves `scheduler` to its default ("" for none)."""
        return ""

    def filled_network(self, network: "Network") -> "Network":
        return network

    # ---- sizing a cluster for a workload (gpu_cluster/recommend.py) ---------------------------------
    def lustre_regions(self) -> Optional[tuple[str, ...]]:
        """Regions that sell the parallel file system; None: every region of the cloud."""
        return None

    def lustre_size_at_least(self, tier_gib: int, throughput_per_tib: int, want_gib: float) -> int:
        """The smallest valid file-system size that is at least the tier's and `want_gib`."""
        raise NotImplementedError

    def default_zone(self, region: str) -> str:
        """A zone of `region` to place a shape whose zones the catalog does not record."""
        raise NotImplementedError

    def capacity_block_regions(self, shape: "Shape") -> tuple[str, ...]:
        """Regions that sell `shape` in capacity blocks (EC2 Capacity Blocks for ML); () when none."""
        return ()

    # ---- what the plan says, where things are, building ---------------------------------------------
    def notes(self, spec: "ClusterSpec", shape: "Shape") -> list[str]:
        """What the cloud makes of a filled-in spec, said aloud."""
        raise NotImplementedError

    def region_of_zone(self, zone: str) -> str:
        raise NotImplementedError

    def build(self, cluster: "Cluster", opts: Optional["pulumi.ResourceOptions"] = None) -> Any:
        """The cloud's cluster component for `cluster` (imports the cloud's SDK); its `exports` are the
        stack outputs."""
        raise NotImplementedError


def profile(cloud: str) -> CloudProfile:
    """The profile of `cloud` (imported on first use: the profiles import components.spec's models)."""
    from components.aws.profile import AWS
    from components.tencentcloud.profile import TENCENTCLOUD

    profiles = {p.name: p for p in (AWS, TENCENTCLOUD)}
    try:
        return profiles[cloud]
    except KeyError:
        raise ValueError(f"no cloud profile for {cloud!r}; clouds: {', '.join(profiles)}") from None
