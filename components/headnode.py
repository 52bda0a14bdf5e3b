"""What both clouds' Slurm head nodes share (pure: no Pulumi): its address, its state disk, the first job.

The head node runs slurmctld; every GPU node reaches it by address (configless slurmd, `--conf-server
<address>:6817`, components/slurm/conf.py), and that address sits in every GPU node's boot config. So it
is fixed: a host address computed from the cluster subnet, the same for every head node the stack ever
makes. A replaced head node (a new image, a changed Slurm configuration) comes back at the same address
with the same state disk, and GPU nodes booted from older user data still find it.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from components.slurm import SlurmCluster

HEAD_HOST_OFFSET = 10
"""The head node is the subnet's host number 10 (10.40.0.10 in 10.40.0.0/17). Both clouds reserve only
addresses at a subnet's edges: AWS the first four and the last ("The first four IP addresses and the last
IP address in each subnet CIDR block are not available": VPC user guide, "Subnet CIDR blocks"); Tencent
hands out the one given if it "must be in the provided subnet and available" (provider doc instance
v1.82.42, private_ip) — which addresses Tencent keeps for itself is not published in any source we could
read, so host 10 is chosen well away from both edges. The GPU nodes are created after the head node, so
none of them can take the address first."""

HEAD_DATA_GB = 20
"""The head node's own persistent data disk at /data, holding slurmctld's StateSaveLocation (job and
node state: megabytes) and its logs' growth room. 20 GB is the smallest Enhanced SSD (CLOUD_HSSD) a CBS
disk can be (Cloud Block Storage documentation, "Cloud disk types": 20-32,000 GB,
intl.cloud.tencent.com/document/product/362/2353) and far above gp3's 1 GiB minimum, so both clouds use it."""

HEAD_INSTANCE_TYPES = {"aws": "m7i.large", "tencentcloud": "S5.LARGE8"}
"""The head node's shape per cloud: a small general-purpose CPU machine, on demand. slurmctld for up to
64 nodes needs a fraction of it (Slurm sizes the controller by job throughput, not node count).
AWS m7i.large: 2 vCPUs, 8 GiB, x86_64 like the GPU nodes' image family (EC2 instance types, "M7i":
aws.amazon.com/ec2/instance-types/m7i/). Tencent S5.LARGE8: Standard S5, 4 vCPUs, 8 GiB, sold in most
zones (CVM documentation, "Instance Types", Standard S5: intl.cloud.tencent.com/document/product/213/11518).
Not GPU shapes, so not in the GPU catalog (instances.yaml); their prices are rows of prices.yaml, and
`gpu-cluster prices fetch` asks for them too."""

ROLE_TAG = "gpu-cluster:role"
"""Tag naming what a machine is to the cluster: "head" on the head node (the pricer and the reader tell it
from the GPU nodes by it)."""
HEAD_ROLE = "head"

FIRST_JOB = "nccl-allreduce.sbatch"
"""The shipped job the README's first-job section submits (components/slurm/jobs.py)."""


def head_address(subnet_cidr: str) -> str:
    """The head node's fixed private address in the cluster subnet (HEAD_HOST_OFFSET)."""
    subnet = ipaddress.ip_network(subnet_cidr)
    if subnet.num_addresses < 2 * HEAD_HOST_OFFSET:
        raise ValueError(f"subnet {subnet_cidr} is too small for a head node at host {HEAD_HOST_OFFSET}; "
                         f"allowed: a /27 or larger")
    return str(subnet.network_address + HEAD_HOST_OFFSET)


def submit_command(c: "SlurmCluster") -> str:
    """How to submit the first shipped job once logged in on the head node."""
    return f"sudo sbatch {c.paths.jobs}/{FIRST_JOB}"
