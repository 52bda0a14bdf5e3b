"""Slurm on every cluster: configuration, boot scripts, health checks and shipped jobs.

Pure Python (no Pulumi): the cloud components call these generators and put the results into
user data. The API:

  SlurmCluster(...)                         the one input object (components.slurm.conf)
  from_spec(cluster, head_address, munge_secret_id) -> SlurmCluster   from a validated stack
  slurm_conf(c), gres_conf(c), cgroup_conf(c)
  head_boot_config(c, lustre=, data_disk=, disk_model=) -> cloudinit.BootConfig
  node_boot_parts(c, node_index=None) -> BootParts; with_slurm(node_boot, parts) -> BootConfig
  jobs(c) -> {file name: content}           the shipped sbatch jobs
  fabric(cloud, instance_type) -> Fabric    expected NVLink / fabric manager / NCCL figures
"""

from components.slurm.boot import BootParts, all_scripts, head_boot_config, node_boot_parts, with_slurm
from components.slurm.conf import Paths, SlurmCluster, cgroup_conf, from_spec, gres_conf, slurm_conf
from components.slurm.fabric import Fabric, fabric
from components.slurm.jobs import jobs

__all__ = ["BootParts", "Fabric", "Paths", "SlurmCluster", "all_scripts", "cgroup_conf", "fabric",
           "from_spec", "gres_conf", "head_boot_config", "jobs", "node_boot_parts", "slurm_conf", "with_slurm"]
